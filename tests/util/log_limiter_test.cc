#include "util/log_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace ps {
namespace {

TEST(LogLimiterTest, OneLinePerKeyPerIntervalWithTheCountLeftOut) {
  LogLimiter limiter(1000);
  uint64_t left_out = 99;
  ASSERT_TRUE(limiter.Allow("a", 0, &left_out));
  EXPECT_EQ(left_out, 0u);
  for (int t = 1; t < 1000; t += 100) {
    EXPECT_FALSE(limiter.Allow("a", t, &left_out)) << t;
  }
  // Another key has its own budget.
  EXPECT_TRUE(limiter.Allow("b", 500, &left_out));
  EXPECT_EQ(left_out, 0u);
  // A second later "a" logs again and says how many it left out.
  ASSERT_TRUE(limiter.Allow("a", 1000, &left_out));
  EXPECT_EQ(left_out, 10u);
  EXPECT_EQ(LogLimiter::Since(left_out), " (10 more since the last line)");
  EXPECT_EQ(LogLimiter::Since(0), "");
  EXPECT_FALSE(limiter.Allow("a", 1999, &left_out));
  ASSERT_TRUE(limiter.Allow("a", 5000, &left_out));
  EXPECT_EQ(left_out, 1u);
}

TEST(LogLimiterTest, EverNewKeysShareOneSlotBeyondTheBound) {
  LogLimiter limiter(1000, 2);
  uint64_t left_out = 0;
  EXPECT_TRUE(limiter.Allow("a", 0, &left_out));
  EXPECT_TRUE(limiter.Allow("b", 0, &left_out));
  // The third and later new keys share the overflow slot: one line a
  // second for all of them.
  EXPECT_TRUE(limiter.Allow("c", 0, &left_out));
  int lines = 0;
  for (int i = 0; i < 1000; ++i) {
    lines += limiter.Allow("k" + std::to_string(i), 10, &left_out);
  }
  EXPECT_EQ(lines, 0);
  ASSERT_TRUE(limiter.Allow("z", 1000, &left_out));
  EXPECT_EQ(left_out, 1000u);
}

}  // namespace
}  // namespace ps
