// Reading whole files, and the few POSIX file queries the loaders need. Torch-free.
//
// No std::filesystem: the torch wheel's libtorch exports its own copies of some std::filesystem
// symbols, which interpose on libstdc++'s and have crashed a test binary; stat(2) does the job.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace cube3d {

enum class PathKind { kMissing, kFile, kDirectory, kOther };

// What is at `path` (following links). kMissing also when a parent is not a folder.
PathKind path_kind(const std::string& path);

// The whole content of the regular file at `path`. A missing file is kNotFound; a folder, a
// device, an unreadable file, or one larger than `max_bytes` is kInvalidArgument. Every message
// starts with the path and names the file as `what` ("CLIP config", "TLS key").
std::string read_file(const std::string& path, std::string_view what = "file",
                      int64_t max_bytes = std::numeric_limits<int64_t>::max());

}  // namespace cube3d
