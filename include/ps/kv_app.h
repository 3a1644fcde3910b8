// KVWorker<Val> and KVServer<Val>: ps-lite's key-value push/pull API.
//
// A worker pushes and pulls (key, value) lists; keys are sorted and unique,
// each key carries the same number of values, or `lens[i]` values when lens
// is given. Ember routes each key to a server by its consistent-hash key ring
// (one message per server) unless a custom slicer is set. Calls return a
// timestamp at once; Wait(ts) blocks until every server has answered, and a
// callback, if given, runs on the worker's app thread before Wait returns.
// When a server dies, or a request outlives EMBER_REQUEST_TIMEOUT_MS, Wait
// logs which server and exits the process non-zero (ps-lite has no error
// path); WaitStatus returns the failure instead.
//
// Buffers: Push/Pull/PushPull copy the caller's vectors (as in ps-lite); the
// Z* variants share the caller's SArrays without copying, which must then not
// change until the request completes.
//
// Thread-safe: any thread may issue requests and wait.
#ifndef PS_KV_APP_H_
#define PS_KV_APP_H_

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/internal/kv_core.h"
#include "ps/simple_app.h"

namespace ps {

template <typename Val>
struct KVPairs {
  SArray<Key> keys;
  SArray<Val> vals;
  SArray<int> lens;
  int priority = 0;
};

namespace internal {

// Makes `c` hold exactly n elements: grows it if empty, else it must already
// have that size (ps-lite's contract for pull outputs).
template <typename Container>
bool FitOutput(Container* c, size_t n) {
  if (c->empty()) c->resize(n);
  return c->size() == n;
}

// A sink writing into `vals` and, if not null, `lens`: std::vector or SArray.
template <typename Val, typename Vals, typename Lens>
PullSink MakeSink(Vals* vals, Lens* lens) {
  PullSink sink;
  sink.values = [vals](size_t bytes) -> char* {
    return FitOutput(vals, bytes / sizeof(Val))
               ? reinterpret_cast<char*>(vals->data())
               : nullptr;
  };
  if (lens != nullptr) {
    sink.lens = [lens](size_t n) -> int* {
      return FitOutput(lens, n) ? lens->data() : nullptr;
    };
  }
  return sink;
}

template <typename Val>
PullSink VectorSink(std::vector<Val>* vals, std::vector<int>* lens) {
  return MakeSink<Val>(vals, lens);
}

// An SArray output may also take a single server's buffer without a copy.
template <typename Val>
PullSink SArraySink(SArray<Val>* vals, SArray<int>* lens) {
  PullSink sink = MakeSink<Val>(vals, lens);
  sink.adopt = [vals](const SArray<char>& bytes) {
    if (!vals->empty() || bytes.size() % sizeof(Val) != 0 ||
        reinterpret_cast<uintptr_t>(bytes.data()) % alignof(Val) != 0) {
      return false;
    }
    *vals = SArray<Val>(bytes);
    return true;
  };
  return sink;
}

template <typename Val>
RawKVs ToRaw(const KVPairs<Val>& kvs) {
  RawKVs raw;
  raw.keys = kvs.keys;
  raw.vals = SArray<char>(kvs.vals);
  raw.lens = kvs.lens;
  return raw;
}

}  // namespace internal

template <typename Val>
class KVWorker : public SimpleApp {
 public:
  using Callback = std::function<void()>;
  using SlicedKVs = std::vector<std::pair<bool, KVPairs<Val>>>;
  using Slicer =
      std::function<void(const KVPairs<Val>& send,
                         const std::vector<Range>& ranges, SlicedKVs* sliced)>;

  // `postoffice` null: the default node.
  explicit KVWorker(int app_id, int customer_id,
                    Postoffice* postoffice = nullptr)
      : SimpleApp() {
    InitApp(app_id, customer_id, postoffice);
    core_ = std::make_unique<KVWorkerCore>(impl_, sizeof(Val));
    EnableDelivery();
  }
  ~KVWorker() override {
    StopApp();
    core_.reset();
  }

  int Push(const std::vector<Key>& keys, const std::vector<Val>& vals,
           const std::vector<int>& lens = {}, int cmd = 0,
           const Callback& cb = nullptr, int priority = 0) {
    return ZPush(SArray<Key>(keys), SArray<Val>(vals), SArray<int>(lens), cmd,
                 cb, priority);
  }

  // Values land in *vals (resized if empty; otherwise it must already have
  // the right size) before Wait returns or `cb` runs.
  int Pull(const std::vector<Key>& keys, std::vector<Val>* vals,
           std::vector<int>* lens = nullptr, int cmd = 0,
           const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(vals);
    KVPairs<Val> kvs;
    kvs.keys = SArray<Key>(keys);
    kvs.priority = priority;
    return Send(false, true, cmd, kvs, internal::VectorSink(vals, lens), cb);
  }

  int PushPull(const std::vector<Key>& keys, const std::vector<Val>& vals,
               std::vector<Val>* outs, std::vector<int>* lens = nullptr,
               int cmd = 0, const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(outs);
    if (outs->empty()) {
      outs->resize(vals.size());
    } else {
      CHECK_EQ(vals.size(), outs->size());
    }
    KVPairs<Val> kvs;
    kvs.keys = SArray<Key>(keys);
    kvs.vals = SArray<Val>(vals);
    if (lens != nullptr) kvs.lens = SArray<int>(*lens);
    kvs.priority = priority;
    return Send(true, true, cmd, kvs, internal::VectorSink(outs, lens), cb);
  }

  // Blocks until the request completes; exits the process non-zero, naming
  // the failed peer, if it failed.
  void Wait(int timestamp) override {
    Status s = core_->Wait(timestamp);
    if (!s.ok()) FailStop("KVWorker::Wait", s);
  }

  // Ember: blocks until the request completes and returns how it ended.
  [[nodiscard]] Status WaitStatus(int timestamp) {
    return core_->Wait(timestamp);
  }
  // Ember: the same, but gives up after `timeout_ms` with kDeadlineExceeded
  // naming the servers that have not answered. The request stays open: its
  // answers are still taken (and its callback run) when they come, and it
  // may be waited for again. kDeadlineExceeded from here always means that;
  // EMBER_REQUEST_TIMEOUT_MS instead fails the request itself, with
  // kUnavailable (docs/configuration.md).
  [[nodiscard]] Status WaitStatus(int timestamp, int64_t timeout_ms) {
    return core_->WaitFor(timestamp, timeout_ms);
  }

  // Ember: ends this worker's current iteration (see ps/consistency.h):
  // every server learns the new clock, and every later request carries it.
  // Returns a timestamp to Wait on; it completes when every server has
  // recorded the tick. Under ssp and bsp, pulls of other workers may be
  // waiting for it.
  int Clock() { return core_->Clock(); }
  // Ember: iterations this worker has ended (calls of Clock).
  int64_t CurrentClock() const { return core_->clock(); }
  // Ember, elastic workers (docs/consistency.md, "Elastic workers"): a
  // worker that joined a running job (EMBER_JOIN=1), or was restarted
  // into its rank (EMBER_WORKER_RANK), calls this once before its first
  // request. It asks every server at which clock it starts (a restarted
  // worker: the first iteration it had not finished everywhere, which it
  // must do again; a new worker: the clock after the newest a live worker
  // is in), makes that its clock and tells every server. Returns the
  // clock, the iteration to run next. A worker that formed the job may
  // call it too (it gets its current clock).
  StatusOr<int64_t> JoinClock() { return core_->JoinClock(); }

  int ZPush(const SArray<Key>& keys, const SArray<Val>& vals,
            const SArray<int>& lens = {}, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.vals = vals;
    kvs.lens = lens;
    kvs.priority = priority;
    return Send(true, false, cmd, kvs, PullSink(), cb);
  }

  int ZPull(const SArray<Key>& keys, SArray<Val>* vals,
            SArray<int>* lens = nullptr, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(vals);
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.priority = priority;
    return Send(false, true, cmd, kvs, internal::SArraySink(vals, lens), cb);
  }

  int ZPushPull(const SArray<Key>& keys, const SArray<Val>& vals,
                SArray<Val>* outs, SArray<int>* lens = nullptr, int cmd = 0,
                const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(outs);
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.vals = vals;
    if (lens != nullptr) kvs.lens = *lens;
    kvs.priority = priority;
    return Send(true, true, cmd, kvs, internal::SArraySink(outs, lens), cb);
  }

  // Replaces the default (key ring) routing: `slicer` cuts a request over
  // ps-lite's per-server ranges and its i-th slice goes to server rank i.
  void set_slicer(const Slicer& slicer) {
    CHECK(slicer);
    slicer_ = slicer;
  }

 private:
  int Send(bool push, bool pull, int cmd, const KVPairs<Val>& kvs,
           PullSink sink, const Callback& cb) {
    if (!slicer_) {
      return core_->Submit(push, pull, cmd, kvs.priority, internal::ToRaw(kvs),
                           std::move(sink), cb);
    }
    SlicedKVs sliced;
    slicer_(kvs, core_->ServerKeyRanges(), &sliced);
    std::vector<std::pair<bool, RawKVs>> raw(sliced.size());
    for (size_t i = 0; i < sliced.size(); ++i) {
      raw[i].first = sliced[i].first;
      raw[i].second = internal::ToRaw(sliced[i].second);
    }
    return core_->SubmitSliced(push, pull, cmd, kvs.priority,
                               internal::ToRaw(kvs), std::move(raw),
                               std::move(sink), cb);
  }

  Slicer slicer_;
  std::unique_ptr<KVWorkerCore> core_;
};

struct KVMeta {
  int cmd;
  bool push;
  bool pull;
  int sender;
  int timestamp;
  int customer_id;
  // Ember: the sender's clock (iterations it had finished, KVWorker::Clock)
  // when it sent the request.
  int64_t clock = 0;
  // Ember: with replicas (EMBER_REPLICAS, docs/replication.md) a server's
  // handle also applies copies of the pushes of the servers whose data it
  // keeps, and, after a failover, pushes to a dead server's keys that were
  // in flight: for those, the id of the server whose data they belong to;
  // 0 for this server's own requests. Pulls are always 0.
  int replica_of = 0;
};

template <typename Val>
struct KVServerDefaultHandle;

template <typename Val>
class KVServer : public SimpleApp {
 public:
  // `postoffice` null: the default node. Requests are held until
  // set_request_handle is called.
  explicit KVServer(int app_id, Postoffice* postoffice = nullptr)
      : SimpleApp() {
    InitApp(app_id, app_id, postoffice);
    core_ = std::make_unique<KVServerCore>(
        impl_, sizeof(Val),
        [this](const RawRequest& request) { Process(request); });
  }
  ~KVServer() override {
    StopApp();
    core_.reset();
  }

  // Ember: this app's consistency mode ("asp", "ssp:2", "bsp"; see
  // ps/consistency.h), overriding EMBER_CONSISTENCY. Call it before the
  // first request arrives (before set_request_handle). kInvalidArgument for
  // a bad spec or a late call.
  [[nodiscard]] Status SetConsistency(const std::string& spec) {
    return core_->SetConsistency(spec);
  }
  // Ember: what the consistency controller has seen so far. Thread-safe.
  ConsistencyStats consistency_stats() const {
    return core_->consistency_stats();
  }

  using ReqHandle = std::function<void(
      const KVMeta& req_meta, const KVPairs<Val>& req_data, KVServer* server)>;

  // The handle runs on the server's app thread, one request at a time, and
  // must call Response once per request (now or later, from any thread).
  void set_request_handle(const ReqHandle& request_handle) {
    CHECK(request_handle) << "invalid request handle";
    KVServerDefaultHandle<Val>* store = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      request_handle_ = std::make_shared<ReqHandle>(request_handle);
      store = request_handle_->template target<KVServerDefaultHandle<Val>>();
    }
    if (store != nullptr) {
      // Its state can be copied (set_state_handle).
      set_state_handle(
          [store](const std::function<bool(Key)>& want, size_t max_bytes,
                  std::vector<std::string>* chunks) {
            return store->DumpState(want, max_bytes, chunks);
          },
          [store](const char* data, size_t size) {
            return store->LoadState(data, size);
          });
    }
    EnableDelivery();
  }

  // Ember: how the handle's state is copied to another server, so that
  // after a server dies the cluster can make a new copy of its data and
  // survive a further death (docs/replication.md, "Restoring copies").
  // `dump(want, max_bytes, chunks)` appends the state of every key for
  // which want(key) holds, as chunks of about max_bytes; `load(data,
  // size)` applies one chunk that dump made on another server, replacing
  // what the handle holds for its keys, and must refuse malformed bytes
  // with an error. Both run on the app thread between requests, like the
  // request handle. set_request_handle(KVServerDefaultHandle<Val>()) sets
  // them itself; a handle without them keeps working, but copies of its
  // data are not restored after a failover (logged).
  using StateDump =
      std::function<Status(const std::function<bool(Key)>& want,
                           size_t max_bytes, std::vector<std::string>* chunks)>;
  using StateLoad = std::function<Status(const char* data, size_t size)>;
  // Optional, for a handle that holds updates pending (as the model layer's
  // bsp rounds): `begin(in_range)` drops them for the keys a copy (bsp)
  // is about to replace; the copy's chunks bring the copying server's.
  using StateBegin =
      std::function<void(const std::function<bool(Key)>& in_range)>;
  void set_state_handle(StateDump dump, StateLoad load,
                        StateBegin begin = nullptr) {
    StateHooks hooks;
    hooks.dump = std::move(dump);
    hooks.load = std::move(load);
    hooks.begin = std::move(begin);
    core_->set_state_hooks(std::move(hooks));
  }

  void Response(const KVMeta& req, const KVPairs<Val>& res = KVPairs<Val>()) {
    core_->Respond(req.cmd, req.push, req.pull, req.sender, req.timestamp,
                   req.customer_id, internal::ToRaw(res), Status::OK());
  }

  // Ember: answers with an error; the worker's request fails with `error`.
  void ResponseError(const KVMeta& req, const Status& error) {
    core_->Respond(req.cmd, req.push, req.pull, req.sender, req.timestamp,
                   req.customer_id, RawKVs(), error);
  }

 private:
  void Process(const RawRequest& request) {
    KVMeta meta;
    meta.cmd = request.cmd;
    meta.push = request.push;
    meta.pull = request.pull;
    meta.sender = request.sender;
    meta.timestamp = ApiTimestamp(request.timestamp);
    meta.customer_id = request.customer_id;
    meta.clock = request.clock;
    meta.replica_of = request.replica_of;
    KVPairs<Val> data;
    data.keys = request.kvs.keys;
    data.vals = SArray<Val>(request.kvs.vals);
    data.lens = request.kvs.lens;
    // The handle may hold state (KVServerDefaultHandle's store): call the one
    // instance, never a copy.
    std::shared_ptr<ReqHandle> handle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handle = request_handle_;
    }
    if (!handle) {
      // Released by a barrier before the program set a handle.
      ResponseError(meta, Status::NotFound("this server has no request "
                                           "handle for app"));
      return;
    }
    (*handle)(meta, data, this);
  }

  std::mutex mu_;
  std::shared_ptr<ReqHandle> request_handle_;  // Guarded by mu_.
  std::unique_ptr<KVServerCore> core_;
};

// A summing store: a push adds its values to the stored ones, a pull returns
// them. Unlike ps-lite's, it accepts several values per key (uniform, or per
// key through `lens`), and answers a request with mismatched sizes with an
// error instead of crashing. Runs on the server's app thread.
template <typename Val>
struct KVServerDefaultHandle {
  void operator()(const KVMeta& req_meta, const KVPairs<Val>& req_data,
                  KVServer<Val>* server) {
    const size_t n = req_data.keys.size();
    bool has_lens = !req_data.lens.empty();
    // Values per key: uniform k, or lens[i].
    size_t k = 0;
    if (req_meta.push && !has_lens) {
      if (n == 0 || req_data.vals.size() % n != 0) {
        server->ResponseError(
            req_meta, Status::InvalidArgument(
                          "push of " + std::to_string(req_data.vals.size()) +
                          " values for " + std::to_string(n) + " keys"));
        return;
      }
      k = req_data.vals.size() / n;
    }
    if (req_meta.push) {
      // Check everything before changing anything: a bad request is refused
      // whole.
      size_t total = 0;
      for (size_t i = 0; i < n; ++i) {
        size_t len = k;
        if (has_lens) {
          if (req_data.lens[i] < 0) {
            server->ResponseError(req_meta,
                                  Status::InvalidArgument("negative length"));
            return;
          }
          len = static_cast<size_t>(req_data.lens[i]);
        }
        auto it = store.find(req_data.keys[i]);
        if (it != store.end() && it->second.size() != len) {
          server->ResponseError(
              req_meta, Status::InvalidArgument(
                            "key " + std::to_string(req_data.keys[i]) +
                            " holds " + std::to_string(it->second.size()) +
                            " values, push has " + std::to_string(len)));
          return;
        }
        total += len;
      }
      if (total != req_data.vals.size()) {
        server->ResponseError(
            req_meta,
            Status::InvalidArgument("lens add up to " + std::to_string(total) +
                                    " values, push has " +
                                    std::to_string(req_data.vals.size())));
        return;
      }
    }
    KVPairs<Val> res;
    if (req_meta.pull) {
      res.keys = req_data.keys;
      if (has_lens) res.lens.resize(n);
    }
    size_t offset = 0;
    std::vector<Val> pulled;
    for (size_t i = 0; i < n; ++i) {
      const Key key = req_data.keys[i];
      auto it = store.find(key);
      if (req_meta.push) {
        size_t len = has_lens ? static_cast<size_t>(req_data.lens[i]) : k;
        if (it == store.end()) {
          it = store.emplace(key, std::vector<Val>(len, Val())).first;
        }
        for (size_t j = 0; j < len; ++j) {
          it->second[j] += req_data.vals[offset + j];
        }
        offset += len;
      }
      if (req_meta.pull) {
        if (it == store.end()) {
          // Never pushed: ps-lite answers one zero per key.
          it = store.emplace(key, std::vector<Val>(k > 0 ? k : 1, Val())).first;
        }
        pulled.insert(pulled.end(), it->second.begin(), it->second.end());
        if (has_lens) res.lens[i] = static_cast<int>(it->second.size());
      }
    }
    if (req_meta.pull) {
      res.vals = SArray<Val>(std::move(pulled));
      // Keys of different lengths need their lengths in the answer.
      if (!has_lens && n > 0 && res.vals.size() % n != 0) has_lens = true;
      if (!has_lens && n > 0) {
        size_t first = store[req_data.keys[0]].size();
        for (size_t i = 1; i < n && !has_lens; ++i) {
          has_lens = store[req_data.keys[i]].size() != first;
        }
      }
      if (has_lens && res.lens.empty()) {
        res.lens.resize(n);
        for (size_t i = 0; i < n; ++i) {
          res.lens[i] = static_cast<int>(store[req_data.keys[i]].size());
        }
      }
    }
    server->Response(req_meta, res);
  }

  // Ember: the store's state, for copies on other servers (see
  // KVServer::set_state_handle). Keys in ascending order.
  Status DumpState(const std::function<bool(Key)>& want, size_t max_bytes,
                   std::vector<std::string>* chunks) const {
    std::vector<Key> keys;
    for (const auto& kv : store) {
      if (want(kv.first)) keys.push_back(kv.first);
    }
    std::sort(keys.begin(), keys.end());
    internal::StoreChunkWriter writer(sizeof(Val), max_bytes + 4096);
    for (Key key : keys) {
      const std::vector<Val>& v = store.at(key);
      writer.Add(key, v.data(), static_cast<uint32_t>(v.size()));
      if (writer.bytes() >= max_bytes) chunks->push_back(writer.Finish());
    }
    if (writer.keys() > 0) chunks->push_back(writer.Finish());
    return Status::OK();
  }
  Status LoadState(const char* data, size_t size) {
    return internal::ForEachStoreChunkKey(
        data, size, sizeof(Val),
        [this](Key key, uint32_t count, const char* values) {
          std::vector<Val>& v = store[key];
          v.resize(count);
          if (count > 0) std::memcpy(v.data(), values, count * sizeof(Val));
        });
  }

  std::unordered_map<Key, std::vector<Val>> store;
};

}  // namespace ps

#endif  // PS_KV_APP_H_
