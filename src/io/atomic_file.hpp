#pragma once
// Writes a file so that a crash mid-write leaves the previous file intact: the bytes go to a
// temporary file beside it, which is flushed, synced and renamed over the target; the folder is
// then synced so the rename itself is durable.
#include <string>
#include <string_view>
#include <vector>

namespace mn::io {

// `pieces` are written back to back. Throws mn::Error naming the path; the temporary file is
// removed on failure.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace mn::io
