// The failover test's program (failover_test.py): workers push 1 to every
// one of --keys keys spread over the key space, one request at a time, for
// --iterations requests, while the test kills a server with SIGKILL. Each
// worker reports the longest wait of one push (the stall a failover
// causes) and when it ended; worker 0 then checks that every key holds
// exactly workers x iterations.
//
// Output lines the test reads:
//   cluster_failover: progress N
//   cluster_failover: worker R max_stall_ms=S stall_end_unix_ms=T
//   cluster_failover: stall_ms=S end_unix_ms=T   (each push over 20 ms,
//                                                 so a test can tell the
//                                                 stalls of two migrations)
//   cluster_failover: sums exact (V on every key)   or   ... FAIL ...

#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ps/ps.h"

DEFINE_int32(iterations, 4000, "pushes per worker");
DEFINE_int32(keys, 4096, "keys per push, spread over the key space");
DEFINE_int32(ballast_mb, 0,
             "MB of state worker 0 pushes first (4 KB per key, spread over "
             "the key space), so that copies of a server's data are large");

namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  const size_t n = static_cast<size_t>(FLAGS_keys);
  std::vector<ps::Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i * (ps::kMaxKey / n) + 3;
  std::vector<float> ones(n, 1.0f);
  if (ps::MyRank() == 0 && FLAGS_ballast_mb > 0) {
    // Keys between the counted ones; 1024 values each, sent 16 MB at a time.
    const size_t total = static_cast<size_t>(FLAGS_ballast_mb) * 256;
    const size_t per_push = 4096;
    for (size_t first = 0; first < total; first += per_push) {
      std::vector<ps::Key> bk;
      for (size_t i = first; i < std::min(total, first + per_push); ++i) {
        bk.push_back(i * (ps::kMaxKey / total) + 5);
      }
      std::vector<float> vals(bk.size() * 1024, 0.5f);
      ps::Status s = kv.WaitStatus(kv.Push(bk, vals));
      if (!s.ok()) {
        std::printf("cluster_failover: FAIL ballast: %s\n",
                    s.ToString().c_str());
        return 1;
      }
    }
    std::printf("cluster_failover: ballast of %d MB pushed\n",
                FLAGS_ballast_mb);
  }
  double max_stall_ms = 0;
  int64_t stall_end = 0;
  for (int it = 0; it < FLAGS_iterations; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    ps::Status s = kv.WaitStatus(kv.Push(keys, ones));
    if (!s.ok()) {
      std::printf("cluster_failover: FAIL push %d: %s\n", it,
                  s.ToString().c_str());
      std::fflush(stdout);
      return 1;
    }
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
    if (ms > max_stall_ms) {
      max_stall_ms = ms;
      stall_end = UnixMs();
    }
    if (ms > 20) {
      std::printf("cluster_failover: stall_ms=%.1f end_unix_ms=%lld\n", ms,
                  static_cast<long long>(UnixMs()));
    }
    if (it % 200 == 0) {
      std::printf("cluster_failover: progress %d\n", it);
      std::fflush(stdout);
    }
  }
  std::printf(
      "cluster_failover: worker %d max_stall_ms=%.1f "
      "stall_end_unix_ms=%lld\n",
      ps::MyRank(), max_stall_ms, static_cast<long long>(stall_end));
  ps::Status b = ps::Postoffice::Get()->BarrierStatus(0, ps::kWorkerGroup);
  if (!b.ok()) {
    std::printf("cluster_failover: FAIL barrier: %s\n", b.ToString().c_str());
    return 1;
  }
  if (ps::MyRank() != 0) return 0;
  std::vector<float> out;
  ps::Status s = kv.WaitStatus(kv.Pull(keys, &out));
  if (!s.ok() || out.size() != n) {
    std::printf("cluster_failover: FAIL pull: %s\n", s.ToString().c_str());
    return 1;
  }
  const float want = static_cast<float>(ps::NumWorkers()) * FLAGS_iterations;
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != want && wrong++ < 5) {
      std::printf("cluster_failover: FAIL key %llu is %.0f, not %.0f\n",
                  static_cast<unsigned long long>(keys[i]), out[i], want);
    }
  }
  if (wrong > 0) {
    std::printf("cluster_failover: FAIL %zu of %zu keys wrong\n", wrong, n);
    return 1;
  }
  std::printf("cluster_failover: sums exact (%.0f on every key)\n", want);
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ps::Start(0, argv[0]);
  int rc = 0;
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
  }
  if (ps::IsWorker()) rc = RunWorker();
  ps::Finalize(0, true);
  std::fflush(stdout);
  return rc;
}
