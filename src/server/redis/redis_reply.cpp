#include "cube3d/server/redis/redis_reply.h"

#include <charconv>

namespace cube3d {

int64_t RedisReply::as_int(int64_t fallback) const {
  if (type == Type::kInteger) return integer;
  if (type != Type::kString && type != Type::kStatus) return fallback;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty() ? value
                                                                                   : fallback;
}

}  // namespace cube3d
