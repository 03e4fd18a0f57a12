// CLIP's BPE vocabulary on disk: finding it and reading it. Two layouts hold the same tables:
// OpenAI's bpe_simple_vocab_16e6.txt.gz (gzip; a header line, then one merge per line; token ids
// implied by the order) and a Hugging Face CLIPTokenizer folder (vocab.json: token -> id, and
// merges.txt). Kept apart from the BPE (clip_tokenizer) so that file formats, their error
// messages and the search order can change and be tested without touching the encoder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cube3d {

inline constexpr std::string_view kClipVocabFileName = "bpe_simple_vocab_16e6.txt.gz";
inline constexpr std::string_view kClipStartOfTextToken = "<|startoftext|>";
inline constexpr std::string_view kClipEndOfTextToken = "<|endoftext|>";
inline constexpr std::string_view kClipEndOfWord = "</w>";  // suffix of a word's last symbol
// The official code (and the old Hugging Face tokenizer) use only the first
// 49152 - 256 - 2 merges of the file.
inline constexpr int64_t kClipMaxMerges = 49152 - 256 - 2;

// bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order; each symbol as UTF-8. The order (printable ones first) is the
// vocabulary's: ids 0..255 are these symbols, 256..511 the same with '</w>'.
std::vector<std::pair<uint8_t, std::string>> clip_byte_symbols();

// A vocabulary as read, not yet checked against itself (the tokenizer checks that every byte
// symbol, special token and merge result has an id, naming the file and line).
struct ClipVocab {
  std::string tokens_file;          // the file that numbers the tokens (.gz or vocab.json)
  std::vector<std::string> tokens;  // id -> token, in the byte-level alphabet
  std::string merges_file;          // the file that lists the merges (.gz or merges.txt)
  size_t first_merge_line = 0;      // index (from 0) of the first merge's line there
  std::vector<std::pair<std::string, std::string>> merges;  // rank order, <= kClipMaxMerges
};

// path: bpe_simple_vocab_16e6.txt.gz, or a folder with vocab.json and merges.txt. Throws
// not_found for a missing file and invalid_argument for a malformed one (not gzip, truncated,
// not UTF-8, a malformed merge line, vocab.json ids that do not number the tokens 0..N-1, a file
// over 64 MiB), each message naming the file (and line or token).
ClipVocab read_clip_vocab(const std::string& path);

// Where the CLIP vocabulary is, in this order:
//   1. `requested`, when not empty (returned unchecked: loading names a missing file);
//   2. $CUBE3D_CLIP_VOCAB, when set and not empty (also unchecked);
//   3. `model_folder`, when it holds vocab.json and merges.txt (a Hugging Face CLIP folder);
//   4. relative to the running executable's folder (readlink /proc/self/exe), or to `exe_dir`
//      when given: <exe_dir>/../share/cube3d/bpe_simple_vocab_16e6.txt.gz (an install), then
//      <exe_dir>/../../.cache/clip/bpe_simple_vocab_16e6.txt.gz (a build folder directly under
//      the repository root, where scripts/setup.sh puts it: build/bin, build-gpu/bin).
// Nothing is compiled in. Throws not_found listing every place tried when none has it.
std::string resolve_clip_vocab(const std::string& requested, const std::string& model_folder = {},
                               const std::optional<std::string>& exe_dir = std::nullopt);

}  // namespace cube3d
