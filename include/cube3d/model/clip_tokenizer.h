// CLIP's byte-level BPE tokenizer (OpenAI simple_tokenizer semantics, Hugging Face padding):
// text -> the 77 input ids and attention mask that the CLIP text encoder takes.
//
// The steps, as the official code does them: the text clean-up (clip_text_normalizer.h:
// html.unescape twice, strip, fold white space, Python str.lower()), then a split with CLIP's
// pattern (RE2, Unicode letter and number classes), then BPE on each piece. The vocabulary files
// are read by clip_vocab.h; the lengths and special ids are core/constants.h's kClip* ones.
// Known limits, all outside what prompts normally hold:
//   - The clean-up's own limits (HTML-5-only entity names, Unicode 14 case tables): see
//     clip_html_unescape.h and clip_lower_case.h. Letter and number classes are RE2's tables:
//     characters assigned after Unicode 14 may split differently from a newer Python `regex`
//     module (every code point assigned in Unicode 14 was checked).
//   - BPE cost grows with the square of a word's length (about 2 s for one 64 KiB word):
//     callers bound prompt sizes (the server's limits.max_prompt_bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cube3d {

struct ClipTokens {
  std::vector<int64_t> input_ids;       // kClipContextLength: BOS, text, EOS, then EOS padding
  std::vector<int64_t> attention_mask;  // 1 on BOS, the text and the first EOS; 0 on padding
  int64_t token_count = 0;              // BPE tokens of the whole text (before truncation)
  bool truncated = false;               // token_count > kClipMaxPromptTokens: the text was cut
};

// Immutable after load except for an internal, bounded BPE cache: every const method may be
// called from many threads at once.
class ClipTokenizer {
 public:
  // path: CLIP's bpe_simple_vocab_16e6.txt.gz (gzip), or a Hugging Face tokenizer folder with
  // vocab.json and merges.txt (see read_clip_vocab). Throws not_found for a missing file and
  // invalid_argument for a malformed one, naming the file (and line or token).
  static ClipTokenizer load(const std::string& path);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // The BPE ids of the text, without BOS / EOS and untruncated. Throws invalid_argument
  // "prompt is not valid UTF-8 (byte offset N)".
  std::vector<int64_t> encode(std::string_view text) const;
  // encode(), then BOS + at most kClipMaxPromptTokens ids + EOS, padded with EOS to
  // kClipContextLength. BOS and EOS are the vocabulary's special tokens (kClipStartOfText and
  // kClipEndOfText in the official one).
  ClipTokens tokenize(std::string_view text) const;

  int64_t vocab_size() const;
  // Id -> token string in the byte-level alphabet ('</w>' marks a word end), as in vocab.json.
  const std::string& token(int64_t id) const;
  // The merges in rank order, as merges.txt lists them.
  std::vector<std::pair<std::string, std::string>> merges() const;

 private:
  struct Impl;
  explicit ClipTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
