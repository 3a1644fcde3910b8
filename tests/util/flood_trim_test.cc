#include "util/flood_trim.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(FloodTrimTest, TrimsOnceAFloodHasEnded) {
  FloodTrim trim(100);
  EXPECT_FALSE(trim.Tick(0));    // Nothing dropped.
  EXPECT_FALSE(trim.Tick(60));   // A flood begins...
  EXPECT_FALSE(trim.Tick(250));  // ...and goes on.
  EXPECT_TRUE(trim.Tick(250));   // A quiet tick: it has ended.
  EXPECT_EQ(trim.last_flood(), 250u);
  EXPECT_FALSE(trim.Tick(250));  // Once per flood.
  EXPECT_FALSE(trim.Tick(250));
}

TEST(FloodTrimTest, AFewDropsAreNoFlood) {
  FloodTrim trim(100);
  EXPECT_FALSE(trim.Tick(3));
  EXPECT_FALSE(trim.Tick(3));
  EXPECT_FALSE(trim.Tick(99));
  EXPECT_FALSE(trim.Tick(99));
  // Drops add up across quiet ticks until they make a flood.
  EXPECT_FALSE(trim.Tick(100));
  EXPECT_TRUE(trim.Tick(100));
  EXPECT_EQ(trim.last_flood(), 100u);
}

TEST(FloodTrimTest, TheNextFloodCountsFromTheLastTrim) {
  FloodTrim trim(100);
  EXPECT_FALSE(trim.Tick(500));
  EXPECT_TRUE(trim.Tick(500));
  EXPECT_FALSE(trim.Tick(550));
  EXPECT_FALSE(trim.Tick(550));  // 50 more: not yet a flood.
  EXPECT_FALSE(trim.Tick(700));
  EXPECT_TRUE(trim.Tick(700));
  EXPECT_EQ(trim.last_flood(), 200u);
}

}  // namespace
}  // namespace ps
