#pragma once
// A fresh directory under the system temp directory, removed with everything in it when the
// object goes. Every test that writes files uses one, so runs never see each other's files.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace mn::test {

class TempDir {
public:
    explicit TempDir(const std::string& tag = "test") {
        static std::atomic<int> counter{0};
        dir_ = std::filesystem::temp_directory_path() /
               ("meganeura-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& dir() const { return dir_; }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

private:
    std::filesystem::path dir_;
};

}  // namespace mn::test
