#include "node/node.h"

#include <gtest/gtest.h>

#include <future>

#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"

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

// A component that looks at the ring late (a server app's customer
// thread) steps through every ring installed since it last looked.
TEST(NodeTest, RingsAfterGivesEachRingInstalledSinceAnEpoch) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  Node* node = cluster.worker(0)->node();
  const std::vector<int> ids = node->key_ring()->server_ids();
  for (uint64_t epoch = 2; epoch <= 4; ++epoch) {
    auto ring = KeyRing::EvenSplit(ids, epoch);
    ASSERT_TRUE(ring.ok());
    ASSERT_TRUE(node->InstallRingForTest(
                        std::make_shared<const KeyRing>(std::move(*ring)))
                    .ok());
  }
  auto epochs = [&](uint64_t after, uint64_t until) {
    std::vector<uint64_t> got;
    for (const auto& r : node->RingsAfter(after, until)) {
      got.push_back(r->epoch());
    }
    return got;
  };
  EXPECT_EQ(epochs(1, 4), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(epochs(2, 3), (std::vector<uint64_t>{3}));
  EXPECT_EQ(epochs(0, 2), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(epochs(4, 4).empty());
  EXPECT_TRUE(epochs(3, 5).empty()) << "epoch 5 was never installed";
  // Past the history's length the oldest rings are gone: a gap, no steps.
  for (uint64_t epoch = 5; epoch < 5 + Node::kRingHistory; ++epoch) {
    auto ring = KeyRing::EvenSplit(ids, epoch);
    ASSERT_TRUE(ring.ok());
    ASSERT_TRUE(node->InstallRingForTest(
                        std::make_shared<const KeyRing>(std::move(*ring)))
                    .ok());
  }
  const uint64_t last = 4 + Node::kRingHistory;
  EXPECT_TRUE(epochs(1, last).empty());
  EXPECT_EQ(epochs(last - 2, last), (std::vector<uint64_t>{last - 1, last}));
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
  // Sent by a member (authenticated with the run's key), but a member cannot
  // speak for the scheduler.
  for (Control c : {Control::kHeartbeat, Control::kLeave}) {
    Message forged;
    forged.meta.control = c;
    forged.meta.request = true;
    forged.meta.sender = Node::kSchedulerId;
    forged.meta.recipient = Node::kSchedulerId;
    ASSERT_TRUE(cluster.worker(0)->node()->Send(std::move(forged)).ok());
  }
  ASSERT_TRUE(
      WaitUntil([&] { return counters.dropped_bad_control >= before + 2; }));
  // The scheduler still serves barriers and still hears the worker.
  EXPECT_TRUE(cluster.worker(0)->BarrierStatus(0, kWorkerGroup).ok());
  cluster.Beat(cluster.worker(0));
}

// A process that never joined knows none of the run's keys: whatever it
// claims to be, it cannot abort, reconfigure, expel or feed the cluster.
TEST(NodeTest, MessagesFromAProcessThatNeverJoinedAreDropped) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  const int server = cluster.server(0)->node()->my_id();
  const int worker = cluster.worker(0)->node()->my_id();
  InProcVan stranger(cluster.network());
  ASSERT_TRUE(stranger.Start("stranger", 0, [](Message&&) {}).ok());
  auto connect = [&](int id) {
    std::string address = cluster.AddressOf(id);
    size_t colon = address.rfind(':');
    ASSERT_TRUE(stranger
                    .Connect(id, address.substr(0, colon),
                             std::stoi(address.substr(colon + 1)), "")
                    .ok());
  };
  connect(server);
  connect(worker);
  ASSERT_TRUE(stranger.Connect(Node::kSchedulerId, "scheduler", 1, "").ok());

  std::vector<Message> forged;
  auto add = [&](int from, int to, Control control) -> Meta& {
    forged.emplace_back();
    Meta& m = forged.back().meta;
    m.sender = from;
    m.recipient = to;
    m.control = control;
    m.request = true;
    return m;
  };
  for (int victim : {server, worker}) {
    add(Node::kSchedulerId, victim, Control::kAbort).reason = "forged";
    Meta& table = add(Node::kSchedulerId, victim, Control::kNodeTable);
    table.ring.epoch = 7;
    table.ring.server_ids = {99};
    table.ring.begins = {5};  // Not a ring: must start at 0.
    table.ring.owners = {3};
    add(Node::kSchedulerId, victim, Control::kNodeFailed).failed_node =
        victim == server ? worker : server;
    Meta& echo = add(Node::kSchedulerId, victim, Control::kHeartbeat);
    echo.request = false;
    // Guessed keys prove nothing either.
    echo.auth = Key128{0x7878787878787878, 0x7878787878787878};
  }
  add(server, Node::kSchedulerId, Control::kHeartbeat);
  add(worker, Node::kSchedulerId, Control::kLeave);
  add(worker, Node::kSchedulerId, Control::kBarrier).barrier_group =
      kWorkerGroup;
  Meta& push = add(worker, server, Control::kNone);
  push.push = true;
  const size_t sent = forged.size();
  for (Message& m : forged) ASSERT_TRUE(stranger.Send(std::move(m)).ok());

  auto dropped = [&] {
    uint64_t n = 0;
    for (Postoffice* p : cluster.all()) {
      n += p->node()->counters().dropped_unauthenticated;
    }
    return n;
  };
  ASSERT_TRUE(WaitUntil([&] { return dropped() == sent; })) << dropped();
  // Nobody aborted, nobody was expelled or left, and the ring is the real one.
  for (Postoffice* p : cluster.all()) {
    EXPECT_TRUE(p->node()->IsAlive(server));
    EXPECT_TRUE(p->node()->IsAlive(worker));
  }
  EXPECT_EQ(cluster.worker(0)->node()->key_ring()->epoch(), 1u);
  stranger.Stop();
  cluster.Finalize();
}

// A flood of messages the node drops is followed, once it has ended, by one
// trim of the heap it left (the heartbeat thread calls TrimAfterFlood every
// beat; here the test does).
TEST(NodeTest, TheHeapIsTrimmedOnceAfterAFloodOfDroppedMessages) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  Node* server = cluster.server(0)->node();
  InProcVan stranger(cluster.network());
  ASSERT_TRUE(stranger.Start("stranger", 0, [](Message&&) {}).ok());
  const std::string address = cluster.AddressOf(server->my_id());
  const size_t colon = address.rfind(':');
  ASSERT_TRUE(stranger
                  .Connect(server->my_id(), address.substr(0, colon),
                           std::stoi(address.substr(colon + 1)), "")
                  .ok());
  auto flood = [&](uint64_t n) {
    const uint64_t before = server->counters().dropped_unauthenticated;
    for (uint64_t i = 0; i < n; ++i) {
      Message m;
      m.meta.sender = 9;
      m.meta.recipient = server->my_id();
      m.meta.request = true;
      m.meta.push = true;
      ASSERT_TRUE(stranger.Send(std::move(m)).ok());
    }
    ASSERT_TRUE(WaitUntil([&] {
      return server->counters().dropped_unauthenticated == before + n;
    }));
  };
  EXPECT_FALSE(server->TrimAfterFlood());
  // Fewer drops than a flood: no trim, however quiet it is after.
  flood(Node::kFloodTrimMessages / 2);
  EXPECT_FALSE(server->TrimAfterFlood());
  EXPECT_FALSE(server->TrimAfterFlood());
  // Enough for a flood: not while it goes on, once after it.
  flood(Node::kFloodTrimMessages);
  EXPECT_FALSE(server->TrimAfterFlood());
  EXPECT_TRUE(server->TrimAfterFlood());
  EXPECT_FALSE(server->TrimAfterFlood());
  EXPECT_EQ(server->counters().flood_trims, 1u);
  EXPECT_EQ(cluster.worker(0)->node()->counters().flood_trims, 0u);
  stranger.Stop();
  cluster.Finalize();
}

// With a cluster token, a node that does not present it is refused with a
// reason before it can take a place; the cluster forms with those that do.
TEST(NodeTest, JoinWithoutTheClusterTokenIsRefused) {
  InProcCluster cluster(1, 1, [](Options* o) { o->cluster_token = "s3cret"; });
  auto formed = std::async(std::launch::async, [&] { cluster.Start(); });
  for (std::string token : {"", "wrong"}) {
    Options o;
    o.role = Role::kWorker;
    o.scheduler_host = "scheduler";
    o.scheduler_port = 1;
    o.node_host = "intruder" + token;
    o.num_servers = 1;
    o.num_workers = 1;
    o.heartbeat_interval_ms = 0;
    o.start_timeout_ms = 30000;
    o.cluster_token = token;
    Node intruder(o, std::make_unique<InProcVan>(cluster.network()),
                  cluster.clock());
    Status s = intruder.Start(0, false);
    EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
    EXPECT_NE(s.message().find("EMBER_CLUSTER_TOKEN"), std::string::npos) << s;
  }
  formed.get();
  EXPECT_EQ(cluster.scheduler()->node()->counters().dropped_unauthenticated,
            2u);
  EXPECT_EQ(cluster.scheduler()->node()->GetNodeIds(kWorkerGroup).size(), 1u);
  cluster.Finalize();
}

// No silent wait: a barrier that lasts is logged by the scheduler with
// whom it waits for, and by the waiting node.
TEST(NodeTest, LongBarrierWaitsAreLoggedWithWhomTheyWaitFor) {
  InProcCluster cluster(1, 2,
                        [](Options* o) { o->wait_log_interval_ms = 5000; });
  cluster.Start();
  LogCapture log;
  auto waiting = std::async(std::launch::async, [&] {
    return cluster.worker(0)->BarrierStatus(0, kWorkerGroup);
  });
  Node* scheduler = cluster.scheduler()->node();
  Node* worker = cluster.worker(0)->node();
  ASSERT_TRUE(WaitUntil([&] {
    cluster.clock()->Advance(1000);
    scheduler->WatchWaits();
    return !log.Find("barrier over group 4 has waited").empty();
  }));
  std::string line = log.Find("barrier over group 4 has waited")[0];
  EXPECT_NE(line.find("for worker 1 (id 11"), std::string::npos) << line;
  EXPECT_EQ(line.find("worker 0"), std::string::npos) << line;
  // The worker's own line comes when its wait, which began earlier on the
  // fake clock, is due one (1, 2, 4, ... intervals).
  EXPECT_TRUE(WaitUntil([&] {
    cluster.clock()->Advance(1000);
    worker->WatchWaits();
    return !log.Find("customer 0 has waited").empty();
  }));
  EXPECT_TRUE(cluster.worker(1)->BarrierStatus(0, kWorkerGroup).ok());
  EXPECT_TRUE(waiting.get().ok());
}

// A silent scheduler (it may be restarting) is waited for, with a log line,
// for EMBER_SCHEDULER_WAIT_MS; then the node fails naming it.
TEST(NodeTest, NodesWaitForASilentSchedulerThenFail) {
  InProcCluster cluster(1, 1, [](Options* o) { o->scheduler_wait_ms = 5000; });
  cluster.Start();
  LogCapture log;
  cluster.network()->Sever("scheduler:1");
  cluster.clock()->Advance(InProcCluster::kTimeoutMs + 1);
  auto waiting = std::async(std::launch::async, [&] {
    return cluster.worker(0)->BarrierStatus(0, kServerGroup + kWorkerGroup);
  });
  Node* worker = cluster.worker(0)->node();
  worker->CheckLiveness();
  EXPECT_FALSE(log.Find("has not answered for 1 s: waiting for it").empty());
  EXPECT_TRUE(worker->IsAlive(Node::kSchedulerId));
  // Silent for 4999 ms of 5000: still waiting.
  cluster.clock()->Advance(3998);
  worker->CheckLiveness();
  EXPECT_TRUE(worker->IsAlive(Node::kSchedulerId));
  cluster.clock()->Advance(2);
  worker->CheckLiveness();
  Status s = waiting.get();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scheduler"), std::string::npos) << s;
  EXPECT_NE(s.message().find("EMBER_SCHEDULER_WAIT_MS=5000"), std::string::npos)
      << s;
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
