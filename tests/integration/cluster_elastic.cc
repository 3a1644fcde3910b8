// The elastic-worker test's program (elastic_test.py; docs/consistency.md,
// "Elastic workers").
//
// --mode=train (bsp): each iteration every worker pulls the --keys
// parameters, computes a gradient from them (a deterministic function of
// the pulled values, its rank and the iteration), pushes it and ends the
// iteration with Clock(). Worker --pause_rank pauses --pause_ms at
// iteration --pause_at, after its push (--pause_phase=push) or after its
// pull (--pause_phase=pull), and says so first: the test either lets it
// pause (a slow worker) or kills it then and starts it again with
// EMBER_WORKER_RANK, and then it asks the servers where it resumes
// (KVWorker::JoinClock) and goes on from there. Worker 0 writes the final
// parameters to --out (raw floats).
//
// --mode=ones (any consistency): every worker pushes 1 to every key
// --iterations times; on SIGTERM a worker stops, leaves (Finalize without
// the barrier) and writes how many pushes it made to --left_file. Worker 0
// then checks that every key holds exactly what was pushed: the others'
// iterations plus the leaver's pushes.
//
// Output lines the test reads:
//   cluster_elastic: progress N
//   cluster_elastic: paused at N
//   cluster_elastic: resumed at clock N
//   cluster_elastic: left after N pushes
//   cluster_elastic: sums exact (...)   or   ... FAIL ...

#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps/membership.h"
#include "ps/ps.h"

DEFINE_string(mode, "train", "train (bsp) or ones");
DEFINE_int32(iterations, 60, "iterations (train) or pushes (ones)");
DEFINE_int32(keys, 512, "parameters, spread over the key space");
DEFINE_int32(pause_rank, -1, "the worker that pauses (train)");
DEFINE_int32(pause_at, -1, "the iteration it pauses in");
DEFINE_string(pause_phase, "push", "pause after the push or after the pull");
DEFINE_int32(pause_ms, 0, "how long it pauses");
DEFINE_int32(pace_ms, 0, "sleep per iteration or push");
DEFINE_string(out, "", "worker 0 writes the final parameters here");
DEFINE_string(left_file, "", "ones: the leaver writes its pushes here");

namespace {

std::atomic<bool> g_term{false};

void OnTerm(int) { g_term.store(true); }

std::vector<ps::Key> Keys() {
  const size_t n = static_cast<size_t>(FLAGS_keys);
  std::vector<ps::Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i * (ps::kMaxKey / n) + 11;
  return keys;
}

void Say(const std::string& line) {
  std::printf("cluster_elastic: %s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const std::string& what) {
  Say("FAIL " + what);
  return 1;
}

// Gradient of worker `rank` at iteration `it`: pulls each parameter toward
// a target of its own, scaled by the mean of all pulled values, so every
// value depends on every server's answer.
std::vector<float> Gradient(const std::vector<float>& w, int rank, int it) {
  const size_t n = w.size();
  float mean = 0;
  for (float v : w) mean += v;
  mean /= static_cast<float>(n);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    const float target =
        std::sin(0.37f * static_cast<float>(i) + 1.3f * rank + 0.11f * it);
    g[i] = 0.05f * (target - w[i]) + 0.01f * mean;
  }
  return g;
}

void Pause(int it, const char* phase) {
  if (ps::MyRank() != FLAGS_pause_rank || it != FLAGS_pause_at ||
      FLAGS_pause_phase != phase) {
    return;
  }
  Say("paused at " + std::to_string(it));
  std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_pause_ms));
}

int Train(ps::KVWorker<float>* kv, bool restarted) {
  const std::vector<ps::Key> keys = Keys();
  int first = 0;
  if (restarted) {
    ps::StatusOr<int64_t> clock = kv->JoinClock();
    if (!clock.ok()) return Fail("JoinClock: " + clock.status().ToString());
    first = static_cast<int>(*clock);
    Say("resumed at clock " + std::to_string(first));
  }
  for (int it = first; it < FLAGS_iterations; ++it) {
    std::vector<float> w;
    ps::Status s = kv->WaitStatus(kv->Pull(keys, &w));
    if (!s.ok() || w.size() != keys.size())
      return Fail("pull: " + s.ToString());
    Pause(it, "pull");
    s = kv->WaitStatus(kv->Push(keys, Gradient(w, ps::MyRank(), it)));
    if (!s.ok()) return Fail("push: " + s.ToString());
    Pause(it, "push");
    s = kv->WaitStatus(kv->Clock());
    if (!s.ok()) return Fail("clock: " + s.ToString());
    Say("progress " + std::to_string(it + 1));
    if (FLAGS_pace_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_pace_ms));
    }
  }
  ps::Status b = ps::Postoffice::Get()->BarrierStatus(0, ps::kWorkerGroup);
  if (!b.ok()) return Fail("barrier: " + b.ToString());
  if (ps::MyRank() != 0) return 0;
  std::vector<float> w;
  ps::Status s = kv->WaitStatus(kv->Pull(keys, &w));
  if (!s.ok() || w.size() != keys.size()) return Fail("pull: " + s.ToString());
  std::ofstream out(FLAGS_out, std::ios::binary);
  out.write(reinterpret_cast<const char*>(w.data()),
            static_cast<std::streamsize>(w.size() * sizeof(float)));
  if (!out) return Fail("cannot write " + FLAGS_out);
  Say("wrote " + std::to_string(w.size()) + " parameters");
  return 0;
}

// Returns the exit code; *left: whether this worker left early.
int Ones(ps::KVWorker<float>* kv, bool* left) {
  const std::vector<ps::Key> keys = Keys();
  std::vector<float> ones(keys.size(), 1.0f);
  int pushed = 0;
  for (; pushed < FLAGS_iterations && !g_term.load(); ++pushed) {
    ps::Status s = kv->WaitStatus(kv->Push(keys, ones));
    if (!s.ok()) return Fail("push: " + s.ToString());
    if (pushed % 50 == 0) Say("progress " + std::to_string(pushed));
    if (FLAGS_pace_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_pace_ms));
    }
  }
  if (g_term.load()) {
    *left = true;
    std::ofstream(FLAGS_left_file) << pushed << "\n";
    Say("left after " + std::to_string(pushed) + " pushes");
    return 0;
  }
  ps::Status b = ps::Postoffice::Get()->BarrierStatus(0, ps::kWorkerGroup);
  if (!b.ok()) return Fail("barrier: " + b.ToString());
  if (ps::MyRank() != 0) return 0;
  int left_pushes = 0;
  std::ifstream in(FLAGS_left_file);
  if (!(in >> left_pushes)) return Fail("no " + FLAGS_left_file);
  std::vector<float> out;
  ps::Status s = kv->WaitStatus(kv->Pull(keys, &out));
  if (!s.ok() || out.size() != keys.size()) return Fail("pull " + s.ToString());
  // The others wait in Finalize's barrier: none has left yet.
  const int others = ps::NumWorkers();
  const float want = static_cast<float>(others) * FLAGS_iterations +
                     static_cast<float>(left_pushes);
  size_t wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != want && wrong++ < 5) {
      Say("FAIL key " + std::to_string(keys[i]) + " is " +
          std::to_string(out[i]) + ", not " + std::to_string(want));
    }
  }
  if (wrong > 0) return Fail(std::to_string(wrong) + " keys wrong");
  Say("sums exact (" + std::to_string(static_cast<int>(want)) +
      " on every key: " + std::to_string(others) + " workers x " +
      std::to_string(FLAGS_iterations) + " + " + std::to_string(left_pushes) +
      " of the worker that left)");
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  signal(SIGTERM, OnTerm);
  const char* rank = std::getenv("EMBER_WORKER_RANK");
  const bool restarted = rank != nullptr && *rank != '\0';
  ps::SetMembershipCallback([](const ps::MembershipChange& c) {
    static const char* const kNames[] = {"joined", "back", "away", "gone"};
    std::printf("cluster_elastic: membership: worker %d %s, %d workers\n",
                c.rank, kNames[static_cast<int>(c.kind)], c.num_workers);
    std::fflush(stdout);
  });
  ps::Start(0, argv[0]);
  int rc = 0;
  bool left = false;
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
  }
  if (ps::IsWorker()) {
    ps::KVWorker<float> kv(0, 0);
    rc = FLAGS_mode == "train" ? Train(&kv, restarted) : Ones(&kv, &left);
  }
  ps::Finalize(0, !left);
  std::fflush(stdout);
  return rc;
}
