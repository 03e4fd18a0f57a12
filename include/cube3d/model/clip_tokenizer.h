// CLIP's byte-level BPE tokenizer (OpenAI simple_tokenizer semantics, Hugging Face padding):
// text -> the 77 input ids and attention mask that the CLIP text encoder takes.
//
// Text clean-up, as the official code does it (with ftfy.fix_text taken as the identity):
//   html.unescape twice, strip, fold whitespace runs to one space, strip, Python str.lower(),
//   split with CLIP's pattern (RE2, Unicode letter and number classes), then BPE each piece.
// Known limits, all outside what prompts normally hold:
//   - HTML unescaping knows the HTML 4 named entities (every legacy name that HTML 5 accepts
//     without ';' included) plus &apos;, and every numeric form &#NN; / &#xHH; with Python's
//     replacement rules. HTML-5-only names such as &NewLine; or &check; stay as text.
//   - Lower-casing is CPython 3.11's (Unicode 14) table, final sigma included; letter and number
//     classes are RE2's tables. Characters assigned after Unicode 14 may split differently from
//     a newer Python `regex` module (every code point assigned in Unicode 14 was checked).
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
  std::vector<int64_t> input_ids;       // kContextLength: BOS, text, EOS, then EOS padding
  std::vector<int64_t> attention_mask;  // 1 on BOS, the text and the first EOS; 0 on padding
  int64_t token_count = 0;              // BPE tokens of the whole text (before truncation)
  bool truncated = false;               // token_count > kMaxTextTokens: the text was cut
};

// Immutable after load except for an internal, bounded BPE cache: every const method may be
// called from many threads at once.
class ClipTokenizer {
 public:
  static constexpr int64_t kContextLength = 77;
  static constexpr int64_t kMaxTextTokens = kContextLength - 2;  // room left by BOS and EOS
  static constexpr int64_t kBos = 49406;                         // '<|startoftext|>'
  static constexpr int64_t kEos = 49407;                         // '<|endoftext|>'
  // The official code (and the old Hugging Face tokenizer) use only the first
  // 49152 - 256 - 2 merges of the file.
  static constexpr int64_t kMaxMerges = 49152 - 256 - 2;

  // path: CLIP's bpe_simple_vocab_16e6.txt.gz (gzip), or a Hugging Face tokenizer folder with
  // vocab.json and merges.txt. Throws not_found for a missing file and invalid_argument for a
  // malformed one, naming the file (and line or token).
  static ClipTokenizer load(const std::string& path);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // The BPE ids of the text, without BOS / EOS and untruncated. Throws invalid_argument
  // "prompt is not valid UTF-8 (byte offset N)".
  std::vector<int64_t> encode(std::string_view text) const;
  // encode(), then BOS + at most kMaxTextTokens ids + EOS, padded with EOS to kContextLength.
  ClipTokens tokenize(std::string_view text) const;

  int64_t vocab_size() const;
  // Id -> token string in the byte-level alphabet ('</w>' marks a word end), as in vocab.json.
  const std::string& token(int64_t id) const;
  // The merges in rank order, as merges.txt lists them.
  std::vector<std::pair<std::string, std::string>> merges() const;

  // The cleaned, lower-cased text that the pre-tokenizer splits (exposed for tests).
  static std::string normalize(std::string_view text);

 private:
  struct Impl;
  explicit ClipTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
