// Servers joining a running cluster over the in-process transport
// (docs/replication.md, "Joining"): the scheduler admits the newcomer and
// gives it a share of the key ranges under the next ring epoch; the former
// owners hand the state of those keys over to it while workers push; no
// push is lost or applied twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "message/message.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/kv_test_servers.h"
#include "testutil/log_capture.h"
#include "transport/fault_van.h"

namespace ps {
namespace {

class JoinTest : public MembershipTest {
 protected:
  // The most loaded server's share of the key space over the mean.
  static double Balance(const KeyRing& ring) {
    double most = 0;
    for (int s = 0; s < ring.num_servers(); ++s) {
      most = std::max(most, static_cast<double>(ring.Share(s)));
    }
    const double mean = 18446744073709551616.0 / ring.num_servers();
    return most / mean;
  }
};

// A third server joins 2 while 2 workers push 1 to keys spread over the
// key space: it takes a third of the key space, the state of its keys
// comes with them, and every key ends at exactly workers x pushes.
TEST_P(JoinTest, AServerJoinsWhileWorkersPushAndTakesItsShare) {
  Form(2, 2, GetParam());
  const std::vector<Key> keys = SpreadKeys(4096);
  LogCapture log;
  Postoffice* newcomer = nullptr;
  PushOnes(keys, 30, 10, [&] { newcomer = Join(/*join=*/true); });
  ASSERT_NE(newcomer, nullptr);
  ExpectAll(keys, 2 * 30);
  const int id = newcomer->node()->my_id();
  auto ring = cluster_->worker(1)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 2u);
  ASSERT_EQ(ring->num_servers(), 3);
  EXPECT_GE(ring->IndexOf(id), 0);
  EXPECT_LE(Balance(*ring), 1.10);
  // Every node has the ring (the scheduler's too).
  for (Postoffice* po : cluster_->all()) {
    EXPECT_EQ(po->node()->key_ring()->epoch(), 2u);
  }
  // The newcomer serves its keys: pushes after the join reach it as owner.
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("has joined: it holds the state of its ranges").empty();
  }));
  const int before = servers_.back()->own();
  PushOnes(keys, 1, 0, nullptr);
  EXPECT_EQ(servers_.back()->own(), before + 2);
  ExpectAll(keys, 2 * 31);
  EXPECT_EQ(cluster_->worker(0)->node()->server_ids().size(), 3u);
}

// Under spread placement (a key's ring position is Fmix64(key)) the moved
// keys are scattered over the key values: small integer keys end exact too.
TEST_P(JoinTest, AServerJoinsUnderSpreadPlacement) {
  const int replicas = GetParam();
  cluster_ = std::make_unique<InProcCluster>(2, 2, [replicas](Options* o) {
    o->replicas = replicas;
    o->placement = Placement::kSpread;
  });
  cluster_->Start();
  for (int i = 0; i < 2; ++i) {
    servers_.push_back(std::make_unique<CountingServer>(cluster_->server(i)));
    workers_.push_back(std::make_unique<TestWorker>(0, 0, cluster_->worker(i)));
  }
  std::vector<Key> keys(3000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  LogCapture log;
  Postoffice* newcomer = nullptr;
  PushOnes(keys, 20, 5, [&] { newcomer = Join(/*join=*/true); });
  ASSERT_NE(newcomer, nullptr);
  ExpectAll(keys, 2 * 20);
  auto ring = newcomer->node()->key_ring();
  EXPECT_EQ(ring->placement(), Placement::kSpread);
  // About a third of the keys are the newcomer's, and it serves them.
  size_t mine = 0;
  for (Key k : keys) mine += ring->Owner(k) == newcomer->node()->my_id();
  EXPECT_GT(mine, keys.size() / 4);
  EXPECT_LT(mine, keys.size() / 2);
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  const int before = servers_.back()->own();
  PushOnes(keys, 1, 0, nullptr);
  EXPECT_EQ(servers_.back()->own(), before + 2);
}

// The joins that follow a failover, which needs copies: with the replica
// count each test names (JoinTest's parameter is not used).
class JoinAfterFailoverTest : public JoinTest {
 protected:
  // Starts a replacement (EMBER_JOIN=replace) on `*start`, which stores
  // its Start's status in `*started`; returns it once the scheduler holds
  // its join (`log` has seen it).
  Postoffice* StartHeldReplacement(const LogCapture& log, std::thread* start,
                                   Status* started) {
    Postoffice* newcomer = cluster_->AddServer(
        /*join=*/false, [](Options* o) { o->join_replace = true; });
    *start = std::thread(
        [newcomer, started] { *started = newcomer->StartStatus(0, true); });
    EXPECT_TRUE(WaitUntil([&] {
      return !log.Find("(EMBER_JOIN=replace) until a server slot is vacant")
                  .empty();
    }));
    return newcomer;
  }
};

// After a failover leaves a server slot vacant, a server started later with
// the usual settings (no EMBER_JOIN) takes it: the cluster runs on 2
// servers again, with copies, and no push is lost.
TEST_F(JoinAfterFailoverTest, AReplacementTakesAVacantSlotAfterAFailover) {
  Form(2, 2, /*replicas=*/1);
  const std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 5, 0, nullptr);
  cluster_->KillByHeartbeat(cluster_->server(1));
  finalize_ = false;  // A member died: no final barrier.
  for (int w = 0; w < 2; ++w) {
    Node* node = cluster_->worker(w)->node();
    ASSERT_TRUE(
        WaitUntil([node] { return node->key_ring()->num_servers() == 1; }));
  }
  LogCapture log;
  Postoffice* newcomer = nullptr;
  PushOnes(keys, 20, 5, [&] { newcomer = Join(/*join=*/false); });
  ASSERT_NE(newcomer, nullptr);
  ExpectAll(keys, 2 * 25);
  auto ring = cluster_->worker(0)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 3u);
  ASSERT_EQ(ring->num_servers(), 2);
  EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
  EXPECT_LE(Balance(*ring), 1.10);
  EXPECT_EQ(ring->replicas(), 1);
  // Each server's data is whole on the other again.
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("copies restored").size() >= 2;
  })) << "copies not restored";
}

// A replacement started as soon as its server died (EMBER_JOIN=replace, as
// ember-launch --replace-servers starts it) may ask to join before the
// scheduler has declared the death: its join is held, not refused as one
// too many, and it takes the slot once the death is declared.
TEST_F(JoinAfterFailoverTest, AReplacementAskingBeforeTheDeathIsDeclaredWaits) {
  Form(2, 2, /*replicas=*/1);
  finalize_ = false;  // A member dies: no final barrier.
  const std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 5, 0, nullptr);
  LogCapture log;
  Status started = Status::Internal("not started");
  std::thread start;
  Postoffice* newcomer = StartHeldReplacement(log, &start, &started);
  // Held while both servers live: nothing changed.
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->epoch(), 1u);
  cluster_->KillByHeartbeat(cluster_->server(1));
  start.join();
  ASSERT_TRUE(started.ok()) << started;
  servers_.push_back(std::make_unique<CountingServer>(newcomer));
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("has joined: it holds the state of its ranges").empty();
  }));
  PushOnes(keys, 20, 0, nullptr);
  ExpectAll(keys, 2 * 25);
  auto ring = cluster_->worker(0)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 3u);  // The failover, then the replacement.
  ASSERT_EQ(ring->num_servers(), 2);
  EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
  EXPECT_TRUE(log.Find("refusing").empty());
}

// A job grown beyond DMLC_NUM_SERVER (EMBER_JOIN=1) has as many live
// servers as it was started with after a death, yet the dead server's slot
// is vacant: a held replacement takes it, and the job keeps its size.
TEST_F(JoinAfterFailoverTest, AReplacementTakesTheSlotOfADeathInAGrownJob) {
  Form(2, 2, /*replicas=*/1);
  finalize_ = false;  // A member dies: no final barrier.
  const std::vector<Key> keys = SpreadKeys(4096);
  LogCapture log;
  ASSERT_NE(Join(/*join=*/true), nullptr);  // 3 servers of DMLC_NUM_SERVER 2.
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("has joined: it holds the state of its ranges").empty();
  }));
  PushOnes(keys, 5, 0, nullptr);
  Status started = Status::Internal("not started");
  std::thread start;
  Postoffice* newcomer = StartHeldReplacement(log, &start, &started);
  cluster_->KillByHeartbeat(cluster_->server(1));
  start.join();
  ASSERT_TRUE(started.ok()) << started;
  servers_.push_back(std::make_unique<CountingServer>(newcomer));
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("has joined: it holds the state of its ranges").size() == 2;
  }));
  PushOnes(keys, 20, 0, nullptr);
  ExpectAll(keys, 2 * 25);
  auto ring = cluster_->worker(0)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 4u);  // Growth, failover, replacement.
  ASSERT_EQ(ring->num_servers(), 3);
  EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
  EXPECT_TRUE(log.Find("refusing").empty());
}

// Under bsp (k=1), server 1 of 2 dies in a half-pushed round (worker 0
// has pushed for it, worker 1 not yet), the survivor takes its data, and a
// replacement (no EMBER_JOIN) takes the vacant slot and its share of the
// ranges, with the round in progress: the heir hands the round's deferred
// parts over with the keys, the data of the dead server included, and the
// values are bitwise those of the run in which nothing happened. (Before,
// the heir kept the dead server's parts, and the replacement answered the
// round's pull without them whenever the heir's copy came late.)
TEST_F(JoinAfterFailoverTest, UnderBspAReplacementInAHalfPushedRound) {
  const std::vector<Key> keys = SpreadKeys(256);
  const auto want = UndisturbedBspRounds(2, 1, keys, 6, 3);
  Form(2, 2, /*replicas=*/1, nullptr, /*bsp=*/true);
  finalize_ = false;  // A member died: no final barrier.
  LogCapture log;
  Postoffice* newcomer = nullptr;
  const auto got = PushBspRounds(workers_, keys, 6, 3, [&] {
    cluster_->KillByHeartbeat(cluster_->server(1));
    for (int w = 0; w < 2; ++w) {
      Node* node = cluster_->worker(w)->node();
      ASSERT_TRUE(
          WaitUntil([node] { return node->key_ring()->num_servers() == 1; }));
    }
    newcomer = Join(/*join=*/false);
    ASSERT_NE(newcomer, nullptr);
    ASSERT_TRUE(WaitUntil([&] {
      return !log.Find("has joined: it holds the state of its ranges").empty();
    }));
  });
  // The heir handed over worker 0's deferred part of the round for the
  // keys it had taken from the dead server (its data now).
  ExpectBspRunAsUndisturbed(log, got, want, "failover");
  ASSERT_NE(newcomer, nullptr);
  auto ring = cluster_->worker(0)->node()->key_ring();
  EXPECT_EQ(ring->num_servers(), 2);
  EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
}

// A former owner dies before handing its keys over (it never heard of the
// join): with two copies its heir still holds those keys as they were, and
// hands them over in its place; the newcomer's wait ends and no push is lost.
TEST_F(JoinAfterFailoverTest, AnHeirHandsOverForAFormerOwnerThatDied) {
  Form(3, 2, /*replicas=*/2);
  finalize_ = false;  // A member dies: no final barrier.
  const std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 5, 0, nullptr);
  Postoffice* victim = cluster_->server(1);
  const int dead = victim->node()->my_id();
  cluster_->network()->Sever(cluster_->AddressOf(dead));
  LogCapture log;
  Postoffice* newcomer = Join(/*join=*/true);
  ASSERT_NE(newcomer, nullptr);
  const int id = newcomer->node()->my_id();
  // The victim never hands over; the others do.
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("handing the keys that moved to node " + std::to_string(id))
               .size() == 2;
  }));
  EXPECT_TRUE(log.Find("has joined").empty());
  cluster_->KillByHeartbeat(victim);
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  // (The heir logs once it has sent.)
  EXPECT_TRUE(WaitUntil([&] {
    return !log.Find("for dead node " + std::to_string(dead) +
                     ", from its copy")
                .empty();
  }));
  for (int w = 0; w < 2; ++w) {
    Node* node = cluster_->worker(w)->node();
    ASSERT_TRUE(WaitUntil([node] { return node->ring_epoch() == 3; }));
  }
  PushOnes(keys, 5, 0, nullptr);
  ExpectAll(keys, 2 * 10);
  EXPECT_GE(cluster_->worker(0)->node()->key_ring()->IndexOf(id), 0);
}

// A chunk of a hand-over that the network delivers again after the
// hand-over's end (here: the former owner's stale values of the moved keys,
// sent anew) is ignored, not loaded over what later pushes made of them.
TEST_P(JoinTest, AHandOverChunkDeliveredAfterItsEndIsIgnored) {
  Form(2, 2, GetParam());
  const std::vector<Key> keys = SpreadKeys(4096);
  PushOnes(keys, 5, 0, nullptr);
  auto before = cluster_->worker(0)->node()->key_ring();
  LogCapture log;
  Postoffice* newcomer = Join(/*join=*/true);
  ASSERT_NE(newcomer, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  for (int w = 0; w < 2; ++w) {
    Node* node = cluster_->worker(w)->node();
    ASSERT_TRUE(WaitUntil([node] { return node->ring_epoch() == 2; }));
  }
  PushOnes(keys, 5, 0, nullptr);
  // Server 0 still holds the moved keys as they were at the switch (5 + 5).
  const int from = cluster_->server(0)->node()->my_id();
  const int to = newcomer->node()->my_id();
  auto after = newcomer->node()->key_ring();
  std::vector<std::string> stale = servers_[0]->Dump(
      [&](Key k) { return before->Owner(k) == from && after->Owner(k) == to; });
  ASSERT_EQ(stale.size(), 1u);
  ASSERT_TRUE(cluster_->server(0)
                  ->node()
                  ->Send(RawStateCopy(-77, to, 5, stale[0], from))
                  .ok());
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("ignoring a hand-over message from node " +
                     std::to_string(from))
                .empty();
  }));
  ExpectAll(keys, 2 * 10);
}

// Under bsp, a third server joins 2 while a round is half pushed: worker 0
// has pushed for it (its push waits at the keys' owners for the round, and
// its pull of the round waits for that), worker 1 not yet. The former
// owners hand the pending parts of the moved keys over with their state, and
// refuse the held pull (re-routed); the round completes on the newcomer, in
// rank order. That pull and every value at the end are bitwise those of the
// run without the join.
TEST_P(JoinTest, UnderBspAJoinInAHalfPushedRoundLosesAndDoublesNothing) {
  const std::vector<Key> keys = SpreadKeys(512);
  const auto want = UndisturbedBspRounds(2, GetParam(), keys, 6, 3);
  Form(2, 2, GetParam(), nullptr, /*bsp=*/true);
  LogCapture log;
  const auto got = PushBspRounds(workers_, keys, 6, 3, [&] {
    ASSERT_NE(Join(/*join=*/true), nullptr);
    // Both former owners have handed over before worker 1 pushes.
    ASSERT_TRUE(WaitUntil([&] {
      return log.Find("handing the keys that moved to node").size() == 2;
    }));
  });
  ExpectBspRunAsUndisturbed(log, got, want, "join");
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->num_servers(), 3);
  EXPECT_TRUE(log.Find("pending pushes do not move").empty());
}

INSTANTIATE_TEST_SUITE_P(Replicas, JoinTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "k" + std::to_string(info.param);
                         });

// While a server is receiving its ranges, another join is refused with a
// clear reason, and the cluster is untouched.
// A third server joins 2 (k=1) while 2 workers push 20 times, for seeds
// 1..8, with every message of the cluster (pushes, copies, the hand-over's
// chunks and end, ring changes, acknowledgements) delayed and duplicated on
// links that keep their order, as TCP's do (FaultPlan::fifo): every key
// ends exact and the newcomer serves its share.
TEST(JoinFaults, DelayedAndDuplicatedMessagesInLinkOrderDuringAJoin) {
  ForEachSeed(8, [&](uint64_t seed) {
    FaultCluster faulty(seed, 2, 2);
    InProcCluster& cluster = faulty.cluster();
    auto& servers = faulty.servers();
    auto& workers = faulty.workers();
    faulty.Inject(FaultCluster::FifoPlan());
    LogCapture log;
    const std::vector<Key> keys = SpreadKeys(1024);
    PushOnesWhile(workers, keys, 20, 5, [&] {
      Postoffice* po = cluster.AddServer(true);
      Status s = po->StartStatus(0, true);
      ASSERT_TRUE(s.ok()) << s;
      servers.push_back(std::make_unique<CountingServer>(po));
      ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
    });
    const FaultCounters c = faulty.Settle();
    EXPECT_GT(c.delayed, 0u);
    EXPECT_GT(c.duplicated, 0u);
    ExpectAllKeys(workers[0].get(), keys, 2 * 20);
    // The newcomer owns part of the keys and applied pushes to them.
    EXPECT_GT(servers.back()->own(), 0);
    faulty.Finish();
  });
}

// Under bsp (k=1), a third server joins 2 in a half-pushed round (as
// JoinTest.UnderBspAJoinInAHalfPushedRound...) for seeds 1..6, with every
// message of the cluster delayed and duplicated on links that keep their
// order (FaultPlan::fifo): the values are bitwise the undisturbed run's.
TEST(JoinFaults, UnderBspDelayedAndDuplicatedMessagesInLinkOrder) {
  const std::vector<Key> keys = SpreadKeys(256);
  const auto want = UndisturbedBspRounds(2, 1, keys, 6, 3);
  ForEachSeed(6, [&](uint64_t seed) {
    FaultCluster faulty(seed, 2, 2, /*bsp=*/true);
    InProcCluster& cluster = faulty.cluster();
    auto& servers = faulty.servers();
    faulty.Inject(FaultCluster::FifoPlan());
    LogCapture log;
    const auto got = PushBspRounds(faulty.workers(), keys, 6, 3, [&] {
      Postoffice* po = cluster.AddServer(true);
      Status s = po->StartStatus(0, true);
      ASSERT_TRUE(s.ok()) << s;
      servers.push_back(std::make_unique<CountingServer>(po));
      ASSERT_TRUE(WaitUntil([&] {
        return log.Find("handing the keys that moved to node").size() == 2;
      }));
    });
    EXPECT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
    const FaultCounters c = faulty.Settle();
    EXPECT_GT(c.delayed, 0u);
    EXPECT_GT(c.duplicated, 0u);
    ExpectBspRunAsUndisturbed(log, got, want, "join");
    faulty.Finish();
  });
}

TEST(JoinRefusal, AJoinDuringAnotherIsRefused) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  std::vector<std::unique_ptr<KVServer<float>>> apps;
  for (int i = 0; i < 2; ++i) {
    apps.push_back(std::make_unique<KVServer<float>>(0, cluster.server(i)));
    apps.back()->set_request_handle(KVServerDefaultHandle<float>());
  }
  // The first newcomer creates no app: its hand-over never ends.
  Postoffice* first = cluster.AddServer(true);
  ASSERT_TRUE(first->StartStatus(0, true).ok());
  LogCapture log;
  Postoffice* second = cluster.AddServer(true);
  Status s = second->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("a membership change is under way"),
            std::string::npos)
      << s;
  // The first join's ring stands.
  Node* worker = cluster.worker(0)->node();
  EXPECT_TRUE(WaitUntil([worker] { return worker->ring_epoch() == 2; }));
  EXPECT_EQ(worker->key_ring()->num_servers(), 3);
  apps.clear();
}

// A late server without EMBER_JOIN when no slot is vacant is refused, and
// so is a join with a wrong cluster token: a join needs the same proofs as
// at formation.
TEST(JoinRefusal, LateServersWithoutTheRightToJoinAreRefused) {
  InProcCluster cluster(2, 1, [](Options* o) { o->cluster_token = "secret"; });
  cluster.Start();
  Postoffice* extra = cluster.AddServer(false);
  Status s = extra->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("one too many"), std::string::npos) << s;
  Postoffice* forged = cluster.AddServer(
      true, [](Options* o) { o->cluster_token = "not the secret"; });
  s = forged->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("cluster token"), std::string::npos) << s;
  EXPECT_EQ(cluster.worker(0)->node()->key_ring()->num_servers(), 2);
  EXPECT_EQ(cluster.worker(0)->node()->key_ring()->epoch(), 1u);
}

// A held replacement (EMBER_JOIN=replace) whose slot never becomes vacant
// is refused once it has waited EMBER_START_TIMEOUT, saying why, and the
// job is untouched; one held when the job finishes is refused then.
TEST(JoinRefusal, AHeldReplacementIsRefusedWhenNoSlotBecomesVacant) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  auto replacement = [&cluster] {
    return cluster.AddServer(false, [](Options* o) { o->join_replace = true; });
  };
  LogCapture log;
  Postoffice* late = replacement();
  Status s = Status::Internal("not started");
  std::thread start([&] { s = late->StartStatus(0, true); });
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("holding the join").empty(); }));
  // The members beat as time passes (the fake clock), so none is declared
  // dead; the hold ends after the scheduler's start timeout (under 60 s
  // here).
  const std::vector<Postoffice*> members = {
      cluster.server(0), cluster.server(1), cluster.worker(0)};
  for (int elapsed = 0; elapsed <= 60000; elapsed += 900) {
    cluster.clock()->Advance(900);
    for (Postoffice* p : members) cluster.Beat(p);
    cluster.scheduler()->node()->CheckLiveness();
  }
  start.join();
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("no server slot became vacant within"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("2 live servers of 2"), std::string::npos) << s;
  Node* worker = cluster.worker(0)->node();
  EXPECT_EQ(worker->key_ring()->epoch(), 1u);
  EXPECT_EQ(worker->key_ring()->num_servers(), 2);

  // Held when the job finishes (the scheduler's final barrier).
  Postoffice* second = replacement();
  std::thread start2([&] { s = second->StartStatus(0, true); });
  ASSERT_TRUE(
      WaitUntil([&] { return log.Find("holding the join").size() == 2; }));
  std::vector<std::thread> finals;
  std::vector<Status> done(4);
  const std::vector<Postoffice*> nodes = {cluster.scheduler(),
                                          cluster.server(0), cluster.server(1),
                                          cluster.worker(0)};
  for (size_t i = 0; i < nodes.size(); ++i) {
    finals.emplace_back(
        [&, i] { done[i] = nodes[i]->FinalizeStatus(0, true); });
  }
  for (auto& t : finals) t.join();
  start2.join();
  for (const Status& d : done) EXPECT_TRUE(d.ok()) << d;
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("the job finished before a server slot became "
                             "vacant"),
            std::string::npos)
      << s;
}

// A server that joins the running job with other settings than the running
// servers' (consistency, EMBER_REPLICAS) or the scheduler's
// (DMLC_NUM_SERVER, DMLC_NUM_WORKER) is refused, saying which, and the job
// is untouched; one with the same settings joins.
TEST(JoinRefusal, AServerWithOtherSettingsIsRefused) {
  InProcCluster cluster(2, 1, [](Options* o) {
    o->replicas = 1;
    o->consistency = *ConsistencyConfig::Parse("bsp");
  });
  cluster.Start();
  const struct {
    std::function<void(Options*)> tweak;
    std::string says;
  } cases[] = {
      {[](Options* o) { o->consistency = ConsistencyConfig(); },
       "this server's consistency asp (EMBER_CONSISTENCY, EMBER_STALENESS) "
       "is not the running servers' (bsp)"},
      {[](Options* o) { o->consistency = *ConsistencyConfig::Parse("ssp:2"); },
       "consistency ssp:2"},
      {[](Options* o) { o->replicas = 0; },
       "this server's EMBER_REPLICAS=0 is not the running servers' (1)"},
      {[](Options* o) { o->num_workers = 3; },
       "this server's DMLC_NUM_SERVER=2 and DMLC_NUM_WORKER=3 are not the "
       "job's (2 and 1)"},
      {[](Options* o) { o->num_servers = 3; },
       "DMLC_NUM_SERVER=3 and DMLC_NUM_WORKER=1 are not the job's"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    LogCapture log;
    Postoffice* po = cluster.AddServer(true, c.tweak);
    Status s = po->StartStatus(0, true);
    EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
    EXPECT_FALSE(log.Find("refusing the join of").empty());
    EXPECT_FALSE(log.Find("the job goes on unchanged").empty());
    Node* worker = cluster.worker(0)->node();
    EXPECT_EQ(worker->key_ring()->epoch(), 1u);
    EXPECT_EQ(worker->key_ring()->num_servers(), 2);
  }
  // The same settings: admitted.
  Postoffice* same = cluster.AddServer(true);
  ASSERT_TRUE(same->StartStatus(0, true).ok());
  Node* worker = cluster.worker(0)->node();
  EXPECT_TRUE(WaitUntil([worker] { return worker->ring_epoch() == 2; }));
  EXPECT_EQ(worker->key_ring()->num_servers(), 3);
}

// A later node table must carry the run's key, as the first one: one sent
// with the scheduler's proof of origin but another run's key is dropped,
// counted and logged, and the member's table and ring stand.
TEST(JoinRefusal, ALaterNodeTableWithoutTheRunKeyIsDropped) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  Node* worker = cluster.worker(0)->node();
  auto ring = KeyRing::EvenSplit({8, 10, 12}, 2);
  ASSERT_TRUE(ring.ok());
  Message table;
  table.meta.control = Control::kNodeTable;
  table.meta.recipient = worker->my_id();
  NodeInfo extra;
  extra.id = 12;
  extra.role = Role::kServer;
  extra.host = "elsewhere";
  extra.port = 7;
  extra.rank = 2;
  table.meta.nodes = {extra};
  table.meta.ring = ring->ToInfo();
  table.meta.run_key = std::string(16, 'x');
  const uint64_t before = worker->counters().dropped_bad_control;
  LogCapture log;
  // From the scheduler's node: the worker's process key proves its origin.
  ASSERT_TRUE(cluster.scheduler()->node()->Send(std::move(table)).ok());
  ASSERT_TRUE(WaitUntil(
      [&] { return !log.Find("its run key is not this run's").empty(); }));
  EXPECT_EQ(worker->counters().dropped_bad_control, before + 1);
  EXPECT_EQ(worker->key_ring()->epoch(), 1u);
  EXPECT_EQ(worker->server_ids().size(), 2u);
  cluster.Finalize();
}

}  // namespace
}  // namespace ps
