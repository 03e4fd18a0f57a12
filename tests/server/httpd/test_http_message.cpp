// Header fields, targets, percent-decoding and query parameters as routes see them.
#include "cube3d/server/httpd/http_message.h"

#include <gtest/gtest.h>

namespace cube3d::http {
namespace test_http_message {

TEST(Headers, NamesAreCaseInsensitiveAndRepeatsKept) {
  Headers h;
  h.add("X-Warning", "one");
  h.add("x-warning", "two");
  h.add("Content-Type", "text/plain");
  EXPECT_EQ(h.count("X-WARNING"), 2u);
  EXPECT_EQ(h.get_all("x-Warning"), (std::vector<std::string_view>{"one", "two"}));
  EXPECT_EQ(h.value_or("content-type"), "text/plain");
  EXPECT_FALSE(h.get("Accept"));
  EXPECT_EQ(h.value_or("Accept", "*/*"), "*/*");
  h.set("X-WARNING", "only");
  EXPECT_EQ(h.get_all("x-warning"), std::vector<std::string_view>{"only"});
  h.remove("x-warning");
  EXPECT_FALSE(h.has("X-Warning"));
  EXPECT_EQ(h.size(), 1u);
}

TEST(Headers, ListItemsAreTakenOneAtATime) {
  std::string_view rest = "gzip;q=0.5, br,,identity";
  EXPECT_EQ(take_item(rest, ','), "gzip;q=0.5");
  EXPECT_EQ(rest, " br,,identity");
  EXPECT_EQ(take_item(rest, ','), " br");
  EXPECT_EQ(take_item(rest, ','), "");  // an empty item between two separators
  EXPECT_EQ(take_item(rest, ','), "identity");
  EXPECT_TRUE(rest.empty());
  rest = "a=1&";
  EXPECT_EQ(take_item(rest, '&'), "a=1");
  EXPECT_TRUE(rest.empty());  // a trailing separator leaves nothing, not an empty item
}

TEST(PercentDecode, DecodesAndRefusesWhatIsNotValid) {
  EXPECT_EQ(percent_decode("/v1/meshes%3Agenerate"), "/v1/meshes:generate");
  EXPECT_EQ(percent_decode("a+b"), "a+b");
  EXPECT_EQ(percent_decode("a+b", true), "a b");
  EXPECT_EQ(percent_decode("%e2%9C%93"), "\xe2\x9c\x93");
  EXPECT_FALSE(percent_decode("%"));
  EXPECT_FALSE(percent_decode("%4"));
  EXPECT_FALSE(percent_decode("abc%4"));
  EXPECT_FALSE(percent_decode("%zz"));
  EXPECT_FALSE(percent_decode("a%00b"));  // a NUL is never a path or a value
}

TEST(SplitTarget, OriginAbsoluteAndAsteriskForms) {
  auto t = split_target("/v1/jobs/abc?wait_ms=100&x=%20y");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/v1/jobs/abc");
  EXPECT_EQ(t->query, "wait_ms=100&x=%20y");
  t = split_target("http://example.com:8080/healthz?a=1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/healthz");
  EXPECT_EQ(t->query, "a=1");
  t = split_target("HTTP://example.com");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/");
  t = split_target("*");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "*");
  t = split_target("/a?b#frag");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->query, "b");
  EXPECT_FALSE(split_target("example.com:443"));  // authority-form (CONNECT)
  EXPECT_FALSE(split_target(""));
  EXPECT_FALSE(split_target("/%zz"));
  EXPECT_FALSE(split_target("/a%00"));
}

TEST(Request, QueryParameters) {
  Request r;
  r.query = "timeout_ms=250&prompt=a+red%20chair&flag&empty=&timeout_ms=9&bad=%zz";
  EXPECT_EQ(r.query_param("timeout_ms"), "250");  // the first
  EXPECT_EQ(r.query_param("prompt"), "a red chair");
  EXPECT_EQ(r.query_param("flag"), "");
  EXPECT_EQ(r.query_param("empty"), "");
  EXPECT_FALSE(r.query_param("missing"));
  EXPECT_FALSE(r.query_param("bad"));
  EXPECT_FALSE(r.query_param("timeout"));
}

}  // namespace test_http_message
}  // namespace cube3d::http
