// Scheduler restart (docs/replication.md, "Scheduler restart") over the
// in-process transport: the scheduler is killed, workers go on pushing,
// and a scheduler started on its address rebuilds the membership, the ring
// with its epoch and a barrier in progress from the members'
// re-registrations; a re-registration from a process that is not the
// member it claims to be is refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"
#include "util/secret.h"

namespace ps {
namespace {

class SchedulerRestartTest : public ::testing::Test {
 protected:
  void Form(int servers, int workers, int replicas = 0) {
    char dir[] = "/tmp/ember-restart-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    key_file_ = dir_ + "/run.key";
    const std::string key_file = key_file_;
    cluster_ = std::make_unique<InProcCluster>(
        servers, workers, [key_file, replicas](Options* o) {
          o->run_key_file = key_file;
          o->replicas = replicas;
        });
    cluster_->Start();
    for (int i = 0; i < servers; ++i) {
      auto s = std::make_unique<KVServer<float>>(0, cluster_->server(i));
      s->set_request_handle(KVServerDefaultHandle<float>());
      servers_.push_back(std::move(s));
    }
    for (int i = 0; i < workers; ++i) {
      workers_.push_back(
          std::make_unique<KVWorker<float>>(0, 0, cluster_->worker(i)));
    }
    members_ = cluster_->all();
    members_.erase(members_.begin());  // The scheduler.
  }

  void TearDown() override {
    workers_.clear();
    // A cluster with a dead member cannot pass the final barrier: a test
    // that kills one ends without it (and a failed assertion must not
    // leave it waiting there).
    if (cluster_ && cluster_->scheduler() != nullptr && !killed_) {
      cluster_->Finalize();
    }
    servers_.clear();
    cluster_.reset();
    if (!dir_.empty()) {
      std::remove(key_file_.c_str());
      rmdir(dir_.c_str());
    }
  }

  // Kills the scheduler and starts another on its address; its Start
  // returns (into the future) once a member has re-registered.
  std::future<Status> Restart() {
    cluster_->KillScheduler();
    Postoffice* restarted = cluster_->RestartScheduler();
    return std::async(std::launch::async,
                      [restarted] { return restarted->StartStatus(0, true); });
  }

  // Every member beats until the scheduler has echoed it: the first two
  // beats after the kill go unanswered, the third is a re-registration.
  void ReRegisterAll() {
    // An echo from now on is one to these beats.
    cluster_->clock()->Advance(1);
    for (Postoffice* p : members_) {
      for (int i = 0; i < 3; ++i) p->node()->SendHeartbeat();
    }
    const int64_t now = cluster_->clock()->NowMs();
    for (Postoffice* p : members_) {
      ASSERT_TRUE(WaitUntil(
          [&] { return p->node()->last_scheduler_echo_ms() == now; }));
    }
  }

  // Each worker pushes 1 to `keys` (over every server) and waits for it.
  void PushOnes(const std::vector<Key>& keys) {
    std::vector<float> ones(keys.size(), 1.0f);
    for (auto& w : workers_) {
      Status s = w->WaitStatus(w->Push(keys, ones));
      ASSERT_TRUE(s.ok()) << s;
    }
  }

  std::vector<float> Pull(const std::vector<Key>& keys) {
    std::vector<float> out;
    Status s = workers_[0]->WaitStatus(workers_[0]->Pull(keys, &out));
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  bool killed_ = false;  // A member was killed: no final barrier.
  std::string dir_;
  std::string key_file_;
  std::unique_ptr<InProcCluster> cluster_;
  std::vector<Postoffice*> members_;
  std::vector<std::unique_ptr<KVServer<float>>> servers_;
  std::vector<std::unique_ptr<KVWorker<float>>> workers_;
};

const std::vector<Key> kKeys = {3, kMaxKey / 4, kMaxKey / 2 + 7, kMaxKey - 1};

TEST_F(SchedulerRestartTest, MembersReRegisterAndTheJobCarriesOn) {
  Form(2, 2);
  LogCapture log;
  // The first scheduler wrote the run's key, readable by its owner only.
  struct stat st;
  ASSERT_EQ(stat(key_file_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // The members route by a ring of a later epoch than the one the
  // scheduler formed (as after a join): the restarted scheduler must take
  // that one, not make epoch 1 again.
  auto later = KeyRing::EvenSplit({8, 10}, 5);
  ASSERT_TRUE(later.ok());
  auto ring = std::make_shared<const KeyRing>(std::move(later.value()));
  for (Postoffice* p : members_) {
    ASSERT_TRUE(p->node()->InstallRingForTest(ring).ok());
  }
  PushOnes(kKeys);
  // Worker 0 waits at a barrier over the workers when the scheduler dies;
  // worker 1 arrives while it is down.
  auto first = std::async(std::launch::async, [&] {
    return cluster_->worker(0)->BarrierStatus(0, kWorkerGroup);
  });
  std::future<Status> started = Restart();
  // Data goes peer to peer while no scheduler has re-admitted anyone.
  PushOnes(kKeys);
  EXPECT_EQ(Pull(kKeys), std::vector<float>(kKeys.size(), 4.0f));
  auto second = std::async(std::launch::async, [&] {
    return cluster_->worker(1)->BarrierStatus(0, kWorkerGroup);
  });
  ReRegisterAll();
  Status s = started.get();
  ASSERT_TRUE(s.ok()) << s;
  // The barrier that was in progress completes.
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  Node* scheduler = cluster_->scheduler()->node();
  ASSERT_NE(scheduler->key_ring(), nullptr);
  EXPECT_EQ(scheduler->key_ring()->epoch(), 5u);
  EXPECT_EQ(scheduler->server_ids(), (std::vector<int>{8, 10}));
  EXPECT_EQ(scheduler->GetNodeIds(kWorkerGroup), (std::vector<int>{9, 11}));
  EXPECT_FALSE(log.Find("every member has re-registered").empty());
  // Barriers over every node, the restarted scheduler included, work; so
  // does data; the final barrier and LEAVEs go to the new scheduler
  // (TearDown).
  std::vector<std::future<Status>> all;
  for (Postoffice* p : cluster_->all()) {
    all.push_back(std::async(std::launch::async, [p] {
      return p->BarrierStatus(0, kScheduler + kServerGroup + kWorkerGroup);
    }));
  }
  for (auto& f : all) EXPECT_TRUE(f.get().ok());
  PushOnes(kKeys);
  EXPECT_EQ(Pull(kKeys), std::vector<float>(kKeys.size(), 6.0f));
}

// The scheduler died while it announced a failover: one member routes by
// the new ring (server 1's ranges on server 2), the others by the old. The
// restarted scheduler takes the later ring whichever member re-registers
// first, brings the others up to it with the failover notice they missed,
// and refuses the failed-over server.
TEST_F(SchedulerRestartTest, AMissedFailoverIsCaughtUp) {
  Form(3, 2);
  auto failover = cluster_->worker(1)->node()->key_ring()->FailOver(10, 12, 2);
  ASSERT_TRUE(failover.ok()) << failover.status();
  ASSERT_TRUE(cluster_->worker(1)
                  ->node()
                  ->InstallRingForTest(std::make_shared<const KeyRing>(
                      std::move(failover.value())))
                  .ok());
  std::future<Status> started = Restart();
  Postoffice* failed_over = cluster_->server(1);
  members_.erase(std::find(members_.begin(), members_.end(), failed_over));
  ReRegisterAll();
  ASSERT_TRUE(started.get().ok());
  Node* scheduler = cluster_->scheduler()->node();
  EXPECT_EQ(scheduler->key_ring()->epoch(), 2u);
  EXPECT_EQ(scheduler->server_ids(), (std::vector<int>{8, 12}));
  for (Postoffice* p : members_) {
    ASSERT_TRUE(WaitUntil([&] { return p->node()->key_ring()->epoch() == 2; }));
    // (Worker 1 had its ring through the test seam, not the notice.)
    if (p != cluster_->worker(1)) {
      EXPECT_FALSE(p->node()->IsAlive(10));
    }
  }
  // The data of all three servers' ranges is served by the two left.
  std::vector<Key> keys = {3, kMaxKey / 2, kMaxKey - 1};
  PushOnes(keys);
  EXPECT_EQ(Pull(keys), std::vector<float>(keys.size(), 2.0f));
  // Server 1 re-registers too: it was failed over, and is told so.
  for (int i = 0; i < 3; ++i) failed_over->node()->SendHeartbeat();
  Status refused = failed_over->BarrierStatus(0, kServerGroup);
  EXPECT_EQ(refused.code(), Status::Code::kAborted) << refused;
  EXPECT_NE(refused.message().find("declared dead"), std::string::npos)
      << refused;
  workers_.clear();
  servers_.clear();
  cluster_.reset();
}

// Copies made after ring epoch 1 survive a scheduler restart: each server
// re-registers with the holders of its data, as the scheduler last echoed
// them and as it reported them itself (REPLICA_READY), so a later death is
// a failover, not lost data. 4 servers, one copy each on the ring
// successor; server 1 dies: server 0 copies its data to server 2, and
// server 2, which took server 1's ranges, copies to server 3 (reported);
// server 3's copy on server 0 stays whole (known from the echoes only).
class RestartKeepsCopiesTest : public SchedulerRestartTest,
                               public ::testing::WithParamInterface<bool> {};

TEST_P(RestartKeepsCopiesTest, ADeathAfterTheRestartLosesNothing) {
  const bool echoed = GetParam();
  Form(4, 1, /*replicas=*/1);
  killed_ = true;
  LogCapture log;
  PushOnes(kKeys);
  const int s0 = cluster_->server(0)->node()->my_id();
  const int s2 = cluster_->server(2)->node()->my_id();
  const int s3 = cluster_->server(3)->node()->my_id();
  cluster_->KillByHeartbeat(cluster_->server(1));
  ASSERT_TRUE(WaitUntil([&] {
    return log.Find("copies restored").size() == 2;
  })) << log.Find("copies restored").size();
  auto ring = cluster_->scheduler()->node()->key_ring();
  ASSERT_EQ(ring->ReplicaTargets(s2), std::vector<int>{s3});
  ASSERT_EQ(ring->ReplicaTargets(s3), std::vector<int>{s0});
  members_.erase(
      std::find(members_.begin(), members_.end(), cluster_->server(1)));
  // With `echoed`, every member beats once more before the scheduler dies,
  // and its echo lists the holders; otherwise the last echo a server had
  // was of ring epoch 1, and only what it reported itself counts.
  if (echoed) {
    cluster_->clock()->Advance(1);  // An echo from now on is one to these.
    for (Postoffice* p : members_) cluster_->Beat(p);
  }
  std::future<Status> started = Restart();
  ReRegisterAll();
  ASSERT_TRUE(started.get().ok());
  // Each REJOIN's holders were counted before its echo (ReRegisterAll).
  // The death of server 3 needs its copy on server 0 (known from the
  // echoes); that of server 2 its copy on server 3 (reported by it).
  Postoffice* victim = cluster_->server(echoed ? 3 : 2);
  cluster_->KillByHeartbeat(victim);
  EXPECT_TRUE(log.Find("that data is lost").empty());
  Node* scheduler = cluster_->scheduler()->node();
  EXPECT_FALSE(scheduler->IsAlive(victim->node()->my_id()));
  EXPECT_EQ(scheduler->key_ring()->num_servers(), 2);
  PushOnes(kKeys);
  EXPECT_EQ(Pull(kKeys), std::vector<float>(kKeys.size(), 2.0f));
}

INSTANTIATE_TEST_SUITE_P(HoldersFrom, RestartKeepsCopiesTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Echoes" : "OwnReports";
                         });

// A member that does not re-register within the heartbeat timeout is
// declared dead by the restarted scheduler, as after silence.
TEST_F(SchedulerRestartTest, AMemberThatDoesNotReRegisterIsDeclaredDead) {
  Form(1, 2);
  std::future<Status> started = Restart();
  Postoffice* quiet = cluster_->worker(1);
  members_.pop_back();
  ReRegisterAll();
  ASSERT_TRUE(started.get().ok());
  Node* scheduler = cluster_->scheduler()->node();
  EXPECT_TRUE(scheduler->IsAlive(quiet->node()->my_id()));
  cluster_->clock()->Advance(InProcCluster::kTimeoutMs + 1);
  ReRegisterAll();  // The others beat (and are echoed) at the later time.
  scheduler->CheckLiveness();
  EXPECT_FALSE(scheduler->IsAlive(quiet->node()->my_id()));
  // The run ends as after any death (EMBER_ON_NODE_FAILURE=abort).
  workers_.clear();
  servers_.clear();
  cluster_.reset();
}

// Whoever cannot show the run's key cannot re-register, and a process
// that has it (a member) cannot take another member's id once that member
// has re-registered: it never becomes a member, and the cluster goes on.
TEST_F(SchedulerRestartTest, ForgedReRegistrationsAreRefused) {
  Form(1, 1);
  const int worker = cluster_->worker(0)->node()->my_id();
  const std::string worker_address = cluster_->AddressOf(worker);
  const size_t colon = worker_address.rfind(':');
  std::future<Status> started = Restart();
  Node* scheduler = cluster_->scheduler()->node();

  InProcVan stranger(cluster_->network());
  ASSERT_TRUE(stranger.Start("stranger", 0, [](Message&&) {}).ok());
  ASSERT_TRUE(stranger.Connect(Node::kSchedulerId, "scheduler", 1, "").ok());
  auto forged = [&](const Key128& auth, const std::string& process_key) {
    Message m;
    m.meta.control = Control::kRejoin;
    m.meta.request = true;
    m.meta.sender = worker;
    m.meta.recipient = Node::kSchedulerId;
    m.meta.process_key = process_key;
    NodeInfo me;
    me.id = worker;
    me.role = Role::kWorker;
    me.rank = 0;
    me.host = worker_address.substr(0, colon);
    me.port = std::stoi(worker_address.substr(colon + 1));
    NodeInfo server;
    server.id = 8;
    server.role = Role::kServer;
    server.rank = 0;
    server.host = "elsewhere";
    server.port = 5;
    m.meta.nodes = {me, server};
    m.meta.ring = KeyRing::EvenSplit({8}, 9).value().ToInfo();
    m.meta.auth = auth;
    return m;
  };
  const std::string stranger_key(kSecretBytes, 'x');
  // Without the run's key (guessed, or none): dropped before the scheduler
  // reads it, so it rebuilds nothing from it.
  for (Key128 auth : {Key128{}, Key128{0x7878787878787878, 0x7878}}) {
    ASSERT_TRUE(stranger.Send(forged(auth, stranger_key)).ok());
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return scheduler->counters().dropped_unauthenticated == 2; }));
  EXPECT_FALSE(scheduler->ready());

  // The real members re-register; then a process holding the run's key
  // claims the worker's id with a process key of its own.
  ReRegisterAll();
  ASSERT_TRUE(started.get().ok());
  StatusOr<std::string> run_key = ReadSecretFile(key_file_);
  ASSERT_TRUE(run_key.ok()) << run_key.status();
  ASSERT_TRUE(
      stranger.Send(forged(ToKey128(run_key.value()), stranger_key)).ok());
  ASSERT_TRUE(WaitUntil(
      [&] { return scheduler->counters().dropped_unauthenticated == 3; }));
  // Its report changed nothing: the ring is the members' (epoch 1, server
  // 8 at its real address), and the worker still hears the scheduler.
  EXPECT_EQ(scheduler->key_ring()->epoch(), 1u);
  EXPECT_NE(scheduler->Address(8), "elsewhere:5");
  ReRegisterAll();
  stranger.Stop();
}

// A restarted scheduler takes the run's key only from a file that nobody
// else can read; without it, it does not start.
TEST_F(SchedulerRestartTest, ARestartNeedsTheRunKeyFile) {
  Form(1, 1);
  ASSERT_EQ(chmod(key_file_.c_str(), 0644), 0);
  std::future<Status> started = Restart();
  Status s = started.get();
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("0600"), std::string::npos) << s;
  EXPECT_NE(s.message().find("EMBER_RUN_KEY_FILE"), std::string::npos) << s;
  ASSERT_EQ(std::remove(key_file_.c_str()), 0);
  cluster_->KillScheduler();
  s = cluster_->RestartScheduler()->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s;
  EXPECT_NE(s.message().find(key_file_), std::string::npos) << s;
  workers_.clear();
  servers_.clear();
  cluster_.reset();
}

}  // namespace
}  // namespace ps
