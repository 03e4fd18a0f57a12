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

// What require_readable expects at a path.
enum class ReadableKind { kFile, kDirectory, kFileOrDirectory };

// Throws unless `path` holds a `kind` this process may read (a folder: list and enter), so that
// a path a program opens later fails when its config is loaded, not at first use. Missing (or
// below something that is not a folder) is kNotFound, "<path>: no such file or directory"; the
// wrong kind or no permission is kInvalidArgument, "<path>: not a regular file" and the like.
void require_readable(const std::string& path, ReadableKind kind);

// The whole content of the regular file at `path`. A missing file is kNotFound; a folder, a
// device, an unreadable file, or one larger than `max_bytes` is kInvalidArgument. Every message
// starts with the path and names the file as `what` ("CLIP config", "TLS key").
std::string read_file(const std::string& path, std::string_view what = "file",
                      int64_t max_bytes = std::numeric_limits<int64_t>::max());

// Replaces the file at `path` with `bytes`; invalid_argument "cannot write <path>: <reason>"
// when it cannot be opened or written whole.
void write_file(const std::string& path, std::string_view bytes);

// write(2) of every byte to `fd`, retried on EINTR and short writes; false with errno set when a
// write fails.
bool write_all(int fd, std::string_view bytes);

}  // namespace cube3d
