#include "cube3d/tools/batch_output.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_batch_output {

std::vector<std::string> files_in(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// Removes everything below `path` (one level of files, then the folders made by the tests).
void remove_files(const std::string& path) {
  for (const std::string& name : files_in(path)) ::unlink((path + "/" + name).c_str());
}

TEST(BatchOutputTest, WritesWholeFilesByRenameAndKnowsThem) {
  cube3d::testing::TempDir tmp;
  const std::string path = tmp.path() + "/out/nested";
  {
    const BatchOutputDir out(path + "/");  // made, parents too; the trailing '/' dropped
    EXPECT_EQ(out.path(), path);
    EXPECT_FALSE(out.has("a.glb"));
    out.write_atomically("a.glb", "glTF bytes");
    EXPECT_TRUE(out.has("a.glb"));
    EXPECT_EQ(read_file(out.path_of("a.glb")), "glTF bytes");
    out.write_atomically("a.glb", "again");  // replaced whole
    EXPECT_EQ(read_file(out.path_of("a.glb")), "again");
    EXPECT_EQ(files_in(path), std::vector<std::string>{"a.glb"});  // no temporary file left
  }
  remove_files(path);
  ::rmdir(path.c_str());
  ::rmdir((tmp.path() + "/out").c_str());
}

TEST(BatchOutputTest, RemovesOnlyTheLeftoversOfItsOwnNames) {
  cube3d::testing::TempDir tmp;
  const BatchOutputDir out(tmp.path());
  for (const char* name : {"a.glb.tmp.123", "a.glb.tmp.456", "b.glb.tmp.1", "a.glb", "c.glb"}) {
    std::ofstream(out.path_of(name)) << "x";
  }
  EXPECT_EQ(out.remove_leftovers({"a.glb", "c.glb"}), 2u);
  EXPECT_EQ(files_in(tmp.path()), (std::vector<std::string>{"a.glb", "b.glb.tmp.1", "c.glb"}));
  remove_files(tmp.path());
}

TEST(BatchOutputTest, RefusesWhatIsNotAWritableFolder) {
  cube3d::testing::TempDir tmp;
  const std::string file = tmp.write("file", "x");
  EXPECT_THROW(BatchOutputDir{file}, Error);
  EXPECT_THROW(BatchOutputDir{file + "/below"}, Error);
  EXPECT_THROW(BatchOutputDir{""}, Error);
}

TEST(BatchOutputTest, ManifestAppendsWholeLines) {
  cube3d::testing::TempDir tmp;
  const std::string path = tmp.path() + "/manifest-0-of-1.jsonl";
  {
    ManifestWriter manifest(path);
    manifest.append(R"({"line":1})");
  }
  {
    ManifestWriter manifest(path);  // a rerun appends
    manifest.append(R"({"line":2})");
  }
  EXPECT_EQ(read_file(path), "{\"line\":1}\n{\"line\":2}\n");
  ::unlink(path.c_str());
  EXPECT_THROW(ManifestWriter{tmp.path() + "/missing/m.jsonl"}, Error);
}

}  // namespace test_batch_output
}  // namespace cube3d
