// A multi-process check of key placement: every server checks that every
// key it receives lies in its own range (GetServerKeyRanges()[MyRank()]; under
// EMBER_KEY_PLACEMENT=spread, the key's mixed position does), while workers
// push and pull MXNet-style encoded keys (ranges[r].begin() + k, meant for
// server r), keys spread over the whole key space (0 and 2^64 - 1 among
// them) and small integers, with variable-length values on a second app,
// and check every pulled sum exactly. A server that received a key it does
// not own, or no keys at all, exits non-zero.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ps/ps.h"
#include "util/mix.h"

DEFINE_int32(rounds, 10, "push rounds per worker");

namespace {

using ps::Key;

bool Spread() {
  const char* p = std::getenv("EMBER_KEY_PLACEMENT");
  return p != nullptr && std::string(p) == "spread";
}

// Every key the workers use, sorted: the same on every worker.
std::vector<Key> Keys() {
  const std::vector<ps::Range>& ranges =
      ps::Postoffice::Get()->GetServerKeyRanges();
  std::vector<Key> keys;
  for (const ps::Range& r : ranges) {
    // A tensor cut into parts, part r encoded into server r's range.
    for (Key k = 0; k < 500; ++k) keys.push_back(r.begin() + k);
    keys.push_back(r.end() - 1);
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 3000; ++i) keys.push_back(rng());
  for (Key k = 0; k < 200; ++k) keys.push_back(k);
  keys.push_back(ps::kMaxKey);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

int RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  ps::KVWorker<float> var(1, 0);
  const std::vector<Key> keys = Keys();
  const std::vector<float> ones(keys.size(), 1.0f);
  std::vector<int> lens(keys.size());
  std::vector<float> var_vals;
  for (size_t i = 0; i < keys.size(); ++i) {
    lens[i] = static_cast<int>(i % 3 + 1);
    for (int j = 0; j < lens[i]; ++j) var_vals.push_back(static_cast<float>(j));
  }
  for (int r = 0; r < FLAGS_rounds; ++r) {
    ps::Status s = kv.WaitStatus(kv.Push(keys, ones));
    if (s.ok()) s = var.WaitStatus(var.Push(keys, var_vals, lens));
    if (!s.ok()) {
      LOG(ERROR) << "cluster_placement: push failed: " << s;
      return 1;
    }
  }
  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
  const float want = static_cast<float>(FLAGS_rounds * ps::NumWorkers());
  std::vector<float> got;
  ps::Status s = kv.WaitStatus(kv.Pull(keys, &got));
  if (!s.ok() || got.size() != keys.size()) {
    LOG(ERROR) << "cluster_placement: pull failed: " << s;
    return 1;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] != want) {
      LOG(ERROR) << "cluster_placement: key " << keys[i] << " holds " << got[i]
                 << ", want " << want;
      return 1;
    }
  }
  std::vector<float> var_got;
  std::vector<int> var_lens;
  s = var.WaitStatus(var.Pull(keys, &var_got, &var_lens));
  if (!s.ok() || var_lens != lens || var_got.size() != var_vals.size()) {
    LOG(ERROR) << "cluster_placement: variable-length pull failed: " << s;
    return 1;
  }
  for (size_t i = 0; i < var_vals.size(); ++i) {
    if (var_got[i] != want * var_vals[i]) {
      LOG(ERROR) << "cluster_placement: variable-length value " << i
                 << " is wrong";
      return 1;
    }
  }
  LOG(INFO) << "cluster_placement: worker " << ps::MyRank() << " verified "
            << keys.size() << " keys";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ps::Start(0, argv[0]);
  int rc = 0;
  if (ps::IsWorker()) {
    rc = RunWorker();
    ps::Finalize(0, true);
  } else if (ps::IsServer()) {
    const int rank = ps::MyRank();
    const ps::Range own = ps::Postoffice::Get()->GetServerKeyRanges()[rank];
    const bool last = rank + 1 == ps::NumServers();
    const bool spread = Spread();
    std::atomic<size_t> received{0}, misplaced{0};
    auto owns = [&](Key key) {
      const Key position = spread ? ps::Fmix64(key) : key;
      return (position >= own.begin() && position < own.end()) ||
             (last && position == ps::kMaxKey);
    };
    ps::KVServerDefaultHandle<float> store;
    auto check = [&](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                     ps::KVServer<float>* server) {
      // With replicas, the handle also applies copies of another server's
      // pushes (meta.replica_of names it); only its own requests must be
      // in its range.
      for (Key k : data.keys) {
        if (meta.replica_of == 0 && !owns(k) && misplaced.fetch_add(1) < 5) {
          LOG(ERROR) << "cluster_placement: server " << rank << " owns ["
                     << own.begin() << ", " << own.end() << ") but got key "
                     << k;
        }
      }
      received += data.keys.size();
      store(meta, data, server);
    };
    ps::KVServer<float> kv(0);
    kv.set_request_handle(check);
    ps::KVServerDefaultHandle<float> var_store;
    auto var_check = [&](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                         ps::KVServer<float>* server) {
      for (Key k : data.keys) {
        if (meta.replica_of == 0 && !owns(k)) ++misplaced;
      }
      var_store(meta, data, server);
    };
    ps::KVServer<float> var(1);
    var.set_request_handle(var_check);
    ps::Finalize(0, true);
    LOG(INFO) << "cluster_placement: server " << rank << " received "
              << received.load() << " keys, " << misplaced.load()
              << " outside its range";
    if (misplaced.load() > 0 || received.load() == 0) rc = 1;
  } else {
    ps::Finalize(0, true);
  }
  return rc;
}
