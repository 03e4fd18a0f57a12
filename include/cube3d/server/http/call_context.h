// What the HTTP door tells the service about a call, whichever route it came by (/v1's mesh
// calls and jobs, /v2's inference): its deadline (X-Request-Timeout-Ms, else ?timeout_ms=, in
// milliseconds > 0; the header wins), its credentials (Authorization), end user
// (X-End-User-Id, as sent, with how many times) and trace (traceparent). A bad deadline throws
// HttpError 400 naming the header or parameter.
#pragma once

#include "cube3d/core/clock.h"
#include "cube3d/server/httpd/http_message.h"
#include "cube3d/server/service/service.h"

namespace cube3d::http {

CallContext call_context_of(const Request& request, SteadyClock::time_point now);

// Why a call's work is cancelled when its exchange is abandoned: the client closed the
// connection, or read nothing within http.write_timeout_ms.
Status client_went_away();

}  // namespace cube3d::http
