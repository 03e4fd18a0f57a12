// A safetensors reader of our own: memory-maps the file and hands out zero-copy CPU tensors.
//
// This is a security boundary (checkpoints come from users' disks and downloads), so the
// header is validated completely before any tensor is handed out: size limit, JSON syntax,
// dtypes, shapes against byte ranges, ranges inside the file and not overlapping. Every
// error names the file and, where there is one, the tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

enum class SafetensorsDtype { kF32, kF16, kBF16, kI64, kI32, kU8 };

struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Headers larger than this are rejected before they are read (a hostile file could
  // otherwise make us allocate and parse gigabytes of JSON).
  static constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

  // Maps and validates `path`. Throws cube3d::Error (not_found / invalid_argument).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const;
  // Names in file order of their data offsets.
  std::vector<std::string> names() const;
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Zero-copy CPU tensor over the mapping; the tensor keeps the mapping alive. The mapping is
  // private copy-on-write: an in-place op on the tensor copies only the pages it touches, and
  // never changes the file (see Mapping in safetensors.cpp). Data not aligned for its dtype is
  // copied instead (an owned tensor).
  at::Tensor tensor(const std::string& name) const;

  // Asks the kernel to start reading the tensor's bytes into the page cache (a hint: readahead
  // in large requests instead of one page fault at a time).
  void prefetch(const std::string& name) const;

  // Hands the tensor's pages of the mapping back to the kernel (the whole pages inside its byte
  // range, so no neighbouring tensor is touched) and returns how many bytes that was. For a
  // loader that has copied the tensor elsewhere (another device or dtype) and wants the host
  // memory bounded by one tensor instead of the whole file. The bytes stay readable: a later
  // access reads them from the file again. Does nothing (returns 0) while a zero-copy tensor
  // of `name` from tensor() is alive, so no tensor ever sees its data change underneath it.
  size_t release_pages(const std::string& name) const;

 private:
  struct Mapping;
  SafetensorsFile(std::string path, std::shared_ptr<const Mapping> mapping,
                  std::map<std::string, SafetensorsEntry> entries,
                  std::map<std::string, size_t> slots, std::map<std::string, std::string> metadata);

  // The whole pages inside the entry's bytes: [*begin, *begin + return value).
  size_t inner_pages(const SafetensorsEntry& entry, std::byte** begin) const;

  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, size_t> slots_;  // name -> index of its zero-copy count in the mapping
  std::map<std::string, std::string> metadata_;
};

// The safetensors name of a scalar type ("F32", "BF16", ...): the reader's dtype table, which the
// writer follows too; nullopt for a type the format (as read here) does not have.
std::optional<std::string_view> safetensors_dtype_name(at::ScalarType type);

// Writes tensors (any of the dtypes above, converted to contiguous CPU) to `path`.
// Throws invalid_argument for an unsupported dtype, naming the tensor.
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace cube3d
