// Test support: a scratch folder under gtest's TempDir holding plain files only, removed with
// them at the end of its scope; and a folder's names. Plain POSIX instead of std::filesystem: the
// torch wheel's libtorch.so exports its own copies of std::filesystem functions, which interpose
// on libstdc++'s and crash (remove_all segfaults), and these tests link libtorch.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace cube3d::testing {

// The names in a folder, without "." and "..".
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* const handle = ::opendir(dir.c_str());
  if (handle == nullptr) return names;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(handle);
  return names;
}

class ScratchDir {
 public:
  // The folder is named <prefix>XXXXXX.
  explicit ScratchDir(const std::string& prefix = "cube3d_") {
    std::string pattern = ::testing::TempDir();
    if (!pattern.empty() && pattern.back() != '/') pattern += '/';
    pattern += prefix + "XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    dir_ = pattern;
  }
  ~ScratchDir() {
    for (const std::string& name : list_dir(dir_)) ::unlink(path(name).c_str());
    ::rmdir(dir_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }

 private:
  std::string dir_;
};

}  // namespace cube3d::testing
