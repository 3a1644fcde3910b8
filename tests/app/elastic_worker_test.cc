// Elastic workers over the in-process transport (docs/consistency.md,
// "Elastic workers"): a worker that dies is held for its restart or dropped
// from the clocks and barriers, one restarted with its rank
// (EMBER_WORKER_RANK) resumes where it was and its pushes made before it
// died are not applied twice, one that leaves is dropped, one that joins
// takes part from the next clock, and bad joins are refused with the job
// untouched. Heartbeats run on a fake clock: no ports, no sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "message/message.h"
#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "util/mutex.h"

namespace ps {
namespace {

const std::vector<Key> kKeys = {3, 1000, 77777};

// A summing server that logs every push its handle applies: (sender, the
// push's first value), in order.
class LoggingServer {
 public:
  explicit LoggingServer(Postoffice* po) : server_(0, po) {
    server_.set_request_handle([this](const KVMeta& meta,
                                      const KVPairs<float>& data,
                                      KVServer<float>* s) {
      if (meta.push) {
        MutexLock lock(&mu_);
        log_.emplace_back(meta.sender, data.vals.empty() ? 0 : data.vals[0]);
      }
      default_(meta, data, s);
    });
  }
  std::vector<std::pair<int, float>> log() {
    MutexLock lock(&mu_);
    return log_;
  }
  ConsistencyStats stats() const { return server_.consistency_stats(); }

 private:
  KVServerDefaultHandle<float> default_;
  Mutex mu_;
  std::vector<std::pair<int, float>> log_ GUARDED_BY(mu_);
  KVServer<float> server_;
};

class Worker : public KVWorker<float> {
 public:
  using KVWorker<float>::KVWorker;
  Status WaitBounded(int ts) { return SimpleApp::WaitStatus(ts, 30000); }
};

// Worker `rank`'s push of iteration `it`: a value no other push has.
std::vector<float> Values(int rank, int it) {
  return std::vector<float>(kKeys.size(), 100.0f * (rank + 1) + it);
}

class ElasticWorkerTest : public ::testing::Test {
 protected:
  // One server, `workers` workers, bsp; EMBER_WORKER_REJOIN_MS = `hold`.
  void Form(int workers, int hold, const std::string& mode = "bsp") {
    auto config = ConsistencyConfig::Parse(mode);
    ASSERT_TRUE(config.ok());
    cluster_ =
        std::make_unique<InProcCluster>(1, workers, [hold, config](Options* o) {
          o->replicas = 0;
          o->worker_rejoin_ms = hold;
          o->consistency = *config;
        });
    cluster_->Start();
    server_ = std::make_unique<LoggingServer>(cluster_->server(0));
    for (int r = 0; r < workers; ++r) {
      workers_.push_back(std::make_unique<Worker>(0, 0, cluster_->worker(r)));
    }
    cluster_->server(0)->node()->SetWorkerChangeCallback(
        [this](int id, WorkerEvent event, int n) {
          MutexLock lock(&notes_mu_);
          notes_.emplace_back(id, event, n);
        });
  }
  void TearDown() override {
    workers_.clear();
    server_.reset();
    cluster_.reset();
  }

  static void Ok(Worker* w, int ts) {
    Status s = w->WaitBounded(ts);
    ASSERT_TRUE(s.ok()) << s;
  }
  // One iteration of worker `w` (rank `rank`): push, then Clock.
  static void Iterate(Worker* w, int rank, int it) {
    Ok(w, w->Push(kKeys, Values(rank, it)));
    Ok(w, w->Clock());
  }
  // The pulled value of the first key.
  static float Pull(Worker* w) {
    std::vector<float> out;
    Ok(w, w->Pull(kKeys, &out));
    return out.empty() ? -1 : out[0];
  }

  // Whether the server's node has called back with `event`.
  bool Heard(WorkerEvent event) {
    for (const auto& n : notes()) {
      if (std::get<1>(n) == event) return true;
    }
    return false;
  }
  std::vector<std::tuple<int, WorkerEvent, int>> notes() {
    MutexLock lock(&notes_mu_);
    return notes_;
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::unique_ptr<LoggingServer> server_;
  std::vector<std::unique_ptr<Worker>> workers_;
  Mutex notes_mu_;
  std::vector<std::tuple<int, WorkerEvent, int>> notes_ GUARDED_BY(notes_mu_);
};

// Worker 1 pushes iteration 1 and dies before its Clock. Its rank is held:
// worker 0's pull of iteration 2 waits for it as for a slow worker.
// Restarted with EMBER_WORKER_RANK=1, it learns it resumes at clock 1, does
// iteration 1 again (its push is recognised, not applied again) and goes
// on. The server applies exactly the pushes of an undisturbed run, in the
// same order.
TEST_F(ElasticWorkerTest, BspRestartedWorkerResumesItsRankExactly) {
  Form(2, /*hold=*/3600000);
  Worker* w0 = workers_[0].get();
  Worker* w1 = workers_[1].get();
  Iterate(w0, 0, 0);
  Iterate(w1, 1, 0);
  Ok(w1, w1->Push(kKeys, Values(1, 1)));
  cluster_->KillByHeartbeat(cluster_->worker(1));
  ASSERT_TRUE(WaitUntil([&] { return Heard(WorkerEvent::kAway); }));
  EXPECT_EQ(cluster_->server(0)->node()->num_workers(), 2);  // Held.
  Iterate(w0, 0, 1);
  std::atomic<float> pulled{-1};
  std::thread puller([&] { pulled.store(Pull(w0)); });  // Clock 2.

  Postoffice* back = cluster_->AddWorker(/*join=*/false, /*rank=*/1);
  Status s = back->StartStatus(0, true);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(back->node()->my_id(), Node::WorkerRankToId(1));
  auto nw1 = std::make_unique<Worker>(0, 0, back);
  StatusOr<int64_t> clock = nw1->JoinClock();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 1);
  EXPECT_EQ(pulled.load(), -1);  // Still waiting for worker 1.
  Iterate(nw1.get(), 1, 1);      // Iteration 1 again.
  puller.join();
  const float after1 = 300 + 302;  // Iterations 0 and 1.
  EXPECT_EQ(pulled.load(), after1);
  Iterate(w0, 0, 2);
  Iterate(nw1.get(), 1, 2);
  EXPECT_EQ(Pull(w0), after1 + 100 + 200 + 4);

  const std::vector<std::pair<int, float>> expected = {
      {9, 100}, {11, 200}, {9, 101}, {11, 201}, {9, 102}, {11, 202}};
  EXPECT_EQ(server_->log(), expected);
  EXPECT_EQ(server_->stats().pushes_redone, 1u);
  EXPECT_EQ(cluster_->server(0)->node()->num_workers(), 2);
  ASSERT_TRUE(WaitUntil([&] { return notes().size() >= 2; }));
  EXPECT_EQ(notes()[1], std::make_tuple(11, WorkerEvent::kBack, 2));
  FinalizeAll(
      {cluster_->scheduler(), cluster_->server(0), cluster_->worker(0), back});
  nw1.reset();
}

// Without a hold (EMBER_WORKER_REJOIN_MS=0) a dead worker is dropped from
// the clocks and the barriers: the others carry on.
TEST_F(ElasticWorkerTest, DeadWorkerIsDroppedFromClocksAndBarriers) {
  Form(2, /*hold=*/0);
  Worker* w0 = workers_[0].get();
  Iterate(w0, 0, 0);
  Iterate(workers_[1].get(), 1, 0);
  cluster_->KillByHeartbeat(cluster_->worker(1));
  Iterate(w0, 0, 1);
  EXPECT_EQ(Pull(w0), 100 + 200 + 101);  // Clock 2: waits for nobody.
  EXPECT_EQ(cluster_->server(0)->node()->num_workers(), 1);
  EXPECT_EQ(cluster_->worker(0)->node()->num_workers(), 1);
  Status s = cluster_->worker(0)->BarrierStatus(0, kWorkerGroup);
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(WaitUntil([&] { return !notes().empty(); }));
  EXPECT_EQ(notes()[0], std::make_tuple(11, WorkerEvent::kGone, 1));
  FinalizeAll(
      {cluster_->scheduler(), cluster_->server(0), cluster_->worker(0)});
}

// A worker that leaves early (Finalize without the barrier) is dropped:
// the other's pulls of later clocks do not wait for it.
TEST_F(ElasticWorkerTest, LeavingWorkerIsDroppedFromTheClocks) {
  Form(2, /*hold=*/-1);
  Worker* w0 = workers_[0].get();
  Iterate(w0, 0, 0);
  Iterate(workers_[1].get(), 1, 0);
  workers_[1].reset();
  ASSERT_TRUE(cluster_->worker(1)->FinalizeStatus(0, false).ok());
  ASSERT_TRUE(WaitUntil(
      [&] { return cluster_->server(0)->node()->num_workers() == 1; }));
  Iterate(w0, 0, 1);
  EXPECT_EQ(Pull(w0), 100 + 200 + 101);
  FinalizeAll(
      {cluster_->scheduler(), cluster_->server(0), cluster_->worker(0)});
}

// A worker that joins (EMBER_JOIN=1) gets the next rank and takes part from
// the clock after the newest: rounds of earlier clocks do not wait for it,
// later ones apply its push after the others', in rank order.
TEST_F(ElasticWorkerTest, JoiningWorkerTakesPartFromTheNextClock) {
  Form(2, /*hold=*/-1);
  Worker* w0 = workers_[0].get();
  Worker* w1 = workers_[1].get();
  Iterate(w0, 0, 0);
  Iterate(w1, 1, 0);  // Both at clock 1.
  Postoffice* joiner = cluster_->AddWorker(/*join=*/true, /*rank=*/-1);
  Status s = joiner->StartStatus(0, true);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(joiner->node()->my_id(), Node::WorkerRankToId(2));
  auto w2 = std::make_unique<Worker>(0, 0, joiner);
  StatusOr<int64_t> clock = w2->JoinClock();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 2);
  EXPECT_EQ(cluster_->server(0)->node()->num_workers(), 3);
  EXPECT_EQ(joiner->node()->num_workers(), 3);
  Iterate(w0, 0, 1);  // Clock 1: without the joiner.
  Iterate(w1, 1, 1);
  Ok(w2.get(), w2->Push(kKeys, Values(2, 2)));  // Clock 2: waits for them.
  Iterate(w0, 0, 2);
  Ok(w1, w1->Push(kKeys, Values(1, 2)));
  Ok(w2.get(), w2->Clock());
  Ok(w1, w1->Clock());
  EXPECT_EQ(Pull(w2.get()), 300 + 302 + 606);
  const std::vector<std::pair<int, float>> expected = {
      {9, 100}, {11, 200}, {9, 101}, {11, 201}, {9, 102}, {11, 202}, {13, 302}};
  EXPECT_EQ(server_->log(), expected);
  FinalizeAll({cluster_->scheduler(), cluster_->server(0), cluster_->worker(0),
               cluster_->worker(1), joiner});
  w2.reset();
}

// Two nodes claiming one rank, a rank out of range, a joiner configured
// for another cluster size: refused, with a reason, and the job goes on
// untouched.
TEST_F(ElasticWorkerTest, BadClaimsAreRefused) {
  Form(2, /*hold=*/3600000);
  Postoffice* taken = cluster_->AddWorker(false, 0);
  Status s = taken->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("held by a live worker"), std::string::npos) << s;
  Postoffice* out = cluster_->AddWorker(false, 5);
  s = out->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s;
  Postoffice* wrong =
      cluster_->AddWorker(true, -1, [](Options* o) { o->num_servers = 3; });
  s = wrong->StartStatus(0, true);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_NE(s.message().find("DMLC_NUM_SERVER=3"), std::string::npos) << s;
  Iterate(workers_[0].get(), 0, 0);
  Iterate(workers_[1].get(), 1, 0);
  EXPECT_EQ(Pull(workers_[0].get()), 300);
  EXPECT_EQ(cluster_->server(0)->node()->num_workers(), 2);
  EXPECT_TRUE(notes().empty());
  FinalizeAll({cluster_->scheduler(), cluster_->server(0), cluster_->worker(0),
               cluster_->worker(1)});
}

}  // namespace
}  // namespace ps
