#include "util/wait_log.h"

#include <gtest/gtest.h>

#include <vector>

namespace ps {
namespace {

// A wait looked at once an interval is logged at 1, 2, 4, ... 64 intervals,
// then every 64: 7 lines in the first 64 intervals, one an hour later at
// 5 s intervals... and never before the first interval.
TEST(WaitLogTest, LinesComeAtPowersOfTwoThenEverySixtyFourIntervals) {
  std::vector<int64_t> due;
  for (int64_t n = 0; n <= 200; ++n) {
    if (WaitLogDue(n * 5000 + 17, 5000)) due.push_back(n);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 192}));
  EXPECT_FALSE(WaitLogDue(4999, 5000));
  EXPECT_FALSE(WaitLogDue(100000, 0));  // Logging is off.
}

}  // namespace
}  // namespace ps
