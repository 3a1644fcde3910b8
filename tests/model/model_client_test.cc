// The model layer end to end over the in-process transport.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/initializer.h"
#include "model/model_control.h"
#include "model/model_protocol.h"
#include "ps/model.h"
#include "ps/simple_app.h"
#include "testutil/inproc_cluster.h"

namespace ps {
namespace {

class ModelClientTest : public ::testing::Test {
 protected:
  // `model_servers`: how many servers run a ModelServer (-1: all).
  void Form(int servers, int workers,
            const std::function<void(Options*)>& tweak = nullptr,
            int model_servers = -1) {
    cluster_ = std::make_unique<InProcCluster>(servers, workers, tweak);
    cluster_->Start();
    if (model_servers < 0) model_servers = servers;
    for (int i = 0; i < model_servers; ++i) {
      servers_.push_back(std::make_unique<ModelServer>(cluster_->server(i)));
    }
    for (int i = 0; i < workers; ++i) {
      clients_.push_back(std::make_unique<ModelClient>(cluster_->worker(i)));
    }
  }
  void TearDown() override {
    if (!cluster_) return;
    clients_.clear();
    cluster_->Finalize();
    servers_.clear();
    cluster_.reset();
  }
  ModelClient* client(int i) { return clients_[i].get(); }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<ModelServer>> servers_;
  std::vector<std::unique_ptr<ModelClient>> clients_;
};

TEST_F(ModelClientTest, RowsAreCreatedLazilyFromTheSeededInitializer) {
  Form(2, 1);
  TableSpec spec{"emb", 4, "normal(0,0.5)", "sgd(lr=0.1)", "asp"};
  ASSERT_TRUE(client(0)->RegisterTable(spec).ok());
  std::vector<uint64_t> ids{7, ~0ull, 0, 7, 123456789012345ull};
  std::vector<float> rows;
  ASSERT_TRUE(client(0)->PullRows("emb", ids, &rows).ok());
  ASSERT_EQ(rows.size(), ids.size() * 4);
  auto init = model::Initializer::Parse("normal(0,0.5)");
  ASSERT_TRUE(init.ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    float expect[4];
    init->Fill(model::TableId("emb"), ids[i], expect, 4);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(rows[i * 4 + j], expect[j]) << "id " << ids[i];
    }
  }
  size_t total = 0;
  for (auto& s : servers_) total += s->stats().rows;
  EXPECT_EQ(total, 4u);  // Distinct IDs, spread over both servers.
}

TEST_F(ModelClientTest, SparsePushUpdatesOnlyNamedRowsAndMergesDuplicates) {
  Form(2, 1);
  ASSERT_TRUE(client(0)
                  ->RegisterTable({"t", 2, "constant(1)", "sgd(lr=0.5)", "asp"})
                  .ok());
  int64_t version = -1;
  ASSERT_TRUE(client(0)
                  ->Push({}, {{"t", {5, 9, 5}, {1, 2, 3, 4, 5, 6}}}, &version)
                  .ok());
  EXPECT_GE(version, 1);
  std::vector<float> rows;
  ASSERT_TRUE(client(0)->PullRows("t", {5, 9, 11}, &rows).ok());
  // Row 5: 1 - 0.5 * (1 + 5), 1 - 0.5 * (2 + 6); row 9: 1 - 0.5 * (3, 4).
  EXPECT_EQ(rows, (std::vector<float>{-2, -3, -0.5, -1, 1, 1}));
}

TEST_F(ModelClientTest, DenseParametersTakeTheFirstWorkersValues) {
  Form(3, 2);
  const int n = 40000;  // three chunks, spread over the servers
  std::vector<float> a(n), b(n, -1.0f);
  for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i);
  DenseSpec spec{"w", {200, 200}, "sgd(lr=1)", "asp"};
  ASSERT_TRUE(client(0)->RegisterDense(spec, a).ok());
  ASSERT_TRUE(client(1)->RegisterDense(spec, b).ok());
  std::vector<float> got;
  int64_t v0 = -1;
  ASSERT_TRUE(client(1)->PullDense("w", &got, &v0).ok());
  EXPECT_EQ(got, a);
  std::vector<float> g(n, 0.5f);
  int64_t v1 = -1;
  ASSERT_TRUE(client(1)->Push({{"w", g}}, {}, &v1).ok());
  EXPECT_GT(v1, v0);
  ASSERT_TRUE(client(0)->PullDense("w", &got).ok());
  for (int i = 0; i < n; i += 997) ASSERT_EQ(got[i], a[i] - 0.5f);
  size_t chunk_rows = 0;
  for (auto& s : servers_) chunk_rows += s->stats().rows;
  EXPECT_EQ(chunk_rows, 3u);
}

TEST_F(ModelClientTest, BadRequestsGetClearErrors) {
  Form(1, 1);
  ModelClient* c = client(0);
  EXPECT_FALSE(
      c->RegisterTable({"x", 4, "normal(0,1)", "adagrad(lr=)", "asp"}).ok());
  Status s = c->RegisterTable({"x", 4, "gauss", "sgd(lr=1)", "asp"});
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(
      c->RegisterTable({"x", 4, "zeros", "sgd(lr=1)", "sometimes"}).ok());
  ASSERT_TRUE(c->RegisterTable({"x", 4, "zeros", "sgd(lr=1)", "asp"}).ok());
  s = c->RegisterTable({"x", 8, "zeros", "sgd(lr=1)", "asp"});
  EXPECT_NE(s.message().find("another spec"), std::string::npos) << s;
  std::vector<float> rows;
  s = c->PullRows("nope", {1}, &rows);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  s = c->Push({}, {{"x", {1, 2}, {1, 2, 3}}});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("dimension 4"), std::string::npos) << s;
  s = c->Push({}, {{"x", {1}, {NAN, 0, 0, 0}}});
  EXPECT_FALSE(s.ok());  // Refused by the table, nothing applied.
  ASSERT_TRUE(c->PullRows("x", {1}, &rows).ok());
  EXPECT_EQ(rows, (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(ModelClientTest, CheckpointRestoresRowsAndOptimizerState) {
  Form(2, 1);
  ModelClient* c = client(0);
  ASSERT_TRUE(
      c->RegisterTable({"e", 3, "uniform(-1,1)", "adagrad(lr=0.1)", "asp"})
          .ok());
  std::vector<float> init(10, 2.0f);
  ASSERT_TRUE(c->RegisterDense({"d", {10}, "adam(lr=0.01)", "asp"}, init).ok());
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 100; ++i) ids.push_back(i * 7919);
  std::vector<float> g(ids.size() * 3, 0.25f);
  ASSERT_TRUE(
      c->Push({{"d", std::vector<float>(10, 1.0f)}}, {{"e", ids, g}}).ok());
  char tmpl[] = "/tmp/ember-ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(c->Save(dir).ok());
  std::vector<float> saved_rows, saved_dense;
  ASSERT_TRUE(c->PullRows("e", ids, &saved_rows).ok());
  ASSERT_TRUE(c->PullDense("d", &saved_dense).ok());
  // Train on, then restore, then train the same step again: identical.
  ASSERT_TRUE(
      c->Push({{"d", std::vector<float>(10, 1.0f)}}, {{"e", ids, g}}).ok());
  std::vector<float> after_rows;
  ASSERT_TRUE(c->PullRows("e", ids, &after_rows).ok());
  ASSERT_TRUE(c->Load(dir).ok());
  std::vector<float> rows, dense;
  ASSERT_TRUE(c->PullRows("e", ids, &rows).ok());
  ASSERT_TRUE(c->PullDense("d", &dense).ok());
  EXPECT_EQ(rows, saved_rows);
  EXPECT_EQ(dense, saved_dense);
  ASSERT_TRUE(
      c->Push({{"d", std::vector<float>(10, 1.0f)}}, {{"e", ids, g}}).ok());
  ASSERT_TRUE(c->PullRows("e", ids, &rows).ok());
  EXPECT_EQ(rows, after_rows);  // Adagrad's accumulators came back too.
  // A damaged shard is refused and changes nothing.
  std::string shard = dir + "/shard-0-of-2.ckpt";
  FILE* f = std::fopen(shard.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 100, SEEK_SET);
  std::fputc(0x5A, f);
  std::fclose(f);
  Status s = c->Load(dir);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s;  // The server's own.
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  std::vector<float> unchanged;
  ASSERT_TRUE(c->PullRows("e", ids, &unchanged).ok());
  EXPECT_EQ(unchanged, after_rows);
  system(("rm -rf " + dir).c_str());
}

// Two workers in bsp, each pushing the gradient of its half of a
// mini-batch, end where one process training on the union would. Each push
// is one optimizer step; with SGD the two steps of a round equal one step
// with the summed gradient, up to float rounding.
TEST_F(ModelClientTest, BspTrainingOnTwoWorkersMatchesOneProcess) {
  Form(2, 2);
  TableSpec spec{"e", 4, "normal(0,0.1)", "sgd(lr=0.05)", "bsp"};
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(client(w)->RegisterTable(spec).ok());
  // Reference: the same updates in one place.
  auto init = model::Initializer::Parse("normal(0,0.1)");
  ASSERT_TRUE(init.ok());
  std::map<uint64_t, std::vector<float>> ref;
  auto row = [&](uint64_t id) -> std::vector<float>& {
    auto& r = ref[id];
    if (r.empty()) {
      r.resize(4);
      init->Fill(model::TableId("e"), id, r.data(), 4);
    }
    return r;
  };
  auto batch = [](int w, int it) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back((w * 31 + it * 7 + i * 3) % 20);
    return ids;
  };
  const int kIterations = 10;
  for (int it = 0; it < kIterations; ++it) {
    std::map<uint64_t, std::vector<float>> grad;
    for (int w = 0; w < 2; ++w) {
      for (uint64_t id : batch(w, it)) {
        auto& g = grad[id];
        g.resize(4, 0.0f);
        const auto& r = row(id);
        for (int j = 0; j < 4; ++j) g[j] += r[j] * 0.5f + 0.1f;
      }
    }
    for (auto& g : grad) {
      auto& r = row(g.first);
      for (int j = 0; j < 4; ++j) r[j] -= 0.05f * g.second[j];
    }
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      ModelClient* c = client(w);
      for (int it = 0; it < kIterations; ++it) {
        std::vector<uint64_t> ids = batch(w, it);
        std::vector<float> rows;
        ASSERT_TRUE(c->PullRows("e", ids, &rows).ok());
        std::vector<float> g(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) g[i] = rows[i] * 0.5f + 0.1f;
        ASSERT_TRUE(c->Push({}, {{"e", ids, g}}).ok());
        ASSERT_TRUE(c->Clock().ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all;
  for (uint64_t id = 0; id < 20; ++id) all.push_back(id);
  std::vector<float> rows;
  // A pull at clock 0 from a fresh view: wait for everything via Clock.
  ASSERT_TRUE(client(0)->PullRows("e", all, &rows).ok());
  for (uint64_t id = 0; id < 20; ++id) {
    if (!ref.count(id)) continue;
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(rows[id * 4 + j], ref[id][j], 1e-6) << id;
    }
  }
}

// A bsp round is one optimizer step with the sum of the workers' gradients
// (for Adagrad that differs from two steps); asp takes one step per push.
TEST_F(ModelClientTest, BspMergesARoundIntoOneOptimizerStep) {
  Form(1, 2);
  const std::vector<uint64_t> id{42};
  for (const char* mode : {"bsp", "asp"}) {
    const std::string name = std::string("t_") + mode;
    TableSpec spec{name, 1, "zeros", "adagrad(lr=1)", mode};
    for (int w = 0; w < 2; ++w) {
      ASSERT_TRUE(client(w)->RegisterTable(spec).ok());
    }
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        // Gradients 1 and 3.
        EXPECT_TRUE(client(w)->Push({}, {{name, id, {1.0f + 2.0f * w}}}).ok());
      });
    }
    for (auto& t : threads) t.join();
    std::vector<float> row;
    // bsp: the round is complete once both pushed; the pull waits for it.
    ASSERT_TRUE(client(0)->PullRows(name, id, &row).ok());
    if (std::string(mode) == "bsp") {
      // One step with g = 4: w = -1 * 4 / sqrt(16).
      EXPECT_FLOAT_EQ(row[0], -1.0f) << mode;
    } else {
      // Two steps, in either order: -1/1 - 3/sqrt(10) or -3/3 - 1/sqrt(10).
      const float a = -1.0f - 3.0f / std::sqrt(10.0f);
      const float b = -1.0f - 1.0f / std::sqrt(10.0f);
      EXPECT_TRUE(std::fabs(row[0] - a) < 1e-6 || std::fabs(row[0] - b) < 1e-6)
          << mode << " " << row[0];
    }
  }
}

// Save and Load complete under every consistency mode while a round is
// open: one worker has pushed for it, the other waits at a barrier for the
// first.
TEST_F(ModelClientTest, SaveAndLoadCompleteWhileARoundIsOpen) {
  Form(2, 2);
  const std::vector<uint64_t> ids{1, 2, 3};
  char tmpl[] = "/tmp/ember-ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (const char* mode : {"asp", "ssp:1", "bsp"}) {
    SCOPED_TRACE(mode);
    const std::string name = std::string("e_") + mode;
    for (int w = 0; w < 2; ++w) {
      ASSERT_TRUE(
          client(w)->RegisterTable({name, 2, "zeros", "sgd(lr=1)", mode}).ok());
    }
    // Worker 0 pushes for round 0; worker 1 has not.
    ASSERT_TRUE(
        client(0)->Push({}, {{name, ids, std::vector<float>(6, 1.0f)}}).ok());
    auto waiting = std::async(std::launch::async, [&] {
      return cluster_->worker(1)->BarrierStatus(0, kWorkerGroup);
    });
    EXPECT_TRUE(client(0)->Save(dir).ok());
    EXPECT_TRUE(client(0)->Load(dir).ok());
    EXPECT_TRUE(cluster_->worker(0)->BarrierStatus(0, kWorkerGroup).ok());
    EXPECT_TRUE(waiting.get().ok());
    // Training goes on: worker 1 pushes for the round, both finish it and
    // pull (the rows are what was loaded plus worker 1's step, or plus
    // both: worker 0's push went to the model the load replaced).
    auto step = [&](int w) {
      return std::async(std::launch::async, [&, w] {
        Status s = w == 1 ? client(1)->Push(
                                {}, {{name, ids, std::vector<float>(6, 1.0f)}})
                          : Status::OK();
        if (s.ok()) s = client(w)->Clock();
        std::vector<float> rows;
        if (s.ok()) s = client(w)->PullRows(name, ids, &rows);
        return s;
      });
    };
    auto a = step(0), b = step(1);
    ASSERT_EQ(a.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    ASSERT_EQ(b.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    EXPECT_TRUE(a.get().ok());
    EXPECT_TRUE(b.get().ok());
  }
  system(("rm -rf " + dir).c_str());
}

// A save while a worker keeps pushing writes the model as it was at one
// moment: every row shows the same number of pushes, the saved version.
// (SGD with lr 1 and gradient 1 on every row: after v pushes each row is
// -v.) The table spans several snapshot slices.
TEST_F(ModelClientTest, SaveWhilePushingWritesOneMoment) {
  Form(1, 2);
  const std::string dir = ::testing::TempDir() + "/ember_save_while_pushing";
  system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  ASSERT_TRUE(
      client(0)->RegisterTable({"e", 1, "zeros", "sgd(lr=1)", "asp"}).ok());
  ASSERT_TRUE(
      client(1)->RegisterTable({"e", 1, "zeros", "sgd(lr=1)", "asp"}).ok());
  std::vector<uint64_t> ids(40000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  const std::vector<float> ones(ids.size(), 1.0f);
  ASSERT_TRUE(client(0)->Push({}, {{"e", ids, ones}}).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> pushed{0};
  std::thread pusher([&] {
    while (!stop.load()) {
      if (!client(1)->Push({}, {{"e", ids, ones}}).ok()) return;
      pushed.fetch_add(1);
    }
  });
  while (pushed.load() < 2) std::this_thread::yield();
  Status saved = client(0)->Save(dir);
  stop = true;
  pusher.join();
  ASSERT_TRUE(saved.ok()) << saved;
  ASSERT_TRUE(client(0)->Load(dir).ok());
  std::vector<float> rows;
  ASSERT_TRUE(client(0)->PullRows("e", ids, &rows).ok());
  int64_t version = 0;  // The loaded model's: the saved version.
  ASSERT_TRUE(client(0)->Push({}, {}, &version).ok());
  ASSERT_GE(version, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(rows[i], -static_cast<float>(version)) << "row " << i;
  }
  system(("rm -rf " + dir).c_str());
}

// Bytes at the control app that are no well-formed request (the old text
// form, a head naming another operation) are answered with kCorruption by
// every server, which keeps serving.
// With a copy of everything on another server, each server applies its own
// pushes and copies of the other's: the version counts the pushes, not the
// copies, and so do the servers' updates.
TEST_F(ModelClientTest, TheVersionCountsPushesNotTheirCopies) {
  Form(2, 1, [](Options* o) { o->replicas = 1; });
  const int64_t numel = 4 * model::kDenseChunk;
  ASSERT_TRUE(client(0)
                  ->RegisterDense({"w", {numel}, "sgd(lr=1)", "asp"},
                                  std::vector<float>(numel, 0.f))
                  .ok());
  const int kPushes = 5;
  int64_t version = -1;
  for (int p = 0; p < kPushes; ++p) {
    ASSERT_TRUE(
        client(0)
            ->Push({{"w", std::vector<float>(numel, 1.f)}}, {}, &version)
            .ok());
  }
  // Each push is one request to each server (the chunks are spread over
  // both); each server also applied a copy of each of the other's.
  EXPECT_EQ(version, kPushes);
  size_t stored = 0;
  for (auto& s : servers_) {
    EXPECT_EQ(s->stats().updates, static_cast<uint64_t>(kPushes));
    stored += s->stats().rows;
  }
  std::vector<float> w;
  ASSERT_TRUE(client(0)->PullDense("w", &w).ok());
  for (int64_t i = 0; i < numel; ++i) {
    ASSERT_EQ(w[i], -static_cast<float>(kPushes)) << "element " << i;
  }
  // The rows stats count what a server stores: its chunks and the copies.
  EXPECT_EQ(stored, 2u * 4u) << "4 chunks, each stored twice";
}

// A checkpoint saved by 3 servers (each with a copy of another's rows)
// loads into clusters of 2 and of 4, with and without copies: every row,
// optimizer slot and dense element comes back.
TEST_F(ModelClientTest, ACheckpointLoadsIntoAClusterOfAnotherSize) {
  Form(3, 1, [](Options* o) { o->replicas = 1; });
  const TableSpec table{"e", 4, "normal(0,0.1)", "adagrad(lr=0.1)", "asp"};
  const int64_t numel = 5 * model::kDenseChunk + 7;
  const DenseSpec dense{"d", {numel}, "adam(lr=0.01)", "asp"};
  const std::vector<float> initial(numel, 0.5f);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 300; ++i) ids.push_back(i * 0x9E3779B97F4A7C15ull);
  auto train = [&](ModelClient* c, int steps) {
    for (int p = 0; p < steps; ++p) {
      std::vector<float> g(ids.size() * 4), gd(numel);
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * ((i + p) % 13);
      for (int64_t i = 0; i < numel; ++i) gd[i] = 0.001f * ((i * 7 + p) % 11);
      ASSERT_TRUE(c->Push({{"d", gd}}, {{"e", ids, g}}).ok());
    }
  };
  ASSERT_TRUE(client(0)->RegisterTable(table).ok());
  ASSERT_TRUE(client(0)->RegisterDense(dense, initial).ok());
  train(client(0), 3);
  char tmpl[] = "/tmp/ember-resize-ckpt.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(client(0)->Save(dir).ok());
  std::vector<float> rows, values;
  ASSERT_TRUE(client(0)->PullRows("e", ids, &rows).ok());
  ASSERT_TRUE(client(0)->PullDense("d", &values).ok());
  // Two more steps from the save, for the slots' sake.
  train(client(0), 2);
  std::vector<float> rows_after, values_after;
  ASSERT_TRUE(client(0)->PullRows("e", ids, &rows_after).ok());
  ASSERT_TRUE(client(0)->PullDense("d", &values_after).ok());

  for (const auto& shape : std::vector<std::pair<int, int>>{{2, 0}, {4, 1}}) {
    SCOPED_TRACE(std::to_string(shape.first) + " servers, " +
                 std::to_string(shape.second) + " copies");
    InProcCluster other(shape.first, 1,
                        [&](Options* o) { o->replicas = shape.second; });
    other.Start();
    std::vector<std::unique_ptr<ModelServer>> servers;
    for (int i = 0; i < shape.first; ++i) {
      servers.push_back(std::make_unique<ModelServer>(other.server(i)));
    }
    auto c = std::make_unique<ModelClient>(other.worker(0));
    ASSERT_TRUE(c->RegisterTable(table).ok());
    ASSERT_TRUE(c->RegisterDense(dense, initial).ok());
    Status loaded = c->Load(dir);
    ASSERT_TRUE(loaded.ok()) << loaded;
    std::vector<float> got_rows, got_values;
    ASSERT_TRUE(c->PullRows("e", ids, &got_rows).ok());
    ASSERT_TRUE(c->PullDense("d", &got_values).ok());
    EXPECT_EQ(got_rows, rows);
    EXPECT_EQ(got_values, values);
    // Adagrad's and Adam's slots came back too: the same two steps end
    // where they did.
    train(c.get(), 2);
    ASSERT_TRUE(c->PullRows("e", ids, &got_rows).ok());
    ASSERT_TRUE(c->PullDense("d", &got_values).ok());
    EXPECT_EQ(got_rows, rows_after);
    EXPECT_EQ(got_values, values_after);
    size_t stored = 0;
    for (auto& s : servers) stored += s->stats().rows;
    const size_t chunks = (numel + model::kDenseChunk - 1) / model::kDenseChunk;
    EXPECT_EQ(stored, (ids.size() + chunks) * (shape.second + 1));
    c.reset();
    other.Finalize();
  }
  // A missing shard is named, and nothing changes.
  ASSERT_EQ(std::remove((dir + "/shard-1-of-3.ckpt").c_str()), 0);
  Status s = client(0)->Load(dir);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s;
  EXPECT_NE(s.message().find("shard-1-of-3.ckpt is missing"), std::string::npos)
      << s;
  std::vector<float> unchanged;
  ASSERT_TRUE(client(0)->PullRows("e", ids, &unchanged).ok());
  EXPECT_EQ(unchanged, rows_after);
  system(("rm -rf " + dir).c_str());
}

TEST_F(ModelClientTest, MalformedControlRequestsAreAnsweredNotFatal) {
  Form(2, 1);
  SimpleApp raw(model::kControlApp, /*customer_id=*/7, cluster_->worker(0));
  std::mutex mu;
  std::vector<std::string> answers;
  raw.set_response_handle([&](const SimpleData& res, SimpleApp*) {
    std::lock_guard<std::mutex> lock(mu);
    answers.push_back(res.body);
  });
  model::ControlRequest save;
  save.op = model::ControlOp::kSave;
  save.dir = "/nonexistent";
  int head = 0;
  const std::string save_body = model::EncodeControlRequest(save, &head);
  const std::pair<int, std::string> bad[] = {
      {1, "emb\t8\tzeros\tsgd(lr=1)\tasp"},
      {static_cast<int>(model::ControlOp::kVersion), save_body},
      {1, std::string()},
  };
  for (const auto& b : bad) {
    ASSERT_TRUE(
        raw.WaitStatus(raw.Request(b.first, b.second, kServerGroup)).ok());
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(answers.size(), 6u);
  for (const std::string& a : answers) {
    auto reply = model::DecodeControlReply(a);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status.code(), Status::Code::kCorruption) << reply->status;
  }
  // The servers still serve; names may hold any bytes, tabs included.
  EXPECT_TRUE(
      client(0)->RegisterTable({"a\tb", 2, "zeros", "sgd(lr=1)", "asp"}).ok());
  std::vector<float> rows;
  ASSERT_TRUE(client(0)->PullRows("a\tb", {1, 2}, &rows).ok());
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));
}

// A server that never answers a model control request (here: it runs no
// ModelServer) fails the call within EMBER_MODEL_TIMEOUT, naming it.
TEST_F(ModelClientTest, ControlRequestsFailNamingASilentServer) {
  Form(
      2, 1, [](Options* o) { o->model_timeout_ms = 200; },
      /*model_servers=*/1);
  Status s = client(0)->RegisterTable({"e", 2, "zeros", "sgd(lr=1)", "asp"});
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("model RegisterTable"), std::string::npos) << s;
  EXPECT_NE(s.message().find("server 1"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("server 0"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
