// core/stopwatch.h: limit_ns, the one conversion of a timeout in seconds for the collective
// watchdog and the cuda_ipc device waits (where 0 ns means "no timeout").
#include "core/stopwatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace echo {
namespace {

TEST(LimitNs, OffForZeroNegativeAndNaN) {
  EXPECT_EQ(limit_ns(0.0), 0);
  EXPECT_EQ(limit_ns(-3.0), 0);
  EXPECT_EQ(limit_ns(std::nan("")), 0);
  EXPECT_EQ(limit_ns(-std::numeric_limits<double>::infinity()), 0);
}

TEST(LimitNs, APositiveLimitIsNeverOff) {
  EXPECT_EQ(limit_ns(1e-10), 1);  // under 1 ns: fires at once, not "no timeout"
  EXPECT_EQ(limit_ns(std::numeric_limits<double>::denorm_min()), 1);
  EXPECT_EQ(limit_ns(2.5e-9), 2);
  EXPECT_EQ(limit_ns(1.5), 1'500'000'000);
  EXPECT_EQ(limit_ns(600.0), 600'000'000'000);
}

TEST(LimitNs, HugeAndInfiniteClampToNineE18) {
  EXPECT_EQ(limit_ns(9e9), 9'000'000'000'000'000'000);
  EXPECT_EQ(limit_ns(1e20), 9'000'000'000'000'000'000);
  EXPECT_EQ(limit_ns(std::numeric_limits<double>::infinity()), 9'000'000'000'000'000'000);
  EXPECT_GT(limit_ns(1e300), 0);  // the old cast gave a negative number: the watch was off
}

}  // namespace
}  // namespace echo
