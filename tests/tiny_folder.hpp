#pragma once
// Tiny random Hugging Face model folders (tests/torch/tiny_model_folder.py) for the tests of -m DIR,
// generate and tokenize, and `meganeura` run on them.
#include <gtest/gtest.h>

#include <string>

#include "host_tools.hpp"
#include "temp_dir.hpp"

namespace mn::test {

// Writes the folder into `dir` with the script's `flags` (--shards N, --qwen2, --text FILE).
inline void make_tiny_folder(const std::string& dir, const std::string& flags = "") {
    int status = 0;
    const std::string script = source_dir() + "/tests/torch/tiny_model_folder.py";
    const std::string out = run_command(reference_python() + " '" + script + "' '" + dir + "' " + flags, &status);
    ASSERT_EQ(status, 0) << out;
}

// `meganeura <args>`: stdout and stderr together, the status in `status`.
inline std::string meganeura(const std::string& args, int* status) {
    return run_command(cli_binary() + " " + args, status);
}

}  // namespace mn::test
