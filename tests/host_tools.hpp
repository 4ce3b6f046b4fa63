#pragma once
// What tests that call outside programs share: a scratch folder, the reference Python, and a
// shell command's exit status.
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace mn::test {

// A new empty folder under the temp directory, removed with everything in it when the object goes.
class TempDir {
public:
    explicit TempDir(const std::string& tag) {
        std::string dir = (std::filesystem::temp_directory_path() / ("meganeura-" + tag + "-XXXXXX")).string();
        if (!mkdtemp(dir.data())) throw std::runtime_error("cannot create a folder like " + dir);
        path_ = dir;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return (path_ / name).string(); }
    std::string str() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

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
