// The server's open-file limit is raised to the hard limit, never lowered.
#include "cube3d/server/app/file_limits.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace cube3d {
namespace test_file_limits {

TEST(FileLimits, RaisesTheSoftLimitToTheHardOne) {
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max < 256) GTEST_SKIP() << "hard limit too low to test";
  rlimit lowered = original;
  lowered.rlim_cur = 128;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);

  const FileLimit raised = raise_open_file_limit(original.rlim_max);
  EXPECT_EQ(raised.before, 128u);
  EXPECT_EQ(raised.now, original.rlim_max);
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, original.rlim_max);

  // A cap below the current limit never lowers it.
  const FileLimit capped = raise_open_file_limit(64);
  EXPECT_EQ(capped.before, original.rlim_max);
  EXPECT_EQ(capped.now, original.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &original);
}

}  // namespace test_file_limits
}  // namespace cube3d
