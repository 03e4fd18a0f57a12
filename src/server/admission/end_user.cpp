#include "cube3d/server/admission/end_user.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstdint>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

bool allowed(char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '.':
    case '_':
    case ':':
    case '@':
    case '+':
    case '/':
    case '=':
    case '-':
      return true;
    default:
      return false;
  }
}

// The pseudonyms' key: random per process, so that a pseudonym in a log cannot be matched to
// a player by hashing candidate ids.
const std::array<unsigned char, 32>& pseudonym_key() {
  static const std::array<unsigned char, 32> key = [] {
    std::array<unsigned char, 32> k{};
    if (RAND_bytes(k.data(), static_cast<int>(k.size())) != 1) {
      throw internal_error("no random bytes for the end users' pseudonym key (OpenSSL RAND_bytes)");
    }
    return k;
  }();
  return key;
}

}  // namespace

void check_end_user_id(std::string_view id, size_t times_sent) {
  const std::string field = std::string("end user id (the ") + kEndUserHeader +
                            " header, gRPC metadata " + kEndUserMetadata + ")";
  if (times_sent > 1) {
    throw invalid_argument(field + ": sent " + std::to_string(times_sent) +
                           " times; send it once (which one is meant cannot be told)");
  }
  if (id.empty()) throw invalid_argument(field + ": empty; leave it out for no end user");
  if (id.size() > kMaxEndUserIdBytes) {
    throw invalid_argument(field + ": " + std::to_string(id.size()) + " bytes, over " +
                           std::to_string(kMaxEndUserIdBytes));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (!allowed(id[i])) {
      throw invalid_argument(field + ": byte " + std::to_string(i) +
                             " is not one of A-Z a-z 0-9 . _ : @ + / = -");
    }
  }
}

std::string end_user_pseudonym(std::string_view key_name, std::string_view id) {
  if (id.empty()) return {};
  // The key's name is part of the message: one player id under two keys is two end users.
  std::string message(key_name);
  message += '\0';
  message += id;
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  unsigned int size = 0;
  const auto& key = pseudonym_key();
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &size) == nullptr ||
      size < 8) {
    throw internal_error("HMAC-SHA256 failed (OpenSSL)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "u";
  for (size_t i = 0; i < 8; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

}  // namespace cube3d
