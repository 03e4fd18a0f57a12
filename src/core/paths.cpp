#include "cube3d/core/paths.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

}  // namespace cube3d
