// End user ids: what is accepted, what is refused (without echoing the id), and pseudonyms.
#include "cube3d/server/admission/end_user.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_end_user {

TEST(EndUser, AcceptsOpaqueIdsOfTheAllowedCharacters) {
  const std::vector<std::string> ids = {"1234567890",
                                        "player:42",
                                        "a.b_c-d@e",
                                        "dGVzdA+/=",
                                        "6f1c2a3e-8b9d-4e0f-a1b2-c3d4e5f60718",
                                        std::string(128, 'x')};
  for (const std::string& id : ids) {
    EXPECT_NO_THROW(check_end_user_id(id)) << id;
  }
}

TEST(EndUser, RefusesWhatIsNotAnIdNamingTheHeaderNotTheId) {
  testing::expect_error([] { check_end_user_id(""); }, ErrorCode::kInvalidArgument,
                        "X-End-User-Id");
  testing::expect_error([] { check_end_user_id(std::string(129, 'x')); },
                        ErrorCode::kInvalidArgument, "129 bytes, over 128");
  const std::vector<std::string> bad = {"a b", "evil\nline", std::string("a\0b", 3), "caf\xc3\xa9",
                                        "<script>"};
  for (const std::string& id : bad) {
    try {
      check_end_user_id(id);
      ADD_FAILURE() << "accepted " << id;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string message = e.what();
      EXPECT_NE(message.find("end-user-id"), std::string::npos) << message;
      EXPECT_EQ(message.find(id), std::string::npos) << "echoes the id: " << message;
    }
  }
}

TEST(EndUser, PseudonymsAreStablePerKeyAndHideTheId) {
  const std::string a = end_user_pseudonym("studio-a", "player:42");
  EXPECT_EQ(a, end_user_pseudonym("studio-a", "player:42"));
  EXPECT_EQ(a.size(), 17u);
  EXPECT_EQ(a[0], 'u');
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 1), std::string::npos) << a;
  EXPECT_NE(a, end_user_pseudonym("studio-b", "player:42")) << "one id under two keys";
  EXPECT_NE(a, end_user_pseudonym("studio-a", "player:43"));
  EXPECT_EQ(end_user_pseudonym("studio-a", ""), "");
}

}  // namespace test_end_user
}  // namespace cube3d
