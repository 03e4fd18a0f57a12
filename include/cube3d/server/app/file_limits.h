// The open-file limit the server runs with. Every connection is a descriptor: a server meant
// to hold 10,000 idle HTTP connections cannot keep the usual soft limit of 1,024. As nginx
// (worker_rlimit_nofile) and Go's runtime do, the server raises its soft RLIMIT_NOFILE to the
// hard limit at start-up.
#pragma once

#include <cstdint>

namespace cube3d {

struct FileLimit {
  uint64_t before = 0;  // the soft limit found
  uint64_t now = 0;     // the soft limit after raising it (the hard limit, or `before`)
};

// Raises the soft limit to the hard one (capped at `cap`, since an "unlimited" hard limit
// would make some libraries allocate per-descriptor tables that large). Never lowers it.
FileLimit raise_open_file_limit(uint64_t cap = 1u << 20);

}  // namespace cube3d
