#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "meganeura/error.hpp"

namespace mn::io {

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
    const std::string temp = path + ".tmp." + std::to_string(getpid());
    std::FILE* file = std::fopen(temp.c_str(), "wb");
    if (!file) throw Error("cannot save " + path + ": cannot create " + temp + ": " + std::strerror(errno));
    int failure = 0;  // the first errno
    errno = 0;
    auto check = [&](bool success) {
        if (!success && !failure) failure = errno ? errno : EIO;
    };
    for (size_t i = 0; !failure && i < pieces.size(); ++i) {
        check(std::fwrite(pieces[i].data(), 1, pieces[i].size(), file) == pieces[i].size());
    }
    check(std::fflush(file) == 0);
    check(fsync(fileno(file)) == 0);
    check(std::fclose(file) == 0);
    if (!failure) check(std::rename(temp.c_str(), path.c_str()) == 0);
    if (failure) {
        std::remove(temp.c_str());
        throw Error("cannot save " + path + ": " + std::strerror(failure) + " (the previous file, if any, is unchanged)");
    }
    const size_t slash = path.find_last_of('/');
    const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
        fsync(dir);  // makes the rename durable; best effort, the data itself is already synced
        ::close(dir);
    }
}

}  // namespace mn::io
