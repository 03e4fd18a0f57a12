#include "cube3d/clients/cache_status.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace cube3d {

const char* cache_status_name(CacheStatus status) {
  switch (status) {
    case CacheStatus::kMiss:
      return "miss";
    case CacheStatus::kHit:
      return "hit";
    case CacheStatus::kCoalesced:
      return "coalesced";
    case CacheStatus::kBypass:
      return "bypass";
    case CacheStatus::kUnknown:
      break;
  }
  return "unknown";
}

CacheStatus cache_status_of_proto(int value) {
  // The numbers of cube3d.v1.CacheStatus (mesh_service.proto); wire numbers never change.
  switch (value) {
    case 1:
      return CacheStatus::kMiss;
    case 2:
      return CacheStatus::kHit;
    case 3:
      return CacheStatus::kCoalesced;
    case 4:
      return CacheStatus::kBypass;
    default:
      return CacheStatus::kUnknown;
  }
}

CacheStatus cache_status_of_header(std::string_view value) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!value.empty() && blank(value.front())) value.remove_prefix(1);
  while (!value.empty() && blank(value.back())) value.remove_suffix(1);
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const CacheStatus s :
       {CacheStatus::kMiss, CacheStatus::kHit, CacheStatus::kCoalesced, CacheStatus::kBypass}) {
    if (lower == cache_status_name(s)) return s;
  }
  return CacheStatus::kUnknown;
}

CacheStatus http_cache_status(int result_field, std::string_view x_cache_header) {
  const CacheStatus from_field = cache_status_of_proto(result_field);
  return from_field != CacheStatus::kUnknown ? from_field : cache_status_of_header(x_cache_header);
}

}  // namespace cube3d
