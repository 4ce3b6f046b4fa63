#include "io/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "meganeura/error.hpp"

namespace mn::io {
namespace {

constexpr int kTempAttempts = 100;

struct Location {
    std::string folder, name;  // "." for a bare name
};

Location split(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return {".", path};
    return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// The pid in "<name>.tmp.<pid>" or "<name>.tmp.<pid>.<n>", or 0 when `entry` is not such a name.
pid_t temp_owner(std::string_view entry, std::string_view name) {
    const std::string prefix = std::string(name) + ".tmp.";
    if (entry.substr(0, prefix.size()) != prefix) return 0;
    entry.remove_prefix(prefix.size());
    pid_t pid = 0;
    auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), pid);
    if (error != std::errc() || pid <= 0) return 0;
    std::string_view rest(end, entry.data() + entry.size() - end);
    if (!rest.empty()) {  // ".<n>"
        if (rest[0] != '.') return 0;
        unsigned n = 0;
        auto [tail, tail_error] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), n);
        if (tail_error != std::errc() || tail != rest.data() + rest.size()) return 0;
    }
    return pid;
}

// Removes the temporary files of earlier saves of `where` by processes that have exited. A live
// process's files (a save in progress) are left alone, and so is anything that is not a file.
void remove_stale_temporaries(const Location& where) {
    DIR* dir = ::opendir(where.folder.c_str());
    if (!dir) return;  // the save itself reports the folder
    while (const dirent* entry = ::readdir(dir)) {
        const pid_t pid = temp_owner(entry->d_name, where.name);
        if (pid == 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
        struct stat st;
        if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
            ::unlinkat(::dirfd(dir), entry->d_name, 0);
    }
    ::closedir(dir);
}

struct Temporary {
    std::string path;
    int fd = -1;
};

Temporary create_temporary(const std::string& path) {
    struct stat target;
    const bool exists = ::lstat(path.c_str(), &target) == 0 && S_ISREG(target.st_mode);
    const mode_t mode = exists ? target.st_mode & 07777 : 0666;  // a new file: 0666 less the umask, as fopen
    const std::string stem = path + ".tmp." + std::to_string(::getpid()) + ".";
    for (int n = 0; n < kTempAttempts; ++n) {
        Temporary temp{stem + std::to_string(n)};
        temp.fd = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (temp.fd < 0 && errno == EEXIST) continue;  // taken: a concurrent save, or a planted name
        if (temp.fd < 0)
            throw Error("cannot save " + path + ": cannot create " + temp.path + ": " + std::strerror(errno));
        if (exists && ::fchmod(temp.fd, mode) != 0) {  // the umask may have cleared bits the target has
            const int failure = errno;
            ::close(temp.fd);
            ::unlink(temp.path.c_str());
            throw Error("cannot save " + path + ": cannot set the permissions of " + temp.path + ": " +
                        std::strerror(failure));
        }
        return temp;
    }
    throw Error("cannot save " + path + ": " + stem + "0.." + std::to_string(kTempAttempts - 1) + " all exist");
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
    const Location where = split(path);
    remove_stale_temporaries(where);
    const Temporary temp = create_temporary(path);
    int failure = 0;  // the first errno
    auto check = [&](bool success) {
        if (!success && !failure) failure = errno ? errno : EIO;
    };
    for (size_t i = 0; !failure && i < pieces.size(); ++i) {
        for (std::string_view rest = pieces[i]; !failure && !rest.empty();) {
            errno = 0;
            const ssize_t wrote = ::write(temp.fd, rest.data(), rest.size());
            if (wrote < 0 && errno == EINTR) continue;
            check(wrote > 0);
            if (wrote > 0) rest.remove_prefix(size_t(wrote));
        }
    }
    check(::fsync(temp.fd) == 0);
    check(::close(temp.fd) == 0);
    if (!failure) check(std::rename(temp.path.c_str(), path.c_str()) == 0);
    if (failure) {
        ::unlink(temp.path.c_str());
        throw Error("cannot save " + path + ": " + std::strerror(failure) + " (the previous file, if any, is unchanged)");
    }
    if (int dir = ::open(where.folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
        ::fsync(dir);  // makes the rename durable; best effort, the data itself is already synced
        ::close(dir);
    }
}

void check_can_write(const std::string& path, const std::string& what) {
    const Location where = split(path);
    struct stat st;
    if (path.empty() || path.back() == '/') throw Error(what + " '" + path + "': expected a file name");
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(what + " " + path + ": is a folder");
    if (::stat(where.folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error(what + " " + path + ": the folder " + where.folder + " does not exist");
    if (::access(where.folder.c_str(), W_OK) != 0)
        throw Error(what + " " + path + ": the folder " + where.folder + " is not writable: " + std::strerror(errno));
}

}  // namespace mn::io
