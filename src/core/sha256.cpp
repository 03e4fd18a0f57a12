#include "cube3d/core/sha256.h"

#include <openssl/evp.h>

#include "cube3d/core/error.h"

namespace cube3d {

Sha256Digest sha256(std::string_view bytes) {
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != digest.size()) {
    throw internal_error("SHA-256 failed (OpenSSL)");
  }
  return digest;
}

std::string hex_of(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const uint8_t byte : bytes) {
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

struct Sha256Stream::Context {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

Sha256Stream::Sha256Stream() : context_(std::make_unique<Context>()) {
  if (!context_->md || EVP_DigestInit_ex(context_->md.get(), EVP_sha256(), nullptr) != 1) {
    throw internal_error("SHA-256: cannot initialise OpenSSL's digest");
  }
}

Sha256Stream::~Sha256Stream() = default;

void Sha256Stream::add(std::string_view bytes) {
  if (EVP_DigestUpdate(context_->md.get(), bytes.data(), bytes.size()) != 1) {
    throw internal_error("SHA-256 failed (OpenSSL)");
  }
}

Sha256Digest Sha256Stream::finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_->md.get(), digest.data(), &length) != 1 ||
      length != digest.size()) {
    throw internal_error("SHA-256 failed (OpenSSL)");
  }
  return digest;
}

}  // namespace cube3d
