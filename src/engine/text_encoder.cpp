#include "cube3d/engine/text_encoder.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cstdlib>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

TextEncoder::TextEncoder(ClipTokenizer tokenizer, ClipTextModel model)
    : tokenizer_(std::move(tokenizer)), model_(std::move(model)) {
  empty_prompt_ = encode({""}).front().hidden;
}

std::string TextEncoder::resolve_vocab(const std::string& vocab, const std::string& clip_model) {
  if (!vocab.empty()) return vocab;
  if (const char* env = std::getenv("CUBE3D_CLIP_VOCAB"); env && *env) return env;
  if (!clip_model.empty() && exists(clip_model + "/vocab.json") &&
      exists(clip_model + "/merges.txt")) {
    return clip_model;
  }
#ifdef CUBE3D_DEFAULT_CLIP_VOCAB
  if (exists(CUBE3D_DEFAULT_CLIP_VOCAB)) return CUBE3D_DEFAULT_CLIP_VOCAB;
#endif
  throw not_found(
      "no CLIP vocabulary: pass clip_vocab (bpe_simple_vocab_16e6.txt.gz or a Hugging Face "
      "folder with vocab.json + merges.txt), set CUBE3D_CLIP_VOCAB, or run scripts/setup.sh");
}

std::vector<EncodedPrompt> TextEncoder::encode(const std::vector<std::string>& prompts) const {
  std::vector<EncodedPrompt> out;
  if (prompts.empty()) return out;
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int64_t len = ClipTokenizer::kContextLength;
  std::vector<int64_t> ids, mask;
  ids.reserve(static_cast<size_t>(n * len));
  mask.reserve(static_cast<size_t>(n * len));
  for (const auto& prompt : prompts) {
    const ClipTokens tokens = tokenizer_.tokenize(prompt);
    ids.insert(ids.end(), tokens.input_ids.begin(), tokens.input_ids.end());
    mask.insert(mask.end(), tokens.attention_mask.begin(), tokens.attention_mask.end());
    out.push_back({at::Tensor(), tokens.truncated, tokens.token_count});
  }
  const at::Tensor hidden = model_.forward(at::tensor(ids, at::kLong).view({n, len}),
                                           at::tensor(mask, at::kLong).view({n, len}));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)].hidden = hidden[i];
  return out;
}

}  // namespace cube3d
