#include "cube3d/engine/text_encoder.h"

#include <ATen/ATen.h>

#include <utility>

#include "cube3d/core/constants.h"
#include "cube3d/model/clip_vocab.h"

namespace cube3d {

TextEncoder::TextEncoder(ClipTokenizer tokenizer, ClipTextModel model)
    : tokenizer_(std::move(tokenizer)), model_(std::move(model)) {
  empty_prompt_ = encode({""}).front().hidden;
}

std::string TextEncoder::resolve_vocab(const std::string& vocab, const std::string& clip_model) {
  return resolve_clip_vocab(vocab, clip_model);
}

std::vector<EncodedPrompt> TextEncoder::encode(const std::vector<std::string>& prompts) const {
  std::vector<EncodedPrompt> out;
  if (prompts.empty()) return out;
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int64_t len = kClipContextLength;
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
