#include "partition/key_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "partition/slicer.h"
#include "ps/base.h"

namespace ps {
namespace {

using u128 = unsigned __int128;
constexpr u128 kKeySpace = u128{1} << 64;

// ps-lite's numbering: server rank r has node id 8 + 2 * r.
std::vector<int> ServerIds(int num_servers) {
  std::vector<int> ids;
  for (int r = 0; r < num_servers; ++r) ids.push_back(8 + 2 * r);
  return ids;
}

KeyRing Even(int num_servers, Placement placement = Placement::kRange) {
  auto ring = KeyRing::EvenSplit(ServerIds(num_servers), 1, placement);
  EXPECT_TRUE(ring.ok()) << ring.status();
  return ring.value();
}

std::vector<uint64_t> UniformKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

// The most loaded server's share of the key space over the mean.
double ShareBalance(const KeyRing& ring) {
  u128 most = 0;
  for (int s = 0; s < ring.num_servers(); ++s) {
    most = std::max(most, ring.Share(s));
  }
  return static_cast<double>(most) * ring.num_servers() /
         static_cast<double>(kKeySpace);
}

// The most loaded server's count of `keys` over the mean.
double KeyBalance(const KeyRing& ring, const std::vector<uint64_t>& keys) {
  std::vector<size_t> counts(ring.num_servers(), 0);
  for (uint64_t k : keys) ++counts[ring.OwnerIndex(k)];
  const double mean = static_cast<double>(keys.size()) / ring.num_servers();
  return *std::max_element(counts.begin(), counts.end()) / mean;
}

// The owner id of every piece of the key space, compared between two rings:
// how much changed owner, and whether every change went to `only_to` (or
// came from `only_from`), when those are >= 0.
struct Movement {
  u128 moved = 0;
  bool only_to_ok = true;
  bool only_from_ok = true;
};

Movement Moved(const KeyRing& before, const KeyRing& after, int only_to,
               int only_from) {
  std::vector<uint64_t> cuts = before.begins();
  cuts.insert(cuts.end(), after.begins().begin(), after.begins().end());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  Movement m;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const u128 end = i + 1 < cuts.size() ? u128{cuts[i + 1]} : kKeySpace;
    const int from = before.Owner(cuts[i]);
    const int to = after.Owner(cuts[i]);
    if (from == to) continue;
    m.moved += end - cuts[i];
    if (only_to >= 0 && to != only_to) m.only_to_ok = false;
    if (only_from >= 0 && from != only_from) m.only_from_ok = false;
  }
  return m;
}

TEST(KeyRingTest, EvenSplitIsPsLitesServerKeyRanges) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 13, 64}) {
    SCOPED_TRACE("servers " + std::to_string(n));
    const KeyRing ring = Even(n);
    EXPECT_EQ(ring.epoch(), 1u);
    EXPECT_EQ(ring.num_servers(), n);
    ASSERT_EQ(ring.num_ranges(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      // Postoffice::GetServerKeyRanges() of ps-lite, verbatim arithmetic.
      const Key begin = kMaxKey / n * r;
      const Key end = r + 1 == n ? kMaxKey : kMaxKey / n * (r + 1);
      const std::vector<Range> own = ring.RangesOf(r);
      ASSERT_EQ(own.size(), 1u);
      EXPECT_EQ(own[0].begin(), begin);
      EXPECT_EQ(own[0].end(), end);
      EXPECT_EQ(ring.OwnerIndex(begin), r);
      EXPECT_EQ(ring.OwnerIndex(end - 1), r);
      EXPECT_EQ(ring.Owner(begin), 8 + 2 * r);
      // MXNet / BytePS encode keys as ranges[r].begin() + k.
      EXPECT_EQ(ring.OwnerIndex(begin + 12345), r);
    }
    EXPECT_EQ(ring.OwnerIndex(0), 0);
    EXPECT_EQ(ring.OwnerIndex(kMaxKey - 1), n - 1);
    // ps-lite leaves kMaxKey to nobody; the last server owns it here.
    EXPECT_EQ(ring.OwnerIndex(kMaxKey), n - 1);
  }
}

TEST(KeyRingTest, OneServerOwnsEverything) {
  const KeyRing ring = Even(1);
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, kMaxKey - 1, kMaxKey}) {
    EXPECT_EQ(ring.Owner(k), 8);
  }
  EXPECT_EQ(ring.Share(0), kKeySpace);
  EXPECT_EQ(ring.Successors(0, 3), std::vector<int>{0});
}

TEST(KeyRingTest, FromRangesRefusesMalformedRings) {
  const std::vector<int> ids = {8, 10};
  struct Case {
    const char* what;
    std::vector<int> ids;
    std::vector<uint64_t> begins;
    std::vector<int> owners;
  };
  const std::vector<Case> cases = {
      {"no servers", {}, {0}, {0}},
      {"repeated ids", {8, 8}, {0, 5}, {0, 1}},
      {"no ranges", ids, {}, {}},
      {"not from key 0", ids, {1, 5}, {0, 1}},
      {"falling begins", ids, {0, 9, 5}, {0, 1, 0}},
      {"repeated begins", ids, {0, 5, 5}, {0, 1, 0}},
      {"owner out of range", ids, {0, 5}, {0, 2}},
      {"negative owner", ids, {0, 5}, {0, -1}},
      {"a server without a range", ids, {0, 5}, {0, 0}},
      {"sizes differ", ids, {0, 5}, {0}},
  };
  for (const Case& c : cases) {
    auto ring =
        KeyRing::FromRanges(c.ids, c.begins, c.owners, 1, Placement::kRange);
    EXPECT_FALSE(ring.ok()) << c.what;
    EXPECT_EQ(ring.status().code(), Status::Code::kInvalidArgument) << c.what;
  }
  auto bad_placement =
      KeyRing::FromRanges(ids, {0, 5}, {0, 1}, 1, static_cast<Placement>(7));
  EXPECT_FALSE(bad_placement.ok());
  auto too_many = KeyRing::EvenSplit(std::vector<int>(70000, 0), 1);
  EXPECT_FALSE(too_many.ok());
}

TEST(KeyRingTest, FromRangesMergesAdjacentRangesOfOneOwner) {
  auto ring = KeyRing::FromRanges({8, 10}, {0, 10, 20, 30}, {0, 0, 1, 0}, 4,
                                  Placement::kRange);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->begins(), (std::vector<uint64_t>{0, 20, 30}));
  EXPECT_EQ(ring->owners(), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(ring->Owner(19), 8);
  EXPECT_EQ(ring->Owner(20), 10);
  EXPECT_EQ(ring->Owner(29), 10);
  EXPECT_EQ(ring->Owner(30), 8);
  EXPECT_EQ(ring->Share(1), 10u);
  const std::vector<Range> own = ring->RangesOf(0);
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(own[0].begin(), 0u);
  EXPECT_EQ(own[0].end(), 20u);
  EXPECT_EQ(own[1].begin(), 30u);
  EXPECT_EQ(own[1].end(), kMaxKey);
  // A range of one key at the very end.
  auto tail =
      KeyRing::FromRanges({8, 10}, {0, kMaxKey}, {0, 1}, 1, Placement::kRange);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->Owner(kMaxKey), 10);
  EXPECT_EQ(tail->Owner(kMaxKey - 1), 8);
  EXPECT_EQ(tail->Share(1), 1u);
}

TEST(KeyRingTest, AddingAServerMovesOnlyItsShareToIt) {
  const std::vector<uint64_t> keys = UniformKeys(200000, 7);
  for (int n = 1; n <= 16; ++n) {
    SCOPED_TRACE("servers " + std::to_string(n));
    const KeyRing before = Even(n);
    auto after = before.AddServer(100, 2);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->epoch(), 2u);
    EXPECT_EQ(after->num_servers(), n + 1);
    EXPECT_EQ(after->server_ids().back(), 100);
    const Movement m = Moved(before, *after, 100, -1);
    EXPECT_TRUE(m.only_to_ok);
    const double moved = static_cast<double>(m.moved) / kKeySpace;
    EXPECT_LE(moved, 1.1 / (n + 1));
    EXPECT_GE(moved, 0.99 / (n + 1));
    EXPECT_LE(ShareBalance(*after), 1.0001);
    EXPECT_LE(KeyBalance(*after, keys), 1.10);
  }
}

TEST(KeyRingTest, RemovingAServerMovesOnlyItsRanges) {
  const std::vector<uint64_t> keys = UniformKeys(200000, 8);
  for (int n = 2; n <= 16; ++n) {
    for (int leaver : {0, n / 2, n - 1}) {
      SCOPED_TRACE("servers " + std::to_string(n) + ", leaver rank " +
                   std::to_string(leaver));
      const KeyRing before = Even(n);
      const int id = 8 + 2 * leaver;
      auto after = before.RemoveServer(id, 2);
      ASSERT_TRUE(after.ok()) << after.status();
      EXPECT_EQ(after->num_servers(), n - 1);
      EXPECT_EQ(after->IndexOf(id), -1);
      const Movement m = Moved(before, *after, -1, id);
      EXPECT_TRUE(m.only_from_ok);
      EXPECT_EQ(m.moved, before.Share(leaver));
      EXPECT_LE(ShareBalance(*after), 1.0001);
      EXPECT_LE(KeyBalance(*after, keys), 1.10);
    }
  }
}

TEST(KeyRingTest, ChangesInTurnKeepMovementMinimalAndBalance) {
  // Joins and departures in turn, as an elastic job sees them.
  const std::vector<uint64_t> keys = UniformKeys(200000, 9);
  KeyRing ring = Even(2);
  std::mt19937 rng(3);
  int next_id = 100;
  for (int step = 0; step < 60; ++step) {
    SCOPED_TRACE("step " + std::to_string(step) + ": " + ring.DebugString());
    const int n = ring.num_servers();
    const bool add = n == 1 || (n < 12 && rng() % 2 == 0);
    if (add) {
      auto next = ring.AddServer(next_id, ring.epoch() + 1);
      ASSERT_TRUE(next.ok()) << next.status();
      const Movement m = Moved(ring, *next, next_id, -1);
      EXPECT_TRUE(m.only_to_ok);
      EXPECT_LE(static_cast<double>(m.moved) / kKeySpace, 1.1 / (n + 1));
      ++next_id;
      ring = next.value();
    } else {
      const int leaver = ring.server_ids()[rng() % n];
      auto next = ring.RemoveServer(leaver, ring.epoch() + 1);
      ASSERT_TRUE(next.ok()) << next.status();
      const Movement m = Moved(ring, *next, -1, leaver);
      EXPECT_TRUE(m.only_from_ok);
      EXPECT_EQ(m.moved, ring.Share(ring.IndexOf(leaver)));
      ring = next.value();
    }
    EXPECT_LE(ShareBalance(ring), 1.0001);
    EXPECT_LE(KeyBalance(ring, keys), 1.10);
    u128 total = 0;
    for (int s = 0; s < ring.num_servers(); ++s) total += ring.Share(s);
    EXPECT_EQ(total, kKeySpace);
  }
}

TEST(KeyRingTest, RefusesImpossibleChanges) {
  const KeyRing ring = Even(2);
  EXPECT_FALSE(ring.AddServer(8, 2).ok());      // already there
  EXPECT_FALSE(ring.RemoveServer(99, 2).ok());  // not there
  EXPECT_FALSE(Even(1).RemoveServer(8, 2).ok());
}

TEST(KeyRingTest, SuccessorsFollowTheRingFromTheOwner) {
  const KeyRing ring = Even(4);
  EXPECT_EQ(ring.Successors(0, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(ring.Successors(3, 3), (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(ring.Successors(2, 9), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_TRUE(ring.Successors(1, 0).empty());
  auto grown = ring.AddServer(100, 2);
  ASSERT_TRUE(grown.ok());
  for (size_t r = 0; r < grown->num_ranges(); ++r) {
    const std::vector<int> succ = grown->Successors(r, 3);
    ASSERT_EQ(succ.size(), 3u);
    EXPECT_EQ(succ[0], grown->range_owner(r));
    EXPECT_EQ(std::set<int>(succ.begin(), succ.end()).size(), 3u);
  }
}

TEST(KeyRingTest, SpreadPlacementMixesKeysFirst) {
  const KeyRing ring = Even(4, Placement::kSpread);
  std::vector<uint64_t> small(100000);
  for (size_t i = 0; i < small.size(); ++i) small[i] = i;
  EXPECT_LE(KeyBalance(ring, small), 1.10);
  for (uint64_t k : small) {
    ASSERT_EQ(ring.OwnerIndex(k), static_cast<int>(Fmix64(k) / (kMaxKey / 4)));
  }
  // Under range placement the same keys all go to server 0.
  EXPECT_EQ(KeyBalance(Even(4), small), 4.0);
}

TEST(KeyRingTest, ParsesPlacementNames) {
  EXPECT_EQ(ParsePlacement("range").value(), Placement::kRange);
  EXPECT_EQ(ParsePlacement("spread").value(), Placement::kSpread);
  EXPECT_FALSE(ParsePlacement("hash").ok());
  EXPECT_STREQ(PlacementName(Placement::kSpread), "spread");
}

// --- The slicer.

// Every key's server, the slow way.
std::vector<int> OwnersOf(const KeyRing& ring,
                          const std::vector<uint64_t>& keys) {
  std::vector<int> owners;
  for (uint64_t k : keys) owners.push_back(ring.OwnerIndex(k));
  return owners;
}

void ExpectPlanCovers(const KeyRing& ring, const std::vector<uint64_t>& keys,
                      const SlicePlan& plan) {
  const std::vector<int> want = OwnersOf(ring, keys);
  std::vector<size_t> counts(ring.num_servers(), 0);
  for (int s : want) ++counts[s];
  EXPECT_EQ(plan.counts, counts);
  if (plan.per_key) {
    ASSERT_EQ(plan.owner.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(plan.owner[i], want[i]);
    }
    return;
  }
  size_t next = 0;
  std::vector<uint32_t> segments_of(ring.num_servers(), 0);
  for (size_t g = 0; g < plan.segments.size(); ++g) {
    const KeySegment& seg = plan.segments[g];
    ASSERT_EQ(seg.begin, next);
    ASSERT_LT(seg.begin, seg.end);
    for (size_t i = seg.begin; i < seg.end; ++i) {
      ASSERT_EQ(want[i], seg.server) << "key " << keys[i];
    }
    if (g > 0) {
      EXPECT_NE(plan.segments[g - 1].server, seg.server);
    }
    ++segments_of[seg.server];
    next = seg.end;
  }
  EXPECT_EQ(next, keys.size());
  EXPECT_EQ(plan.segments_of, segments_of);
}

TEST(SlicerTest, CutsSortedBatchesAtRangeBoundaries) {
  std::vector<KeyRing> rings = {Even(1), Even(2), Even(4), Even(7)};
  // Rings where servers own several ranges.
  rings.push_back(Even(3).AddServer(100, 2).value());
  rings.push_back(rings.back().AddServer(101, 3).value());
  rings.push_back(rings.back().RemoveServer(10, 4).value());
  std::mt19937_64 rng(11);
  for (const KeyRing& ring : rings) {
    SCOPED_TRACE(ring.DebugString());
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{2}, size_t{1000}, size_t{50000}}) {
      std::vector<uint64_t> keys(n);
      for (uint64_t& k : keys) k = rng();
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      SlicePlan plan;
      ASSERT_TRUE(SliceKeys(ring, keys.data(), keys.size(), &plan).ok());
      EXPECT_FALSE(plan.per_key);
      ExpectPlanCovers(ring, keys, plan);
    }
    // Exactly the boundaries, and the ends of the key space.
    std::vector<uint64_t> edges = {0, kMaxKey - 1, kMaxKey};
    for (size_t r = 1; r < ring.num_ranges(); ++r) {
      edges.push_back(ring.range_begin(r) - 1);
      edges.push_back(ring.range_begin(r));
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    SlicePlan plan;
    ASSERT_TRUE(SliceKeys(ring, edges.data(), edges.size(), &plan).ok());
    ExpectPlanCovers(ring, edges, plan);
  }
}

TEST(SlicerTest, SpreadPlacementListsEveryKeysServer) {
  const KeyRing ring = Even(4, Placement::kSpread);
  std::vector<uint64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 3;
  SlicePlan plan;
  ASSERT_TRUE(SliceKeys(ring, keys.data(), keys.size(), &plan).ok());
  EXPECT_TRUE(plan.per_key);
  EXPECT_TRUE(plan.segments.empty());
  ExpectPlanCovers(ring, keys, plan);
}

TEST(SlicerTest, RefusesUnsortedOrRepeatedKeys) {
  const KeyRing ring = Even(2);
  for (const std::vector<uint64_t>& keys :
       {std::vector<uint64_t>{5, 3}, std::vector<uint64_t>{1, 2, 2, 3},
        std::vector<uint64_t>{kMaxKey, 0}}) {
    SlicePlan plan;
    Status s = SliceKeys(ring, keys.data(), keys.size(), &plan);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(s.message().find("sorted and unique"), std::string::npos) << s;
  }
  // The first offending key is named, also far into a long batch.
  std::vector<uint64_t> keys(10000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  keys[9000] = 5;
  SlicePlan plan;
  Status s = SliceKeys(ring, keys.data(), keys.size(), &plan);
  EXPECT_NE(s.message().find("key 9000 (5) follows 8999"), std::string::npos)
      << s;
}

// The check compares several keys at a time (four per instruction where the
// CPU has AVX2): a fault at every position of batches of every length up to
// 40 and around a block of 1024, of equal or smaller keys, on both sides of
// 2^63 (where unsigned and signed order differ), is found and named.
TEST(SlicerTest, FindsTheFirstFaultAtEveryPosition) {
  const KeyRing ring = Even(3);
  const uint64_t bases[] = {0, (uint64_t{1} << 63) - 20, kMaxKey - 5000};
  std::vector<size_t> lengths;
  for (size_t n = 2; n <= 40; ++n) lengths.push_back(n);
  for (size_t n : {1023, 1024, 1025, 1029, 2050}) lengths.push_back(n);
  for (uint64_t base : bases) {
    for (size_t n : lengths) {
      std::vector<uint64_t> keys(n);
      for (size_t i = 0; i < n; ++i) keys[i] = base + 2 * i;
      SlicePlan plan;
      ASSERT_TRUE(SliceKeys(ring, keys.data(), n, &plan).ok()) << n;
      ExpectPlanCovers(ring, keys, plan);
      for (size_t at = 1; at < n; ++at) {
        if (n > 40 && at > 8 && at + 8 < n && at % 1024 > 8 &&
            at % 1024 < 1016) {
          continue;  // Long batches: their edges and block edges.
        }
        for (const uint64_t fault : {keys[at - 1], keys[at - 1] - 1}) {
          if (fault > keys[at - 1]) continue;  // 0 - 1 wrapped.
          std::vector<uint64_t> bad = keys;
          bad[at] = fault;
          Status s = SliceKeys(ring, bad.data(), n, &plan);
          ASSERT_EQ(s.code(), Status::Code::kInvalidArgument) << n << " " << at;
          const std::string named = "key " + std::to_string(at) + " (";
          EXPECT_NE(s.message().find(named), std::string::npos) << s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ps
