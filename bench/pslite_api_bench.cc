// pslite_api_bench: sparse push and pull throughput written against ps-lite's
// public API only (no gflags, no glog, no Ember extension), so the same file
// compiles against Ember and against ps-lite, and the two can be measured
// side by side on the same machine (docs/performance.md says how).
//
//   scripts/local.sh 2 2 build/bench/pslite_api_bench mode=push keys=1000
//
// Arguments (key=value): mode=push|pull, keys=N keys per request (default
// 1000), window=W requests in flight per worker (default 8), seconds=S
// measured (default 3), warmup=S (default 1), seed=N, requests=N (if > 0:
// issue exactly N requests per worker, without warm-up, instead of running
// for `seconds`: for instruction counts under callgrind), layout=L (below).
//
// Every worker makes 16 sets of `keys` distinct keys, sorted, laid out by
// `layout`: `random` (the default), uniformly random 64-bit keys, so they
// spread over every server's range; `dense`, a dense tensor's keys in
// MXNet/BytePS style, each server's share consecutive from the start of its
// range (GetServerKeyRanges()[r].begin() + k); `strided`, ps-lite's
// test_kv_app_benchmark's keys, kMaxKey / keys * i + set. It keeps `window`
// requests of one float per key in flight, cycling over the sets. The
// server's handle does no work, as in ps-lite's own benchmarks: a push is
// answered at once, a pull with the request's keys and a preallocated array
// of values, so only the system's cost is measured.
//
// Output: each worker prints
//   PSBENCH rank=R mode=push keys=1000 servers=S workers=W window=8
//           req_s=... keys_s=... (one line)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

struct Args {
  std::string mode = "push";
  size_t keys = 1000;
  int window = 8;
  double seconds = 3;
  double warmup = 1;
  uint64_t seed = 1;
  size_t requests = 0;
  std::string layout = "random";
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) s = s.substr(2);
    const size_t eq = s.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = s.substr(0, eq), v = s.substr(eq + 1);
    if (k == "mode") a.mode = v;
    if (k == "keys") a.keys = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "window") a.window = std::atoi(v.c_str());
    if (k == "seconds") a.seconds = std::atof(v.c_str());
    if (k == "warmup") a.warmup = std::atof(v.c_str());
    if (k == "seed") a.seed = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "requests") a.requests = std::strtoull(v.c_str(), nullptr, 10);
    if (k == "layout") a.layout = v;
  }
  if (a.layout != "random" && a.layout != "dense" && a.layout != "strided") {
    std::fprintf(stderr, "layout=%s: random, dense or strided\n",
                 a.layout.c_str());
    std::exit(2);
  }
  if (a.keys == 0) a.keys = 1;
  if (a.window < 1) a.window = 1;
  return a;
}

// The server: answers without work. Pull answers reuse one value array per
// size (as ps-lite's test_kv_app_benchmark does).
class EmptyServer {
 public:
  void operator()(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                  ps::KVServer<float>* server) {
    ps::KVPairs<float> res;
    if (meta.pull) {
      res.keys = data.keys;
      ps::SArray<float>& vals = ready_[data.keys.size()];
      if (vals.size() != data.keys.size()) vals.resize(data.keys.size(), 1.0f);
      res.vals = vals;
    }
    server->Response(meta, res);
  }

 private:
  std::unordered_map<size_t, ps::SArray<float>> ready_;
};

void RunWorker(const Args& a) {
  ps::KVWorker<float> kv(0, 0);
  const int rank = ps::MyRank();
  std::mt19937_64 rng(a.seed * 1000003 + static_cast<uint64_t>(rank));
  constexpr int kSets = 16;
  std::vector<ps::SArray<ps::Key>> sets;
  const int sets_wanted = a.keys >= 1000000 ? 2 : kSets;  // memory
  const std::vector<ps::Range>& ranges =
      ps::Postoffice::Get()->GetServerKeyRanges();
  for (int s = 0; s < sets_wanted; ++s) {
    std::vector<ps::Key> keys;
    if (a.layout == "dense") {
      // Server r's share from the start of its range, the set's own part.
      const size_t num = ranges.size();
      for (size_t r = 0; r < num; ++r) {
        const size_t share = a.keys / num + (r < a.keys % num ? 1 : 0);
        const ps::Key base = ranges[r].begin() + s * share;
        for (size_t k = 0; k < share; ++k) keys.push_back(base + k);
      }
    } else if (a.layout == "strided") {
      const ps::Key step = ps::kMaxKey / a.keys;
      for (size_t i = 0; i < a.keys; ++i) keys.push_back(step * i + s);
    }
    while (keys.size() < a.keys) {
      while (keys.size() < a.keys) keys.push_back(rng());
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    ps::SArray<ps::Key> k;
    k.CopyFrom(keys.data(), keys.size());
    sets.push_back(k);
  }
  ps::SArray<float> vals(a.keys, 1.0f);
  std::vector<ps::SArray<float>> outs(a.window);
  const bool push = a.mode == "push";
  std::deque<int> flight;
  size_t issued = 0;
  auto run = [&](double seconds) {
    size_t done = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto stop = start + std::chrono::duration<double>(seconds);
    const size_t first = issued;
    while (a.requests > 0 ? issued - first < a.requests
                          : std::chrono::steady_clock::now() < stop) {
      const ps::SArray<ps::Key>& keys = sets[issued % sets.size()];
      if (push) {
        flight.push_back(kv.ZPush(keys, vals));
      } else {
        ps::SArray<float>& out = outs[issued % a.window];
        flight.push_back(kv.ZPull(keys, &out));
      }
      ++issued;
      if (static_cast<int>(flight.size()) >= a.window) {
        kv.Wait(flight.front());
        flight.pop_front();
        ++done;
      }
    }
    while (!flight.empty()) {
      kv.Wait(flight.front());
      flight.pop_front();
      ++done;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return done / elapsed;
  };
  if (a.requests == 0) run(a.warmup);
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
  const double req_s = run(a.seconds);
  std::printf(
      "PSBENCH rank=%d mode=%s keys=%zu servers=%d workers=%d window=%d "
      "layout=%s req_s=%.1f keys_s=%.0f\n",
      rank, a.mode.c_str(), a.keys, ps::NumServers(), ps::NumWorkers(),
      a.window, a.layout.c_str(), req_s, req_s * a.keys);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  ps::Start(0);
  ps::KVServer<float>* server = nullptr;
  EmptyServer handle;
  if (ps::IsServer()) {
    server = new ps::KVServer<float>(0);
    server->set_request_handle(
        [&handle](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                  ps::KVServer<float>* s) { handle(meta, data, s); });
  }
  // Every server's handle exists before the first request: ps-lite waits
  // at most 5 s for a server's app to appear and then aborts the server,
  // which on 2 busy cores it sometimes did.
  // (ps-lite's scheduler, when the program is the scheduler, counts the
  // barrier without taking part in it.)
  if (!ps::IsScheduler()) {
    ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup | ps::kServerGroup);
  }
  if (ps::IsWorker()) RunWorker(a);
  ps::Finalize(0, true);
  delete server;
  return 0;
}
