// Checks a consistency mode from what workers pull, in real processes:
// every worker adds one to its own counter key per iteration, then ends
// the iteration with Clock(); at the start of iteration c it pulls every
// worker's counter. One worker is slow.
//
//   --expect=bsp     every counter reads exactly c
//   --expect=ssp     every counter reads at least c - staleness, its own c
//   --expect=asp     the fast workers finish every iteration while the slow
//                    one is still at its first (it waits for them)
//
// Run with EMBER_CONSISTENCY (and EMBER_STALENESS) set for the servers:
//   EMBER_CONSISTENCY=bsp scripts/local.sh 2 3 cluster_consistency --expect=bsp
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "ps/ps.h"

DEFINE_int32(iterations, 25, "iterations per worker");
DEFINE_int32(slow_rank, 0, "rank of the slow worker");
DEFINE_int32(slow_ms, 15, "the slow worker's extra time per iteration");
DEFINE_string(expect, "bsp", "mode to check: bsp, ssp or asp");
DEFINE_int32(staleness, 0, "ssp's bound, for --expect=ssp");

namespace {

ps::Key SlotKey(int w) { return 0x9E3779B97F4A7C15ull * (w + 1); }

int RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  const int rank = ps::MyRank();
  const int n = ps::NumWorkers();
  std::vector<ps::Key> keys;
  for (int w = 0; w < n; ++w) keys.push_back(SlotKey(w));
  std::vector<size_t> order(n);  // slot of worker w in the sorted keys
  std::vector<ps::Key> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  for (int w = 0; w < n; ++w) {
    order[w] = std::lower_bound(sorted.begin(), sorted.end(), keys[w]) -
               sorted.begin();
  }
  auto pull = [&](std::vector<float>* vals) {
    vals->clear();
    ps::Status s = kv.WaitStatus(kv.Pull(sorted, vals));
    if (!s.ok()) LOG(FATAL) << "pull failed: " << s;
  };
  int violations = 0;
  int max_lag = 0;
  std::vector<float> vals;
  for (int c = 0; c < FLAGS_iterations; ++c) {
    pull(&vals);
    for (int w = 0; w < n; ++w) {
      int seen = static_cast<int>(vals[order[w]]);
      max_lag = std::max(max_lag, c - seen);
      bool bad = false;
      if (FLAGS_expect == "bsp") bad = seen != c;
      if (FLAGS_expect == "ssp") {
        bad = seen < c - FLAGS_staleness || (w == rank && seen != c);
      }
      if (bad && violations++ < 5) {
        std::printf("VIOLATION worker %d at iteration %d saw worker %d at %d\n",
                    rank, c, w, seen);
      }
    }
    if (rank == FLAGS_slow_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_slow_ms));
    }
    std::vector<ps::Key> mine{SlotKey(rank)};
    if (!kv.WaitStatus(kv.Push(mine, {1.0f})).ok()) LOG(FATAL) << "push";
    if (!kv.WaitStatus(kv.Clock()).ok()) LOG(FATAL) << "clock";
    if (FLAGS_expect == "asp" && rank == FLAGS_slow_rank && c == 0) {
      // Wait (bounded) for every fast worker to finish: under asp nothing
      // holds them back.
      auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(60);
      bool done = false;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        pull(&vals);
        done = true;
        for (int w = 0; w < n; ++w) {
          if (w != rank && vals[order[w]] != FLAGS_iterations) done = false;
        }
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!done) {
        ++violations;
        std::printf(
            "VIOLATION the fast workers did not finish while the "
            "slow one waited\n");
      } else {
        std::printf(
            "slow worker %d: every fast worker finished %d iterations "
            "while it was at iteration 1\n",
            rank, FLAGS_iterations);
      }
    }
  }
  std::printf(
      "RESULT worker=%d expect=%s iterations=%d max_lag_seen=%d "
      "violations=%d\n",
      rank, FLAGS_expect.c_str(), FLAGS_iterations, max_lag, violations);
  return violations == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (FLAGS_expect != "bsp" && FLAGS_expect != "ssp" && FLAGS_expect != "asp") {
    std::fprintf(stderr, "--expect must be bsp, ssp or asp\n");
    return 2;
  }
  ps::Start(0);
  int rc = 0;
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
  }
  if (ps::IsWorker()) rc = RunWorker();
  ps::Finalize(0, true);
  if (server) {
    std::printf("RESULT server=%d %s\n", ps::MyRank(),
                server->consistency_stats().ToString().c_str());
  }
  return rc;
}
