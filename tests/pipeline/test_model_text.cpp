// The prompt as the model reads it, which the server's prompt policy matches.
#include "cube3d/pipeline/model_text.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_model_text {

TEST(ModelText, IsLowerCase) { EXPECT_EQ(text_the_model_reads("A Red CAR"), "a red car"); }

TEST(ModelText, DecodesHtmlEntities) {
  EXPECT_EQ(text_the_model_reads("salt &amp; pepper"), "salt & pepper");
  // Twice, like CLIP's basic_clean: "&amp;lt;" reads as "<".
  EXPECT_EQ(text_the_model_reads("a &amp;lt;b&amp;gt; tag"), "a <b> tag");
}

TEST(ModelText, FoldsWhiteSpace) {
  EXPECT_EQ(text_the_model_reads("  a \t red\n\n car  "), "a red car");
  EXPECT_EQ(text_the_model_reads("a\u00a0red\u3000car"), "a red car");  // non-ASCII spaces too
}

TEST(ModelText, RefusesInvalidUtf8) {
  testing::expect_error([] { text_the_model_reads("a \xff car"); }, ErrorCode::kInvalidArgument,
                        "not valid UTF-8");
}

}  // namespace test_model_text
}  // namespace cube3d
