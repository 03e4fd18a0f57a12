// Prompt text -> CLIP last hidden states, as the shape GPT is conditioned on: the tokenizer and
// the CLIP text transformer together. The empty prompt's encoding (the unconditional input of
// classifier-free guidance) is computed once at load and reused.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cube3d/model/clip_text_model.h"
#include "cube3d/model/clip_tokenizer.h"

namespace cube3d {

struct EncodedPrompt {
  at::Tensor hidden;        // [77, hidden] float32
  bool truncated = false;   // the prompt had more than 75 tokens and was cut
  int64_t token_count = 0;  // BPE tokens of the text before truncation (no BOS/EOS)
};

class TextEncoder {
 public:
  TextEncoder(ClipTokenizer tokenizer, ClipTextModel model);

  // The CLIP vocabulary: resolve_clip_vocab(vocab, clip_model) (model/clip_vocab.h): `vocab`
  // if set, else $CUBE3D_CLIP_VOCAB, else the folder's vocab.json + merges.txt when `clip_model`
  // has them, else the copy beside the executable (an install's share/cube3d/, or the .cache/clip/
  // that scripts/setup.sh fills for build folders under the repository root).
  static std::string resolve_vocab(const std::string& vocab, const std::string& clip_model);

  int64_t hidden_size() const { return model_.config().hidden_size; }

  // Thread-safe. Throws invalid_argument for a prompt that is not valid UTF-8.
  std::vector<EncodedPrompt> encode(const std::vector<std::string>& prompts) const;
  const at::Tensor& empty_prompt() const { return empty_prompt_; }

 private:
  ClipTokenizer tokenizer_;
  ClipTextModel model_;
  at::Tensor empty_prompt_;
};

}  // namespace cube3d
