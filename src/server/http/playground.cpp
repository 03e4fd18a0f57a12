#include "cube3d/server/http/playground.h"

#include <dirent.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/paths.h"

namespace cube3d::http {
namespace {

constexpr size_t kMaxPlaygroundFiles = 64;
constexpr int64_t kMaxPlaygroundBytes = 32 << 20;

// The names of the regular files directly in `dir` (links followed), sorted.
std::vector<std::string> files_in(const std::string& dir) {
  const std::unique_ptr<DIR, int (*)(DIR*)> handle(::opendir(dir.c_str()), ::closedir);
  if (!handle) {
    require_readable(dir, ReadableKind::kDirectory);  // says why: missing, not a folder, ...
    throw invalid_argument(dir + ": cannot list the folder");
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle.get())) {
    const std::string name = entry->d_name;
    if (name.starts_with('.')) continue;  // ".", "..", an editor's hidden files
    if (path_kind(dir + "/" + name) == PathKind::kFile) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

const std::vector<VendorFile>& playground_vendor_files() {
  static const std::vector<VendorFile> files = {
      {"build/three.min.js", "/vendor/three/three.min.js"},
      {"examples/js/loaders/GLTFLoader.js", "/vendor/three/GLTFLoader.js"},
      {"examples/js/loaders/OBJLoader.js", "/vendor/three/OBJLoader.js"},
      {"examples/js/loaders/PLYLoader.js", "/vendor/three/PLYLoader.js"},
      {"examples/js/controls/OrbitControls.js", "/vendor/three/OrbitControls.js"},
  };
  return files;
}

std::string default_playground_dir() {
  std::string why;
  const std::optional<std::string> exe = executable_dir(why);
  if (!exe) {
    throw not_found("http.playground_dir is not set and the executable's folder is unknown (" +
                    why + ")");
  }
  const std::string dir = parent_dir(*exe) + "/share/cube3d/playground";
  if (path_kind(dir) != PathKind::kDirectory) {
    throw not_found("http.playground_dir is not set and " + dir +
                    " (share/cube3d/playground beside the executable's folder) is not a folder");
  }
  return dir;
}

StaticSite load_playground(const std::string& playground_dir, const std::string& three_js_dir) {
  StaticSite site;
  const std::vector<std::string> names = files_in(playground_dir);
  if (std::find(names.begin(), names.end(), "index.html") == names.end()) {
    throw not_found(playground_dir + "/index.html: no such file (http.playground_dir)");
  }
  size_t served = 0;
  for (const std::string& name : names) {
    if (site_media_type(name).empty()) continue;
    if (++served > kMaxPlaygroundFiles) {
      throw invalid_argument(playground_dir + ": more than " + std::to_string(kMaxPlaygroundFiles) +
                             " files to serve (http.playground_dir)");
    }
    site.add_file("/playground/" + name, playground_dir + "/" + name, "http.playground_dir file");
  }
  site.add("/", site.find("/playground/index.html")->body,
           site.find("/playground/index.html")->media_type);
  for (const VendorFile& file : playground_vendor_files()) {
    const std::string path = three_js_dir + "/" + file.source;
    if (path_kind(path) != PathKind::kFile) {
      throw not_found(path +
                      ": no such file (http.three_js_dir: three.js r111 from Debian's libjs-three; "
                      "scripts/setup.sh installs it)");
    }
    site.add_file(file.url, path, "http.three_js_dir file");
  }
  if (site.total_bytes() > kMaxPlaygroundBytes) {
    throw invalid_argument(playground_dir + ": the playground's files come to " +
                           std::to_string(site.total_bytes()) + " bytes, over " +
                           std::to_string(kMaxPlaygroundBytes));
  }
  return site;
}

}  // namespace cube3d::http
