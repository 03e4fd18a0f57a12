// The output folder of cube3d-generate's batch mode (--out-dir): mesh files written so that a
// run killed at any moment leaves only whole files (write "<name>.tmp.<pid>" in the folder,
// fsync, rename over "<name>", fsync the folder), the leftovers of such a run removed when the
// next one starts, and the manifest (JSON lines, appended, each written whole and synced as it
// is written). POSIX; torch-free.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>

namespace cube3d {

class BatchOutputDir {
 public:
  // Makes the folder (and its parents) when missing; invalid_argument naming `what` when it is
  // not a folder or cannot be written.
  explicit BatchOutputDir(std::string path, const std::string& what = "--out-dir");

  const std::string& path() const { return path_; }
  std::string path_of(const std::string& name) const { return path_ + "/" + name; }

  // Whether a regular file `name` is there (a finished output: temporary files never carry the
  // final name).
  bool has(const std::string& name) const;

  // Removes the temporary files "<name>.tmp.<anything>" of the given names (those a killed run
  // of the same shard left); other files, other shards' included, are left alone. Returns how
  // many were removed.
  size_t remove_leftovers(const std::set<std::string>& names) const;

  // Writes `bytes` as `name` atomically (see above). invalid_argument "cannot write <path>:
  // <reason>" on failure, with the temporary file removed.
  void write_atomically(const std::string& name, std::string_view bytes) const;

 private:
  std::string path_;
};

// "<tmp marker>" between an output's name and the writer's pid.
inline constexpr std::string_view kTemporaryMarker = ".tmp.";

// JSON lines appended to one file (O_APPEND): each line one write(2) followed by fdatasync, so
// that a reader (or a kill) never sees half a line that was reported written.
class ManifestWriter {
 public:
  explicit ManifestWriter(const std::string& path);
  ~ManifestWriter();
  ManifestWriter(const ManifestWriter&) = delete;
  ManifestWriter& operator=(const ManifestWriter&) = delete;

  const std::string& path() const { return path_; }
  // `line` without its '\n'.
  void append(std::string_view line);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace cube3d
