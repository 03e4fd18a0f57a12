#include "cube3d/server/cache/entry_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/unique_fd.h"

namespace cube3d {
namespace {

constexpr std::string_view kEntrySuffix = ".entry";
constexpr std::string_view kTempInfix = ".entry.tmp-";
constexpr size_t kTempRandomChars = 6;  // mkstemp's XXXXXX

// Owns a DIR stream.
class Dir {
 public:
  explicit Dir(const std::string& path) : dir_(::opendir(path.c_str())) {}
  ~Dir() {
    if (dir_ != nullptr) ::closedir(dir_);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  DIR* get() const { return dir_; }

 private:
  DIR* dir_;
};

std::string errno_text(int error) { return std::strerror(error); }

bool is_digest_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get_le(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<uint8_t>(in[offset + i])} << (8 * i);
  }
  return value;
}

template <size_t N>
std::array<uint8_t, N> get_bytes(std::string_view in, size_t offset) {
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), in.data() + offset, N);
  return out;
}

// Header offsets.
constexpr size_t kVersionAt = 8;
constexpr size_t kKeyAt = kVersionAt + 4;
constexpr size_t kLengthAt = kKeyAt + 32;
constexpr size_t kChecksumAt = kLengthAt + 8;
static_assert(kChecksumAt + 32 == kEntryHeaderBytes);

// Reads exactly `size` bytes at `offset`: -1 on an error (errno set), else the bytes read (fewer
// when the file ended first).
ssize_t read_at(int fd, char* out, size_t size, off_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

// Makes the entry's recency survive a restart: the scan orders by mtime. Best effort (the
// order only decides which entries a full dir drops first).
void set_mtime(int fd, int64_t mtime_ns) {
  const timespec times[2] = {
      {0, UTIME_OMIT},
      {static_cast<time_t>(mtime_ns / 1'000'000'000), static_cast<long>(mtime_ns % 1'000'000'000)}};
  ::futimens(fd, times);
}

// fsync of a folder makes a rename or a new name in it durable.
std::string sync_folder(const std::string& folder) {
  const UniqueFd fd(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0) {
    return "cannot sync folder " + folder + ": " + errno_text(errno);
  }
  return {};
}

std::string folder_of(const CacheKey& key) { return to_hex(key).substr(0, 2); }

}  // namespace

std::string entry_relative_path(const CacheKey& key) {
  const std::string hex = to_hex(key);
  return hex.substr(0, 2) + "/" + hex + std::string(kEntrySuffix);
}

std::optional<CacheKey> entry_file_key(std::string_view folder, std::string_view name) {
  if (name.size() != 64 + kEntrySuffix.size() || name.substr(64) != kEntrySuffix) {
    return std::nullopt;
  }
  if (folder.size() != 2 || name.substr(0, 2) != folder) return std::nullopt;
  return cache_key_from_hex(name.substr(0, 64));
}

bool is_entry_temp_name(std::string_view folder, std::string_view name) {
  if (name.size() != 64 + kTempInfix.size() + kTempRandomChars) return false;
  if (folder.size() != 2 || name.substr(0, 2) != folder) return false;
  if (!is_digest_hex(name.substr(0, 64)) || name.substr(64, kTempInfix.size()) != kTempInfix) {
    return false;
  }
  const std::string_view random = name.substr(64 + kTempInfix.size());
  return std::all_of(random.begin(), random.end(), is_alnum);
}

std::string encode_entry_header(const CacheKey& key, std::string_view payload) {
  std::string header;
  header.reserve(kEntryHeaderBytes);
  header += kEntryMagic;
  put_le(header, kEntryFormatVersion, 4);
  header.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_le(header, payload.size(), 8);
  const Sha256Digest checksum = entry_sha256(payload);
  header.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());
  return header;
}

EntryHeaderCheck check_entry_header(std::string_view header, const CacheKey& key,
                                    uint64_t payload_bytes_in_file) {
  EntryHeaderCheck check;
  if (header.size() != kEntryHeaderBytes) {
    check.problem = "header of " + std::to_string(header.size()) + " bytes, expected " +
                    std::to_string(kEntryHeaderBytes);
    return check;
  }
  if (header.substr(0, kEntryMagic.size()) != kEntryMagic) {
    check.problem = "bad magic (not a result cache entry)";
    return check;
  }
  if (const uint64_t version = get_le(header, kVersionAt, 4); version != kEntryFormatVersion) {
    check.problem = "format version " + std::to_string(version) + ", this server reads " +
                    std::to_string(kEntryFormatVersion);
    return check;
  }
  if (const CacheKey stored = get_bytes<32>(header, kKeyAt); stored != key) {
    check.problem = "the header's key " + to_hex(stored) + " is not the file name's";
    return check;
  }
  if (const uint64_t length = get_le(header, kLengthAt, 8); length != payload_bytes_in_file) {
    check.problem = "the header says " + std::to_string(length) +
                    " payload bytes, the file holds " + std::to_string(payload_bytes_in_file);
    return check;
  }
  check.payload_sha256 = get_bytes<32>(header, kChecksumAt);
  return check;
}

void prepare_cache_dir(const std::string& dir) {
  if (dir.empty()) throw invalid_argument("cache.dir: empty path");
  // mkdir -p: each prefix that ends before a '/', then the whole path.
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string prefix = dir.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw failed_precondition("cache.dir: cannot create " + dir + " (" + prefix +
                                "): " + errno_text(errno));
    }
    if (slash == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw failed_precondition("cache.dir: cannot create " + dir + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) throw invalid_argument("cache.dir: " + dir + " is not a folder");
  // The effective ids decide what the I/O thread may do; EROFS shows a read-only mount too.
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK | R_OK, AT_EACCESS) != 0) {
    throw failed_precondition("cache.dir: " + dir + " is not writable: " + errno_text(errno));
  }
}

EntryRead read_entry(const std::string& dir, const CacheKey& key, int64_t mtime_ns) {
  using Outcome = EntryRead::Outcome;
  const std::string path = dir + "/" + entry_relative_path(key);
  EntryRead read;
  const auto fail = [&](Outcome outcome, const std::string& why) {
    read.outcome = outcome;
    read.detail = path + ": " + why;
    return read;
  };
  // Never following a link and never waiting: a named pipe (or a device) put in an entry's place
  // opens at once with O_NONBLOCK, instead of holding the I/O thread (and every lookup queued
  // behind it, and the shutdown) until a writer comes, and fstat then refuses it. O_NONBLOCK
  // changes nothing for the regular files entries are.
  const UniqueFd fd(
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    if (errno == ENOENT) return fail(Outcome::kMissing, "no such file");
    if (errno == ELOOP) return fail(Outcome::kCorrupt, "a symbolic link, not an entry");
    return fail(Outcome::kError, "cannot open: " + errno_text(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(Outcome::kError, "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) {
    return fail(Outcome::kCorrupt, S_ISFIFO(st.st_mode)   ? "a named pipe, not a regular file"
                                   : S_ISSOCK(st.st_mode) ? "a socket, not a regular file"
                                   : S_ISDIR(st.st_mode)  ? "a folder, not a regular file"
                                                          : "not a regular file");
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kEntryHeaderBytes) {
    return fail(Outcome::kCorrupt,
                "truncated: " + std::to_string(file_bytes) + " bytes, shorter than the header");
  }
  std::string header(kEntryHeaderBytes, '\0');
  const ssize_t header_read = read_at(fd.get(), header.data(), header.size(), 0);
  if (header_read < 0) return fail(Outcome::kCorrupt, "cannot read: " + errno_text(errno));
  if (static_cast<size_t>(header_read) != header.size()) {
    return fail(Outcome::kCorrupt, "truncated while reading the header");
  }
  const uint64_t payload_bytes = file_bytes - kEntryHeaderBytes;
  const EntryHeaderCheck check = check_entry_header(header, key, payload_bytes);
  if (!check.problem.empty()) return fail(Outcome::kCorrupt, check.problem);
  // The length matched the file's size, so this allocation is bounded by what is on disk.
  std::string payload(payload_bytes, '\0');
  const ssize_t payload_read =
      read_at(fd.get(), payload.data(), payload.size(), static_cast<off_t>(kEntryHeaderBytes));
  if (payload_read < 0) return fail(Outcome::kCorrupt, "cannot read: " + errno_text(errno));
  if (static_cast<size_t>(payload_read) != payload.size()) {
    return fail(Outcome::kCorrupt, "truncated while reading the payload");
  }
  if (entry_sha256(payload) != check.payload_sha256) {
    return fail(Outcome::kCorrupt, "the payload's SHA-256 is not the header's");
  }
  set_mtime(fd.get(), mtime_ns);
  read.outcome = Outcome::kOk;
  read.payload = std::make_shared<const std::string>(std::move(payload));
  return read;
}

EntryWrite write_entry(const std::string& dir, const CacheKey& key, std::string_view payload,
                       int64_t mtime_ns) {
  EntryWrite write;
  const std::string folder = dir + "/" + folder_of(key);
  bool new_folder = false;
  if (::mkdir(folder.c_str(), 0755) == 0) {
    new_folder = true;
  } else if (errno != EEXIST) {
    write.error = folder + ": cannot create: " + errno_text(errno);
    return write;
  }
  const std::string path = dir + "/" + entry_relative_path(key);
  std::string temp = path + ".tmp-XXXXXX";
  UniqueFd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd.valid()) {
    write.error = folder + ": cannot create a temporary file: " + errno_text(errno);
    return write;
  }
  const auto fail = [&](const std::string& what) {
    write.error = temp + ": " + what + ": " + errno_text(errno);
    if (fd.valid()) fd.close();
    ::unlink(temp.c_str());
    return write;
  };
  if (!write_all(fd.get(), encode_entry_header(key, payload)) || !write_all(fd.get(), payload)) {
    return fail("cannot write");
  }
  set_mtime(fd.get(), mtime_ns);
  if (::fsync(fd.get()) != 0) return fail("cannot sync");
  if (fd.close() != 0) return fail("cannot close");
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail("cannot rename to " + path);
  write.stored = true;
  write.file_bytes = static_cast<int64_t>(kEntryHeaderBytes + payload.size());
  write.error = sync_folder(folder);
  if (write.error.empty() && new_folder) write.error = sync_folder(dir);
  return write;
}

std::string remove_entry(const std::string& dir, const CacheKey& key) {
  const std::string path = dir + "/" + entry_relative_path(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return path + ": cannot delete: " + errno_text(errno);
  }
  return {};
}

EntryScan scan_entries(const std::string& dir) {
  EntryScan scan;
  const Dir root(dir);
  if (root.get() == nullptr) {
    scan.errors.push_back(dir + ": cannot list: " + errno_text(errno));
    return scan;
  }
  // Folder names first: removing temp files while listing another folder is fine, but keep
  // each listing simple.
  std::vector<std::string> folders;
  while (const dirent* item = ::readdir(root.get())) {
    const std::string_view name = item->d_name;
    if (name.size() != 2 || !is_digest_hex(name)) continue;
    struct stat st {};
    if (::fstatat(dirfd(root.get()), item->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode)) {
      folders.emplace_back(name);
    }
  }
  for (const std::string& folder : folders) {
    const std::string folder_path = dir + "/" + folder;
    const Dir sub(folder_path);
    if (sub.get() == nullptr) {
      scan.errors.push_back(folder_path + ": cannot list: " + errno_text(errno));
      continue;
    }
    while (const dirent* item = ::readdir(sub.get())) {
      const std::string_view name = item->d_name;
      const bool temp = is_entry_temp_name(folder, name);
      const std::optional<CacheKey> key = temp ? std::nullopt : entry_file_key(folder, name);
      if (!temp && !key) continue;
      struct stat st {};
      // Only regular files are ours (a link with our name is someone else's).
      if (::fstatat(dirfd(sub.get()), item->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        continue;
      }
      if (temp) {
        if (::unlinkat(dirfd(sub.get()), item->d_name, 0) == 0) {
          ++scan.temp_files_removed;
        } else {
          scan.errors.push_back(folder_path + "/" + std::string(name) +
                                ": cannot delete: " + errno_text(errno));
        }
        continue;
      }
      scan.entries.push_back(
          {*key, static_cast<int64_t>(st.st_size),
           static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec});
    }
  }
  std::sort(scan.entries.begin(), scan.entries.end(),
            [](const ScannedEntry& a, const ScannedEntry& b) {
              return std::tie(a.mtime_ns, a.key) < std::tie(b.mtime_ns, b.key);
            });
  return scan;
}

}  // namespace cube3d
