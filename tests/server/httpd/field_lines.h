// Test support for the tests of header fields that are lists (Cache-Control, Accept-Encoding):
// headers holding one field line per value, as a client may send a list split over several lines.
#pragma once

#include <initializer_list>
#include <string>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::testing {

inline http::Headers field_lines(const std::string& name,
                                 std::initializer_list<std::string> values) {
  http::Headers headers;
  for (const std::string& value : values) headers.add(name, value);
  return headers;
}

}  // namespace cube3d::testing
