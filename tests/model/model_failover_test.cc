// The model layer through the death of a server, over the in-process
// transport (docs/replication.md): a bsp run in which a server dies ends
// with parameters bitwise equal to the same run undisturbed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/model.h"
#include "testutil/bitwise.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"
#include "transport/fault_van.h"
#include "util/file.h"

namespace ps {
namespace {

constexpr int kDim = 4;
constexpr int64_t kDense = 40000;  // Three chunks, one per server.
constexpr int kIds = 96;

struct Parameters {
  std::vector<float> rows, dense;
  // Killed runs only: a save after the failover, a training step, a load of
  // the save, and what was pulled then.
  Status save, load;
  std::vector<float> reloaded_rows, reloaded_dense;
};

std::vector<uint64_t> Ids() {
  std::vector<uint64_t> ids(kIds);
  for (int i = 0; i < kIds; ++i) ids[i] = 1000 + 7 * i;
  return ids;
}

// Worker w's gradients at iteration `it`: distinct per worker, so that one
// optimizer step with their sum differs from two steps.
std::vector<float> Grads(int w, int it, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.01f * static_cast<float>((w + 1) * (it + 2)) *
           static_cast<float>(i % 5 + 1) * (i % 2 ? 1.0f : -1.0f);
  }
  return g;
}

// Three servers, two workers, one copy of everything; an Adagrad table and
// an Adam dense parameter under bsp, three iterations. With `kill`, in the
// second iteration worker 0's push is applied (server 1 forwarded its copy
// to server 2 and acknowledged it), then server 1 dies, and worker 1's push
// of the same iteration goes to server 2 after the failover: server 2 must
// merge the copy and the direct push into one optimizer step, as server 1
// would have.
Parameters Train(bool kill) {
  Parameters out;
  InProcCluster cluster(3, 2, [](Options* o) { o->replicas = 1; });
  cluster.Start();
  std::vector<std::unique_ptr<ModelServer>> servers;
  Postoffice* victim = nullptr;
  for (int i = 0; i < 3; ++i) {
    Postoffice* po = cluster.server(i);
    if (po->node()->my_rank() == 1) victim = po;
    servers.push_back(std::make_unique<ModelServer>(po));
  }
  std::vector<std::unique_ptr<ModelClient>> clients;
  for (int w = 0; w < 2; ++w) {
    clients.push_back(std::make_unique<ModelClient>(cluster.worker(w)));
  }
  std::vector<float> initial(kDense);
  for (int64_t i = 0; i < kDense; ++i) initial[i] = 0.001f * (i % 17);
  for (auto& c : clients) {
    EXPECT_TRUE(c->RegisterTable(
                     {"emb", kDim, "normal(0,0.1)", "adagrad(lr=0.1)", "bsp"})
                    .ok());
    EXPECT_TRUE(
        c->RegisterDense({"dense", {kDense}, "adam(lr=0.01)", "bsp"}, initial)
            .ok());
  }
  const std::vector<uint64_t> ids = Ids();
  auto step = [&](int w, int it) {
    std::vector<float> rows;
    Status s = clients[w]->PullRows("emb", ids, &rows);
    EXPECT_TRUE(s.ok()) << s;
    s = clients[w]->Push({{"dense", Grads(w, it, kDense)}},
                         {{"emb", ids, Grads(w, it, ids.size() * kDim)}});
    EXPECT_TRUE(s.ok()) << s;
    s = clients[w]->Clock();
    EXPECT_TRUE(s.ok()) << s;
  };
  for (int it = 0; it < 3; ++it) {
    step(0, it);
    if (kill && it == 1) {
      cluster.KillByHeartbeat(victim);
      // Worker 1 and the servers know the new ring before worker 1 pushes.
      for (Postoffice* po : {cluster.worker(1), cluster.server(0),
                             cluster.server(1), cluster.server(2)}) {
        if (po == victim) continue;
        EXPECT_TRUE(WaitUntil([po] {
          auto ring = po->node()->key_ring();
          return ring && ring->epoch() == 2;
        }));
      }
    }
    step(1, it);
  }
  Status s = clients[0]->PullRows("emb", ids, &out.rows);
  EXPECT_TRUE(s.ok()) << s;
  s = clients[0]->PullDense("dense", &out.dense);
  EXPECT_TRUE(s.ok()) << s;
  if (kill) {
    // Two servers are left: the heir saves the dead server's rows with its
    // own, and a load brings back what the save held, after a step that
    // changed it.
    char tmpl[] = "/tmp/ember-failover-ckpt.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    out.save = clients[0]->Save(dir);
    step(0, 3);
    step(1, 3);
    out.load = clients[0]->Load(dir);
    s = clients[0]->PullRows("emb", ids, &out.reloaded_rows);
    EXPECT_TRUE(s.ok()) << s;
    s = clients[0]->PullDense("dense", &out.reloaded_dense);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::string> names;
    EXPECT_TRUE(ListDirectory(dir, &names).ok());
    EXPECT_EQ(names, (std::vector<std::string>{"shard-0-of-2.ckpt",
                                               "shard-1-of-2.ckpt"}));
    system(("rm -rf " + dir).c_str());
  }
  // A member may have died: no final barrier.
  clients.clear();
  servers.clear();
  return out;
}

TEST(ModelFailoverTest, BspParametersAreBitwiseThoseOfTheUndisturbedRun) {
  const Parameters calm = Train(false);
  const Parameters killed = Train(true);
  ASSERT_EQ(calm.rows.size(), static_cast<size_t>(kIds * kDim));
  ASSERT_EQ(calm.dense.size(), static_cast<size_t>(kDense));
  ExpectBitwiseEqual(killed.rows, calm.rows, "the row values");
  ExpectBitwiseEqual(killed.dense, calm.dense, "the dense values");
  // A checkpoint saved after the failover loads back exactly.
  EXPECT_TRUE(killed.save.ok()) << killed.save;
  EXPECT_TRUE(killed.load.ok()) << killed.load;
  EXPECT_EQ(killed.reloaded_rows, killed.rows);
  EXPECT_EQ(killed.reloaded_dense, killed.dense);
}

// Two workers train on their own threads under bsp (pull, push, clock, as
// cluster_model does) while server 1 dies, the copies are restored, and
// server 2 dies once a number of messages drawn from `seed` has passed
// after the workers reached the middle of the run: the last server holds
// everything, and the parameters are bitwise those of the undisturbed run.
std::vector<float> TrainConcurrently(bool kill, int iterations, unsigned seed) {
  LogCapture log;
  // No faults: the injector counts the messages that pass.
  FaultInjector injector(seed + 1);
  InProcCluster cluster(
      3, 2, [](Options* o) { o->replicas = 1; }, &injector);
  cluster.Start();
  std::vector<std::unique_ptr<ModelServer>> servers;
  Postoffice* by_rank[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i) {
    Postoffice* po = cluster.server(i);
    by_rank[po->node()->my_rank()] = po;
    servers.push_back(std::make_unique<ModelServer>(po));
  }
  std::vector<std::unique_ptr<ModelClient>> clients;
  for (int w = 0; w < 2; ++w) {
    clients.push_back(std::make_unique<ModelClient>(cluster.worker(w)));
  }
  std::vector<float> initial(kDense);
  for (int64_t i = 0; i < kDense; ++i) initial[i] = 0.001f * (i % 17);
  for (auto& c : clients) {
    EXPECT_TRUE(c->RegisterTable(
                     {"emb", kDim, "normal(0,0.1)", "adagrad(lr=0.1)", "bsp"})
                    .ok());
    EXPECT_TRUE(
        c->RegisterDense({"dense", {kDense}, "adam(lr=0.01)", "bsp"}, initial)
            .ok());
  }
  const std::vector<uint64_t> all_ids = Ids();
  std::atomic<int> done[2] = {{0}, {0}};
  std::atomic<bool> failed{false};
  auto train = [&](int w) {
    for (int it = 0; it < iterations; ++it) {
      // A different two thirds of the table each iteration; gradients that
      // depend on what was pulled.
      std::vector<uint64_t> ids;
      for (size_t i = 0; i < all_ids.size(); ++i) {
        if ((i + it + w) % 3 != 0) ids.push_back(all_ids[i]);
      }
      std::vector<float> rows, dense;
      Status s = clients[w]->PullRows("emb", ids, &rows);
      if (s.ok()) s = clients[w]->PullDense("dense", &dense);
      if (s.ok()) {
        std::vector<float> g = Grads(w, it, ids.size() * kDim);
        for (size_t i = 0; i < g.size(); ++i) g[i] += 0.5f * rows[i];
        std::vector<float> dg = Grads(w, it, kDense);
        for (size_t i = 0; i < dg.size(); i += 7) dg[i] += dense[i];
        s = clients[w]->Push({{"dense", dg}}, {{"emb", ids, g}});
      }
      if (s.ok()) s = clients[w]->Clock();
      if (!s.ok()) {
        ADD_FAILURE() << "worker " << w << " at iteration " << it << ": " << s;
        failed.store(true);
        return;
      }
      done[w].store(it + 1);
    }
  };
  std::thread t0(train, 0), t1(train, 1);
  auto reached = [&](int it) {
    return WaitUntil(
        [&] { return failed.load() || (done[0] >= it && done[1] >= it); });
  };
  if (kill) {
    EXPECT_TRUE(reached(iterations / 4));
    cluster.KillByHeartbeat(by_rank[1]);
    EXPECT_TRUE(
        WaitUntil([&] { return log.Find("copies restored").size() == 2; }));
    EXPECT_TRUE(reached(iterations / 2));
    // Somewhere within the next iteration or two (each is some tens of
    // messages).
    const uint64_t at = injector.counters().messages + seed % 120;
    EXPECT_TRUE(WaitUntil([&] {
      return failed.load() || done[0] == iterations ||
             injector.counters().messages >= at;
    }));
    cluster.KillByHeartbeat(by_rank[2]);
  }
  std::vector<float> out;
  if (failed.load()) {
    // A worker gave up: the other may wait for it for good. The test has
    // failed; the deaths of every server end the run (its data is lost).
    for (Postoffice* po : by_rank) {
      if (!cluster.killed(po)) cluster.KillByHeartbeat(po);
    }
  }
  t0.join();
  t1.join();
  if (!failed.load()) {
    std::vector<float> dense;
    Status s = clients[0]->PullRows("emb", all_ids, &out);
    EXPECT_TRUE(s.ok()) << s;
    s = clients[0]->PullDense("dense", &dense);
    EXPECT_TRUE(s.ok()) << s;
    out.insert(out.end(), dense.begin(), dense.end());
  }
  clients.clear();
  servers.clear();
  return out;
}

// EMBER_TEST_REPEAT sets the number of killed runs (default 10); each draws
// its second death's moment anew. Run long, it
// found that a clock notice sent to a server that failed over after the
// worker read the ring failed KVWorker::Clock; that race is rare (twice in
// some 4,000 runs), so the default 10 runs seldom meet it.
TEST(ModelFailoverTest, TwoDeathsWhileWorkersTrainChangeNothingUnderBsp) {
  const int iterations = 24;
  const std::vector<float> calm = TrainConcurrently(false, iterations, 0);
  ASSERT_EQ(calm.size(), static_cast<size_t>(kIds * kDim + kDense));
  const char* env = getenv("EMBER_TEST_REPEAT");
  const int repeat = env ? atoi(env) : 10;
  for (int i = 0; i < repeat; ++i) {
    const unsigned seed = 7919u * static_cast<unsigned>(i) + 13;
    const std::vector<float> killed = TrainConcurrently(true, iterations, seed);
    ExpectBitwiseEqual(killed, calm, "the parameters");
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "at run " << i << " (seed " << seed << ")";
      break;
    }
  }
}

}  // namespace
}  // namespace ps
