#include "partition/key_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace ps {
namespace {

constexpr uint64_t kMaxPosition = std::numeric_limits<uint64_t>::max();

// ps-lite's numbering: server rank r has node id 8 + 2 * r.
std::vector<int> ServerIds(int num_servers) {
  std::vector<int> ids;
  for (int r = 0; r < num_servers; ++r) ids.push_back(8 + 2 * r);
  return ids;
}

std::vector<uint64_t> UniformKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

std::vector<uint64_t> DenseKeys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i;
  return keys;
}

// The ring rebuilt the obvious way: every point sorted by position, and a
// key owned by the first point at or after its position found by binary
// search, wrapping to the first point.
class ReferenceRing {
 public:
  ReferenceRing(const std::vector<int>& server_ids, int virtual_nodes) {
    for (int id : server_ids) {
      for (int r = 0; r < virtual_nodes; ++r) {
        points_.emplace_back(KeyRing::PointPosition(id, r), id);
      }
    }
    std::sort(points_.begin(), points_.end());
  }

  size_t FirstPointIndex(uint64_t key) const {
    const uint64_t position = KeyRing::Position(key);
    const auto it =
        std::lower_bound(points_.begin(), points_.end(), position,
                         [](const std::pair<uint64_t, int>& point, uint64_t p) {
                           return point.first < p;
                         });
    return it == points_.end() ? 0 : it - points_.begin();
  }

  int Owner(uint64_t key) const { return points_[FirstPointIndex(key)].second; }

  const std::vector<std::pair<uint64_t, int>>& points() const {
    return points_;
  }

 private:
  std::vector<std::pair<uint64_t, int>> points_;
};

double MaxOverMean(const KeyRing& ring, const std::vector<uint64_t>& keys) {
  std::vector<uint16_t> owner(keys.size());
  std::vector<size_t> counts(ring.num_servers(), 0);
  ring.Assign(keys.data(), keys.size(), owner.data(), counts.data());
  const double mean = static_cast<double>(keys.size()) / ring.num_servers();
  return *std::max_element(counts.begin(), counts.end()) / mean;
}

TEST(KeyRingTest, AccessorsReturnConstructionInputs) {
  const KeyRing ring({12, 8, 10}, 7, 42);
  EXPECT_EQ(ring.num_servers(), 3);
  EXPECT_EQ(ring.server_ids(), (std::vector<int>{12, 8, 10}));
  EXPECT_EQ(ring.epoch(), 42u);
  EXPECT_EQ(ring.virtual_nodes(), 7);
  EXPECT_EQ(ring.num_points(), 21u);
}

TEST(KeyRingTest, KeyAtPositionInvertsPosition) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t x = rng();
    EXPECT_EQ(KeyRing::KeyAtPosition(KeyRing::Position(x)), x);
    EXPECT_EQ(KeyRing::Position(KeyRing::KeyAtPosition(x)), x);
  }
  for (uint64_t x :
       {uint64_t{0}, uint64_t{1}, kMaxPosition - 1, kMaxPosition}) {
    EXPECT_EQ(KeyRing::Position(KeyRing::KeyAtPosition(x)), x);
  }
}

TEST(KeyRingTest, ContiguousKeysAreScatteredOverTheRing) {
  // Keys 0..4095 must not cluster: each sixteenth of the ring gets close to
  // its share.
  std::vector<int> per_sixteenth(16, 0);
  for (uint64_t k = 0; k < 4096; ++k)
    ++per_sixteenth[KeyRing::Position(k) >> 60];
  for (int count : per_sixteenth) {
    EXPECT_GT(count, 256 * 3 / 4);
    EXPECT_LT(count, 256 * 5 / 4);
  }
}

TEST(KeyRingTest, SameInputsGiveSameOwners) {
  const KeyRing a(ServerIds(8), KeyRing::kDefaultVirtualNodes, 1);
  const KeyRing b(ServerIds(8), KeyRing::kDefaultVirtualNodes, 1);
  for (uint64_t key : UniformKeys(100000, 2)) {
    ASSERT_EQ(a.OwnerIndex(key), b.OwnerIndex(key)) << key;
  }
}

TEST(KeyRingTest, OwnerDoesNotDependOnServerOrderOrEpoch) {
  std::vector<int> ids = ServerIds(8);
  const KeyRing a(ids, KeyRing::kDefaultVirtualNodes, 1);
  std::reverse(ids.begin(), ids.end());
  const KeyRing b(ids, KeyRing::kDefaultVirtualNodes, 5);
  for (uint64_t key : UniformKeys(100000, 3)) {
    ASSERT_EQ(a.Owner(key), b.Owner(key)) << key;
    ASSERT_EQ(b.server_ids()[b.OwnerIndex(key)], b.Owner(key));
  }
}

TEST(KeyRingTest, OwnerMatchesBruteForceReference) {
  const std::vector<int> ids = ServerIds(8);
  const KeyRing ring(ids, KeyRing::kDefaultVirtualNodes, 1);
  const ReferenceRing reference(ids, KeyRing::kDefaultVirtualNodes);

  std::vector<uint64_t> keys = UniformKeys(100000, 4);
  // Positions at the ends of the ring, where lookups wrap around.
  for (uint64_t p = 0; p < 1000; ++p) {
    keys.push_back(KeyRing::KeyAtPosition(p));
    keys.push_back(KeyRing::KeyAtPosition(kMaxPosition - p));
  }
  // Positions on, just before and just after every point, and beyond the
  // first and last points.
  for (const auto& point : reference.points()) {
    keys.push_back(KeyRing::KeyAtPosition(point.first));
    keys.push_back(KeyRing::KeyAtPosition(point.first - 1));
    keys.push_back(KeyRing::KeyAtPosition(point.first + 1));
  }
  const uint64_t first = reference.points().front().first;
  const uint64_t last = reference.points().back().first;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {
    keys.push_back(KeyRing::KeyAtPosition(rng() % (first + 1)));
    keys.push_back(
        KeyRing::KeyAtPosition(last + 1 + rng() % (kMaxPosition - last)));
  }

  for (uint64_t key : keys) {
    ASSERT_EQ(ring.Owner(key), reference.Owner(key))
        << "key " << key << " at position " << KeyRing::Position(key);
  }
  // Beyond the last point, keys wrap to the first point's server.
  EXPECT_EQ(ring.Owner(KeyRing::KeyAtPosition(kMaxPosition)),
            reference.points().front().second);
}

TEST(KeyRingTest, OwnerMatchesReferenceForSmallAndOddRings) {
  struct Case {
    std::vector<int> ids;
    int virtual_nodes;
  };
  const std::vector<Case> cases = {{{8}, 1},
                                   {{8, 10}, 1},
                                   {{8, 10, 12}, 3},
                                   {{100, -5, 7}, 33},
                                   {ServerIds(64), 16}};
  for (const Case& c : cases) {
    const KeyRing ring(c.ids, c.virtual_nodes, 0);
    const ReferenceRing reference(c.ids, c.virtual_nodes);
    for (uint64_t key : UniformKeys(20000, 6)) {
      ASSERT_EQ(ring.Owner(key), reference.Owner(key)) << key;
    }
    for (const auto& point : reference.points()) {
      for (uint64_t p : {point.first - 1, point.first, point.first + 1}) {
        const uint64_t key = KeyRing::KeyAtPosition(p);
        ASSERT_EQ(ring.Owner(key), reference.Owner(key)) << key;
      }
    }
  }
}

TEST(KeyRingTest, BalancesUniformRandomKeys) {
  const KeyRing ring(ServerIds(8), KeyRing::kDefaultVirtualNodes, 1);
  EXPECT_LE(MaxOverMean(ring, UniformKeys(1000000, 7)), 1.10);
}

TEST(KeyRingTest, BalancesDenseKeys) {
  const KeyRing ring(ServerIds(8), KeyRing::kDefaultVirtualNodes, 1);
  EXPECT_LE(MaxOverMean(ring, DenseKeys(1000000)), 1.10);
}

TEST(KeyRingTest, AddServerMovesOnlyKeysToTheNewServer) {
  const KeyRing before(ServerIds(8), KeyRing::kDefaultVirtualNodes, 1);
  const KeyRing after(ServerIds(9), KeyRing::kDefaultVirtualNodes, 2);
  const int new_server = ServerIds(9).back();
  const std::vector<uint64_t> keys = UniformKeys(1000000, 8);
  size_t moved = 0;
  for (uint64_t key : keys) {
    const int old_owner = before.Owner(key);
    const int new_owner = after.Owner(key);
    if (old_owner != new_owner) {
      ++moved;
      ASSERT_EQ(new_owner, new_server) << key;
    }
  }
  const double fraction = static_cast<double>(moved) / keys.size();
  EXPECT_LE(fraction, 1.25 / 9);
  // The new server does take its share.
  EXPECT_GE(fraction, 0.75 / 9);
}

TEST(KeyRingTest, RemoveServerMovesOnlyItsKeys) {
  const std::vector<int> ids = ServerIds(9);
  std::vector<int> remaining = ids;
  const int removed = ids[3];
  remaining.erase(remaining.begin() + 3);
  const KeyRing before(ids, KeyRing::kDefaultVirtualNodes, 1);
  const KeyRing after(remaining, KeyRing::kDefaultVirtualNodes, 2);
  size_t moved = 0;
  const std::vector<uint64_t> keys = UniformKeys(200000, 9);
  for (uint64_t key : keys) {
    const int old_owner = before.Owner(key);
    const int new_owner = after.Owner(key);
    ASSERT_NE(new_owner, removed);
    if (old_owner != new_owner) {
      ++moved;
      ASSERT_EQ(old_owner, removed) << key;
    } else {
      ASSERT_NE(old_owner, removed) << key;
    }
  }
  const double fraction = static_cast<double>(moved) / keys.size();
  EXPECT_GE(fraction, 0.75 / 9);
  EXPECT_LE(fraction, 1.25 / 9);
}

TEST(KeyRingTest, AssignMatchesOwnerIndexAndCountsSumToN) {
  const KeyRing ring(ServerIds(5), KeyRing::kDefaultVirtualNodes, 1);
  std::vector<uint64_t> keys = UniformKeys(50000, 10);
  std::sort(keys.begin(), keys.end());
  std::vector<uint16_t> owner(keys.size(), 0xffff);
  std::vector<size_t> counts(ring.num_servers(), 0);
  ring.Assign(keys.data(), keys.size(), owner.data(), counts.data());
  std::vector<size_t> expected_counts(ring.num_servers(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(owner[i], ring.OwnerIndex(keys[i])) << i;
    ++expected_counts[owner[i]];
  }
  EXPECT_EQ(counts, expected_counts);
  size_t total = 0;
  for (size_t c : counts) total += c;
  EXPECT_EQ(total, keys.size());

  // Counts accumulate onto what the caller passes in; n = 0 changes nothing.
  ring.Assign(keys.data(), keys.size(), owner.data(), counts.data());
  ring.Assign(keys.data(), 0, owner.data(), counts.data());
  for (int s = 0; s < ring.num_servers(); ++s) {
    EXPECT_EQ(counts[s], 2 * expected_counts[s]);
  }
}

TEST(KeyRingTest, SuccessorsAreDistinctInRingOrderWithTheOwnerFirst) {
  const std::vector<int> ids = ServerIds(6);
  const int kVirtualNodes = 64;
  const KeyRing ring(ids, kVirtualNodes, 1);
  const ReferenceRing reference(ids, kVirtualNodes);
  for (uint64_t key : UniformKeys(2000, 11)) {
    const std::vector<int> successors = ring.Successors(key, 3);
    ASSERT_EQ(successors.size(), 3u);
    EXPECT_EQ(successors[0], ring.OwnerIndex(key));
    EXPECT_EQ(std::set<int>(successors.begin(), successors.end()).size(), 3u);

    // The reference walk: servers of the following points, first sightings.
    std::vector<int> expected;
    const auto& points = reference.points();
    for (size_t i = reference.FirstPointIndex(key); expected.size() < 3;
         i = (i + 1) % points.size()) {
      const int index = static_cast<int>(
          std::find(ids.begin(), ids.end(), points[i].second) - ids.begin());
      if (std::find(expected.begin(), expected.end(), index) ==
          expected.end()) {
        expected.push_back(index);
      }
    }
    EXPECT_EQ(successors, expected) << key;
  }
}

TEST(KeyRingTest, SuccessorsAreCappedAtTheNumberOfServers) {
  const KeyRing ring(ServerIds(4), KeyRing::kDefaultVirtualNodes, 1);
  const uint64_t wrapping_key = KeyRing::KeyAtPosition(kMaxPosition);
  for (uint64_t key : {uint64_t{0}, uint64_t{12345}, wrapping_key}) {
    std::vector<int> all = ring.Successors(key, 10);
    ASSERT_EQ(all.size(), 4u);
    EXPECT_EQ(all[0], ring.OwnerIndex(key));
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_TRUE(ring.Successors(key, 0).empty());
    EXPECT_TRUE(ring.Successors(key, -1).empty());
    EXPECT_EQ(ring.Successors(key, 1), std::vector<int>{ring.OwnerIndex(key)});
  }
}

TEST(KeyRingTest, SingleServerOwnsEverything) {
  for (int virtual_nodes : {1, KeyRing::kDefaultVirtualNodes}) {
    const KeyRing ring({10}, virtual_nodes, 1);
    std::vector<uint64_t> keys = UniformKeys(10000, 12);
    keys.push_back(KeyRing::KeyAtPosition(0));
    keys.push_back(KeyRing::KeyAtPosition(kMaxPosition));
    for (uint64_t key : keys) {
      ASSERT_EQ(ring.Owner(key), 10);
      ASSERT_EQ(ring.OwnerIndex(key), 0);
    }
    EXPECT_EQ(ring.Successors(7, 3), std::vector<int>{0});
  }
}

TEST(KeyRingDeathTest, RejectsInvalidConstruction) {
  EXPECT_DEATH(KeyRing({}, 8, 1), "at least one server");
  EXPECT_DEATH(KeyRing({8, 10}, 0, 1), "virtual_nodes");
  EXPECT_DEATH(KeyRing({8, 10, 8}, 8, 1), "distinct");
  EXPECT_DEATH(KeyRing(std::vector<int>(65536), 1, 1), "uint16_t");
}

}  // namespace
}  // namespace ps
