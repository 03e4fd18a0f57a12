#include "cube3d/server/httpd/cache_control.h"

#include <gtest/gtest.h>

#include "server/httpd/field_lines.h"

namespace cube3d::http {
namespace test_cache_control {

Headers lines(std::initializer_list<std::string> values) {
  return testing::field_lines("Cache-Control", values);
}

TEST(CacheControl, DirectivesAreCaseInsensitiveTokensOfAList) {
  EXPECT_EQ(cache_control_directives(lines({"No-Cache"})), std::vector<std::string>{"no-cache"});
  EXPECT_EQ(cache_control_directives(lines({"max-age=0, NO-STORE"})),
            (std::vector<std::string>{"max-age", "no-store"}));
  EXPECT_EQ(cache_control_directives(lines({" , private ,, no-transform , "})),
            (std::vector<std::string>{"private", "no-transform"}));
  // A value may be a quoted string, commas inside it included.
  EXPECT_EQ(cache_control_directives(lines({R"(ext="a, \"b\", c", no-cache)"})),
            (std::vector<std::string>{"ext", "no-cache"}));
}

TEST(CacheControl, EveryFieldLineIsPartOfTheList) {
  EXPECT_TRUE(wants_fresh_answer(lines({"max-age=60", "no-cache"})));
  EXPECT_TRUE(wants_fresh_answer(lines({"private", "No-Store"})));
  EXPECT_FALSE(wants_fresh_answer(lines({"max-age=60", "private"})));
}

TEST(CacheControl, OnlyWholeDirectivesCount) {
  // The substring matching of before: "no-cachex" bypassed, "No-Cache" did not.
  EXPECT_FALSE(wants_fresh_answer(lines({"no-cachex"})));
  EXPECT_FALSE(wants_fresh_answer(lines({"x-no-store"})));
  EXPECT_FALSE(wants_fresh_answer(lines({R"(ext="no-cache")"})));
  EXPECT_TRUE(wants_fresh_answer(lines({"NO-CACHE"})));
  EXPECT_FALSE(wants_fresh_answer(Headers{}));
}

TEST(CacheControl, MalformedMembersAreSkippedNotFatal) {
  EXPECT_EQ(cache_control_directives(lines({"no cache, no-store"})),
            std::vector<std::string>{"no-store"});
  EXPECT_EQ(cache_control_directives(lines({R"(ext="unterminated, no-cache)"})),
            std::vector<std::string>{});
  EXPECT_EQ(cache_control_directives(lines({"=1, (odd), no-store"})),
            std::vector<std::string>{"no-store"});
}

}  // namespace test_cache_control
}  // namespace cube3d::http
