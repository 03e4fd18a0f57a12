#include "cube3d/server/app/file_limits.h"

#include <sys/resource.h>

#include <algorithm>

namespace cube3d {

FileLimit raise_open_file_limit(uint64_t cap) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  FileLimit result{limit.rlim_cur, limit.rlim_cur};
  const rlim_t wanted = std::min<rlim_t>(limit.rlim_max, cap);
  if (wanted > limit.rlim_cur) {
    limit.rlim_cur = wanted;
    if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) result.now = wanted;
  }
  return result;
}

}  // namespace cube3d
