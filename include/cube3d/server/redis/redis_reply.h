// One Redis reply (RESP2) as a value: what the connection parsed, owned, with no pointer into
// the client library's objects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cube3d {

struct RedisReply {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;               // kInteger
  std::string text;                  // kString, kStatus, kError
  std::vector<RedisReply> elements;  // kArray

  bool nil() const { return type == Type::kNil; }
  bool error() const { return type == Type::kError; }
  // A bulk or status string; "" for nil.
  const std::string& str() const { return text; }
  // An integer reply, or a string of digits (Lua scripts and HGET answer strings); `fallback`
  // otherwise.
  int64_t as_int(int64_t fallback = 0) const;
};

}  // namespace cube3d
