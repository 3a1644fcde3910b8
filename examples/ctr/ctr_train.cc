// ctr_train: a CTR model (logistic regression plus a factorisation machine
// over hashed sparse features) trained across Ember's servers and workers
// through the model layer (ps/model.h).
//
// Parameters live on the servers: embedding table "w" (dim 1, the linear
// weights), table "v" (dim --fm_dim, the FM factors), dense "bias". Rows are
// created on first pull and updated by the servers' optimizer. Each worker
// trains on its own shard, prefetching the next mini-batch's rows while it
// computes; worker 0 evaluates held-out log-loss and AUC as it goes and at
// the end writes the learning curve as CSV to --out_dir (scripts/demo.sh
// draws it with examples/ctr/plot_curve.py).
//
// Data: by default a synthetic stream with a known ground-truth LR+FM model
// (millions of distinct IDs with power-law frequencies), so the held-out AUC
// can be compared with the truth's; or --data=FILE --format=libsvm|criteo.
//
//   scripts/local.sh 2 2 build/examples/ctr_train
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ctr/metrics.h"
#include "ps/data.h"
#include "ps/model.h"
#include "ps/ps.h"

DEFINE_uint64(seed, 1, "seed of the synthetic truth and data");
DEFINE_int64(examples_per_worker, 4000000,
             "synthetic training examples per worker");
DEFINE_int64(test_examples, 50000, "held-out examples (worker 0)");
DEFINE_int32(batch, 500, "examples per mini-batch");
DEFINE_int32(epochs, 1, "passes over each worker's shard");
DEFINE_int32(fm_dim, 4, "factorisation machine dimension");
DEFINE_string(optimizer, "adagrad(lr=0.05,eps=1e-6)",
              "optimizer of the linear weights w and the bias");
DEFINE_string(fm_optimizer, "adagrad(lr=0.02,eps=1e-6)",
              "optimizer of the factor table v (empty: --optimizer)");
DEFINE_string(consistency, "asp", "consistency of the tables");
DEFINE_int32(evals, 8, "held-out evaluations during training (worker 0)");
DEFINE_string(data, "", "a libsvm or Criteo file instead of synthetic data");
DEFINE_string(format, "libsvm", "format of --data: libsvm or criteo");
DEFINE_string(out_dir, "ctr_out", "where worker 0 writes curve.csv");
DEFINE_string(checkpoint_dir, "",
              "if set, the model is saved there at the end");

namespace {

using Clock = std::chrono::steady_clock;

struct Model {
  ps::ModelClient* client;
  int k;
};

// Forward pass for a batch: logits, given the rows pulled for each example's
// ids (w: one float per id; v: k floats per id), in example order.
void Forward(const std::vector<ps::data::Example>& batch, const float* w,
             const float* v, float bias, int k, std::vector<double>* logits,
             std::vector<double>* sums) {
  logits->resize(batch.size());
  sums->assign(batch.size() * k, 0.0);
  size_t pos = 0;
  for (size_t e = 0; e < batch.size(); ++e) {
    const ps::data::Example& ex = batch[e];
    double z = bias, sq = 0;
    double* s = sums->data() + e * k;
    for (size_t i = 0; i < ex.ids.size(); ++i, ++pos) {
      const float x = ex.value(i);
      z += w[pos] * x;
      for (int f = 0; f < k; ++f) {
        double t = v[pos * k + f] * x;
        s[f] += t;
        sq += t * t;
      }
    }
    double inter = 0;
    for (int f = 0; f < k; ++f) inter += s[f] * s[f];
    (*logits)[e] = z + 0.5 * (inter - sq);
  }
}

std::vector<uint64_t> Ids(const std::vector<ps::data::Example>& batch) {
  std::vector<uint64_t> ids;
  for (const auto& e : batch) ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  return ids;
}

struct Pulled {
  int w_ticket = -1, v_ticket = -1;
};

Pulled Prefetch(ps::ModelClient* c,
                const std::vector<ps::data::Example>& batch) {
  std::vector<uint64_t> ids = Ids(batch);
  return {c->PullRowsAsync("w", ids), c->PullRowsAsync("v", ids)};
}

void Check(const ps::Status& s, const char* what) {
  if (!s.ok()) LOG(FATAL) << what << ": " << s;
}

// Held-out predictions of the current model.
void Evaluate(ps::ModelClient* c, const std::vector<ps::data::Example>& test,
              int k, double* auc, double* loss) {
  std::vector<float> bias;
  Check(c->PullDense("bias", &bias), "pull bias");
  std::vector<double> logits, sums, all;
  std::vector<float> labels;
  const size_t step = 10000;
  for (size_t b = 0; b < test.size(); b += step) {
    std::vector<ps::data::Example> part(
        test.begin() + b, test.begin() + std::min(test.size(), b + step));
    std::vector<float> w, v;
    Pulled p = Prefetch(c, part);
    Check(c->WaitRows(p.w_ticket, &w), "pull w");
    Check(c->WaitRows(p.v_ticket, &v), "pull v");
    Forward(part, w.data(), v.data(), bias[0], k, &logits, &sums);
    all.insert(all.end(), logits.begin(), logits.end());
    for (const auto& e : part) labels.push_back(e.label);
  }
  *auc = ctr::Auc(all, labels);
  *loss = ctr::LogLossOfLogits(all, labels);
}

int RunWorker() {
  const int rank = ps::MyRank();
  const int workers = ps::NumWorkers();
  const int k = FLAGS_fm_dim;
  ps::ModelClient client;
  Check(client.RegisterTable(
            {"w", 1, "zeros", FLAGS_optimizer, FLAGS_consistency}),
        "register w");
  Check(client.RegisterTable(
            {"v", k, "normal(0,0.01)",
             FLAGS_fm_optimizer.empty() ? FLAGS_optimizer : FLAGS_fm_optimizer,
             FLAGS_consistency}),
        "register v");
  Check(client.RegisterDense({"bias", {1}, FLAGS_optimizer, FLAGS_consistency},
                             {0.0f}),
        "register bias");

  // Data.
  std::vector<ps::data::Example> train, test;
  std::unique_ptr<ps::data::SyntheticSource> source;
  double truth_auc = ctr::CurvePoint::kNone;
  if (FLAGS_data.empty()) {
    ps::data::SyntheticConfig config;
    config.seed = FLAGS_seed;
    auto s = ps::data::SyntheticSource::Create(config);
    Check(s.status(), "synthetic data");
    source = std::move(s.value());
    train = source->Generate(ps::data::SyntheticSource::TrainStream(rank), 0,
                             FLAGS_examples_per_worker);
    if (rank == 0) {
      test = source->Generate(ps::data::SyntheticSource::kTestStream, 0,
                              FLAGS_test_examples);
      std::vector<double> truth;
      std::vector<float> labels;
      for (const auto& e : test) {
        truth.push_back(source->TruthLogit(e));
        labels.push_back(e.label);
      }
      truth_auc = ctr::Auc(truth, labels);
    }
  } else {
    ps::data::Format format = FLAGS_format == "criteo"
                                  ? ps::data::Format::kCriteo
                                  : ps::data::Format::kLibsvm;
    ps::data::ReadOptions o;
    o.split = ps::data::ReadOptions::Split::kTrain;
    o.shard = rank;
    o.num_shards = workers;
    Check(ps::data::ReadExamples(FLAGS_data, format, o, &train), "read data");
    if (rank == 0) {
      o.split = ps::data::ReadOptions::Split::kTest;
      o.shard = 0;
      o.num_shards = 1;
      Check(ps::data::ReadExamples(FLAGS_data, format, o, &test), "read test");
    }
  }

  ctr::LearningCurve curve;
  const auto start = Clock::now();
  const size_t batches = (train.size() + FLAGS_batch - 1) / FLAGS_batch;
  const size_t total = batches * FLAGS_epochs;
  const size_t eval_every =
      std::max<size_t>(1, total / std::max(1, FLAGS_evals));
  auto batch_at = [&](size_t i) {
    size_t b = i % batches;
    return std::vector<ps::data::Example>(
        train.begin() + b * FLAGS_batch,
        train.begin() + std::min(train.size(), (b + 1) * FLAGS_batch));
  };
  double train_loss = 0;
  int64_t examples = 0;
  std::vector<ps::data::Example> batch = batch_at(0);
  Pulled next = Prefetch(&client, batch);
  std::vector<float> w, v, bias;
  std::vector<double> logits, sums;
  for (size_t i = 0; i < total; ++i) {
    Check(client.WaitRows(next.w_ticket, &w), "pull w");
    Check(client.WaitRows(next.v_ticket, &v), "pull v");
    Check(client.PullDense("bias", &bias), "pull bias");
    std::vector<ps::data::Example> following;
    if (i + 1 < total) {
      following = batch_at(i + 1);
      next = Prefetch(&client, following);  // overlaps the compute below
    }
    Forward(batch, w.data(), v.data(), bias[0], k, &logits, &sums);
    // Gradients of the mean log-loss.
    ps::SparseGradient gw{"w", Ids(batch), std::vector<float>(w.size())};
    ps::SparseGradient gv{"v", gw.ids, std::vector<float>(v.size())};
    double gb = 0, loss = 0;
    const double scale = 1.0 / batch.size();
    size_t pos = 0;
    for (size_t e = 0; e < batch.size(); ++e) {
      const ps::data::Example& ex = batch[e];
      double p = ctr::Sigmoid(logits[e]);
      loss += ex.label > 0.5f ? -std::log(std::max(p, 1e-7))
                              : -std::log(std::max(1 - p, 1e-7));
      double g = (p - ex.label) * scale;
      gb += g;
      const double* s = sums.data() + e * k;
      for (size_t j = 0; j < ex.ids.size(); ++j, ++pos) {
        const float x = ex.value(j);
        gw.grads[pos] = static_cast<float>(g * x);
        for (int f = 0; f < k; ++f) {
          double vf = v[pos * k + f];
          gv.grads[pos * k + f] = static_cast<float>(g * x * (s[f] - vf * x));
        }
      }
    }
    train_loss =
        i == 0 ? loss * scale : 0.98 * train_loss + 0.02 * loss * scale;
    Check(client.Push({{"bias", {static_cast<float>(gb)}}}, {gw, gv}), "push");
    Check(client.Clock(), "clock");
    examples += batch.size();
    batch.swap(following);
    if (rank == 0 && ((i + 1) % eval_every == 0 || i + 1 == total)) {
      double auc = 0, test_loss = 0;
      Evaluate(&client, test, k, &auc, &test_loss);
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      ctr::CurvePoint pt;
      pt.step = static_cast<int64_t>(i + 1);
      pt.examples = examples * workers;  // approximately, all workers
      pt.seconds = secs;
      pt.train_loss = train_loss;
      pt.test_loss = test_loss;
      pt.test_auc = auc;
      pt.truth_auc = truth_auc;
      curve.Add(pt);
      std::printf(
          "progress batch=%zu/%zu examples~%lld seconds=%.1f "
          "examples_per_s~%.0f train_loss=%.4f test_loss=%.4f "
          "test_auc=%.4f truth_auc=%.4f\n",
          i + 1, total, static_cast<long long>(examples * workers), secs,
          examples * workers / secs, train_loss, test_loss, auc, truth_auc);
      std::fflush(stdout);
    }
  }
  const double secs =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "RESULT worker=%d examples=%lld seconds=%.2f examples_per_s=%.0f\n", rank,
      static_cast<long long>(examples), secs, examples / secs);
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
  if (rank == 0) {
    double auc = 0, test_loss = 0;
    Evaluate(&client, test, k, &auc, &test_loss);
    std::printf(
        "RESULT test_auc=%.4f truth_auc=%.4f gap=%.4f test_loss=%.4f "
        "workers=%d servers=%d\n",
        auc, truth_auc, truth_auc - auc, test_loss, workers, ps::NumServers());
    std::string mk = "mkdir -p '" + FLAGS_out_dir + "'";
    if (std::system(mk.c_str()) == 0) {
      ps::Status s = curve.WriteCsv(FLAGS_out_dir + "/curve.csv");
      if (s.ok()) {
        std::printf("wrote %s/curve.csv\n", FLAGS_out_dir.c_str());
      } else {
        LOG(WARNING) << "learning curve: " << s;
      }
    }
    if (!FLAGS_checkpoint_dir.empty()) {
      Check(client.Save(FLAGS_checkpoint_dir), "save");
      std::printf("saved the model to %s\n", FLAGS_checkpoint_dir.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::SetVersionString(ps::Version());
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  ps::Start(0);
  std::unique_ptr<ps::ModelServer> server;
  if (ps::IsServer()) server = std::make_unique<ps::ModelServer>();
  int rc = ps::IsWorker() ? RunWorker() : 0;
  ps::Finalize(0, true);
  if (server) {
    ps::ModelServerStats s = server->stats();
    std::printf(
        "RESULT server=%d rows=%zu memory_mb=%.1f raw_mb=%.1f "
        "updates=%llu rows_pulled=%llu rows_updated=%llu\n",
        ps::MyRank(), s.rows, s.memory_bytes / 1e6, s.raw_bytes / 1e6,
        static_cast<unsigned long long>(s.updates),
        static_cast<unsigned long long>(s.rows_pulled),
        static_cast<unsigned long long>(s.rows_updated));
  }
  return rc;
}
