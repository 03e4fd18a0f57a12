// A request's Cache-Control directives as RFC 9111 (section 5.2) reads them: a comma-separated
// list of tokens, each optionally `=value` (a token or a quoted string), names case-insensitive,
// and every Cache-Control field line of the request one part of the same list. What the server
// makes of them: a client (or a proxy) that says no-cache or no-store gets a fresh answer,
// neither read from the result cache nor stored in it.
#pragma once

#include <string>
#include <vector>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::http {

// The directive names of every Cache-Control line, lower case, in order ("No-Cache, max-age=0"
// then "no-store" -> {"no-cache", "max-age", "no-store"}). Empty members of the list (",,") are
// skipped; a malformed member (a name that is not a token) is skipped, not fatal: a cache
// directive it cannot read is ignored, as RFC 9111 asks.
std::vector<std::string> cache_control_directives(const Headers& headers);

// Whether the request asks for a fresh answer: a no-cache or no-store directive.
bool wants_fresh_answer(const Headers& headers);

}  // namespace cube3d::http
