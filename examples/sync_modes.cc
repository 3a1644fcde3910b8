// sync_modes: one workload under Ember's consistency modes. Workers train a
// logistic regression on synthetic data through push/pull, ending every
// iteration with KVWorker::Clock(); servers sum the pushed updates. The mode
// is the servers' (EMBER_CONSISTENCY / EMBER_STALENESS). One worker can be
// made a straggler.
//
//   EMBER_CONSISTENCY=ssp EMBER_STALENESS=2
//     scripts/local.sh 2 4 build/examples/sync_modes --slow_rank=3
//
// Every worker prints its iterations per second; worker 0 prints the final
// held-out log-loss and, with --dump, writes the final weights as hex (bit
// exact) so two runs can be compared: under bsp they are identical whatever
// the timing (--jitter_seed) and the number of servers.
// scripts/sync_modes.py runs the four modes and prints a table.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ps/ps.h"

DEFINE_uint64(seed, 7, "seed of the true model and the data");
DEFINE_int32(features, 2000, "number of features (keys)");
DEFINE_int32(active, 20, "features per example");
DEFINE_int32(batch, 100, "examples per iteration and worker");
DEFINE_int32(iterations, 300, "iterations per worker");
DEFINE_double(lr, 0.05,
              "step size: the update is -lr times the summed gradient");
DEFINE_int32(slow_rank, -1, "rank of the straggler (-1: none)");
DEFINE_int32(slow_ms, 40, "the straggler's pause");
DEFINE_int32(slow_every, 4, "the straggler pauses every this many iterations");
DEFINE_uint64(jitter_seed, 0,
              "if not 0, every worker pauses 0-2 ms at "
              "random each iteration (changes the timing "
              "only)");
DEFINE_int32(test_examples, 20000, "held-out examples, evaluated by worker 0");
DEFINE_string(dump, "", "worker 0 writes the final weights here, in hex");

namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
double Uniform(uint64_t h) { return (Mix(h) >> 11) * (1.0 / (1ull << 53)); }

float TrueWeight(int f) {
  // Normal(0, 1) by Box-Muller on two hashed uniforms.
  double u1 = Uniform(FLAGS_seed * 1000003 + 2 * f + 1) + 1e-12;
  double u2 = Uniform(FLAGS_seed * 1000003 + 2 * f + 2);
  return static_cast<float>(std::sqrt(-2 * std::log(u1)) *
                            std::cos(6.283185307179586 * u2));
}

struct Example {
  std::vector<ps::Key> features;  // sorted, unique
  float label;
};

// Example `index` of data stream `stream`, a pure function of both.
Example MakeExample(uint64_t stream, uint64_t index) {
  Example e;
  uint64_t base = Mix(FLAGS_seed ^ Mix(stream * 0x9E3779B97F4A7C15ull + index));
  for (int i = 0; i < FLAGS_active; ++i) {
    e.features.push_back(Mix(base + i) % FLAGS_features);
  }
  std::sort(e.features.begin(), e.features.end());
  e.features.erase(std::unique(e.features.begin(), e.features.end()),
                   e.features.end());
  double logit = 0;
  for (ps::Key f : e.features) logit += TrueWeight(static_cast<int>(f));
  logit /= std::sqrt(static_cast<double>(FLAGS_active));
  double p = 1 / (1 + std::exp(-logit));
  e.label = Uniform(base ^ 0xABCDEF) < p ? 1.0f : 0.0f;
  return e;
}

double Predict(const Example& e, const std::vector<ps::Key>& keys,
               const std::vector<float>& w) {
  double z = 0;
  for (ps::Key f : e.features) {
    size_t i = std::lower_bound(keys.begin(), keys.end(), f) - keys.begin();
    z += w[i];
  }
  return 1 / (1 + std::exp(-z));
}

double LogLoss(double p, float y) {
  p = std::min(std::max(p, 1e-7), 1 - 1e-7);
  return y > 0.5f ? -std::log(p) : -std::log(1 - p);
}

int RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  const int rank = ps::MyRank();
  std::mt19937 jitter(static_cast<uint32_t>(FLAGS_jitter_seed * 31 + rank));
  const auto start = std::chrono::steady_clock::now();
  double train_loss = 0;
  for (int it = 0; it < FLAGS_iterations; ++it) {
    std::vector<Example> batch;
    std::vector<ps::Key> keys;
    for (int b = 0; b < FLAGS_batch; ++b) {
      batch.push_back(
          MakeExample(rank + 1, static_cast<uint64_t>(it) * FLAGS_batch + b));
      keys.insert(keys.end(), batch.back().features.begin(),
                  batch.back().features.end());
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<float> w;
    ps::Status s = kv.WaitStatus(kv.Pull(keys, &w));
    if (!s.ok()) LOG(FATAL) << "pull: " << s;
    std::vector<float> grad(keys.size(), 0.0f);
    double loss = 0;
    for (const Example& e : batch) {
      double p = Predict(e, keys, w);
      loss += LogLoss(p, e.label);
      float g = static_cast<float>(p - e.label);
      for (ps::Key f : e.features) {
        grad[std::lower_bound(keys.begin(), keys.end(), f) - keys.begin()] += g;
      }
    }
    train_loss = 0.95 * train_loss + 0.05 * (loss / FLAGS_batch);
    for (float& g : grad) g *= static_cast<float>(-FLAGS_lr);
    if (FLAGS_jitter_seed != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 2000));
    }
    if (rank == FLAGS_slow_rank && it % FLAGS_slow_every == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_slow_ms));
    }
    s = kv.WaitStatus(kv.Push(keys, grad));
    if (!s.ok()) LOG(FATAL) << "push: " << s;
    s = kv.WaitStatus(kv.Clock());
    if (!s.ok()) LOG(FATAL) << "clock: " << s;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf(
      "RESULT worker=%d iterations=%d seconds=%.3f it_per_s=%.1f "
      "train_loss=%.5f\n",
      rank, FLAGS_iterations, seconds, FLAGS_iterations / seconds, train_loss);
  // Everyone done: evaluate the final model.
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
  if (rank != 0) return 0;
  std::vector<ps::Key> all(FLAGS_features);
  for (int f = 0; f < FLAGS_features; ++f) all[f] = f;
  std::vector<float> w;
  ps::Status s = kv.WaitStatus(kv.Pull(all, &w));
  if (!s.ok()) LOG(FATAL) << "final pull: " << s;
  double loss = 0, truth = 0;
  for (int i = 0; i < FLAGS_test_examples; ++i) {
    Example e = MakeExample(0, i);
    loss += LogLoss(Predict(e, all, w), e.label);
    double logit = 0;
    for (ps::Key f : e.features) logit += TrueWeight(static_cast<int>(f));
    logit /= std::sqrt(static_cast<double>(FLAGS_active));
    truth += LogLoss(1 / (1 + std::exp(-logit)), e.label);
  }
  std::printf(
      "RESULT final test_loss=%.5f truth_loss=%.5f workers=%d "
      "servers=%d\n",
      loss / FLAGS_test_examples, truth / FLAGS_test_examples, ps::NumWorkers(),
      ps::NumServers());
  if (!FLAGS_dump.empty()) {
    FILE* f = std::fopen(FLAGS_dump.c_str(), "w");
    if (f == nullptr) {
      std::perror(FLAGS_dump.c_str());
      return 1;
    }
    for (float v : w) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      std::fprintf(f, "%08x\n", bits);
    }
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  ps::Start(0);
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
  }
  int rc = ps::IsWorker() ? RunWorker() : 0;
  ps::Finalize(0, true);
  if (server) {
    std::printf("RESULT server=%d %s\n", ps::MyRank(),
                server->consistency_stats().ToString().c_str());
  }
  return rc;
}
