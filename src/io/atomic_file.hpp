#pragma once
// Writes a file so that a crash mid-write leaves the previous file intact: the bytes go to a
// temporary file beside it, which is flushed, synced and renamed over the target; the folder is
// then synced so the rename itself is durable.
//
// The temporary file is "<path>.tmp.<pid>.<n>", created with O_CREAT | O_EXCL | O_NOFOLLOW: a name
// someone else planted (a symlink to redirect the save, say) is skipped for the next n, never
// opened. It gets the target's permission bits, so a 0600 checkpoint stays 0600. Temporary files of
// processes that no longer exist (a save killed mid-write) are removed before each save.
#include <string>
#include <string_view>
#include <vector>

namespace mn::io {

// `pieces` are written back to back. Throws mn::Error naming the path; the temporary file is
// removed on failure.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);

// Checks, before any work, that `path` could be saved: its folder exists and is writable, and it is
// not a folder itself. Throws mn::Error "<what> <path>: ..." otherwise.
void check_can_write(const std::string& path, const std::string& what);

}  // namespace mn::io
