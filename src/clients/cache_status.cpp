#include "cube3d/clients/cache_status.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "cube3d/core/enum_table.h"

namespace cube3d {

namespace {

// The X-Cache header's words (the report's keys) and cube3d.v1.CacheStatus's numbers
// (mesh_service.proto; wire numbers never change).
constexpr EnumTable<CacheStatus, std::string_view, 4> kCacheStatusNames = {
    {{CacheStatus::kMiss, "miss"},
     {CacheStatus::kHit, "hit"},
     {CacheStatus::kCoalesced, "coalesced"},
     {CacheStatus::kBypass, "bypass"}}};
constexpr EnumTable<CacheStatus, int, 4> kProtoNumbers = {{{CacheStatus::kMiss, 1},
                                                           {CacheStatus::kHit, 2},
                                                           {CacheStatus::kCoalesced, 3},
                                                           {CacheStatus::kBypass, 4}}};

}  // namespace

// The names are literals, so a name's data() is a C string.
const char* cache_status_name(CacheStatus status) {
  return lookup(kCacheStatusNames, status).value_or("unknown").data();
}

CacheStatus cache_status_of_proto(int value) {
  return reverse_lookup(kProtoNumbers, value).value_or(CacheStatus::kUnknown);
}

CacheStatus cache_status_of_header(std::string_view value) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!value.empty() && blank(value.front())) value.remove_prefix(1);
  while (!value.empty() && blank(value.back())) value.remove_suffix(1);
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return reverse_lookup(kCacheStatusNames, std::string_view(lower)).value_or(CacheStatus::kUnknown);
}

CacheStatus http_cache_status(int result_field, std::string_view x_cache_header) {
  const CacheStatus from_field = cache_status_of_proto(result_field);
  return from_field != CacheStatus::kUnknown ? from_field : cache_status_of_header(x_cache_header);
}

}  // namespace cube3d
