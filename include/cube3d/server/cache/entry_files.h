// The result cache's disk tier, file by file: where an entry lives, its header, and the
// synchronous reads, writes and scan of entry files. No state and no locks: the cache's I/O
// thread (and its constructor) call these, one at a time.
//
// Layout: one file per entry at <dir>/<first 2 hex of the key>/<64 hex>.entry; a write goes
// through <64 hex>.entry.tmp-XXXXXX (mkstemp) in the same folder and is renamed into place, so
// that the final name only ever holds a whole file. Nothing else in the dir is ever touched.
//
// An entry file is a fixed header, then the payload. Header (84 bytes, integers little-endian):
//   magic "C3DRCACH" (8) | format version u32 | key (32) | payload length u64 | SHA-256 of the
//   payload (32)
// A read checks all of it against the key asked for and the file's size, so that a corrupt,
// truncated or misplaced file is never served.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/core/sha256.h"
#include "cube3d/server/cache/cache_key.h"

namespace cube3d {

inline constexpr std::string_view kEntryMagic = "C3DRCACH";
inline constexpr uint32_t kEntryFormatVersion = 1;
inline constexpr size_t kEntryHeaderBytes = 8 + 4 + 32 + 8 + 32;

// The SHA-256 of an entry's payload (its checksum) or of a request (a key).
inline Sha256Digest entry_sha256(std::string_view bytes) { return sha256(bytes); }

// "<first 2 hex>/<64 hex>.entry", relative to the cache dir.
std::string entry_relative_path(const CacheKey& key);
// The key of a file named `name` in the dir's subfolder `folder` when it is an entry file of
// ours in its right folder; nullopt for any other file (left alone).
std::optional<CacheKey> entry_file_key(std::string_view folder, std::string_view name);
// Whether `name` (in subfolder `folder`) is one of our temporary files: only a write that never
// finished (a crash) leaves one behind.
bool is_entry_temp_name(std::string_view folder, std::string_view name);

std::string encode_entry_header(const CacheKey& key, std::string_view payload);

struct EntryHeaderCheck {
  std::string problem;  // empty when the header holds; else why the entry must not be served
  Sha256Digest payload_sha256{};
};
// Checks a header read from a file that holds `payload_bytes_in_file` bytes after it, asked for
// under `key`: magic, version, key and length (the checksum needs the payload: the caller's).
EntryHeaderCheck check_entry_header(std::string_view header, const CacheKey& key,
                                    uint64_t payload_bytes_in_file);

// Makes the cache dir (and its parents) and checks that this process may write it. Throws
// cube3d::Error naming the path and the config key cache.dir: failed_precondition when it cannot
// be made or written, invalid_argument when the path is not a folder.
void prepare_cache_dir(const std::string& dir);

struct EntryRead {
  enum class Outcome {
    kOk,       // payload holds the value
    kMissing,  // no file
    kCorrupt,  // a file that failed its checks (detail says which): the caller deletes it
    kError,    // the file could not be opened (permission, ...): detail says why
  };
  Outcome outcome = Outcome::kMissing;
  std::shared_ptr<const std::string> payload;
  std::string detail;  // starts with the path
};
// Reads and checks the entry of `key`; on success also sets its mtime to `mtime_ns` (ns since
// the epoch), the recency that the next startup scan orders by.
EntryRead read_entry(const std::string& dir, const CacheKey& key, int64_t mtime_ns);

struct EntryWrite {
  bool stored = false;  // the file is in place under its final name
  int64_t file_bytes = 0;
  std::string error;  // why not stored, or a durability problem after it was (path first)
};
// Writes the entry atomically (temp file, fsync, mtime_ns, rename, fsync of the folder); a
// failure leaves no temp file behind.
EntryWrite write_entry(const std::string& dir, const CacheKey& key, std::string_view payload,
                       int64_t mtime_ns);

// Deletes the entry's file; an absent file is no error. Returns the error ("" when none).
std::string remove_entry(const std::string& dir, const CacheKey& key);

struct ScannedEntry {
  CacheKey key;
  int64_t file_bytes;
  int64_t mtime_ns;
};
struct EntryScan {
  std::vector<ScannedEntry> entries;  // oldest mtime first (ties: by key)
  int64_t temp_files_removed = 0;
  std::vector<std::string> errors;  // folders or files that could not be listed or removed
};
// Lists the entries under `dir` with stat only (no file is read: a big cache starts fast) and
// deletes leftover temp files.
EntryScan scan_entries(const std::string& dir);

}  // namespace cube3d
