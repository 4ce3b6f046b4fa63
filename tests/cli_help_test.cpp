// The command line's conventions (issue 18): every command answers --help with every option and its
// default (exit 0), --version names the release, `models` lists every model's inputs and outputs,
// --flag=value reads like --flag value, and the README's command list matches the commands' help.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cli/flags.hpp"
#include "error_of.hpp"
#include "host_tools.hpp"
#include "meganeura/version.h"
#include "models/registry.hpp"

namespace mn::test {
namespace {

std::string meganeura(const std::string& args, int* status) {
    return run_command(cli_binary() + " " + args, status);
}

// The command names in `meganeura --help`'s list.
std::vector<std::string> command_names() {
    int status = -1;
    std::istringstream in(meganeura("--help", &status));
    EXPECT_EQ(status, 0);
    std::vector<std::string> names;
    bool listing = false;
    for (std::string line; std::getline(in, line);) {
        if (line == "commands:") listing = true;
        else if (line.empty()) listing = false;
        else if (listing) names.push_back(line.substr(2, line.find(' ', 2) - 2));
    }
    return names;
}

// The options (without "--") that `meganeura <command> --help` lists, -h/--help aside.
std::vector<std::string> help_options(const std::string& help) {
    std::vector<std::string> options;
    const std::regex option_line("^  --([a-z0-9-]+)");
    std::istringstream in(help);
    for (std::string line; std::getline(in, line);)
        if (std::smatch m; std::regex_search(line, m, option_line)) options.push_back(m[1]);
    return options;
}

TEST(CliHelp, EveryCommandAnswersHelpWithItsOptions) {
    const std::vector<std::string> names = command_names();
    ASSERT_GE(names.size(), 7u);
    for (const std::string& name : names) {
        SCOPED_TRACE(name);
        int status = -1;
        const std::string help = meganeura(name + " --help", &status);
        EXPECT_EQ(status, 0) << help;
        EXPECT_EQ(help.rfind("usage: meganeura " + name, 0), 0u) << help;
        EXPECT_NE(help.find("-h, --help"), std::string::npos) << help;
        EXPECT_EQ(meganeura(name + " -h", &status), help);
        EXPECT_EQ(meganeura("help " + name, &status), help);
        // The help lists exactly the options the parser accepts (the unknown-option error names them).
        const std::string out = meganeura(name + " --no-such-option", &status);
        EXPECT_EQ(status, 1) << out;
        const std::string marker = "unknown option --no-such-option; options:";
        const size_t at = out.find(marker);
        ASSERT_NE(at, std::string::npos) << out;
        std::string accepted;
        for (const std::string& option : help_options(help)) accepted += " --" + option;
        EXPECT_EQ(out.substr(at + marker.size()), (accepted.empty() ? " none" : accepted) + "\n");
    }
}

TEST(CliHelp, DefaultsAreShown) {
    int status = -1;
    const std::string help = meganeura("train --help", &status);
    EXPECT_EQ(status, 0);
    EXPECT_NE(help.find("--epochs N              passes over the training set (default: 2)"), std::string::npos) << help;
    EXPECT_NE(help.find("(default: fashion-mnist.safetensors)"), std::string::npos) << help;
    EXPECT_NE(help.find("  --force "), std::string::npos) << help;  // a switch takes no value
}

TEST(CliHelp, VersionAndUsage) {
    int status = -1;
    const std::string version = meganeura("--version", &status);
    EXPECT_EQ(version.substr(0, version.find('\n') + 1), std::string("meganeura ") + MEGANEURA_VERSION + "\n");
    // and the commit it was built from (cmake/build_commit.cmake)
    EXPECT_TRUE(std::regex_match(version.substr(version.find('\n') + 1), std::regex("commit ([0-9a-f]{40}(-dirty)?|unknown)\n")))
        << version;
    EXPECT_EQ(status, 0);
    const std::string usage = meganeura("", &status);
    EXPECT_EQ(status, 1);
    EXPECT_NE(usage.find("usage: meganeura <command>"), std::string::npos) << usage;
    EXPECT_NE(meganeura("trian", &status).find("unknown command 'trian'"), std::string::npos);
    EXPECT_EQ(status, 1);
}

// `meganeura models` shows each model's inputs and outputs with the shapes and dtypes its graph has.
TEST(CliHelp, ModelsListsEveryModelsInputsAndOutputs) {
    for (const std::string size : {"full", "tiny"}) {
        int status = -1;
        const std::string out = meganeura("models --size=" + size, &status);
        ASSERT_EQ(status, 0) << out;
        for (const models::ModelEntry& e : models::model_table()) {
            SCOPED_TRACE(e.name + " " + size);
            const models::BuiltModel m = e.build({.size = size});
            const size_t at = out.find(e.name + ": ");
            ASSERT_NE(at, std::string::npos) << out;
            for (const std::string& input : m.inputs) {
                const Node& n = m.graph->node(*m.graph->find(input));
                const std::string line = "input  " + input + " " + shape_str(n.shape) + " " + dtype_name(n.dtype);
                EXPECT_NE(out.find(line, at), std::string::npos) << line << " not in:\n" << out;
            }
            EXPECT_NE(out.find("output " + m.output_name + " " + shape_str(m.output.shape()), at), std::string::npos);
        }
    }
}

// `devices` says what precision fast multiplies on and why, MEGANEURA_COOP included; a wrong MEGANEURA_COOP is an error
// before anything is listed.
TEST(CliHelp, DevicesSayWhatPrecisionFastMultipliesOn) {
    int status = -1;
    const std::string binary = cli_binary() + " devices";
    EXPECT_NE(run_command(binary, &status).find("  precision fast: "), std::string::npos);
    EXPECT_EQ(status, 0);
    EXPECT_NE(run_command("MEGANEURA_COOP=off " + binary, &status).find("  precision fast: the f32 kernels (MEGANEURA_COOP=off)\n"),
              std::string::npos);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(run_command("MEGANEURA_COOP=bad " + binary, &status),
              "meganeura devices: error: MEGANEURA_COOP must be nv, khr or off, got 'bad'\n");
    EXPECT_EQ(status, 1);
}

// The README's Commands section has one item per command, naming every option of its --help.
TEST(CliHelp, ReadmeCommandListMatchesHelp) {
    std::ifstream file(source_dir() + "/README.md");
    std::stringstream text;
    text << file.rdbuf();
    const std::string readme = text.str();
    const size_t section = readme.find("## Commands"), end = readme.find("\n## ", section + 1);
    ASSERT_NE(section, std::string::npos);
    const std::string commands = readme.substr(section, end - section);
    for (const std::string& name : command_names()) {
        SCOPED_TRACE(name);
        const size_t item = commands.find("- `meganeura " + name);
        ASSERT_NE(item, std::string::npos) << "README.md lists no `meganeura " << name << "`";
        const std::string entry = commands.substr(item, commands.find("\n- ", item + 1) - item);
        int status = -1;
        for (const std::string& option : help_options(meganeura(name + " --help", &status)))
            EXPECT_NE(entry.find("--" + option), std::string::npos) << "README.md's " << name << " lacks --" << option;
    }
}

TEST(CliFlags, EqualsFormReadsLikeASeparateValue) {
    const std::vector<cli::Option> options = {
        {"lr", "1e-3", "LR", ""}, {"name", "", "S", ""}, {"force", "false", "", ""}};
    const cli::Flags a({"--lr=0.5", "--name=a=b", "word"}, options);
    EXPECT_EQ(a.real("lr"), 0.5);
    EXPECT_EQ(a.str("name"), "a=b");
    EXPECT_EQ(a.positional(), std::vector<std::string>{"word"});
    EXPECT_FALSE(a.on("force"));
    EXPECT_TRUE(cli::Flags({"--force"}, options).on("force"));
    EXPECT_TRUE(cli::Flags({"--force=true"}, options).on("force"));
    EXPECT_FALSE(cli::Flags({"--force", "--force=false"}, options).on("force"));
    EXPECT_EQ(cli::Flags({"--name="}, options).str("name"), "");
    EXPECT_EQ(error_of([&] { cli::Flags({"--force=yes"}, options); }),
              "option --force is a switch: --force=true or --force=false");
    EXPECT_EQ(error_of([&] { cli::Flags({"--lr"}, options); }), "option --lr needs a value");
    EXPECT_EQ(error_of([&] { cli::Flags({"--rate=1"}, options); }), "unknown option --rate; options: --lr --name --force");
    EXPECT_EQ(error_of([&] { cli::Flags({}, options).required("name"); }), "option --name is required");
    EXPECT_EQ(error_of([&] { cli::Flags({"--name=c"}, options).choice("name", {"a", "b"}); }),
              "option --name is 'c', expected one of a, b");
}

}  // namespace
}  // namespace mn::test
