#include "cube3d/server/grpc/generate_request_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/wire_format_lite.h>

#include <optional>
#include <string>

#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kPromptField = v1::GenerateMeshRequest::kPromptFieldNumber;

// Whether the top-level prompt fields are all valid UTF-8 (the usual case: then protobuf's own
// parser reads the message in one pass). A walk over the tags, without copying: malformed bytes
// read as "valid" here and fail in the parser that follows.
bool prompt_is_utf8(std::string_view bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kPromptField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      std::string prompt;
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.ReadString(&prompt, static_cast<int>(length))) {
        return true;
      }
      if (find_invalid_utf8(prompt)) return false;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return true;
    }
  }
  return true;
}

}  // namespace

bool parse_generate_request(std::string_view bytes, v1::GenerateMeshRequest& request) {
  if (prompt_is_utf8(bytes))
    return request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  // The prompt is not UTF-8: the message without it is parsed, and the prompt set as sent (the
  // C++ setter does not check; validation names it).
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return false;
  std::optional<std::string> prompt;
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& field = fields.field(i);
    if (field.number() == kPromptField &&
        field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      prompt = field.length_delimited();
    }
  }
  fields.DeleteByNumber(kPromptField);
  std::string rest;
  if (!fields.SerializeToString(&rest) || !request.ParseFromString(rest)) return false;
  if (prompt) request.set_prompt(*prompt);
  return true;
}

}  // namespace cube3d
