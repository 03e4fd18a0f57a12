// Test support: a temporary folder under /tmp; the files and folders made through it are removed
// with it, deepest first.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cube3d::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "cube3d_test") {
    std::string pattern = "/tmp/" + prefix + "_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      if (::unlink(it->c_str()) != 0) ::rmdir(it->c_str());
    }
    ::rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // Makes the folders of `relative` (a/b/c) under the temporary folder; returns its path.
  std::string mkdirs(const std::string& relative) {
    std::string path = path_;
    size_t begin = 0;
    while (begin < relative.size()) {
      const size_t end = std::min(relative.find('/', begin), relative.size());
      path += '/';
      path.append(relative, begin, end - begin);
      if (::mkdir(path.c_str(), 0755) == 0) made_.push_back(path);
      begin = end + 1;
    }
    return path;
  }

  // Writes a file (its folders made first); returns its path.
  std::string write(const std::string& relative, const std::string& content) {
    if (const size_t slash = relative.rfind('/'); slash != std::string::npos) {
      mkdirs(relative.substr(0, slash));
    }
    const std::string file = path_ + "/" + relative;
    std::ofstream(file, std::ios::binary) << content;
    made_.push_back(file);
    return file;
  }

  // Writes `content` gzip-compressed (the CLIP vocabulary's format); returns its path.
  std::string write_gzip(const std::string& relative, const std::string& content) {
    const std::string file = write(relative, "");
    gzFile gz = gzopen(file.c_str(), "wb");
    if (gz == nullptr) throw std::runtime_error("gzopen failed: " + file);
    gzwrite(gz, content.data(), static_cast<unsigned>(content.size()));
    gzclose(gz);
    return file;
  }

 private:
  std::string path_;
  std::vector<std::string> made_;
};

}  // namespace cube3d::testing
