// TextEncoder: CLIP's tokenizer (the official vocabulary) feeding a small random CLIP text model
// on the CPU. Checks shapes, the cached empty-prompt encoding, agreement with the model run by
// hand on the tokenizer's ids, truncation reporting, batching, invalid UTF-8, concurrent use,
// and the order in which resolve_vocab picks a vocabulary. Temporary folders come from mkdtemp
// (POSIX, not std::filesystem: libtorch exports its own std::filesystem symbols).
#include "cube3d/engine/text_encoder.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/model/clip_text_model.h"
#include "cube3d/model/clip_tokenizer.h"
#include "scoped_env.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_text_encoder {

const std::string kVocab =
    std::string(CUBE3D_SOURCE_DIR) + "/.cache/clip/bpe_simple_vocab_16e6.txt.gz";
constexpr const char* kMissingVocab =
    " is missing: run scripts/setup.sh to fetch CLIP's vocabulary (from the open_clip_torch "
    "wheel)";
constexpr int64_t kHidden = 32;
constexpr uint64_t kSeed = 1234;

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

ClipTextConfig small_config() {
  ClipTextConfig config;
  config.vocab_size = 49408;
  config.hidden_size = kHidden;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  config.max_position_embeddings = 77;
  return config;
}

ClipTextModel small_model() { return ClipTextModel::random(small_config(), kSeed, at::kCPU); }

// The official vocabulary is slow to load: one tokenizer for the hand-made reference and one
// encoder (which owns its own tokenizer) for the whole binary. Null when the vocabulary is
// missing.
const ClipTokenizer* reference_tokenizer() {
  static const std::unique_ptr<const ClipTokenizer> tokenizer =
      file_exists(kVocab) ? std::make_unique<const ClipTokenizer>(ClipTokenizer::load(kVocab))
                          : nullptr;
  return tokenizer.get();
}

const TextEncoder* shared_encoder() {
  static const std::unique_ptr<const TextEncoder> encoder =
      file_exists(kVocab)
          ? std::make_unique<const TextEncoder>(ClipTokenizer::load(kVocab), small_model())
          : nullptr;
  return encoder.get();
}

class TextEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(file_exists(kVocab)) << kVocab << kMissingVocab;
    encoder_ = shared_encoder();
    tokenizer_ = reference_tokenizer();
    ASSERT_NE(encoder_, nullptr);
    ASSERT_NE(tokenizer_, nullptr);
  }
  const TextEncoder& encoder() const { return *encoder_; }
  const ClipTokenizer& tokenizer() const { return *tokenizer_; }

  // The model run by hand on the tokenizer's 77 ids and mask: [77, hidden].
  at::Tensor by_hand(const std::string& prompt) const {
    const ClipTokens tokens = tokenizer().tokenize(prompt);
    const at::Tensor ids = at::tensor(tokens.input_ids, at::kLong).view({1, -1});
    const at::Tensor mask = at::tensor(tokens.attention_mask, at::kLong).view({1, -1});
    return small_model().forward(ids, mask)[0];
  }

 private:
  const TextEncoder* encoder_ = nullptr;
  const ClipTokenizer* tokenizer_ = nullptr;
};

std::string max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return std::to_string((a - b).abs().max().item<double>());
}

std::string many_words(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    if (i > 0) text += ' ';
    text += "chair";
  }
  return text;
}

using testing::ScopedEnv;

using testing::TempDir;

// --- encoding -----------------------------------------------------------------------------------

TEST_F(TextEncoderTest, EncodesEachPromptTo77ByHiddenFloat32) {
  EXPECT_EQ(encoder().hidden_size(), kHidden);
  const std::vector<EncodedPrompt> out = encoder().encode({"a chair", ""});
  ASSERT_EQ(out.size(), 2u);
  for (const EncodedPrompt& e : out) {
    ASSERT_TRUE(e.hidden.defined());
    EXPECT_EQ(e.hidden.sizes(), (at::IntArrayRef{77, kHidden}));
    EXPECT_EQ(e.hidden.scalar_type(), at::kFloat);
    EXPECT_TRUE(e.hidden.device().is_cpu());
    EXPECT_TRUE(e.hidden.isfinite().all().item<bool>());
  }
  EXPECT_FALSE(out[0].truncated);
  EXPECT_EQ(out[0].token_count, 2);  // "a", "chair"
  EXPECT_FALSE(out[1].truncated);
  EXPECT_EQ(out[1].token_count, 0);
  EXPECT_FALSE(at::equal(out[0].hidden, out[1].hidden));
}

TEST_F(TextEncoderTest, NoPromptsGiveNoEncodings) { EXPECT_TRUE(encoder().encode({}).empty()); }

TEST_F(TextEncoderTest, EmptyPromptIsComputedOnceAtConstruction) {
  const at::Tensor& empty = encoder().empty_prompt();
  ASSERT_TRUE(empty.defined());
  EXPECT_EQ(empty.sizes(), (at::IntArrayRef{77, kHidden}));
  EXPECT_EQ(empty.scalar_type(), at::kFloat);
  // The same tensor every time, not a recomputation.
  EXPECT_TRUE(encoder().empty_prompt().is_same(empty));
}

TEST_F(TextEncoderTest, EncodingOfTheEmptyPromptEqualsEmptyPromptExactly) {
  const at::Tensor alone = encoder().encode({""}).front().hidden;
  EXPECT_TRUE(at::equal(alone, encoder().empty_prompt()))
      << "max abs diff " << max_abs_diff(alone, encoder().empty_prompt());
  const std::vector<EncodedPrompt> batch = encoder().encode({"a chair", ""});
  EXPECT_TRUE(at::equal(batch[1].hidden, encoder().empty_prompt()))
      << "max abs diff " << max_abs_diff(batch[1].hidden, encoder().empty_prompt());
}

TEST_F(TextEncoderTest, EmptyPromptEqualsTheModelRunByHand) {
  const at::Tensor expected = by_hand("");
  EXPECT_TRUE(at::equal(encoder().empty_prompt(), expected))
      << "max abs diff " << max_abs_diff(encoder().empty_prompt(), expected);
}

TEST_F(TextEncoderTest, EncodingEqualsTheModelRunByHandOnTheTokenizersIds) {
  const std::vector<std::string> prompts = {"a chair", "a photo of a cat",
                                            "A Modern Sofa, with cushions!", many_words(100)};
  for (const std::string& prompt : prompts) {
    SCOPED_TRACE(prompt);
    const at::Tensor ours = encoder().encode({prompt}).front().hidden;
    const at::Tensor expected = by_hand(prompt);
    EXPECT_TRUE(at::equal(ours, expected)) << "max abs diff " << max_abs_diff(ours, expected);
  }
}

TEST_F(TextEncoderTest, DifferentPromptsGiveDifferentEncodings) {
  const std::vector<EncodedPrompt> out = encoder().encode({"a chair", "a table"});
  EXPECT_FALSE(at::allclose(out[0].hidden, out[1].hidden));
}

TEST_F(TextEncoderTest, LongPromptIsReportedTruncated) {
  const std::vector<EncodedPrompt> out = encoder().encode({many_words(300), "a short prompt"});
  EXPECT_TRUE(out[0].truncated);
  EXPECT_GT(out[0].token_count, kClipMaxPromptTokens);
  EXPECT_EQ(out[0].token_count, tokenizer().tokenize(many_words(300)).token_count);
  EXPECT_FALSE(out[1].truncated);
  EXPECT_EQ(out[1].token_count, 3);
}

TEST_F(TextEncoderTest, PromptOfExactly75TokensIsNotTruncated) {
  const std::vector<EncodedPrompt> out = encoder().encode({many_words(75), many_words(76)});
  EXPECT_EQ(out[0].token_count, 75);
  EXPECT_FALSE(out[0].truncated);
  EXPECT_EQ(out[1].token_count, 76);
  EXPECT_TRUE(out[1].truncated);
}

TEST_F(TextEncoderTest, BatchEqualsPromptsEncodedOneAtATime) {
  const std::vector<std::string> prompts = {"a chair", "a red sports car with big wheels",
                                            many_words(200)};
  const std::vector<EncodedPrompt> batch = encoder().encode(prompts);
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    const EncodedPrompt single = encoder().encode({prompts[i]}).front();
    EXPECT_TRUE(at::allclose(batch[i].hidden, single.hidden, /*rtol=*/0, /*atol=*/1e-6))
        << "max abs diff " << max_abs_diff(batch[i].hidden, single.hidden);
    EXPECT_EQ(batch[i].truncated, single.truncated);
    EXPECT_EQ(batch[i].token_count, single.token_count);
  }
}

TEST_F(TextEncoderTest, InvalidUtf8IsRejected) {
  const std::vector<std::string> bad_prompts = {"chair \x80", "\xe6\xa4", "\xff\xfe"};
  for (const std::string& bad : bad_prompts) {
    SCOPED_TRACE(::testing::PrintToString(bad));
    try {
      encoder().encode({"a valid prompt", bad});
      ADD_FAILURE() << "invalid UTF-8 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TextEncoderTest, ConcurrentEncodingGivesIdenticalResults) {
  const std::vector<std::string> prompts = {"a chair", "a wooden table", "", many_words(90)};
  const std::vector<EncodedPrompt> expected = encoder().encode(prompts);
  constexpr int kThreads = 4;
  constexpr int kRounds = 5;
  std::vector<std::vector<std::vector<EncodedPrompt>>> results(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRounds; ++r) results[t].push_back(encoder().encode(prompts));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[t], "") << "thread " << t;
    ASSERT_EQ(results[t].size(), static_cast<size_t>(kRounds));
    for (const std::vector<EncodedPrompt>& round : results[t]) {
      ASSERT_EQ(round.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_TRUE(at::equal(round[i].hidden, expected[i].hidden))
            << "thread " << t << ", prompt " << i << ": max abs diff "
            << max_abs_diff(round[i].hidden, expected[i].hidden);
        EXPECT_EQ(round[i].truncated, expected[i].truncated);
        EXPECT_EQ(round[i].token_count, expected[i].token_count);
      }
    }
  }
}

// --- resolve_vocab ------------------------------------------------------------------------------

class TextEncoderResolveVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(folder_.path().empty()) << "mkdtemp failed";
    folder_.write("vocab.json", "");
    folder_.write("merges.txt", "");
  }
  // A Hugging Face tokenizer folder: vocab.json and merges.txt (empty, enough for resolving).
  const std::string& hf_folder() const { return folder_.path(); }

 private:
  TempDir folder_;
};

TEST_F(TextEncoderResolveVocabTest, ExplicitPathWinsOverEverything) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "/from/the/environment.txt.gz");
  EXPECT_EQ(TextEncoder::resolve_vocab("/explicit/vocab.txt.gz", hf_folder()),
            "/explicit/vocab.txt.gz");
}

TEST_F(TextEncoderResolveVocabTest, ExplicitPathIsReturnedEvenWhenMissing) {
  // Resolution does not check it: loading reports the missing file with its name.
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(TextEncoder::resolve_vocab("/no/such/vocab.txt.gz", ""), "/no/such/vocab.txt.gz");
}

TEST_F(TextEncoderResolveVocabTest, EnvironmentWinsOverTheModelFolderAndTheDefault) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "/from/the/environment.txt.gz");
  EXPECT_EQ(TextEncoder::resolve_vocab("", hf_folder()), "/from/the/environment.txt.gz");
  EXPECT_EQ(TextEncoder::resolve_vocab("", ""), "/from/the/environment.txt.gz");
}

TEST_F(TextEncoderResolveVocabTest, EmptyEnvironmentVariableIsIgnored) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", "");
  EXPECT_EQ(TextEncoder::resolve_vocab("", hf_folder()), hf_folder());
}

TEST_F(TextEncoderResolveVocabTest, ModelFolderWithVocabAndMergesWinsOverTheDefault) {
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(TextEncoder::resolve_vocab("", hf_folder()), hf_folder());
}

TEST_F(TextEncoderResolveVocabTest, DefaultPathWhenNothingElseIsGiven) {
  ASSERT_TRUE(file_exists(kVocab)) << kVocab << kMissingVocab;
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  EXPECT_EQ(TextEncoder::resolve_vocab("", ""), kVocab);
}

TEST_F(TextEncoderResolveVocabTest, FolderWithoutMergesFallsBackToTheDefault) {
  ASSERT_TRUE(file_exists(kVocab)) << kVocab << kMissingVocab;
  const ScopedEnv env("CUBE3D_CLIP_VOCAB", nullptr);
  TempDir partial;
  ASSERT_FALSE(partial.path().empty()) << "mkdtemp failed";
  partial.write("vocab.json", "");
  EXPECT_EQ(TextEncoder::resolve_vocab("", partial.path()), kVocab);
}

}  // namespace test_text_encoder
}  // namespace cube3d
