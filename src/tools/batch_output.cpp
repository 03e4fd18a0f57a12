#include "cube3d/tools/batch_output.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"

namespace cube3d {
namespace {

std::string reason(int error) { return std::generic_category().message(error); }

void make_folders(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw invalid_argument(what + ": " + path + " is not a folder");
    return;
  }
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (prefix.empty() || ::mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST) continue;
    throw invalid_argument(what + ": cannot make " + prefix + ": " + reason(errno));
  }
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw invalid_argument(what + ": " + path + " is not a folder");
  }
}

}  // namespace

BatchOutputDir::BatchOutputDir(std::string path, const std::string& what) : path_(std::move(path)) {
  if (path_.empty()) throw invalid_argument(what + ": the path is empty");
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  make_folders(path_, what);
  if (::access(path_.c_str(), W_OK | X_OK) != 0) {
    throw invalid_argument(what + ": cannot write in " + path_ + ": " + reason(errno));
  }
}

bool BatchOutputDir::has(const std::string& name) const {
  struct stat st {};
  return ::stat(path_of(name).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

size_t BatchOutputDir::remove_leftovers(const std::set<std::string>& names) const {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path_.c_str()), ::closedir);
  if (!dir) return 0;
  std::vector<std::string> doomed;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string_view file = entry->d_name;
    const size_t marker = file.rfind(kTemporaryMarker);
    if (marker == std::string_view::npos) continue;
    if (names.count(std::string(file.substr(0, marker))) == 0) continue;
    doomed.emplace_back(file);
  }
  size_t removed = 0;
  for (const std::string& file : doomed) {
    if (::unlink(path_of(file).c_str()) == 0) ++removed;
  }
  return removed;
}

void BatchOutputDir::write_atomically(const std::string& name, std::string_view bytes) const {
  const std::string final_path = path_of(name);
  const std::string temporary =
      final_path + std::string(kTemporaryMarker) + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw invalid_argument("cannot write " + temporary + ": " + reason(errno));
  bool ok = write_all(fd, bytes) && ::fsync(fd) == 0;
  int error = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (ok && ::rename(temporary.c_str(), final_path.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    throw invalid_argument("cannot write " + final_path + ": " + reason(error));
  }
  // The rename itself survives a crash once the folder is synced (best effort).
  const int dir_fd = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

ManifestWriter::ManifestWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw invalid_argument("cannot open the manifest " + path + ": " + reason(errno));
}

ManifestWriter::~ManifestWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ManifestWriter::append(std::string_view line) {
  std::string whole(line);
  whole += '\n';
  if (!write_all(fd_, whole) || ::fdatasync(fd_) != 0) {
    throw invalid_argument("cannot write the manifest " + path_ + ": " + reason(errno));
  }
}

}  // namespace cube3d
