// kv_bench: push/pull throughput and latency of Ember's KV API, written
// against the public API only (as a ps-lite user would), to be compared with
// bench/zmq_baseline and bench/memcpy_baseline by scripts/bench.py.
//
//   scripts/local.sh 1 1 build/bench/kv_bench --mode=push
//       --payload=dense_4m --window=8 --handle=sum        (one line)
//
// One run measures one case. Every worker keeps --window requests in flight
// (ZPush/ZPull/ZPushPull over buffers allocated once; when the window is
// full it waits for the oldest), for --warmup_seconds and then, after a
// barrier of the workers, for --seconds. A request's latency runs from its
// issue to the return of its Wait. Payload bytes count the values moved:
// sent for a push, received for a pull, both for a push-pull.
//
// Payloads: dense_* sends one key per server per request, the request's
// values split evenly over them (the keys are found by asking the servers
// which keys the key ring gives them); sparse_1000xK sends 1000 random
// 64-bit keys with K floats each, cycling over --key_sets key sets drawn
// once per worker.
//
// Server handles: "sum" keeps a summing store (dense: one preallocated array
// per key, answered without copying; sparse: rows in one table); "empty"
// answers a push at once and a pull with a preallocated buffer of the right
// size, so that only the transport's cost remains.
//
// Output: every worker prints its own "WORKER worker=R ..." line; worker 0
// collects every worker's figures and prints the case's line:
//   RESULT mode=push payload=dense_4m servers=1 workers=1 window=8
//          handle=sum GB_s=2.41 req_s=575.0 p50_us=12800 p99_us=15100
// (one line). With one worker its percentiles are exact; with several they
// come from the merged histograms of every worker (buckets 5% wide).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "add_to.h"
#include "ps/ps.h"

DEFINE_string(mode, "push", "push, pull or pushpull");
DEFINE_string(payload, "dense_4m",
              "dense_4k, dense_256k, dense_4m (bytes of values per request, "
              "one key per server), sparse_1000x1 or sparse_1000x8 (1000 "
              "random keys with 1 or 8 floats each)");
DEFINE_int32(window, 8, "requests in flight per worker");
DEFINE_double(seconds, 3, "measured duration, in seconds");
DEFINE_double(warmup_seconds, 1, "unmeasured run before the measurement");
DEFINE_uint64(requests, 0,
              "if > 0: issue exactly this many requests per worker instead of "
              "running for --seconds, and skip the warm-up (for instruction "
              "counts under callgrind, see scripts/callgrind.py)");
DEFINE_string(handle, "sum", "server handle: sum (a summing store) or empty");
DEFINE_int32(key_sets, 16, "sparse: distinct key sets per worker, cycled");
DEFINE_uint64(seed, 1, "sparse: seed of the random keys");
DEFINE_bool(adopt, true,
            "pull into empty SArrays, which take over the received buffer "
            "(zero copy); false: into buffers allocated once, copied into "
            "(what ps-lite always does)");

namespace {

constexpr int kAppId = 0;
constexpr int kCustomerId = 0;

// Request commands. kBenchCmd carries the measured traffic; the others set
// up and report the run.
constexpr int kBenchCmd = 0;
constexpr int kProbeCmd = 1;  // A pull answered with the server's rank.
constexpr int kStatsCmd = 2;  // A worker's figures, stored verbatim.

constexpr int kSparseKeys = 1000;
// How many keys ahead the sparse handle prefetches index slots: enough
// misses in flight to hide a memory round trip at a few ns of work a key.
constexpr size_t kPrefetchAhead = 16;

// Latency histogram used to merge the workers' percentiles: bucket b holds
// latencies in [kHistogramRatio^b, kHistogramRatio^(b+1)) microseconds; the
// last bucket also holds everything above.
constexpr int kHistogramBuckets = 400;
constexpr double kHistogramRatio = 1.05;

// A worker's figures, sent to worker 0 as doubles.
constexpr int kStatRequests = 0;
constexpr int kStatBytes = 1;
constexpr int kStatSeconds = 2;
constexpr int kStatP50 = 3;
constexpr int kStatP99 = 4;
constexpr int kStatHistogram = 5;
constexpr int kStatCount = kStatHistogram + kHistogramBuckets;

using Clock = std::chrono::steady_clock;

struct Config {
  bool push = false;
  bool pull = false;
  bool dense = false;
  size_t dense_bytes = 0;     // Dense: bytes of values per request.
  size_t floats_per_key = 0;  // Sparse: floats per key.
  bool sum_handle = true;
};

bool ParseConfig(Config* config) {
  if (FLAGS_mode == "push") {
    config->push = true;
  } else if (FLAGS_mode == "pull") {
    config->pull = true;
  } else if (FLAGS_mode == "pushpull") {
    config->push = config->pull = true;
  } else {
    LOG(ERROR) << "--mode must be push, pull or pushpull, not " << FLAGS_mode;
    return false;
  }
  if (FLAGS_payload == "dense_4k") {
    config->dense = true;
    config->dense_bytes = size_t{4} << 10;
  } else if (FLAGS_payload == "dense_256k") {
    config->dense = true;
    config->dense_bytes = size_t{256} << 10;
  } else if (FLAGS_payload == "dense_4m") {
    config->dense = true;
    config->dense_bytes = size_t{4} << 20;
  } else if (FLAGS_payload == "sparse_1000x1") {
    config->floats_per_key = 1;
  } else if (FLAGS_payload == "sparse_1000x8") {
    config->floats_per_key = 8;
  } else {
    LOG(ERROR) << "unknown --payload " << FLAGS_payload;
    return false;
  }
  if (FLAGS_handle == "sum" || FLAGS_handle == "empty") {
    config->sum_handle = FLAGS_handle == "sum";
  } else {
    LOG(ERROR) << "--handle must be sum or empty, not " << FLAGS_handle;
    return false;
  }
  if (FLAGS_window < 1 || !(FLAGS_seconds > 0) || FLAGS_warmup_seconds < 0 ||
      FLAGS_key_sets < 1) {
    LOG(ERROR) << "need --window >= 1, --seconds > 0, --warmup_seconds >= 0 "
                  "and --key_sets >= 1";
    return false;
  }
  return true;
}

// Floats per key of a request: a dense request's values are split evenly
// over one key per server (rounded down).
size_t FloatsPerKey(const Config& config, int num_servers) {
  if (!config.dense) return config.floats_per_key;
  return config.dense_bytes / sizeof(float) / static_cast<size_t>(num_servers);
}

// ---------------------------------------------------------------- server --

// Sparse key -> row number: open addressing with linear probing over a
// power-of-two array, sized for the run's keys at load <= 1/2, so a lookup
// is a multiply, a shift and (nearly always) one cache line; no allocation
// per key, unlike std::unordered_map. The index (16 B a slot) outgrows L1 and
// shares L2 with the transport's buffers, so a batch prefetches its keys'
// home slots a few keys ahead (Prefetch), as the model layer's
// EmbeddingTable does, instead of taking each miss in turn.
class RowIndex {
 public:
  explicit RowIndex(size_t keys) {
    size_t capacity = 16;
    while (capacity < 2 * keys) capacity *= 2;
    slots_.assign(capacity, Slot{0, kEmpty});
    shift_ = 64 - static_cast<int>(std::log2(capacity));
  }

  static constexpr size_t kNone = ~size_t{0};

  // The row of `key`, or kNone.
  size_t Find(ps::Key key) const {
    const Slot* slots = slots_.data();
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(key);; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.key == key && s.row != kEmpty) return s.row;
      if (s.row == kEmpty) return kNone;
    }
  }

  // Starts loading the cache line where Find(key) begins.
  void Prefetch(ps::Key key) const {
    __builtin_prefetch(slots_.data() + Home(key), 0, 3);
  }

  // Numbers a key Find does not know: rows 0, 1, 2... Grows when half full.
  size_t Add(ps::Key key) {
    size_t i = Home(key);
    while (slots_[i].row != kEmpty) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{key, size_++};
    if (2 * size_ > slots_.size()) Grow();
    return size_ - 1;
  }

 private:
  struct Slot {
    ps::Key key;
    uint64_t row;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  size_t Home(ps::Key key) const {
    return (key * 0x9E3779B97F4A7C15ull) >> shift_;
  }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{0, kEmpty});
    --shift_;
    for (const Slot& s : old) {
      if (s.row == kEmpty) continue;
      size_t i = Home(s.key);
      while (slots_[i].row != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  int shift_ = 0;
  size_t size_ = 0;
};

// The servers' request handle. Runs on the server's app thread only.
class BenchHandle {
 public:
  BenchHandle(const Config& config, int num_servers, int num_workers)
      : config_(config),
        floats_per_key_(FloatsPerKey(config, num_servers)),
        rank_(ps::MyRank()),
        // The store's keys: every worker's key sets; sized so that the
        // index does not grow during the run.
        rows_(config.dense ? 0
                           : static_cast<size_t>(num_workers) * FLAGS_key_sets *
                                 kSparseKeys) {
    if (!config.dense) {
      table_.reserve(static_cast<size_t>(num_workers) * FLAGS_key_sets *
                     kSparseKeys * floats_per_key_);
    }
  }

  void operator()(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                  ps::KVServer<float>* server) {
    switch (meta.cmd) {
      case kBenchCmd:
        break;
      case kProbeCmd:
        Probe(meta, data, server);
        return;
      case kStatsCmd:
        Stats(meta, data, server);
        return;
      default:
        server->ResponseError(
            meta, ps::Status::InvalidArgument("unknown command " +
                                              std::to_string(meta.cmd)));
        return;
    }
    const size_t n = data.keys.size();
    if (meta.push && data.vals.size() != n * floats_per_key_) {
      server->ResponseError(
          meta, ps::Status::InvalidArgument(
                    "push of " + std::to_string(data.vals.size()) +
                    " values for " + std::to_string(n) + " keys, expected " +
                    std::to_string(floats_per_key_) + " per key"));
      return;
    }
    if (!config_.sum_handle) {
      Empty(meta, data, server);
    } else if (config_.dense) {
      SumDense(meta, data, server);
    } else {
      SumSparse(meta, data, server);
    }
  }

 private:
  // A dense key's values. A pull answers with `arrays[current]` itself; a
  // push that finds it still referenced by a response in flight (a buffer
  // is immutable once sent) moves to another array first, so at most
  // window + 1 arrays ever exist per key.
  struct DenseValue {
    std::vector<ps::SArray<float>> arrays;
    size_t current = 0;
  };

  static bool InFlight(const ps::SArray<float>& array) {
    return array.ptr().use_count() > 1;
  }

  // A buffer of `n` floats that no response in flight references, from
  // `pool` (grown when every buffer is busy; buffers hold `capacity`).
  static ps::SArray<float> FreeBuffer(std::vector<ps::SArray<float>>* pool,
                                      size_t n, size_t capacity) {
    for (const ps::SArray<float>& buffer : *pool) {
      if (!InFlight(buffer) && buffer.size() >= n) return buffer.segment(0, n);
    }
    pool->emplace_back(std::max(n, capacity));
    return pool->back().segment(0, n);
  }

  void Probe(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
             ps::KVServer<float>* server) {
    ps::KVPairs<float> res;
    res.keys = data.keys;
    res.vals = ps::SArray<float>(data.keys.size(), static_cast<float>(rank_));
    server->Response(meta, res);
  }

  void Stats(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
             ps::KVServer<float>* server) {
    const size_t n = data.keys.size();
    if (meta.push) {
      if (n == 0 || data.vals.size() % n != 0) {
        server->ResponseError(meta,
                              ps::Status::InvalidArgument("bad statistics"));
        return;
      }
      const size_t k = data.vals.size() / n;
      for (size_t i = 0; i < n; ++i) {
        stats_[data.keys[i]].assign(data.vals.begin() + i * k,
                                    data.vals.begin() + (i + 1) * k);
      }
      server->Response(meta);
      return;
    }
    std::vector<float> out;
    for (size_t i = 0; i < n; ++i) {
      auto it = stats_.find(data.keys[i]);
      if (it == stats_.end()) {
        server->ResponseError(
            meta, ps::Status::NotFound("no statistics for worker " +
                                       std::to_string(data.keys[i])));
        return;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    ps::KVPairs<float> res;
    res.keys = data.keys;
    res.vals = ps::SArray<float>(std::move(out));
    server->Response(meta, res);
  }

  void Empty(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
             ps::KVServer<float>* server) {
    if (!meta.pull) {
      server->Response(meta);
      return;
    }
    const size_t n = data.keys.size() * floats_per_key_;
    if (zeros_.size() < n) zeros_ = ps::SArray<float>(n);
    ps::KVPairs<float> res;
    res.keys = data.keys;
    res.vals = zeros_.segment(0, n);
    server->Response(meta, res);
  }

  void SumDense(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                ps::KVServer<float>* server) {
    const size_t n = data.keys.size();
    const size_t k = floats_per_key_;
    ps::KVPairs<float> res;
    if (meta.pull) res.keys = data.keys;
    ps::SArray<float> gathered;  // Several keys in one pull: copied out.
    if (meta.pull && n > 1) gathered = FreeBuffer(&response_pool_, n * k, 0);
    for (size_t i = 0; i < n; ++i) {
      DenseValue& value = dense_[data.keys[i]];
      if (value.arrays.empty()) value.arrays.emplace_back(k, 0.0f);
      if (meta.push) {
        if (InFlight(value.arrays[value.current])) {
          size_t next = 0;
          while (next < value.arrays.size() &&
                 (next == value.current || InFlight(value.arrays[next]))) {
            ++next;
          }
          if (next == value.arrays.size()) value.arrays.emplace_back(k);
          value.arrays[next].CopyFrom(value.arrays[value.current]);
          value.current = next;
        }
        float* dst = value.arrays[value.current].data();
        const float* src = data.vals.data() + i * k;
        AddTo(dst, src, k);
      }
      if (meta.pull) {
        const ps::SArray<float>& current = value.arrays[value.current];
        if (n == 1) {
          res.vals = current;
        } else {
          std::copy(current.begin(), current.end(), gathered.data() + i * k);
        }
      }
    }
    if (meta.pull && n > 1) res.vals = gathered;
    server->Response(meta, res);
  }

  void SumSparse(const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                 ps::KVServer<float>* server) {
    const size_t n = data.keys.size();
    const size_t k = floats_per_key_;
    ps::KVPairs<float> res;
    float* out = nullptr;
    if (meta.pull) {
      res.keys = data.keys;
      res.vals = FreeBuffer(&response_pool_, n * k, kSparseKeys * k);
      out = res.vals.data();
    }
    const bool push = meta.push;
    const bool pull = meta.pull;
    const ps::Key* keys = data.keys.data();
    const float* src = push ? data.vals.data() : nullptr;
    float* table = table_.data();
    for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i) {
      rows_.Prefetch(keys[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      if (i + kPrefetchAhead < n) rows_.Prefetch(keys[i + kPrefetchAhead]);
      size_t row = rows_.Find(keys[i]);
      if (row == RowIndex::kNone) {
        row = rows_.Add(keys[i]);
        table_.resize(table_.size() + k, 0.0f);
        table = table_.data();
      }
      float* stored = table + row * k;
      if (push) {
        if (k == 1) {
          stored[0] += src[i];
        } else {
          AddTo(stored, src + i * k, k);
        }
      }
      if (pull) std::copy(stored, stored + k, out + i * k);
    }
    server->Response(meta, res);
  }

  // Immutable after construction.
  const Config config_;
  const size_t floats_per_key_;
  const int rank_;

  std::unordered_map<ps::Key, DenseValue> dense_;
  RowIndex rows_;             // Sparse key -> table row.
  std::vector<float> table_;  // Sparse rows, k floats each.
  std::vector<ps::SArray<float>> response_pool_;
  ps::SArray<float> zeros_;  // The empty handle's pull answer.
  std::unordered_map<ps::Key, std::vector<float>> stats_;
};

void RunServer(const Config& config) {
  BenchHandle handle(config, ps::NumServers(), ps::NumWorkers());
  ps::KVServer<float> server(kAppId);
  server.set_request_handle(
      [&handle](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                ps::KVServer<float>* server) { handle(meta, data, server); });
  // Finalize's barrier holds the server until every worker is done.
  ps::Finalize(kCustomerId, true);
}

// ---------------------------------------------------------------- worker --

// One key per server: candidate keys from the start of every server's key
// range are probed (each server answers with its rank) until every server
// owns one; under range placement the first round finds them, under spread
// placement a few rounds do. Returns them sorted.
ps::StatusOr<ps::SArray<ps::Key>> DenseKeys(ps::KVWorker<float>* kv,
                                            int num_servers) {
  constexpr size_t kPerRange = 64;
  const std::vector<ps::Range>& ranges =
      ps::Postoffice::Get()->GetServerKeyRanges();
  if (ranges.size() != static_cast<size_t>(num_servers)) {
    return ps::Status::Internal("GetServerKeyRanges() has " +
                                std::to_string(ranges.size()) + " ranges");
  }
  const size_t probe_keys = kPerRange * static_cast<size_t>(num_servers);
  std::vector<ps::Key> owned(num_servers, ps::kMaxKey);
  int found = 0;
  for (int round = 0; round < 64 && found < num_servers; ++round) {
    ps::SArray<ps::Key> keys(probe_keys);
    for (size_t i = 0; i < probe_keys; ++i) {
      keys[i] =
          ranges[i / kPerRange].begin() + round * kPerRange + i % kPerRange;
    }
    ps::SArray<float> ranks;
    PS_RETURN_IF_ERROR(
        kv->WaitStatus(kv->ZPull(keys, &ranks, nullptr, kProbeCmd)));
    if (ranks.size() != probe_keys) {
      return ps::Status::Internal("probe answered " +
                                  std::to_string(ranks.size()) + " values");
    }
    for (size_t i = 0; i < probe_keys; ++i) {
      const int rank = static_cast<int>(ranks[i]);
      if (rank < 0 || rank >= num_servers) {
        return ps::Status::Internal("probe answered rank " +
                                    std::to_string(rank));
      }
      if (owned[rank] == ps::kMaxKey) {
        owned[rank] = keys[i];
        ++found;
      }
    }
  }
  if (found < num_servers) {
    return ps::Status::Internal("no key found for some server");
  }
  std::sort(owned.begin(), owned.end());
  ps::SArray<ps::Key> keys;
  keys.CopyFrom(owned.data(), owned.size());
  return keys;
}

// --key_sets sets of kSparseKeys distinct random keys, each sorted.
std::vector<ps::SArray<ps::Key>> SparseKeySets(int rank) {
  std::mt19937_64 rng(FLAGS_seed * 1000003 + static_cast<uint64_t>(rank));
  std::vector<ps::SArray<ps::Key>> sets;
  for (int s = 0; s < FLAGS_key_sets; ++s) {
    std::vector<ps::Key> keys;
    while (keys.size() < static_cast<size_t>(kSparseKeys)) {
      while (keys.size() < static_cast<size_t>(kSparseKeys)) {
        keys.push_back(rng());
      }
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    ps::SArray<ps::Key> set;
    set.CopyFrom(keys.data(), keys.size());
    sets.push_back(set);
  }
  return sets;
}

struct PhaseResult {
  uint64_t requests = 0;
  double seconds = 0;
  std::vector<int64_t> latencies_ns;  // Only when recording.
};

// Keeps `window` requests in flight for `seconds`, then drains them.
ps::Status RunPhase(const Config& config, ps::KVWorker<float>* kv,
                    const std::vector<ps::SArray<ps::Key>>& key_sets,
                    const ps::SArray<float>& vals,
                    std::vector<ps::SArray<float>>* outs, double seconds,
                    uint64_t count, bool record, PhaseResult* result) {
  const size_t window = static_cast<size_t>(FLAGS_window);
  std::vector<int> timestamps(window);
  std::vector<Clock::time_point> issued(window);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(seconds));
  Clock::time_point last_done = start;
  uint64_t next = 0;    // Requests issued.
  uint64_t oldest = 0;  // Requests completed.
  auto complete = [&]() -> ps::Status {
    const size_t slot = oldest % window;
    PS_RETURN_IF_ERROR(kv->WaitStatus(timestamps[slot]));
    last_done = Clock::now();
    if (record) {
      result->latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(last_done -
                                                               issued[slot])
              .count());
    }
    ++oldest;
    return ps::Status::OK();
  };
  // A fixed count (`count` > 0) or a duration.
  while (count > 0 ? next < count : Clock::now() < deadline) {
    if (next - oldest == window) PS_RETURN_IF_ERROR(complete());
    const size_t slot = next % window;
    const ps::SArray<ps::Key>& keys = key_sets[next % key_sets.size()];
    issued[slot] = Clock::now();
    // An empty output takes the received buffer itself (zero copy); a
    // sized one gets the values copied in.
    if (FLAGS_adopt && config.pull) (*outs)[slot] = ps::SArray<float>();
    if (config.push && config.pull) {
      timestamps[slot] =
          kv->ZPushPull(keys, vals, &(*outs)[slot], nullptr, kBenchCmd);
    } else if (config.push) {
      timestamps[slot] = kv->ZPush(keys, vals, {}, kBenchCmd);
    } else {
      timestamps[slot] = kv->ZPull(keys, &(*outs)[slot], nullptr, kBenchCmd);
    }
    ++next;
  }
  while (oldest < next) PS_RETURN_IF_ERROR(complete());
  result->requests = next;
  result->seconds = std::chrono::duration<double>(last_done - start).count();
  return ps::Status::OK();
}

// The latency at quantile q (nearest rank) of `sorted`, in microseconds.
double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e3;
}

int HistogramBucket(double us) {
  if (us < 1) return 0;
  const int b = static_cast<int>(std::log(us) / std::log(kHistogramRatio));
  return std::min(b, kHistogramBuckets - 1);
}

// The quantile q of a histogram: the geometric middle of its bucket.
double HistogramPercentile(const std::vector<double>& counts, double q) {
  double total = 0;
  for (double c : counts) total += c;
  const double target = std::max(1.0, std::ceil(q * total));
  double seen = 0;
  for (int b = 0; b < kHistogramBuckets; ++b) {
    seen += counts[b];
    if (seen >= target) return std::pow(kHistogramRatio, b + 0.5);
  }
  return std::pow(kHistogramRatio, kHistogramBuckets);
}

std::string CaseFields(int num_servers, int num_workers) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "mode=%s payload=%s servers=%d workers=%d window=%d "
                "handle=%s",
                FLAGS_mode.c_str(), FLAGS_payload.c_str(), num_servers,
                num_workers, FLAGS_window, FLAGS_handle.c_str());
  return buf;
}

ps::Status RunWorker(const Config& config) {
  const int num_servers = ps::NumServers();
  const int num_workers = ps::NumWorkers();
  const int rank = ps::MyRank();
  const size_t k = FloatsPerKey(config, num_servers);
  if (k == 0) {
    return ps::Status::InvalidArgument(
        "payload too small for " + std::to_string(num_servers) + " servers");
  }
  ps::KVWorker<float> kv(kAppId, kCustomerId);

  std::vector<ps::SArray<ps::Key>> key_sets;
  if (config.dense) {
    auto keys = DenseKeys(&kv, num_servers);
    PS_RETURN_IF_ERROR(keys.status());
    key_sets.push_back(keys.value());
  } else {
    key_sets = SparseKeySets(rank);
  }
  // Every key set has the same number of keys.
  const size_t floats = key_sets[0].size() * k;
  const ps::SArray<float> vals(floats, 0.001f);
  std::vector<ps::SArray<float>> outs;
  for (int i = 0; i < FLAGS_window; ++i) outs.emplace_back(floats);
  const double bytes_per_request =
      static_cast<double>(floats * sizeof(float)) *
      ((config.push ? 1 : 0) + (config.pull ? 1 : 0));

  // Start together, warm up, and start the measurement together.
  ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
  PhaseResult warmup;
  // With a fixed request count there is no warm-up: the count must be exact.
  const double warmup_seconds = FLAGS_requests > 0 ? 0 : FLAGS_warmup_seconds;
  PS_RETURN_IF_ERROR(RunPhase(config, &kv, key_sets, vals, &outs,
                              warmup_seconds, 0, false, &warmup));
  PhaseResult measured;
  measured.latencies_ns.reserve(size_t{1} << 20);
  ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
  PS_RETURN_IF_ERROR(RunPhase(config, &kv, key_sets, vals, &outs, FLAGS_seconds,
                              FLAGS_requests, true, &measured));

  std::vector<int64_t>& lat = measured.latencies_ns;
  std::sort(lat.begin(), lat.end());
  std::vector<double> stats(kStatCount, 0.0);
  stats[kStatRequests] = static_cast<double>(measured.requests);
  stats[kStatBytes] =
      bytes_per_request * static_cast<double>(measured.requests);
  stats[kStatSeconds] = measured.seconds;
  stats[kStatP50] = Percentile(lat, 0.50);
  stats[kStatP99] = Percentile(lat, 0.99);
  for (int64_t ns : lat) {
    stats[kStatHistogram + HistogramBucket(static_cast<double>(ns) / 1e3)] += 1;
  }
  const double seconds = std::max(measured.seconds, 1e-9);
  std::printf(
      "WORKER worker=%d %s GB_s=%.3f req_s=%.1f p50_us=%.0f "
      "p99_us=%.0f requests=%llu seconds=%.3f\n",
      rank, CaseFields(num_servers, num_workers).c_str(),
      stats[kStatBytes] / seconds / 1e9, stats[kStatRequests] / seconds,
      stats[kStatP50], stats[kStatP99],
      static_cast<unsigned long long>(measured.requests), measured.seconds);
  std::fflush(stdout);

  // Worker 0 collects every worker's figures through the servers.
  ps::SArray<double> mine(stats.size());
  std::copy(stats.begin(), stats.end(), mine.begin());
  ps::SArray<ps::Key> my_key(1, static_cast<ps::Key>(rank));
  PS_RETURN_IF_ERROR(
      kv.WaitStatus(kv.ZPush(my_key, ps::SArray<float>(mine), {}, kStatsCmd)));
  ps::Postoffice::Get()->Barrier(kCustomerId, ps::kWorkerGroup);
  if (rank != 0) return ps::Status::OK();

  ps::SArray<ps::Key> all_keys(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) all_keys[w] = static_cast<ps::Key>(w);
  ps::SArray<float> all_floats;
  PS_RETURN_IF_ERROR(
      kv.WaitStatus(kv.ZPull(all_keys, &all_floats, nullptr, kStatsCmd)));
  const ps::SArray<double> all(all_floats);
  if (all.size() != static_cast<size_t>(num_workers) * kStatCount) {
    return ps::Status::Internal("collected " + std::to_string(all.size()) +
                                " statistics");
  }
  double requests = 0, bytes = 0, longest = 1e-9;
  std::vector<double> histogram(kHistogramBuckets, 0.0);
  for (int w = 0; w < num_workers; ++w) {
    const double* s = all.data() + static_cast<size_t>(w) * kStatCount;
    requests += s[kStatRequests];
    bytes += s[kStatBytes];
    longest = std::max(longest, s[kStatSeconds]);
    for (int b = 0; b < kHistogramBuckets; ++b) {
      histogram[b] += s[kStatHistogram + b];
    }
  }
  const double p50 =
      num_workers == 1 ? all[kStatP50] : HistogramPercentile(histogram, 0.50);
  const double p99 =
      num_workers == 1 ? all[kStatP99] : HistogramPercentile(histogram, 0.99);
  // Cluster throughput: everything moved over the longest worker's time.
  std::printf("RESULT %s GB_s=%.3f req_s=%.1f p50_us=%.0f p99_us=%.0f\n",
              CaseFields(num_servers, num_workers).c_str(),
              bytes / longest / 1e9, requests / longest, p50, p99);
  std::fflush(stdout);
  return ps::Status::OK();
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::SetUsageMessage(
      "push/pull throughput and latency through the KV API.\n"
      "Run on a cluster: scripts/local.sh SERVERS WORKERS kv_bench [flags]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  Config config;
  if (!ParseConfig(&config)) return 1;
  ps::Start(kCustomerId, argv[0]);
  if (ps::IsServer()) {
    RunServer(config);
    return 0;
  }
  if (ps::IsWorker()) {
    const ps::Status status = RunWorker(config);
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
