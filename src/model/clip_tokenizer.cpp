// CLIP's BPE tokenizer: RE2 for the pre-tokenizer pattern, byte-level BPE over integer symbol
// ids, a sharded, bounded cache, and Hugging Face's truncation and padding. The text clean-up
// before it is clip_text_normalizer; reading the vocabulary files is clip_vocab.
// Python reference point: SimpleTokenizer.bpe / encode in clip/simple_tokenizer.py.
#include "cube3d/model/clip_tokenizer.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/model/clip_text_normalizer.h"
#include "cube3d/model/clip_vocab.h"

namespace cube3d {

struct ClipTokenizer::Impl {
  std::string source;                                   // the vocabulary path, for messages
  std::vector<std::string> tokens;                      // id -> token
  std::unordered_map<std::string, int32_t> ids;         // token -> id (the last id of a repeated
                                                        // token wins, as in a Python dict)
  std::vector<std::pair<int32_t, int32_t>> merge_list;  // rank order
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> ranks;  // (left id, right id) -> merge
  std::array<int32_t, 256> byte_ids{};        // byte -> id of its symbol inside a word
  std::array<int32_t, 256> byte_end_ids{};    // byte -> id of its symbol + '</w>' (word end)
  int32_t start_of_text = 0;
  int32_t end_of_text = 0;

  // Sharded so that many request threads rarely wait on one lock; each shard is cleared when
  // full, which bounds the memory whatever the prompts.
  static constexpr size_t kShards = 16;
  static constexpr size_t kCacheEntries = 100000;
  static constexpr size_t kMaxCachedWordBytes = 256;  // longer words are rare: not worth keeping
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  mutable std::array<Shard, kShards> cache;

  // The BPE tables of a vocabulary as read; checks that every byte symbol, special token and
  // merge (left, right and result) has an id, naming the file and line at fault.
  explicit Impl(ClipVocab vocab) : source(std::move(vocab.tokens_file)) {
    tokens = std::move(vocab.tokens);
    for (size_t id = 0; id < tokens.size(); ++id) {
      ids.insert_or_assign(tokens[id], static_cast<int32_t>(id));
    }
    for (const auto& [byte, symbol] : clip_byte_symbols()) {
      byte_ids[byte] = id_of(symbol, source + ": byte symbol ");
      byte_end_ids[byte] = id_of(symbol + std::string(kClipEndOfWord), source + ": byte symbol ");
    }
    start_of_text = id_of(std::string(kClipStartOfTextToken), source + ": special token ");
    end_of_text = id_of(std::string(kClipEndOfTextToken), source + ": special token ");
    const auto& merges = vocab.merges;
    merge_list.reserve(merges.size());
    ranks.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [left, right] = merges[rank];
      const std::string where =
          vocab.merges_file + ": line " + std::to_string(vocab.first_merge_line + rank + 1) + ": ";
      const int32_t l = id_of(left, where);
      const int32_t r = id_of(right, where);
      const int32_t merged = id_of(left + right, where);
      merge_list.emplace_back(l, r);
      // A repeated pair keeps its last rank, like dict(zip(merges, range(...))).
      ranks.insert_or_assign(pair_key(l, r), Merge{static_cast<int32_t>(rank), merged});
    }
  }

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // context starts the message: the file (and line) at fault.
  int32_t id_of(const std::string& token, const std::string& context) const {
    const auto it = ids.find(token);
    if (it == ids.end()) {
      throw invalid_argument(context + "'" + token + "' is not in the vocabulary");
    }
    return it->second;
  }

  // SimpleTokenizer.bpe on symbol ids: merge the lowest-ranked adjacent pair everywhere, left to
  // right, until no adjacent pair has a rank.
  std::vector<int32_t> bpe(std::string_view word) const {
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      const auto byte = static_cast<uint8_t>(word[i]);
      symbols.push_back(i + 1 == word.size() ? byte_end_ids[byte] : byte_ids[byte]);
    }
    while (symbols.size() > 1) {
      const Merge* best = nullptr;
      int32_t best_left = 0, best_right = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks.find(pair_key(symbols[i], symbols[i + 1]));
        if (it != ranks.end() && (best == nullptr || it->second.rank < best->rank)) {
          best = &it->second;
          best_left = symbols[i];
          best_right = symbols[i + 1];
        }
      }
      if (best == nullptr) break;
      size_t out = 0;
      for (size_t i = 0; i < symbols.size(); ++out) {
        if (i + 1 < symbols.size() && symbols[i] == best_left && symbols[i + 1] == best_right) {
          symbols[out] = best->merged;
          i += 2;
        } else {
          symbols[out] = symbols[i++];
        }
      }
      symbols.resize(out);
    }
    return symbols;
  }

  void append_word(std::string_view word, std::vector<int64_t>& out) const {
    if (word.size() > kMaxCachedWordBytes) {
      for (const int32_t id : bpe(word)) out.push_back(id);
      return;
    }
    Shard& shard = cache[std::hash<std::string_view>{}(word) % kShards];
    std::string key(word);
    {
      const std::lock_guard<std::mutex> lock(shard.mutex);
      const auto it = shard.words.find(key);
      if (it != shard.words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    // Computed outside the lock: two threads may both compute a new word, with equal results.
    std::vector<int32_t> ids_of_word = bpe(word);
    out.insert(out.end(), ids_of_word.begin(), ids_of_word.end());
    const std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.words.size() >= kCacheEntries / kShards) shard.words.clear();
    shard.words.try_emplace(std::move(key), std::move(ids_of_word));
  }
};

ClipTokenizer::ClipTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

ClipTokenizer ClipTokenizer::load(const std::string& path) {
  return ClipTokenizer(std::make_unique<Impl>(read_clip_vocab(path)));
}

std::vector<int64_t> ClipTokenizer::encode(std::string_view text) const {
  // CLIP's pattern. The official one is case-insensitive, but it runs on lower-cased text, where
  // Python regex's IGNORECASE changes exactly two things (checked over every code point): 's'
  // also matches U+017F (long s), and U+0345 (a mark whose case variants are letters) falls out
  // of the negated set, so it belongs to no piece and is dropped. RE2's own case folding differs
  // (it would make U+0345 a letter and never match long s), so the pattern here is
  // case-sensitive with both effects written out. RE2 is leftmost-first like Python's regex: a
  // special token wins over a punctuation run that starts where it does. After whitespace_clean
  // the only white space left is ' ', so RE2's ASCII \s equals regex's Unicode \s here.
  static const RE2 pattern(
      "(<\\|[s\\x{17F}]tartoftext\\|>|<\\|endoftext\\|>|'[s\\x{17F}]|'t|'re|'ve|'m|'ll|'d|"
      "[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}\\x{345}]+)");
  const std::string clean = normalize_clip_text(text);
  std::vector<int64_t> out;
  re2::StringPiece input(clean);
  re2::StringPiece match;
  while (RE2::FindAndConsume(&input, pattern, &match)) {
    const std::string_view piece(match.data(), match.size());
    // The official cache is seeded with the two special tokens, so they map to their own ids
    // even inside a prompt (clip_tokens.json checks this).
    if (piece == kClipStartOfTextToken) {
      out.push_back(impl_->start_of_text);
    } else if (piece == kClipEndOfTextToken) {
      out.push_back(impl_->end_of_text);
    } else {
      impl_->append_word(piece, out);
    }
  }
  return out;
}

ClipTokens ClipTokenizer::tokenize(std::string_view text) const {
  const std::vector<int64_t> ids = encode(text);
  ClipTokens result;
  result.token_count = static_cast<int64_t>(ids.size());
  result.truncated = result.token_count > kClipMaxPromptTokens;
  const int64_t kept = std::min(result.token_count, kClipMaxPromptTokens);
  // Hugging Face's truncation keeps the first 75 ids and still ends with EOS; its padding
  // repeats EOS, masked out.
  result.input_ids.reserve(kClipContextLength);
  result.input_ids.push_back(impl_->start_of_text);
  result.input_ids.insert(result.input_ids.end(), ids.begin(), ids.begin() + kept);
  result.input_ids.resize(kClipContextLength, impl_->end_of_text);
  result.attention_mask.assign(kClipContextLength, 0);
  std::fill_n(result.attention_mask.begin(), kept + 2, 1);
  return result;
}

int64_t ClipTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

const std::string& ClipTokenizer::token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw invalid_argument("CLIP token id " + std::to_string(id) + " is outside 0.." +
                           std::to_string(vocab_size() - 1));
  }
  return impl_->tokens[id];
}

std::vector<std::pair<std::string, std::string>> ClipTokenizer::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->merge_list.size());
  for (const auto& [left, right] : impl_->merge_list) {
    out.emplace_back(impl_->tokens[left], impl_->tokens[right]);
  }
  return out;
}

}  // namespace cube3d
