// SHA-256 (OpenSSL's), the one digest of the project: API keys' hashes, result-cache keys and
// entry checksums, the model's weights digest, batch output names.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace cube3d {

using Sha256Digest = std::array<uint8_t, 32>;

// Throws internal_error if OpenSSL fails (it does not, short of running out of memory).
Sha256Digest sha256(std::string_view bytes);

// Lower-case hex, two digits a byte (a digest, or any bytes).
std::string hex_of(std::span<const uint8_t> bytes);

// A digest of bytes that come in pieces (a file read in blocks).
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void add(std::string_view bytes);
  Sha256Digest finish();  // once

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

}  // namespace cube3d
