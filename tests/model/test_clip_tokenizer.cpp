// Tests of the CLIP BPE tokenizer: every case of clip_tokens.json (made with OpenAI's
// simple_tokenizer and Hugging Face's padding), the Hugging Face folder format, the pattern's
// case quirks, invalid UTF-8, truncation, the cache under threads, and vocabulary file errors
// as loading reports them. The text clean-up alone: test_clip_text_normalizer.cpp.
#include "cube3d/model/clip_tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/model/clip_vocab.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_clip_tokenizer {

// Plain POSIX instead of std::filesystem: the torch wheel's libtorch.so exports its own copies
// of std::filesystem functions, which interpose on libstdc++'s and crash.

const std::string kVocab =
    std::string(CUBE3D_SOURCE_DIR) + "/.cache/clip/bpe_simple_vocab_16e6.txt.gz";

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The official vocabulary, loaded once for the whole binary (loading takes a while).
const ClipTokenizer* official_tokenizer() {
  static const std::unique_ptr<const ClipTokenizer> tokenizer =
      file_exists(kVocab) ? std::make_unique<const ClipTokenizer>(ClipTokenizer::load(kVocab))
                          : nullptr;
  return tokenizer.get();
}

class ClipTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = official_tokenizer();
    ASSERT_NE(tokenizer_, nullptr) << kVocab
                                   << " is missing: run scripts/setup.sh to fetch CLIP's "
                                      "vocabulary (from the open_clip_torch wheel)";
  }
  const ClipTokenizer& tokenizer() const { return *tokenizer_; }

 private:
  const ClipTokenizer* tokenizer_ = nullptr;
};

struct GoldenCase {
  std::string prompt;
  std::vector<int64_t> ids, input_ids, attention_mask;
};

std::vector<GoldenCase> golden_cases() {
  std::ifstream in(std::string(CUBE3D_TEST_DATA_DIR) + "/model/clip_tokens.json");
  const nlohmann::json json = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : json.at("cases")) {
    cases.push_back({c.at("prompt").get<std::string>(), c.at("ids").get<std::vector<int64_t>>(),
                     c.at("input_ids_77").get<std::vector<int64_t>>(),
                     c.at("attention_mask_77").get<std::vector<int64_t>>()});
  }
  return cases;
}

// Prompts beyond the golden ones, for comparisons between two tokenizers.
const std::vector<std::string> kExtraPrompts = {
    "a wooden chair with four legs", "ΟΔΥΣΣΕΥΣ and İstanbul", "&copy2024 AT&T &#x1F409;",
    "<|endoftext|><|startoftext|>",  "x\u0345y \u017f's",     "tab\tnew\nline\u3000ideographic"};

using testing::expect_error;
using testing::TempDir;

std::string read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Writes the tokenizer's tables in Hugging Face's CLIPTokenizer layout.
void write_hugging_face_folder(const ClipTokenizer& tokenizer, TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) vocab[tokenizer.token(id)] = id;
  std::string merges = "#version: 0.2\n";
  for (const auto& [left, right] : tokenizer.merges()) merges += left + " " + right + "\n";
  dir.write("vocab.json", vocab.dump());
  dir.write("merges.txt", merges);
}

// --- the official vocabulary ----------------------------------------------------------------

TEST_F(ClipTokenizerTest, MatchesEveryGoldenCase) {
  const std::vector<GoldenCase> cases = golden_cases();
  ASSERT_GE(cases.size(), 17u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE("prompt: " + c.prompt);
    EXPECT_EQ(tokenizer().encode(c.prompt), c.ids);
    const ClipTokens tokens = tokenizer().tokenize(c.prompt);
    EXPECT_EQ(tokens.input_ids, c.input_ids);
    EXPECT_EQ(tokens.attention_mask, c.attention_mask);
    EXPECT_EQ(tokens.token_count, static_cast<int64_t>(c.ids.size()));
    EXPECT_EQ(tokens.truncated, c.ids.size() > 75u);
  }
}

TEST_F(ClipTokenizerTest, VocabularyLayout) {
  EXPECT_EQ(tokenizer().vocab_size(), 49408);
  EXPECT_EQ(tokenizer().token(0), "!");
  EXPECT_EQ(tokenizer().token(256), "!</w>");
  EXPECT_EQ(tokenizer().token(kClipStartOfText), "<|startoftext|>");
  EXPECT_EQ(tokenizer().token(kClipEndOfText), "<|endoftext|>");
  const auto merges = tokenizer().merges();
  ASSERT_EQ(static_cast<int64_t>(merges.size()), kClipMaxMerges);
  EXPECT_EQ(merges.front(), std::make_pair(std::string("i"), std::string("n")));
  EXPECT_EQ(tokenizer().token(512), "in");  // the first merge's token
  expect_error([&] { tokenizer().token(49408); }, ErrorCode::kInvalidArgument, "49408");
}

// Python regex's IGNORECASE on lower-cased text: long s counts as 's', U+0345 is dropped.
TEST_F(ClipTokenizerTest, CaseInsensitivePatternQuirks) {
  EXPECT_EQ(tokenizer().encode("\u0345"), std::vector<int64_t>{});
  EXPECT_EQ(tokenizer().encode("a\u0345b"), (std::vector<int64_t>{320, 321}));
  EXPECT_EQ(tokenizer().encode("<|\u017ftartoftext|>"),
            (std::vector<int64_t>{27, 91, 129, 123, 2002, 6659, 18169, 91, 285}));
}

TEST_F(ClipTokenizerTest, RejectsInvalidUtf8) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ab\x80", "byte offset 2"},         // lone continuation byte
      {"abc\xE6\x97", "byte offset 3"},    // truncated sequence
      {"\xC0\xAF", "byte offset 0"},       // overlong '/'
      {"x\xED\xA0\x80", "byte offset 1"},  // UTF-16 surrogate
      {"ok \xFF", "byte offset 3"},        // never valid
  };
  for (const auto& [text, offset] : cases) {
    expect_error([&] { tokenizer().tokenize(text); }, ErrorCode::kInvalidArgument,
                 "prompt is not valid UTF-8 (" + offset + ")");
    expect_error([&] { tokenizer().encode(text); }, ErrorCode::kInvalidArgument, offset);
  }
}

TEST_F(ClipTokenizerTest, ReportsTruncation) {
  const auto words = [](int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += i == 0 ? "word" : " word";
    return text;
  };
  const ClipTokens exact = tokenizer().tokenize(words(75));
  EXPECT_FALSE(exact.truncated);
  EXPECT_EQ(exact.token_count, 75);
  EXPECT_EQ(exact.input_ids.back(), kClipEndOfText);
  EXPECT_EQ(exact.attention_mask, std::vector<int64_t>(77, 1));

  const ClipTokens cut = tokenizer().tokenize(words(76));
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.token_count, 76);
  EXPECT_EQ(cut.input_ids, exact.input_ids);

  const ClipTokens long_prompt = tokenizer().tokenize(words(300));
  EXPECT_TRUE(long_prompt.truncated);
  EXPECT_EQ(long_prompt.token_count, 300);
  ASSERT_EQ(long_prompt.input_ids.size(), 77u);
  EXPECT_EQ(long_prompt.input_ids.front(), kClipStartOfText);
  EXPECT_EQ(long_prompt.input_ids[75], 2653);  // "word</w>"
  EXPECT_EQ(long_prompt.input_ids.back(), kClipEndOfText);

  const ClipTokens empty = tokenizer().tokenize("");
  EXPECT_FALSE(empty.truncated);
  EXPECT_EQ(empty.token_count, 0);
  EXPECT_EQ(empty.attention_mask[1], 1);  // EOS
  EXPECT_EQ(empty.attention_mask[2], 0);
}

TEST_F(ClipTokenizerTest, CacheGivesTheSameIdsAgain) {
  for (const GoldenCase& c : golden_cases()) {
    const std::vector<int64_t> first = tokenizer().encode(c.prompt);
    EXPECT_EQ(tokenizer().encode(c.prompt), first) << c.prompt;
    EXPECT_EQ(tokenizer().encode(c.prompt + " " + c.prompt).size(), 2 * first.size()) << c.prompt;
  }
}

// 8 threads share one tokenizer: golden prompts plus enough distinct words (120k) that the
// bounded cache clears its shards while other threads read them.
TEST_F(ClipTokenizerTest, ConcurrentCallsAgree) {
  constexpr int kThreads = 8;
  constexpr int kWordsPerThread = 15000;
  const auto word = [](int index) {
    std::string w;
    for (int v = index + 1; v > 0; v /= 26) w += static_cast<char>('a' + v % 26);
    return w;
  };
  std::vector<std::vector<int64_t>> expected_words(kThreads * kWordsPerThread);
  for (int i = 0; i < kThreads * kWordsPerThread; ++i) {
    expected_words[i] = tokenizer().encode(word(i));
  }
  const std::vector<GoldenCase> cases = golden_cases();

  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const GoldenCase& c : cases) {
          if (tokenizer().tokenize(c.prompt).input_ids != c.input_ids) ++failures[t];
        }
      }
      // Each thread walks all words from its own starting point, so threads hit words that
      // others are inserting or whose shard was just cleared.
      const int total = kThreads * kWordsPerThread;
      for (int k = 0; k < total; k += 3) {
        const int i = (t * kWordsPerThread + k) % total;
        if (tokenizer().encode(word(i)) != expected_words[i]) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// --- the Hugging Face folder format ---------------------------------------------------------

TEST_F(ClipTokenizerTest, HuggingFaceFolderGivesTheSameIds) {
  TempDir dir;
  write_hugging_face_folder(tokenizer(), dir);
  ClipTokenizer loaded = ClipTokenizer::load(dir.path());
  const ClipTokenizer folder = std::move(loaded);  // movable: the cache and tables travel along
  EXPECT_EQ(folder.vocab_size(), tokenizer().vocab_size());
  EXPECT_EQ(folder.merges(), tokenizer().merges());
  for (const GoldenCase& c : golden_cases()) {
    const ClipTokens tokens = folder.tokenize(c.prompt);
    EXPECT_EQ(tokens.input_ids, c.input_ids) << c.prompt;
    EXPECT_EQ(tokens.attention_mask, c.attention_mask) << c.prompt;
  }
  for (const std::string& prompt : kExtraPrompts) {
    EXPECT_EQ(folder.encode(prompt), tokenizer().encode(prompt)) << prompt;
  }
}

// --- small vocabularies and file errors (no official vocabulary needed) ---------------------

TEST(ClipTokenizerFiles, SmallGzipVocabulary) {
  TempDir dir;
  // Header, then two merges: "ca" (id 512) and "cat</w>" (513); specials follow (514, 515).
  const std::string path = dir.write_gzip("small.txt.gz", "header\nc a\nca t</w>\n");
  const ClipTokenizer tokenizer = ClipTokenizer::load(path);
  EXPECT_EQ(tokenizer.vocab_size(), 516);
  EXPECT_EQ(tokenizer.token(513), "cat</w>");
  EXPECT_EQ(tokenizer.encode("Cat"), std::vector<int64_t>{513});
  // 'c' is byte 0x63 -> index 0x63 - '!' in the printable-first alphabet; "a</w>" = 256 + 'a'.
  EXPECT_EQ(tokenizer.encode("ca"), (std::vector<int64_t>{0x63 - 0x21, 256 + 0x61 - 0x21}));
  const ClipTokens tokens = tokenizer.tokenize("cat");
  EXPECT_EQ(tokens.input_ids[0], 514);
  EXPECT_EQ(tokens.input_ids[1], 513);
  EXPECT_EQ(tokens.input_ids[2], 515);
  EXPECT_EQ(tokens.input_ids[76], 515);
}

TEST(ClipTokenizerFiles, MissingFilesAreNotFound) {
  const std::string missing = "/nonexistent/cube3d/bpe_simple_vocab_16e6.txt.gz";
  expect_error([&] { ClipTokenizer::load(missing); }, ErrorCode::kNotFound, missing);
  TempDir dir;
  expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kNotFound,
               dir.path() + "/vocab.json");
  dir.write("vocab.json", "{}");
  expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kNotFound,
               dir.path() + "/merges.txt");
}

TEST(ClipTokenizerFiles, BadGzipIsInvalid) {
  TempDir dir;
  const std::string plain = dir.write("plain.txt.gz", "header\ni n\n");
  expect_error([&] { ClipTokenizer::load(plain); }, ErrorCode::kInvalidArgument,
               plain + ": not a gzip file");
  if (file_exists(kVocab)) {
    const std::string cut = dir.write("cut.txt.gz", read_binary(kVocab).substr(0, 5000));
    expect_error([&] { ClipTokenizer::load(cut); }, ErrorCode::kInvalidArgument, cut);
  }
}

TEST(ClipTokenizerFiles, MalformedMergesAreInvalid) {
  TempDir dir;
  const std::string three = dir.write_gzip("three.txt.gz", "header\ni n\na b c\n");
  expect_error([&] { ClipTokenizer::load(three); }, ErrorCode::kInvalidArgument,
               three + ": line 3: malformed merge");
  const std::string blank = dir.write_gzip("blank.txt.gz", "header\n\ni n\n");
  expect_error([&] { ClipTokenizer::load(blank); }, ErrorCode::kInvalidArgument,
               blank + ": line 2: malformed merge");
  const std::string unknown = dir.write_gzip("unknown.txt.gz", "header\nxy z\n");
  expect_error([&] { ClipTokenizer::load(unknown); }, ErrorCode::kInvalidArgument,
               unknown + ": line 2: 'xy' is not in the vocabulary");
}

// A Hugging Face folder holding the 512 byte symbols and the special tokens, plus extras.
nlohmann::json byte_level_vocab() {
  nlohmann::json vocab = nlohmann::json::object();
  int64_t id = 0;
  std::vector<std::string> symbols;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) continue;
    std::string s;
    if (b < 0x80) {
      s += static_cast<char>(b);
    } else {
      s += static_cast<char>(0xC0 | (b >> 6));
      s += static_cast<char>(0x80 | (b & 0x3F));
    }
    symbols.push_back(s);
  }
  for (int n = 0; n < 68; ++n) {  // the other bytes map to U+0100 + n
    const int cp = 256 + n;
    symbols.push_back({static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))});
  }
  for (const std::string& s : symbols) vocab[s] = id++;
  for (const std::string& s : symbols) vocab[s + "</w>"] = id++;
  vocab["<|startoftext|>"] = id++;
  vocab["<|endoftext|>"] = id++;
  return vocab;
}

TEST(ClipTokenizerFiles, HuggingFaceFolderErrors) {
  {
    TempDir dir;
    dir.write("vocab.json", R"({"a": 0, "b": 2})");
    dir.write("merges.txt", "#version: 0.2\n");
    expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kInvalidArgument,
                 dir.path() + "/vocab.json: no token has id 1");
  }
  {
    TempDir dir;
    dir.write("vocab.json", R"({"a": 0, "b": 0})");
    dir.write("merges.txt", "#version: 0.2\n");
    expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kInvalidArgument,
                 "id 0 is used by");
  }
  {
    TempDir dir;
    dir.write("vocab.json", "[1, 2]");
    dir.write("merges.txt", "#version: 0.2\n");
    expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kInvalidArgument,
                 dir.path() + "/vocab.json: expected a JSON object");
  }
  {
    TempDir dir;
    nlohmann::json vocab = byte_level_vocab();
    vocab.erase("<|endoftext|>");
    dir.write("vocab.json", vocab.dump());
    dir.write("merges.txt", "#version: 0.2\n");
    expect_error(
        [&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kInvalidArgument,
        dir.path() + "/vocab.json: special token '<|endoftext|>' is not in the vocabulary");
  }
  {
    TempDir dir;
    dir.write("vocab.json", byte_level_vocab().dump());
    dir.write("merges.txt", "#version: 0.2\nh i\n");  // "hi" has no id
    expect_error([&] { ClipTokenizer::load(dir.path()); }, ErrorCode::kInvalidArgument,
                 dir.path() + "/merges.txt: line 2: 'hi' is not in the vocabulary");
  }
  {
    TempDir dir;
    nlohmann::json vocab = byte_level_vocab();
    const size_t next_id = vocab.size();
    vocab["hi</w>"] = next_id;
    dir.write("vocab.json", vocab.dump());
    dir.write("merges.txt", "#version: 0.2\nh i</w>\n");
    const ClipTokenizer tokenizer = ClipTokenizer::load(dir.path());
    EXPECT_EQ(tokenizer.encode("HI"), std::vector<int64_t>{514});
    EXPECT_EQ(tokenizer.tokenize("hi").input_ids[0], 512);  // '<|startoftext|>' here
  }
}

}  // namespace test_clip_tokenizer
}  // namespace cube3d
