// The model layer through a server joining and a server leaving a running
// job, over the in-process transport (docs/model.md, "Servers joining and
// leaving"): one worker trains an Adagrad embedding table (asp) and an Adam
// dense parameter (ssp:1), each push waited, while a server joins or leaves;
// the final parameters are bitwise those of the undisturbed run, and a
// checkpoint saved afterwards loads back exactly.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model_control.h"
#include "model/model_protocol.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "ps/model.h"
#include "ps/simple_app.h"
#include "testutil/bitwise.h"
#include "testutil/inproc_cluster.h"
#include "testutil/log_capture.h"
#include "util/file.h"

namespace ps {
namespace {

constexpr int kDim = 4;
constexpr int64_t kDense = 40000;  // Three chunks.
constexpr int kIds = 300;
constexpr int kIterations = 12;

// kLeaveInRound: server 1 of 3 leaves at iteration 3 while the worker's
// commit notices of that iteration's push are held (a FaultVan), so under
// bsp the push is pending on every server (the leaver's own part, and
// copies of it) while the leaver hands its keys over.
enum class Change { kNone, kJoin, kLeave, kLeaveInRound };

struct Parameters {
  std::vector<float> rows, dense, late;
  int64_t version = 0;
  // After the change: the shard files a save wrote, and whether a load of
  // it, after a step that changed everything, brought back what it held.
  std::vector<std::string> shards;
  Status save, load;
  std::vector<float> reloaded_rows, reloaded_dense;
};

std::vector<uint64_t> Ids(int it) {
  // Rows spread over every server; some new ones each iteration, so rows
  // are created on the newcomer too.
  std::vector<uint64_t> ids(kIds);
  for (int i = 0; i < kIds; ++i) ids[i] = 1000 + 7 * i + (i % 3 == 0 ? it : 0);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<float> Grads(int it, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.01f * static_cast<float>(it + 2) * static_cast<float>(i % 5 + 1) *
           (i % 2 ? 1.0f : -1.0f);
  }
  return g;
}

// One worker trains `kIterations` iterations on `servers` servers (one copy
// of everything with 3, none with 2). With kJoin a third server joins at
// iteration 3, while the worker goes on; with kLeave server 1 of 3 leaves
// then. A table registered after the change is trained too.
Parameters Train(Change change, const std::string& mode = "") {
  Parameters out;
  const int servers = change == Change::kJoin ? 2 : 3;
  FaultInjector faults(1);
  InProcCluster cluster(
      servers, 1, [servers](Options* o) { o->replicas = servers == 3 ? 1 : 0; },
      change == Change::kLeaveInRound ? &faults : nullptr);
  cluster.Start();
  std::vector<std::unique_ptr<ModelServer>> model_servers;
  for (int i = 0; i < servers; ++i) {
    model_servers.push_back(std::make_unique<ModelServer>(cluster.server(i)));
  }
  auto client = std::make_unique<ModelClient>(cluster.worker(0));
  std::vector<float> initial(kDense);
  for (int64_t i = 0; i < kDense; ++i) initial[i] = 0.001f * (i % 17);
  EXPECT_TRUE(
      client
          ->RegisterTable({"emb", kDim, "normal(0,0.1)", "adagrad(lr=0.1)",
                           mode.empty() ? "asp" : mode})
          .ok());
  EXPECT_TRUE(client
                  ->RegisterDense({"dense",
                                   {kDense},
                                   "adam(lr=0.01)",
                                   mode.empty() ? "ssp:1" : mode},
                                  initial)
                  .ok());
  // `before_push`, `before_clock`: what happens before the push, and
  // between it and the clock.
  auto step = [&](int it, const std::function<void()>& before_push = {},
                  const std::function<void()>& before_clock = {}) {
    const std::vector<uint64_t> ids = Ids(it);
    std::vector<float> rows;
    Status s = client->PullRows("emb", ids, &rows);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> dense;
    s = client->PullDense("dense", &dense);
    EXPECT_TRUE(s.ok()) << s;
    if (before_push) before_push();
    s = client->Push({{"dense", Grads(it, kDense)}},
                     {{"emb", ids, Grads(it, ids.size() * kDim)}});
    EXPECT_TRUE(s.ok()) << s;
    if (before_clock) before_clock();
    s = client->Clock();
    EXPECT_TRUE(s.ok()) << s;
  };

  LogCapture log;
  std::thread changer;
  Postoffice* newcomer = nullptr;
  Postoffice* leaver = nullptr;
  std::atomic<bool> changed{change == Change::kNone};
  for (int it = 0; it < kIterations; ++it) {
    if (it == 3 && change == Change::kJoin) {
      // The join runs beside the training: the worker's requests for the
      // newcomer's keys wait there for the tables and their state.
      newcomer = cluster.AddServer(/*join=*/true);
      changer = std::thread([&] {
        Status s = newcomer->StartStatus(0, true);
        EXPECT_TRUE(s.ok()) << s;
        model_servers.push_back(std::make_unique<ModelServer>(newcomer));
        EXPECT_TRUE(WaitUntil([&] {
          return !log.Find("has joined: it holds the state").empty();
        }));
        changed = true;
      });
    }
    if (it == 3 && change == Change::kLeave) {
      leaver = cluster.server(1);
      changer = std::thread([&] {
        EXPECT_TRUE(leaver->node()->RequestLeave("test"));
        EXPECT_TRUE(WaitUntil([&] {
          return !log.Find("has left: its ranges are handed over").empty();
        }));
        changed = true;
      });
    }
    if (it == 8) {
      // The change ends while the worker trains; the rest of the run is on
      // the new ring.
      EXPECT_TRUE(WaitUntil([&] { return changed.load(); }));
      if (changer.joinable()) changer.join();
      // A table registered after the change reaches every server of the
      // new ring, the newcomer too.
      EXPECT_TRUE(client
                      ->RegisterTable({"late", 2, "zeros", "adagrad(lr=0.5)",
                                       mode.empty() ? "asp" : mode})
                      .ok());
    }
    std::function<void()> before_push, before_clock;
    if (it == 3 && change == Change::kLeaveInRound) {
      leaver = cluster.server(1);
      before_push = [&] {
        // Held until the leave is over: released at most 2^30 messages
        // later, far more than the run sends.
        FaultPlan hold;
        hold.delay = 1;
        hold.max_delay = 1 << 30;
        hold.target.commit_notices = true;
        EXPECT_TRUE(faults.set_plan(hold).ok());
      };
      before_clock = [&] {
        EXPECT_TRUE(leaver->node()->RequestLeave("test"));
        EXPECT_TRUE(WaitUntil([&] {
          return !log.Find("has left: its ranges are handed over").empty();
        }));
        EXPECT_GT(faults.held(), 0u);
        EXPECT_TRUE(faults.set_plan(FaultPlan()).ok());
        faults.Flush();
        changed = true;
      };
    }
    step(it, before_push, before_clock);
    if (it >= 8) {
      std::vector<uint64_t> late_ids{1, 2, 3, 50, 51, 999999};
      std::vector<float> g(late_ids.size() * 2, 0.25f * (it - 7));
      Status s = client->Push({}, {{"late", late_ids, g}});
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  if (changer.joinable()) changer.join();
  if (change == Change::kJoin) {
    auto ring = cluster.worker(0)->node()->key_ring();
    EXPECT_EQ(ring->num_servers(), 3);
    EXPECT_GE(ring->IndexOf(newcomer->node()->my_id()), 0);
    // The newcomer holds rows of its own (its share of the table, and its
    // dense chunks), which it got in the hand-over and made since.
    EXPECT_GT(model_servers.back()->stats().rows, 0u);
    EXPECT_EQ(model_servers.back()->stats().tables, 3u);
  }
  if (change == Change::kLeave || change == Change::kLeaveInRound) {
    auto ring = cluster.worker(0)->node()->key_ring();
    EXPECT_EQ(ring->num_servers(), 2);
    EXPECT_LT(ring->IndexOf(leaver->node()->my_id()), 0);
  }
  const std::vector<uint64_t> all = Ids(0);
  Status s = client->PullRows("emb", all, &out.rows);
  EXPECT_TRUE(s.ok()) << s;
  s = client->PullDense("dense", &out.dense, &out.version);
  EXPECT_TRUE(s.ok()) << s;
  s = client->PullRows("late", {1, 2, 3, 50, 51, 999999}, &out.late);
  EXPECT_TRUE(s.ok()) << s;
  if (change != Change::kNone) {
    char tmpl[] = "/tmp/ember-membership-ckpt.XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    out.save = client->Save(dir);
    EXPECT_TRUE(ListDirectory(dir, &out.shards).ok());
    std::sort(out.shards.begin(), out.shards.end());
    step(kIterations);
    out.load = client->Load(dir);
    s = client->PullRows("emb", all, &out.reloaded_rows);
    EXPECT_TRUE(s.ok()) << s;
    s = client->PullDense("dense", &out.reloaded_dense);
    EXPECT_TRUE(s.ok()) << s;
    system(("rm -rf " + dir).c_str());
  }
  client.reset();
  cluster.Finalize();
  model_servers.clear();
  return out;
}

void ExpectSameParameters(const Parameters& calm, const Parameters& changed) {
  ASSERT_EQ(calm.rows.size(), Ids(0).size() * kDim);
  ASSERT_EQ(calm.dense.size(), static_cast<size_t>(kDense));
  ExpectBitwiseEqual(changed.rows, calm.rows, "the row values");
  ExpectBitwiseEqual(changed.dense, calm.dense, "the dense values");
  EXPECT_EQ(changed.late, calm.late);
  // The training moved the parameters (the comparison means something).
  EXPECT_NE(calm.dense[0], 0.0f);
}

TEST(ModelMembershipTest, AServerJoinsWhileAWorkerTrains) {
  const Parameters calm = Train(Change::kNone);
  const Parameters joined = Train(Change::kJoin);
  ExpectSameParameters(calm, joined);
  // Every push here reaches every server (the dense chunks and the rows
  // are spread over all), so each server counts every push: the version
  // does not go back. It may count more: a part refused by a former owner
  // and re-routed to a server that had a part of the same push is a push
  // of its own there.
  EXPECT_GE(joined.version, calm.version);
  // A checkpoint saved after the join has a shard per server of the new
  // ring and loads back exactly.
  EXPECT_EQ(joined.shards,
            (std::vector<std::string>{"shard-0-of-3.ckpt", "shard-1-of-3.ckpt",
                                      "shard-2-of-3.ckpt"}));
  EXPECT_TRUE(joined.save.ok()) << joined.save;
  EXPECT_TRUE(joined.load.ok()) << joined.load;
  EXPECT_EQ(joined.reloaded_rows, joined.rows);
  EXPECT_EQ(joined.reloaded_dense, joined.dense);
}

TEST(ModelMembershipTest, AServerLeavesWhileAWorkerTrains) {
  const Parameters calm = Train(Change::kNone);
  const Parameters left = Train(Change::kLeave);
  ExpectSameParameters(calm, left);
  EXPECT_GE(left.version, calm.version);
  EXPECT_EQ(left.shards, (std::vector<std::string>{"shard-0-of-2.ckpt",
                                                   "shard-1-of-2.ckpt"}));
  EXPECT_TRUE(left.save.ok()) << left.save;
  EXPECT_TRUE(left.load.ok()) << left.load;
  EXPECT_EQ(left.reloaded_rows, left.rows);
  EXPECT_EQ(left.reloaded_dense, left.dense);
}

// The ring after `node`'s: the same ranges under the next epoch (what a
// node sees of a ring change, through the test seam).
std::shared_ptr<const KeyRing> NextRing(Node* node) {
  auto now = node->key_ring();
  std::vector<uint64_t> begins;
  std::vector<int> owners;
  for (size_t i = 0; i < now->num_ranges(); ++i) {
    begins.push_back(now->range_begin(i));
    owners.push_back(now->range_owner(i));
  }
  auto ring = KeyRing::FromRanges(now->server_ids(), begins, owners,
                                  now->epoch() + 1, now->placement());
  EXPECT_TRUE(ring.ok()) << ring.status();
  ring->set_replicas(now->replicas());
  return std::make_shared<const KeyRing>(std::move(ring.value()));
}

// `changed` ends as `calm` did, and its checkpoint saved and loaded.
void ExpectSameAndSaved(const Parameters& calm, const Parameters& changed) {
  ExpectSameParameters(calm, changed);
  EXPECT_TRUE(changed.save.ok()) << changed.save;
  EXPECT_TRUE(changed.load.ok()) << changed.load;
}

// The same under bsp for every table (the hand-over carries each
// consistency controller's pending rounds, docs/replication.md).
TEST(ModelMembershipTest, UnderBspAServerJoinsAndOneLeaves) {
  const Parameters calm = Train(Change::kNone, "bsp");
  ExpectSameAndSaved(calm, Train(Change::kJoin, "bsp"));
  ExpectSameAndSaved(calm, Train(Change::kLeave, "bsp"));
}

// A leave in the middle of a bsp round. The leaver hands its pending
// pushes to the new owners of their keys; the server that holds copies of
// them must not send them on as its own data to the owner it copies to, or
// they are applied there twice (one dense chunk, 16384 values off, in 1 of
// 5 runs of the test above, which leaves at any moment).
TEST(ModelMembershipTest, UnderBspAServerLeavesWithARoundPending) {
  ExpectSameAndSaved(Train(Change::kNone, "bsp"),
                     Train(Change::kLeaveInRound, "bsp"));
}

// A newcomer asks each server for its catalog under the ring it joined
// under; a server answers only once it has that ring, so the answer holds
// every table registered there before it switched.
TEST(ModelMembershipTest, ACatalogWaitsForTheRingItIsAskedUnder) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  std::vector<std::unique_ptr<ModelServer>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<ModelServer>(cluster.server(i)));
  }
  auto client = std::make_unique<ModelClient>(cluster.worker(0));
  ASSERT_TRUE(
      client->RegisterTable({"emb", 8, "zeros", "adagrad(lr=0.1)", "ssp:2"})
          .ok());
  ASSERT_TRUE(client
                  ->RegisterDense({"w", {3, 5}, "adam(lr=0.01)", "asp"},
                                  std::vector<float>(15, 1.0f))
                  .ok());
  Node* server = cluster.server(0)->node();
  const uint64_t epoch = server->key_ring()->epoch();
  std::vector<std::string> answers;
  std::mutex mu;
  {
    SimpleApp asker(model::kControlApp, 1, cluster.worker(0));
    asker.set_response_handle([&](const SimpleData& res, SimpleApp*) {
      std::lock_guard<std::mutex> lock(mu);
      answers.push_back(res.body);
    });
    model::ControlRequest ask;
    ask.op = model::ControlOp::kCatalog;
    ask.ring_epoch = epoch + 1;
    int head = 0;
    const std::string body = model::EncodeControlRequest(ask, &head);
    LogCapture log;
    const int ts = asker.Request(head, body, server->my_id());
    // Held, not answered under the older ring.
    ASSERT_TRUE(WaitUntil([&] {
      return !log.Find("asks for the catalog under key ring epoch " +
                       std::to_string(epoch + 1))
                  .empty();
    }));
    {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(answers.empty());
    }
    ASSERT_TRUE(server->InstallRingForTest(NextRing(server)).ok());
    ASSERT_TRUE(asker.WaitStatus(ts, 30000).ok());
  }
  ASSERT_EQ(answers.size(), 1u);
  auto reply = model::DecodeControlReply(answers[0]);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->status.ok()) << reply->status;
  EXPECT_EQ(reply->ring_epoch, epoch + 1);
  ASSERT_EQ(reply->registrations.size(), 2u);
  std::vector<std::string> names;
  for (const auto& r : reply->registrations) {
    names.push_back(r.name);
    if (r.name == "emb") {
      EXPECT_EQ(r.op, model::ControlOp::kRegisterTable);
      EXPECT_EQ(r.dim, 8);
      EXPECT_EQ(r.initializer, "zeros");
      EXPECT_EQ(r.optimizer, "adagrad(lr=0.1)");
      EXPECT_EQ(r.consistency, "ssp:2");
    } else {
      EXPECT_EQ(r.op, model::ControlOp::kRegisterDense);
      EXPECT_EQ(r.shape, (std::vector<int64_t>{3, 5}));
      EXPECT_EQ(r.optimizer, "adam(lr=0.01)");
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"emb", "w"}));
  client.reset();
  cluster.Finalize();
  servers.clear();
}

// A registration that a server answered under a newer ring than the
// client's (it may have registered the table after a newcomer's catalog
// was read) is registered again once the client has that ring, with that
// ring's servers.
TEST(ModelMembershipTest, ARegistrationAnsweredUnderANewerRingIsRepeated) {
  InProcCluster cluster(2, 1);
  cluster.Start();
  std::vector<std::unique_ptr<ModelServer>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<ModelServer>(cluster.server(i)));
  }
  auto client = std::make_unique<ModelClient>(cluster.worker(0));
  Node* worker = cluster.worker(0)->node();
  auto next = NextRing(worker);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster.server(i)->node()->InstallRingForTest(next).ok());
  }
  LogCapture log;
  auto registered = std::async(std::launch::async, [&] {
    return client->RegisterTable({"t", 2, "zeros", "sgd(lr=1)", "asp"});
  });
  // Answered under the servers' newer ring, it waits for the worker's.
  ASSERT_TRUE(WaitUntil([&] {
    return !log.Find("registering again once this node has the newer ring")
                .empty();
  }));
  EXPECT_EQ(registered.wait_for(std::chrono::seconds(0)),
            std::future_status::timeout);
  ASSERT_TRUE(worker->InstallRingForTest(next).ok());
  Status s = registered.get();
  EXPECT_TRUE(s.ok()) << s;
  std::vector<float> rows;
  s = client->PullRows("t", {1, 2}, &rows);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));
  client.reset();
  cluster.Finalize();
  servers.clear();
}

}  // namespace
}  // namespace ps
