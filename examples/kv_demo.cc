// kv_demo: distributed sparse logistic regression (a CTR-like model) trained
// through Ember's push/pull API, as a user of ps-lite would write it.
//
// Each worker generates its own shard of synthetic examples from a known
// ground-truth model: ~20-40 hashed 64-bit feature ids per example, drawn with
// a Zipf-like frequency, and a label drawn from sigmoid(w_true . x + bias).
// Workers train data-parallel with minibatches (pull the batch's weights,
// push the gradient); servers own the weights and apply Adagrad. After each
// epoch worker 0 evaluates held-out log-loss and AUC against the ground
// truth's. Run it on a local cluster:
//
//   scripts/local.sh 2 2 build/examples/kv_demo [--epochs 3 ...]
//
// Output: per-epoch lines and a final "RESULT ..." line from worker 0, a
// throughput and traffic line from every worker, a store line from every
// server.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

DEFINE_uint64(seed, 1, "seed of the ground-truth model and of the data");
DEFINE_uint64(features, 100000, "number of distinct features");
DEFINE_double(zipf, 1.1, "exponent s of the features' Zipf-like frequency");
DEFINE_int32(min_active, 20, "fewest features drawn per example");
DEFINE_int32(max_active, 40, "most features drawn per example");
DEFINE_double(truth_stddev, 0.3, "standard deviation of the true weights");
DEFINE_double(truth_bias, -1.0, "true bias (intercept) of the model");
DEFINE_int64(examples_per_worker, 200000, "training examples per worker");
DEFINE_int64(test_examples, 20000, "held-out examples evaluated by worker 0");
DEFINE_int32(batch, 1000, "examples per minibatch");
DEFINE_int32(epochs, 3, "passes over each worker's training shard");
DEFINE_double(lr, 0.05, "Adagrad learning rate, applied by the servers");

static_assert(sizeof(ps::Key) == 8, "the demo's feature ids are 64-bit keys");

namespace {

constexpr int kAppId = 0;
constexpr int kCustomerId = 0;

// Data streams: the test set's is shared by every worker; worker r draws its
// training shard from stream r + 1.
constexpr uint64_t kTestStream = 0;

constexpr double kPi = 3.14159265358979323846;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string WithCommas(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) {
    s.insert(static_cast<size_t>(i), ",");
  }
  return s;
}

// "1 worker", "2 workers".
std::string Count(uint64_t n, const char* noun) {
  return WithCommas(n) + " " + noun + (n == 1 ? "" : "s");
}

// splitmix64's finalizer: a bijection on 64-bit values, so distinct feature
// indexes get distinct ids.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from the top 53 bits.
double ToUnit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// splitmix64. Our own generator and conversions, rather than <random>'s
// distributions, keep the data identical across standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_++ * 0x9e3779b97f4a7c15ULL); }
  double Unit() { return ToUnit(Next()); }

 private:
  uint64_t state_;
};

double Sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z))
                : std::exp(z) / (1.0 + std::exp(z));
}

// log(1 + e^x) without overflow.
double Softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

double LogLoss(double logit, bool label) {
  return Softplus(label ? -logit : logit);
}

// Examples in compressed rows: example i's features are
// keys[offsets[i], offsets[i + 1]), sorted and unique, each with value 1.
struct Dataset {
  std::vector<size_t> offsets{0};
  std::vector<ps::Key> keys;
  std::vector<uint8_t> labels;
  std::vector<float> true_logits;  // w_true . x + bias, for the baseline.

  size_t size() const { return labels.size(); }
};

// The ground-truth model and the data drawn from it; every function of the
// seed alone, so all processes agree without talking.
class Generator {
 public:
  explicit Generator(uint64_t seed)
      : salt_(Mix64(seed)), bias_key_(FeatureKey(FLAGS_features)) {}

  // Feature index -> id. Index `FLAGS_features` is the bias, present in
  // every example so the model learns the intercept like any weight.
  ps::Key FeatureKey(uint64_t index) const { return Mix64(index ^ salt_); }

  double TrueWeight(ps::Key key) const {
    if (key == bias_key_) return FLAGS_truth_bias;
    // Box-Muller on two hashes of the id; 1 - u keeps the log finite.
    const double u1 = 1.0 - ToUnit(Mix64(key ^ 0x5851f42d4c957f2dULL));
    const double u2 = ToUnit(Mix64(key ^ 0x14057b7ef767814fULL));
    return FLAGS_truth_stddev * std::sqrt(-2.0 * std::log(u1)) *
           std::cos(2.0 * kPi * u2);
  }

  Dataset Generate(uint64_t stream, size_t num_examples) const {
    Rng rng(Mix64(salt_ ^ Mix64(stream + 1)));
    const int span = FLAGS_max_active - FLAGS_min_active + 1;
    Dataset data;
    data.offsets.reserve(num_examples + 1);
    data.keys.reserve(num_examples * (FLAGS_min_active + span / 2 + 1));
    data.labels.reserve(num_examples);
    data.true_logits.reserve(num_examples);
    std::vector<ps::Key> row;
    for (size_t i = 0; i < num_examples; ++i) {
      const int active = FLAGS_min_active + static_cast<int>(rng.Next() % span);
      row.clear();
      for (int j = 0; j < active; ++j) {
        row.push_back(FeatureKey(SampleIndex(&rng)));
      }
      row.push_back(bias_key_);
      // Popular features repeat within an example; features are binary.
      std::sort(row.begin(), row.end());
      row.erase(std::unique(row.begin(), row.end()), row.end());
      double logit = 0;
      for (ps::Key key : row) logit += TrueWeight(key);
      data.keys.insert(data.keys.end(), row.begin(), row.end());
      data.offsets.push_back(data.keys.size());
      data.labels.push_back(rng.Unit() < Sigmoid(logit) ? 1 : 0);
      data.true_logits.push_back(static_cast<float>(logit));
    }
    return data;
  }

 private:
  // Feature index with P(index = r - 1) ~ r^-s: the inverse CDF of the
  // continuous power law on [1, features + 1), rounded down. The head is a
  // little lighter than a discrete Zipf's, which does not matter here.
  uint64_t SampleIndex(Rng* rng) const {
    const double n = static_cast<double>(FLAGS_features) + 1.0;
    const double u = rng->Unit();
    double x;
    if (std::abs(FLAGS_zipf - 1.0) < 1e-9) {
      x = std::pow(n, u);
    } else {
      const double a = 1.0 - FLAGS_zipf;
      x = std::pow(1.0 + u * (std::pow(n, a) - 1.0), 1.0 / a);
    }
    const uint64_t index = static_cast<uint64_t>(x) - 1;
    return std::min<uint64_t>(index, FLAGS_features - 1);
  }

  const uint64_t salt_;
  const ps::Key bias_key_;
};

// ---------------------------------------------------------------- server --

// The servers' share of the model: one weight and one Adagrad accumulator per
// key, created at zero when a key is first pushed. A push carries one
// gradient per key; a pull answers the current weights (zero for keys never
// pushed, which are not stored, so evaluating does not grow the table).
// Requests that do not fit that shape are refused whole with an error, since
// their bytes come from the network.
//
// Thread-compatible: Handle runs on the server's app thread; read the
// counters only once the KVServer is gone.
class AdagradStore {
 public:
  explicit AdagradStore(float learning_rate) : learning_rate_(learning_rate) {}
  AdagradStore(const AdagradStore&) = delete;
  AdagradStore& operator=(const AdagradStore&) = delete;

  void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
              ps::KVServer<float>* server) {
    const ps::Status status = Validate(meta, data);
    if (!status.ok()) {
      ++errors_;
      LOG(WARNING) << "refused a request from node " << meta.sender << ": "
                   << status;
      server->ResponseError(meta, status);
      return;
    }
    const size_t n = data.keys.size();
    if (meta.push) {
      ++pushes_;
      for (size_t i = 0; i < n; ++i) {
        Entry& entry = entries_[data.keys[i]];
        const float gradient = data.vals[i];
        entry.squared_gradients += gradient * gradient;
        entry.weight -= learning_rate_ * gradient /
                        (std::sqrt(entry.squared_gradients) + 1e-8f);
      }
    }
    if (!meta.pull) {
      server->Response(meta);
      return;
    }
    ++pulls_;
    ps::KVPairs<float> response;
    response.keys = data.keys;
    response.vals.resize(n);
    for (size_t i = 0; i < n; ++i) {
      auto it = entries_.find(data.keys[i]);
      response.vals[i] = it == entries_.end() ? 0.0f : it->second.weight;
    }
    server->Response(meta, response);
  }

  size_t num_keys() const { return entries_.size(); }
  uint64_t pushes() const { return pushes_; }
  uint64_t pulls() const { return pulls_; }
  uint64_t errors() const { return errors_; }

 private:
  struct Entry {
    float weight = 0;
    float squared_gradients = 0;
  };

  static ps::Status Validate(const ps::KVMeta& meta,
                             const ps::KVPairs<float>& data) {
    if (meta.cmd != 0) {
      return ps::Status::InvalidArgument("unknown command " +
                                         std::to_string(meta.cmd));
    }
    if (!meta.push && !meta.pull) {
      return ps::Status::InvalidArgument("neither push nor pull");
    }
    const size_t n = data.keys.size();
    for (size_t i = 1; i < n; ++i) {
      if (data.keys[i - 1] >= data.keys[i]) {
        return ps::Status::InvalidArgument("keys not sorted and unique");
      }
    }
    for (int len : data.lens) {
      if (len != 1) {
        return ps::Status::InvalidArgument("a key carries " +
                                           std::to_string(len) + " values");
      }
    }
    if (!meta.push) {
      if (!data.vals.empty()) {
        return ps::Status::InvalidArgument("a pull carries values");
      }
      return ps::Status::OK();
    }
    if (data.vals.size() != n) {
      return ps::Status::InvalidArgument(
          "push of " + std::to_string(data.vals.size()) + " values for " +
          std::to_string(n) + " keys");
    }
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(data.vals[i])) {
        return ps::Status::InvalidArgument("non-finite gradient for key " +
                                           std::to_string(data.keys[i]));
      }
    }
    return ps::Status::OK();
  }

  const float learning_rate_;
  std::unordered_map<ps::Key, Entry> entries_;
  uint64_t pushes_ = 0;
  uint64_t pulls_ = 0;
  uint64_t errors_ = 0;
};

void RunServer() {
  AdagradStore store(static_cast<float>(FLAGS_lr));
  {
    ps::KVServer<float> server(kAppId);
    server.set_request_handle([&store](const ps::KVMeta& meta,
                                       const ps::KVPairs<float>& data,
                                       ps::KVServer<float>* server) {
      store.Handle(meta, data, server);
    });
    ps::Finalize(kCustomerId, true);
  }
  // The server's app thread has been joined: the store is ours again.
  std::printf("server %d: %s keys stored, %s pushes, %s pulls, %s refused\n",
              ps::MyRank(), WithCommas(store.num_keys()).c_str(),
              WithCommas(store.pushes()).c_str(),
              WithCommas(store.pulls()).c_str(),
              WithCommas(store.errors()).c_str());
}

// ---------------------------------------------------------------- worker --

struct Metrics {
  double logloss = 0;
  double auc = 0;
};

// Mean log-loss and the exact AUC: the Mann-Whitney statistic over the
// sorted scores, ties counted as half.
Metrics Evaluate(const std::vector<double>& logits,
                 const std::vector<uint8_t>& labels) {
  const size_t n = logits.size();
  Metrics metrics;
  for (size_t i = 0; i < n; ++i)
    metrics.logloss += LogLoss(logits[i], labels[i]);
  metrics.logloss /= static_cast<double>(std::max<size_t>(n, 1));

  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&logits](size_t a, size_t b) { return logits[a] < logits[b]; });
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && logits[order[j]] == logits[order[i]]) ++j;
    // Ranks i + 1 .. j share their mean.
    const double rank =
        (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]]) {
        positive_rank_sum += rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  metrics.auc = positives == 0 || negatives == 0
                    ? 0.5
                    : (positive_rank_sum - positives * (positives + 1) / 2) /
                          (positives * negatives);
  return metrics;
}

// A dataset's distinct keys, sorted, and for every feature occurrence the
// index of its key among them.
struct KeyIndex {
  std::vector<ps::Key> keys;
  std::vector<uint32_t> slots;
};

KeyIndex IndexKeys(const ps::Key* begin, const ps::Key* end) {
  KeyIndex index;
  index.keys.assign(begin, end);
  std::sort(index.keys.begin(), index.keys.end());
  index.keys.erase(std::unique(index.keys.begin(), index.keys.end()),
                   index.keys.end());
  index.slots.reserve(static_cast<size_t>(end - begin));
  for (const ps::Key* key = begin; key != end; ++key) {
    index.slots.push_back(static_cast<uint32_t>(
        std::lower_bound(index.keys.begin(), index.keys.end(), *key) -
        index.keys.begin()));
  }
  return index;
}

struct WorkerCounters {
  uint64_t examples = 0;
  uint64_t pulled_keys = 0;
  uint64_t pushed_keys = 0;
  uint64_t requests = 0;
  double train_seconds = 0;
};

// One pass over `data`: per minibatch, pull the weights of its features,
// push the gradient of the summed log-loss. Returns the mean log-loss of the
// examples under the weights they were trained with (progressive
// validation) in *logloss.
ps::Status TrainEpoch(const Dataset& data, ps::KVWorker<float>* kv,
                      WorkerCounters* counters, double* logloss) {
  const Clock::time_point start = Clock::now();
  const size_t batch = static_cast<size_t>(FLAGS_batch);
  double loss_sum = 0;
  std::vector<float> weights;
  std::vector<float> gradients;
  for (size_t first = 0; first < data.size(); first += batch) {
    const size_t last = std::min(first + batch, data.size());
    const KeyIndex index = IndexKeys(data.keys.data() + data.offsets[first],
                                     data.keys.data() + data.offsets[last]);
    weights.clear();
    PS_RETURN_IF_ERROR(kv->WaitStatus(kv->Pull(index.keys, &weights)));
    gradients.assign(index.keys.size(), 0.0f);
    const uint32_t* slot = index.slots.data();
    for (size_t i = first; i < last; ++i) {
      const size_t active = data.offsets[i + 1] - data.offsets[i];
      double logit = 0;
      for (size_t j = 0; j < active; ++j) logit += weights[slot[j]];
      loss_sum += LogLoss(logit, data.labels[i]);
      const float residual =
          static_cast<float>(Sigmoid(logit) - data.labels[i]);
      for (size_t j = 0; j < active; ++j) gradients[slot[j]] += residual;
      slot += active;
    }
    PS_RETURN_IF_ERROR(kv->WaitStatus(kv->Push(index.keys, gradients)));
    counters->pulled_keys += index.keys.size();
    counters->pushed_keys += index.keys.size();
    counters->requests += 2;
  }
  counters->examples += data.size();
  counters->train_seconds += SecondsSince(start);
  *logloss = loss_sum / static_cast<double>(std::max<size_t>(data.size(), 1));
  return ps::Status::OK();
}

// Pulls the weights of the test set's features and scores it.
ps::Status EvaluateModel(const Dataset& test, const KeyIndex& test_index,
                         ps::KVWorker<float>* kv, Metrics* metrics) {
  std::vector<float> weights;
  PS_RETURN_IF_ERROR(kv->WaitStatus(kv->Pull(test_index.keys, &weights)));
  std::vector<double> logits(test.size(), 0.0);
  for (size_t i = 0; i < test.size(); ++i) {
    for (size_t k = test.offsets[i]; k < test.offsets[i + 1]; ++k) {
      logits[i] += weights[test_index.slots[k]];
    }
  }
  *metrics = Evaluate(logits, test.labels);
  return ps::Status::OK();
}

ps::Status RunWorker() {
  const int rank = ps::MyRank();
  const bool reporter = rank == 0;
  const Generator generator(FLAGS_seed);
  const Dataset train =
      generator.Generate(kTestStream + 1 + static_cast<uint64_t>(rank),
                         static_cast<size_t>(FLAGS_examples_per_worker));

  // Only worker 0 evaluates, so only it needs the test set.
  Dataset test;
  KeyIndex test_index;
  Metrics truth;
  if (reporter) {
    test = generator.Generate(kTestStream,
                              static_cast<size_t>(FLAGS_test_examples));
    test_index =
        IndexKeys(test.keys.data(), test.keys.data() + test.keys.size());
    truth = Evaluate(
        std::vector<double>(test.true_logits.begin(), test.true_logits.end()),
        test.labels);
    const double positives =
        std::count(test.labels.begin(), test.labels.end(), 1);
    std::printf(
        "sparse logistic regression on %s x %s: %s per worker, %s "
        "(zipf %.2f), batch %d, %s, adagrad lr %g\n",
        Count(ps::NumServers(), "server").c_str(),
        Count(ps::NumWorkers(), "worker").c_str(),
        Count(train.size(), "example").c_str(),
        Count(FLAGS_features, "feature").c_str(), FLAGS_zipf, FLAGS_batch,
        Count(FLAGS_epochs, "epoch").c_str(), FLAGS_lr);
    std::printf(
        "test set: %s examples, %s distinct features, %.1f%% positive; "
        "ground truth logloss %.4f, AUC %.4f\n",
        WithCommas(test.size()).c_str(),
        WithCommas(test_index.keys.size()).c_str(),
        100.0 * positives /
            static_cast<double>(std::max<size_t>(test.size(), 1)),
        truth.logloss, truth.auc);
    std::fflush(stdout);
  }

  ps::KVWorker<float> kv(kAppId, kCustomerId);
  WorkerCounters counters;
  Metrics metrics;
  double cluster_seconds = 0;
  // Every worker starts each epoch together, and worker 0 evaluates only
  // once every worker has finished it: the model it scores is settled.
  ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
  for (int epoch = 1; epoch <= FLAGS_epochs; ++epoch) {
    const Clock::time_point start = Clock::now();
    double train_logloss = 0;
    PS_RETURN_IF_ERROR(TrainEpoch(train, &kv, &counters, &train_logloss));
    ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
    const double seconds = SecondsSince(start);
    cluster_seconds += seconds;
    if (reporter) {
      PS_RETURN_IF_ERROR(EvaluateModel(test, test_index, &kv, &metrics));
      const double examples_per_second = static_cast<double>(ps::NumWorkers()) *
                                         static_cast<double>(train.size()) /
                                         seconds;
      std::printf(
          "epoch %d: train logloss %.4f, test logloss %.4f (ground truth "
          "%.4f), test AUC %.4f (ground truth %.4f), %s examples/s\n",
          epoch, train_logloss, metrics.logloss, truth.logloss, metrics.auc,
          truth.auc,
          WithCommas(static_cast<uint64_t>(examples_per_second)).c_str());
      std::fflush(stdout);
    }
    ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
  }

  std::printf(
      "worker %d: %s examples in %.2f s (%s examples/s), pulled %s keys, "
      "pushed %s keys, %s requests\n",
      rank, WithCommas(counters.examples).c_str(), counters.train_seconds,
      WithCommas(static_cast<uint64_t>(static_cast<double>(counters.examples) /
                                       std::max(counters.train_seconds, 1e-9)))
          .c_str(),
      WithCommas(counters.pulled_keys).c_str(),
      WithCommas(counters.pushed_keys).c_str(),
      WithCommas(counters.requests).c_str());
  if (reporter) {
    // Throughput of the whole cluster: every worker's examples over the
    // training time, barriers included, evaluation excluded.
    const double examples_per_second = static_cast<double>(ps::NumWorkers()) *
                                       static_cast<double>(train.size()) *
                                       FLAGS_epochs / cluster_seconds;
    std::printf(
        "RESULT test_auc=%.4f truth_auc=%.4f logloss=%.4f examples_per_s=%.0f "
        "workers=%d servers=%d\n",
        metrics.auc, truth.auc, metrics.logloss, examples_per_second,
        ps::NumWorkers(), ps::NumServers());
  }
  std::fflush(stdout);
  return ps::Status::OK();
}

// Flags are the same in every process, so every process refuses bad ones
// alike, before joining the cluster.
bool ValidFlags() {
  bool ok = true;
  auto require = [&ok](bool condition, const char* what) {
    if (!condition) {
      LOG(ERROR) << "invalid flags: " << what;
      ok = false;
    }
  };
  require(FLAGS_features >= 1 && FLAGS_features < (1ULL << 52),
          "--features must be in [1, 2^52)");
  require(FLAGS_zipf > 0, "--zipf must be positive");
  require(FLAGS_min_active >= 1 && FLAGS_min_active <= FLAGS_max_active,
          "need 1 <= --min_active <= --max_active");
  require(FLAGS_truth_stddev >= 0, "--truth_stddev must not be negative");
  require(FLAGS_examples_per_worker >= 1, "--examples_per_worker must be >= 1");
  require(FLAGS_test_examples >= 1, "--test_examples must be >= 1");
  require(FLAGS_batch >= 1, "--batch must be >= 1");
  require(FLAGS_epochs >= 1, "--epochs must be >= 1");
  require(FLAGS_lr > 0, "--lr must be positive");
  return ok;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::SetUsageMessage(
      "distributed sparse logistic regression on synthetic CTR-like data.\n"
      "Run on a cluster: scripts/local.sh SERVERS WORKERS kv_demo [flags]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (!ValidFlags()) return 1;
  ps::Start(kCustomerId, argv[0]);
  if (ps::IsServer()) {
    // Finalizes inside: the server must outlive the final barrier.
    RunServer();
    return 0;
  }
  if (ps::IsWorker()) {
    const ps::Status status = RunWorker();
    if (!status.ok()) {
      // Exiting without Finalize: the cluster sees this worker die and
      // fails rather than waiting for it.
      LOG(ERROR) << "worker " << ps::MyRank() << " failed: " << status;
      return 1;
    }
  }
  ps::Finalize(kCustomerId, true);
  return 0;
}
