// PeerTraffic: per-peer counters by node id, found without a lock.
#include <gtest/gtest.h>

#include <thread>
#include <utility>
#include <vector>

#include "transport/van.h"

namespace ps {
namespace {

std::vector<std::pair<int, uint64_t>> Sent(const PeerTraffic& t) {
  std::vector<std::pair<int, uint64_t>> v;
  t.ForEach([&v](int id, const PeerCounters& c) {
    v.emplace_back(id, c.sent_messages.load());
  });
  return v;
}

TEST(PeerTrafficTest, OnlyPeersWithTrafficAreListedInIdOrderOtherLast) {
  PeerTraffic t;
  EXPECT_TRUE(Sent(t).empty());
  t.For(9)->sent_messages += 2;
  t.For(1)->sent_messages += 1;
  t.For(700)->sent_messages += 4;  // Another block.
  t.For(-3)->sent_messages += 1;   // A refused join's id.
  t.For(PeerTraffic::kMaxIds)->sent_messages += 1;
  (void)t.For(10);  // Looked up, never counted: not listed.
  EXPECT_EQ(Sent(t), (std::vector<std::pair<int, uint64_t>>{
                         {1, 1}, {9, 2}, {700, 4}, {PeerTraffic::kOther, 2}}));
  EXPECT_EQ(t.For(9), t.For(9));
  EXPECT_EQ(t.For(-1), t.For(1 << 30));
}

TEST(PeerTrafficTest, ReceivedOrFailedTrafficAlsoLists) {
  PeerTraffic t;
  t.For(8)->received_messages++;
  t.For(12)->send_errors++;
  std::vector<int> ids;
  t.ForEach([&ids](int id, const PeerCounters&) { ids.push_back(id); });
  EXPECT_EQ(ids, (std::vector<int>{8, 12}));
}

// Threads that meet a block first at the same time get the same counters
// and lose no count.
TEST(PeerTrafficTest, ConcurrentFirstUsesShareOneBlock) {
  for (int round = 0; round < 20; ++round) {
    PeerTraffic t;
    VanCounters totals;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&t, &totals, i] {
        for (int n = 0; n < 1000; ++n) {
          totals.CountSent(t.For(300 + (n + i) % 3), 10);
        }
      });
    }
    for (auto& th : threads) th.join();
    uint64_t messages = 0, bytes = 0;
    t.ForEach([&](int id, const PeerCounters& c) {
      EXPECT_TRUE(id >= 300 && id < 303) << id;
      messages += c.sent_messages;
      bytes += c.sent_bytes;
    });
    EXPECT_EQ(messages, 4000u);
    EXPECT_EQ(bytes, 40000u);
    EXPECT_EQ(totals.sent_messages.load(), 4000u);
  }
}

}  // namespace
}  // namespace ps
