// A worker killed inside a bsp push, restarted with its rank
// (docs/consistency.md, "A restart under bsp is exact"): its push of
// iteration c reached one server and its part to the other never arrived.
// The first server must not count that push toward its round: the restarted
// worker's re-done pull of iteration c would see the round applied, and the
// pushes it computes from it would not be those of a run in which the worker
// was slow instead. In-process: the part is dropped by a FaultInjector, the
// death is declared by heartbeats on a fake clock; no ports, no sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"
#include "testutil/kv_test_servers.h"
#include "transport/fault_van.h"

namespace ps {
namespace {

constexpr int kIterations = 5;
constexpr int kKilledAt = 2;  // The iteration worker 1 dies in.

// What worker `rank` pushes in iteration `it` after pulling `pulled`: a
// function of what it pulled, so a pull that saw other updates makes other
// pushes.
std::vector<float> Compute(const std::vector<float>& pulled, int rank, int it) {
  std::vector<float> push(pulled.size());
  for (size_t j = 0; j < pulled.size(); ++j) {
    push[j] = pulled[j] * (rank == 0 ? 0.375f : -0.2f) +
              static_cast<float>(rank + 1) *
                  static_cast<float>(it + 1 + static_cast<int>(j % 3)) / 7.0f;
  }
  return push;
}

// What a run's workers pulled: per worker, per iteration, then at the end.
struct Trace {
  std::vector<std::vector<float>> pulls[2];
  std::vector<float> end;
};

// The parameter: how many copies of each server's data (EMBER_REPLICAS), and
// which of the two servers loses its part of the push.
class BspCommitTest : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  // Options of a 2-server bsp cluster with `replicas` copies; a dead
  // worker's rank is held for its restart.
  static std::function<void(Options*)> Tweak(int replicas) {
    return [replicas](Options* o) {
      o->replicas = replicas;
      o->worker_rejoin_ms = 3600000;
      o->consistency = *ConsistencyConfig::Parse("bsp");
    };
  }

  static int Replicas() { return std::get<0>(GetParam()); }
  static int Lost() { return std::get<1>(GetParam()); }

  static std::vector<float> Pull(TestWorker* w, const std::vector<Key>& keys) {
    std::vector<float> out;
    Status s = w->WaitBounded(w->Pull(keys, &out));
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  static void Ok(TestWorker* w, int ts) {
    Status s = w->WaitBounded(ts);
    ASSERT_TRUE(s.ok()) << s;
  }
  // Iteration `it` of worker `rank` from its pull on: pull, compute, push,
  // clock.
  static void Iterate(TestWorker* w, int rank, int it,
                      const std::vector<Key>& keys, Trace* run) {
    std::vector<float> pulled = Pull(w, keys);
    run->pulls[rank].push_back(pulled);
    Ok(w, w->Push(keys, Compute(pulled, rank, it)));
    Ok(w, w->Clock());
  }

  // The run in which worker 1 is slow in iteration kKilledAt instead: both
  // workers go through every iteration, worker 1 last.
  Trace SlowRun(const std::vector<Key>& keys) {
    InProcCluster cluster(2, 2, Tweak(Replicas()));
    cluster.Start();
    CountingServer s0(cluster.server(0)), s1(cluster.server(1));
    TestWorker w0(0, 0, cluster.worker(0)), w1(0, 0, cluster.worker(1));
    Trace run;
    for (int it = 0; it < kIterations; ++it) {
      Iterate(&w0, 0, it, keys, &run);
      Iterate(&w1, 1, it, keys, &run);
    }
    run.end = Pull(&w0, keys);
    cluster.Finalize();
    return run;
  }
};

// Worker 1's push of iteration kKilledAt reaches one server; its part to
// the other is lost and worker 1 dies. Restarted with its rank, it resumes at
// that iteration, pulls and pushes it again: every pull of both workers, and
// the values at the end, are bitwise those of the slow run.
TEST_P(BspCommitTest, KilledInsideAPushTheRestartIsExact) {
  const std::vector<Key> keys = SpreadKeys(8);
  const Trace want = SlowRun(keys);

  FaultInjector net(1);
  InProcCluster cluster(2, 2, Tweak(Replicas()), &net);
  cluster.Start();
  CountingServer s0(cluster.server(0)), s1(cluster.server(1));
  auto w0 = std::make_unique<TestWorker>(0, 0, cluster.worker(0));
  auto w1 = std::make_unique<TestWorker>(0, 0, cluster.worker(1));
  Trace run;
  for (int it = 0; it < kKilledAt; ++it) {
    Iterate(w0.get(), 0, it, keys, &run);
    Iterate(w1.get(), 1, it, keys, &run);
  }
  Iterate(w0.get(), 0, kKilledAt, keys, &run);
  std::vector<float> pulled = Pull(w1.get(), keys);
  // Worker 1's part to server 1 is lost: it dies sending it.
  const int victim = cluster.worker(1)->node()->my_id();
  const int lost_to = cluster.server(Lost())->node()->my_id();
  FaultPlan drop;
  drop.drop = 1;
  drop.target.kind = FaultTarget::Kind::kData;
  drop.target.links = {{victim, lost_to}};
  ASSERT_TRUE(net.set_plan(drop).ok());
  // The other server takes its part (and, with copies, the server that
  // lost its own a copy of it).
  CountingServer* reached = Lost() == 0 ? &s1 : &s0;
  CountingServer* lost = Lost() == 0 ? &s0 : &s1;
  const uint64_t at_reached = reached->stats().pushes;
  const uint64_t at_lost = lost->stats().pushes;
  w1->Push(keys, Compute(pulled, 1, kKilledAt));
  ASSERT_TRUE(WaitUntil([&] {
    return reached->stats().pushes == at_reached + 1 &&
           lost->stats().pushes == at_lost + (Replicas() > 0 ? 1 : 0);
  }));
  EXPECT_EQ(net.counters().dropped, 1u);
  std::atomic<int> away{0};
  for (int i = 0; i < 2; ++i) {
    cluster.server(i)->node()->SetWorkerChangeCallback(
        [&away](int, WorkerEvent event, int) {
          if (event == WorkerEvent::kAway) away.fetch_add(1);
        });
  }
  cluster.KillByHeartbeat(cluster.worker(1));
  ASSERT_TRUE(WaitUntil([&] { return away.load() == 2; }));
  ASSERT_TRUE(net.set_plan(FaultPlan()).ok());

  // Worker 0 goes on; its pulls wait for worker 1, as for a slow one.
  std::thread ahead([&] {
    for (int it = kKilledAt + 1; it < kIterations; ++it) {
      Iterate(w0.get(), 0, it, keys, &run);
    }
  });
  Postoffice* back = cluster.AddWorker(/*join=*/false, /*rank=*/1);
  Status s = back->StartStatus(0, true);
  ASSERT_TRUE(s.ok()) << s;
  auto again = std::make_unique<TestWorker>(0, 0, back);
  StatusOr<int64_t> clock = again->JoinClock();
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, kKilledAt);
  run.pulls[1].push_back(pulled);  // The first incarnation's.
  std::vector<std::vector<float>> redone;
  for (int it = kKilledAt; it < kIterations; ++it) {
    Trace mine;
    Iterate(again.get(), 1, it, keys, &mine);
    redone.push_back(mine.pulls[1][0]);
  }
  ahead.join();
  run.end = Pull(w0.get(), keys);

  // Worker 1's first incarnation pulled up to iteration kKilledAt.
  ASSERT_EQ(run.pulls[0].size(), want.pulls[0].size());
  ASSERT_EQ(run.pulls[1].size(), static_cast<size_t>(kKilledAt + 1));
  for (int w = 0; w < 2; ++w) {
    for (size_t it = 0; it < run.pulls[w].size(); ++it) {
      ExpectBitwiseEqual(run.pulls[w][it], want.pulls[w][it],
                         "worker " + std::to_string(w) +
                             "'s pull of "
                             "iteration " +
                             std::to_string(it));
    }
  }
  for (size_t i = 0; i < redone.size(); ++i) {
    ExpectBitwiseEqual(redone[i], want.pulls[1][kKilledAt + i],
                       "the restarted worker's pull of iteration " +
                           std::to_string(kKilledAt + i));
  }
  ExpectBitwiseEqual(run.end, want.end, "the values at the end");
  FinalizeAll({cluster.scheduler(), cluster.server(0), cluster.server(1),
               cluster.worker(0), back});
  again.reset();
  w0.reset();
}

INSTANTIATE_TEST_SUITE_P(
    CopiesAndLostPart, BspCommitTest,
    ::testing::Combine(::testing::Values(0, 1), ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
      return "replicas" + std::to_string(std::get<0>(info.param)) + "_lostTo" +
             std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace ps
