#include "cube3d/server/http/json_codec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <string_view>

#include "cube3d/core/error.h"
#include "cube3d/server/http/http_error.h"

namespace cube3d::http {
namespace {

// Protobuf's parse errors span lines (the input and a caret): one line reads better in JSON.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Every field, defaults included: HTTP clients have no generated defaults to fall back on.
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    throw internal_error("cannot write " + message.GetTypeName() +
                         " as JSON: " + std::string(status.message()));
  }
  // The repeated fields added with levels of detail are printed only when they hold something,
  // so that an answer to a request without them is byte for byte what it was before them (the
  // fields with presence, bounds, up_axis and pivot, are left out by the printer itself). The
  // printer writes them without spaces, and a string value cannot hold an unescaped quote:
  // these bytes are the fields themselves, never part of a prompt or a message.
  for (const std::string_view empty :
       {std::string_view(R"(,"lods":[])"), std::string_view(R"(,"lodFaceCounts":[])")}) {
    for (size_t at = json.find(empty); at != std::string::npos; at = json.find(empty, at)) {
      json.erase(at, empty.size());
    }
  }
  return json;
}

v1::GenerateMeshRequest parse_request(const std::string& body) {
  v1::GenerateMeshRequest request;
  // Unknown fields are an error (a misspelt field must not be silently dropped); both the
  // lowerCamelCase and the proto field names are read, as protobuf's JSON mapping defines.
  const google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &request, options);
  if (!status.ok()) {
    throw HttpError(400, ErrorCode::kInvalidArgument,
                    "the body is not a cube3d.v1.GenerateMeshRequest in JSON: " +
                        one_line(std::string(status.message())));
  }
  return request;
}

}  // namespace cube3d::http
