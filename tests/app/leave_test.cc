// Servers leaving a running cluster on request over the in-process
// transport (docs/replication.md, "Leaving"): the scheduler gives the
// leaver's ranges to the others (KeyRing::RemoveServer) under the next ring
// epoch, the leaver hands their state over while workers push, waits until
// every new owner has acknowledged it, and then has left: no push is lost
// or applied twice, its Finalize ends at once, and the others finish
// without it. Refusals leave the job untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
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

class LeaveTest : public MembershipTest {
 protected:
  // Asks server `po` to leave and waits until the scheduler says it has.
  void Leave(Postoffice* po, LogCapture* log) {
    const std::string who =
        cluster_->scheduler()->node()->Describe(po->node()->my_id());
    ASSERT_TRUE(po->node()->RequestLeave("test"));
    ASSERT_TRUE(WaitUntil([&] {
      return !log->Find(who + " has left: its ranges are handed over").empty();
    }));
    EXPECT_TRUE(po->node()->has_left());
  }
};

// Server 1 of 3 leaves while 2 workers push 1 to keys spread over the key
// space: its ranges go to the other two with their state, every key ends
// at exactly workers x pushes, and the leaver serves nothing afterwards.
TEST_P(LeaveTest, AServerLeavesWhileWorkersPush) {
  Form(3, 2, GetParam());
  const std::vector<Key> keys = SpreadKeys(4096);
  Postoffice* leaver = cluster_->server(1);
  const int id = leaver->node()->my_id();
  LogCapture log;
  PushOnes(keys, 30, 10, [&] { Leave(leaver, &log); });
  ExpectAll(keys, 2 * 30);
  for (Postoffice* po : cluster_->all()) {
    auto ring = po->node()->key_ring();
    EXPECT_EQ(ring->epoch(), 2u);
    EXPECT_EQ(ring->num_servers(), 2);
    EXPECT_LT(ring->IndexOf(id), 0);
  }
  // NumServers() follows the membership; the others' server group is
  // the two that stay.
  EXPECT_EQ(cluster_->worker(0)->num_servers(), 2);
  EXPECT_EQ(cluster_->worker(0)->node()->server_ids().size(), 2u);
  EXPECT_EQ(cluster_->worker(0)->GetServerKeyRanges().size(), 2u);
  // The leaver handed the keys over to both (RemoveServer fills the two
  // others up to one level).
  EXPECT_EQ(log.Find("handing the keys that moved to node").size(), 2u);
  const int before = servers_[1]->own();
  PushOnes(keys, 2, 0, nullptr);
  EXPECT_EQ(servers_[1]->own(), before);
  ExpectAll(keys, 2 * 32);
  if (GetParam() > 0) {
    // Both servers' data is whole on the other again.
    EXPECT_TRUE(WaitUntil([&] {
      return log.Find("copies restored").size() >= 2;
    })) << "copies not restored";
  }
  // The leaver's Finalize ends at once; the others finalize without it.
  EXPECT_TRUE(leaver->node()->Barrier(0, kServerGroup).ok());
}

// The target in one process: 2 servers, a third joins, then one of
// the first two leaves, all while 2 workers push: exact sums at the end,
// and the cluster runs on the 2 servers that stay.
TEST_P(LeaveTest, TwoServersThenThreeThenTwo) {
  Form(2, 2, GetParam());
  const std::vector<Key> keys = SpreadKeys(4096);
  LogCapture log;
  Postoffice* newcomer = nullptr;
  PushOnes(keys, 20, 5, [&] {
    newcomer = Join();
    ASSERT_NE(newcomer, nullptr);
    ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  });
  ASSERT_NE(newcomer, nullptr);
  ExpectAll(keys, 2 * 20);
  Postoffice* leaver = cluster_->server(0);
  PushOnes(keys, 20, 5, [&] { Leave(leaver, &log); });
  ExpectAll(keys, 2 * 40);
  auto ring = cluster_->worker(1)->node()->key_ring();
  EXPECT_EQ(ring->epoch(), 3u);
  ASSERT_EQ(ring->num_servers(), 2);
  EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
  EXPECT_LT(ring->IndexOf(leaver->node()->my_id()), 0);
  EXPECT_EQ(cluster_->worker(1)->num_servers(), 2);
}

// A server that joined can leave again (its ranges go back to the others).
TEST_P(LeaveTest, AServerThatJoinedLeavesAgain) {
  Form(2, 2, GetParam());
  const std::vector<Key> keys = SpreadKeys(4096);
  LogCapture log;
  Postoffice* newcomer = Join();
  ASSERT_NE(newcomer, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  PushOnes(keys, 20, 5, [&] { Leave(newcomer, &log); });
  ExpectAll(keys, 2 * 20);
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->num_servers(), 2);
}

// ps::SetMembershipCallback's server changes, as a worker's node hears of
// them: a server that dies and fails over, one that joins, and the same
// one leaving, each with the servers of the new ring.
using LeaveMembershipTest = LeaveTest;
TEST_F(LeaveMembershipTest, TheCallbackHearsOfServersFailingJoiningLeaving) {
  Form(3, 1, /*replicas=*/1);  // A failover needs copies.
  Mutex mu;
  std::vector<std::tuple<int, Node::ServerEvent, int>> heard;
  cluster_->worker(0)->node()->SetServerChangeCallback(
      [&](int id, Node::ServerEvent event, int num_servers) {
        MutexLock lock(&mu);
        heard.emplace_back(id, event, num_servers);
      });
  auto heard_count = [&] {
    MutexLock lock(&mu);
    return heard.size();
  };
  LogCapture log;
  // The failover first, while every copy is whole (copies restored after a
  // join or a leave would race the kill).
  Postoffice* victim = cluster_->server(1);
  const int victim_id = victim->node()->my_id();
  cluster_->KillByHeartbeat(victim);
  ASSERT_TRUE(WaitUntil([&] { return heard_count() >= 1; }));
  Postoffice* newcomer = Join();
  ASSERT_NE(newcomer, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return heard_count() >= 2; }));
  // A leave during the join's hand-over would be refused.
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  Leave(newcomer, &log);
  ASSERT_TRUE(WaitUntil([&] { return heard_count() >= 3; }));
  MutexLock lock(&mu);
  const int newcomer_id = newcomer->node()->my_id();
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[0],
            std::make_tuple(victim_id, Node::ServerEvent::kFailed, 2));
  EXPECT_EQ(heard[1],
            std::make_tuple(newcomer_id, Node::ServerEvent::kJoined, 3));
  EXPECT_EQ(heard[2],
            std::make_tuple(newcomer_id, Node::ServerEvent::kLeft, 2));
  EXPECT_EQ(cluster_->worker(0)->num_servers(), 2);
  finalize_ = false;  // A member died: no final barrier.
}

// Under bsp, server 1 of 3 leaves while a round is half pushed: worker 0
// has pushed for it (its push waits at the leaver for the round, and its
// pull of the round waits for that), worker 1 not yet. The leaver hands the
// pending parts of its keys over with their state, and refuses the held
// pull (re-routed); the round completes on the new owners, in rank order.
// That pull and every value at the end are bitwise those of the run in
// which nobody left.
TEST_P(LeaveTest, UnderBspALeaveInAHalfPushedRoundLosesAndDoublesNothing) {
  const std::vector<Key> keys = SpreadKeys(512);
  const auto want = UndisturbedBspRounds(3, GetParam(), keys, 6, 3);
  Form(3, 2, GetParam(), nullptr, /*bsp=*/true);
  Postoffice* leaver = cluster_->server(1);
  LogCapture log;
  const auto got = PushBspRounds(workers_, keys, 6, 3, [&] {
    ASSERT_TRUE(leaver->node()->RequestLeave("test"));
    // The leaver has handed over to both before worker 1 pushes.
    ASSERT_TRUE(WaitUntil([&] {
      return log.Find("handing the keys that moved to node").size() == 2;
    }));
  });
  EXPECT_TRUE(WaitUntil([&] { return leaver->node()->has_left(); }));
  ExpectBspRunAsUndisturbed(log, got, want, "leave");
  EXPECT_EQ(cluster_->worker(0)->node()->key_ring()->num_servers(), 2);
}

INSTANTIATE_TEST_SUITE_P(Replicas, LeaveTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "k" + std::to_string(info.param);
                         });

// Server 2 of 3 (k=1) leaves while 2 workers push 20 times, for seeds 1..8,
// under `plan` (which `make` builds for the leaver's id); held messages are
// released whenever the cluster goes quiet. Every key ends exact.
void LeaveUnderFaults(const std::function<FaultPlan(int leaver_id)>& make) {
  ForEachSeed(8, [&](uint64_t seed) {
    FaultCluster faulty(seed, 3, 2);
    auto& workers = faulty.workers();
    const std::vector<Key> keys = SpreadKeys(1024);
    std::vector<float> ones(keys.size(), 1.0f);
    Postoffice* leaver = faulty.cluster().server(2);
    const FaultPlan plan = make(leaver->node()->my_id());
    LogCapture log;
    faulty.Inject(plan);
    std::atomic<bool> asked{false};
    std::vector<std::thread> threads;
    for (auto& w : workers) {
      TestWorker* kv = w.get();
      threads.emplace_back([&, kv] {
        for (int i = 0; i < 20; ++i) {
          if (i == 5) {
            bool no = false;
            if (asked.compare_exchange_strong(no, true)) {
              EXPECT_TRUE(leaver->node()->RequestLeave("test"));
            }
          }
          Status s = kv->WaitBounded(kv->Push(keys, ones));
          ASSERT_TRUE(s.ok()) << s;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_TRUE(WaitUntil([&] { return leaver->node()->has_left(); }));
    EXPECT_TRUE(WaitUntil([&] { return !log.Find("has left").empty(); }));
    const FaultCounters c = faulty.Settle();
    EXPECT_EQ(c.duplicated > 0, plan.duplicate > 0);
    EXPECT_EQ(c.delayed > 0, plan.delay > 0);
    std::vector<float> out;
    Status s = workers[0]->WaitBounded(workers[0]->Pull(keys, &out));
    ASSERT_TRUE(s.ok()) << s;
    size_t wrong = 0;
    float first = 0;
    for (float v : out) {
      if (v != 2 * 20 && wrong++ == 0) first = v;
    }
    EXPECT_EQ(wrong, 0u) << "e.g. " << first;
    faulty.Finish();
  });
}

// The network delivers messages of the leaver (its hand-over's chunks and
// end, its answers, its requests to the scheduler) and messages to it (the
// acknowledgements, pushes) twice, the copy up to 8 messages late: a chunk
// or an end that comes again after the end is ignored, a repeated request
// to leave or report is dropped, duplicated pushes are deduplicated (k=1),
// and every key ends exact.
TEST(LeaveFaults, DuplicatedMessagesDuringALeave) {
  LeaveUnderFaults([](int id) {
    FaultPlan plan;
    plan.duplicate = 0.3;
    plan.max_delay = 8;
    plan.target.kind = FaultTarget::Kind::kAll;
    plan.target.links = {{id, FaultTarget::kAnyNode},
                         {FaultTarget::kAnyNode, id}};
    return plan;
  });
}

// Every message of the cluster (data and control: pushes, copies, the
// hand-over, ring changes, acknowledgements) delayed and duplicated on
// links that keep their order, as TCP's do (FaultPlan::fifo).
TEST(LeaveFaults, DelayedAndDuplicatedMessagesInLinkOrderDuringALeave) {
  LeaveUnderFaults([](int) { return FaultCluster::FifoPlan(); });
}

// Under bsp (k=1), server 1 of 3 leaves in a half-pushed round: its ranges
// go half to server 0 and half to server 2, which keeps the copy of server
// 0's data. Server 2 receives, in this order: the pending pushes of server
// 0's copy, those of server 1's hand-over, the rest of server 0's copy
// (which holds, as server 0's, worker 0's part of its request that server 1
// handed to server 0), then the rest of the hand-over (another part of the
// same request, now server 2's). The two parts are known apart by whose
// data they are, not only by the former owner: server 2 applies both, and
// the values are bitwise the undisturbed run's.
TEST(LeaveFaults, UnderBspACopyOfTheOtherNewOwnersHandedPartComesFirst) {
  const std::vector<Key> keys = SpreadKeys(256);
  const auto want = UndisturbedBspRounds(3, 1, keys, 6, 3);
  FaultCluster faulty(1, 3, 2, /*bsp=*/true);
  InProcCluster& cluster = faulty.cluster();
  Postoffice* leaver = cluster.server(1);
  const int from = leaver->node()->my_id();
  const int other = cluster.server(0)->node()->my_id();
  const int to = cluster.server(2)->node()->my_id();
  LogCapture log;
  const auto got = PushBspRounds(faulty.workers(), keys, 6, 3, [&] {
    // Every message to server 2 from the two held.
    faulty.Hold(FaultCluster::HoldPlan({{from, to}, {other, to}}));
    ASSERT_TRUE(leaver->node()->RequestLeave("test"));
    ASSERT_TRUE(WaitUntil([&] {
      return log.Find("handing the keys that moved to node").size() == 2 &&
             !log.Find("copying this server's data to node " +
                       std::to_string(to) + " for ring epoch 2")
                  .empty();
    }));
    FaultInjector& net = faulty.injector();
    ASSERT_TRUE(net.StepLink(other, to));  // The copy's pending pushes.
    ASSERT_TRUE(net.StepLink(from, to));   // The hand-over's.
    size_t rest = 0;
    while (net.StepLink(other, to)) ++rest;
    EXPECT_GT(rest, 0u);
    faulty.Settle();  // The rest of the hand-over.
  });
  EXPECT_TRUE(WaitUntil([&] { return leaver->node()->has_left(); }));
  ExpectBspRunAsUndisturbed(log, got, want, "leave");
  faulty.Finish();
}

// Under bsp (k=1), server 1 of 3 leaves in a half-pushed round (as
// LeaveTest.UnderBspALeaveInAHalfPushedRound...) for seeds 1..6, with every
// message of the cluster delayed and duplicated on links that keep their
// order (FaultPlan::fifo): the values are bitwise the undisturbed run's.
TEST(LeaveFaults, UnderBspDelayedAndDuplicatedMessagesInLinkOrder) {
  const std::vector<Key> keys = SpreadKeys(256);
  const auto want = UndisturbedBspRounds(3, 1, keys, 6, 3);
  ForEachSeed(6, [&](uint64_t seed) {
    FaultCluster faulty(seed, 3, 2, /*bsp=*/true);
    faulty.Inject(FaultCluster::FifoPlan());
    Postoffice* leaver = faulty.cluster().server(1);
    LogCapture log;
    const auto got = PushBspRounds(faulty.workers(), keys, 6, 3, [&] {
      ASSERT_TRUE(leaver->node()->RequestLeave("test"));
      ASSERT_TRUE(WaitUntil([&] {
        return log.Find("handing the keys that moved to node").size() == 2;
      }));
    });
    EXPECT_TRUE(WaitUntil([&] { return leaver->node()->has_left(); }));
    const FaultCounters c = faulty.Settle();
    EXPECT_GT(c.delayed, 0u);
    EXPECT_GT(c.duplicated, 0u);
    ExpectBspRunAsUndisturbed(log, got, want, "leave");
    faulty.Finish();
  });
}

// A worker's push and pull to a server that leaves are held
// on their link until its hand-over is acknowledged (in a real job they
// reach a leaver as it stops, and its refusal is lost: the worker waits
// for ever). The worker's notice that it took the ring without the leaver
// (SWITCHED) follows them on that link, and the leaver has left only once
// it has come: so it refuses each of them first, and the worker re-routes
// them by the new ring. Without copies and with one; every key ends exact.
void LeaverAwaitsTheWorkersSwitch(int replicas) {
  SCOPED_TRACE("replicas=" + std::to_string(replicas));
  FaultCluster faulty(1, 3, 1, /*bsp=*/false,
                      [replicas](Options* o) { o->replicas = replicas; });
  TestWorker& kv = *faulty.workers()[0];
  Postoffice* worker = faulty.cluster().worker(0);
  Postoffice* leaver = faulty.cluster().server(1);
  const int leaver_id = leaver->node()->my_id();
  const int worker_id = worker->node()->my_id();
  const std::vector<Key> keys = SpreadKeys(1024);
  const std::vector<float> ones(keys.size(), 1.0f);
  ASSERT_TRUE(kv.WaitBounded(kv.Push(keys, ones)).ok());
  // Everything the worker sends the leaver, in order.
  faulty.Hold(FaultCluster::HoldPlan({{worker_id, leaver_id}}));
  LogCapture log;
  const int push = kv.Push(keys, ones);
  std::vector<float> pulled;
  const int pull = kv.Pull(keys, &pulled);
  ASSERT_TRUE(leaver->node()->RequestLeave("test"));
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find(
                   "every new owner has acknowledged this server's ranges; "
                   "waiting for worker 0")
                .empty();
  })) << "the leaver did not wait for the worker's switch";
  EXPECT_EQ(worker->node()->ring_epoch(), 2u);
  EXPECT_FALSE(leaver->node()->has_left());
  EXPECT_GT(faulty.injector().held(), 0u);
  faulty.Settle();  // The requests, then the switch, reach the leaver.
  ASSERT_TRUE(kv.WaitBounded(push).ok());
  ASSERT_TRUE(kv.WaitBounded(pull).ok());
  ASSERT_TRUE(WaitUntil([&] { return leaver->node()->has_left(); }));
  for (float v : pulled) ASSERT_TRUE(v >= 1 && v <= 2) << v;
  std::vector<float> out;
  ASSERT_TRUE(kv.WaitBounded(kv.Pull(keys, &out)).ok());
  size_t wrong = 0;
  for (float v : out) wrong += v != 2;
  EXPECT_EQ(wrong, 0u);
  faulty.Finish();
}

TEST(LeaveSwitch, TheLeaverAnswersWhatTheWorkersSlicedByTheOlderRing) {
  for (int replicas : {0, 1}) LeaverAwaitsTheWorkersSwitch(replicas);
}

// The scheduler refuses a leave that cannot be made, says why in its log
// and the leaver's, and the job goes on untouched: the last server, a
// leave that would leave too few servers for EMBER_REPLICAS copies, and a
// leave while another server is still receiving its ranges.
TEST(LeaveRefusal, ImpossibleLeavesAreRefusedAndTheJobIsUntouched) {
  {
    InProcCluster cluster(1, 1, [](Options* o) { o->replicas = 0; });
    cluster.Start();
    LogCapture log;
    ASSERT_TRUE(cluster.server(0)->node()->RequestLeave("test"));
    ASSERT_TRUE(WaitUntil([&] {
      return !log.Find(
                     "the scheduler refused to let this server leave: it "
                     "is the last server")
                  .empty();
    }));
    EXPECT_FALSE(log.Find("the job goes on unchanged").empty());
    EXPECT_EQ(cluster.worker(0)->node()->ring_epoch(), 1u);
    EXPECT_FALSE(cluster.server(0)->node()->has_left());
    cluster.Finalize();
  }
  {
    InProcCluster cluster(2, 1, [](Options* o) { o->replicas = 1; });
    cluster.Start();
    LogCapture log;
    ASSERT_TRUE(cluster.server(1)->node()->RequestLeave("test"));
    ASSERT_TRUE(WaitUntil([&] {
      return !log.Find(
                     "EMBER_REPLICAS=1 copies of every server's data need 2 "
                     "servers, and only 1 would remain")
                  .empty();
    }));
    EXPECT_EQ(cluster.worker(0)->node()->ring_epoch(), 1u);
    // Refused: it may ask again.
    EXPECT_TRUE(WaitUntil([&] {
      return !log.Find("the scheduler refused to let this server leave")
                  .empty();
    }));
    EXPECT_TRUE(cluster.server(1)->node()->RequestLeave("test"));
    cluster.Finalize();
  }
  {
    InProcCluster cluster(2, 1, [](Options* o) { o->replicas = 0; });
    cluster.Start();
    std::vector<std::unique_ptr<KVServer<float>>> apps;
    for (int i = 0; i < 2; ++i) {
      apps.push_back(std::make_unique<KVServer<float>>(0, cluster.server(i)));
      apps.back()->set_request_handle(KVServerDefaultHandle<float>());
    }
    // The newcomer creates no app: its join never ends.
    Postoffice* newcomer = cluster.AddServer(true);
    ASSERT_TRUE(newcomer->StartStatus(0, true).ok());
    LogCapture log;
    ASSERT_TRUE(cluster.server(0)->node()->RequestLeave("test"));
    ASSERT_TRUE(WaitUntil(
        [&] { return !log.Find("a membership change is under way").empty(); }));
    // The worker learns of the join on its own thread, maybe after the
    // refusal: it has the newcomer's ring, and no other.
    EXPECT_TRUE(WaitUntil([&] {
      return cluster.worker(0)->node()->key_ring()->num_servers() == 3;
    }));
    EXPECT_EQ(cluster.worker(0)->node()->key_ring()->epoch(), 2u);
    EXPECT_FALSE(cluster.server(0)->node()->has_left());
    // A worker cannot ask.
    EXPECT_FALSE(cluster.worker(0)->node()->RequestLeave("test"));
    apps.clear();
  }
}

// Server 1 of 3 (k=1) leaves; server 2, a new owner of some of its keys,
// dies before the hand-over to it arrives. No live server holds a whole
// copy of server 2's data (its copy on server 0 lacks the keys moving to
// it, and copies are made again only once the hand-over has ended), so the
// scheduler says that data is lost, and every later request that needs
// server 2 fails naming it: never a sum without the leaver's pushes. (The
// leaver still holds those keys; handing them to the heir instead is not
// built, docs/replication.md, "Leaving".)
TEST(LeaveFaults, ANewOwnerThatDiesBeforeTheHandOverEndsLosesItsDataLoudly) {
  FaultCluster faulty(1, 3, 2);
  InProcCluster& cluster = faulty.cluster();
  auto& workers = faulty.workers();
  const std::vector<Key> keys = SpreadKeys(1024);
  const std::vector<float> ones(keys.size(), 1.0f);
  Postoffice* leaver = cluster.server(1);
  Postoffice* dying = cluster.server(2);
  const int from = leaver->node()->my_id();
  const int to = dying->node()->my_id();
  LogCapture log;
  for (int i = 0; i < 3; ++i) {
    for (auto& w : workers) {
      ASSERT_TRUE(w->WaitBounded(w->Push(keys, ones)).ok());
    }
  }
  // The hand-over to server 2, held.
  faulty.Hold(FaultCluster::HoldPlan({{from, to}}));
  ASSERT_TRUE(leaver->node()->RequestLeave("test"));
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("handing the keys that moved to node").size() == 2;
  }));
  const std::string who = cluster.scheduler()->node()->Describe(to);
  cluster.KillByHeartbeat(dying);
  EXPECT_EQ(log.Find("no live server holds a whole copy of the data of " + who +
                     " (no copy is whole since the last ring change)")
                .size(),
            1u);
  for (auto& w : workers) {
    Status s = w->WaitBounded(w->Push(keys, ones));
    EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
    EXPECT_NE(s.message().find(who), std::string::npos) << s;
  }
  std::vector<float> out;
  Status s = workers[0]->WaitBounded(workers[0]->Pull(keys, &out));
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_FALSE(leaver->node()->has_left());
  faulty.Settle();
  // No Finish: the final barrier cannot pass without the dead server.
}

}  // namespace
}  // namespace ps
