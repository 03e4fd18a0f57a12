// The gRPC door's reading of a GenerateMeshRequest's bytes: what protobuf reads is read the same
// way, a prompt that is not UTF-8 is handed on as sent (for validation to name), and bytes that
// are no request are refused.
#include "cube3d/server/grpc/generate_request_bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace cube3d {
namespace test_generate_request_bytes {

// Field 1 (prompt), length-delimited, with `bytes` as they are.
std::string prompt_field(const std::string& bytes) {
  return std::string("\x0a", 1) + static_cast<char>(bytes.size()) + bytes;
}

v1::GenerateMeshRequest full_request() {
  v1::GenerateMeshRequest r;
  r.set_prompt(
      // Split where a hex escape would swallow the next letter ("\xafc" is one escape).
      "a small boat, \xc3\xbcn\xc3\xaf"
      "c\xc3\xb6"
      "d\xc3\xa9");
  r.set_guidance_scale(3.0f);
  r.set_top_p(0.9f);
  r.set_seed(42);
  r.mutable_bounding_box()->set_x(1.0f);
  r.set_resolution_base(6);
  r.set_format(v1::MESH_FORMAT_PLY);
  r.set_target_face_count(5000);
  r.set_return_shape_tokens(true);
  r.set_request_id("req-1");
  r.set_mesh_profile(v1::MESH_PROFILE_ROBLOX);
  r.set_bypass_cache(true);
  r.set_priority(v1::PRIORITY_BATCH);
  return r;
}

TEST(GenerateRequestBytes, ReadsWhatProtobufReadsTheSameWay) {
  const v1::GenerateMeshRequest sent = full_request();
  v1::GenerateMeshRequest read;
  ASSERT_TRUE(parse_generate_request(sent.SerializeAsString(), read));
  EXPECT_EQ(read.SerializeAsString(), sent.SerializeAsString());
  EXPECT_EQ(read.DebugString(), sent.DebugString());
}

TEST(GenerateRequestBytes, AnInvalidUtf8PromptIsHandedOnAsSent) {
  v1::GenerateMeshRequest rest = full_request();
  rest.clear_prompt();
  const std::string bytes = prompt_field(
                                "ab\xff"
                                "cd") +
                            rest.SerializeAsString();
  // Protobuf's own parser refuses it (proto3 string): why the door reads the prompt itself.
  v1::GenerateMeshRequest strict;
  EXPECT_FALSE(strict.ParseFromString(bytes));
  v1::GenerateMeshRequest read;
  ASSERT_TRUE(parse_generate_request(bytes, read));
  EXPECT_EQ(read.prompt(), std::string("ab\xff"
                                       "cd"));
  // Every other field arrives too.
  EXPECT_EQ(read.seed(), 42u);
  EXPECT_EQ(read.format(), v1::MESH_FORMAT_PLY);
  EXPECT_EQ(read.request_id(), "req-1");
  EXPECT_EQ(read.priority(), v1::PRIORITY_BATCH);
  EXPECT_FLOAT_EQ(read.bounding_box().x(), 1.0f);
}

TEST(GenerateRequestBytes, TheLastPromptWinsAsInProtobuf) {
  const std::string valid_then_bad = prompt_field("chair") + prompt_field(
                                                                 "t\xc3"
                                                                 "ble");
  v1::GenerateMeshRequest read;
  ASSERT_TRUE(parse_generate_request(valid_then_bad, read));
  EXPECT_EQ(read.prompt(), std::string("t\xc3"
                                       "ble"));
  const std::string both_valid = prompt_field("chair") + prompt_field("table");
  ASSERT_TRUE(parse_generate_request(both_valid, read));
  EXPECT_EQ(read.prompt(), "table");
}

TEST(GenerateRequestBytes, BytesThatAreNoRequestAreRefused) {
  v1::GenerateMeshRequest read;
  // A length past the end, a truncated varint, a group that never ends.
  EXPECT_FALSE(parse_generate_request(std::string("\x0a\x10"
                                                  "abc",
                                                  5),
                                      read));
  EXPECT_FALSE(parse_generate_request(std::string("\x20\xff", 2), read));
  EXPECT_FALSE(parse_generate_request(std::string("\x0b", 1), read));
  // The same, after a prompt that is not UTF-8 (the slow path).
  EXPECT_FALSE(parse_generate_request(prompt_field("\xff") + std::string("\x0a\x10"
                                                                         "abc",
                                                                         5),
                                      read));
  // Invalid UTF-8 in another string field (request_id, 10) is protobuf's refusal.
  EXPECT_FALSE(parse_generate_request(std::string("\x52\x01\xff", 3), read));
  EXPECT_FALSE(parse_generate_request(prompt_field("\xff") + std::string("\x52\x01\xff", 3), read));
}

TEST(GenerateRequestBytes, EmptyBytesAreAnEmptyRequest) {
  v1::GenerateMeshRequest read;
  ASSERT_TRUE(parse_generate_request("", read));
  EXPECT_TRUE(read.prompt().empty());
}

}  // namespace test_generate_request_bytes
}  // namespace cube3d
