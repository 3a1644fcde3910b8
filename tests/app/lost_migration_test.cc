// Membership changes survive lost messages (docs/replication.md, "Lost
// messages"): a join and a leave, with and without copies, under asp and
// bsp, while the messages of the change (the servers' copies and
// hand-overs with their acknowledgements, the scheduler's node tables and
// the members' reports) are dropped, delayed and duplicated on links that
// keep their order. The resend timers run on the liveness check, driven by
// the fake clock (TickWhenQuiet): no sleeps, no ports.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "message/message.h"
#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/kv_test_servers.h"
#include "testutil/log_capture.h"
#include "transport/fault_van.h"

namespace ps {
namespace {

constexpr int kResendMs = 300;  // EMBER_MIGRATION_RESEND_MS, fake time
constexpr int kTickMs = 100;    // fake time a quiet tick lets pass

// Drops (10%), delays (10%) and duplicates (10%) on links that keep their
// order, of the messages of a membership change only: the servers' state
// copies and hand-overs (their data messages and acknowledgements) and the
// control messages of the change, the newcomer's first NODE_TABLE included.
// Not the workers' requests (nothing resends those between live peers), nor
// heartbeats.
FaultPlan MigrationDropPlan() {
  FaultPlan plan;
  plan.fifo = true;
  plan.drop = 0.1;
  plan.delay = 0.1;
  plan.duplicate = 0.1;
  plan.max_delay = 6;
  plan.target.kind = FaultTarget::Kind::kAll;
  plan.target.migration = true;
  plan.target.controls = {Control::kNodeTable, Control::kHandoverDone,
                          Control::kReplicaReady, Control::kLeaveRequest};
  return plan;
}

// Every `control` message from the scheduler to node `to` dropped.
FaultPlan DropFromScheduler(Control control, int to) {
  FaultPlan plan;
  plan.drop = 1;
  plan.target.kind = FaultTarget::Kind::kControl;
  plan.target.controls = {control};
  plan.target.links = {{Node::kSchedulerId, to}};
  return plan;
}

void Tweak(Options* o, int replicas) {
  o->replicas = replicas;
  o->migration_resend_ms = kResendMs;
}

// (join: true, leave: false; copies per server; bsp).
class LostMigrationTest
    : public ::testing::TestWithParam<std::tuple<bool, int, bool>> {
 protected:
  bool join() const { return std::get<0>(GetParam()); }
  int replicas() const { return std::get<1>(GetParam()); }
  bool bsp() const { return std::get<2>(GetParam()); }
  // A join grows 2 servers to 3; a leave shrinks 3 to 2 (one copy needs
  // two servers).
  int servers() const { return join() ? 2 : 3; }
  static constexpr uint64_t kSeeds = 6;
};

TEST_P(LostMigrationTest, EveryChangeCompletesAndNothingIsLostOrDoubled) {
  const std::vector<Key> keys = SpreadKeys(bsp() ? 256 : 1024);
  std::pair<std::vector<float>, std::vector<float>> want;
  if (bsp()) want = UndisturbedBspRounds(servers(), replicas(), keys, 6, 3);
  const int k = replicas();
  uint64_t dropped = 0;
  uint64_t resent = 0;
  ForEachSeed(kSeeds, [&](uint64_t seed) {
    FaultCluster faulty(seed, servers(), 2, bsp(),
                        [k](Options* o) { Tweak(o, k); });
    InProcCluster& cluster = faulty.cluster();
    auto& servers = faulty.servers();
    faulty.InjectWithTicks(MigrationDropPlan(), kTickMs);
    LogCapture log;
    Postoffice* leaver = join() ? nullptr : cluster.server(1);
    auto change = [&] {
      if (join()) {
        Postoffice* po = cluster.AddServer(true);
        Status s = po->StartStatus(0, true);
        ASSERT_TRUE(s.ok()) << s;
        servers.push_back(std::make_unique<CountingServer>(po));
      } else {
        ASSERT_TRUE(leaver->node()->RequestLeave("test"));
      }
    };
    auto done = [&] {
      return join() ? !log.Find("has joined").empty()
                    : leaver->node()->has_left() &&
                          !log.Find("has left: its ranges are handed over")
                               .empty();
    };
    if (bsp()) {
      const auto got = PushBspRounds(faulty.workers(), keys, 6, 3, [&] {
        change();
        // Both former owners (a join) or the leaver's two new owners have
        // been sent their part before worker 1 pushes.
        ASSERT_TRUE(WaitUntil([&] {
          return log.Find("handing the keys that moved to node").size() == 2;
        }));
      });
      EXPECT_TRUE(WaitUntil(done)) << "the change did not complete";
      ExpectBitwiseEqual(got.first, want.first,
                         "the pull of the change's round");
      ExpectBitwiseEqual(got.second, want.second, "the values at the end");
    } else {
      PushOnesWhile(faulty.workers(), keys, 20, 5, [&] {
        change();
        ASSERT_TRUE(WaitUntil(done)) << "the change did not complete";
      });
      ExpectAllKeys(faulty.workers()[0].get(), keys, 2 * 20);
    }
    const FaultCounters c = faulty.Settle();
    dropped += c.dropped;
    resent += log.Find("sending it again").size() +
              log.Find("copying again").size() +
              log.Find("its node table was lost").size() +
              log.Find("asking again").size() +
              log.Find("its HANDOVER_DONE was lost").size() +
              log.Find("reported again in its heartbeat").size();
    if (join()) {
      EXPECT_GT(servers.back()->own(), 0);
    }
    faulty.Finish();
  });
  // Over the seeds some messages of the changes were lost and sent again
  // (the bitwise and exact checks above hold only because they were).
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(resent, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    JoinAndLeave, LostMigrationTest,
    ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<bool, int, bool>>& info) {
      return std::string(std::get<0>(info.param) ? "Join" : "Leave") + "K" +
             std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "Bsp" : "Asp");
    });

// The end of a former owner's hand-over to a newcomer is lost (and only
// it): the newcomer would wait for it for ever; after
// EMBER_MIGRATION_RESEND_MS the former owner sends the whole hand-over
// again, under a new attempt, and the join completes with every push.
TEST(LostMigration, AHandOverWhoseEndIsLostIsSentAgain) {
  FaultCluster faulty(1, 2, 2, false, [](Options* o) { Tweak(o, 1); });
  InProcCluster& cluster = faulty.cluster();
  auto& servers = faulty.servers();
  const int owner = cluster.server(0)->node()->my_id();
  LogCapture log;
  const std::vector<Key> keys = SpreadKeys(512);
  PushOnesWhile(faulty.workers(), keys, 10, 3, [&] {
    FaultPlan plan;
    plan.drop = 1;
    plan.target.kind = FaultTarget::Kind::kData;
    plan.target.migration = true;
    plan.target.links = {{owner, 12}};
    faulty.Hold(plan);
    Postoffice* po = cluster.AddServer(true);
    ASSERT_TRUE(po->StartStatus(0, true).ok());
    servers.push_back(std::make_unique<CountingServer>(po));
    // Everything server 0 sent the newcomer in its first sending is lost,
    // up to the end.
    ASSERT_TRUE(WaitUntil([&] {
      for (const FaultEvent& e : faulty.injector().events()) {
        if (e.kind == FaultEvent::Kind::kDrop && e.meta.state_copy == 4) {
          return true;
        }
      }
      return false;
    }));
    ASSERT_TRUE(faulty.injector().set_plan(FaultPlan()).ok());
    EXPECT_TRUE(log.Find("has joined").empty());
    faulty.InjectWithTicks(FaultPlan(), kTickMs);
    ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  });
  EXPECT_FALSE(log.Find("unacknowledged after 300 ms").empty());
  faulty.Settle();
  ExpectAllKeys(faulty.workers()[0].get(), keys, 2 * 10);
  EXPECT_GT(servers.back()->own(), 0);
  faulty.Finish();
}

// A member that lost the NODE_TABLE of a join learns the ring again: its
// beats show the older epoch, and after EMBER_MIGRATION_RESEND_MS the
// scheduler sends it the table again.
TEST(LostMigration, AMemberThatLostTheNodeTableIsSentItAgain) {
  FaultCluster faulty(1, 2, 1, false, [](Options* o) { Tweak(o, 0); });
  InProcCluster& cluster = faulty.cluster();
  Node* worker = cluster.worker(0)->node();
  LogCapture log;
  faulty.Hold(DropFromScheduler(Control::kNodeTable, worker->my_id()));
  Postoffice* po = cluster.AddServer(true);
  ASSERT_TRUE(po->StartStatus(0, true).ok());
  faulty.servers().push_back(std::make_unique<CountingServer>(po));
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  EXPECT_EQ(worker->ring_epoch(), 1u);
  ASSERT_TRUE(faulty.injector().set_plan(FaultPlan()).ok());
  faulty.InjectWithTicks(FaultPlan(), kTickMs);
  ASSERT_TRUE(WaitUntil([&] { return worker->ring_epoch() == 2; }));
  EXPECT_FALSE(log.Find("its node table was lost").empty());
  faulty.Settle();
  const std::vector<Key> keys = SpreadKeys(256);
  PushOnesWhile(faulty.workers(), keys, 3, 0, nullptr);
  ExpectAllKeys(faulty.workers()[0].get(), keys, 3);
  faulty.Finish();
}

// A member that lost the NODE_FAILED of a failover (server 1 died and
// server 2, its heir, took over its ranges) would wait for ever: the worker
// for the dead server's answer, the heir with requests of a ring it does not
// have. Its beats show the older ring epoch, and after
// EMBER_MIGRATION_RESEND_MS the scheduler sends it the failover notice again
// (a node table would not do: a member drops one that adds no server). The
// worker then resends what the dead server owed to the heir, and every push
// counts once. Lost by the worker, then by the heir.
TEST(LostMigration, AMemberThatLostAFailoverNoticeIsSentItAgain) {
  for (int loser : {0, 1}) {
    SCOPED_TRACE(loser == 0 ? "the worker lost it" : "the heir lost it");
    FaultCluster faulty(1, 3, 1, false, [](Options* o) { Tweak(o, 1); });
    InProcCluster& cluster = faulty.cluster();
    Node* node =
        loser == 0 ? cluster.worker(0)->node() : cluster.server(2)->node();
    LogCapture log;
    const std::vector<Key> keys = SpreadKeys(256);
    PushOnesWhile(faulty.workers(), keys, 2, 0, nullptr);
    faulty.Hold(DropFromScheduler(Control::kNodeFailed, node->my_id()));
    cluster.KillByHeartbeat(cluster.server(1));
    ASSERT_TRUE(
        WaitUntil([&] { return faulty.injector().counters().dropped == 1; }));
    EXPECT_EQ(node->ring_epoch(), 1u);
    ASSERT_TRUE(faulty.injector().set_plan(FaultPlan()).ok());
    faulty.InjectWithTicks(FaultPlan(), kTickMs);
    PushOnesWhile(faulty.workers(), keys, 3, 0, nullptr);
    EXPECT_EQ(node->ring_epoch(), 2u);
    EXPECT_FALSE(log.Find("its failover notice was lost").empty());
    faulty.Settle();
    ExpectAllKeys(faulty.workers()[0].get(), keys, 5);
    // A member died: no final barrier.
  }
}

// A newcomer whose first node table (the answer to its JOIN) is lost never
// beats: the scheduler sends it the table again, and it joins.
TEST(LostMigration, ANewcomerWhoseFirstNodeTableIsLostIsSentItAgain) {
  FaultCluster faulty(1, 2, 1, false, [](Options* o) { Tweak(o, 0); });
  InProcCluster& cluster = faulty.cluster();
  LogCapture log;
  // The newcomer's id: rank 2's (8 + 2 x rank).
  faulty.Hold(DropFromScheduler(Control::kNodeTable, 12));
  Postoffice* po = cluster.AddServer(true);
  auto started =
      std::async(std::launch::async, [po] { return po->StartStatus(0, true); });
  ASSERT_TRUE(
      WaitUntil([&] { return faulty.injector().counters().dropped == 1; }));
  ASSERT_TRUE(faulty.injector().set_plan(FaultPlan()).ok());
  faulty.InjectWithTicks(FaultPlan(), kTickMs);
  ASSERT_TRUE(WaitUntil([&] {
    return started.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }));
  Status s = started.get();
  ASSERT_TRUE(s.ok()) << s;
  faulty.servers().push_back(std::make_unique<CountingServer>(po));
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  EXPECT_FALSE(log.Find("since its node table was sent").empty());
  faulty.Settle();
  const std::vector<Key> keys = SpreadKeys(256);
  PushOnesWhile(faulty.workers(), keys, 3, 0, nullptr);
  ExpectAllKeys(faulty.workers()[0].get(), keys, 3);
  EXPECT_GT(faulty.servers().back()->own(), 0);
  faulty.Finish();
}

// A server that joined reports in its beats that it has its state
// (handed_over); when it later leaves, its beats must say so only once its
// leave has handed over: with its hand-over held back, beats with the
// scheduler's leave under way do not end the leave.
TEST(LostMigration, AServerThatJoinedAndLeavesIsNotLeftBeforeItsHandOver) {
  FaultCluster faulty(1, 2, 1, false, [](Options* o) { Tweak(o, 0); });
  InProcCluster& cluster = faulty.cluster();
  LogCapture log;
  Postoffice* po = cluster.AddServer(true);
  ASSERT_TRUE(po->StartStatus(0, true).ok());
  faulty.servers().push_back(std::make_unique<CountingServer>(po));
  ASSERT_TRUE(WaitUntil([&] { return !log.Find("has joined").empty(); }));
  const std::vector<Key> keys = SpreadKeys(256);
  PushOnesWhile(faulty.workers(), keys, 2, 0, nullptr);
  const int leaver = po->node()->my_id();
  // The leaver's hand-over messages, held.
  FaultPlan hold = FaultCluster::HoldPlan({{leaver, FaultTarget::kAnyNode}},
                                          FaultTarget::Kind::kData);
  hold.target.migration = true;
  faulty.Hold(hold);
  ASSERT_TRUE(po->node()->RequestLeave("test"));
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("handing the keys that moved to node").empty();
  }));
  for (int i = 0; i < 3; ++i) {
    cluster.clock()->Advance(kTickMs);
    for (Postoffice* p : cluster.all()) {
      if (p != cluster.scheduler()) cluster.Beat(p);
    }
    cluster.scheduler()->node()->CheckLiveness();
  }
  EXPECT_TRUE(log.Find("has left: its ranges are handed over").empty());
  EXPECT_FALSE(po->node()->has_left());
  faulty.Settle();
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("has left: its ranges are handed over").empty();
  }));
  ExpectAllKeys(faulty.workers()[0].get(), keys, 2);
  faulty.Finish();
}

}  // namespace
}  // namespace ps
