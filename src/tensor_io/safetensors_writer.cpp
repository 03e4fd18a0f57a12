// Safetensors writer: the inverse of SafetensorsFile, used for fixtures, dumps and conversions.
//
// The file is written to a temporary name in the destination folder and renamed into place, so
// a reader never sees a half-written checkpoint and a failure never leaves one behind.
#include "cube3d/tensor_io/safetensors.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {

static_assert(std::endian::native == std::endian::little,
              "the safetensors writer assumes a little-endian host");

namespace {

// Out of disk or quota is a resource problem; anything else (no such folder, no permission)
// is a bad path from the caller.
Error io_error(const std::string& path, const std::string& what, int err) {
  const std::string message =
      path + ": cannot " + what + " safetensors file: " + std::system_category().message(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(message);
  return invalid_argument(message);
}

// A file created next to `path` that is removed again unless commit() renamed it onto `path`.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path) {
    // O_EXCL with a unique-enough suffix instead of mkstemp: mkstemp creates mode 0600, and
    // the final file should get the usual 0666 & ~umask like any other file we write.
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
      temp_path_ = path + ".tmp." + std::to_string(::getpid()) + "." +
                   std::to_string(counter.fetch_add(1)) + "." + std::to_string(ticks);
      fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) return;
      if (errno != EEXIST) throw io_error(path_, "create", errno);
    }
    throw io_error(path_, "create", EEXIST);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write_all(const void* data, size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::write(fd_, bytes, size);
      if (written < 0) {
        if (errno == EINTR) continue;
        throw io_error(path_, "write", errno);
      }
      bytes += written;
      size -= static_cast<size_t>(written);
    }
  }

  // fsync before rename: otherwise a crash can leave the new name pointing at an empty file.
  void commit() {
    if (::fsync(fd_) != 0) throw io_error(path_, "sync", errno);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw io_error(path_, "close", errno);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) throw io_error(path_, "rename", errno);
    committed_ = true;
  }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;

  // Prepare every tensor before touching the disk, so a bad one leaves nothing behind.
  std::vector<at::Tensor> prepared;
  prepared.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {  // std::map: name order, as the data is laid out
    const std::string where = path + ": tensor '" + name + "': ";
    if (name == "__metadata__") throw invalid_argument(where + "the name is reserved");
    if (!tensor.defined()) throw invalid_argument(where + "undefined tensor");
    const std::optional<std::string_view> dtype = safetensors_dtype_name(tensor.scalar_type());
    if (!dtype) {
      throw invalid_argument(where + "unsupported dtype " +
                             std::string(c10::toString(tensor.scalar_type())) +
                             " (supported: float32, float16, bfloat16, int64, int32, uint8)");
    }
    if (tensor.layout() != at::kStrided) {
      throw invalid_argument(where + "only dense (strided) tensors can be written");
    }
    at::Tensor cpu;
    try {
      // resolve_neg: a lazily negated view (x._neg_view()) would otherwise be written
      // un-negated, because contiguous() keeps the negation bit instead of applying it.
      cpu = tensor.to(at::kCPU).resolve_neg().contiguous();
    } catch (const c10::Error& e) {
      throw invalid_argument(where + "cannot copy to CPU: " + e.what_without_backtrace());
    }
    const uint64_t nbytes = cpu.nbytes();
    header[name] = {{"dtype", *dtype},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    prepared.push_back(std::move(cpu));
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not UTF-8
    throw invalid_argument(path + ": cannot encode safetensors header: " + e.what());
  }
  // Spaces are valid JSON whitespace; padding makes the data section start at a multiple of 8,
  // so a reader can map the tensors in place. (Tensors follow each other without gaps, as other
  // safetensors readers require, so one after an odd-sized U8 tensor may still be unaligned;
  // our reader copies such a tensor instead.)
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > SafetensorsFile::kMaxHeaderBytes) {
    throw invalid_argument(path + ": safetensors header of " + std::to_string(text.size()) +
                           " bytes exceeds the reader's limit");
  }

  TempFile file(path);
  const uint64_t header_size = text.size();
  file.write_all(&header_size, sizeof(header_size));
  file.write_all(text.data(), text.size());
  for (const at::Tensor& tensor : prepared) {
    if (tensor.nbytes() > 0) file.write_all(tensor.const_data_ptr(), tensor.nbytes());
  }
  file.commit();
}

}  // namespace cube3d
