// The consistency modes end to end over the in-process transport: workers
// in threads, servers with the summing default handle. What a worker sees
// is checked from the values it pulls, not from the controller's books.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ps/ps.h"
#include "testutil/inproc_cluster.h"

namespace ps {
namespace {

// Worker w's counter key, and a key every worker adds to.
Key SlotKey(int w) { return 1000003ull * (w + 1); }
constexpr Key kSharedKey = 77;

class ConsistencyClusterTest : public ::testing::Test {
 protected:
  void Form(int servers, int workers, const std::string& mode,
            FailurePolicy policy = FailurePolicy::kAbort) {
    cluster_ = std::make_unique<InProcCluster>(
        servers, workers, [policy](Options* o) { o->failure_policy = policy; });
    cluster_->Start();
    for (int i = 0; i < servers; ++i) {
      auto s = std::make_unique<KVServer<float>>(0, cluster_->server(i));
      ASSERT_TRUE(s->SetConsistency(mode).ok());
      s->set_request_handle(KVServerDefaultHandle<float>());
      servers_.push_back(std::move(s));
    }
    for (int r = 0; r < workers; ++r) {
      workers_.push_back(
          std::make_unique<KVWorker<float>>(0, 0, cluster_->worker(r)));
    }
  }
  void TearDown() override {
    if (!cluster_) return;
    workers_.clear();
    if (finalize_) cluster_->Finalize();
    servers_.clear();
    cluster_.reset();
  }
  std::vector<Key> AllKeys() const {
    std::vector<Key> keys{kSharedKey};
    for (size_t w = 0; w < workers_.size(); ++w) keys.push_back(SlotKey(w));
    std::sort(keys.begin(), keys.end());
    return keys;
  }
  // One iteration's pull of every key: value by key.
  std::map<Key, float> PullAll(KVWorker<float>* w) {
    std::vector<Key> keys = AllKeys();
    std::vector<float> vals;
    Status s = w->WaitStatus(w->Pull(keys, &vals));
    EXPECT_TRUE(s.ok()) << s;
    std::map<Key, float> m;
    for (size_t i = 0; i < keys.size() && i < vals.size(); ++i) {
      m[keys[i]] = vals[i];
    }
    return m;
  }
  // Adds one to this worker's slot and to the shared key.
  void PushOne(KVWorker<float>* w, int rank) {
    std::vector<Key> keys{kSharedKey, SlotKey(rank)};
    std::sort(keys.begin(), keys.end());
    EXPECT_TRUE(w->WaitStatus(w->Push(keys, {1.0f, 1.0f})).ok());
  }
  // Runs fn(rank) on one thread per worker.
  void RunWorkers(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < workers_.size(); ++r) {
      threads.emplace_back(fn, static_cast<int>(r));
    }
    for (auto& t : threads) t.join();
  }
  // Keeps a worker busy for a while without sleeping.
  static void Spin(int n) {
    for (int i = 0; i < n; ++i) std::this_thread::yield();
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<KVServer<float>>> servers_;
  std::vector<std::unique_ptr<KVWorker<float>>> workers_;
  bool finalize_ = true;
};

TEST_F(ConsistencyClusterTest, BspEveryWorkerSeesExactlyThePreviousIteration) {
  Form(2, 3, "bsp");
  constexpr int kIterations = 12;
  std::atomic<int> violations{0};
  RunWorkers([&](int rank) {
    KVWorker<float>* w = workers_[rank].get();
    for (int c = 0; c < kIterations; ++c) {
      auto v = PullAll(w);
      for (size_t p = 0; p < workers_.size(); ++p) {
        if (v[SlotKey(p)] != c) ++violations;
      }
      if (v[kSharedKey] != 3.0f * c) ++violations;
      if (rank == 2) Spin(2000);  // The slow one.
      PushOne(w, rank);
      EXPECT_TRUE(w->WaitStatus(w->Clock()).ok());
    }
  });
  EXPECT_EQ(violations.load(), 0);
  uint64_t waited = 0;
  for (auto& s : servers_) waited += s->consistency_stats().pulls_waited;
  EXPECT_GT(waited, 0u);  // Fast workers really were held back.
}

TEST_F(ConsistencyClusterTest, SspNoWorkerSeesAPeerMoreThanSBehind) {
  constexpr int kStaleness = 2;
  Form(2, 3, "ssp:2");
  constexpr int kIterations = 15;
  std::atomic<int> violations{0};
  RunWorkers([&](int rank) {
    KVWorker<float>* w = workers_[rank].get();
    for (int c = 0; c < kIterations; ++c) {
      auto v = PullAll(w);
      for (size_t p = 0; p < workers_.size(); ++p) {
        // Every push of iterations < c - s is visible.
        if (v[SlotKey(p)] < c - kStaleness) ++violations;
      }
      if (v[SlotKey(rank)] != c) ++violations;  // Its own, all applied.
      if (rank == 0) Spin(3000);
      PushOne(w, rank);
      EXPECT_TRUE(w->WaitStatus(w->Clock()).ok());
    }
  });
  EXPECT_EQ(violations.load(), 0);
  for (auto& s : servers_) {
    EXPECT_LE(s->consistency_stats().staleness_max, kStaleness);
  }
}

TEST_F(ConsistencyClusterTest, AspFastWorkersDoNotWaitForTheSlowOne) {
  Form(1, 3, "asp");
  constexpr int kIterations = 20;
  std::promise<void> fast_done[2];
  std::atomic<int> finished_fast{0};
  RunWorkers([&](int rank) {
    KVWorker<float>* w = workers_[rank].get();
    if (rank == 2) {
      // The slow worker finishes one iteration, then waits until both fast
      // ones have finished all of theirs: only possible if they never wait
      // for it.
      PullAll(w);
      PushOne(w, rank);
      EXPECT_TRUE(w->WaitStatus(w->Clock()).ok());
      for (auto& p : fast_done) {
        ASSERT_EQ(p.get_future().wait_for(std::chrono::seconds(30)),
                  std::future_status::ready);
      }
      auto v = PullAll(w);
      EXPECT_EQ(v[SlotKey(0)], kIterations);
      EXPECT_EQ(v[SlotKey(2)], 1);
      return;
    }
    for (int c = 0; c < kIterations; ++c) {
      PullAll(w);
      PushOne(w, rank);
      EXPECT_TRUE(w->WaitStatus(w->Clock()).ok());
    }
    ++finished_fast;
    fast_done[rank].set_value();
  });
  EXPECT_EQ(finished_fast.load(), 2);
}

TEST_F(ConsistencyClusterTest, BspWithoutClockSumsEveryWorkersKthPush) {
  // An unchanged ps-lite program (no Clock) gets dist_sync from the mode.
  Form(2, 3, "bsp");
  constexpr int kRounds = 8;
  std::atomic<int> violations{0};
  RunWorkers([&](int rank) {
    KVWorker<float>* w = workers_[rank].get();
    std::vector<Key> keys{kSharedKey, SlotKey(0)};
    std::sort(keys.begin(), keys.end());
    for (int k = 0; k < kRounds; ++k) {
      if (rank == 1) Spin(1000);
      std::vector<float> vals(2, static_cast<float>(rank + 1));
      std::vector<float> out;
      EXPECT_TRUE(w->WaitStatus(w->PushPull(keys, vals, &out)).ok());
      // 1 + 2 + 3 per round, rounds 0..k.
      for (float v : out) {
        if (v != 6.0f * (k + 1)) ++violations;
      }
    }
  });
  EXPECT_EQ(violations.load(), 0);
}

TEST_F(ConsistencyClusterTest, BspGoesOnWithoutADeadWorker) {
  Form(1, 2, "bsp", FailurePolicy::kContinue);
  finalize_ = false;  // A worker is gone: no final barrier.
  KVWorker<float>* w = workers_[0].get();
  PushOne(w, 0);
  ASSERT_TRUE(w->WaitStatus(w->Clock()).ok());
  std::vector<float> vals;
  int ts = w->Pull(AllKeys(), &vals);  // Waits for worker 1's iteration 0.
  cluster_->KillByHeartbeat(cluster_->worker(1));
  ASSERT_TRUE(w->WaitStatus(ts).ok());
  // Worker 0's own push is in; worker 1 never pushed.
  EXPECT_EQ(vals, (std::vector<float>{1, 1, 0}));
  EXPECT_EQ(servers_[0]->consistency_stats().live_workers, 1);
}

TEST_F(ConsistencyClusterTest, UnderAbortAWaitingPullFailsNamingTheDeadWorker) {
  Form(1, 2, "ssp:0");
  finalize_ = false;
  KVWorker<float>* w = workers_[0].get();
  ASSERT_TRUE(w->WaitStatus(w->Clock()).ok());
  std::vector<float> vals;
  int ts = w->Pull(AllKeys(), &vals);
  cluster_->KillByHeartbeat(cluster_->worker(1));
  Status s = w->WaitStatus(ts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("worker 1"), std::string::npos) << s;
  ASSERT_TRUE(WaitUntil(
      [&] { return servers_[0]->consistency_stats().pulls_failed == 1; }));
}

TEST_F(ConsistencyClusterTest, SetConsistencyRefusesBadSpecsAndLateChanges) {
  Form(1, 1, "asp");
  EXPECT_FALSE(servers_[0]->SetConsistency("sometimes").ok());
  KVWorker<float>* w = workers_[0].get();
  PushOne(w, 0);
  Status late = servers_[0]->SetConsistency("bsp");
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("before the first request"), std::string::npos);
  EXPECT_TRUE(servers_[0]->SetConsistency("asp").ok());
}

}  // namespace
}  // namespace ps
