// How an answer's cache status is read: the proto enum's numbers, the X-Cache header (case and
// blanks), which of the two an HTTP answer goes by, and the report's counts.
#include "cube3d/clients/cache_status.h"

#include <gtest/gtest.h>

#include "cube3d/clients/load_report.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {
namespace test_cache_status {

TEST(CacheStatusTest, FromTheProtoEnum) {
  EXPECT_EQ(cache_status_of_proto(v1::CACHE_STATUS_MISS), CacheStatus::kMiss);
  EXPECT_EQ(cache_status_of_proto(v1::CACHE_STATUS_HIT), CacheStatus::kHit);
  EXPECT_EQ(cache_status_of_proto(v1::CACHE_STATUS_COALESCED), CacheStatus::kCoalesced);
  EXPECT_EQ(cache_status_of_proto(v1::CACHE_STATUS_BYPASS), CacheStatus::kBypass);
  EXPECT_EQ(cache_status_of_proto(v1::CACHE_STATUS_UNSPECIFIED), CacheStatus::kUnknown);
  EXPECT_EQ(cache_status_of_proto(17), CacheStatus::kUnknown);  // a newer server's value
  EXPECT_EQ(cache_status_of_proto(-1), CacheStatus::kUnknown);
}

TEST(CacheStatusTest, FromTheXCacheHeader) {
  EXPECT_EQ(cache_status_of_header("hit"), CacheStatus::kHit);
  EXPECT_EQ(cache_status_of_header("miss"), CacheStatus::kMiss);
  EXPECT_EQ(cache_status_of_header("coalesced"), CacheStatus::kCoalesced);
  EXPECT_EQ(cache_status_of_header("bypass"), CacheStatus::kBypass);
  EXPECT_EQ(cache_status_of_header("HIT"), CacheStatus::kHit);
  EXPECT_EQ(cache_status_of_header(" Miss\t"), CacheStatus::kMiss);
  EXPECT_EQ(cache_status_of_header(""), CacheStatus::kUnknown);
  EXPECT_EQ(cache_status_of_header("unknown"), CacheStatus::kUnknown);
  EXPECT_EQ(cache_status_of_header("hit from cdn"), CacheStatus::kUnknown);
  EXPECT_EQ(cache_status_of_header("TCP_HIT"), CacheStatus::kUnknown);
}

TEST(CacheStatusTest, HttpGoesByTheResultFieldThenTheHeader) {
  EXPECT_EQ(http_cache_status(v1::CACHE_STATUS_HIT, ""), CacheStatus::kHit);
  EXPECT_EQ(http_cache_status(v1::CACHE_STATUS_HIT, "miss"), CacheStatus::kHit);
  EXPECT_EQ(http_cache_status(v1::CACHE_STATUS_UNSPECIFIED, "coalesced"), CacheStatus::kCoalesced);
  EXPECT_EQ(http_cache_status(v1::CACHE_STATUS_UNSPECIFIED, ""), CacheStatus::kUnknown);
}

TEST(CacheStatusTest, NamesAreTheHeadersSpelling) {
  for (const CacheStatus s :
       {CacheStatus::kMiss, CacheStatus::kHit, CacheStatus::kCoalesced, CacheStatus::kBypass}) {
    EXPECT_EQ(cache_status_of_header(cache_status_name(s)), s) << cache_status_name(s);
  }
  EXPECT_STREQ(cache_status_name(CacheStatus::kUnknown), "unknown");
}

TEST(CacheStatusTest, CountsAddUp) {
  CacheCounts c;
  for (const CacheStatus s :
       {CacheStatus::kHit, CacheStatus::kHit, CacheStatus::kMiss, CacheStatus::kCoalesced,
        CacheStatus::kBypass, CacheStatus::kUnknown, CacheStatus::kHit}) {
    c.add(s);
  }
  EXPECT_EQ(c, (CacheCounts{.hit = 3, .miss = 1, .coalesced = 1, .bypass = 1, .unknown = 1}));
  EXPECT_EQ(c.total(), 7u);
}

}  // namespace test_cache_status
}  // namespace cube3d
