// The project's one JSON string writer (RFC 8259), for the places that write JSON by hand: the
// structured log lines (logging.h) and the provenance in mesh files (mesh/mesh_metadata.h).
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

// Appends `text` as a JSON string, quotes included: '"' and '\' escaped, control characters
// (below 0x20, and DEL) as \b \f \n \r \t or \u00XX, and every byte that is not part of valid
// UTF-8 replaced by U+FFFD, so that the result is always valid JSON. With `ascii_only` every
// character past ASCII is written as a \uXXXX escape (a surrogate pair above the BMP), so that
// the result is plain ASCII.
void append_json_string(std::string& out, std::string_view text, bool ascii_only = false);

}  // namespace cube3d
