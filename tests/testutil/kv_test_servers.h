// What the replication, join and leave tests share: keys spread over the
// whole key space, a summing server that counts what its handle applied,
// and a worker with a bounded wait.
#ifndef PS_TESTUTIL_KV_TEST_SERVERS_H_
#define PS_TESTUTIL_KV_TEST_SERVERS_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "app/app_impl.h"
#include "ps/kv_app.h"
#include "ps/ps.h"
#include "testutil/bitwise.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"
#include "transport/fault_van.h"

namespace ps {

// `n` keys spread evenly over the whole key space, so every server owns
// some (ps-lite's even split gives server r the r-th slice).
inline std::vector<Key> SpreadKeys(size_t n) {
  std::vector<Key> keys(n);
  const Key step = kMaxKey / n;
  for (size_t i = 0; i < n; ++i) keys[i] = i * step + 7;
  return keys;
}

// A message of a state copy or hand-over of app 0 (Meta::state_copy `kind`,
// docs/protocol.md), built by hand as a forger or a late resend would send
// it: one frame, `frame`, copying `replica_of`'s data (0: the sender's).
inline Message RawStateCopy(int64_t ts, int to, int kind,
                            const std::string& frame, int replica_of = 0) {
  Message m = AppMessage(0, 0, ts, to, /*request=*/true);
  m.meta.push = true;
  m.meta.state_copy = kind;
  m.meta.replica_of = replica_of;
  m.meta.value_bytes = sizeof(float);
  SArray<char> data;
  data.CopyFrom(frame.data(), frame.size());
  m.AddData(data);
  return m;
}

// A summing server (KVServerDefaultHandle) that counts the pushes its handle
// applied, and can be told to stop answering (as a server that dies
// mid-request would).
class CountingServer {
 public:
  // `copyable`: its state can be copied and handed over (set_state_handle).
  // The state handle comes first: setting the request handle starts
  // delivery, and a newcomer's first messages are the state of its keys.
  explicit CountingServer(Postoffice* po, bool copyable = true)
      : server_(0, po) {
    if (copyable) {
      server_.set_state_handle(
          [this](const std::function<bool(Key)>& want, size_t max_bytes,
                 std::vector<std::string>* chunks) {
            return default_.DumpState(want, max_bytes, chunks);
          },
          [this](const char* data, size_t size) {
            return default_.LoadState(data, size);
          });
    }
    server_.set_request_handle([this](const KVMeta& meta,
                                      const KVPairs<float>& data,
                                      KVServer<float>* s) {
      if (meta.push) applied_.fetch_add(1);
      if (meta.push && meta.replica_of == 0) own_.fetch_add(1);
      if (silent_.load()) return;
      default_(meta, data, s);
    });
  }
  void Silence() { silent_.store(true); }
  // Pushes applied, copies included.
  int applied() const { return applied_.load(); }
  // Pushes applied as their keys' owner (not as a copy).
  int own() const { return own_.load(); }
  // What its consistency controller saw.
  ConsistencyStats stats() const { return server_.consistency_stats(); }
  // The store's state of the keys `want` holds, as a copy sends it. Only
  // while no request runs.
  std::vector<std::string> Dump(const std::function<bool(Key)>& want) {
    std::vector<std::string> chunks;
    EXPECT_TRUE(default_.DumpState(want, 4 << 20, &chunks).ok());
    return chunks;
  }

 private:
  KVServerDefaultHandle<float> default_;
  std::atomic<int> applied_{0};
  std::atomic<int> own_{0};
  std::atomic<bool> silent_{false};
  KVServer<float> server_;
};

// A worker whose request numbers can start anywhere (near the 2^31 boundary
// of the API's int), with a bounded wait: a request that never completes
// fails the test instead of hanging it.
class TestWorker : public KVWorker<float> {
 public:
  using KVWorker<float>::KVWorker;
  bool StartAt(int64_t next) {
    return impl_->customer()->tracker()->StartAt(next);
  }
  Status WaitBounded(int ts) { return SimpleApp::WaitStatus(ts, 30000); }
};

// Every worker pushes 1 to every key `times` times, one request at a time,
// each on a thread of its own; `during` (if not null) runs on the calling
// thread once every worker has done `after` pushes, while they go on (each
// worker's last push waits for it to end, so the pushes overlap all of it).
inline void PushOnesWhile(
    const std::vector<std::unique_ptr<TestWorker>>& workers,
    const std::vector<Key>& keys, int times, int after,
    const std::function<void()>& during) {
  std::vector<float> ones(keys.size(), 1.0f);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::atomic<bool> go_on{during == nullptr};
  for (auto& w : workers) {
    TestWorker* kv = w.get();
    threads.emplace_back([&, kv] {
      for (int i = 0; i < times; ++i) {
        if (i == after) ready.fetch_add(1);
        Status s = kv->WaitBounded(kv->Push(keys, ones));
        ASSERT_TRUE(s.ok()) << s;
        if (i + 2 == times) {
          while (!go_on.load()) std::this_thread::yield();
        }
      }
    });
  }
  if (during) {
    EXPECT_TRUE(WaitUntil(
        [&] { return ready.load() == static_cast<int>(workers.size()); }));
    during();
    go_on.store(true);
  }
  for (auto& t : threads) t.join();
}

// Pulls `keys` through `worker` and expects each to hold `expected`.
inline void ExpectAllKeys(TestWorker* worker, const std::vector<Key>& keys,
                          float expected) {
  std::vector<float> out;
  Status s = worker->WaitBounded(worker->Pull(keys, &out));
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out.size(), keys.size());
  size_t wrong = 0;
  size_t first = keys.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i] != expected) {
      ++wrong;
      if (first == keys.size()) first = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << "keys off " << expected << ", e.g. key "
                       << (wrong ? keys[first] : 0) << " = "
                       << (wrong ? out[first] : 0);
}

// bsp rounds for the membership tests (docs/replication.md, "Joining",
// "Leaving"): workers 0 and 1 push to `keys`, `rounds` times, values whose
// sums depend on the order they are added in (a bsp round is applied in rank
// order), one round at a time. In round `at`, once worker 0 has pushed and
// asked to pull (its pull waits for the round), `change` runs (a join or a
// leave, while the round is half pushed), then worker 1 pushes. Both then
// end the round (Clock). Returns what worker 0's pull of round `at` saw,
// then what it pulls at the end.
inline std::pair<std::vector<float>, std::vector<float>> PushBspRounds(
    const std::vector<std::unique_ptr<TestWorker>>& workers,
    const std::vector<Key>& keys, int rounds, int at,
    const std::function<void()>& change) {
  std::pair<std::vector<float>, std::vector<float>> seen;
  auto values = [&keys](int w, int round) {
    std::vector<float> v(keys.size());
    for (size_t j = 0; j < keys.size(); ++j) {
      v[j] = (w == 0 ? 1.0f / 3 : 1e-3f / 7) *
             static_cast<float>(round + 1 + static_cast<int>(j % 5));
    }
    return v;
  };
  TestWorker* w0 = workers[0].get();
  TestWorker* w1 = workers[1].get();
  for (int i = 0; i < rounds; ++i) {
    Status s = w0->WaitBounded(w0->Push(keys, values(0, i)));
    EXPECT_TRUE(s.ok()) << s;
    int pull = -1;
    if (i == at) {
      pull = w0->Pull(keys, &seen.first);
      if (change) change();
    }
    s = w1->WaitBounded(w1->Push(keys, values(1, i)));
    EXPECT_TRUE(s.ok()) << s;
    if (pull >= 0) {
      s = w0->WaitBounded(pull);
      EXPECT_TRUE(s.ok()) << s;
    }
    for (TestWorker* w : {w0, w1}) {
      s = w->WaitBounded(w->Clock());
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  Status s = w0->WaitBounded(w0->Pull(keys, &seen.second));
  EXPECT_TRUE(s.ok()) << s;
  return seen;
}

// PushBspRounds on a cluster of `servers` bsp servers (`replicas` copies)
// and 2 workers in which nothing changes: what the membership tests compare
// with.
inline std::pair<std::vector<float>, std::vector<float>> UndisturbedBspRounds(
    int servers, int replicas, const std::vector<Key>& keys, int rounds,
    int at) {
  InProcCluster cluster(servers, 2, [replicas](Options* o) {
    o->replicas = replicas;
    o->consistency = *ConsistencyConfig::Parse("bsp");
  });
  cluster.Start();
  std::vector<std::unique_ptr<CountingServer>> apps;
  for (int i = 0; i < servers; ++i) {
    apps.push_back(std::make_unique<CountingServer>(cluster.server(i)));
  }
  std::vector<std::unique_ptr<TestWorker>> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(std::make_unique<TestWorker>(0, 0, cluster.worker(w)));
  }
  auto seen = PushBspRounds(workers, keys, rounds, at, nullptr);
  workers.clear();
  apps.clear();
  cluster.Finalize();
  return seen;
}

// Whether a hand-over under bsp moved deferred pushes (its log line says
// how many).
inline bool MovedDeferredPushes(const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    if (l.find("deferred push(es)") != std::string::npos &&
        l.find(", 0 deferred push(es)") == std::string::npos) {
      return true;
    }
  }
  return false;
}

// What PushBspRounds returns: worker 0's pull of the change's round, then
// its pull at the end.
using BspRounds = std::pair<std::vector<float>, std::vector<float>>;

// The checks every bsp membership test ends with: a hand-over moved deferred
// pushes (the change came in a half-pushed round), and worker 0 saw, in
// that round and at the end, bitwise what the undisturbed run saw. `change`
// names it in a failure ("join", "leave", "failover").
inline void ExpectBspRunAsUndisturbed(const LogCapture& log,
                                      const BspRounds& got,
                                      const BspRounds& want,
                                      const std::string& change) {
  EXPECT_TRUE(
      MovedDeferredPushes(log.Find("handing the keys that moved to node")));
  ExpectBitwiseEqual(got.first, want.first,
                     "the pull of the " + change + "'s round");
  ExpectBitwiseEqual(got.second, want.second, "the values at the end");
}

// Runs `body` for seeds 1..`seeds`, each traced by its seed; stops at the
// first seed with a fatal failure.
inline void ForEachSeed(uint64_t seeds,
                        const std::function<void(uint64_t seed)>& body) {
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    body(seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A cluster of CountingServers and TestWorkers for the membership tests
// (join_test, leave_test); the parameter is theirs (copies, mostly).
class MembershipTest : public ::testing::TestWithParam<int> {
 protected:
  // `bsp`: the servers run bsp (EMBER_CONSISTENCY=bsp).
  void Form(int servers, int workers, int replicas,
            FaultInjector* faults = nullptr, bool bsp = false) {
    cluster_ = std::make_unique<InProcCluster>(
        servers, workers,
        [replicas, bsp](Options* o) {
          o->replicas = replicas;
          if (bsp) o->consistency = *ConsistencyConfig::Parse("bsp");
        },
        faults);
    cluster_->Start();
    for (int i = 0; i < servers; ++i) {
      servers_.push_back(std::make_unique<CountingServer>(cluster_->server(i)));
    }
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(
          std::make_unique<TestWorker>(0, 0, cluster_->worker(w)));
    }
  }
  void TearDown() override {
    workers_.clear();
    servers_.clear();
    if (cluster_ && finalize_) cluster_->Finalize();
    cluster_.reset();
  }

  // Starts a server after the cluster formed (`join`: EMBER_JOIN=1) and
  // creates its app; its Postoffice, or null if it could not start.
  Postoffice* Join(bool join = true) {
    Postoffice* po = cluster_->AddServer(join);
    Status s = po->StartStatus(0, true);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return nullptr;
    servers_.push_back(std::make_unique<CountingServer>(po));
    return po;
  }

  void PushOnes(const std::vector<Key>& keys, int times, int after,
                const std::function<void()>& during) {
    PushOnesWhile(workers_, keys, times, after, during);
  }
  void ExpectAll(const std::vector<Key>& keys, float expected) {
    ExpectAllKeys(workers_[0].get(), keys, expected);
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<CountingServer>> servers_;
  std::vector<std::unique_ptr<TestWorker>> workers_;
  bool finalize_ = true;  // false once a member died: no final barrier
};

// While it lives, a thread that releases the oldest message `injector`
// holds whenever no message passed it for a while (every node waits for
// one that is held), so delays cannot stall a quiet cluster.
class ReleaseWhenQuiet {
 public:
  explicit ReleaseWhenQuiet(FaultInjector* injector)
      : thread_([this, injector] {
          uint64_t seen = 0;
          while (!stop_.load()) {
            const uint64_t now = injector->counters().messages;
            if (now == seen) injector->Step();
            seen = now;
            for (int i = 0; i < 200; ++i) std::this_thread::yield();
          }
        }) {}
  ~ReleaseWhenQuiet() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// While it lives, a thread that waits for the cluster to fall quiet (no
// message passed `injector` for a while) and then releases the oldest
// message the injector holds or, if it holds none, lets `step_ms` of the
// cluster's fake time pass: every node beats (and the thread waits a bounded
// while for the echo) and checks liveness, which runs the resend timers of
// membership changes (EMBER_MIGRATION_RESEND_MS). So a lost message is sent
// again, without a sleep, once everyone waits for it.
class TickWhenQuiet {
 public:
  TickWhenQuiet(FaultInjector* injector, InProcCluster* cluster, int step_ms)
      : thread_([this, injector, cluster, step_ms] {
          uint64_t seen = 0;
          while (!stop_.load()) {
            const uint64_t now = injector->counters().messages;
            if (now == seen && !injector->Step()) Tick(cluster, step_ms);
            seen = injector->counters().messages;
            for (int i = 0; i < 2000 && !stop_.load(); ++i) {
              std::this_thread::yield();
            }
          }
        }) {}
  ~TickWhenQuiet() {
    stop_ = true;
    thread_.join();
  }
  uint64_t ticks() const { return ticks_.load(); }

 private:
  void Tick(InProcCluster* cluster, int step_ms) {
    ticks_.fetch_add(1);
    cluster->clock()->Advance(step_ms);
    const int64_t now = cluster->clock()->NowMs();
    Postoffice* scheduler = cluster->scheduler();
    for (Postoffice* p : cluster->all()) {
      if (p == scheduler) continue;
      Node* node = p->node();
      if (!node->ready()) continue;
      node->SendHeartbeat();
      // Bounded: a node that is finishing gets no echo.
      for (int i = 0;
           i < 100000 && !stop_.load() && node->last_scheduler_echo_ms() != now;
           ++i) {
        std::this_thread::yield();
      }
      node->CheckLiveness();
    }
    scheduler->node()->CheckLiveness();
  }

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ticks_{0};
  std::thread thread_;  // Last: it uses the members above.
};

// The cluster of the membership tests under network faults: `servers`
// CountingServers and `workers` TestWorkers (app 0) on an InProcCluster
// whose vans go through a FaultInjector of `seed`, with one copy of every
// range (and bsp if asked). Inject starts the faults with a
// ReleaseWhenQuiet pump, Hold without one; Settle ends them and delivers
// what is held.
// Finish passes the final barrier; a test that returns early (a failed
// ASSERT) leaves it out.
class FaultCluster {
 public:
  // `tweak`, if given, edits every node's options last.
  FaultCluster(uint64_t seed, int servers, int workers, bool bsp = false,
               const std::function<void(Options*)>& tweak = nullptr)
      : injector_(seed),
        cluster_(
            servers, workers,
            [bsp, tweak](Options* o) {
              o->replicas = 1;
              if (bsp) o->consistency = *ConsistencyConfig::Parse("bsp");
              if (tweak) tweak(o);
            },
            &injector_) {
    cluster_.Start();
    for (int i = 0; i < servers; ++i) {
      servers_.push_back(std::make_unique<CountingServer>(cluster_.server(i)));
    }
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(
          std::make_unique<TestWorker>(0, 0, cluster_.worker(w)));
    }
  }

  // Every message of the cluster delayed (15%) and duplicated (10%) on
  // links that keep their order, as TCP's do (FaultPlan::fifo).
  static FaultPlan FifoPlan() {
    FaultPlan plan;
    plan.fifo = true;
    plan.delay = 0.15;
    plan.duplicate = 0.1;
    plan.max_delay = 6;
    plan.target.kind = FaultTarget::Kind::kAll;
    return plan;
  }

  // Every message of `kind` on `links` held, in link order, until the test
  // releases it (FaultInjector::StepLink, Settle).
  static FaultPlan HoldPlan(std::vector<std::pair<int, int>> links,
                            FaultTarget::Kind kind = FaultTarget::Kind::kAll) {
    FaultPlan plan;
    plan.fifo = true;
    plan.delay = 1;
    plan.max_delay = std::numeric_limits<int>::max();
    plan.target.kind = kind;
    plan.target.links = std::move(links);
    return plan;
  }

  void Inject(const FaultPlan& plan) {
    ASSERT_TRUE(injector_.set_plan(plan).ok());
    pump_ = std::make_unique<ReleaseWhenQuiet>(&injector_);
  }

  // Starts `plan` with a TickWhenQuiet pump (`step_ms` of fake time a
  // tick): for plans that drop messages, which only the resend timers
  // (EMBER_MIGRATION_RESEND_MS) recover.
  void InjectWithTicks(const FaultPlan& plan, int step_ms) {
    ASSERT_TRUE(injector_.set_plan(plan).ok());
    ticker_ = std::make_unique<TickWhenQuiet>(&injector_, &cluster_, step_ms);
  }
  uint64_t ticks() const { return ticker_ ? ticker_->ticks() : 0; }

  // Starts `plan` without the pump: what it holds stays held until Settle
  // (a test that orders deliveries itself).
  void Hold(const FaultPlan& plan) {
    ASSERT_TRUE(injector_.set_plan(plan).ok());
  }

  FaultInjector& injector() { return injector_; }

  // What was injected; then no more faults, and every held message is
  // delivered.
  FaultCounters Settle() {
    const FaultCounters c = injector_.counters();
    pump_.reset();
    ticker_.reset();
    EXPECT_TRUE(injector_.set_plan(FaultPlan()).ok());
    injector_.Flush();
    return c;
  }

  void Finish() {
    workers_.clear();
    servers_.clear();
    cluster_.Finalize();
  }

  InProcCluster& cluster() { return cluster_; }
  std::vector<std::unique_ptr<CountingServer>>& servers() { return servers_; }
  std::vector<std::unique_ptr<TestWorker>>& workers() { return workers_; }

 private:
  FaultInjector injector_;  // Outlives the cluster's vans.
  InProcCluster cluster_;
  std::vector<std::unique_ptr<CountingServer>> servers_;
  std::vector<std::unique_ptr<TestWorker>> workers_;
  std::unique_ptr<ReleaseWhenQuiet> pump_;  // Stops first.
  std::unique_ptr<TickWhenQuiet> ticker_;   // So does this.
};

}  // namespace ps

#endif  // PS_TESTUTIL_KV_TEST_SERVERS_H_
