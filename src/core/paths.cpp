#include "cube3d/core/paths.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {

bool is_absolute_path(std::string_view path) { return !path.empty() && path.front() == '/'; }

std::string tidy_path(std::string_view path) {
  std::string out;
  const bool absolute = is_absolute_path(path);
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    const std::string_view segment = path.substr(at, slash - at);
    if (!segment.empty() && segment != ".") {
      if (!out.empty() || absolute) out += '/';
      out += segment;
    }
    at = slash + 1;
  }
  if (out.empty()) return absolute ? "/" : ".";
  return out;
}

std::string join_path(std::string_view base, std::string_view path) {
  std::string joined(base);
  joined += '/';
  joined += path;
  return tidy_path(joined);
}

std::string resolve_path(const std::string& path, std::string_view base) {
  if (path.empty() || is_absolute_path(path)) return path;
  return join_path(base, path);
}

std::string current_directory() {
  std::vector<char> buffer(4096);
  // A deep working directory can exceed any fixed buffer; ERANGE says to try a larger one.
  while (getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) {
      throw invalid_argument("cannot determine the current directory: " +
                             std::generic_category().message(errno));
    }
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || is_absolute_path(path)) return path;
  return join_path(current_directory(), path);
}

std::string folder_of(const std::string& file) {
  const std::string absolute =
      is_absolute_path(file) ? tidy_path(file) : join_path(current_directory(), file);
  const std::size_t slash = absolute.rfind('/');
  return slash == 0 ? "/" : absolute.substr(0, slash);
}

std::optional<std::string> executable_dir(std::string& why) {
  std::string buffer(256, '\0');
  while (true) {
    const ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size());
    if (n < 0) {
      why = "readlink /proc/self/exe: " + std::string(std::strerror(errno));
      return std::nullopt;
    }
    if (static_cast<size_t>(n) < buffer.size()) {
      buffer.resize(static_cast<size_t>(n));
      break;
    }
    buffer.resize(buffer.size() * 2);  // possibly cut: try again with more room
  }
  const size_t slash = buffer.rfind('/');
  if (slash == std::string::npos) {
    why = "/proc/self/exe is not an absolute path: " + buffer;
    return std::nullopt;
  }
  return slash == 0 ? std::string("/") : buffer.substr(0, slash);
}

std::string parent_dir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  const std::string last = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (dir.empty() || last == "." || last == "..") return dir.empty() ? ".." : dir + "/..";
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : dir.substr(0, slash);
}

}  // namespace cube3d
