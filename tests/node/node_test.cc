#include "node/node.h"

#include <gtest/gtest.h>

#include <future>

#include "testutil/inproc_cluster.h"

namespace ps {
namespace {

TEST(NodeTest, ClusterFormsWithRanksFromLaunchHints) {
  InProcCluster cluster(3, 2);
  cluster.Start();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(cluster.server(r)->my_rank(), r);
    EXPECT_TRUE(cluster.server(r)->is_server());
    EXPECT_EQ(cluster.server(r)->node()->my_id(), Node::ServerRankToId(r));
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(cluster.worker(r)->my_rank(), r);
    EXPECT_TRUE(cluster.worker(r)->is_worker());
  }
  EXPECT_TRUE(cluster.scheduler()->is_scheduler());
  EXPECT_EQ(cluster.worker(0)->GetNodeIDs(kServerGroup),
            (std::vector<int>{8, 10, 12}));
  EXPECT_EQ(cluster.worker(1)->GetNodeIDs(kWorkerGroup + kScheduler),
            (std::vector<int>{1, 9, 11}));
  std::shared_ptr<const KeyRing> ring = cluster.worker(0)->node()->key_ring();
  ASSERT_NE(ring, nullptr);
  EXPECT_EQ(ring->epoch(), 1u);
  EXPECT_EQ(ring->server_ids(), (std::vector<int>{8, 10, 12}));
  // Server rank r owns ps-lite's GetServerKeyRanges()[r].
  ASSERT_EQ(ring->num_ranges(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ring->range_begin(r), kMaxKey / 3 * r);
    EXPECT_EQ(ring->range_owner(r), r);
  }
  cluster.Finalize();
}

TEST(NodeTest, BarrierWaitsForEveryMemberOfItsGroup) {
  InProcCluster cluster(1, 2);
  cluster.Start();
  auto first = std::async(std::launch::async, [&] {
    return cluster.worker(0)->BarrierStatus(0, kWorkerGroup);
  });
  // Worker 1 has not arrived: the barrier cannot have been released.
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)),
            std::future_status::timeout);
  Status second = cluster.worker(1)->BarrierStatus(0, kWorkerGroup);
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_TRUE(first.get().ok());
  cluster.Finalize();
}

TEST(NodeTest, BarrierRejectsAGroupTheCallerIsNotIn) {
  // (A group of one node needs no barrier, as in ps-lite; use two servers.)
  InProcCluster cluster(2, 1);
  cluster.Start();
  Status s = cluster.worker(0)->BarrierStatus(0, kServerGroup);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  cluster.Finalize();
}

TEST(NodeTest, DeadWorkerFailsABarrierThatWaitsForIt) {
  InProcCluster cluster(1, 2);
  cluster.Start();
  auto waiting = std::async(std::launch::async, [&] {
    return cluster.server(0)->BarrierStatus(0, kServerGroup + kWorkerGroup);
  });
  cluster.KillByHeartbeat(cluster.worker(1));
  Status s = waiting.get();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("worker 1"), std::string::npos) << s;
  EXPECT_FALSE(cluster.server(0)->node()->IsAlive(Node::WorkerRankToId(1)));
  // A later barrier over a group with a dead member fails at once.
  Status again = cluster.worker(0)->BarrierStatus(0, kWorkerGroup);
  EXPECT_EQ(again.code(), Status::Code::kUnavailable) << again;
}

TEST(NodeTest, ExpelledNodeLearnsItWasDeclaredDead) {
  InProcCluster cluster(1, 2);
  cluster.Start();
  // Worker 1 stays reachable but misses its heartbeats (a long pause).
  cluster.clock()->Advance(InProcCluster::kTimeoutMs + 1);
  cluster.Beat(cluster.server(0));
  cluster.Beat(cluster.worker(0));
  cluster.scheduler()->node()->CheckLiveness();
  Status s = cluster.worker(1)->BarrierStatus(0, kWorkerGroup);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("declared dead"), std::string::npos) << s;
}

// A heartbeat or a LEAVE that claims to come from the scheduler itself is
// forged: the scheduler drops and counts it (it used to echo the beat to
// itself and start watching its own address), and the cluster goes on.
TEST(NodeTest, ControlClaimingToComeFromTheSchedulerIsDropped) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  const NodeCounters& counters = cluster.scheduler()->node()->counters();
  const uint64_t before = counters.dropped_bad_control;
  for (Control c : {Control::kHeartbeat, Control::kLeave}) {
    Message forged;
    forged.meta.control = c;
    forged.meta.request = true;
    forged.meta.sender = Node::kSchedulerId;
    forged.meta.recipient = Node::kSchedulerId;
    ASSERT_TRUE(cluster.worker(0)->node()->van()->Send(std::move(forged)).ok());
  }
  ASSERT_TRUE(
      WaitUntil([&] { return counters.dropped_bad_control >= before + 2; }));
  // The scheduler still serves barriers and still hears the worker.
  EXPECT_TRUE(cluster.worker(0)->BarrierStatus(0, kWorkerGroup).ok());
  cluster.Beat(cluster.worker(0));
}

TEST(NodeTest, SilentSchedulerIsDetectedByNodes) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  cluster.network()->Sever("scheduler:1");
  cluster.clock()->Advance(InProcCluster::kTimeoutMs + 1);
  auto waiting = std::async(std::launch::async, [&] {
    return cluster.worker(0)->BarrierStatus(0, kServerGroup + kWorkerGroup);
  });
  cluster.worker(0)->node()->CheckLiveness();
  Status s = waiting.get();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scheduler"), std::string::npos) << s;
}

TEST(NodeTest, StartTimesOutNamingTheMissingNodes) {
  InProcNetwork network;
  FakeClock clock;
  Options o;
  o.role = Role::kScheduler;
  o.scheduler_host = "scheduler";
  o.scheduler_port = 1;
  o.num_servers = 2;
  o.num_workers = 1;
  o.heartbeat_interval_ms = 0;
  o.start_timeout_ms = 1;  // Nobody will come.
  Node scheduler(o, std::make_unique<InProcVan>(&network), &clock);
  Status s = scheduler.Start(0, true);
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("0 of 2 servers"), std::string::npos) << s;
  EXPECT_NE(s.message().find("missing 2 server(s) and 1 worker(s)"),
            std::string::npos)
      << s;
}

TEST(NodeTest, SurplusNodeIsRejectedWithAReason) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  Options o;
  o.role = Role::kWorker;
  o.scheduler_host = "scheduler";
  o.scheduler_port = 1;
  o.node_host = "node";
  o.num_servers = 1;
  o.num_workers = 1;
  o.heartbeat_interval_ms = 0;
  o.start_timeout_ms = 30000;
  Node extra(o, std::make_unique<InProcVan>(cluster.network()),
             cluster.clock());
  const size_t routes = cluster.scheduler()->node()->van()->num_routes();
  Status s = extra.Start(0, false);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("already formed"), std::string::npos) << s;
  // The scheduler keeps no route to the node it refused (it drops it just
  // after sending the ABORT, which may reach the node first).
  Van* van = cluster.scheduler()->node()->van();
  EXPECT_TRUE(WaitUntil([&] { return van->num_routes() == routes; }))
      << van->num_routes() << " routes, " << routes << " before";
  cluster.Finalize();
}

}  // namespace
}  // namespace ps
