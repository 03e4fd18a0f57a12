// CLIP's vocabulary files: the search order (no path compiled in), gzip reading through zlib,
// vocab.json and merges.txt parsing, and the checks that name the file at fault. Python
// reference: SimpleTokenizer.__init__ in clip/simple_tokenizer.py and Hugging Face's
// CLIPTokenizer (vocab.json + merges.txt).
#include "cube3d/model/clip_vocab.h"

#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/paths.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

// Far above any BPE vocabulary; keeps a corrupt id from allocating gigabytes (ids are int32).
constexpr int64_t kMaxVocabularyIds = int64_t{1} << 24;
// The official files are 1.6 MB (vocab.json) and 1.4 MB (the merges, uncompressed); this bounds
// what a wrong path (or a gzip bomb) can make us allocate.
constexpr int64_t kMaxVocabularyFileBytes = int64_t{64} << 20;

std::string read_gzip(const std::string& path) {
  const PathKind kind = path_kind(path);
  if (kind == PathKind::kMissing) {
    throw not_found("CLIP vocabulary " + path + ": no such file (run scripts/setup.sh)");
  }
  if (kind == PathKind::kDirectory) {
    throw invalid_argument("CLIP vocabulary " + path + ": is a directory");
  }
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    throw invalid_argument(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  }
  std::string out;
  std::array<char, 1 << 16> buffer{};
  while (true) {
    const int n = gzread(file.get(), buffer.data(), static_cast<unsigned>(buffer.size()));
    int code = Z_OK;
    const char* message = gzerror(file.get(), &code);
    if (n < 0 || (code != Z_OK && code != Z_BUF_ERROR)) {
      throw invalid_argument(path + ": not a valid gzip file (" + message + ")");
    }
    // gzread passes a file that is not gzip through unchanged; a vocabulary must be gzip.
    if (gzdirect(file.get())) throw invalid_argument(path + ": not a gzip file");
    if (n == 0) {
      // At the end, Z_BUF_ERROR means the stream stopped in the middle (a cut-off download).
      if (code == Z_BUF_ERROR) throw invalid_argument(path + ": truncated gzip file");
      break;
    }
    if (static_cast<int64_t>(out.size()) + n > kMaxVocabularyFileBytes) {
      throw invalid_argument(path + ": more than " + std::to_string(kMaxVocabularyFileBytes) +
                             " bytes uncompressed: not a CLIP vocabulary");
    }
    out.append(buffer.data(), static_cast<size_t>(n));
  }
  return out;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(begin));
      return lines;
    }
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

// Python's str.split() for merges lines. The byte-level alphabet holds no whitespace, so
// splitting on ASCII whitespace is the same.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  const auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  };
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > begin) fields.push_back(line.substr(begin, i - begin));
  }
  return fields;
}

// The merges of a merges file: `first` is the index of the first merge line; at most
// kClipMaxMerges lines are read, like the official [1 : 49152 - 256 - 2 + 1] slice. A last empty
// line (the file's final newline) is not a merge.
std::vector<std::pair<std::string, std::string>> parse_merges(const std::string& path,
                                                              std::string_view text, size_t first) {
  if (const auto offset = find_invalid_utf8(text)) {
    throw invalid_argument(path + ": not UTF-8 text (byte offset " + std::to_string(*offset) + ")");
  }
  const std::vector<std::string_view> lines = split_lines(text);
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = first; i < lines.size() && merges.size() < kClipMaxMerges; ++i) {
    if (i + 1 == lines.size() && lines[i].empty()) break;
    const std::vector<std::string_view> fields = split_fields(lines[i]);
    if (fields.size() != 2) {
      throw invalid_argument(path + ": line " + std::to_string(i + 1) +
                             ": malformed merge (expected two symbols): '" + std::string(lines[i]) +
                             "'");
    }
    merges.emplace_back(std::string(fields[0]), std::string(fields[1]));
  }
  return merges;
}

// The official vocabulary: the 256 byte symbols, the same with '</w>', one token per merge,
// then the two special tokens. Line 0 of the file is a header.
ClipVocab read_gzip_vocab(const std::string& path) {
  ClipVocab vocab;
  vocab.tokens_file = path;
  vocab.merges_file = path;
  vocab.first_merge_line = 1;
  const std::string text = read_gzip(path);
  vocab.merges = parse_merges(path, text, vocab.first_merge_line);
  const auto symbols = clip_byte_symbols();
  for (const auto& [byte, symbol] : symbols) vocab.tokens.push_back(symbol);
  for (const auto& [byte, symbol] : symbols) {
    vocab.tokens.push_back(symbol + std::string(kClipEndOfWord));
  }
  for (const auto& [left, right] : vocab.merges) vocab.tokens.push_back(left + right);
  vocab.tokens.emplace_back(kClipStartOfTextToken);
  vocab.tokens.emplace_back(kClipEndOfTextToken);
  return vocab;
}

// A Hugging Face CLIPTokenizer folder: vocab.json (token -> id, ids 0..N-1 each used once)
// and merges.txt (an optional '#version' header, then one merge per line).
ClipVocab read_folder_vocab(const std::string& folder) {
  ClipVocab vocab;
  vocab.tokens_file = folder + "/vocab.json";
  vocab.merges_file = folder + "/merges.txt";
  const std::string& vocab_path = vocab.tokens_file;

  const std::string vocab_text = read_file(vocab_path, "CLIP vocabulary", kMaxVocabularyFileBytes);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(vocab_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!json.is_object()) throw invalid_argument(vocab_path + ": expected a JSON object");
  // Ids must number the tokens 0..N-1, each once: the model's embedding rows are those ids.
  std::vector<std::string> by_id;
  std::vector<bool> used;
  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_integer()) {
      throw invalid_argument(vocab_path + ": token '" + token + "': id is not an integer");
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= kMaxVocabularyIds) {
      throw invalid_argument(vocab_path + ": token '" + token + "': id " + std::to_string(id) +
                             " is out of range");
    }
    if (id >= static_cast<int64_t>(by_id.size())) {
      by_id.resize(id + 1);
      used.resize(id + 1, false);
    }
    if (used[id]) {
      throw invalid_argument(vocab_path + ": id " + std::to_string(id) + " is used by '" +
                             by_id[id] + "' and '" + token + "'");
    }
    used[id] = true;
    by_id[id] = token;
  }
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (!used[id]) throw invalid_argument(vocab_path + ": no token has id " + std::to_string(id));
  }
  vocab.tokens = std::move(by_id);

  const std::string merges_text =
      read_file(vocab.merges_file, "CLIP merges list", kMaxVocabularyFileBytes);
  vocab.first_merge_line = merges_text.starts_with("#version") ? 1 : 0;
  vocab.merges = parse_merges(vocab.merges_file, merges_text, vocab.first_merge_line);
  return vocab;
}

// --- where the vocabulary is ------------------------------------------------------------------

bool exists(const std::string& path) { return path_kind(path) != PathKind::kMissing; }

std::string join(const std::string& dir, std::string_view name) {
  return (dir.ends_with('/') ? dir : dir + "/") + std::string(name);
}

}  // namespace

std::vector<std::pair<uint8_t, std::string>> clip_byte_symbols() {
  std::vector<std::pair<uint8_t, std::string>> out;
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) continue;
    std::string s;
    append_utf8(s, static_cast<char32_t>(b));
    out.emplace_back(static_cast<uint8_t>(b), s);
  }
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) continue;
    std::string s;
    append_utf8(s, static_cast<char32_t>(256 + next++));
    out.emplace_back(static_cast<uint8_t>(b), s);
  }
  return out;
}

ClipVocab read_clip_vocab(const std::string& path) {
  const PathKind kind = path_kind(path);
  if (kind == PathKind::kMissing) {
    throw not_found("CLIP vocabulary " + path + ": no such file (run scripts/setup.sh)");
  }
  return kind == PathKind::kDirectory ? read_folder_vocab(path) : read_gzip_vocab(path);
}

std::string resolve_clip_vocab(const std::string& requested, const std::string& model_folder,
                               const std::optional<std::string>& exe_dir) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv("CUBE3D_CLIP_VOCAB"); env != nullptr && *env != '\0') {
    return env;
  }
  std::vector<std::string> tried;
  if (!model_folder.empty()) {
    const std::string vocab = join(model_folder, "vocab.json");
    const std::string merges = join(model_folder, "merges.txt");
    if (exists(vocab) && exists(merges)) return model_folder;
    tried.push_back(vocab + " + " + merges);
  }
  std::string why;
  const std::optional<std::string> dir = exe_dir ? exe_dir : executable_dir(why);
  if (dir) {
    const std::string up = parent_dir(*dir);
    for (const std::string& candidate :
         {join(join(up, "share/cube3d"), kClipVocabFileName),
          join(join(parent_dir(up), ".cache/clip"), kClipVocabFileName)}) {
      if (exists(candidate)) return candidate;
      tried.push_back(candidate);
    }
  }
  std::string message = "no CLIP vocabulary: none given, CUBE3D_CLIP_VOCAB is not set";
  for (size_t i = 0; i < tried.size(); ++i) {
    message += (i == 0 ? ", and none at " : ", ") + tried[i];
  }
  if (!dir) message += "; the executable's folder is unknown (" + why + ")";
  const std::string file(kClipVocabFileName);
  throw not_found(message + ". Run scripts/setup.sh (it fetches " + file +
                  " into .cache/clip/), set CUBE3D_CLIP_VOCAB, or pass the vocabulary (" + file +
                  " or a Hugging Face folder with vocab.json + merges.txt) explicitly");
}

}  // namespace cube3d
