#include "util/blocking_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ps {
namespace {

TEST(BlockingQueueTest, KeepsTheOrderAcrossTheRingsWrapAndGrowth) {
  BlockingQueue<int> queue;
  int next_in = 0;
  int next_out = 0;
  int item = -1;
  // Fill and drain unevenly, so that the ring wraps before it grows and
  // grows while wrapped; then empty it past kKeptSlots and use it again.
  for (int burst : {5, 3, 7, 20, 1, 100, 2, 300, 4}) {
    for (int i = 0; i < burst; ++i) ASSERT_TRUE(queue.Push(next_in++));
    EXPECT_EQ(queue.size(), static_cast<size_t>(next_in - next_out));
    const int take = burst % 2 == 0 ? next_in - next_out : burst / 2 + 1;
    for (int i = 0; i < take; ++i) {
      ASSERT_TRUE(queue.TryPop(&item));
      EXPECT_EQ(item, next_out++);
    }
  }
  while (queue.TryPop(&item)) EXPECT_EQ(item, next_out++);
  EXPECT_EQ(next_out, next_in);
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_FALSE(queue.TryPop(&item));
}

TEST(BlockingQueueTest, APoppedItemLeavesNothingOwnedInItsSlot) {
  BlockingQueue<std::shared_ptr<std::string>> queue;
  auto owned = std::make_shared<std::string>("frame");
  std::weak_ptr<std::string> watch = owned;
  ASSERT_TRUE(queue.Push(std::move(owned)));
  std::shared_ptr<std::string> out;
  ASSERT_TRUE(queue.Pop(&out));
  EXPECT_EQ(*out, "frame");
  out.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(BlockingQueueTest, CloseRefusesPushesAndDrainsWhatIsLeft) {
  BlockingQueue<int> queue;
  ASSERT_TRUE(queue.Push(1));
  ASSERT_TRUE(queue.Push(2));
  queue.Close();
  EXPECT_TRUE(queue.closed());
  EXPECT_FALSE(queue.Push(3));
  int item = 0;
  ASSERT_TRUE(queue.Pop(&item));
  EXPECT_EQ(item, 1);
  ASSERT_TRUE(queue.Pop(&item));
  EXPECT_EQ(item, 2);
  EXPECT_FALSE(queue.Pop(&item));
}

TEST(BlockingQueueTest, APopWaitsForAPushFromAnotherThread) {
  BlockingQueue<int> queue;
  std::vector<int> got;
  std::thread consumer([&]() {
    int item = 0;
    while (queue.Pop(&item)) got.push_back(item);
  });
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(queue.Push(i));
  queue.Close();
  consumer.join();
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[i], i);
}

}  // namespace
}  // namespace ps
