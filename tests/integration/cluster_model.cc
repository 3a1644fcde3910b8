// Multi-process check of the model layer under bsp: workers train a small
// logistic model (an embedding table and a dense parameter split into
// chunks over the servers) through ps::ModelClient, each on its own share of
// every mini-batch. Worker 0 then replays the same training in this one
// process, with the store's own table and optimizers and no cluster, on the
// union of the shares, and fails unless the servers' parameters equal the
// replay's within --tolerance, and unless training moved them by far more
// than that (so the check can fail).
//
// Under bsp the servers take one optimizer step per round with the summed
// gradients of the workers, so this holds for any optimizer (Adagrad on the
// table and Adam on the dense parameter by default). The gradients depend
// on the pulled parameters through the sigmoid, so any pull that saw a state
// other than "every earlier iteration, nothing of this one" shows.
//
// The failover test (model_failover_test.py) runs it undisturbed and with
// each server in turn killed mid-run, and compares the final parameters
// worker 0 writes to --out: bitwise under bsp. Under asp and ssp the order
// of pushes varies from run to run; --sign_grads makes the training
// independent of that order (gradients of +-1/64 by label, exact in float,
// zero initial values and sgd), so that those runs must agree bitwise too.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/embedding_table.h"
#include "model/initializer.h"
#include "model/model_protocol.h"
#include "model/optimizer.h"
#include "ps/model.h"
#include "ps/ps.h"
#include "util/mix.h"

DEFINE_int32(iterations, 30, "training iterations");
DEFINE_int32(batch, 48, "examples per worker per iteration");
DEFINE_string(consistency, "bsp", "consistency of the parameters");
DEFINE_string(table_optimizer, "adagrad(lr=0.1)", "the table's optimizer");
DEFINE_string(dense_optimizer, "adam(lr=0.01)",
              "the dense parameter's optimizer");
DEFINE_double(tolerance, 1e-6, "largest allowed difference");
DEFINE_bool(replay, true,
            "worker 0 checks the parameters against a one-process replay");
DEFINE_bool(sign_grads, false,
            "order-independent gradients: -1/64 for label 1, +1/64 for 0, "
            "and zero initial values (with sgd, sums exact in float)");
DEFINE_string(out, "",
              "worker 0 writes the final parameters here: raw floats, the "
              "rows of every trained id in id order, then the dense values");
DEFINE_int32(pace_ms, 0, "a pause per iteration (the failover test's kill)");

namespace {

constexpr int kDim = 8;
constexpr int kIdsPerExample = 5;
constexpr int kDistinct = 600;
constexpr size_t kDense = 40000;  // three chunks of 16384 floats

const char* Init() { return FLAGS_sign_grads ? "zeros" : "normal(0,0.1)"; }

// A bijective 64-bit mix.
uint64_t Mix(uint64_t x) { return ps::Fmix64(x); }

struct Example {
  uint64_t ids[kIdsPerExample];
  float label;
};

// Worker w's half of iteration `it`: skewed IDs (small ones are frequent,
// so rows are shared across workers and iterations), spread over 64 bits.
std::vector<Example> Batch(int w, int it) {
  std::vector<Example> batch(FLAGS_batch);
  for (int e = 0; e < FLAGS_batch; ++e) {
    uint64_t h = Mix((static_cast<uint64_t>(w) << 40) ^
                     (static_cast<uint64_t>(it) << 20) ^ e);
    for (int i = 0; i < kIdsPerExample; ++i) {
      h = Mix(h + i);
      uint64_t r = h % kDistinct;
      r = r * r / kDistinct;  // skew towards small values
      batch[e].ids[i] = Mix(r + 1);
    }
    batch[e].label = (h >> 7) % 3 == 0 ? 1.0f : 0.0f;
  }
  return batch;
}

// Powers of two and their small multiples: exact products (--sign_grads).
const float kMix[kDim] = {1.0f,  -0.5f, 0.25f,  0.75f,
                          -1.0f, 0.5f,  -0.25f, 0.125f};

size_t DenseIndex(uint64_t id) { return Mix(id ^ 0x5bd1e995) % kDense; }

// Logistic loss gradient of a batch against the given parameters, scaled
// by 1/`scale`. rows: ids in example order, kDim floats each.
void Gradients(const std::vector<Example>& batch, const float* rows,
               const std::vector<float>& dense, double scale,
               std::vector<float>* row_grads,
               std::map<size_t, float>* dense_grads) {
  row_grads->assign(batch.size() * kIdsPerExample * kDim, 0.0f);
  for (size_t e = 0; e < batch.size(); ++e) {
    double z = 0;
    for (int i = 0; i < kIdsPerExample; ++i) {
      const float* r = rows + (e * kIdsPerExample + i) * kDim;
      for (int j = 0; j < kDim; ++j) z += r[j] * kMix[j];
      z += dense[DenseIndex(batch[e].ids[i])];
    }
    const double g =
        FLAGS_sign_grads
            ? (batch[e].label > 0 ? -1.0 : 1.0) / 64
            : (1.0 / (1.0 + std::exp(-z)) - batch[e].label) / scale;
    for (int i = 0; i < kIdsPerExample; ++i) {
      float* gr = row_grads->data() + (e * kIdsPerExample + i) * kDim;
      for (int j = 0; j < kDim; ++j) gr[j] = static_cast<float>(g * kMix[j]);
      (*dense_grads)[DenseIndex(batch[e].ids[i])] += static_cast<float>(g);
    }
  }
}

std::vector<uint64_t> Ids(const std::vector<Example>& batch) {
  std::vector<uint64_t> ids;
  for (const auto& e : batch)
    ids.insert(ids.end(), e.ids, e.ids + kIdsPerExample);
  return ids;
}

std::vector<float> InitialDense() {
  std::vector<float> d(kDense);
  if (FLAGS_sign_grads) return d;
  for (size_t i = 0; i < kDense; ++i) d[i] = 0.05f * std::sin(0.37 * i);
  return d;
}

void Check(const ps::Status& s, const char* what) {
  if (!s.ok()) LOG(FATAL) << what << ": " << s;
}

// The same training in this process, on the union of the workers' batches,
// with the servers' store and optimizers: a table of rows, and the dense
// parameter as a table of chunks as the servers keep it.
class Replay {
 public:
  Replay() {
    auto init = ps::model::Initializer::Parse(Init());
    CHECK(init.ok()) << init.status();
    rows_ = Table("emb", kDim, *init, FLAGS_table_optimizer);
    auto zeros = ps::model::Initializer::Parse("zeros");
    CHECK(zeros.ok());
    dense_ =
        Table("dense", ps::model::kDenseChunk, *zeros, FLAGS_dense_optimizer);
    std::vector<float> padded = InitialDense();
    padded.resize(Chunks() * ps::model::kDenseChunk, 0.0f);
    for (uint64_t c = 0; c < Chunks(); ++c) {
      CHECK(dense_
                ->InsertRow(c, padded.data() + c * ps::model::kDenseChunk,
                            nullptr)
                .ok());
    }
  }

  void Train(int workers) {
    for (int it = 0; it < FLAGS_iterations; ++it) {
      std::vector<Example> batch;
      for (int w = 0; w < workers; ++w) {
        std::vector<Example> share = Batch(w, it);
        batch.insert(batch.end(), share.begin(), share.end());
      }
      std::vector<uint64_t> ids = Ids(batch);
      seen_.insert(seen_.end(), ids.begin(), ids.end());
      std::sort(seen_.begin(), seen_.end());
      seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
      std::vector<float> pulled(ids.size() * kDim), row_grads;
      CHECK(rows_->Lookup(ids.data(), ids.size(), pulled.data()).ok());
      std::map<size_t, float> dense_grads;
      Gradients(batch, pulled.data(), Dense(), batch.size(), &row_grads,
                &dense_grads);
      CHECK(
          rows_->ApplyGradients(ids.data(), ids.size(), row_grads.data()).ok());
      std::vector<float> dg(Chunks() * ps::model::kDenseChunk, 0.0f);
      for (const auto& g : dense_grads) dg[g.first] = g.second;
      std::vector<uint64_t> chunks(Chunks());
      for (uint64_t c = 0; c < Chunks(); ++c) chunks[c] = c;
      CHECK(
          dense_->ApplyGradients(chunks.data(), chunks.size(), dg.data()).ok());
    }
  }

  std::vector<float> Row(uint64_t id) {
    std::vector<float> r(kDim);
    CHECK(rows_->Lookup(&id, 1, r.data()).ok());
    return r;
  }

  std::vector<float> Dense() const {
    std::vector<float> d(Chunks() * ps::model::kDenseChunk);
    std::vector<uint64_t> chunks(Chunks());
    for (uint64_t c = 0; c < Chunks(); ++c) chunks[c] = c;
    dense_->Find(chunks.data(), chunks.size(), d.data(), nullptr);
    d.resize(kDense);
    return d;
  }

  const std::vector<uint64_t>& ids() const { return seen_; }

 private:
  static uint64_t Chunks() {
    return (kDense + ps::model::kDenseChunk - 1) / ps::model::kDenseChunk;
  }

  static std::unique_ptr<ps::model::EmbeddingTable> Table(
      const std::string& name, int dim, const ps::model::Initializer& init,
      const std::string& optimizer) {
    auto opt = ps::model::Optimizer::Parse(optimizer);
    CHECK(opt.ok()) << opt.status();
    auto t = ps::model::EmbeddingTable::Create(
        name, ps::model::TableId(name), dim, init, std::move(opt.value()));
    CHECK(t.ok()) << t.status();
    return std::move(t.value());
  }

  std::unique_ptr<ps::model::EmbeddingTable> rows_, dense_;
  std::vector<uint64_t> seen_;
};

// Every id the workers train, sorted.
std::vector<uint64_t> TrainedIds(int workers) {
  std::vector<uint64_t> all;
  for (int it = 0; it < FLAGS_iterations; ++it) {
    for (int w = 0; w < workers; ++w) {
      std::vector<uint64_t> ids = Ids(Batch(w, it));
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

bool WriteParameters(const std::string& path, const std::vector<float>& rows,
                     const std::vector<float>& dense) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok =
      std::fwrite(rows.data(), sizeof(float), rows.size(), f) == rows.size() &&
      std::fwrite(dense.data(), sizeof(float), dense.size(), f) == dense.size();
  return std::fclose(f) == 0 && ok;
}

// What worker 0 pulled at the end, for CheckReplay.
struct Trained {
  std::vector<uint64_t> ids;
  std::vector<float> rows, dense;
  int workers = 0;
} trained;

int RunWorker() {
  const int rank = ps::MyRank();
  const int workers = ps::NumWorkers();
  ps::ModelClient client;
  Check(client.RegisterTable(
            {"emb", kDim, Init(), FLAGS_table_optimizer, FLAGS_consistency}),
        "register emb");
  Check(client.RegisterDense({"dense",
                              {static_cast<int64_t>(kDense)},
                              FLAGS_dense_optimizer,
                              FLAGS_consistency},
                             InitialDense()),
        "register dense");
  for (int it = 0; it < FLAGS_iterations; ++it) {
    std::vector<Example> batch = Batch(rank, it);
    std::vector<uint64_t> ids = Ids(batch);
    std::vector<float> rows, dense;
    Check(client.PullRows("emb", ids, &rows), "pull rows");
    Check(client.PullDense("dense", &dense), "pull dense");
    std::vector<float> row_grads;
    std::map<size_t, float> dense_grads;
    Gradients(batch, rows.data(), dense,
              static_cast<double>(FLAGS_batch) * workers, &row_grads,
              &dense_grads);
    std::vector<float> dg(kDense, 0.0f);
    for (const auto& g : dense_grads) dg[g.first] = g.second;
    Check(client.Push({{"dense", dg}}, {{"emb", ids, row_grads}}), "push");
    Check(client.Clock(), "clock");
    std::printf("cluster_model: progress %d\n", it + 1);
    std::fflush(stdout);
    if (FLAGS_pace_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_pace_ms));
    }
  }
  Check(ps::Postoffice::Get()->BarrierStatus(0, ps::kWorkerGroup), "barrier");
  if (rank != 0) return 0;
  int rc = 0;
  const std::vector<uint64_t> ids = TrainedIds(workers);
  std::vector<float> rows, dense;
  Check(client.PullRows("emb", ids, &rows), "final pull rows");
  Check(client.PullDense("dense", &dense), "final pull dense");
  if (!FLAGS_out.empty()) {
    if (!WriteParameters(FLAGS_out, rows, dense)) {
      std::printf("FAIL: cannot write %s\n", FLAGS_out.c_str());
      return 1;
    }
    std::printf("cluster_model: wrote %zu rows and %zu dense values to %s\n",
                ids.size(), dense.size(), FLAGS_out.c_str());
  }
  // The replay runs after Finalize (CheckReplay): a long computation here
  // would starve the nodes' heartbeats on a loaded machine (a sanitizer
  // build under ctest -j2) and fail a run that is right.
  trained = {ids, std::move(rows), std::move(dense), workers};
  std::fflush(stdout);
  return rc;
}

// Compares what worker 0 pulled with the same training in this process.
int CheckReplay() {
  int rc = 0;
  const std::vector<uint64_t>& ids = trained.ids;
  const std::vector<float>& rows = trained.rows;
  const std::vector<float>& dense = trained.dense;
  const int workers = trained.workers;
  if (FLAGS_replay) {
    Replay replay;
    replay.Train(workers);
    CHECK(replay.ids() == ids);
    auto init = ps::model::Initializer::Parse(Init());
    Check(init.status(), "initializer");
    double max_diff = 0, max_moved = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      std::vector<float> start(kDim), want = replay.Row(ids[p]);
      init->Fill(ps::model::TableId("emb"), ids[p], start.data(), kDim);
      for (int j = 0; j < kDim; ++j) {
        max_diff =
            std::max(max_diff, std::fabs(double{rows[p * kDim + j]} - want[j]));
        max_moved = std::max(max_moved, std::fabs(double{want[j]} - start[j]));
      }
    }
    const std::vector<float> start = InitialDense(), want = replay.Dense();
    double dense_diff = 0, dense_moved = 0;
    for (size_t i = 0; i < kDense; ++i) {
      dense_diff = std::max(dense_diff, std::fabs(double{dense[i]} - want[i]));
      dense_moved =
          std::max(dense_moved, std::fabs(double{want[i]} - start[i]));
    }
    std::printf(
        "RESULT rows=%zu max_row_diff=%.3g max_row_moved=%.3g "
        "max_dense_diff=%.3g max_dense_moved=%.3g tolerance=%.3g\n",
        ids.size(), max_diff, max_moved, dense_diff, dense_moved,
        FLAGS_tolerance);
    if (max_diff > FLAGS_tolerance || dense_diff > FLAGS_tolerance) {
      // Where they differ, to tell which server's data went wrong.
      size_t rows_off = 0, dense_off = 0;
      std::string dense_runs;
      for (size_t p = 0; p < ids.size(); ++p) {
        const std::vector<float> want = replay.Row(ids[p]);
        for (int j = 0; j < kDim; ++j) {
          if (std::fabs(double{rows[p * kDim + j]} - want[j]) >
              FLAGS_tolerance) {
            ++rows_off;
            break;
          }
        }
      }
      const std::vector<float> want = replay.Dense();
      size_t run_start = kDense;
      for (size_t i = 0; i <= kDense; ++i) {
        const bool off = i < kDense && std::fabs(double{dense[i]} - want[i]) >
                                           FLAGS_tolerance;
        dense_off += off;
        if (off && run_start == kDense) run_start = i;
        if (!off && run_start != kDense) {
          dense_runs +=
              " [" + std::to_string(run_start) + "," + std::to_string(i) + ")";
          run_start = kDense;
        }
      }
      std::printf(
          "cluster_model: %zu of %zu rows and %zu of %zu dense values "
          "differ; dense runs:%s\n",
          rows_off, ids.size(), dense_off, kDense,
          dense_runs.substr(0, 400).c_str());
      std::printf("FAIL: the cluster's parameters differ from the replay\n");
      rc = 1;
    }
    if (max_moved < 1000 * FLAGS_tolerance ||
        dense_moved < 1000 * FLAGS_tolerance) {
      std::printf("FAIL: training barely moved the parameters\n");
      rc = 1;
    }
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  ps::Start(0);
  std::unique_ptr<ps::ModelServer> server;
  if (ps::IsServer()) server = std::make_unique<ps::ModelServer>();
  const bool checks = ps::IsWorker() && ps::MyRank() == 0;
  int rc = ps::IsWorker() ? RunWorker() : 0;
  ps::Finalize(0, true);
  if (checks && rc == 0) rc = CheckReplay();
  return rc;
}
