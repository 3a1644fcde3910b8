// Replication and failover over the in-process transport
// (docs/replication.md): every push is applied once on its owner and on the
// servers that keep copies; when a server dies, the server holding its copy
// takes over its keys, workers resend what the dead server owed, and no push
// is lost or applied twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "metrics/metrics.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/kv_test_servers.h"
#include "testutil/log_capture.h"
#include "transport/fault_van.h"

namespace ps {
namespace {

// A push request of app 0 from a worker, built by hand (as a resend or a
// network duplicate would arrive): timestamp `ts`, to server `to`, sliced
// under ring `epoch` (0: unstamped).
Message RawPush(int64_t ts, int to, const std::vector<Key>& keys,
                const std::vector<float>& vals, uint64_t epoch = 0) {
  Message m = AppMessage(0, 0, ts, to, /*request=*/true);
  m.meta.push = true;
  m.meta.epoch = epoch;
  m.meta.value_bytes = sizeof(float);
  RawKVs kvs;
  kvs.keys = SArray<Key>(keys);
  kvs.vals = SArray<char>(SArray<float>(vals));
  AddKVFrames(kvs, &m);
  return m;
}

// 40 keys owned by server `id` under `ring`, not in equal steps (so a worker
// may send them as a signature: docs/protocol.md, "Key caching").
std::vector<Key> UnevenKeysOf(const KeyRing& ring, int id) {
  std::vector<Key> keys;
  const std::vector<Key> spread = SpreadKeys(4096);
  for (size_t i = 0; i < spread.size() && keys.size() < 40; ++i) {
    const Key k = spread[i] + i % 3;
    if (ring.Owner(k) == id) keys.push_back(k);
  }
  return keys;
}

// The sum of metric `name` over node `po`'s series.
double ServerMetric(Postoffice* po, const std::string& name) {
  return metrics::Registry::Sum(po->node()->metrics()->Collect(), name);
}

// A CountingServer on each of the first `n` servers of `cluster`, in
// creation order.
std::vector<std::unique_ptr<CountingServer>> CountingServersOf(
    InProcCluster* cluster, int n) {
  std::vector<std::unique_ptr<CountingServer>> servers;
  for (int i = 0; i < n; ++i) {
    servers.push_back(std::make_unique<CountingServer>(cluster->server(i)));
  }
  return servers;
}

class ReplicationTest : public ::testing::Test {
 protected:
  void Form(int servers, int workers, int replicas, bool copyable = true,
            const std::string& consistency = "asp") {
    cluster_ = std::make_unique<InProcCluster>(
        servers, workers, [replicas, consistency](Options* o) {
          o->replicas = replicas;
          auto c = ConsistencyConfig::Parse(consistency);
          ASSERT_TRUE(c.ok()) << c.status();
          o->consistency = *c;
        });
    cluster_->Start();
    // By rank (the cluster's nodes are in creation order, ranks in join
    // order).
    servers_.resize(servers);
    server_po_.resize(servers);
    for (int i = 0; i < servers; ++i) {
      Postoffice* po = cluster_->server(i);
      const int rank = po->node()->my_rank();
      server_po_[rank] = po;
      servers_[rank] = std::make_unique<CountingServer>(po, copyable);
    }
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(
          std::make_unique<TestWorker>(0, 0, cluster_->worker(w)));
    }
  }
  void TearDown() override {
    // A member died: no final barrier.
    workers_.clear();
    servers_.clear();
    cluster_.reset();
  }
  // Every worker pushes 1 to every key `times` times, one request at a
  // time.
  void PushOnes(const std::vector<Key>& keys, int times) {
    std::vector<float> ones(keys.size(), 1.0f);
    std::vector<std::thread> threads;
    for (auto& w : workers_) {
      TestWorker* kv = w.get();
      threads.emplace_back([&, kv] {
        for (int i = 0; i < times; ++i) {
          Status s = kv->WaitBounded(kv->Push(keys, ones));
          ASSERT_TRUE(s.ok()) << s;
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  // Every key pulled by worker 0 equals `expected`.
  void ExpectAll(const std::vector<Key>& keys, float expected) {
    std::vector<float> out;
    Status s = workers_[0]->WaitBounded(workers_[0]->Pull(keys, &out));
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), keys.size());
    size_t wrong = 0;
    for (size_t i = 0; i < keys.size(); ++i) wrong += out[i] != expected;
    EXPECT_EQ(wrong, 0u) << "keys off " << expected << ", e.g. key " << keys[0]
                         << " = " << out[0];
  }
  int ServerId(int rank) { return server_po_[rank]->node()->my_id(); }
  // UnevenKeysOf the server of rank `rank`.
  std::vector<Key> UnevenKeysOfRank(int rank) {
    return UnevenKeysOf(*cluster_->worker(0)->node()->key_ring(),
                        ServerId(rank));
  }
  double Metric(Postoffice* po, const std::string& name) {
    return ServerMetric(po, name);
  }
  void Kill(int rank) { cluster_->KillByHeartbeat(server_po_[rank]); }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<CountingServer>> servers_;  // By rank.
  std::vector<Postoffice*> server_po_;                    // By rank.
  std::vector<std::unique_ptr<TestWorker>> workers_;

  // 2^31: where ps-lite's int timestamps would wrap.
  static constexpr int64_t kWrap = int64_t{1} << 31;
  // A cluster of 3 servers (one copy each) and 1 worker whose requests are
  // numbered from `first`; the worker.
  TestWorker* FormFrom(int64_t first) {
    Form(3, 1, 1);
    TestWorker* w = workers_[0].get();
    EXPECT_TRUE(w->StartAt(first));
    return w;
  }
};

TEST(KeyRingReplicas, TargetsAreTheRingSuccessorsAndFailoverHandsAllToTheHeir) {
  auto ring = KeyRing::EvenSplit({8, 10, 12}, 1);
  ASSERT_TRUE(ring.ok());
  ring->set_replicas(1);
  EXPECT_EQ(ring->ReplicaTargets(8), std::vector<int>({10}));
  EXPECT_EQ(ring->ReplicaTargets(12), std::vector<int>({8}));
  ring->set_replicas(5);  // Capped at num_servers() - 1.
  EXPECT_EQ(ring->replicas(), 2);
  EXPECT_EQ(ring->ReplicaTargets(10), std::vector<int>({12, 8}));
  ring->set_replicas(1);
  auto next = ring->FailOver(10, 12, 2);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->epoch(), 2u);
  EXPECT_EQ(next->server_ids(), std::vector<int>({8, 12}));
  EXPECT_EQ(next->replicas(), 1);
  // Server 10's range is server 12's now, merged with its own.
  EXPECT_EQ(next->Owner(kMaxKey / 3 + 1), 12);
  EXPECT_EQ(next->Owner(kMaxKey), 12);
  EXPECT_EQ(next->Owner(0), 8);
  EXPECT_FALSE(ring->FailOver(10, 10, 2).ok());
  EXPECT_FALSE(ring->FailOver(99, 12, 2).ok());
  // Through the wire form and back.
  auto back = KeyRing::FromInfo(next->ToInfo());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->replicas(), 1);
  EXPECT_EQ(back->begins(), next->begins());
}

TEST_F(ReplicationTest, EveryPushIsAppliedOnItsOwnerAndOnOneCopy) {
  Form(3, 2, 1);
  std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 4);
  ExpectAll(keys, 8);
  // Each of the 8 pushes reached every server (each owns a third of the
  // keys) once as owner and once as the copy of its predecessor's.
  for (auto& s : servers_) EXPECT_EQ(s->applied(), 16);
  for (Postoffice* po : server_po_) {
    auto m = po->node()->metrics()->Collect();
    EXPECT_EQ(metrics::Registry::Sum(m, "ember_replica_copies_sent_total"), 8);
    EXPECT_EQ(metrics::Registry::Sum(m, "ember_replica_copies_applied_total"),
              8);
    EXPECT_EQ(metrics::Registry::Sum(m, "ember_duplicate_pushes_total"), 0);
  }
}

TEST_F(ReplicationTest, AKilledServerLosesNothingAndTheRunGoesOn) {
  Form(3, 2, 1);
  std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 3);
  // Server 1 stops answering (it still forwards its copies): the pushes in
  // flight now wait for it, as for a server killed mid-request.
  servers_[1]->Silence();
  std::vector<float> ones(keys.size(), 1.0f);
  std::vector<int> in_flight;
  for (auto& w : workers_) in_flight.push_back(w->Push(keys, ones));
  // Server 2 has applied its own part of both and server 1's copies of
  // them (2 x 3 earlier pushes, twice each, then these 4).
  ASSERT_TRUE(WaitUntil([&] { return servers_[2]->applied() == 16; }));
  LogCapture log;
  Kill(1);
  for (size_t w = 0; w < workers_.size(); ++w) {
    Status s = workers_[w]->WaitStatus(in_flight[w]);
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_FALSE(log.Find("takes over the data of server 1").empty());
  // Both workers resent their part for server 1; the heir (server 2) had
  // each push as a copy already and applied none again.
  double resent = 0;
  for (int w = 0; w < 2; ++w) {
    resent += metrics::Registry::Sum(
        cluster_->worker(w)->node()->metrics()->Collect(),
        "ember_resent_requests_total");
  }
  EXPECT_EQ(resent, 2);
  EXPECT_EQ(metrics::Registry::Sum(server_po_[2]->node()->metrics()->Collect(),
                                   "ember_duplicate_pushes_total"),
            2);
  // Server 1's keys are server 2's now; pushes go on.
  auto ring = cluster_->worker(0)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 2u);
  EXPECT_EQ(ring->IndexOf(ServerId(1)), -1);
  PushOnes(keys, 2);
  ExpectAll(keys, 2 * (3 + 1 + 2));
}

// A dense push (consecutive keys, sent as key runs) is forwarded to the
// copy as a run and applied there key by key: after the owner dies, its
// heir answers every key exactly.
TEST_F(ReplicationTest, CopiesOfKeyRunsAreAppliedExactly) {
  Form(3, 1, 1);
  const std::vector<Range>& ranges = cluster_->worker(0)->GetServerKeyRanges();
  const size_t n = 1000;
  std::vector<Key> keys;
  for (const Range& r : ranges) {
    for (Key k = 0; k < n; ++k) keys.push_back(r.begin() + k);
  }
  auto received = [&](int rank) {
    return server_po_[rank]->node()->van()->counters().received_bytes.load();
  };
  std::vector<uint64_t> before;
  for (int r = 0; r < 3; ++r) before.push_back(received(r));
  PushOnes(keys, 3);
  for (auto& s : servers_) EXPECT_EQ(s->applied(), 6);
  // Each server received its part of 3 pushes and copies of its
  // predecessor's: values, runs, headers and acknowledgements, not keys.
  for (int r = 0; r < 3; ++r) {
    const uint64_t got = received(r) - before[r];
    EXPECT_GE(got, 6 * n * sizeof(float));
    EXPECT_LT(got, 6 * (n * sizeof(float) + 400)) << "server " << r;
  }
  Kill(1);
  ASSERT_TRUE(WaitUntil(
      [&] { return cluster_->worker(0)->node()->key_ring()->epoch() == 2; }));
  ExpectAll(keys, 3);
  PushOnes(keys, 1);
  ExpectAll(keys, 4);
}

TEST_F(ReplicationTest,
       APushAppliedByTheCopyBeforeTheOwnerDiedIsNotAppliedTwice) {
  Form(3, 1, 1);
  std::vector<Key> keys = SpreadKeys(300);
  servers_[1]->Silence();
  std::vector<float> ones(keys.size(), 1.0f);
  int ts = workers_[0]->Push(keys, ones);
  // Server 2 applies server 1's copy (it answers its own part too).
  ASSERT_TRUE(WaitUntil([&] { return servers_[2]->applied() == 2; }));
  Kill(1);
  Status s = workers_[0]->WaitStatus(ts);
  ASSERT_TRUE(s.ok()) << s;
  // The resend reached server 2, which had the push already: applied
  // twice, server 1's keys would be 2. (Server 2's count may include a copy
  // of server 0's part, if server 0 took the push after the failover made
  // server 2 its successor.)
  ExpectAll(keys, 1);
}

TEST_F(ReplicationTest, TwoDeadServersWithTheSameDataEndTheRunNamingTheLoss) {
  Form(3, 1, 1);
  std::vector<Key> keys = SpreadKeys(300);
  PushOnes(keys, 1);
  LogCapture log;
  // Servers 1 and 2 die at once: server 1's only copy was on server 2.
  cluster_->network()->Sever(cluster_->AddressOf(ServerId(1)));
  cluster_->network()->Sever(cluster_->AddressOf(ServerId(2)));
  cluster_->clock()->Advance(InProcCluster::kTimeoutMs + 1);
  cluster_->Beat(server_po_[0]);
  cluster_->Beat(cluster_->worker(0));
  cluster_->scheduler()->node()->CheckLiveness();
  std::vector<float> out;
  Status s = workers_[0]->WaitStatus(workers_[0]->Pull(keys, &out));
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_FALSE(log.Find("that data is lost").empty());
}

TEST_F(ReplicationTest, WithTwoServersTheSurvivorTakesEverything) {
  Form(2, 2, 1);
  std::vector<Key> keys = SpreadKeys(1024);
  PushOnes(keys, 2);
  Kill(0);
  PushOnes(keys, 1);
  ExpectAll(keys, 2 * 3);
  EXPECT_EQ(cluster_->worker(1)->node()->key_ring()->num_servers(), 1);
}

// A push delivered twice (a resend whose first copy arrived, or a duplicate
// on the wire) is applied once and answered both times.
TEST_F(ReplicationTest, ADuplicatePushIsAppliedOnce) {
  Form(2, 1, 1);
  std::vector<Key> keys = {1, 2, 3};
  std::vector<float> vals = {1, 2, 3};
  Node* node = cluster_->worker(0)->node();
  const int server = ServerId(0);
  for (int copy = 0; copy < 2; ++copy) {
    ASSERT_TRUE(node->Send(RawPush(/*ts=*/1000, server, keys, vals)).ok());
  }
  // Both copies reach the owner before the pull (one sender, in order);
  // the second was only acknowledged, and not forwarded.
  std::vector<float> out;
  ASSERT_TRUE(workers_[0]->WaitStatus(workers_[0]->Pull(keys, &out)).ok());
  EXPECT_EQ(out, vals);
  EXPECT_EQ(servers_[0]->applied(), 1);
  // The copy on server 1 (applied before the owner's answer, which the
  // pull need not wait for).
  EXPECT_TRUE(WaitUntil([&] { return servers_[1]->applied() == 1; }));
}

// A network duplicate of a push that arrives late, after the worker has had
// the push's answer and said so (done_below, which trims the dedup table),
// is dropped: neither applied again on the owner nor forwarded; nor is a
// late duplicate of its copy applied again on the server that keeps the
// copy. (LeaveFaults.DuplicatedMessagesDuringALeave once saw one: a third
// of the keys one push too high.)
TEST_F(ReplicationTest, ALateDuplicateOfAnAnsweredPushIsDropped) {
  Form(2, 1, 1);
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<float> ones(keys.size(), 1.0f);
  TestWorker* w = workers_[0].get();
  const int owner = ServerId(0);
  const int holder = ServerId(1);
  ASSERT_EQ(cluster_->worker(0)->node()->key_ring()->Owner(keys[0]), owner);
  const int first = w->Push(keys, ones);
  ASSERT_TRUE(w->WaitBounded(first).ok());
  // Its done_below says the first push is answered.
  ASSERT_TRUE(w->WaitBounded(w->Push(keys, ones)).ok());
  ASSERT_EQ(servers_[0]->applied(), 2);
  // The first push again, and its copy again (as the owner forwarded it).
  Node* worker_node = cluster_->worker(0)->node();
  ASSERT_TRUE(worker_node->Send(RawPush(first, owner, keys, ones)).ok());
  Message copy = RawPush(/*ts=*/-1000, holder, keys, ones);
  copy.meta.replica_of = owner;
  copy.meta.origin_sender = worker_node->my_id();
  copy.meta.origin_customer = 0;
  copy.meta.origin_timestamp = first;
  ASSERT_TRUE(server_po_[0]->node()->Send(std::move(copy)).ok());
  // A third push comes after both on their links (and its answer after
  // its copy is applied on the holder).
  ASSERT_TRUE(w->WaitBounded(w->Push(keys, ones)).ok());
  std::vector<float> out;
  ASSERT_TRUE(w->WaitBounded(w->Pull(keys, &out)).ok());
  EXPECT_EQ(out, std::vector<float>(keys.size(), 3.0f));
  EXPECT_EQ(servers_[0]->applied(), 3);
  EXPECT_EQ(servers_[1]->applied(), 3);
  EXPECT_EQ(Metric(server_po_[0], "ember_duplicate_pushes_total"), 1);
  EXPECT_EQ(Metric(server_po_[1], "ember_duplicate_pushes_total"), 1);
}

// Copies follow the worker's key caching: the owner forwards a key set the
// worker asked it to keep asking the holder to keep it too, and a signed
// push as the same signature, which the holder resolves. After the owner
// dies, the heir answers every key exactly.
TEST_F(ReplicationTest, CopiesOfSignedPushesGoSignedAndFailOverExactly) {
  Form(2, 1, 1);
  const std::vector<Key> keys = UnevenKeysOfRank(0);
  ASSERT_EQ(keys.size(), 40u);
  PushOnes(keys, 5);  // Keys, keys to keep, then three signatures.
  EXPECT_EQ(Metric(server_po_[0], "ember_key_cache_hits_total"), 3);
  EXPECT_EQ(Metric(server_po_[1], "ember_key_cache_hits_total"), 3);
  EXPECT_EQ(Metric(server_po_[0], "ember_replica_copy_keys_resent_total"), 0);
  EXPECT_EQ(servers_[1]->applied(), 5);
  Kill(0);
  ExpectAll(keys, 5);
}

// A holder that does not hold a signed copy's keys (here: the owner's
// holder died, and its new holder never saw them) refuses it; the owner
// sends the copy again with its keys, asking the new holder to keep them,
// and the signatures after that are resolved there. After the owner dies
// too, its heir answers every key exactly.
TEST_F(ReplicationTest, ASignedCopyItsHolderDoesNotHoldGoesAgainWithItsKeys) {
  Form(3, 1, 1);
  const std::vector<Key> keys = UnevenKeysOfRank(0);
  ASSERT_EQ(keys.size(), 40u);
  PushOnes(keys, 3);
  EXPECT_EQ(Metric(server_po_[1], "ember_key_cache_hits_total"), 1);
  Kill(1);  // Server 0's holder: server 2 keeps its copies from now on.
  PushOnes(keys, 3);
  EXPECT_EQ(Metric(server_po_[0], "ember_replica_copy_keys_resent_total"), 1);
  EXPECT_EQ(Metric(server_po_[2], "ember_key_cache_misses_total"), 1);
  EXPECT_EQ(Metric(server_po_[2], "ember_key_cache_hits_total"), 2);
  Kill(0);
  ExpectAll(keys, 6);
}

// A started cluster of `servers` servers and one worker with one copy of
// each server's data, in which server 1 keeps no keys
// (EMBER_KEY_CACHE_MB=0).
std::unique_ptr<InProcCluster> StartWithServer1KeepingNoKeys(int servers) {
  auto cluster = std::make_unique<InProcCluster>(servers, 1, [](Options* o) {
    o->replicas = 1;
    if (o->role == Role::kServer && o->rank_hint == 1) o->key_cache_mb = 0;
  });
  cluster->Start();
  return cluster;
}

// A holder that keeps no keys (EMBER_KEY_CACHE_MB=0) refuses a signed copy
// saying so: the owner sends it again with its keys, and every later copy
// to that holder carries its keys.
TEST(ReplicationKeyCache, AHolderThatKeepsNoKeysGetsEveryCopyWithItsKeys) {
  std::unique_ptr<InProcCluster> cluster = StartWithServer1KeepingNoKeys(2);
  auto servers = CountingServersOf(cluster.get(), 2);
  TestWorker w(0, 0, cluster->worker(0));
  Postoffice* owner = cluster->server(0);
  Postoffice* holder = cluster->server(1);
  const std::vector<Key> keys = UnevenKeysOf(
      *cluster->worker(0)->node()->key_ring(), owner->node()->my_id());
  ASSERT_EQ(keys.size(), 40u);
  const std::vector<float> ones(keys.size(), 1.0f);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.WaitBounded(w.Push(keys, ones)).ok());
  }
  EXPECT_EQ(ServerMetric(owner, "ember_key_cache_hits_total"), 3);
  EXPECT_EQ(ServerMetric(owner, "ember_replica_copy_keys_resent_total"), 1);
  EXPECT_EQ(ServerMetric(holder, "ember_key_cache_misses_total"), 1);
  EXPECT_EQ(servers[1]->applied(), 5);
  cluster->KillByHeartbeat(owner);
  std::vector<float> out;
  ASSERT_TRUE(w.WaitBounded(w.Pull(keys, &out)).ok());
  EXPECT_EQ(out, std::vector<float>(keys.size(), 5.0f));
  servers.clear();  // A member died: no final barrier.
}

// After a ring change the owner signs copies to such a holder again (it may
// have come back with a cache): one more refusal, one more resend, and
// every key stays exact.
TEST(ReplicationKeyCache, AHolderThatKeepsNoKeysIsAskedAgainAfterARingChange) {
  std::unique_ptr<InProcCluster> cluster = StartWithServer1KeepingNoKeys(3);
  auto servers = CountingServersOf(cluster.get(), 3);
  TestWorker w(0, 0, cluster->worker(0));
  Postoffice* owner = cluster->server(0);
  Postoffice* holder = cluster->server(1);
  const KeyRing& ring = *cluster->worker(0)->node()->key_ring();
  ASSERT_EQ(ring.ReplicaTargets(owner->node()->my_id()),
            std::vector<int>{holder->node()->my_id()});
  const std::vector<Key> keys = UnevenKeysOf(ring, owner->node()->my_id());
  const std::vector<float> ones(keys.size(), 1.0f);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.WaitBounded(w.Push(keys, ones)).ok());
  }
  EXPECT_EQ(ServerMetric(owner, "ember_replica_copy_keys_resent_total"), 1);
  cluster->KillByHeartbeat(cluster->server(2));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.WaitBounded(w.Push(keys, ones)).ok());
  }
  EXPECT_EQ(ServerMetric(owner, "ember_replica_copy_keys_resent_total"), 2);
  EXPECT_EQ(ServerMetric(holder, "ember_key_cache_misses_total"), 2);
  std::vector<float> out;
  ASSERT_TRUE(w.WaitBounded(w.Pull(keys, &out)).ok());
  EXPECT_EQ(out, std::vector<float>(keys.size(), 10.0f));
  servers.clear();  // A member died: no final barrier.
}

// A worker app created again with the same ids (ps-lite allows it) numbers
// its requests on from the last one's, so that its pushes are neither taken
// for late duplicates nor for pushes the dedup table holds.
TEST_F(ReplicationTest, AWorkerAppCreatedAgainNumbersOnAndIsApplied) {
  Form(2, 1, 1);
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<float> ones(keys.size(), 1.0f);
  int last = -1;
  for (int i = 0; i < 3; ++i) {
    last = workers_[0]->Push(keys, ones);
    ASSERT_TRUE(workers_[0]->WaitBounded(last).ok());
  }
  workers_[0].reset();
  workers_[0] = std::make_unique<TestWorker>(0, 0, cluster_->worker(0));
  const int ts = workers_[0]->Push(keys, ones);
  EXPECT_EQ(ts, last + 1);
  ASSERT_TRUE(workers_[0]->WaitBounded(ts).ok());
  std::vector<float> out;
  ASSERT_TRUE(workers_[0]->WaitBounded(workers_[0]->Pull(keys, &out)).ok());
  EXPECT_EQ(out, std::vector<float>(keys.size(), 4.0f));
  EXPECT_EQ(Metric(server_po_[0], "ember_duplicate_pushes_total"), 0);
}

// A network duplicate of a push that reaches its owner while the push's
// copy is unacknowledged is left to the push's own answer, which waits for
// the copy: answered at once, it would tell the worker the push was safe,
// and a death of the owner before the copy arrived would lose it. Here the
// copy never arrives (the owner is cut off and killed): the worker, never
// answered, resends the push to the heir, and every key ends at exactly 1.
TEST(ReplicationDuplicates, ADuplicateWaitsForItsPushsCopy) {
  FaultInjector net(1);
  InProcCluster cluster(
      2, 1, [](Options* o) { o->replicas = 1; }, &net);
  cluster.Start();
  auto servers = CountingServersOf(&cluster, 2);
  TestWorker worker(0, 0, cluster.worker(0));
  Postoffice* owner = cluster.server(0);
  const int id = owner->node()->my_id();
  const int heir = cluster.server(1)->node()->my_id();
  auto ring = cluster.worker(0)->node()->key_ring();
  std::vector<Key> keys;
  for (Key k : SpreadKeys(64)) {
    if (ring->Owner(k) == id) keys.push_back(k);
  }
  ASSERT_FALSE(keys.empty());
  // The owner's copies to the heir are held.
  FaultPlan hold =
      FaultCluster::HoldPlan({{id, heir}}, FaultTarget::Kind::kData);
  ASSERT_TRUE(net.set_plan(hold).ok());
  LogCapture log;
  const std::vector<float> ones(keys.size(), 1.0f);
  const int ts = worker.Push(keys, ones);
  ASSERT_TRUE(WaitUntil([&] { return net.held() == 1; }));  // The copy.
  // The same request again, as a network that delivers twice would.
  ASSERT_TRUE(
      cluster.worker(0)->node()->Send(RawPush(ts, id, keys, ones)).ok());
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("came again while its copies are unacknowledged").empty();
  }));
  net.Partition({id}, {heir});  // The held copy is lost.
  cluster.KillByHeartbeat(owner);
  ASSERT_TRUE(net.set_plan(FaultPlan()).ok());
  net.Flush();
  Status s = worker.WaitBounded(ts);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> out;
  s = worker.WaitBounded(worker.Pull(keys, &out));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, ones);
  EXPECT_EQ(servers[1]->applied(), 1);
  servers.clear();  // A member died: no final barrier.
}

// A request sliced by an older ring is refused where it holds a key the
// server does not own now, and applied where it does.
TEST_F(ReplicationTest, AStaleEpochRequestForKeysElsewhereIsRefusedNotApplied) {
  Form(3, 1, 1);
  Kill(1);
  // Both ends have switched to the failover's ring.
  ASSERT_TRUE(WaitUntil([&] {
    return cluster_->worker(0)->node()->ring_epoch() == 2 &&
           server_po_[0]->node()->ring_epoch() == 2;
  }));
  auto ring = cluster_->worker(0)->node()->key_ring();
  // Server 1's keys are server 2's now; server 0's are its own still.
  const std::vector<Key> moved = {
      ring->RangesOf(ring->IndexOf(ServerId(2)))[0].begin()};
  const std::vector<Key> kept = {
      ring->RangesOf(ring->IndexOf(ServerId(0)))[0].begin()};
  ASSERT_EQ(ring->Owner(moved[0]), ServerId(2));
  LogCapture log;
  Node* node = cluster_->worker(0)->node();
  const std::vector<float> one = {1};
  int ts = 5000;
  for (const auto* keys : {&moved, &kept}) {
    ASSERT_TRUE(
        node->Send(RawPush(ts++, ServerId(0), *keys, one, /*epoch=*/1)).ok());
  }
  // The second is applied (in order, after the first was refused).
  ASSERT_TRUE(WaitUntil([&] { return servers_[0]->applied() == 1; }));
  EXPECT_EQ(log.Find("does not own key").size(), 1u);
  std::vector<float> out;
  ASSERT_TRUE(workers_[0]->WaitStatus(workers_[0]->Pull(moved, &out)).ok());
  EXPECT_EQ(out, std::vector<float>{0});
  ASSERT_TRUE(workers_[0]->WaitStatus(workers_[0]->Pull(kept, &out)).ok());
  EXPECT_EQ(out, std::vector<float>{1});
}

// Only a server on the ring may send a copy of its state: a worker's is
// refused and changes nothing.
TEST_F(ReplicationTest, AStateCopyFromAWorkerIsRefused) {
  Form(2, 1, 1);
  std::vector<Key> keys = {42};
  PushOnes(keys, 1);
  KVServerDefaultHandle<float> forged;
  forged.store[42] = {1000};
  std::vector<std::string> chunks;
  ASSERT_TRUE(
      forged.DumpState([](Key) { return true; }, 1 << 20, &chunks).ok());
  LogCapture log;
  ASSERT_TRUE(cluster_->worker(0)
                  ->node()
                  ->Send(RawStateCopy(-7, ServerId(0), 1, chunks[0]))
                  .ok());
  ASSERT_TRUE(
      WaitUntil([&] { return !log.Find("not a server on the ring").empty(); }));
  ExpectAll(keys, 1);
}

// After a failover each server whose copies are no longer whole copies its
// state to its new replica targets; then a second death loses nothing.
TEST_F(ReplicationTest,
       CopiesAreRestoredAfterAFailoverAndASecondDeathLosesNothing) {
  LogCapture log;
  Form(3, 2, 1);
  std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 3);
  Kill(1);
  // Server 0's copy was on server 1; server 2's data grew by server 1's,
  // which server 0 does not hold: both copy.
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("copies restored").size() == 2;
  })) << "restored: "
      << log.Find("copies restored").size();
  PushOnes(keys, 2);
  Kill(0);
  PushOnes(keys, 2);
  ExpectAll(keys, 2 * (3 + 2 + 2));
  EXPECT_TRUE(log.Find("that data is lost").empty());
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->num_servers(), 1);
}

// Pushes that keep coming while the copy is made are neither lost nor
// applied twice on the new holder.
TEST_F(ReplicationTest, PushesDuringTheCopyReachTheNewHolder) {
  LogCapture log;
  Form(3, 2, 1);
  std::vector<Key> keys = SpreadKeys(2048);
  PushOnes(keys, 2);
  std::atomic<bool> stop{false};
  std::atomic<int> extra{0};
  std::thread pusher([&] {
    std::vector<float> ones(keys.size(), 1.0f);
    while (!stop.load()) {
      Status st = workers_[1]->WaitStatus(workers_[1]->Push(keys, ones));
      ASSERT_TRUE(st.ok()) << st;
      extra.fetch_add(1);
    }
  });
  Kill(1);
  ASSERT_TRUE(
      WaitUntil([&] { return log.Find("copies restored").size() == 2; }));
  const int before = extra.load();
  ASSERT_TRUE(WaitUntil([&] { return extra.load() > before + 2; }));
  stop.store(true);
  pusher.join();
  Kill(2);
  ExpectAll(keys, 2 * 2 + extra.load());
}

// bsp: pushes acknowledged but not applied when the copies are made (their
// rounds wait for the other worker) are applied once on every holder when
// the round completes, and a second death loses none of them.
TEST_F(ReplicationTest, UnderBspDeferredPushesSurviveTheCopyAndASecondDeath) {
  LogCapture log;
  Form(3, 2, 1, /*copyable=*/true, "bsp");
  std::vector<Key> keys = SpreadKeys(2048);
  PushOnes(keys, 2);
  // Worker 1 pushes 3 more times at clock 0: deferred on every holder
  // until worker 0 ends its iteration (bsp: a pull at clock 1 waits for
  // both to end it).
  std::vector<float> ones(keys.size(), 1.0f);
  for (int i = 0; i < 3; ++i) {
    Status st = workers_[1]->WaitBounded(workers_[1]->Push(keys, ones));
    ASSERT_TRUE(st.ok()) << st;
  }
  Kill(1);
  ASSERT_TRUE(
      WaitUntil([&] { return log.Find("copies restored").size() == 2; }));
  EXPECT_FALSE(log.Find("deferred push(es)").empty());
  for (auto& w : workers_) {
    Status st = w->WaitBounded(w->Clock());
    ASSERT_TRUE(st.ok()) << st;
  }
  // Server 0 held deferred copies of server 2's pushes before the copy
  // replaced them; it now holds everything.
  Kill(2);
  ExpectAll(keys, 2 * 2 + 3);
  EXPECT_TRUE(log.Find("that data is lost").empty());
}

// Malformed pending pushes of a bsp copy (state_copy 3, bytes from the
// network) are refused and change nothing.
TEST_F(ReplicationTest, MalformedPendingPushesOfACopyAreRefused) {
  Form(2, 1, 1, /*copyable=*/true, "bsp");
  std::vector<Key> keys = {42};
  PushOnes(keys, 1);
  auto u64 = [](uint64_t v) {
    std::string b(8, '\0');
    std::memcpy(&b[0], &v, 8);
    return b;
  };
  const std::string counts = std::string("\x01\0\0\0", 4);  // 1 worker
  const std::string cases[] = {
      "abc",                                       // short
      u64(uint64_t{1} << 60) + u64(0),             // huge range count
      u64(1) + u64(5) + u64(5) + u64(0) + counts,  // empty range
      u64(0) + u64(uint64_t{1} << 58) + counts,    // huge push count
      u64(0) + u64(0) + "xyz",                     // bad counts
      u64(1) + u64(0) + u64(10) + u64(0) + counts + u64(0) + u64(42) +
          std::string(4, '\0'),  // key outside
  };
  LogCapture log;
  for (const std::string& c : cases) {
    ASSERT_TRUE(server_po_[1]
                    ->node()
                    ->Send(RawStateCopy(-7, ServerId(0), 3, c, ServerId(1)))
                    .ok());
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return !log.Find("refusing a copy of the state").empty(); }));
  PushOnes(keys, 1);
  ExpectAll(keys, 2);
}

// A handle whose state cannot be copied keeps working; the log says that
// no new copy can be made, and a second death ends the run.
TEST_F(ReplicationTest, WithoutAStateHandleTheLogSaysNoCopyCanBeMade) {
  LogCapture log;
  Form(3, 1, 1, /*copyable=*/false);
  std::vector<Key> keys = SpreadKeys(300);
  PushOnes(keys, 1);
  Kill(1);
  ASSERT_TRUE(
      WaitUntil([&] { return log.Find("has no state handle").size() == 2; }));
  PushOnes(keys, 1);
  ExpectAll(keys, 2);
  EXPECT_TRUE(log.Find("copies restored").empty());
}

TEST(StoreChunk, DefaultHandleStateRoundTripsInChunks) {
  KVServerDefaultHandle<float> a;
  for (Key k = 0; k < 1000; ++k) {
    a.store[k] = std::vector<float>(1 + k % 3, static_cast<float>(k));
  }
  std::vector<std::string> chunks;
  ASSERT_TRUE(
      a.DumpState([](Key k) { return k % 2 == 0; }, 4096, &chunks).ok());
  EXPECT_GT(chunks.size(), 2u);
  KVServerDefaultHandle<float> b;
  b.store[2] = {99};  // Replaced by the copy.
  for (const std::string& c : chunks) {
    ASSERT_TRUE(b.LoadState(c.data(), c.size()).ok());
  }
  ASSERT_EQ(b.store.size(), 500u);
  for (const auto& kv : b.store) EXPECT_EQ(kv.second, a.store.at(kv.first));
}

TEST(StoreChunk, MalformedChunksAreRefused) {
  KVServerDefaultHandle<float> a;
  a.store[5] = {1, 2};
  a.store[7] = {3};
  std::vector<std::string> chunks;
  ASSERT_TRUE(a.DumpState([](Key) { return true; }, 1 << 20, &chunks).ok());
  ASSERT_EQ(chunks.size(), 1u);
  const std::string good = chunks[0];
  KVServerDefaultHandle<float> b;
  // Cut short, a bad magic, a count beyond the bytes, a value count off.
  std::string bad = good.substr(0, good.size() - 1);
  EXPECT_EQ(b.LoadState(bad.data(), bad.size()).code(),
            Status::Code::kCorruption);
  bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(b.LoadState(bad.data(), bad.size()).code(),
            Status::Code::kCorruption);
  bad = good;
  bad[15] = 0x7f;
  EXPECT_EQ(b.LoadState(bad.data(), bad.size()).code(),
            Status::Code::kCorruption);
  bad = good;
  bad[16 + 8] = 3;  // The first key's count: 3 values, not 2.
  EXPECT_EQ(b.LoadState(bad.data(), bad.size()).code(),
            Status::Code::kCorruption);
  KVServerDefaultHandle<double> d;  // Another value size.
  EXPECT_EQ(d.LoadState(good.data(), good.size()).code(),
            Status::Code::kCorruption);
  EXPECT_TRUE(b.store.empty());
  ASSERT_TRUE(b.LoadState(good.data(), good.size()).ok());
  EXPECT_EQ(b.store[5], (std::vector<float>{1, 2}));
}

// Detection from the transport (docs/replication.md, "Detection"): the
// scheduler's van reports that its connection to a server closed and
// reconnecting was refused, as ZmqVan does from ZeroMQ's monitor after a
// kill -9; the server fails over after EMBER_DISCONNECT_GRACE_MS, long
// before the heartbeat timeout, and the run goes on.
TEST_F(ReplicationTest, AClosedAndRefusedConnectionFailsOverBeforeTheTimeout) {
  Form(3, 2, 1);
  std::vector<Key> keys = SpreadKeys(999);
  PushOnes(keys, 2);
  Van* van = cluster_->scheduler()->node()->van();
  PeerEvent event;
  event.ids = {ServerId(1)};
  event.address = cluster_->AddressOf(ServerId(1));
  // A close that heals is no death.
  event.kind = PeerEvent::Kind::kDisconnected;
  van->RaisePeerEvent(event);
  event.kind = PeerEvent::Kind::kConnected;
  van->RaisePeerEvent(event);
  cluster_->clock()->Advance(Options().disconnect_grace_ms + 1);
  cluster_->scheduler()->node()->CheckLiveness();
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->epoch(), 1u);
  // Server 1 dies: its connections close and refuse.
  servers_[1]->Silence();
  std::vector<float> ones(keys.size(), 1.0f);
  std::vector<int> in_flight;
  for (auto& w : workers_) in_flight.push_back(w->Push(keys, ones));
  cluster_->network()->Sever(event.address);
  LogCapture log;
  event.kind = PeerEvent::Kind::kDisconnected;
  van->RaisePeerEvent(event);
  event.kind = PeerEvent::Kind::kReconnectFailed;
  van->RaisePeerEvent(event);
  cluster_->clock()->Advance(Options().disconnect_grace_ms);
  ASSERT_LT(Options().disconnect_grace_ms + 1 + Options().disconnect_grace_ms,
            InProcCluster::kTimeoutMs);
  cluster_->scheduler()->node()->CheckLiveness();
  EXPECT_FALSE(log.Find("reconnecting was refused").empty());
  for (size_t w = 0; w < workers_.size(); ++w) {
    Status s = workers_[w]->WaitBounded(in_flight[w]);
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->epoch(), 2u);
  PushOnes(keys, 1);
  ExpectAll(keys, 2 * 4);
}

// Two servers holding the same data killed at once, found by their closed
// connections: the first is not handed to the second (dying too), and the
// run ends naming the loss.
TEST_F(ReplicationTest, TwoClosedConnectionsWithTheSameDataEndTheRun) {
  Form(3, 1, 1);
  std::vector<Key> keys = SpreadKeys(300);
  PushOnes(keys, 1);
  LogCapture log;
  Van* van = cluster_->scheduler()->node()->van();
  // Server r's copy is on r + 1. The scheduler looks at the one of lower
  // address first: a pair (r, r + 1) in which r's sorts first, so that it
  // must see r + 1 dying too (of the three pairs, one is such).
  int first = 0;
  while (cluster_->AddressOf(ServerId(first)) >
         cluster_->AddressOf(ServerId((first + 1) % 3))) {
    ++first;
  }
  for (int rank : {first, (first + 1) % 3}) {
    PeerEvent event;
    event.ids = {ServerId(rank)};
    event.address = cluster_->AddressOf(ServerId(rank));
    cluster_->network()->Sever(event.address);
    event.kind = PeerEvent::Kind::kDisconnected;
    van->RaisePeerEvent(event);
    event.kind = PeerEvent::Kind::kReconnectFailed;
    van->RaisePeerEvent(event);
  }
  cluster_->clock()->Advance(Options().disconnect_grace_ms);
  cluster_->scheduler()->node()->CheckLiveness();
  std::vector<float> out;
  Status s = workers_[0]->WaitBounded(workers_[0]->Pull(keys, &out));
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_FALSE(log.Find("that data is lost").empty());
  EXPECT_FALSE(log.Find("its connection closed too").empty());
}

// Request timestamps are 64-bit and never wrap (ps/internal/timestamp.h);
// ps-lite's API sees their low 31 bits. A worker whose requests cross
// 2^31, with some in flight across it, gets every answer, and the servers'
// dedup tables keep only what may still be resent.
TEST_F(ReplicationTest, RequestsCrossTheWrapOfTheApiTimestamp) {
  TestWorker* w = FormFrom(kWrap - 8);
  std::vector<Key> keys = SpreadKeys(999);
  std::vector<float> ones(keys.size(), 1.0f);
  // One at a time up to the boundary: 2^31 - 8 .. 2^31 - 5.
  for (int i = 0; i < 2; ++i) {
    const int push = w->Push(keys, ones);
    EXPECT_EQ(push, kWrap - 8 + 2 * i);
    ASSERT_TRUE(w->WaitBounded(push).ok());
    ExpectAll(keys, static_cast<float>(i + 1));
  }
  // Eight in flight across it (2^31 - 4 .. 2^31 + 3: the API's ints are
  // 2^31 - 4 .. 2^31 - 1, then 0 .. 3), waited for newest first.
  std::vector<int> in_flight;
  for (int i = 0; i < 8; ++i) in_flight.push_back(w->Push(keys, ones));
  EXPECT_EQ(in_flight.front(), std::numeric_limits<int>::max() - 3);
  EXPECT_EQ(in_flight[3], std::numeric_limits<int>::max());
  EXPECT_EQ(in_flight[4], 0);
  EXPECT_EQ(in_flight.back(), 3);
  for (auto it = in_flight.rbegin(); it != in_flight.rend(); ++it) {
    Status s = w->WaitBounded(*it);
    EXPECT_TRUE(s.ok()) << *it << ": " << s;
  }
  ExpectAll(keys, 10);  // The pull is 2^31 + 4.
  // Past it, one at a time: each push's done_below (its own timestamp, the
  // oldest open) trims the tables to that push alone, on every server its
  // own part and the copy of its predecessor's.
  PushOnes(keys, 3);
  ExpectAll(keys, 13);
  for (Postoffice* po : server_po_) {
    EXPECT_EQ(Metric(po, "ember_dedup_entries"), 2);
    EXPECT_EQ(Metric(po, "ember_duplicate_pushes_total"), 0);
  }
  // A SimpleApp's requests and answers cross it too.
  std::vector<std::unique_ptr<SimpleApp>> apps;
  for (Postoffice* po : server_po_) {
    apps.push_back(std::make_unique<SimpleApp>(1, 0, po));
    apps.back()->set_request_handle(
        [](const SimpleData& req, SimpleApp* a) { a->Response(req); });
  }
  class TestApp : public SimpleApp {
   public:
    using SimpleApp::SimpleApp;
    bool StartAt(int64_t next) {
      return impl_->customer()->tracker()->StartAt(next);
    }
  };
  TestApp app(1, 0, cluster_->worker(0));
  ASSERT_TRUE(app.StartAt(kWrap - 1));
  std::vector<int> answered;
  std::mutex mu;
  app.set_response_handle([&](const SimpleData& res, SimpleApp*) {
    std::lock_guard<std::mutex> lock(mu);
    answered.push_back(res.timestamp);
  });
  const int a = app.Request(7, "x", kServerGroup);
  const int b = app.Request(7, "y", kServerGroup);
  EXPECT_EQ(a, std::numeric_limits<int>::max());
  EXPECT_EQ(b, 0);
  EXPECT_TRUE(app.WaitStatus(b, 30000).ok());
  EXPECT_TRUE(app.WaitStatus(a, 30000).ok());
  std::lock_guard<std::mutex> lock(mu);
  std::sort(answered.begin(), answered.end());
  EXPECT_EQ(answered, std::vector<int>({0, 0, 0, a, a, a}));
}

// A push in flight across the wrap to a server that dies is resent to the
// heir, which had it as a copy and applies it once; its answer finds the
// request by the 64-bit timestamp.
TEST_F(ReplicationTest, AResendAcrossTheWrapIsAppliedOnce) {
  TestWorker* w = FormFrom(kWrap - 2);
  std::vector<Key> keys = SpreadKeys(999);
  std::vector<float> ones(keys.size(), 1.0f);
  PushOnes(keys, 2);  // 2^31 - 2, 2^31 - 1.
  // Server 2 has applied its own part of both and server 1's copies.
  ASSERT_TRUE(WaitUntil([&] { return servers_[2]->applied() == 4; }));
  servers_[1]->Silence();
  std::vector<int> in_flight = {w->Push(keys, ones), w->Push(keys, ones)};
  EXPECT_EQ(in_flight, std::vector<int>({0, 1}));
  ASSERT_TRUE(WaitUntil([&] { return servers_[2]->applied() == 8; }));
  Kill(1);
  for (int ts : in_flight) {
    Status s = w->WaitBounded(ts);
    EXPECT_TRUE(s.ok()) << ts << ": " << s;
  }
  EXPECT_EQ(Metric(cluster_->worker(0), "ember_resent_requests_total"), 2);
  EXPECT_EQ(Metric(server_po_[2], "ember_duplicate_pushes_total"), 2);
  ExpectAll(keys, 4);
  PushOnes(keys, 1);
  ExpectAll(keys, 5);
}

}  // namespace
}  // namespace ps
