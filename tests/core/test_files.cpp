#include "cube3d/core/files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_files {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "cube3d_files_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    unlink((dir_ + "/a.txt").c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& text) {
    const std::string path = dir_ + "/a.txt";
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::kInternal;
}

TEST_F(FilesTest, ReadsWholeFileWithBinaryBytes) {
  const std::string text("a\0b\r\nc", 6);
  EXPECT_EQ(read_file(write(text)), text);
  EXPECT_EQ(path_kind(dir_ + "/a.txt"), PathKind::kFile);
  EXPECT_EQ(path_kind(dir_), PathKind::kDirectory);
  EXPECT_EQ(path_kind(dir_ + "/missing"), PathKind::kMissing);
}

TEST_F(FilesTest, MissingIsNotFoundAndNamesPathAndKind) {
  try {
    read_file(dir_ + "/missing", "TLS key");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_EQ(std::string(e.what()), dir_ + "/missing: no such TLS key");
  }
  EXPECT_EQ(code_of([&] { read_file(dir_ + "/a.txt/below"); }), ErrorCode::kNotFound);
}

TEST_F(FilesTest, FolderAndOversizedFileAreInvalid) {
  EXPECT_EQ(code_of([&] { read_file(dir_); }), ErrorCode::kInvalidArgument);
  const std::string path = write("0123456789");
  EXPECT_EQ(read_file(path, "file", 10), "0123456789");
  try {
    read_file(path, "CLIP config", 9);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("10 bytes is too large for a CLIP config"),
              std::string::npos)
        << e.what();
  }
}

// The message of the cube3d::Error that require_readable throws, checking its code.
std::string readable_error(const std::string& path, ReadableKind kind, ErrorCode code) {
  try {
    require_readable(path, kind);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  return "";
}

TEST_F(FilesTest, RequireReadableChecksKindAndNamesThePath) {
  const std::string file = write("x");
  EXPECT_NO_THROW(require_readable(file, ReadableKind::kFile));
  EXPECT_NO_THROW(require_readable(file, ReadableKind::kFileOrDirectory));
  EXPECT_NO_THROW(require_readable(dir_, ReadableKind::kDirectory));
  EXPECT_NO_THROW(require_readable(dir_, ReadableKind::kFileOrDirectory));
  EXPECT_EQ(readable_error(dir_ + "/missing", ReadableKind::kFile, ErrorCode::kNotFound),
            dir_ + "/missing: no such file or directory");
  EXPECT_EQ(readable_error(file + "/below", ReadableKind::kFile, ErrorCode::kNotFound),
            file + "/below: no such file or directory");
  EXPECT_EQ(readable_error(dir_, ReadableKind::kFile, ErrorCode::kInvalidArgument),
            dir_ + ": not a regular file");
  EXPECT_EQ(readable_error(file, ReadableKind::kDirectory, ErrorCode::kInvalidArgument),
            file + ": not a directory");
  EXPECT_EQ(
      readable_error("/dev/null", ReadableKind::kFileOrDirectory, ErrorCode::kInvalidArgument),
      "/dev/null: neither a regular file nor a directory");
}

}  // namespace test_files
}  // namespace cube3d
