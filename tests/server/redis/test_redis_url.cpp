#include "cube3d/server/redis/redis_url.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d::test_redis_url {

TEST(RedisUrl, PlainHostTakesTheDefaults) {
  const RedisEndpoint e = parse_redis_url("redis://cache.internal");
  EXPECT_EQ(e.host, "cache.internal");
  EXPECT_EQ(e.port, 6379);
  EXPECT_EQ(e.db, 0);
  EXPECT_FALSE(e.tls);
  EXPECT_TRUE(e.user.empty());
  EXPECT_TRUE(e.password.empty());
}

TEST(RedisUrl, PasswordPortDatabaseAndTls) {
  const RedisEndpoint e = parse_redis_url("rediss://:s%40cr%3At@10.0.0.7:6380/3");
  EXPECT_TRUE(e.tls);
  EXPECT_EQ(e.host, "10.0.0.7");
  EXPECT_EQ(e.port, 6380);
  EXPECT_EQ(e.db, 3);
  EXPECT_TRUE(e.user.empty());
  EXPECT_EQ(e.password, "s@cr:t");  // percent-decoded
}

TEST(RedisUrl, AclUserAndIpv6Host) {
  const RedisEndpoint e = parse_redis_url("redis://cube3d:pw@[::1]:7000");
  EXPECT_EQ(e.user, "cube3d");
  EXPECT_EQ(e.password, "pw");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(endpoint_text(e), "[::1]:7000");
}

TEST(RedisUrl, LoneUserInfoIsThePassword) {
  // As redis-cli and the other Redis clients read redis://secret@host.
  EXPECT_EQ(parse_redis_url("redis://secret@h").password, "secret");
  // A password holding '@' and '/' unescaped still ends at the last '@'.
  EXPECT_EQ(parse_redis_url("redis://:a@b/c@h/2").password, "a@b/c");
  EXPECT_EQ(parse_redis_url("redis://:a@b/c@h/2").db, 2);
}

TEST(RedisUrl, BadUrlsNameTheKeyAndNeverThePassword) {
  for (const char* bad :
       {"http://h", "redis://", "redis://:pw@", "redis://h:0", "redis://h:99999", "redis://h:x",
        "redis://h/db", "redis://h?timeout=1", "redis://[::1", "redis://h:", "redis://:p%zz@h"}) {
    SCOPED_TRACE(bad);
    testing::expect_error([&] { parse_redis_url(bad); }, ErrorCode::kInvalidArgument, "redis.url");
  }
  try {
    parse_redis_url("redis://:hunter2@h:bad");
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
  }
}

TEST(RedisUrl, RedactedUrlHidesOnlyThePassword) {
  EXPECT_EQ(redact_redis_url("redis://:hunter2@h:6379/1"), "redis://:***@h:6379/1");
  EXPECT_EQ(redact_redis_url("rediss://me:hunter2@h"), "rediss://me:***@h");
  EXPECT_EQ(redact_redis_url("redis://h:6379"), "redis://h:6379");
  EXPECT_EQ(redact_redis_url(""), "");
}

}  // namespace cube3d::test_redis_url
