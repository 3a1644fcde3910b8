// Re-routing over the in-process transport (docs/replication.md,
// "Re-routing"): a request sliced by an older key ring reaches a server that
// no longer owns some of its keys; the server refuses that part, the worker
// waits until its own ring has reached the epoch the server named,
// re-slices the part by it and sends it to the new owners. Every push is
// applied exactly once, at its key's owner, and a pull returns the right
// values in the caller's order.
//
// The ring changes are real KeyRing rings (FromRanges: a range moved from
// one live server to others), delivered through Node::InstallRingForTest
// (elastic membership, which will publish such rings, is not built).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "app/app_impl.h"
#include "metrics/metrics.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"

namespace ps {
namespace {

// A worker with a bounded wait, and a look at whether a request is open.
class TestWorker : public KVWorker<float> {
 public:
  using KVWorker<float>::KVWorker;
  Status WaitBounded(int ts) { return SimpleApp::WaitStatus(ts, 30000); }
  bool Open(int ts) {
    RequestTracker* tracker = impl_->customer()->tracker();
    return tracker->IsOpen(tracker->Resolve(ts));
  }
};

// (replicas, placement).
class RerouteTest
    : public ::testing::TestWithParam<std::tuple<int, Placement>> {
 protected:
  void SetUp() override {
    const int replicas = std::get<0>(GetParam());
    const Placement placement = std::get<1>(GetParam());
    cluster_ = std::make_unique<InProcCluster>(
        3, 2, [replicas, placement](Options* o) {
          o->replicas = replicas;
          o->placement = placement;
        });
    cluster_->Start();
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(
          std::make_unique<KVServer<float>>(0, cluster_->server(i)));
      servers_.back()->set_request_handle(KVServerDefaultHandle<float>());
    }
    for (int w = 0; w < 2; ++w) {
      workers_.push_back(
          std::make_unique<TestWorker>(0, 0, cluster_->worker(w)));
    }
    ring1_ = cluster_->worker(0)->node()->key_ring();
    ASSERT_EQ(ring1_->epoch(), 1u);
    ASSERT_EQ(ring1_->num_ranges(), 3u);
    // The keys: spread over the key space (range placement), or small
    // integers (spread placement, which scatters them).
    const size_t n = 600;
    for (size_t i = 0; i < n; ++i) {
      keys_.push_back(placement == Placement::kRange
                          ? static_cast<Key>(i) * (kMaxKey / n) + 7
                          : static_cast<Key>(i));
    }
  }

  void TearDown() override {
    workers_.clear();
    servers_.clear();
    cluster_->Finalize();
    cluster_.reset();
  }

  // `ring` with the range of server index 1 cut in thirds: the first goes
  // to server index 0, the last to server index 2; the next epoch. Server
  // 1 stays on the ring with the middle third.
  static std::shared_ptr<const KeyRing> Shrink1(const KeyRing& ring) {
    const uint64_t b1 = ring.range_begin(1);
    const uint64_t third = (ring.range_begin(2) - b1) / 3;
    return Make(ring, {0, b1 + third, b1 + 2 * third}, {0, 1, 2});
  }
  // After Shrink1: the third server 0 gained goes on to server 2.
  static std::shared_ptr<const KeyRing> Onward(const KeyRing& ring1) {
    const uint64_t b1 = ring1.range_begin(1);
    const uint64_t third = (ring1.range_begin(2) - b1) / 3;
    return Make(ring1, {0, b1, b1 + third, b1 + 2 * third}, {0, 2, 1, 2},
                /*epochs=*/2);
  }
  static std::shared_ptr<const KeyRing> Make(const KeyRing& from,
                                             const std::vector<uint64_t>& b,
                                             const std::vector<int>& owners,
                                             uint64_t epochs = 1) {
    auto ring = KeyRing::FromRanges(from.server_ids(), b, owners,
                                    from.epoch() + epochs, from.placement());
    EXPECT_TRUE(ring.ok()) << ring.status();
    ring->set_replicas(from.replicas());
    return std::make_shared<const KeyRing>(std::move(ring.value()));
  }

  // Delivers `ring` to every node but worker 0 (the stale one).
  void InstallOnAllButWorker0(const std::shared_ptr<const KeyRing>& ring) {
    for (Postoffice* p : cluster_->all()) {
      if (p == cluster_->worker(0)) continue;
      ASSERT_TRUE(p->node()->InstallRingForTest(ring).ok());
    }
  }
  void InstallOnWorker0(const std::shared_ptr<const KeyRing>& ring) {
    ASSERT_TRUE(cluster_->worker(0)->node()->InstallRingForTest(ring).ok());
  }

  // Request `ts` of worker 0 was refused in part and waits for worker 0
  // to get the ring the server named (without re-routing it would have
  // failed with the refusal).
  void ExpectHeld(int ts) {
    TestWorker* w0 = workers_[0].get();
    ASSERT_TRUE(WaitUntil([&] { return Waiting() == 1 || !w0->Open(ts); }));
    ASSERT_TRUE(w0->Open(ts)) << "request ended: " << w0->WaitBounded(ts);
  }

  double Metric(Postoffice* po, const std::string& name) {
    return metrics::Registry::Sum(po->node()->metrics()->Collect(), name);
  }
  double Waiting() {
    return Metric(cluster_->worker(0), "ember_parts_waiting_for_ring");
  }
  double Rerouted() {
    return Metric(cluster_->worker(0), "ember_rerouted_parts_total");
  }
  double Duplicates() {
    double d = 0;
    for (int i = 0; i < 3; ++i) {
      d += Metric(cluster_->server(i), "ember_duplicate_pushes_total");
    }
    return d;
  }

  // How many keys the move takes from `ring1_`'s server index 1 to each of
  // the other two, under `ring`.
  void ExpectSomeKeysMove(const KeyRing& ring) {
    int to0 = 0, to2 = 0;
    for (Key k : keys_) {
      if (ring1_->OwnerIndex(k) != 1) continue;
      to0 += ring.OwnerIndex(k) == 0;
      to2 += ring.OwnerIndex(k) == 2;
    }
    ASSERT_GT(to0, 0);
    ASSERT_GT(to2, 0);
  }

  // Worker 1 (on the current ring) pulls every key: `per_key` values each.
  std::vector<float> PullAll(int per_key) {
    std::vector<float> out;
    Status s = workers_[1]->WaitBounded(workers_[1]->Pull(keys_, &out));
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(out.size(), keys_.size() * per_key);
    return out;
  }

  // Two values per key: 2i + 1 and 2i + 2 for key i.
  std::vector<float> TwoPerKey() const {
    std::vector<float> vals;
    for (size_t i = 0; i < keys_.size(); ++i) {
      vals.push_back(2.0f * i + 1);
      vals.push_back(2.0f * i + 2);
    }
    return vals;
  }

  // Worker 0's push `ts` of 1 to every key completes, and every key holds
  // exactly that 1 on its owner; no server saw a duplicate.
  void ExpectAppliedOnce(int ts) {
    Status s = workers_[0]->WaitBounded(ts);
    ASSERT_TRUE(s.ok()) << s;
    std::vector<float> out = PullAll(1);
    size_t wrong = 0;
    for (float v : out) wrong += v != 1.0f;
    EXPECT_EQ(wrong, 0u) << "keys not applied exactly once";
    EXPECT_EQ(Duplicates(), 0);
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<KVServer<float>>> servers_;
  std::vector<std::unique_ptr<TestWorker>> workers_;
  std::shared_ptr<const KeyRing> ring1_;
  std::vector<Key> keys_;
};

// A push sliced by the old ring: server 1 refuses its part, the worker
// waits for the new ring, re-routes the part, and every key ends at exactly
// 1 on its new owner. Fails without re-routing: the push fails with the
// refusal.
TEST_P(RerouteTest, APushSlicedByAnOldRingIsAppliedOnceAtTheNewOwners) {
  auto ring2 = Shrink1(*ring1_);
  ExpectSomeKeysMove(*ring2);
  InstallOnAllButWorker0(ring2);
  TestWorker* w0 = workers_[0].get();
  const std::vector<float> ones(keys_.size(), 1.0f);
  const int ts = w0->Push(keys_, ones);
  // Refused by server 1 and held until this worker has the ring.
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  EXPECT_EQ(Rerouted(), 0);
  InstallOnWorker0(ring2);
  ASSERT_NO_FATAL_FAILURE(ExpectAppliedOnce(ts));
  EXPECT_EQ(Waiting(), 0);
  EXPECT_EQ(Rerouted(), 1);
}

// A pull (with lens) sliced by the old ring gets the new owners' values,
// in the caller's key order.
TEST_P(RerouteTest, APullSlicedByAnOldRingReturnsTheNewOwnersValuesInOrder) {
  auto ring2 = Shrink1(*ring1_);
  ExpectSomeKeysMove(*ring2);
  InstallOnAllButWorker0(ring2);
  // Worker 1, on the new ring, stores two values per key at their new
  // owners: 2i + 1 and 2i + 2 for key i (pushed with lens).
  const std::vector<float> vals = TwoPerKey();
  const std::vector<int> twos(keys_.size(), 2);
  ASSERT_TRUE(
      workers_[1]->WaitBounded(workers_[1]->Push(keys_, vals, twos)).ok());
  TestWorker* w0 = workers_[0].get();
  std::vector<float> out;
  std::vector<int> lens;
  const int ts = w0->Pull(keys_, &out, &lens);
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  InstallOnWorker0(ring2);
  Status s = w0->WaitBounded(ts);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, vals);
  EXPECT_EQ(lens, twos);
  EXPECT_EQ(Rerouted(), 1);
}

// A push with lens, re-routed: each key's values are cut from the right
// place.
TEST_P(RerouteTest, APushWithLensIsCutPerKey) {
  auto ring2 = Shrink1(*ring1_);
  InstallOnAllButWorker0(ring2);
  const std::vector<float> vals = TwoPerKey();
  const std::vector<int> twos(keys_.size(), 2);
  TestWorker* w0 = workers_[0].get();
  const int ts = w0->Push(keys_, vals, twos);
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  InstallOnWorker0(ring2);
  ASSERT_TRUE(w0->WaitBounded(ts).ok());
  EXPECT_EQ(PullAll(2), vals);
  EXPECT_EQ(Duplicates(), 0);
}

// The part waits for the epoch the server named, not for any newer ring;
// and a re-routed part refused again (its keys moved once more) is
// re-routed again. Every key still ends at exactly 1.
TEST_P(RerouteTest, AReroutedPartRefusedAgainIsReroutedAgain) {
  auto ring2 = Shrink1(*ring1_);
  auto ring3 = Onward(*ring1_);
  InstallOnAllButWorker0(ring2);
  TestWorker* w0 = workers_[0].get();
  const std::vector<float> ones(keys_.size(), 1.0f);
  const int ts = w0->Push(keys_, ones);
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  // The servers move on to epoch 3 before the worker reaches epoch 2: the
  // part re-routed by ring 2 to server 0 is refused again.
  InstallOnAllButWorker0(ring3);
  InstallOnWorker0(ring2);
  ASSERT_TRUE(WaitUntil([&] { return Rerouted() == 1 && Waiting() == 1; }));
  EXPECT_TRUE(w0->Open(ts));
  InstallOnWorker0(ring3);
  ASSERT_NO_FATAL_FAILURE(ExpectAppliedOnce(ts));
  EXPECT_EQ(Rerouted(), 2);
}

// A part that waits for a ring is not a silent wait: every
// EMBER_WAIT_LOG_INTERVAL_MS the worker says what it waits for.
TEST_P(RerouteTest, APartWaitingForARingIsLogged) {
  auto ring2 = Shrink1(*ring1_);
  InstallOnAllButWorker0(ring2);
  TestWorker* w0 = workers_[0].get();
  const std::vector<float> ones(keys_.size(), 1.0f);
  const int ts = w0->Push(keys_, ones);
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  LogCapture log;
  Node* node = cluster_->worker(0)->node();
  cluster_->clock()->Advance(node->options().wait_log_interval_ms);
  node->WatchWaits();
  ASSERT_TRUE(WaitUntil(
      [&] { return !log.Find("for this node to get that ring").empty(); }));
  const std::string line = log.Find("for this node to get that ring")[0];
  EXPECT_NE(line.find("refused for keys moved by ring epoch 2"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("it has epoch 1"), std::string::npos) << line;
  EXPECT_NE(line.find("has waited 5 s"), std::string::npos) << line;
  InstallOnWorker0(ring2);
  ASSERT_TRUE(w0->WaitBounded(ts).ok());
}

// A request cut by the application's own slicer (ps-lite's ranges) is
// re-routed by the ring like any other. Range placement only: a slicer
// over ps-lite's ranges places keys by value.
using RerouteRangeTest = RerouteTest;
TEST_P(RerouteRangeTest, ARequestOfACustomSlicerIsReroutedByTheRing) {
  TestWorker* w0 = workers_[0].get();
  w0->set_slicer([](const KVPairs<float>& send,
                    const std::vector<Range>& ranges,
                    KVWorker<float>::SlicedKVs* sliced) {
    sliced->resize(ranges.size());
    size_t begin = 0;
    for (size_t r = 0; r < ranges.size(); ++r) {
      size_t end = begin;
      while (end < send.keys.size() && send.keys[end] < ranges[r].end()) {
        ++end;
      }
      if (r + 1 == ranges.size()) end = send.keys.size();
      (*sliced)[r].first = end > begin;
      (*sliced)[r].second.keys = send.keys.segment(begin, end);
      (*sliced)[r].second.vals = send.vals.segment(begin, end);
      begin = end;
    }
  });
  auto ring2 = Shrink1(*ring1_);
  InstallOnAllButWorker0(ring2);
  const std::vector<float> ones(keys_.size(), 1.0f);
  const int ts = w0->Push(keys_, ones);
  ASSERT_NO_FATAL_FAILURE(ExpectHeld(ts));
  InstallOnWorker0(ring2);
  ASSERT_NO_FATAL_FAILURE(ExpectAppliedOnce(ts));
}

INSTANTIATE_TEST_SUITE_P(
    ReplicasAndPlacement, RerouteTest,
    ::testing::Combine(::testing::Values(0, 1),
                       ::testing::Values(Placement::kRange,
                                         Placement::kSpread)),
    [](const ::testing::TestParamInfo<std::tuple<int, Placement>>& info) {
      return "k" + std::to_string(std::get<0>(info.param)) + "_" +
             PlacementName(std::get<1>(info.param));
    });

// The test seam takes only a ring that follows the node's, over servers
// the node knows.
TEST_P(RerouteRangeTest, TheSeamTakesOnlyARingThatFollows) {
  Node* node = cluster_->worker(0)->node();
  EXPECT_EQ(node->InstallRingForTest(ring1_).code(),
            Status::Code::kInvalidArgument);
  auto stranger = KeyRing::EvenSplit({8, 10, 99}, 2);
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ(node->InstallRingForTest(
                    std::make_shared<const KeyRing>(std::move(*stranger)))
                .code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(node->ring_epoch(), 1u);
  ASSERT_TRUE(node->InstallRingForTest(Shrink1(*ring1_)).ok());
  EXPECT_EQ(node->ring_epoch(), 2u);
  EXPECT_EQ(node->key_ring()->num_ranges(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    Replicas, RerouteRangeTest,
    ::testing::Combine(::testing::Values(0, 1),
                       ::testing::Values(Placement::kRange)),
    [](const ::testing::TestParamInfo<std::tuple<int, Placement>>& info) {
      return "k" + std::to_string(std::get<0>(info.param));
    });

}  // namespace
}  // namespace ps
