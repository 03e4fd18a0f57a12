// CLIP's vocabulary files: the byte alphabet, both layouts as read (before the tokenizer checks
// them), file errors, and the order in which resolve_clip_vocab looks for a vocabulary, with fake
// install and build layouts. Temporary folders come from mkdtemp (POSIX, not std::filesystem:
// libtorch exports its own std::filesystem symbols).
#include "cube3d/model/clip_vocab.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"
#include "scoped_env.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_clip_vocab {

using Merges = std::vector<std::pair<std::string, std::string>>;

using testing::expect_error;
using testing::ScopedEnv;
using testing::TempDir;

// --- reading ------------------------------------------------------------------------------------

TEST(ClipVocab, ByteSymbolsArePrintableBytesFirstThenTheRestFromU0100) {
  const auto symbols = clip_byte_symbols();
  ASSERT_EQ(symbols.size(), 256u);
  EXPECT_EQ(symbols.front(), std::make_pair(uint8_t{'!'}, std::string("!")));
  EXPECT_EQ(symbols[93], std::make_pair(uint8_t{'~'}, std::string("~")));
  EXPECT_EQ(symbols[94], std::make_pair(uint8_t{0xA1}, std::string("\u00a1")));
  EXPECT_EQ(symbols[188], std::make_pair(uint8_t{0}, std::string("\u0100")));
  EXPECT_EQ(symbols[188 + 32], std::make_pair(uint8_t{' '}, std::string("\u0120")));  // 'Ġ'
  EXPECT_EQ(symbols.back(), std::make_pair(uint8_t{0xAD}, std::string("\u0143")));
  std::set<uint8_t> bytes;
  std::set<std::string> strings;
  for (const auto& [byte, symbol] : symbols) {
    bytes.insert(byte);
    strings.insert(symbol);
  }
  EXPECT_EQ(bytes.size(), 256u);
  EXPECT_EQ(strings.size(), 256u);
}

TEST(ClipVocab, GzipLayoutNumbersBytesThenMergesThenSpecials) {
  TempDir dir;
  const std::string path = dir.write_gzip("small.txt.gz", "header\nc a\nca t</w>\n");
  const ClipVocab vocab = read_clip_vocab(path);
  EXPECT_EQ(vocab.tokens_file, path);
  EXPECT_EQ(vocab.merges_file, path);
  EXPECT_EQ(vocab.first_merge_line, 1u);
  EXPECT_EQ(vocab.merges, (Merges{{"c", "a"}, {"ca", "t</w>"}}));
  ASSERT_EQ(vocab.tokens.size(), 516u);
  EXPECT_EQ(vocab.tokens[0], "!");
  EXPECT_EQ(vocab.tokens[256], "!</w>");
  EXPECT_EQ(vocab.tokens[512], "ca");
  EXPECT_EQ(vocab.tokens[513], "cat</w>");
  EXPECT_EQ(vocab.tokens[514], kClipStartOfTextToken);
  EXPECT_EQ(vocab.tokens[515], kClipEndOfTextToken);
}

TEST(ClipVocab, GzipLayoutKeepsAtMostTheOfficialNumberOfMerges) {
  TempDir dir;
  std::string text = "header\n";
  for (int64_t i = 0; i < kClipMaxMerges + 10; ++i) text += "a b\n";
  const ClipVocab vocab = read_clip_vocab(dir.write_gzip("long.txt.gz", text));
  EXPECT_EQ(static_cast<int64_t>(vocab.merges.size()), kClipMaxMerges);
}

TEST(ClipVocab, FolderLayoutReadsVocabJsonAndMerges) {
  TempDir dir;
  dir.write("vocab.json", R"({"b": 1, "a": 0, "ab": 2})");
  dir.write("merges.txt", "#version: 0.2\na b\n");
  const ClipVocab vocab = read_clip_vocab(dir.path());
  EXPECT_EQ(vocab.tokens_file, dir.path() + "/vocab.json");
  EXPECT_EQ(vocab.merges_file, dir.path() + "/merges.txt");
  EXPECT_EQ(vocab.tokens, (std::vector<std::string>{"a", "b", "ab"}));
  EXPECT_EQ(vocab.first_merge_line, 1u);
  EXPECT_EQ(vocab.merges, (Merges{{"a", "b"}}));

  TempDir headerless;
  headerless.write("vocab.json", R"({"a": 0})");
  headerless.write("merges.txt", "a b\n");
  EXPECT_EQ(read_clip_vocab(headerless.path()).first_merge_line, 0u);
}

TEST(ClipVocab, FileErrorsNameTheFile) {
  const std::string missing = "/nonexistent/cube3d/bpe_simple_vocab_16e6.txt.gz";
  expect_error([&] { read_clip_vocab(missing); }, ErrorCode::kNotFound,
               {missing, "scripts/setup.sh"});
  TempDir dir;
  const std::string plain = dir.write("plain.txt.gz", "header\ni n\n");
  expect_error([&] { read_clip_vocab(plain); }, ErrorCode::kInvalidArgument,
               {plain + ": not a gzip file"});
  const std::string latin1 = dir.write_gzip("latin1.txt.gz", "header\n\xff b\n");
  expect_error([&] { read_clip_vocab(latin1); }, ErrorCode::kInvalidArgument,
               {latin1 + ": not UTF-8 text (byte offset 7)"});
  const std::string three = dir.write_gzip("three.txt.gz", "header\ni n\na b c\n");
  expect_error([&] { read_clip_vocab(three); }, ErrorCode::kInvalidArgument,
               {three + ": line 3: malformed merge"});

  TempDir folder;
  expect_error([&] { read_clip_vocab(folder.path()); }, ErrorCode::kNotFound,
               {folder.path() + "/vocab.json"});
  folder.write("vocab.json", R"({"a": 0})");
  expect_error([&] { read_clip_vocab(folder.path()); }, ErrorCode::kNotFound,
               {folder.path() + "/merges.txt"});
  folder.write("merges.txt", "");
  EXPECT_TRUE(read_clip_vocab(folder.path()).merges.empty());

  TempDir bad_json;
  bad_json.write("vocab.json", R"({"a": 0,)");
  bad_json.write("merges.txt", "");
  expect_error([&] { read_clip_vocab(bad_json.path()); }, ErrorCode::kInvalidArgument,
               {bad_json.path() + "/vocab.json: not valid JSON"});
  TempDir bad_id;
  bad_id.write("vocab.json", R"({"a": -1})");
  bad_id.write("merges.txt", "");
  expect_error([&] { read_clip_vocab(bad_id.path()); }, ErrorCode::kInvalidArgument,
               {bad_id.path() + "/vocab.json: token 'a': id -1 is out of range"});
}

// --- resolution order ---------------------------------------------------------------------------

const std::string kFile(kClipVocabFileName);

// A fake layout: a Hugging Face folder, an install prefix and a repository with a build folder.
class ClipVocabResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hf_folder_ = dir_.mkdirs("hf");
    dir_.write("hf/vocab.json", "{}");
    dir_.write("hf/merges.txt", "");
    install_bin_ = dir_.mkdirs("prefix/bin");
    installed_ = dir_.write("prefix/share/cube3d/" + kFile, "");
    build_bin_ = dir_.mkdirs("repo/build-gpu/bin");
    cached_ = dir_.write("repo/.cache/clip/" + kFile, "");
    empty_bin_ = dir_.mkdirs("empty/build/bin");
  }

  TempDir dir_;
  std::string hf_folder_, install_bin_, installed_, build_bin_, cached_, empty_bin_;
};

TEST_F(ClipVocabResolveTest, ExplicitPathWinsOverEverythingAndIsNotChecked) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "/from/the/environment.txt.gz");
  EXPECT_EQ(resolve_clip_vocab("/no/such/vocab.txt.gz", hf_folder_, install_bin_),
            "/no/such/vocab.txt.gz");
  EXPECT_EQ(resolve_clip_vocab("/no/such/vocab.txt.gz"), "/no/such/vocab.txt.gz");
}

TEST_F(ClipVocabResolveTest, EnvironmentComesNextAndIsNotChecked) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "/from/the/environment.txt.gz");
  EXPECT_EQ(resolve_clip_vocab("", hf_folder_, install_bin_), "/from/the/environment.txt.gz");
  EXPECT_EQ(resolve_clip_vocab(""), "/from/the/environment.txt.gz");
}

TEST_F(ClipVocabResolveTest, EmptyEnvironmentVariableIsIgnored) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "");
  EXPECT_EQ(resolve_clip_vocab("", "", install_bin_), installed_);
}

TEST_F(ClipVocabResolveTest, ModelFolderWithVocabAndMergesComesBeforeTheExecutablesCopy) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(resolve_clip_vocab("", hf_folder_, install_bin_), hf_folder_);
  const std::string partial = dir_.mkdirs("partial");
  dir_.write("partial/vocab.json", "{}");
  EXPECT_EQ(resolve_clip_vocab("", partial, install_bin_), installed_);
}

TEST_F(ClipVocabResolveTest, InstallLayoutBesideTheExecutable) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(resolve_clip_vocab("", "", install_bin_), installed_);
  EXPECT_EQ(resolve_clip_vocab("", "", install_bin_ + "/"), installed_);
}

TEST_F(ClipVocabResolveTest, BuildFolderUnderTheRepositoryRoot) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(resolve_clip_vocab("", "", build_bin_), cached_);
}

TEST_F(ClipVocabResolveTest, InstallCopyWinsOverTheRepositoryCache) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  const std::string installed_in_build = dir_.write("repo/build-gpu/share/cube3d/" + kFile, "");
  EXPECT_EQ(resolve_clip_vocab("", "", build_bin_), installed_in_build);
}

TEST_F(ClipVocabResolveTest, NothingFoundListsEveryPlaceTried) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  const std::string partial = dir_.mkdirs("partial");
  const std::string empty_root = dir_.path() + "/empty";
  expect_error([&] { resolve_clip_vocab("", partial, empty_bin_); }, ErrorCode::kNotFound,
               {"no CLIP vocabulary", "CUBE3D_CLIP_VOCAB", partial + "/vocab.json",
                partial + "/merges.txt", empty_root + "/build/share/cube3d/" + kFile,
                empty_root + "/.cache/clip/" + kFile, "scripts/setup.sh"});
}

// Without exe_dir, the running test binary's folder is used: the message names places beside it.
TEST_F(ClipVocabResolveTest, DefaultsToTheRunningExecutablesFolder) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size());
  ASSERT_GT(n, 0);
  exe.resize(static_cast<size_t>(n));
  const std::string bin = exe.substr(0, exe.rfind('/'));
  const auto resolve = [](const std::optional<std::string>& exe_dir) -> std::string {
    try {
      return resolve_clip_vocab("", "", exe_dir);
    } catch (const Error& e) {
      return e.what();
    }
  };
  EXPECT_EQ(resolve(std::nullopt), resolve(bin));
}

}  // namespace test_clip_vocab
}  // namespace cube3d
