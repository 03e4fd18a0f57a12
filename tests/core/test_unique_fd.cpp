// UniqueFd closes what it owns exactly once: when it goes, when close() takes it, or when a
// move hands it on.
#include "cube3d/core/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

namespace cube3d::test_unique_fd {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

}  // namespace

TEST(UniqueFd, ClosesWhenItGoes) {
  int raw = -1;
  {
    const UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, CloseAnswersAndReleases) {
  UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = fd.get();
  EXPECT_EQ(fd.close(), 0);
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(is_open(raw));
  EXPECT_FALSE(UniqueFd().valid());
  EXPECT_FALSE(UniqueFd(-1).valid());  // a failed open(2) owns nothing
}

TEST(UniqueFd, AMoveHandsTheDescriptorOn) {
  UniqueFd first(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = first.get();
  UniqueFd second(std::move(first));
  EXPECT_EQ(second.get(), raw);
  UniqueFd third(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int replaced = third.get();
  third = std::move(second);
  EXPECT_FALSE(is_open(replaced));  // the one it held is closed
  EXPECT_EQ(third.get(), raw);
  EXPECT_TRUE(is_open(raw));
}

}  // namespace cube3d::test_unique_fd
