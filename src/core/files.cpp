#include "cube3d/core/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <system_error>

#include "cube3d/core/error.h"

namespace cube3d {

PathKind path_kind(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return PathKind::kMissing;
  if (S_ISREG(info.st_mode)) return PathKind::kFile;
  if (S_ISDIR(info.st_mode)) return PathKind::kDirectory;
  return PathKind::kOther;
}

void require_readable(const std::string& path, ReadableKind kind) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) throw not_found(path + ": no such file or directory");
    // Permission problems and the like: the file may well exist, so not "not found".
    throw invalid_argument(path + ": cannot access: " + std::generic_category().message(error));
  }
  const bool is_dir = S_ISDIR(info.st_mode);
  const bool is_file = S_ISREG(info.st_mode);
  if (kind == ReadableKind::kFile && !is_file) {
    throw invalid_argument(path + ": not a regular file");
  }
  if (kind == ReadableKind::kDirectory && !is_dir) {
    throw invalid_argument(path + ": not a directory");
  }
  if (kind == ReadableKind::kFileOrDirectory && !is_dir && !is_file) {
    throw invalid_argument(path + ": neither a regular file nor a directory");
  }
  if (access(path.c_str(), is_dir ? (R_OK | X_OK) : R_OK) != 0) {
    throw invalid_argument(path + ": not readable: " + std::generic_category().message(errno));
  }
}

std::string read_file(const std::string& path, std::string_view what, int64_t max_bytes) {
  const std::string kind(what);
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) throw not_found(path + ": no such " + kind);
    // Permission problems and the like: the file may well exist, so not "not found".
    throw invalid_argument(path + ": cannot access the " + kind + ": " +
                           std::generic_category().message(error));
  }
  if (!S_ISREG(info.st_mode)) throw invalid_argument(path + ": the " + kind + " is not a file");
  if (info.st_size > max_bytes) {
    throw invalid_argument(path + ": " + std::to_string(info.st_size) +
                           " bytes is too large for a " + kind + " (at most " +
                           std::to_string(max_bytes) + ")");
  }
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) {
    throw invalid_argument(path + ": cannot open the " + kind + ": " +
                           std::generic_category().message(errno));
  }
  std::string out;
  out.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    // A file that grows while we read it (a log, a pipe behind a link) still stops at the cap.
    if (static_cast<int64_t>(out.size() + n) > max_bytes) {
      throw invalid_argument(path + ": the " + kind + " grew past " + std::to_string(max_bytes) +
                             " bytes while it was read");
    }
    out.append(buffer, n);
  }
  if (std::ferror(file.get())) throw invalid_argument(path + ": read error in the " + kind);
  return out;
}

void write_file(const std::string& path, std::string_view bytes) {
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!file) {
    throw invalid_argument("cannot write " + path + ": " + std::generic_category().message(errno));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size() ||
      std::fflush(file.get()) != 0) {
    throw invalid_argument("cannot write " + path + ": " + std::generic_category().message(errno));
  }
}

}  // namespace cube3d

namespace cube3d {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace cube3d
