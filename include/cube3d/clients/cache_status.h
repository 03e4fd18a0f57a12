// How cube3d-loadgen reads where an answer came from in the server's result cache: the gRPC
// response's cache_status (a cube3d.v1.CacheStatus), over HTTP the result's `cacheStatus` (the
// same enum in protobuf's JSON mapping) or an `X-Cache: hit|miss|coalesced|bypass` header.
// Protobuf-free (the value is taken as the enum's number), so load_report.h can hold it.
#pragma once

#include <string_view>

namespace cube3d {

enum class CacheStatus {
  kUnknown,    // the answer did not say (a server without a cache, or a newer value)
  kMiss,       // computed for this request (and stored)
  kHit,        // served from the cache
  kCoalesced,  // shared the computation of an identical request in flight
  kBypass,     // computed without the cache (asked for, or the cache is off)
};

// "unknown", "miss", "hit", "coalesced" or "bypass": the X-Cache spelling, and the report's.
const char* cache_status_name(CacheStatus status);

// A cube3d.v1.CacheStatus by number: 1 MISS, 2 HIT, 3 COALESCED, 4 BYPASS; anything else
// (UNSPECIFIED, a value this build does not know) is unknown.
CacheStatus cache_status_of_proto(int value);

// An X-Cache header's value, ASCII case-insensitive, surrounding blanks ignored; unknown for
// anything else (also an empty or absent header).
CacheStatus cache_status_of_header(std::string_view value);

// An HTTP answer's status: the result's cacheStatus (by number) when it says one, else the
// X-Cache header's.
CacheStatus http_cache_status(int result_field, std::string_view x_cache_header);

}  // namespace cube3d
