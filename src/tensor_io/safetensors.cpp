// Safetensors reader: mmap + complete header validation + zero-copy tensors.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data section.
// The header is untrusted input, so nothing is handed out until every entry has been checked
// against the file: dtype known, shape consistent with its byte range, range inside the data
// section, no two ranges overlapping.
#include "cube3d/tensor_io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/unique_fd.h"

namespace cube3d {

// The format is little-endian and we reinterpret the mapped bytes directly as tensor data.
static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes a little-endian host");

namespace {

constexpr uint64_t kLengthPrefixBytes = 8;

// The deepest legal nesting: top object (0) -> entry or __metadata__ object (1) -> shape or
// data_offsets array (2). Anything deeper is not a safetensors header, and refusing it while
// parsing keeps a hostile "[[[[..." from building a huge nested document first.
constexpr int kMaxJsonDepth = 2;

struct DtypeInfo {
  std::string_view name;
  SafetensorsDtype dtype;
  at::ScalarType scalar_type;
  uint64_t element_size;
};

constexpr DtypeInfo kDtypes[] = {
    {"F32", SafetensorsDtype::kF32, at::kFloat, 4},
    {"F16", SafetensorsDtype::kF16, at::kHalf, 2},
    {"BF16", SafetensorsDtype::kBF16, at::kBFloat16, 2},
    {"I64", SafetensorsDtype::kI64, at::kLong, 8},
    {"I32", SafetensorsDtype::kI32, at::kInt, 4},
    {"U8", SafetensorsDtype::kU8, at::kByte, 1},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

const DtypeInfo& dtype_info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  throw internal_error("safetensors: dtype enum value without a table entry");
}

std::string errno_message(int err) { return std::system_category().message(err); }

std::string tensor_context(const std::string& path, const std::string& name) {
  return path + ": tensor '" + name + "': ";
}

// A JSON value as a non-negative integer that fits in uint64_t. Floats (1.0, 1e3) are refused:
// a shape or offset written as a float is a sign of a broken or hostile writer.
bool as_non_negative_integer(const nlohmann::json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const nlohmann::json& value, uint64_t data_size) {
  const std::string where = tensor_context(path, name);
  if (!value.is_object()) throw invalid_argument(where + "header entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) {
      throw invalid_argument(where + "header entry has no \"" + field + "\"");
    }
  }

  const nlohmann::json& dtype_json = value.at("dtype");
  if (!dtype_json.is_string()) throw invalid_argument(where + "\"dtype\" is not a string");
  const std::string& dtype_name = dtype_json.get_ref<const std::string&>();
  const DtypeInfo* const info = find_dtype(dtype_name);
  if (info == nullptr) {
    throw invalid_argument(where + "unsupported dtype \"" + dtype_name +
                           "\" (supported: F32, F16, BF16, I64, I32, U8)");
  }

  const nlohmann::json& shape_json = value.at("shape");
  if (!shape_json.is_array()) throw invalid_argument(where + "\"shape\" is not an array");
  std::vector<int64_t> shape;
  shape.reserve(shape_json.size());
  for (const nlohmann::json& dim_json : shape_json) {
    uint64_t dim = 0;
    if (!as_non_negative_integer(dim_json, &dim) ||
        dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw invalid_argument(where + "shape " + shape_json.dump() +
                             " has a dimension that is not a non-negative integer");
    }
    shape.push_back(static_cast<int64_t>(dim));
  }

  const nlohmann::json& offsets_json = value.at("data_offsets");
  uint64_t begin = 0;
  uint64_t end = 0;
  if (!offsets_json.is_array() || offsets_json.size() != 2 ||
      !as_non_negative_integer(offsets_json[0], &begin) ||
      !as_non_negative_integer(offsets_json[1], &end)) {
    throw invalid_argument(where + "\"data_offsets\" " + offsets_json.dump() +
                           " is not [begin, end] of two non-negative integers");
  }
  if (begin > end) {
    throw invalid_argument(where + "data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] have begin > end");
  }
  if (end > data_size) {
    throw invalid_argument(where + "data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] lie outside the data section of " +
                           std::to_string(data_size) + " bytes (truncated file?)");
  }

  // A zero dimension anywhere makes the tensor empty, however large the other dimensions are,
  // so it must not be reported as an overflow of its size; but its strides (products of the
  // other dimensions) must still fit libtorch's int64, or making the tensor throws there.
  uint64_t stride_bytes = info->element_size;
  for (const int64_t dim : shape) {
    if (dim != 0 &&
        (__builtin_mul_overflow(stride_bytes, static_cast<uint64_t>(dim), &stride_bytes) ||
         stride_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      throw invalid_argument(where + "shape " + shape_json.dump() +
                             " is too large (its strides overflow 64 bits)");
    }
  }
  uint64_t nbytes = 0;
  if (std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    nbytes = info->element_size;
    for (const int64_t dim : shape) {
      if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(dim), &nbytes)) {
        throw invalid_argument(where + "shape " + shape_json.dump() +
                               " is too large (byte size overflows 64 bits)");
      }
    }
  }
  if (nbytes != end - begin) {
    throw invalid_argument(where + "shape " + shape_json.dump() + " of dtype " + dtype_name +
                           " needs " + std::to_string(nbytes) + " bytes but data_offsets [" +
                           std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                           std::to_string(end - begin));
  }

  return SafetensorsEntry{name, info->dtype, std::move(shape), begin, end};
}

std::map<std::string, std::string> parse_metadata(const std::string& path,
                                                  const nlohmann::json& value) {
  if (!value.is_object()) throw invalid_argument(path + ": \"__metadata__\" is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw invalid_argument(path + ": \"__metadata__\" value for key '" + key +
                             "' is not a string");
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Entries sorted by byte range; ties (empty tensors) by name so the order is deterministic.
std::vector<const SafetensorsEntry*> by_offset(
    const std::map<std::string, SafetensorsEntry>& entries) {
  std::vector<const SafetensorsEntry*> sorted;
  sorted.reserve(entries.size());
  for (const auto& [name, entry] : entries) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  return sorted;
}

void check_no_overlap(const std::string& path,
                      const std::map<std::string, SafetensorsEntry>& entries) {
  const std::vector<const SafetensorsEntry*> sorted = by_offset(entries);
  // After sorting by begin, any overlap shows up between neighbours: a range that starts
  // before the furthest end seen so far shares bytes with the range that reached that end.
  // (An empty range strictly inside another is refused too: no honest writer produces it.)
  const SafetensorsEntry* furthest = nullptr;
  for (const SafetensorsEntry* entry : sorted) {
    if (furthest != nullptr && entry->begin < furthest->end) {
      throw invalid_argument(
          path + ": tensors '" + furthest->name + "' [" + std::to_string(furthest->begin) + ", " +
          std::to_string(furthest->end) + ") and '" + entry->name + "' [" +
          std::to_string(entry->begin) + ", " + std::to_string(entry->end) + ") overlap");
    }
    if (furthest == nullptr || entry->end >= furthest->end) furthest = entry;
  }
}

// The format leaves no holes: the tensors' ranges tile the data section exactly (as the
// reference implementation requires). Bytes no tensor claims, between tensors or after the
// last, are refused rather than silently ignored. Runs after check_no_overlap.
void check_no_holes(const std::string& path, const std::map<std::string, SafetensorsEntry>& entries,
                    uint64_t data_size) {
  uint64_t covered = 0;
  for (const SafetensorsEntry* entry : by_offset(entries)) {
    if (entry->begin > covered) {
      throw invalid_argument(
          path + ": bytes [" + std::to_string(covered) + ", " + std::to_string(entry->begin) +
          ") of the data section belong to no tensor (before '" + entry->name + "')");
    }
    covered = std::max(covered, entry->end);
  }
  if (covered != data_size) {
    throw invalid_argument(path + ": " + std::to_string(data_size - covered) +
                           " bytes after the last tensor's data belong to no tensor (trailing "
                           "garbage, or a header that lists too few tensors)");
  }
}

}  // namespace

std::optional<std::string_view> safetensors_dtype_name(at::ScalarType type) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.scalar_type == type) return info.name;
  }
  return std::nullopt;
}

// The whole file, mapped MAP_PRIVATE with PROT_READ | PROT_WRITE, i.e. copy-on-write.
//
// Why writable: tensors are handed out through at::from_blob, and nothing in ATen stops a
// caller from running an in-place op on them. Over PROT_READ pages that is a SIGSEGV that
// takes the whole server down; over private copy-on-write pages the write just copies the
// touched page into anonymous memory, and the file on disk is never modified. Callers should
// still treat the tensors as read-only: an in-place op costs memory and is visible to every
// other tensor handed out from the same SafetensorsFile (they share the mapping).
//
// MAP_NORESERVE: a private writable mapping is otherwise charged in full against the commit
// limit, and the kernel's overcommit heuristic refuses a multi-GB checkpoint on a small
// machine. We only ever expect to read it, so no swap reservation is wanted.
//
// Loaders keep the float32 tensors of a CPU model as these zero-copy views (the model's memory is
// then the file's page cache, shared and never duplicated), and copy the others to their device
// or dtype and then hand the pages back with release_pages(). `live` counts the zero-copy tensors
// alive per entry, so that release_pages() never drops pages under a tensor: MADV_DONTNEED on a
// private mapping would silently revert that tensor's in-place writes to the file's bytes.
//
// A file truncated by another process while mapped still raises SIGBUS on access, and bytes
// rewritten in place show through pages not yet copied; that is inherent to mmap and outside
// what header validation can protect against. Since a CPU model keeps zero-copy weights (and
// so the mapping) for its lifetime, a checkpoint in use must be replaced by renaming a new file
// over it, never by rewriting it in place.
struct SafetensorsFile::Mapping {
  Mapping(int fd, size_t file_size, const std::string& path) : size(file_size) {
    void* const addr =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    if (addr == MAP_FAILED) {
      throw invalid_argument(path + ": cannot mmap safetensors file: " + errno_message(errno));
    }
    data = static_cast<std::byte*>(addr);
  }
  ~Mapping() { ::munmap(data, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data = nullptr;
  size_t size = 0;
  uint64_t data_start = 0;  // 8 + header length: where the offsets of the entries count from

  mutable std::mutex mutex;
  mutable std::vector<int64_t> live;  // per entry slot, guarded by mutex
};

SafetensorsFile::SafetensorsFile(std::string path, std::shared_ptr<const Mapping> mapping,
                                 std::map<std::string, SafetensorsEntry> entries,
                                 std::map<std::string, size_t> slots,
                                 std::map<std::string, std::string> metadata)
    : path_(std::move(path)),
      mapping_(std::move(mapping)),
      entries_(std::move(entries)),
      slots_(std::move(slots)),
      metadata_(std::move(metadata)) {}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  // Held only for the duration of open(): the mapping stays valid after close(), so we do not
  // keep one descriptor per open checkpoint.
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    const std::string message = path + ": cannot open safetensors file: " + errno_message(err);
    if (err == ENOENT || err == ENOTDIR) throw not_found(message);
    throw invalid_argument(message);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw invalid_argument(path + ": cannot stat safetensors file: " + errno_message(errno));
  }
  if (!S_ISREG(st.st_mode)) throw invalid_argument(path + ": not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kLengthPrefixBytes) {
    throw invalid_argument(path + ": truncated safetensors file: " + std::to_string(file_size) +
                           " bytes, shorter than the 8-byte header length");
  }

  auto mapping = std::make_shared<Mapping>(fd.get(), static_cast<size_t>(file_size), path);

  uint64_t header_size = 0;
  std::memcpy(&header_size, mapping->data, sizeof(header_size));
  // First check on the header: a hostile length must never drive an allocation or a parse.
  if (header_size > kMaxHeaderBytes) {
    throw invalid_argument(path + ": safetensors header length " + std::to_string(header_size) +
                           " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_size > file_size - kLengthPrefixBytes) {
    throw invalid_argument(path + ": truncated safetensors file: header of " +
                           std::to_string(header_size) + " bytes extends past the end of the " +
                           std::to_string(file_size) + "-byte file");
  }
  mapping->data_start = kLengthPrefixBytes + header_size;
  const uint64_t data_size = file_size - mapping->data_start;

  const auto* const header_begin =
      reinterpret_cast<const char*>(mapping->data + kLengthPrefixBytes);
  const auto limit_depth = [&path](int depth, nlohmann::json::parse_event_t event,
                                   nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth > kMaxJsonDepth) {
      throw invalid_argument(path + ": safetensors header is nested too deeply");
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_begin, header_begin + header_size, limit_depth);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(path + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw invalid_argument(path + ": safetensors header is not an object");

  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      metadata = parse_metadata(path, value);
    } else {
      entries.emplace(name, parse_entry(path, name, value, data_size));
    }
  }
  check_no_overlap(path, entries);
  check_no_holes(path, entries, data_size);

  std::map<std::string, size_t> slots;
  for (const auto& [name, entry] : entries) slots.emplace(name, slots.size());
  mapping->live.assign(slots.size(), 0);
  return SafetensorsFile(path, std::move(mapping), std::move(entries), std::move(slots),
                         std::move(metadata));
}

bool SafetensorsFile::contains(const std::string& name) const {
  return entries_.find(name) != entries_.end();
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const SafetensorsEntry* entry : by_offset(entries_)) names.push_back(entry->name);
  return names;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw not_found(path_ + ": no tensor '" + name + "' in safetensors file");
  }
  return it->second;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const DtypeInfo& info = dtype_info(e.dtype);
  const auto options = at::TensorOptions().dtype(info.scalar_type).device(at::kCPU);
  // An empty range may sit exactly at the end of the mapping; do not build a pointer there.
  if (e.begin == e.end) return at::empty(e.shape, options);

  std::byte* const data = mapping_->data + mapping_->data_start + e.begin;
  if (reinterpret_cast<uintptr_t>(data) % info.element_size != 0) {
    // Kernels assume naturally aligned elements; a header whose length is not a multiple of
    // the element size breaks that, so such a tensor gets its own (aligned) copy.
    at::Tensor copy = at::empty(e.shape, options);
    std::memcpy(copy.data_ptr(), data, e.end - e.begin);
    return copy;
  }
  // The deleter owns a reference to the mapping, so the memory stays mapped as long as any
  // tensor (or view of one) is alive, even after this SafetensorsFile is gone; it also ends the
  // tensor's claim on the pages that release_pages() respects.
  const size_t slot = slots_.at(name);
  {
    const std::lock_guard<std::mutex> lock(mapping_->mutex);
    ++mapping_->live[slot];
  }
  return at::from_blob(
      data, e.shape,
      [keep_alive = mapping_, slot](void*) {
        const std::lock_guard<std::mutex> lock(keep_alive->mutex);
        --keep_alive->live[slot];
      },
      options);
}

size_t SafetensorsFile::inner_pages(const SafetensorsEntry& e, std::byte** begin) const {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(mapping_->data + mapping_->data_start + e.begin);
  const uintptr_t last = first + (e.end - e.begin);
  const uintptr_t inner_begin = (first + page - 1) / page * page;
  const uintptr_t inner_end = last / page * page;
  if (inner_end <= inner_begin) return 0;
  *begin = mapping_->data + (inner_begin - reinterpret_cast<uintptr_t>(mapping_->data));
  return inner_end - inner_begin;
}

void SafetensorsFile::prefetch(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  std::byte* begin = nullptr;
  const size_t bytes = inner_pages(e, &begin);
  // Only a hint: a failure changes nothing but speed, so it is not an error.
  if (bytes > 0) (void)::madvise(begin, bytes, MADV_WILLNEED);
}

size_t SafetensorsFile::release_pages(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  std::byte* begin = nullptr;
  const size_t bytes = inner_pages(e, &begin);
  if (bytes == 0) return 0;
  // Held across the check and the madvise, so no zero-copy tensor can appear in between.
  const std::lock_guard<std::mutex> lock(mapping_->mutex);
  if (mapping_->live[slots_.at(name)] > 0) return 0;
  // On a private file mapping this drops both clean page-cache references and any
  // copy-on-write copies; a later read faults the file's bytes in again.
  if (::madvise(begin, bytes, MADV_DONTNEED) != 0) return 0;
  return bytes;
}

}  // namespace cube3d
