// The `meganeura` command: a table of subcommands. `meganeura --help` lists them, `meganeura <command>
// --help` prints the command's options with their defaults; errors print one line and exit 1.
#include <cstdio>
#include <exception>
#include <string_view>

#include "cli/commands.hpp"
#include "meganeura/error.hpp"
#include "meganeura/version.h"

namespace {

using mn::cli::Command;

const Command* const kCommands[] = {
    &mn::cli::devices_command, &mn::cli::models_command,   &mn::cli::train_command, &mn::cli::eval_command,
    &mn::cli::forward_command, &mn::cli::generate_command, &mn::cli::bench_command, &mn::cli::tokenize_command,
    &mn::cli::finetune_command, &mn::cli::shaders_command,
};

int usage(FILE* out) {
    std::fprintf(out, "usage: meganeura <command> [options]\n       meganeura <command> --help (or meganeura help <command>)\n"
                      "       meganeura --version\n\ncommands:\n");
    for (const Command* c : kCommands) std::fprintf(out, "  %-10s %s\n", c->name.c_str(), c->summary.c_str());
    std::fprintf(out, "\nenvironment: MEGANEURA_DEVICE, MEGANEURA_VALIDATE, MEGANEURA_TRACE, MEGANEURA_DEBUG, "
                      "MEGANEURA_PIPELINE_STATISTICS, MEGANEURA_DUMP, MEGANEURA_CHECK, MEGANEURA_CHECK_REPLICAS, MEGANEURA_MPI_PLUGIN, MEGANEURA_CACHE_DIR, MEGANEURA_DATA_DIR (README.md)\n");
    return out == stdout ? 0 : 1;
}

const Command* find_command(std::string_view name) {
    for (const Command* c : kCommands)
        if (c->name == name) return c;
    return nullptr;
}

int unknown_command(const char* name) {
    std::fprintf(stderr, "meganeura: unknown command '%s'; run meganeura --help for the list\n", name);
    return 1;
}

bool asks_for_help(const mn::cli::Args& args) {
    for (const auto& a : args)
        if (a == "-h" || a == "--help") return true;
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage(stderr);
    const std::string_view name = argv[1];
    if (name == "help" && argc == 3) {  // `meganeura help train` reads like `meganeura train --help`
        const Command* c = find_command(argv[2]);
        if (!c) return unknown_command(argv[2]);
        std::fputs(mn::cli::help_text(*c).c_str(), stdout);
        return 0;
    }
    if (name == "-h" || name == "--help" || name == "help") return usage(stdout);
    if (name == "--version" || name == "version") {
        std::printf("meganeura %s\ncommit %s\n", MEGANEURA_VERSION, mn::cli::build_commit());
        return 0;
    }
    const Command* c = find_command(name);
    if (!c) return unknown_command(argv[1]);
    const mn::cli::Args args(argv + 2, argv + argc);
    if (asks_for_help(args)) {
        std::fputs(mn::cli::help_text(*c).c_str(), stdout);
        return 0;
    }
    try {
        return c->run(mn::cli::Flags(args, c->options));
    } catch (const mn::Error& e) {
        std::fprintf(stderr, "meganeura %s: error: %s\n", c->name.c_str(), e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "meganeura %s: internal error: %s\n", c->name.c_str(), e.what());
        return 3;
    }
}
