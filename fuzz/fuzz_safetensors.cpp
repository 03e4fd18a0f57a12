// Fuzzes the safetensors reader, our security boundary for checkpoints. The input is a whole
// file: SafetensorsFile::open must either refuse it with a cube3d::Error or accept a header
// whose every tensor lies inside the file. For an accepted file each tensor is read through the
// API (tensor(name), including the copying path for misaligned data), and its bytes are
// compared with the input's bytes at the entry's offsets: a range past the data, or a tensor
// with other bytes than the file's, is a finding (ASan sees the reads of the input buffer; a
// read past the mapping faults). The pages are then released and read again.
//
// The file is an in-memory one (memfd), rewritten for each input: no disk traffic, and the
// reader still sees a regular file through /proc/self/fd. ASan runs with detect_leaks=0:
// libtorch is not instrumented (scripts/fuzz.sh sets it).
#include <ATen/core/Tensor.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cube3d/tensor_io/safetensors.h"
#include "fuzz_support.h"

namespace {

int memfd = -1;
std::string memfd_path;

void write_input(const uint8_t* data, size_t size) {
  if (::ftruncate(memfd, 0) != 0) cube3d::fuzz::fail("ftruncate of the memfd failed");
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(memfd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) cube3d::fuzz::fail("writing the memfd failed");
    done += static_cast<size_t>(n);
  }
}

// The tensor's bytes, through the API, against the input's bytes at the entry's offsets.
void check_tensor(const cube3d::SafetensorsFile& file, const std::string& name, const uint8_t* data,
                  size_t size, uint64_t data_start) {
  const cube3d::SafetensorsEntry& entry = file.entry(name);
  CUBE3D_FUZZ_CHECK(entry.begin <= entry.end, "entry range reversed");
  CUBE3D_FUZZ_CHECK(data_start + entry.end <= size, "entry range past the end of the file");
  const at::Tensor tensor = file.tensor(name);
  CUBE3D_FUZZ_CHECK(tensor.is_contiguous(), "tensor not contiguous");
  const auto nbytes = static_cast<uint64_t>(tensor.nbytes());
  CUBE3D_FUZZ_CHECK(nbytes == entry.end - entry.begin, "tensor size differs from its range");
  CUBE3D_FUZZ_CHECK(static_cast<size_t>(tensor.dim()) == entry.shape.size(), "tensor rank");
  if (nbytes == 0) return;
  const auto* bytes = static_cast<const uint8_t*>(tensor.const_data_ptr());
  // Byte by byte in instrumented code (a sum would run in uninstrumented libtorch).
  uint64_t checksum = 0;
  for (uint64_t i = 0; i < nbytes; ++i) checksum += bytes[i];
  uint64_t expected = 0;
  for (uint64_t i = 0; i < nbytes; ++i) expected += data[data_start + entry.begin + i];
  CUBE3D_FUZZ_CHECK(checksum == expected, "tensor bytes differ from the file's");
  CUBE3D_FUZZ_CHECK(std::memcmp(bytes, data + data_start + entry.begin, nbytes) == 0,
                    "tensor bytes differ from the file's");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  memfd = ::memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  if (memfd < 0) {
    std::perror("fuzz_safetensors: memfd_create");
    std::exit(1);
  }
  memfd_path = "/proc/self/fd/" + std::to_string(memfd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  cube3d::fuzz::refusals_ok([&] {
    const cube3d::SafetensorsFile file = cube3d::SafetensorsFile::open(memfd_path);
    uint64_t header_size = 0;
    CUBE3D_FUZZ_CHECK(size >= 8, "a file shorter than the length prefix was accepted");
    std::memcpy(&header_size, data, sizeof(header_size));
    CUBE3D_FUZZ_CHECK(header_size <= size - 8, "header length past the end was accepted");
    const uint64_t data_start = 8 + header_size;
    for (const std::string& name : file.names()) {
      CUBE3D_FUZZ_CHECK(file.contains(name), "names() lists a tensor contains() denies");
      check_tensor(file, name, data, size, data_start);
      // No tensor alive: the pages go back to the kernel and must read the same again.
      file.prefetch(name);
      (void)file.release_pages(name);
      check_tensor(file, name, data, size, data_start);
    }
    for (const auto& [key, value] : file.metadata()) {
      CUBE3D_FUZZ_CHECK(key != "__metadata__", "metadata key");
      (void)value;
    }
  });
  return 0;
}
