// Every bad input through the `meganeura` command, as a user would give it (issue 17): each ends
// with exit status 1 and one line naming the file, the field and the value, never a crash, a NaN
// with status 0, or the internal-error status 3; and nothing the user had is lost.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "host_tools.hpp"
#include "io/safetensors.hpp"
#include "temp_dir.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

class CliErrorsTest : public ::testing::Test {
protected:
    // Runs `meganeura <args>` in the temporary folder; the status, and the output in `output_`.
    int run(const std::string& args) {
        output_ = run_command("cd '" + dir_.dir().string() + "' && " + cli_binary() + " " + args, &status_);
        return status_;
    }
    // Expects status 1 and `part` in the one error line of the output.
    void expect_user_error(const std::string& args, const std::string& part) {
        SCOPED_TRACE(args);
        EXPECT_EQ(run(args), 1) << output_;
        EXPECT_NE(error_line().find(part), std::string::npos) << "\"" << part << "\" is not in: " << output_;
    }
    // The line "meganeura <command>: error: ..." (stderr, so it may come before stdout's lines).
    std::string error_line() const {
        std::istringstream in(output_);
        std::vector<std::string> errors;
        for (std::string line; std::getline(in, line);)
            if (line.rfind("meganeura ", 0) == 0 && line.find(": error: ") != std::string::npos) errors.push_back(line);
        EXPECT_EQ(errors.size(), 1u) << output_;
        return errors.empty() ? "" : errors[0];
    }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_.path(name), std::ios::binary) << text;
        return dir_.path(name);
    }
    std::string safetensors_with_header(const std::string& name, const std::string& header) {
        std::string bytes(8, '\0');
        for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(header.size()) >> (8 * i));
        return write(name, bytes + header);
    }
    std::string bytes_of(const std::string& name) const {
        std::stringstream s;
        s << std::ifstream(dir_.path(name), std::ios::binary).rdbuf();
        return s.str();
    }
    // A small Fashion-MNIST: `count` random 28x28 training images and 16 test images, labels 0..9.
    void write_dataset(uint32_t count) {
        std::mt19937 rng(1);
        auto idx = [&](const std::string& name, std::vector<uint32_t> shape, uint32_t values, uint32_t limit) {
            std::string bytes = {0, 0, 8, char(shape.size())};
            for (uint32_t d : shape)
                for (int shift : {24, 16, 8, 0}) bytes += char(d >> shift);
            for (uint32_t i = 0; i < values; ++i) bytes += char(rng() % limit);
            gzFile file = gzopen(dir_.path("data/" + name).c_str(), "wb");
            ASSERT_NE(file, nullptr);
            ASSERT_EQ(gzwrite(file, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
            gzclose(file);
        };
        fs::create_directories(dir_.path("data"));
        for (const auto& [prefix, n] : {std::pair<std::string, uint32_t>{"train", count}, {"t10k", 16}}) {
            idx(prefix + "-images-idx3-ubyte.gz", {n, 28, 28}, n * 784, 256);
            idx(prefix + "-labels-idx1-ubyte.gz", {n}, n, 10);
        }
    }

    TempDir dir_{"cli"};
    std::string output_;
    int status_ = 0;
};

// Flags were read with stod/stoll: "--batch 1e3" trained with batch 1, an overflowing one was an
// internal error, "--lr nan" trained to an all-NaN checkpoint with status 0.
TEST_F(CliErrorsTest, NumbersInFlagsAreParsedWholeAndInRange) {
    expect_user_error("train fashion-mnist --batch 1e3", "option --batch needs an integer, got '1e3'");
    expect_user_error("train fashion-mnist --batch 99999999999999999999",
                      "option --batch is 99999999999999999999, expected from 1 to 2147483647");
    expect_user_error("train fashion-mnist --epochs 0", "option --epochs is 0, expected from 1");
    expect_user_error("train fashion-mnist --lr nan", "option --lr needs a number, got 'nan'");
    expect_user_error("train fashion-mnist --lr inf", "option --lr is inf, expected at least 0");
    expect_user_error("train fashion-mnist --lr 1e999", "option --lr is 1e999, expected at least 0");
    expect_user_error("train fashion-mnist --seed -1", "option --seed is -1, expected at least 0");
    expect_user_error("generate --tokens 1 --max-new 5x", "option --max-new needs an integer, got '5x'");
    expect_user_error("generate --size tiny --tokens 1 --precision medium", "option --precision is 'medium', expected one of strict, fast");
}

// --distributed where the MPI plugin is missing (a build without MPI, or a machine without libmpi): one
// line saying what to install, status 1, before anything is read or written.
TEST_F(CliErrorsTest, DistributedWithoutMpiSaysWhatIsMissing) {
    setenv("MEGANEURA_MPI_PLUGIN", "/nowhere/libmeganeura_mpi.so", 1);
    expect_user_error("train fashion-mnist --distributed --checkpoint c.safetensors",
                      "--distributed needs MPI: no libmeganeura_mpi.so at /nowhere/libmeganeura_mpi.so (build meganeura "
                      "where CMake finds MPI: apt-get install libopenmpi-dev openmpi-bin");
    unsetenv("MEGANEURA_MPI_PLUGIN");
    EXPECT_FALSE(fs::exists(dir_.dir() / "c.safetensors"));
    expect_user_error("train fashion-mnist --bucket-mb 4 --checkpoint c.safetensors", "--bucket-mb is for --distributed");
    expect_user_error("train fashion-mnist --distributed --bucket-mb 0 --checkpoint c.safetensors", "option --bucket-mb");
    EXPECT_FALSE(fs::exists(dir_.dir() / "c.safetensors"));
}

// num_attention_heads 0 divided by zero (SIGFPE); 64.7 became 64; 2^31 ended in bad_alloc after
// tens of seconds; a folder as --config was an internal error.
TEST_F(CliErrorsTest, ConfigValuesAreValidatedBeforeUse) {
    const std::string base = "generate --size tiny --tokens 1 --config ";
    write("heads0.json", R"({"model_type": "llama", "num_attention_heads": 0})");
    expect_user_error(base + "heads0.json", "config heads0.json: num_attention_heads is 0, expected an integer from 1");
    write("fraction.json", R"({"model_type": "llama", "hidden_size": 64.7})");
    expect_user_error(base + "fraction.json", "config fraction.json: hidden_size is 64.7, expected an integer");
    write("wide.json", R"({"model_type": "llama", "hidden_size": 2147483648})");
    expect_user_error(base + "wide.json", "config wide.json: hidden_size is 2147483648, expected an integer from 1 to 2147483647");
    write("indivisible.json", R"({"model_type": "llama", "hidden_size": 100, "num_attention_heads": 3})");
    expect_user_error(base + "indivisible.json", "hidden_size 100 is not a multiple of num_attention_heads 3");
    write("theta.json", R"({"model_type": "llama", "rope_theta": -1})");
    expect_user_error(base + "theta.json", "config theta.json: rope_theta is -1, expected a finite number above 0");
    write("huge.json", R"({"model_type": "llama", "hidden_size": 2147418112, "num_attention_heads": 32768, "num_key_value_heads": 1})");
    expect_user_error(base + "huge.json", "smollm2: the parameters and inputs need ");
    EXPECT_NE(output_.find("GiB, the device"), std::string::npos) << output_;
    write("overflow.json", R"({"model_type": "llama", "hidden_size": 1e999})");
    expect_user_error(base + "overflow.json", "config overflow.json: not valid JSON");
    fs::create_directory(dir_.path("folder.json"));
    expect_user_error(base + "folder.json", "config folder.json: not a regular file");
    write("list.json", "[1, 2]");
    expect_user_error(base + "list.json", "config list.json: the top level is array, expected an object");
    write("whisper.json", R"({"d_model": 384, "encoder_attention_heads": 0})");
    io::write_safetensors(dir_.path("none.safetensors"), {});
    expect_user_error("forward --model whisper --config whisper.json --inputs none.safetensors --out y",
                      "config whisper.json: encoder_attention_heads is 0");
}

// A header nested 50,000 deep crashed eval, forward, train --resume and generate.
TEST_F(CliErrorsTest, NestedJsonInAHeaderIsAnError) {
    safetensors_with_header("deep.safetensors", "{\"__metadata__\": {\"a\": " + std::string(50000, '[') +
                                                    std::string(50000, ']') + "}}");
    expect_user_error("forward --model mlp --inputs deep.safetensors --out out.safetensors",
                      "deep.safetensors: header: JSON nested deeper than 64 levels");
    expect_user_error("generate --size tiny --tokens 1 --weights deep.safetensors", "JSON nested deeper than 64 levels");
}

// Labels 10 (of 10 classes) and -1, and ids past the vocabulary, gave NaN with status 0; -100 is
// torch's ignore index (the row counts for nothing).
TEST_F(CliErrorsTest, IdsAndLabelsAreRangeChecked) {
    auto inputs = [&](const std::vector<int32_t>& labels) {
        io::write_safetensors(dir_.path("in.safetensors"),
                              {{"images", io::TensorData::from_f32({2, 784}, std::vector<float>(2 * 784, 0.5f))},
                               {"labels", io::TensorData::from_i32({2}, labels)}});
    };
    const std::string forward = "forward --model mlp --inputs in.safetensors --out out.safetensors";
    for (const int32_t bad : {10, -1, -99}) {
        inputs({3, bad});
        expect_user_error(forward, "input 'labels': value " + std::to_string(bad) +
                                       " at index 1 is outside [0, 10), the classes of the loss (-100 is ignored)");
    }
    EXPECT_FALSE(fs::exists(dir_.path("out.safetensors")));
    inputs({-100, 9});
    EXPECT_EQ(run(forward), 0) << output_;

    io::write_safetensors(dir_.path("ids.safetensors"), {{"input_ids", io::TensorData::from_i32({1, 2}, {1, 97})},
                                                         {"labels", io::TensorData::from_i32({1, 2}, {1, 2})}});
    expect_user_error("forward --model smollm2 --inputs ids.safetensors --out out.safetensors",
                      "input 'input_ids': value 97 at index 1 is outside [0, 97), the rows of the embedding table");
    // a causal LM's labels are checked through the shift inside the model
    io::write_safetensors(dir_.path("ids.safetensors"), {{"input_ids", io::TensorData::from_i32({1, 2}, {1, 2})},
                                                         {"labels", io::TensorData::from_i32({1, 2}, {1, 97})}});
    expect_user_error("forward --model smollm2 --inputs ids.safetensors --out out.safetensors",
                      "input 'labels': value 97 at index 1 is outside [0, 97), the classes of the loss (-100 is ignored)");
}

// A missing output folder was found after a whole epoch; an existing checkpoint was replaced
// without a word.
TEST_F(CliErrorsTest, OutputsAreCheckedFirstAndNeverSilentlyReplaced) {
    write_dataset(64);
    const std::string train = "train fashion-mnist --data data --batch 32 --epochs 1 ";
    expect_user_error(train + "--checkpoint missing/c.safetensors",
                      "checkpoint missing/c.safetensors: the folder missing does not exist");
    EXPECT_EQ(output_.find("training "), std::string::npos) << output_;  // before the first step
    expect_user_error(train + "--checkpoint c.safetensors --curve missing/curve",
                      "loss curve missing/curve.csv: the folder missing does not exist");
    expect_user_error("forward --model mlp --inputs x --out missing/out.safetensors",
                      "--out missing/out.safetensors: the folder missing does not exist");

    const std::string old = write("c.safetensors", "an earlier run's checkpoint");
    expect_user_error(train + "--checkpoint c.safetensors",
                      "--checkpoint c.safetensors exists; pass --resume c.safetensors to continue it, or --force");
    EXPECT_EQ(bytes_of("c.safetensors"), "an earlier run's checkpoint");
    EXPECT_EQ(run(train + "--checkpoint c.safetensors --force"), 0) << output_;
    EXPECT_NE(bytes_of("c.safetensors"), "an earlier run's checkpoint");
}

// --lr 1e30 (or any divergence) trained on, and saved the non-finite parameters over the last good
// checkpoint with status 0.
TEST_F(CliErrorsTest, NonFiniteTrainingStopsAndKeepsTheLastGoodCheckpoint) {
    write_dataset(64);
    const std::string train = "train fashion-mnist --data data --batch 32 --checkpoint c.safetensors ";
    ASSERT_EQ(run(train + "--epochs 1"), 0) << output_;
    const std::string good = bytes_of("c.safetensors");
    expect_user_error(train + "--epochs 3 --resume c.safetensors --lr 1e30 --schedule constant",
                      "training stopped, c.safetensors keeps step 2");
    EXPECT_EQ(error_line().rfind("meganeura train: error: step 4: the loss is nan", 0), 0u) << output_;
    EXPECT_EQ(bytes_of("c.safetensors"), good);
}

}  // namespace
}  // namespace mn::test
