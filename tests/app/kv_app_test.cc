#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <random>

#include "app/app_impl.h"
#include "node/customer.h"
#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"
#include "util/mutex.h"

namespace ps {
namespace {

// Servers with the summing default handle, created and destroyed with the
// test.
class KVAppTest : public ::testing::Test {
 protected:
  void Form(int servers, int workers,
            const std::function<void(Options*)>& tweak = nullptr) {
    cluster_ = std::make_unique<InProcCluster>(servers, workers, tweak);
    cluster_->Start();
    for (int i = 0; i < servers; ++i) {
      auto s = std::make_unique<KVServer<float>>(0, cluster_->server(i));
      s->set_request_handle(KVServerDefaultHandle<float>());
      servers_.push_back(std::move(s));
    }
  }
  void TearDown() override {
    if (!cluster_) return;
    workers_.clear();
    cluster_->Finalize();
    servers_.clear();
    cluster_.reset();
  }
  // Server `rank`'s handle drops every request: it never answers.
  void Silence(int rank) {
    servers_[rank]->set_request_handle(
        [](const KVMeta&, const KVPairs<float>&, KVServer<float>*) {});
  }
  // Server `rank`'s handle keeps every request unanswered until Answer.
  void Hold(int rank) {
    servers_[rank]->set_request_handle(
        [this](const KVMeta& meta, const KVPairs<float>&, KVServer<float>*) {
          MutexLock lock(&held_mu_);
          held_.push_back(meta);
        });
  }
  size_t HeldCount() {
    MutexLock lock(&held_mu_);
    return held_.size();
  }
  // Answers (empty) every request server `rank` holds.
  void Answer(int rank) {
    std::vector<KVMeta> held;
    {
      MutexLock lock(&held_mu_);
      held.swap(held_);
    }
    for (const KVMeta& meta : held) servers_[rank]->Response(meta);
  }
  // Ends a test in which a member died: no final barrier.
  void DropClusterWithoutBarrier() {
    workers_.clear();
    servers_.clear();
    cluster_.reset();
  }
  // Bytes node `p` has received so far (counted on receipt, before a
  // message is handled).
  static uint64_t ReceivedBytes(Postoffice* p) {
    return p->node()->van()->counters().received_bytes.load();
  }
  KVWorker<float>* Worker(int rank) {
    while (static_cast<int>(workers_.size()) <= rank) {
      int r = static_cast<int>(workers_.size());
      workers_.push_back(
          std::make_unique<KVWorker<float>>(0, 0, cluster_->worker(r)));
    }
    return workers_[rank].get();
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<KVServer<float>>> servers_;
  std::vector<std::unique_ptr<KVWorker<float>>> workers_;
  Mutex held_mu_;
  std::vector<KVMeta> held_ GUARDED_BY(held_mu_);
};

std::vector<Key> RandomKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Key> keys(n);
  for (auto& k : keys) k = rng();
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

TEST_F(KVAppTest, PushesFromEveryWorkerAreSummedExactly) {
  Form(3, 2);
  std::vector<Key> keys = RandomKeys(1000, 1);
  std::vector<float> vals(keys.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i % 97);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    KVWorker<float>* kv = Worker(w);
    threads.emplace_back([&, kv] {
      for (int rep = 0; rep < 5; ++rep) {
        ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, vals)).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<float> out;
  ASSERT_TRUE(Worker(0)->WaitStatus(Worker(0)->Pull(keys, &out)).ok());
  ASSERT_EQ(out.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(out[i], 10 * vals[i]);
}

// Server rank r receives exactly the keys of GetServerKeyRanges()[r].
TEST_F(KVAppTest, EachServerReceivesTheKeysOfItsRange) {
  Form(3, 1);
  const std::vector<Range>& ranges = cluster_->worker(0)->GetServerKeyRanges();
  ASSERT_EQ(ranges.size(), 3u);
  // One slot per server, each written only by its server's thread.
  std::vector<std::vector<Key>> seen(3);
  for (int i = 0; i < 3; ++i) {
    servers_[i]->set_request_handle([&seen, i](const KVMeta& m,
                                               const KVPairs<float>& d,
                                               KVServer<float>* s) {
      seen[i].insert(seen[i].end(), d.keys.begin(), d.keys.end());
      s->Response(m);
    });
  }
  // MXNet-style keys (ranges[r].begin() + k) and keys spread over the
  // key space, the ends included.
  std::vector<Key> keys = RandomKeys(3000, 5);
  for (int r = 0; r < 3; ++r) {
    for (Key k = 0; k < 10; ++k) keys.push_back(ranges[r].begin() + k);
    keys.push_back(ranges[r].end() - 1);
  }
  keys.push_back(kMaxKey);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<float> vals(keys.size(), 1);
  ASSERT_TRUE(Worker(0)->WaitStatus(Worker(0)->Push(keys, vals)).ok());
  size_t total = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_GT(seen[r].size(), 900u) << "server " << r;
    for (Key k : seen[r]) {
      const bool last_key = r == 2 && k == kMaxKey;  // ps-lite: no one's
      EXPECT_TRUE(last_key || (k >= ranges[r].begin() && k < ranges[r].end()))
          << "server " << r << " got key " << k;
    }
    total += seen[r].size();
  }
  EXPECT_EQ(total, keys.size());
}

// Small integer keys all fall in server 0's range unless spread placement
// is chosen, which mixes them over every server.
TEST_F(KVAppTest, SpreadPlacementSpreadsSmallKeys) {
  for (Placement placement : {Placement::kRange, Placement::kSpread}) {
    SCOPED_TRACE(PlacementName(placement));
    cluster_ = std::make_unique<InProcCluster>(
        3, 1, [placement](Options* o) { o->placement = placement; });
    cluster_->Start();
    std::vector<int> seen(3, 0);
    for (int i = 0; i < 3; ++i) {
      auto s = std::make_unique<KVServer<float>>(0, cluster_->server(i));
      s->set_request_handle([&seen, i](const KVMeta& m, const KVPairs<float>& d,
                                       KVServer<float>* server) {
        seen[i] += static_cast<int>(d.keys.size());
        KVPairs<float> res;
        res.keys = d.keys;
        res.vals = SArray<float>(d.keys.size());
        for (size_t j = 0; j < d.keys.size(); ++j) {
          res.vals[j] = static_cast<float>(d.keys[j]);
        }
        server->Response(m, m.pull ? res : KVPairs<float>());
      });
      servers_.push_back(std::move(s));
    }
    std::vector<Key> keys(3000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    std::vector<float> out;
    ASSERT_TRUE(Worker(0)->WaitStatus(Worker(0)->Pull(keys, &out)).ok());
    ASSERT_EQ(out.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(out[i], static_cast<float>(i));  // in the caller's order
    }
    if (placement == Placement::kRange) {
      EXPECT_EQ(seen[0], 3000);
    } else {
      for (int i = 0; i < 3; ++i) {
        EXPECT_GT(seen[i], 900) << "server " << i;
        EXPECT_LT(seen[i], 1100) << "server " << i;
      }
    }
    TearDown();
  }
}

TEST_F(KVAppTest, VariableLengthValuesRoundTrip) {
  Form(2, 1);
  std::vector<Key> keys = RandomKeys(200, 2);
  std::vector<int> lens(keys.size());
  std::vector<float> vals;
  for (size_t i = 0; i < keys.size(); ++i) {
    lens[i] = static_cast<int>(i % 5);  // Including zero-length keys.
    for (int j = 0; j < lens[i]; ++j)
      vals.push_back(static_cast<float>(i * 10 + j));
  }
  KVWorker<float>* kv = Worker(0);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, vals, lens)).ok());
  std::vector<float> out;
  std::vector<int> out_lens;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out, &out_lens)).ok());
  // Zero-length keys were created with length 0 by the push.
  EXPECT_EQ(out_lens, lens);
  EXPECT_EQ(out, vals);
}

TEST_F(KVAppTest, SeveralValuesPerKeyAndPushPull) {
  Form(2, 1);
  std::vector<Key> keys = RandomKeys(100, 3);
  std::vector<float> vals(keys.size() * 4);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  KVWorker<float>* kv = Worker(0);
  std::vector<float> outs;
  ASSERT_TRUE(kv->WaitStatus(kv->PushPull(keys, vals, &outs)).ok());
  ASSERT_TRUE(kv->WaitStatus(kv->PushPull(keys, vals, &outs)).ok());
  ASSERT_EQ(outs.size(), vals.size());
  for (size_t i = 0; i < vals.size(); ++i) EXPECT_EQ(outs[i], 2 * vals[i]);
}

TEST_F(KVAppTest, ZeroCopyPullAndCallbackRunsBeforeWait) {
  Form(1, 1);
  KVWorker<float>* kv = Worker(0);
  SArray<Key> keys = {1, 2, 3};
  SArray<float> vals = {1.5f, 2.5f, 3.5f};
  ASSERT_TRUE(kv->WaitStatus(kv->ZPush(keys, vals)).ok());
  SArray<float> out;
  bool called = false;
  int ts = kv->ZPull(keys, &out, nullptr, 0, [&] { called = true; });
  ASSERT_TRUE(kv->WaitStatus(ts).ok());
  EXPECT_TRUE(called);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[2], 3.5f);
}

// Requests waited for one at a time (the caller and the server's thread
// then receive for themselves, Customer::Wait and CoReceive), in bursts
// (queued as before) and with callbacks (the response is handled on the
// worker's app thread, which wakes the caller), interleaved: every push is
// applied once and every pull sees all earlier pushes.
TEST_F(KVAppTest, OneAtATimeBurstsAndCallbacksInterleaveCorrectly) {
  for (int servers : {1, 2}) {
    SCOPED_TRACE(servers);
    Form(servers, 1);
    KVWorker<float>* kv = Worker(0);
    std::vector<Key> keys = RandomKeys(50, 7);
    std::vector<float> ones(keys.size(), 1.0f);
    float expected = 0;
    for (int round = 0; round < 200; ++round) {
      if (round % 10 == 3) {
        std::vector<int> burst;
        for (int i = 0; i < 8; ++i) burst.push_back(kv->Push(keys, ones));
        for (int ts : burst) ASSERT_TRUE(kv->WaitStatus(ts).ok());
        expected += 8;
      } else if (round % 10 == 7) {
        std::atomic<int> calls{0};
        int ts = kv->Push(keys, ones, {}, 0, [&] { calls++; });
        ASSERT_TRUE(kv->WaitStatus(ts).ok());
        EXPECT_EQ(calls.load(), 1);
        expected += 1;
      } else {
        ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, ones)).ok());
        expected += 1;
      }
      std::vector<float> out;
      ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
      ASSERT_EQ(out.size(), keys.size());
      for (float v : out) ASSERT_EQ(v, expected);
    }
    // A server goes away while its thread waits inside the van.
    servers_.clear();
    TearDown();
  }
}

// Two threads of one worker each keep a window of requests in flight and
// wait for the oldest, some with callbacks. One waiting caller at a time
// receives inside the van with the others still open (Customer::Wait): it
// handles the other thread's responses too, and is woken only by its own
// request's completion elsewhere (a callback's, on the app thread). Every
// push is applied once, every callback runs before its Wait returns.
TEST_F(KVAppTest, WindowsOfRequestsFromTwoThreadsCompleteExactly) {
  Form(2, 1);
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys = RandomKeys(50, 9);
  std::vector<float> ones(keys.size(), 1.0f);
  constexpr int kWindow = 8;
  constexpr int kRequests = 300;
  std::atomic<int> calls{0};
  std::atomic<int> with_callbacks{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      // Timestamp, and the flag its callback sets (none: no callback).
      std::deque<std::pair<int, std::shared_ptr<std::atomic<bool>>>> open;
      auto oldest = [&] {
        const Status status = kv->WaitStatus(open.front().first);
        EXPECT_TRUE(status.ok()) << status;
        if (open.front().second) {
          EXPECT_TRUE(open.front().second->load()) << "callback after Wait";
        }
        open.pop_front();
      };
      for (int i = 0; i < kRequests; ++i) {
        if (open.size() == kWindow) oldest();
        std::shared_ptr<std::atomic<bool>> called;
        int ts;
        if ((i + t) % 3 == 0) {
          called = std::make_shared<std::atomic<bool>>(false);
          with_callbacks++;
          ts = kv->Push(keys, ones, {}, 0, [&calls, called] {
            calls++;
            called->store(true);
          });
        } else {
          ts = kv->Push(keys, ones);
        }
        open.emplace_back(ts, called);
      }
      while (!open.empty()) oldest();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), with_callbacks.load());
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  ASSERT_EQ(out.size(), keys.size());
  for (float v : out) ASSERT_EQ(v, 2.0f * kRequests);
}

TEST_F(KVAppTest, EmptyRequestCompletesAtOnce) {
  Form(2, 1);
  KVWorker<float>* kv = Worker(0);
  std::vector<float> out;
  bool called = false;
  int ts = kv->Pull({}, &out, nullptr, 0, [&] { called = true; });
  EXPECT_TRUE(kv->WaitStatus(ts).ok());
  EXPECT_TRUE(called);
  EXPECT_TRUE(out.empty());
}

TEST_F(KVAppTest, BadArgumentsFailTheRequestNotTheProcess) {
  Form(2, 1);
  KVWorker<float>* kv = Worker(0);
  Status unsorted = kv->WaitStatus(kv->Push({5, 3}, {1, 2}));
  EXPECT_EQ(unsorted.code(), Status::Code::kInvalidArgument) << unsorted;
  Status uneven = kv->WaitStatus(kv->Push({1, 2}, {1, 2, 3}));
  EXPECT_EQ(uneven.code(), Status::Code::kInvalidArgument) << uneven;
  Status lens = kv->WaitStatus(kv->Push({1, 2}, {1, 2, 3}, {1, 1}));
  EXPECT_EQ(lens.code(), Status::Code::kInvalidArgument) << lens;
  std::vector<float> wrong_size(7);
  Status out = kv->WaitStatus(kv->Pull({1, 2}, &wrong_size));
  EXPECT_EQ(out.code(), Status::Code::kInvalidArgument) << out;
  // The node is still fine.
  EXPECT_TRUE(kv->WaitStatus(kv->Push({1, 2}, {1, 2})).ok());
}

// The worker checks keys, values and lens in the same pass that slices the
// request; with one server it takes a shorter path. Both refuse every bad
// shape before sending anything.
TEST_F(KVAppTest, EveryBadShapeIsRefusedWithOneServerAndWithSeveral) {
  for (int servers : {1, 3}) {
    SCOPED_TRACE("servers=" + std::to_string(servers));
    TearDown();
    workers_.clear();
    servers_.clear();
    Form(servers, 1);
    KVWorker<float>* kv = Worker(0);
    auto code = [&](int ts) { return kv->WaitStatus(ts).code(); };
    const auto bad = Status::Code::kInvalidArgument;
    EXPECT_EQ(code(kv->Push({1, 7, 7}, {1, 2, 3})), bad);        // Duplicate.
    EXPECT_EQ(code(kv->Push({1, 9, 8}, {1, 2, 3})), bad);        // Unsorted.
    EXPECT_EQ(code(kv->Push({1, 2}, {1, 2, 3}, {2, 2})), bad);   // Sum.
    EXPECT_EQ(code(kv->Push({1, 2}, {1, 2, 3}, {4, -1})), bad);  // < 0.
    EXPECT_EQ(code(kv->Push({1, 2}, {1, 2, 3}, {3})), bad);      // Count.
    EXPECT_EQ(code(kv->Push({}, {1})), bad);  // Values without keys.
    std::vector<float> out;
    EXPECT_EQ(code(kv->Pull({4, 2}, &out)), bad);
    // Nothing reached a server: every key is still absent.
    ASSERT_TRUE(
        kv->WaitStatus(kv->Push({1, 2, 3, 7, 8, 9}, {1, 1, 1, 1, 1, 1})).ok());
    ASSERT_TRUE(kv->WaitStatus(kv->Pull({1, 2, 3, 7, 8, 9}, &out)).ok());
    EXPECT_EQ(out, (std::vector<float>{1, 1, 1, 1, 1, 1}));
  }
}

TEST_F(KVAppTest, ServerErrorReachesTheWorker) {
  Form(1, 1);
  servers_[0]->set_request_handle(
      [](const KVMeta& m, const KVPairs<float>&, KVServer<float>* s) {
        s->ResponseError(m, Status::NotFound("no such table"));
      });
  KVWorker<float>* kv = Worker(0);
  Status s = kv->WaitStatus(kv->Push({1}, {1}));
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s;
  EXPECT_EQ(s.message(), "no such table");
}

// A handle that answers a pull with the request's own keys has them left
// out of the response (keys_as_requested); one that answers with a copy of
// them, or with other keys, sends its keys and is checked against them.
TEST_F(KVAppTest, PullAnswersWithAndWithoutTheirKeysAssembleExactly) {
  Form(3, 1);
  const std::vector<Key> keys = RandomKeys(3000, 11);
  std::vector<float> want(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) want[i] = static_cast<float>(i);
  KVWorker<float>* kv = Worker(0);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, want)).ok());
  // The answers carry the values and not the keys: the worker receives
  // about 4 bytes per key, not 12. (Counted on receipt, before a response
  // is handled, so every answer is counted when Wait returns.)
  auto received = [&] { return ReceivedBytes(cluster_->worker(0)); };
  const uint64_t before = received();
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  EXPECT_EQ(out, want);
  const uint64_t pulled = received() - before;
  EXPECT_GE(pulled, keys.size() * sizeof(float));
  EXPECT_LT(pulled, keys.size() * sizeof(float) + 3 * 200) << "keys sent back";
  // Server 1 answers with copies of the keys.
  KVServerDefaultHandle<float> store;
  auto copying = [&store](const KVMeta& m, const KVPairs<float>& d,
                          KVServer<float>* s) {
    if (!m.pull) return store(m, d, s);
    KVPairs<float> res;
    res.keys.CopyFrom(d.keys.data(), d.keys.size());
    res.vals.resize(d.keys.size(), 7.f);
    s->Response(m, res);
  };
  servers_[1]->set_request_handle(copying);
  out.clear();
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  const std::vector<Range>& ranges = cluster_->worker(0)->GetServerKeyRanges();
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool on_1 = keys[i] >= ranges[1].begin() && keys[i] < ranges[1].end();
    ASSERT_EQ(out[i], on_1 ? 7.f : want[i]) << i;
  }
  // Server 1 answers a key it was not asked for: refused, not misplaced.
  servers_[1]->set_request_handle(
      [](const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
        KVPairs<float> res;
        res.keys.CopyFrom(d.keys.data(), d.keys.size());
        res.keys[0] += 1;
        res.vals.resize(d.keys.size(), 7.f);
        s->Response(m, res);
      });
  Status s = kv->WaitStatus(kv->Pull(keys, &out));
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s;
}

// A dense tensor's keys (MXNet/BytePS-style: ranges[r].begin() + k), and
// keys in larger equal steps, travel as key runs: the handles see every
// key, the servers receive about 4 bytes per key instead of 12, and a
// handle that answers a pull with a copy of its keys sends them back as a
// run too.
TEST_F(KVAppTest, KeysInEqualStepsTravelAsRunsAndArriveWhole) {
  Form(2, 1);
  const std::vector<Range>& ranges = cluster_->worker(0)->GetServerKeyRanges();
  // One slot per server, each written only by its server's thread.
  std::vector<std::vector<Key>> seen(2);
  std::vector<KVServerDefaultHandle<float>> stores(2);
  for (int i = 0; i < 2; ++i) {
    servers_[i]->set_request_handle([&seen, &stores, i](const KVMeta& m,
                                                        const KVPairs<float>& d,
                                                        KVServer<float>* s) {
      seen[i].assign(d.keys.begin(), d.keys.end());
      if (!m.pull || i == 0) return stores[i](m, d, s);
      KVPairs<float> res;  // Server 1 answers with a copy of the keys.
      res.keys.CopyFrom(d.keys.data(), d.keys.size());
      std::vector<float> out;
      for (Key k : d.keys) out.push_back(static_cast<float>(k % 1000) + 0.5f);
      res.vals = SArray<float>(out);
      s->Response(m, res);
    });
  }
  const size_t n = 3000;
  std::vector<Key> keys;
  for (int r = 0; r < 2; ++r) {
    for (Key k = 0; k < n; ++k) keys.push_back(ranges[r].begin() + k);
  }
  std::vector<float> vals(keys.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  auto bytes = [&](int rank) { return ReceivedBytes(cluster_->server(rank)); };
  const uint64_t before0 = bytes(0), before1 = bytes(1);
  KVWorker<float>* kv = Worker(0);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, vals)).ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(seen[r].size(), n) << "server " << r;
    for (size_t k = 0; k < n; ++k) {
      ASSERT_EQ(seen[r][k], ranges[r].begin() + k) << "server " << r;
    }
  }
  for (uint64_t got : {bytes(0) - before0, bytes(1) - before1}) {
    EXPECT_GE(got, n * sizeof(float));
    EXPECT_LT(got, n * sizeof(float) + 200) << "keys sent one by one";
  }
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  ASSERT_EQ(out.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const float want =
        i < n ? vals[i] : static_cast<float>(keys[i] % 1000) + 0.5f;
    ASSERT_EQ(out[i], want) << i;
  }
  // A run and scattered keys in one request: server 1's keys (steps of 3,
  // then one far beyond) are no run.
  std::vector<Key> mixed(keys.begin(), keys.begin() + n);
  for (Key k = 0; k < 100; ++k) mixed.push_back(ranges[1].begin() + 3 * k);
  mixed.push_back(ranges[1].begin() + 1300);
  std::vector<float> ones(mixed.size(), 1.f);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(mixed, ones)).ok());
  ASSERT_EQ(seen[1].size(), 101u);
  for (Key k = 0; k < 100; ++k)
    EXPECT_EQ(seen[1][k], ranges[1].begin() + 3 * k);
  EXPECT_EQ(seen[1][100], ranges[1].begin() + 1300);
  out.clear();
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(mixed, &out)).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], vals[i] + 1) << i;
  // Keys in steps of 7 (ps-lite's test_kv_app_benchmark strides its keys
  // so): runs too.
  std::vector<Key> strided;
  for (int r = 0; r < 2; ++r) {
    for (Key k = 0; k < n; ++k) strided.push_back(ranges[r].begin() + 7 * k);
  }
  const uint64_t again0 = bytes(0), again1 = bytes(1);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(strided, vals)).ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(seen[r].size(), n) << "server " << r;
    for (size_t k = 0; k < n; ++k) {
      ASSERT_EQ(seen[r][k], ranges[r].begin() + 7 * k) << "server " << r;
    }
  }
  for (uint64_t got : {bytes(0) - again0, bytes(1) - again1}) {
    EXPECT_LT(got, n * sizeof(float) + 200) << "keys sent one by one";
  }
}

// Key caching (docs/protocol.md, "Key caching"): a key set sent again goes
// as a signature once the server was asked to keep it, and arrives whole.
TEST_F(KVAppTest, RepeatedKeySetsGoAsSignaturesAndArriveWhole) {
  Form(2, 1);
  std::vector<std::vector<Key>> seen(2);
  std::vector<KVServerDefaultHandle<float>> stores(2);
  for (int i = 0; i < 2; ++i) {
    servers_[i]->set_request_handle([&seen, &stores, i](const KVMeta& m,
                                                        const KVPairs<float>& d,
                                                        KVServer<float>* s) {
      seen[i].assign(d.keys.begin(), d.keys.end());
      stores[i](m, d, s);
    });
  }
  const std::vector<Key> keys = RandomKeys(4000, 7);
  std::vector<float> vals(keys.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i % 97);
  auto bytes = [&](int rank) { return ReceivedBytes(cluster_->server(rank)); };
  KVWorker<float>* kv = Worker(0);
  const int rounds = 5;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t before0 = bytes(0), before1 = bytes(1);
    ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, vals)).ok());
    size_t got_keys = 0;
    for (int r = 0; r < 2; ++r) {
      got_keys += seen[r].size();
      EXPECT_TRUE(std::is_sorted(seen[r].begin(), seen[r].end()));
    }
    std::vector<Key> all(seen[0]);
    all.insert(all.end(), seen[1].begin(), seen[1].end());
    ASSERT_EQ(all, keys) << "round " << round;
    const uint64_t sent = (bytes(0) - before0) + (bytes(1) - before1);
    if (round < 2) {
      // Seen once, then asked to keep: the keys travel.
      EXPECT_GE(sent, keys.size() * (sizeof(Key) + sizeof(float)));
    } else {
      EXPECT_GE(sent, keys.size() * sizeof(float));
      EXPECT_LT(sent, keys.size() * sizeof(float) + 600)
          << "round " << round << ": the keys travelled again";
    }
  }
  std::vector<float> out;
  for (int round = 0; round < 3; ++round) {
    out.clear();
    ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
    ASSERT_EQ(out.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(out[i], rounds * vals[i]) << i;
    }
  }
}

// A signature the server no longer holds (it dropped the set for newer
// ones) is refused, and the worker sends the part again with its keys:
// every push counts once.
TEST_F(KVAppTest, ASignatureTheServerDroppedIsSentAgainWithItsKeys) {
  Form(1, 1, [](Options* o) { o->key_cache_mb = 1; });
  KVWorker<float>* kv = Worker(0);
  const std::vector<Key> first = RandomKeys(1000, 1);
  const std::vector<float> ones(first.size(), 1.f);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(kv->WaitStatus(kv->Push(first, ones)).ok());
  }
  // 1 MiB holds 131 sets of 1000 keys: 200 others, each pushed twice (kept
  // on the second), push `first` out.
  for (uint64_t seed = 100; seed < 300; ++seed) {
    const std::vector<Key> other = RandomKeys(1000, seed);
    const std::vector<float> zero(other.size(), 0.f);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(kv->WaitStatus(kv->Push(other, zero)).ok());
    }
  }
  auto received = [&] { return ReceivedBytes(cluster_->server(0)); };
  const uint64_t before = received();
  ASSERT_TRUE(kv->WaitStatus(kv->Push(first, ones)).ok());
  EXPECT_GE(received() - before, first.size() * sizeof(Key))
      << "the part did not go again with its keys";
  const uint64_t again = received();
  ASSERT_TRUE(kv->WaitStatus(kv->Push(first, ones)).ok());
  EXPECT_LT(received() - again, first.size() * sizeof(float) + 300)
      << "kept again after the refusal, it goes as a signature";
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(first, &out)).ok());
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(out[i], 5.f) << i;
}

// A server that keeps no keys (EMBER_KEY_CACHE_MB=0) refuses a signature
// once, saying so; the worker then sends it keys.
TEST_F(KVAppTest, AServerThatKeepsNoKeysGetsKeysAfterOneRefusal) {
  Form(2, 1, [](Options* o) {
    if (o->role == Role::kServer) o->key_cache_mb = 0;
  });
  KVWorker<float>* kv = Worker(0);
  const std::vector<Key> keys = RandomKeys(2000, 3);
  const std::vector<float> ones(keys.size(), 1.f);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, ones)).ok()) << i;
  }
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(out[i], 6.f) << i;
}

TEST_F(KVAppTest, MismatchedValueShapeIsRefusedWhole) {
  Form(1, 1);
  KVWorker<float>* kv = Worker(0);
  ASSERT_TRUE(kv->WaitStatus(kv->Push({1, 2}, {1, 1})).ok());
  // Key 2 holds one value; a push of two values per key is refused and
  // key 1 is left untouched.
  Status s = kv->WaitStatus(kv->Push({1, 2}, {5, 5, 5, 5}));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull({1, 2}, &out)).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 1}));
}

TEST_F(KVAppTest, CustomSlicerSendsSliceIToServerRankI) {
  Form(2, 1);
  // One slot per server, each written only by its server's thread.
  std::vector<std::vector<Key>> seen(2);
  for (int i = 0; i < 2; ++i) {
    servers_[i]->set_request_handle([&seen, i](const KVMeta& m,
                                               const KVPairs<float>& d,
                                               KVServer<float>* s) {
      seen[i].assign(d.keys.begin(), d.keys.end());
      KVPairs<float> res;
      res.keys = d.keys;
      res.vals = SArray<float>(d.keys.size(), static_cast<float>(i));
      s->Response(m, res);
    });
  }
  KVWorker<float>* kv = Worker(0);
  // Everything below 100 to rank 1, the rest to rank 0.
  kv->set_slicer([](const KVPairs<float>& send,
                    const std::vector<Range>& ranges,
                    KVWorker<float>::SlicedKVs* sliced) {
    ASSERT_EQ(ranges.size(), 2u);
    sliced->resize(2);
    size_t split = std::lower_bound(send.keys.begin(), send.keys.end(), 100) -
                   send.keys.begin();
    (*sliced)[1] = {split > 0, KVPairs<float>()};
    (*sliced)[1].second.keys = send.keys.segment(0, split);
    (*sliced)[0] = {split < send.keys.size(), KVPairs<float>()};
    (*sliced)[0].second.keys = send.keys.segment(split, send.keys.size());
  });
  std::vector<float> out;
  ASSERT_TRUE(kv->WaitStatus(kv->Pull({1, 50, 150, 200}, &out)).ok());
  EXPECT_EQ(seen[1], (std::vector<Key>{1, 50}));
  EXPECT_EQ(seen[0], (std::vector<Key>{150, 200}));
  EXPECT_EQ(out, (std::vector<float>{1, 1, 0, 0}));
}

TEST_F(KVAppTest, DeadServerFailsPendingRequestsNamingIt) {
  Form(2, 1);
  Silence(1);
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys = RandomKeys(100, 4);
  std::vector<float> out;
  int ts = kv->Pull(keys, &out);
  cluster_->KillByHeartbeat(cluster_->server(1));
  Status s = kv->WaitStatus(ts);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s;
  // New requests that need the dead server fail at once.
  Status again = kv->WaitStatus(kv->Pull(keys, &out));
  EXPECT_EQ(again.code(), Status::Code::kUnavailable) << again;
  DropClusterWithoutBarrier();
}

// WaitStatus with a timeout gives up on the wait, naming who has not
// answered, but not on the request: its answer completes it later.
TEST_F(KVAppTest, WaitStatusWithATimeoutGivesUpOnTheWaitNotTheRequest) {
  Form(2, 1);
  Hold(1);
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys = RandomKeys(100, 6);
  int ts = kv->Push(keys, std::vector<float>(keys.size(), 1.0f));
  // Once server 0 has answered, only server 1 is named.
  Status s;
  ASSERT_TRUE(WaitUntil([&] {
    s = kv->WaitStatus(ts, 1);
    return s.message().find("server 0") == std::string::npos;
  }));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s;
  ASSERT_TRUE(WaitUntil([&] { return HeldCount() == 1; }));
  Answer(1);
  EXPECT_TRUE(kv->WaitStatus(ts, 60000).ok());
}

// EMBER_REQUEST_TIMEOUT_MS: a request without its answers in time fails,
// naming the server that owes one, and Wait no longer waits; an answer that
// comes after is ignored, and later requests go on.
TEST_F(KVAppTest, ARequestPastTheRequestTimeoutFailsNamingTheServer) {
  Form(2, 1, [](Options* o) { o->request_timeout_ms = 1; });
  Hold(1);
  KVWorker<float>* kv = Worker(0);
  // Keys of server 1 only.
  const Range r = cluster_->worker(0)->GetServerKeyRanges()[1];
  std::vector<Key> keys = {r.begin(), r.begin() + 1, r.end() - 1};
  std::vector<float> out;
  int ts = kv->Pull(keys, &out);
  ASSERT_TRUE(WaitUntil([&] { return HeldCount() == 1; }));
  Node* node = cluster_->worker(0)->node();
  Status s;
  ASSERT_TRUE(WaitUntil([&] {
    node->ExpireRequests();
    s = kv->WaitStatus(ts, 0);
    return s.message().find("EMBER_REQUEST_TIMEOUT_MS") != std::string::npos;
  }));
  // kUnavailable, as for a dead server: kDeadlineExceeded would tell a
  // caller that waits with a timeout to wait again, for ever.
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s;
  EXPECT_EQ(kv->WaitStatus(ts).code(), Status::Code::kUnavailable);
  EXPECT_EQ(kv->WaitStatus(ts, 1).code(), Status::Code::kUnavailable);
  // The held request's answer comes too late and changes nothing.
  Answer(1);
  servers_[1]->set_request_handle(KVServerDefaultHandle<float>());
  std::vector<float> ones(keys.size(), 1.0f);
  ASSERT_TRUE(kv->WaitStatus(kv->Push(keys, ones)).ok());
  ASSERT_TRUE(kv->WaitStatus(kv->Pull(keys, &out)).ok());
  EXPECT_EQ(out, ones);
}

// EMBER_MAX_KEYS_PER_REQUEST: a worker refuses to send more keys, and a
// server configured lower refuses to handle them; both name the setting.
TEST_F(KVAppTest, RequestsWithTooManyKeysAreRefusedNamingTheLimit) {
  Form(1, 1, [](Options* o) {
    o->max_keys_per_request = o->role == Role::kServer ? 100 : 200;
  });
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys(300);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<float> vals(keys.size(), 1.0f);
  Status worker = kv->WaitStatus(kv->Push(keys, vals));
  EXPECT_EQ(worker.code(), Status::Code::kInvalidArgument) << worker;
  EXPECT_NE(worker.message().find("EMBER_MAX_KEYS_PER_REQUEST=200"),
            std::string::npos)
      << worker;
  keys.resize(150);
  vals.resize(150);
  Status server = kv->WaitStatus(kv->Push(keys, vals));
  EXPECT_EQ(server.code(), Status::Code::kInvalidArgument) << server;
  EXPECT_NE(server.message().find("EMBER_MAX_KEYS_PER_REQUEST is 100"),
            std::string::npos)
      << server;
  keys.resize(100);
  vals.resize(100);
  EXPECT_TRUE(kv->WaitStatus(kv->Push(keys, vals)).ok());
}

// EMBER_MAX_FRAME_MB: a node refuses to send a larger frame, and drops one it
// receives (ZeroMQ disconnects the sender) before decoding it.
TEST_F(KVAppTest, FramesLargerThanTheLimitAreNeitherSentNorTaken) {
  Form(1, 1,
       [](Options* o) { o->max_frame_mb = o->role == Role::kServer ? 1 : 2; });
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys{1, 2};
  std::vector<float> big(2 * 400000, 1.0f);  // 3.2 MB
  Status s = kv->WaitStatus(kv->Push(keys, big));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("EMBER_MAX_FRAME_MB=2"), std::string::npos) << s;
  Van* server_van = cluster_->server(0)->node()->van();
  const uint64_t rejected = server_van->counters().rejected_messages;
  std::vector<float> medium(2 * 200000, 1.0f);  // 1.6 MB: the worker sends it
  kv->Push(keys, medium);
  EXPECT_TRUE(WaitUntil([&] {
    return server_van->counters().rejected_messages == rejected + 1;
  }));
  // The server dropped it unread, so the request is never answered: end
  // without the final barrier's wait for it.
  DropClusterWithoutBarrier();
}

// No silent wait: a request that lasts is logged with the servers that owe
// it an answer.
TEST_F(KVAppTest, ARequestWithoutItsAnswersIsLoggedWithWhomItWaitsFor) {
  Form(2, 1, [](Options* o) { o->wait_log_interval_ms = 1; });
  Silence(1);
  KVWorker<float>* kv = Worker(0);
  std::vector<float> out;
  LogCapture log;
  int ts = kv->Pull(RandomKeys(100, 4), &out);
  Node* node = cluster_->worker(0)->node();
  const std::string waited = "request " + std::to_string(ts) + " has waited";
  // Server 0 answers, but maybe only after the first line (a slow build):
  // the lines that follow name only the server that still owes an answer.
  auto only_server_1 = [&] {
    for (const std::string& line : log.Find(waited)) {
      if (line.find("server 0") == std::string::npos) return line;
    }
    return std::string();
  };
  ASSERT_TRUE(WaitUntil([&] {
    node->WatchWaits();
    return !only_server_1().empty();
  }));
  std::string line = only_server_1();
  EXPECT_NE(line.find("for server 1 (id 10"), std::string::npos) << line;
  cluster_->KillByHeartbeat(cluster_->server(1));
  EXPECT_FALSE(kv->WaitStatus(ts).ok());
  DropClusterWithoutBarrier();
}

// The caller usually waits inside the van here (no other thread does) when
// the server is declared dead: the failure, handled on the
// worker's app thread, must wake it. Either order must end in the failure.
TEST_F(KVAppTest, ACallerWaitingInsideTheVanIsWokenByAFailure) {
  Form(2, 1);
  Silence(1);
  KVWorker<float>* kv = Worker(0);
  std::vector<Key> keys = RandomKeys(100, 5);
  std::vector<float> out;
  int ts = kv->Pull(keys, &out);
  Status s;
  std::thread waiter([&] { s = kv->WaitStatus(ts); });
  cluster_->KillByHeartbeat(cluster_->server(1));
  waiter.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  DropClusterWithoutBarrier();
}

TEST(SimpleAppTest, RequestToAGroupGetsEveryResponse) {
  InProcCluster cluster(2, 2);
  cluster.Start();
  std::atomic<int> handled{0};
  std::vector<std::unique_ptr<SimpleApp>> apps;
  for (Postoffice* p : cluster.all()) {
    apps.push_back(std::make_unique<SimpleApp>(0, 0, p));
    apps.back()->set_request_handle([&](const SimpleData& req, SimpleApp* app) {
      EXPECT_EQ(req.head, 7);
      EXPECT_EQ(req.body, "ping");
      ++handled;
      app->Response(req, "pong");
    });
  }
  std::atomic<int> pongs{0};
  apps[0]->set_response_handle([&](const SimpleData& res, SimpleApp*) {
    if (res.body == "pong") ++pongs;
  });
  // The scheduler asks everybody, itself included.
  int ts =
      apps[0]->Request(7, "ping", kScheduler + kServerGroup + kWorkerGroup);
  ASSERT_TRUE(apps[0]->WaitStatus(ts).ok());
  EXPECT_EQ(handled.load(), 5);
  EXPECT_EQ(pongs.load(), 5);
  cluster.Finalize();
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(SimpleAppTest, AppWithAnyCustomerIdIsReachableOnServers) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  // ps-lite would look for customer (7, 7) on the server and never find it.
  SimpleApp server_app(7, 0, cluster.server(0));
  server_app.set_request_handle(
      [](const SimpleData& req, SimpleApp* app) { app->Response(req); });
  SimpleApp worker_app(7, 3, cluster.worker(0));
  int ts = worker_app.Request(1, "x", kServerGroup);
  EXPECT_TRUE(worker_app.WaitStatus(ts).ok());
  cluster.Finalize();
}

// Sees whether the app still holds its messages.
class HoldProbeApp : public SimpleApp {
 public:
  HoldProbeApp(int app_id, Postoffice* p) : SimpleApp(app_id, 0, p) {}
  bool held() { return impl_->customer()->held(); }
};

// The model layer's servers set their response handle first: when that
// released the app, a registration that had arrived already could be
// answered by the default handle (an empty body, read as "registered"), and
// the client's first pull found no table (CI, fault_model_joinleave_asp).
TEST(SimpleAppTest, SettingTheResponseHandleAloneReleasesNothing) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  SimpleApp worker_app(5, 0, cluster.worker(0));
  std::string answer;
  Mutex mu;
  worker_app.set_response_handle([&](const SimpleData& res, SimpleApp*) {
    MutexLock lock(&mu);
    answer = res.body;
  });
  int ts = worker_app.Request(1, "register", kServerGroup);
  // Waits on the server's node until app 5 exists.
  Node* server = cluster.server(0)->node();
  ASSERT_TRUE(WaitUntil([&] { return server->held_messages() == 1; }));
  HoldProbeApp server_app(5, cluster.server(0));
  server_app.set_response_handle([](const SimpleData&, SimpleApp*) {});
  EXPECT_TRUE(server_app.held());
  server_app.set_request_handle([](const SimpleData& req, SimpleApp* app) {
    app->Response(req, "handled: " + req.body);
  });
  EXPECT_FALSE(server_app.held());
  ASSERT_TRUE(worker_app.WaitStatus(ts).ok());
  {
    MutexLock lock(&mu);
    EXPECT_EQ(answer, "handled: register");
  }
  cluster.Finalize();
}

TEST(SimpleAppTest, RequestForAMissingAppIsRefusedNotLeftHanging) {
  InProcCluster cluster(1, 1);
  cluster.Start();
  SimpleApp worker_app(9, 0, cluster.worker(0));
  int ts = worker_app.Request(1, "anyone?", kServerGroup);
  // The server has no app 9. Once the bound has passed, it says so.
  Node* server = cluster.server(0)->node();
  ASSERT_TRUE(WaitUntil([&] { return server->held_messages() == 1; }));
  cluster.clock()->Advance(server->options().missing_app_timeout_ms + 1);
  cluster.Beat(cluster.server(0));
  cluster.Beat(cluster.worker(0));
  server->CheckLiveness();
  Status s = worker_app.WaitStatus(ts);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s;
  EXPECT_NE(s.message().find("has no app 9"), std::string::npos) << s;
  cluster.Finalize();
}

}  // namespace
}  // namespace ps
