#pragma once
// What tests that call outside programs share: the reference Python, and running a shell command.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mn::test {

// The reference scripts' interpreter, with torch, torchvision and numpy: /usr/bin/python3, which the test command
// equips (scripts/setup.sh), or $MEGANEURA_TEST_PYTHON (the GPU machine's, whose /usr/bin/python3 has no torch).
// A test that needs them fails without them.
inline std::string reference_python() {
    const char* chosen = std::getenv("MEGANEURA_TEST_PYTHON");
    return chosen && *chosen ? chosen : "/usr/bin/python3";
}
inline bool torch_available() {
    static const bool ok = std::system((reference_python() + " -c 'import torch, torchvision, numpy' > /dev/null 2>&1").c_str()) == 0;
    return ok;
}
#define MN_REQUIRE_TORCH()                                                        \
    ASSERT_TRUE(::mn::test::torch_available()) << ::mn::test::reference_python() \
                                               << " cannot import torch, torchvision and numpy: run scripts/setup.sh"

// The repository the tests read their scripts and data from, and the `meganeura` they run: where they were built, or
// $MEGANEURA_TEST_SOURCE and $MEGANEURA_TEST_BINARY where meganeura_tests runs elsewhere (carried to the GPU machine).
inline std::string source_dir() {
    const char* chosen = std::getenv("MEGANEURA_TEST_SOURCE");
    return chosen && *chosen ? chosen : MEGANEURA_BUILT_SOURCE_DIR;
}
inline std::string cli_binary() {
    const char* chosen = std::getenv("MEGANEURA_TEST_BINARY");
    return chosen && *chosen ? chosen : MEGANEURA_BUILT_BINARY;
}

// Runs `command` through the shell; its exit status, or -1 when it did not exit normally.
inline int exit_status(const std::string& command) {
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `command` through the shell and returns its stdout and stderr; `status` gets the exit status.
inline std::string run_command(const std::string& command, int* status) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    std::string text;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
    const int raw = pclose(pipe);
    *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    return text;
}

}  // namespace mn::test
