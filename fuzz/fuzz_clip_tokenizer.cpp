// Fuzzes the CLIP tokenizer on arbitrary bytes as a prompt: text clean-up (HTML unescape, white
// space, lower case), the RE2 split and BPE. Valid UTF-8 must tokenize; anything else must be
// refused with invalid_argument; the 77 ids and the mask must have Hugging Face's layout.
//
// The vocabulary is CLIP's own (scripts/setup.sh puts it in .cache/clip; $CUBE3D_CLIP_VOCAB
// overrides), loaded once: loading takes far longer than tokenizing one input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/utf8.h"
#include "cube3d/model/clip_tokenizer.h"
#include "cube3d/model/clip_vocab.h"
#include "fuzz_support.h"

namespace {

std::unique_ptr<cube3d::ClipTokenizer> tokenizer;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("CUBE3D_CLIP_VOCAB");
  const std::string path = env != nullptr && *env != '\0'
                               ? std::string(env)
                               : std::string(CUBE3D_SOURCE_DIR) + "/.cache/clip/" +
                                     std::string(cube3d::kClipVocabFileName);
  try {
    tokenizer = std::make_unique<cube3d::ClipTokenizer>(cube3d::ClipTokenizer::load(path));
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "fuzz_clip_tokenizer: cannot load the CLIP vocabulary (run "
                 "scripts/setup.sh, or set CUBE3D_CLIP_VOCAB): %s\n",
                 e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid_utf8 = !cube3d::find_invalid_utf8(text).has_value();
  cube3d::ClipTokens tokens;
  try {
    tokens = tokenizer->tokenize(text);
  } catch (const cube3d::Error& e) {
    if (valid_utf8) cube3d::fuzz::fail("valid UTF-8 was refused", e.what());
    CUBE3D_FUZZ_CHECK(e.code() == cube3d::ErrorCode::kInvalidArgument,
                      "invalid UTF-8 refused with a code other than invalid_argument");
    return 0;
  }
  CUBE3D_FUZZ_CHECK(valid_utf8, "invalid UTF-8 was tokenized");

  const int64_t n = cube3d::kClipContextLength;
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(tokens.input_ids.size()) == n, "input_ids length");
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(tokens.attention_mask.size()) == n,
                    "attention_mask length");
  CUBE3D_FUZZ_CHECK(tokens.input_ids[0] == cube3d::kClipStartOfText, "first id is not BOS");
  const int64_t kept = std::min(tokens.token_count, cube3d::kClipMaxPromptTokens);
  CUBE3D_FUZZ_CHECK(tokens.truncated == (tokens.token_count > cube3d::kClipMaxPromptTokens),
                    "truncated flag");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = tokens.input_ids[i];
    CUBE3D_FUZZ_CHECK(id >= 0 && id < tokenizer->vocab_size(), "an id outside the vocabulary");
    CUBE3D_FUZZ_CHECK(tokens.attention_mask[i] == (i < kept + 2 ? 1 : 0), "attention mask");
    if (i > kept) CUBE3D_FUZZ_CHECK(id == cube3d::kClipEndOfText, "EOS and padding");
  }
  // The untruncated ids agree with the count, and the second run (through the BPE cache) with
  // the first.
  const std::vector<int64_t> ids = tokenizer->encode(text);
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(ids.size()) == tokens.token_count, "token_count");
  CUBE3D_FUZZ_CHECK(std::equal(ids.begin(), ids.begin() + kept, tokens.input_ids.begin() + 1),
                    "encode() and tokenize() disagree (BPE cache?)");
  return 0;
}
