// The byte-level engines behind KVWorker<Val> and KVServer<Val>. The public
// templates convert typed arrays to bytes (zero-copy) and call these; the
// slicing, routing, validation and reassembly live in the library.
// Not part of the stable API.
#ifndef PS_INTERNAL_KV_CORE_H_
#define PS_INTERNAL_KV_CORE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/consistency.h"
#include "ps/internal/kv_request.h"
#include "ps/range.h"
#include "ps/sarray.h"
#include "ps/status.h"

namespace ps {

class AppImpl;

// Where a pull's values go. `values(bytes)` returns a buffer of exactly
// `bytes` bytes (growing an empty output) or nullptr if the caller's output
// already has another size. `adopt` may take a single response's buffer
// without copying (return true) when the output is empty. `lens(n)` likewise
// for the per-key lengths; null when the caller did not ask for lengths.
struct PullSink {
  std::function<char*(size_t bytes)> values;
  std::function<bool(const SArray<char>& bytes)> adopt;
  std::function<int*(size_t n)> lens;
};

class KVWorkerCore {
 public:
  using Callback = std::function<void()>;

  // `app` is borrowed: the owning SimpleApp outlives this core.
  KVWorkerCore(AppImpl* app, size_t value_bytes);
  ~KVWorkerCore();
  KVWorkerCore(const KVWorkerCore&) = delete;
  KVWorkerCore& operator=(const KVWorkerCore&) = delete;

  // Starts a push and/or pull of `kvs` (keys sorted and unique), routed by
  // the key ring. Returns the timestamp. Bad arguments fail the request
  // (visible in Wait), they do not crash.
  int Submit(bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
             PullSink sink, Callback cb);

  // The same with slices made by a custom slicer: slices[i] goes to server
  // rank i (ps-lite's semantics); `first` false skips rank i.
  int SubmitSliced(bool push, bool pull, int cmd, int priority,
                   const RawKVs& kvs,
                   std::vector<std::pair<bool, RawKVs>> slices, PullSink sink,
                   Callback cb);

  // Blocks until the request completes or fails (a dead server, an error
  // answer, bad arguments).
  Status Wait(int timestamp);
  // Wait, giving up after `timeout_ms` (kDeadlineExceeded); the request
  // stays open.
  Status WaitFor(int timestamp, int64_t timeout_ms);

  // Ends the current iteration: tells every server and returns the
  // timestamp of that notice. Later requests carry the new clock.
  int Clock();
  // Iterations ended so far.
  int64_t clock() const;
  // Elastic workers (docs/consistency.md): asks every server at which clock
  // this worker starts, takes that clock and tells every server. Call once,
  // before the first request of a worker that joined a running job.
  StatusOr<int64_t> JoinClock();

  // ps-lite's per-server key ranges, for custom slicers.
  const std::vector<Range>& ServerKeyRanges();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The state of a server's keys as it is copied to another server, so that
// a copy of the server's data can be restored after a failover
// (docs/replication.md, "Restoring copies"). `dump(want, max_bytes,
// chunks)` appends the state of every key for which want(key) holds, as
// chunks of about max_bytes (at least one key each); `load(data, size)`
// applies one chunk made by dump on another server, replacing what it holds
// for those keys, and refuses a malformed one (bytes from the network).
// Both run on the server app's thread, between requests.
struct StateHooks {
  std::function<Status(const std::function<bool(Key)>& want, size_t max_bytes,
                       std::vector<std::string>* chunks)>
      dump;
  std::function<Status(const char* data, size_t size)> load;
  // Optional (bsp): a copy of another server's data for the keys `in_range`
  // selects begins; what the handle holds pending for those keys (updates
  // not yet applied, such as a bsp round) is dropped: the copy brings the
  // copying server's.
  std::function<void(const std::function<bool(Key)>& in_range)> begin;
};

namespace internal {

// The chunk format of KVServerDefaultHandle's state: a header (magic,
// value size, key count), then per key its key, its value count and its
// values (host byte order: the servers of a cluster share one
// architecture). Written in one pass into one buffer.
class StoreChunkWriter {
 public:
  StoreChunkWriter(size_t value_bytes, size_t reserve_bytes);
  void Add(Key key, const void* values, uint32_t count);
  size_t keys() const { return keys_; }
  size_t bytes() const { return out_.size(); }
  // The chunk; the writer starts a new one afterwards.
  std::string Finish();

 private:
  size_t value_bytes_;
  size_t reserve_;
  size_t keys_ = 0;
  std::string out_;
};

// Calls fn(key, count, values) for each key of a chunk made by
// StoreChunkWriter, after validating the whole chunk: kCorruption (and no
// call) unless the header, the counts and the size agree and the value size
// is `value_bytes`.
Status ForEachStoreChunkKey(
    const char* data, size_t size, size_t value_bytes,
    const std::function<void(Key key, uint32_t count, const char* values)>& fn);

}  // namespace internal

class KVServerCore {
 public:
  // Runs on the app's customer thread for every valid request.
  using Handler = std::function<void(const RawRequest& request)>;

  KVServerCore(AppImpl* app, size_t value_bytes, Handler handler);
  ~KVServerCore();
  KVServerCore(const KVServerCore&) = delete;
  KVServerCore& operator=(const KVServerCore&) = delete;

  // Answers request (sender, customer_id, timestamp); `error` non-ok makes
  // the worker's request fail with it.
  void Respond(int cmd, bool push, bool pull, int sender, int timestamp,
               int customer_id, const RawKVs& res, const Status& error);

  // Overrides the node's consistency mode for this app ("asp", "ssp:2",
  // "bsp"); kInvalidArgument for a bad spec or once requests have arrived.
  [[nodiscard]] Status SetConsistency(const std::string& spec);
  ConsistencyStats consistency_stats() const;

  // How the handle's state is copied (see StateHooks); without them a copy
  // of this server's data cannot be restored after a failover.
  void set_state_hooks(StateHooks hooks);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_INTERNAL_KV_CORE_H_
