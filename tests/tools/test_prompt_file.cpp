#include "cube3d/tools/prompt_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cube3d {
namespace test_prompt_file {

using Kind = PromptLine::Kind;

TEST(PromptFileTest, PlainLinesBlanksAndComments) {
  const std::string content =
      "a red dragon\r\n\n   \n# a comment\n  # indented comment\n"
      "  A  Wooden   Chair \nlast line without newline";
  const std::vector<PromptLine> lines = read_prompt_lines(content, {0, 1});
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0].kind, Kind::kPrompt);
  EXPECT_EQ(lines[0].prompt, "a red dragon");  // the \r dropped
  EXPECT_EQ(lines[0].number, 1);
  EXPECT_EQ(lines[1].kind, Kind::kBlank);
  EXPECT_EQ(lines[2].kind, Kind::kBlank);
  EXPECT_EQ(lines[3].kind, Kind::kComment);
  EXPECT_EQ(lines[4].kind, Kind::kComment);
  EXPECT_EQ(lines[5].prompt, "A  Wooden   Chair");          // trimmed, as given
  EXPECT_EQ(lines[5].normalised, "a wooden chair");         // what the model reads
  EXPECT_EQ(lines[6].prompt, "last line without newline");  // a last line counts
  EXPECT_EQ(lines[6].number, 7);
}

TEST(PromptFileTest, ShardsSeeTheirLinesWithFileLineNumbers) {
  const std::string content = "a\n\n# c\nb\nc\n";  // 5 lines; a trailing '\n' adds none
  const std::vector<PromptLine> second = read_prompt_lines(content, {1, 2});
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].number, 2);
  EXPECT_EQ(second[0].kind, Kind::kBlank);
  EXPECT_EQ(second[1].number, 4);
  EXPECT_EQ(second[1].prompt, "b");
  EXPECT_EQ(read_prompt_lines(content, {0, 2}).size(), 3u);
}

TEST(PromptFileTest, JsonLinesCarryOverrides) {
  const PromptLine line =
      parse_prompt_line(3, R"({"prompt": " a chair ", "seed": "18446744073709551615", "topP": 0.9,)"
                           R"( "guidance_scale": 0, "resolutionBase": 5, "targetFaceCount": 500,)"
                           R"( "boundingBox": {"x": 1, "y": 2, "z": 0.5}})");
  ASSERT_EQ(line.kind, Kind::kPrompt) << line.error;
  EXPECT_EQ(line.prompt, "a chair");
  EXPECT_EQ(line.overrides.seed, 18446744073709551615ull);
  EXPECT_EQ(line.overrides.top_p, 0.9);
  EXPECT_EQ(line.overrides.guidance_scale, 0.0);
  EXPECT_EQ(line.overrides.resolution_base, 5);
  EXPECT_EQ(line.overrides.target_face_count, 500);
  ASSERT_TRUE(line.overrides.bounding_box.has_value());
  EXPECT_EQ((*line.overrides.bounding_box)[1], 2.0f);
  const PromptLine plain = parse_prompt_line(1, R"({"prompt": "a lamp", "seed": 4})");
  EXPECT_EQ(plain.overrides.seed, 4u);
  EXPECT_FALSE(plain.overrides.top_p.has_value());
}

TEST(PromptFileTest, BadLinesSayWhy) {
  const std::string too_long(kDefaultMaxPromptBytes + 1, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad \xff byte", "not valid UTF-8 (byte offset 4)"},
      {too_long, "limit is 1024"},
      {"&nbsp;", "empty once normalised"},
      {R"({"prompt": "a chair",)", "malformed JSON"},
      {R"({"prompt": ""})", "prompt is empty"},
      {R"({"seed": 1})", "no \"prompt\""},
      {R"({"prompt": 3})", "prompt must be a string"},
      {R"({"prompt": "a", "sede": 1})", "unknown key \"sede\""},
      {R"({"prompt": "a", "seed": -1})", "seed must be >= 0"},
      {R"({"prompt": "a", "seed": 1.5})", "seed must be a whole number"},
      {R"({"prompt": "a", "topP": 1.5})", "topP must be in (0, 1]"},
      {R"({"prompt": "a", "guidanceScale": -1})", "guidanceScale must be >= 0"},
      {R"({"prompt": "a", "resolutionBase": 12})", "resolution_base"},
      {R"({"prompt": "a", "targetFaceCount": 0})", "targetFaceCount must be >= 1"},
      {R"({"prompt": "a", "boundingBox": {"x": 1, "y": 1}})", "boundingBox.z is missing"},
      {R"({"prompt": "a", "boundingBox": {"x": 1, "y": 1, "z": -1}})", "must be positive"},
  };
  for (const auto& [text, needle] : cases) {
    const PromptLine line = parse_prompt_line(9, text);
    EXPECT_EQ(line.kind, Kind::kError) << text;
    EXPECT_NE(line.error.find(needle), std::string::npos) << text << " -> " << line.error;
    EXPECT_EQ(line.number, 9);
    EXPECT_TRUE(line.prompt.empty());
  }
  // At the limit is fine.
  EXPECT_EQ(parse_prompt_line(1, std::string(kDefaultMaxPromptBytes, 'x')).kind, Kind::kPrompt);
}

}  // namespace test_prompt_file
}  // namespace cube3d
