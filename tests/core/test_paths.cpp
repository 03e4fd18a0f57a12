#include "cube3d/core/paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "cube3d/core/files.h"

namespace cube3d {
namespace test_paths {

TEST(Paths, TidyDropsDotsAndRepeatedSlashesButKeepsDotDot) {
  EXPECT_EQ(tidy_path("/a/./b//c"), "/a/b/c");
  EXPECT_EQ(tidy_path("/a/b/"), "/a/b");
  EXPECT_EQ(tidy_path("a/./b"), "a/b");
  EXPECT_EQ(tidy_path("./a"), "a");
  EXPECT_EQ(tidy_path("/a/../b"), "/a/../b");  // not lexical once links are involved
  EXPECT_EQ(tidy_path("/"), "/");
  EXPECT_EQ(tidy_path("//"), "/");
  EXPECT_EQ(tidy_path("."), ".");
  EXPECT_EQ(tidy_path(""), ".");
}

TEST(Paths, AbsoluteMeansLeadingSlash) {
  EXPECT_TRUE(is_absolute_path("/a"));
  EXPECT_FALSE(is_absolute_path("a/b"));
  EXPECT_FALSE(is_absolute_path(""));
}

TEST(Paths, JoinAndResolve) {
  EXPECT_EQ(join_path("/models", "./demo.yaml"), "/models/demo.yaml");
  EXPECT_EQ(join_path("/models/", "clip/"), "/models/clip");
  EXPECT_EQ(join_path("models", "x"), "models/x");
  EXPECT_EQ(resolve_path("demo.yaml", "/models"), "/models/demo.yaml");
  // Absolute and empty paths are left exactly as given (not tidied).
  EXPECT_EQ(resolve_path("/etc/./x", "/models"), "/etc/./x");
  EXPECT_EQ(resolve_path("", "/models"), "");
}

TEST(Paths, AbsoluteAndFolderUseTheWorkingDirectory) {
  char buffer[4096];
  ASSERT_NE(getcwd(buffer, sizeof buffer), nullptr);
  const std::string cwd = buffer;
  EXPECT_EQ(current_directory(), cwd);
  EXPECT_EQ(absolute_path("."), cwd);
  EXPECT_EQ(absolute_path("a/./b"), tidy_path(cwd + "/a/b"));
  EXPECT_EQ(absolute_path("/x/./y"), "/x/./y");
  EXPECT_EQ(absolute_path(""), "");

  EXPECT_EQ(folder_of("/models/demo.yaml"), "/models");
  EXPECT_EQ(folder_of("/models/./sub//demo.yaml"), "/models/sub");
  EXPECT_EQ(folder_of("/demo.yaml"), "/");
  EXPECT_EQ(folder_of("demo.yaml"), cwd);
}

TEST(Paths, ParentDirIsLexical) {
  EXPECT_EQ(parent_dir("/opt/cube3d/bin"), "/opt/cube3d");
  EXPECT_EQ(parent_dir("/opt/cube3d/bin/"), "/opt/cube3d");
  EXPECT_EQ(parent_dir("/bin"), "/");
  EXPECT_EQ(parent_dir("/"), "/");
  EXPECT_EQ(parent_dir("bin"), ".");
  EXPECT_EQ(parent_dir(""), "..");
  EXPECT_EQ(parent_dir("a/.."), "a/../..");  // through a link ".." does not cancel
}

TEST(Paths, ExecutableDirIsTheTestBinarysFolder) {
  std::string why;
  const std::optional<std::string> dir = executable_dir(why);
  ASSERT_TRUE(dir.has_value()) << why;
  EXPECT_TRUE(is_absolute_path(*dir)) << *dir;
  EXPECT_EQ(path_kind(*dir + "/cube3d_core_tests"), PathKind::kFile) << *dir;
}

}  // namespace test_paths
}  // namespace cube3d
