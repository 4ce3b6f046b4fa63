#pragma once
// What tests that call outside programs share: the reference Python, and a shell command's exit status.
#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace mn::test {

// /usr/bin/python3 with torch and numpy: the reference scripts' interpreter.
inline bool torch_available() {
    static const bool ok = std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0;
    return ok;
}

// Runs `command` through the shell; its exit status, or -1 when it did not exit normally.
inline int exit_status(const std::string& command) {
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace mn::test
