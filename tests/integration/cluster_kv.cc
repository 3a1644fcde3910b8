// A multi-process exactness check of push and pull: every worker pushes
// integer-valued floats (exact in float arithmetic) to keys it shares with
// the others and to keys of its own, for several rounds with requests in
// flight, then checks that every pulled value is exactly the sum of what was
// pushed. A second app does the same with variable-length values.

#include <gflags/gflags.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <random>
#include <thread>

#include "node/node.h"
#include "ps/ps.h"

DEFINE_int32(rounds, 20, "push rounds per worker");
DEFINE_int32(shared_keys, 5000, "dense keys 0..N-1 every worker pushes to");
DEFINE_int32(own_keys, 3000, "random 64-bit keys private to each worker");
DEFINE_int32(window, 8, "pushes in flight");
DEFINE_string(attack, "",
              "worker 0 runs this command halfway through, with "
              "--scheduler=HOST:PORT --nodes=ID@HOST:PORT,... appended "
              "(forge: a process that never joined)");
DEFINE_int32(max_rss_growth_mb, 0,
             "fail if this node's resident memory at the end grew by more, "
             "once the node has returned the heap a flood left (it does so "
             "itself a beat after the flood: this waits for that), or once "
             "malloc has returned the freed heap it keeps (0: no check); "
             "every node reports what it dropped and its memory");
DEFINE_int32(max_peak_growth_mb, 0,
             "fail if this node's peak resident memory grew by more (0: no "
             "check)");

namespace {

using ps::Key;

// The value worker `rank` pushes to position i of a key list.
float ValueOf(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 101));
}

std::vector<Key> OwnKeys(int rank) {
  std::mt19937_64 rng(1000 + rank);
  std::vector<Key> keys(FLAGS_own_keys);
  for (auto& k : keys) {
    // Disjoint from the shared range and from other workers' keys.
    k = (rng() | (Key(1) << 63)) ^ static_cast<Key>(rank);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::string AddressOf(int id) {
  return ps::Postoffice::Get()->node()->Address(id);
}

// Runs the --attack command against every node, on a thread of its own.
std::atomic<bool> attack_done{false};

std::thread StartAttack() {
  std::string command =
      FLAGS_attack + " --scheduler=" + AddressOf(1) + " --nodes=";
  std::vector<int> ids =
      ps::Postoffice::Get()->GetNodeIDs(ps::kServerGroup + ps::kWorkerGroup);
  for (size_t i = 0; i < ids.size(); ++i) {
    command +=
        (i ? "," : "") + std::to_string(ids[i]) + "@" + AddressOf(ids[i]);
  }
  return std::thread([command] {
    LOG(INFO) << "cluster_kv: attacking: " << command;
    int rc = std::system(command.c_str());
    LOG(INFO) << "cluster_kv: the attack ended with status " << rc;
    attack_done = true;
  });
}

// A field of /proc/self/status in kB (VmRSS: resident memory now; VmHWM:
// its peak), or -1.
long StatusKb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stol(line.substr(field.size() + 1));
    }
  }
  return -1;
}
long ResidentKb() { return StatusKb("VmRSS"); }

int Fail(const std::string& what) {
  LOG(ERROR) << "cluster_kv: " << what;
  return 1;
}

int RunWorker() {
  const int rank = ps::MyRank();
  const int workers = ps::NumWorkers();
  ps::KVWorker<float> kv(0, 0);
  ps::KVWorker<float> var(1, 0);

  std::vector<Key> shared(FLAGS_shared_keys);
  for (size_t i = 0; i < shared.size(); ++i) shared[i] = i;
  std::vector<Key> own = OwnKeys(rank);
  std::vector<float> shared_vals(shared.size()), own_vals(own.size());
  for (size_t i = 0; i < shared.size(); ++i) shared_vals[i] = ValueOf(rank, i);
  for (size_t i = 0; i < own.size(); ++i) own_vals[i] = ValueOf(rank, i);

  // Variable-length values on app 1: key i of this worker holds i % 4 + 1
  // values.
  std::vector<Key> var_keys(200);
  std::vector<int> var_lens(var_keys.size());
  std::vector<float> var_vals;
  for (size_t i = 0; i < var_keys.size(); ++i) {
    var_keys[i] = (static_cast<Key>(rank) << 40) + i * 7919;
    var_lens[i] = static_cast<int>(i % 4 + 1);
    for (int j = 0; j < var_lens[i]; ++j) {
      var_vals.push_back(static_cast<float>(i + j));
    }
  }

  // Timestamps belong to their app: one window per app.
  std::deque<int> kv_flight, var_flight;
  auto drain = [](ps::KVWorker<float>* w, std::deque<int>* flight,
                  size_t keep) -> ps::Status {
    while (flight->size() > keep) {
      ps::Status s = w->WaitStatus(flight->front());
      if (!s.ok()) return s;
      flight->pop_front();
    }
    return ps::Status::OK();
  };
  std::thread attack;
  for (int r = 0; r < FLAGS_rounds; ++r) {
    if (rank == 0 && r == FLAGS_rounds / 2 && !FLAGS_attack.empty()) {
      attack = StartAttack();
    }
    kv_flight.push_back(
        kv.ZPush(ps::SArray<Key>(shared), ps::SArray<float>(shared_vals)));
    kv_flight.push_back(kv.Push(own, own_vals));
    var_flight.push_back(var.Push(var_keys, var_vals, var_lens));
    ps::Status s = drain(&kv, &kv_flight, FLAGS_window);
    if (s.ok()) s = drain(&var, &var_flight, FLAGS_window);
    if (!s.ok()) return Fail("push failed: " + s.ToString());
  }
  ps::Status s = drain(&kv, &kv_flight, 0);
  if (s.ok()) s = drain(&var, &var_flight, 0);
  if (!s.ok()) return Fail("push failed: " + s.ToString());
  // The sums are checked after the attack has done all it could; until it
  // ends, worker 0 keeps the servers busy answering pulls.
  if (attack.joinable()) {
    int pulls = 0;
    std::vector<float> ignored;
    while (!attack_done) {
      kv.Wait(kv.Pull(shared, &ignored));
      ++pulls;
    }
    attack.join();
    LOG(INFO) << "cluster_kv: " << pulls << " pulls during the attack";
  }
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);

  std::vector<float> got;
  kv.Wait(kv.Pull(shared, &got));
  for (size_t i = 0; i < shared.size(); ++i) {
    float want = 0;
    for (int w = 0; w < workers; ++w) want += FLAGS_rounds * ValueOf(w, i);
    if (got[i] != want) {
      return Fail("shared key " + std::to_string(shared[i]) + ": got " +
                  std::to_string(got[i]) + ", want " + std::to_string(want));
    }
  }
  std::vector<float> mine(own.size());  // Pre-sized output.
  kv.Wait(kv.Pull(own, &mine));
  for (size_t i = 0; i < own.size(); ++i) {
    if (mine[i] != FLAGS_rounds * own_vals[i]) {
      return Fail("own key " + std::to_string(own[i]) + ": got " +
                  std::to_string(mine[i]));
    }
  }
  std::vector<float> var_got;
  std::vector<int> var_got_lens;
  var.Wait(var.Pull(var_keys, &var_got, &var_got_lens));
  if (var_got_lens != var_lens || var_got.size() != var_vals.size()) {
    return Fail("variable-length pull has the wrong shape");
  }
  for (size_t i = 0; i < var_vals.size(); ++i) {
    if (var_got[i] != FLAGS_rounds * var_vals[i]) {
      return Fail("variable-length value " + std::to_string(i) + " is wrong");
    }
  }
  // PushPull returns the state after the push.
  std::vector<float> after;
  kv.Wait(kv.PushPull(own, own_vals, &after));
  for (size_t i = 0; i < own.size(); ++i) {
    if (after[i] != (FLAGS_rounds + 1) * own_vals[i]) {
      return Fail("push-pull of own key " + std::to_string(own[i]) +
                  " is wrong");
    }
  }
  LOG(INFO) << "cluster_kv: worker " << rank << " verified "
            << shared.size() + own.size() + var_keys.size() << " keys over "
            << FLAGS_rounds << " rounds";
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ps::Start(0, argv[0]);
  std::unique_ptr<ps::KVServer<float>> server, var_server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
    var_server = std::make_unique<ps::KVServer<float>>(1);
    var_server->set_request_handle(ps::KVServerDefaultHandle<float>());
  }
  const long rss_start_kb = ResidentKb();
  int rc = ps::IsWorker() ? RunWorker() : 0;
  if (rc != 0) return rc;
  ps::Node* node = ps::Postoffice::Get()->node();
  if (FLAGS_max_rss_growth_mb > 0) {
    // After this barrier every attack is over (worker 0 waits for its end
    // before it pulls). A node that was flooded returns the heap the flood
    // left by itself, a heartbeat after the flood ended (Node::
    // TrimAfterFlood): wait for that, for at most 10 s.
    ps::Postoffice::Get()->Barrier(
        0, ps::kScheduler + ps::kServerGroup + ps::kWorkerGroup);
    const uint64_t dropped = node->DroppedMessages();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (dropped - node->counters().dropped_at_last_trim >=
               ps::Node::kFloodTrimMessages &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (dropped - node->counters().dropped_at_last_trim >=
        ps::Node::kFloodTrimMessages) {
      return Fail("this node dropped " + std::to_string(dropped) +
                  " messages and did not return the heap they left within "
                  "10 s");
    }
  }
  ps::Finalize(0, true);
  const long growth_mb = (ResidentKb() - rss_start_kb) / 1024;
  const long peak_mb = (StatusKb("VmHWM") - rss_start_kb) / 1024;
  // What is left once malloc returns the freed heap it keeps for reuse
  // (EMBER_MALLOC_KEEP_MB): what the node still holds.
  malloc_trim(0);
  const long held_mb = (ResidentKb() - rss_start_kb) / 1024;
  LOG(INFO) << "cluster_kv: dropped "
            << node->counters().dropped_unauthenticated
            << " unauthenticated and " << node->counters().dropped_bad_control
            << " bad control messages, rejected "
            << node->van()->counters().rejected_messages
            << " undecodable ones; resident memory grew by " << growth_mb
            << " MB (peak " << peak_mb << " MB above the start; " << held_mb
            << " MB once malloc returned its freed heap; the node returned "
            << node->counters().flood_trims << " flood(s)' heap itself)";
  if (FLAGS_max_rss_growth_mb > 0 && growth_mb > FLAGS_max_rss_growth_mb) {
    return Fail("resident memory grew by " + std::to_string(growth_mb) +
                " MB, more than --max_rss_growth_mb=" +
                std::to_string(FLAGS_max_rss_growth_mb));
  }
  if (FLAGS_max_rss_growth_mb > 0 && held_mb > FLAGS_max_rss_growth_mb) {
    return Fail("this node still holds " + std::to_string(held_mb) +
                " MB more than at the start, more than --max_rss_growth_mb=" +
                std::to_string(FLAGS_max_rss_growth_mb));
  }
  if (FLAGS_max_peak_growth_mb > 0 && peak_mb > FLAGS_max_peak_growth_mb) {
    return Fail("resident memory peaked " + std::to_string(peak_mb) +
                " MB above the start, more than --max_peak_growth_mb=" +
                std::to_string(FLAGS_max_peak_growth_mb));
  }
  return 0;
}
