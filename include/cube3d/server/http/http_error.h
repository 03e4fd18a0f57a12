// An answer the HTTP front door decides itself, before or around the service (a body that
// is no JSON request, an Accept that cannot be met, a bad timeout): thrown where it is found,
// turned into a status and error body once, by the route.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d::http {

class HttpError : public std::runtime_error {
 public:
  HttpError(int http_status, ErrorCode code, const std::string& message,
            int64_t retry_after_seconds = 0)
      : std::runtime_error(message),
        http_status(http_status),
        code(code),
        retry_after_seconds(retry_after_seconds) {}
  int http_status;
  ErrorCode code;
  int64_t retry_after_seconds;  // 0: no Retry-After
};

}  // namespace cube3d::http
