// The worker's side of key-value requests: validation, slicing by the key
// ring (partition/slicer.h), sending one message per server, and placing
// pulled values in the order of the request's keys.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "app/app_impl.h"
#include "app/key_cache.h"
#include "app/kv_frames.h"
#include "metrics/metrics.h"
#include "partition/key_ring.h"
#include "partition/slicer.h"
#include "ps/internal/kv_core.h"
#include "util/mutex.h"
#include "util/wait_log.h"

namespace ps {

namespace {

// Counts the requests whose callback has not run (or been dropped) yet: one
// per live token, moved with its request.
class CallbackToken {
 public:
  CallbackToken() = default;
  explicit CallbackToken(std::atomic<int>* count) : count_(count) {
    count_->fetch_add(1);
  }
  CallbackToken(CallbackToken&& o) noexcept
      : count_(std::exchange(o.count_, nullptr)) {}
  CallbackToken& operator=(CallbackToken&& o) noexcept {
    if (this != &o) {
      Release();
      count_ = std::exchange(o.count_, nullptr);
    }
    return *this;
  }
  ~CallbackToken() { Release(); }

 private:
  void Release() {
    if (count_ != nullptr) count_->fetch_sub(1);
    count_ = nullptr;
  }
  std::atomic<int>* count_ = nullptr;
};

// An array of `n` elements left uninitialised, for a caller that writes
// every one of them.
template <typename V>
SArray<V> UninitializedArray(size_t n) {
  SArray<V> array;
  array.reset(new V[n], n, [](V* p) { delete[] p; });
  return array;
}

// One key's values: the common sizes get a copy the compiler inlines.
inline void CopyValue(char* dst, const char* src, size_t bytes) {
  switch (bytes) {
    case 4:
      std::memcpy(dst, src, 4);
      break;
    case 8:
      std::memcpy(dst, src, 8);
      break;
    default:
      if (bytes > 0) std::memcpy(dst, src, bytes);
  }
}

}  // namespace

class KVWorkerCore::Impl {
 public:
  Impl(AppImpl* app, size_t value_bytes)
      : app_(app),
        value_bytes_(value_bytes),
        key_cache_on_(app->node()->options().key_cache_mb > 0) {
    InitMetrics();
    app_->set_kv_handler(
        [this](Message& msg) { return Process(msg); },
        [this](int64_t ts, const Status& s) { Forget(ts, s); });
    app_->set_failover_handler(
        [this](int dead, const Status& s) { OnFailover(dead, s); });
    app_->set_ring_handler([this] { OnRingChanged(); });
    app_->set_watch_handler([this](int64_t ms) { LogMovedWaits(ms); });
    // A key-value response runs no application code unless its request has
    // a callback: while none has, the receive thread may handle responses
    // itself (copying pulled values into the waiting caller's buffer).
    // A refusal for moved keys is re-routed, which sends: on the customer
    // thread.
    app_->set_inline_predicate([this](const Meta& meta) {
      return !meta.request && !meta.simple_app && meta.moved_epoch == 0 &&
             meta.key_cache == kKeyCacheNone &&
             callbacks_.load(std::memory_order_acquire) == 0;
    });
  }

  ~Impl() {
    app_->node()->metrics()->RemoveCollector(collector_);
    app_->set_inline_predicate(nullptr);
    app_->set_kv_handler(nullptr, nullptr);
    app_->set_failover_handler(nullptr);
    app_->set_ring_handler(nullptr);
    app_->set_watch_handler(nullptr);
  }

  // Metrics (docs/operations.md): requests and keys sent, by operation, and
  // this worker's clock.
  void InitMetrics() {
    metrics::Registry* r = app_->node()->metrics();
    const std::string app =
        metrics::Label("app", std::to_string(app_->app_id()));
    const std::string customer =
        app + "," +
        metrics::Label("customer", std::to_string(app_->customer_id()));
    const KVRequestCounters counters = GetKVRequestCounters(r, app_->app_id());
    std::copy(counters.requests, counters.requests + 3, requests_);
    std::copy(counters.keys, counters.keys + 3, keys_);
    resent_ = r->GetCounter(
        "ember_resent_requests_total",
        "Request parts resent to the heir of a dead server (failover)", app);
    rerouted_ = r->GetCounter(
        "ember_rerouted_parts_total",
        "Request parts a server refused because their keys had moved (a "
        "newer ring), re-sliced by the new ring and sent to their owners",
        app);
    signed_parts_ = r->GetCounter(
        "ember_key_cache_signed_total",
        "Request parts whose keys went as a signature of keys the server "
        "was asked to keep (key caching)",
        app);
    keys_refused_ = r->GetCounter(
        "ember_key_cache_refused_total",
        "Request parts sent again with their keys after the server refused "
        "their signature",
        app);
    collector_ = r->AddCollector([this, customer](metrics::Writer* w) {
      w->Gauge("ember_worker_clock",
               "Iterations this worker has ended (KVWorker::Clock)", customer,
               static_cast<double>(clock_.load()));
      w->Gauge("ember_parts_waiting_for_ring",
               "Request parts a server refused because their keys moved, "
               "waiting for this node to get the ring the server named",
               customer, static_cast<double>(PartsWaitingForRing()));
    });
  }
  size_t PartsWaitingForRing() {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& p : pending_) {
      for (const Moved& m : p.second.moved) n += m.refused && m.child < 0;
    }
    return n;
  }
  void CountRequest(bool push, bool pull, size_t keys) {
    const int op = push && pull ? 2 : push ? 0 : 1;
    requests_[op]->Add();
    keys_[op]->Add(keys);
  }
  metrics::Counter* requests_[3] = {};
  metrics::Counter* keys_[3] = {};
  metrics::Counter* resent_ = nullptr;
  metrics::Counter* rerouted_ = nullptr;
  metrics::Counter* signed_parts_ = nullptr;
  metrics::Counter* keys_refused_ = nullptr;
  int collector_ = 0;

  // These return the 64-bit timestamp; the facade hands out its API int.
  int64_t Submit(bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
                 PullSink sink, Callback cb);
  int64_t SubmitSliced(bool push, bool pull, int cmd, int priority,
                       const RawKVs& kvs,
                       std::vector<std::pair<bool, RawKVs>> slices,
                       PullSink sink, Callback cb);
  Status Wait(int ts) { return app_->Wait(ts); }
  Status WaitFor(int ts, int64_t timeout_ms) {
    return app_->WaitFor(ts, timeout_ms);
  }
  int64_t Clock();
  StatusOr<int64_t> JoinClock();
  int64_t clock() const { return clock_.load(); }
  const std::vector<Range>& ServerKeyRanges() {
    return app_->postoffice()->GetServerKeyRanges();
  }

 private:
  // A part of a request that a server refused because its keys had moved
  // (its answer's moved_epoch): re-routed as a child request once this
  // node's ring has reached `epoch`.
  struct Moved {
    bool refused = false;
    uint64_t epoch = 0;    // the refusing server's ring epoch
    int peer = 0;          // the tracker peer that owes the part's answer
    int64_t since_ms = 0;  // node clock, when refused
    int64_t child = -1;    // the child request; -1 while waiting
  };
  struct Pending {
    bool pull = false;
    SArray<Key> keys;
    // Where the keys went: segments (range placement) or a server index per
    // key (spread placement, or the application's own slicer); keys per
    // server index.
    SlicePlan plan;
    // The server id of every server index (shared with the ring).
    std::shared_ptr<const std::vector<int>> ids;
    std::vector<RawKVs> responses;  // By server index.
    // A pull's keys as sent to each server (views of `keys` or gathered
    // copies), for the responses that leave them out (keys_as_requested).
    std::vector<SArray<Key>> sent_keys;  // By server index.
    PullSink sink;
    Callback cb;
    CallbackToken cb_token;  // Held while cb is set.
    // With replicas (docs/replication.md): what went to each server index,
    // to resend to the heir of a server that dies before answering, and
    // whether it was resent.
    std::vector<RawKVs> kept;  // By server index; empty without replicas.
    // By server index: the server the part was resent to (0: not resent).
    std::vector<int> resent;
    // Key caching: by server index, a part whose keys went as a signature,
    // to send again with its keys if the server refuses it; empty if none
    // did.
    std::vector<RawKVs> signed_parts;
    bool push = false;
    int cmd = 0;
    int priority = 0;
    int64_t clock = 0;
    // Re-routing (docs/replication.md, "Re-routing"). The epoch of the ring
    // that sliced the request, and the caller's arrays (keys, and a push's
    // values and lens), from which a refused part is cut again.
    uint64_t epoch = 0;
    RawKVs request;
    // By server index, once a part has been refused because its keys
    // moved; empty before.
    std::vector<Moved> moved;
    // A child request, which carries a refused part of `parent` to the
    // part's owners under the new ring: where its answer goes (the
    // parent's server index `parent_slot`, owed by tracker peer
    // `parent_peer`), and a pull's values as assembled (key order).
    int64_t parent = -1;
    size_t parent_slot = 0;
    int parent_peer = 0;
    // bsp commits: the servers whose answers asked for them (wants_commit).
    std::vector<int> commit_to;
    std::shared_ptr<RawKVs> out;
  };

  // Server `dead` failed over (the node's ring is the new one already):
  // what it owed is resent to the server now owning its keys, with
  // resend_for = dead; clock notices it owed count as answered.
  void OnFailover(int dead, const Status& status);
  // The message that resends request `ts`'s part for server index `slot`
  // (pending_[ts], under mu_) to the server that now owns its keys; false
  // if there is none (no replicas kept, or no owner).
  bool ResendLocked(int64_t ts, Pending* p, size_t slot,
                    const std::shared_ptr<const KeyRing>& ring, Message* out)
      REQUIRES(mu_);

  RequestTracker* tracker() { return app_->customer()->tracker(); }
  Status Validate(bool push, const RawKVs& kvs) const;
  Status CheckShape(bool push, const RawKVs& kvs) const;
  // Checks a push's lens (none negative, adding up to the values) and, for
  // range placement, fills the byte offset of every segment's values
  // (seg_vals has segments + 1 entries).
  Status ValueOffsets(bool push, const RawKVs& kvs, const SlicePlan& plan,
                      std::vector<size_t>* seg_vals) const;
  // The messages of a sliced request, by server index: views of the
  // caller's arrays where a server's keys are one run, gathered copies
  // otherwise.
  void BuildSlices(bool push, const RawKVs& kvs, const SlicePlan& plan,
                   const std::vector<size_t>& seg_vals,
                   std::vector<std::pair<int, RawKVs>>* slices) const;
  // Sends a sliced request (stamped with `epoch`, the epoch of the ring
  // that sliced it, and the worker clock `clock`) and records it.
  // `replicas`: that ring's (a slice to a server that has died and failed
  // over since is resent to its heir, even if the current ring keeps no
  // copies: its last server but one died). `order`: what is known of each
  // slice's keys (AddKVFrames).
  void Dispatch(int64_t ts, bool push, bool pull, int cmd, int priority,
                uint64_t epoch, int replicas, int64_t clock, KeyOrder order,
                Pending pending, std::vector<std::pair<int, RawKVs>> slices);
  // Customer::Handler: false for a refusal taken over for re-routing.
  bool Process(Message& msg);
  // The answer of `peer` (a tracker peer of request `ts`) refused its part
  // because the keys moved, naming ring epoch meta.moved_epoch: the part
  // is re-routed now, or once this node has that ring. True if handled
  // that way (or failed here); false: the refusal fails the request.
  bool OnMoved(int64_t ts, int peer, const Meta& meta);
  // Re-slices the refused part `slot` of request `ts` by this node's ring
  // (if it has reached the refusing server's epoch) and sends it as a
  // child request.
  void Reroute(int64_t ts, size_t slot);
  // A server refused the signature of the keys of request `ts`'s part for
  // it (meta.key_cache): the part goes again with its keys. False if that
  // part did not go as a signature (the refusal then fails the request).
  bool OnKeysRefused(int64_t ts, int peer, const Meta& meta);
  // The keys (and a push's values and lens) of `p`'s server index `slot`,
  // cut from the caller's arrays.
  RawKVs CutPart(const Pending& p, size_t slot) const;
  // Child request `ts` (`child`, out of pending_) is complete: its answer
  // becomes its parent's answer for the part it carried.
  void DeliverToParent(int64_t ts, Pending* child);
  // The node's ring changed: re-routes the parts that waited for it.
  void OnRingChanged();
  // The watch handler: logs the refused parts that still wait for a ring.
  void LogMovedWaits(int64_t older_than_ms);
  // Fails request `ts` with `status`, drops what it kept, and fails its
  // parent (a child request carries part of one).
  void FailRequest(int64_t ts, const Status& status);
  // A request of this app to `recipient`, with no frames yet.
  Message NewRequest(int64_t ts, int recipient, int64_t clock) const;
  Status Assemble(const Pending& p) const;
  // Part `slot` of `p` was refused because its keys moved.
  static bool Refused(const Pending& p, size_t slot) {
    return slot < p.moved.size() && p.moved[slot].refused;
  }
  // The tracker failed request `ts` (the customer's failure handler).
  void Forget(int64_t ts, const Status& status) { FailRequest(ts, status); }

  AppImpl* const app_;
  const size_t value_bytes_;
  // Key caching (docs/protocol.md, "Key caching"): whether this worker
  // sends signatures of the key sets it repeats, and what it sent whom.
  const bool key_cache_on_;
  KeyCacheHints key_hints_;

  std::atomic<int64_t> clock_{0};  // Iterations ended (Clock calls).
  std::atomic<int> callbacks_{0};  // Requests whose callback is pending.

  // Sends every server on the ring a clock notice of `clock` under `ts`.
  void SendClockNotices(int64_t ts, int64_t clock, bool query);

  Mutex mu_;
  std::unordered_map<int64_t, Pending> pending_ GUARDED_BY(mu_);
  // JoinClock's queries in flight: the lowest and highest clock answered,
  // and whether a server said the worker resumes its rank.
  struct ClockAnswers {
    int64_t low = std::numeric_limits<int64_t>::max();
    int64_t high = std::numeric_limits<int64_t>::min();
    bool resumes = false;
  };
  std::unordered_map<int64_t, ClockAnswers> clock_queries_ GUARDED_BY(mu_);
  // The last ring epoch a refused part was logged as waiting for.
  uint64_t logged_wait_epoch_ GUARDED_BY(mu_) = 0;

  // bsp commits (docs/consistency.md, "A restart under bsp is exact").
  // Every message to a server carries PushedBelowLocked(): every plain push
  // below it has been answered by every server it went to. When that moves
  // past pushes whose servers asked for commits, they get a commit notice.
  int64_t PushedBelowLocked() const REQUIRES(mu_) {
    return open_pushes_.empty() ? last_push_ + 1 : *open_pushes_.begin();
  }
  // Plain push `ts` is complete (answered everywhere, or failed);
  // `commit_to`: the servers that asked for its commit. Sends the commit
  // notices that are due.
  void PushDone(int64_t ts, const std::vector<int>& commit_to);
  // Plain pushes not complete yet; the highest plain push sent.
  std::set<int64_t> open_pushes_ GUARDED_BY(mu_);
  int64_t last_push_ GUARDED_BY(mu_) = -1;
  // Complete pushes that PushedBelowLocked() has not passed yet, with the
  // servers that asked for their commit.
  std::map<int64_t, std::vector<int>> awaiting_commit_ GUARDED_BY(mu_);
};

void KVWorkerCore::Impl::PushDone(int64_t ts,
                                  const std::vector<int>& commit_to) {
  std::vector<int> to;
  int64_t below = 0;
  {
    MutexLock lock(&mu_);
    if (open_pushes_.erase(ts) == 0) return;
    if (!commit_to.empty()) awaiting_commit_[ts] = commit_to;
    below = PushedBelowLocked();
    for (auto it = awaiting_commit_.begin();
         it != awaiting_commit_.end() && it->first < below;
         it = awaiting_commit_.erase(it)) {
      to.insert(to.end(), it->second.begin(), it->second.end());
    }
  }
  std::sort(to.begin(), to.end());
  to.erase(std::unique(to.begin(), to.end()), to.end());
  for (int id : to) {
    Message msg = NewRequest(ts, id, clock_.load());
    msg.meta.commit_notice = true;
    msg.meta.pushed_below = below;
    Status st = app_->node()->Send(std::move(msg));
    if (!st.ok()) {
      // A server that died: its heir learns it from the next message.
      VLOG(1) << "commit notice to node " << id << " lost: " << st;
    }
  }
}

// Submit checks the same while slicing; a request the application sliced
// itself is checked here.
Status KVWorkerCore::Impl::Validate(bool push, const RawKVs& kvs) const {
  const size_t n = kvs.keys.size();
  for (size_t i = 1; i < n; ++i) {
    if (kvs.keys[i - 1] >= kvs.keys[i]) return UnsortedKeys(kvs.keys.data(), i);
  }
  PS_RETURN_IF_ERROR(CheckShape(push, kvs));
  SlicePlan none;
  none.per_key = true;
  return ValueOffsets(push, kvs, none, nullptr);
}

// The shape checks of a push that do not look at every key: lens against
// keys, values against lens or keys.
Status KVWorkerCore::Impl::CheckShape(bool push, const RawKVs& kvs) const {
  const size_t n = kvs.keys.size();
  const int max_keys = app_->node()->options().max_keys_per_request;
  if (n > static_cast<size_t>(max_keys)) {
    return Status::InvalidArgument(
        "a request of " + std::to_string(n) +
        " keys; servers refuse more than EMBER_MAX_KEYS_PER_REQUEST=" +
        std::to_string(max_keys));
  }
  if (!push) return Status::OK();
  const size_t nvals = kvs.vals.size() / value_bytes_;
  if (!kvs.lens.empty()) {
    if (kvs.lens.size() != n) {
      return Status::InvalidArgument(
          "lens has " + std::to_string(kvs.lens.size()) + " entries for " +
          std::to_string(n) + " keys");
    }
  } else if (n > 0 && nvals % n != 0) {
    return Status::InvalidArgument(std::to_string(nvals) +
                                   " values do not divide evenly over " +
                                   std::to_string(n) + " keys");
  } else if (n == 0 && nvals != 0) {
    return Status::InvalidArgument("values without keys");
  }
  return Status::OK();
}

Status KVWorkerCore::Impl::ValueOffsets(bool push, const RawKVs& kvs,
                                        const SlicePlan& plan,
                                        std::vector<size_t>* seg_vals) const {
  const size_t n = kvs.keys.size();
  const bool has_vals = push && !kvs.vals.empty();
  const bool has_lens = push && !kvs.lens.empty();
  const size_t nseg = plan.per_key ? 0 : plan.segments.size();
  if (seg_vals != nullptr) seg_vals->assign(nseg + 1, 0);
  if (!has_lens) {
    const size_t bytes_per_key = has_vals && n > 0 ? kvs.vals.size() / n : 0;
    for (size_t g = 0; g < nseg; ++g) {
      (*seg_vals)[g] = plan.segments[g].begin * bytes_per_key;
    }
    if (seg_vals != nullptr) (*seg_vals)[nseg] = n * bytes_per_key;
    return Status::OK();
  }
  const int* lens = kvs.lens.data();
  bool negative = false;
  size_t total = 0;  // values
  size_t g = 0;
  for (size_t i = 0; i < n; ++i) {
    if (g < nseg && plan.segments[g].begin == i) {
      (*seg_vals)[g++] = total * value_bytes_;
    }
    negative |= lens[i] < 0;
    total += static_cast<size_t>(lens[i]);
  }
  if (seg_vals != nullptr) (*seg_vals)[nseg] = total * value_bytes_;
  if (negative) return Status::InvalidArgument("negative length in lens");
  const size_t nvals = kvs.vals.size() / value_bytes_;
  if (total != nvals) {
    return Status::InvalidArgument("lens add up to " + std::to_string(total) +
                                   " values, got " + std::to_string(nvals));
  }
  return Status::OK();
}

void KVWorkerCore::Impl::BuildSlices(
    bool push, const RawKVs& kvs, const SlicePlan& plan,
    const std::vector<size_t>& seg_vals,
    std::vector<std::pair<int, RawKVs>>* slices) const {
  const size_t n = kvs.keys.size();
  const size_t num_servers = plan.counts.size();
  const bool has_vals = push && !kvs.vals.empty();
  const bool has_lens = push && !kvs.lens.empty();
  slices->reserve(num_servers);
  if (!plan.per_key) {
    // One message per server: its segment as views, or its segments
    // copied one after the other when it has several.
    for (size_t srv = 0; srv < num_servers; ++srv) {
      if (plan.counts[srv] == 0) continue;
      slices->emplace_back(static_cast<int>(srv), RawKVs());
    }
    // Where each server's copies are filled up to; sized only if a server
    // has several segments (after a membership change).
    std::vector<size_t> key_at, val_at;
    for (size_t g = 0; g < plan.segments.size(); ++g) {
      const KeySegment& seg = plan.segments[g];
      const size_t srv = static_cast<size_t>(seg.server);
      // The slices are in the servers' order.
      RawKVs& o =
          std::lower_bound(slices->begin(), slices->end(), seg.server,
                           [](const std::pair<int, RawKVs>& slice, int server) {
                             return slice.first < server;
                           })
              ->second;
      if (plan.segments_of[srv] == 1) {
        o.keys = kvs.keys.segment(seg.begin, seg.end);
        if (has_vals) o.vals = kvs.vals.segment(seg_vals[g], seg_vals[g + 1]);
        if (has_lens) o.lens = kvs.lens.segment(seg.begin, seg.end);
        continue;
      }
      if (key_at.empty()) {
        key_at.assign(num_servers, 0);
        val_at.assign(num_servers, 0);
      }
      if (o.keys.empty()) {
        // Its first segment: size the arrays for all of them.
        size_t val_bytes = 0;
        for (size_t h = g; h < plan.segments.size(); ++h) {
          if (plan.segments[h].server == seg.server) {
            val_bytes += seg_vals[h + 1] - seg_vals[h];
          }
        }
        o.keys = UninitializedArray<Key>(plan.counts[srv]);
        if (has_vals) o.vals = UninitializedArray<char>(val_bytes);
        if (has_lens) o.lens = UninitializedArray<int>(plan.counts[srv]);
      }
      const size_t count = seg.end - seg.begin;
      std::memcpy(o.keys.data() + key_at[srv], kvs.keys.data() + seg.begin,
                  count * sizeof(Key));
      if (has_lens) {
        std::memcpy(o.lens.data() + key_at[srv], kvs.lens.data() + seg.begin,
                    count * sizeof(int));
      }
      if (has_vals) {
        const size_t bytes = seg_vals[g + 1] - seg_vals[g];
        std::memcpy(o.vals.data() + val_at[srv], kvs.vals.data() + seg_vals[g],
                    bytes);
        val_at[srv] += bytes;
      }
      key_at[srv] += count;
    }
    return;
  }
  // A server index per key: one server taking everything gets views, the
  // others get their keys, values and lens gathered in one pass.
  struct Cursor {
    Key* keys = nullptr;
    char* vals = nullptr;
    int* lens = nullptr;
  };
  std::vector<Cursor> gather(num_servers);
  const size_t bytes_per_key =
      has_vals && !has_lens && n > 0 ? kvs.vals.size() / n : 0;
  std::vector<size_t> val_bytes(num_servers, 0);
  if (has_vals) {
    for (size_t i = 0; i < n; ++i) {
      val_bytes[plan.owner[i]] +=
          has_lens ? static_cast<size_t>(kvs.lens[i]) * value_bytes_
                   : bytes_per_key;
    }
  }
  bool any_gather = false;
  for (size_t srv = 0; srv < num_servers; ++srv) {
    if (plan.counts[srv] == 0) continue;
    slices->emplace_back(static_cast<int>(srv), RawKVs());
    RawKVs& o = slices->back().second;
    if (plan.counts[srv] == n) {
      o.keys = kvs.keys;
      if (has_vals) o.vals = kvs.vals;
      if (has_lens) o.lens = kvs.lens;
      continue;
    }
    any_gather = true;
    Cursor& c = gather[srv];
    o.keys = UninitializedArray<Key>(plan.counts[srv]);
    c.keys = o.keys.data();
    if (has_vals) {
      o.vals = UninitializedArray<char>(val_bytes[srv]);
      c.vals = o.vals.data();
    }
    if (has_lens) {
      o.lens = UninitializedArray<int>(plan.counts[srv]);
      c.lens = o.lens.data();
    }
  }
  if (!any_gather) return;
  const Key* keys = kvs.keys.data();
  const char* vals = has_vals ? kvs.vals.data() : nullptr;
  const int* lens = has_lens ? kvs.lens.data() : nullptr;
  const uint16_t* owner = plan.owner.data();
  Cursor* cursors = gather.data();
  for (size_t i = 0; i < n; ++i) {
    Cursor& c = cursors[owner[i]];
    const size_t bytes =
        has_lens ? static_cast<size_t>(lens[i]) * value_bytes_ : bytes_per_key;
    *c.keys++ = keys[i];
    if (has_vals) {
      CopyValue(c.vals, vals, bytes);
      c.vals += bytes;
      vals += bytes;
    }
    if (has_lens) *c.lens++ = lens[i];
  }
}

int64_t KVWorkerCore::Impl::Submit(bool push, bool pull, int cmd, int priority,
                                   const RawKVs& kvs, PullSink sink,
                                   Callback cb) {
  const int64_t ts = tracker()->NewRequest();
  CountRequest(push, pull, kvs.keys.size());
  Status s = CheckShape(push, kvs);
  // Until what is sliced by this ring is sent (Node::RingUse).
  Node::RingUse ring_use(app_->node());
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  if (s.ok() && !ring) {
    s = Status::Aborted("the node has no key ring (call ps::Start first)");
  }
  Pending p;
  std::vector<size_t> seg_vals;
  if (s.ok()) s = SliceKeys(*ring, kvs.keys.data(), kvs.keys.size(), &p.plan);
  if (s.ok()) s = ValueOffsets(push, kvs, p.plan, &seg_vals);
  if (!s.ok()) {
    tracker()->Fail(ts, s);
    return ts;
  }
  std::vector<std::pair<int, RawKVs>> slices;
  BuildSlices(push, kvs, p.plan, seg_vals, &slices);
  const std::vector<int>& ids = ring->server_ids();
  if (pull) p.sent_keys.resize(p.plan.counts.size());
  for (auto& slice : slices) {
    if (pull) p.sent_keys[slice.first] = slice.second.keys;
    slice.first = ids[slice.first];
  }
  p.pull = pull;
  p.keys = kvs.keys;
  p.request = kvs;
  p.ids = std::shared_ptr<const std::vector<int>>(ring, &ring->server_ids());
  p.sink = std::move(sink);
  p.cb = std::move(cb);
  if (p.cb) p.cb_token = CallbackToken(&callbacks_);
  // SliceKeys checked that the keys are sorted and unique, and so is each
  // slice.
  Dispatch(ts, push, pull, cmd, priority, ring->epoch(), ring->replicas(),
           clock_.load(), KeyOrder::kSortedUnique, std::move(p),
           std::move(slices));
  return ts;
}

int64_t KVWorkerCore::Impl::SubmitSliced(
    bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
    std::vector<std::pair<bool, RawKVs>> sliced, PullSink sink, Callback cb) {
  const int64_t ts = tracker()->NewRequest();
  CountRequest(push, pull, kvs.keys.size());
  Status s = Validate(push, kvs);
  // Read once: slice i goes to this ring's server i, and the request
  // carries this ring's epoch; held until what is sliced by it is sent
  // (Node::RingUse).
  Node::RingUse ring_use(app_->node());
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  if (s.ok() && !ring) {
    s = Status::Aborted("the node has no key ring (call ps::Start first)");
  }
  auto ids =
      ring ? std::shared_ptr<const std::vector<int>>(ring, &ring->server_ids())
           : std::make_shared<const std::vector<int>>();
  if (s.ok() && sliced.size() != ids->size()) {
    s = Status::InvalidArgument("the slicer made " +
                                std::to_string(sliced.size()) + " slices for " +
                                std::to_string(ids->size()) + " servers");
  }
  const size_t n = kvs.keys.size();
  Pending p;
  p.pull = pull;
  p.keys = kvs.keys;
  p.request = kvs;
  p.ids = ids;
  p.plan.per_key = true;
  p.plan.owner.assign(n, UINT16_MAX);
  p.plan.counts.assign(ids->size(), 0);
  if (pull) p.sent_keys.resize(ids->size());
  p.sink = std::move(sink);
  p.cb = std::move(cb);
  if (p.cb) p.cb_token = CallbackToken(&callbacks_);
  std::vector<std::pair<int, RawKVs>> slices;
  for (size_t r = 0; s.ok() && r < sliced.size(); ++r) {
    if (!sliced[r].first || sliced[r].second.keys.empty()) continue;
    const SArray<Key>& sk = sliced[r].second.keys;
    const Key* pos = kvs.keys.begin();
    for (Key key : sk) {
      pos = std::lower_bound(pos, kvs.keys.end(), key);
      if (pos == kvs.keys.end() || *pos != key) {
        s = Status::InvalidArgument(
            "the slicer put key " + std::to_string(key) +
            ", which the request lacks, in slice " + std::to_string(r));
        break;
      }
      p.plan.owner[pos - kvs.keys.begin()] = static_cast<uint16_t>(r);
    }
    p.plan.counts[r] = sk.size();
    if (pull) p.sent_keys[r] = sk;
    slices.emplace_back((*ids)[r], std::move(sliced[r].second));
  }
  for (size_t i = 0; s.ok() && i < n; ++i) {
    if (p.plan.owner[i] == UINT16_MAX) {
      s = Status::InvalidArgument("the slicer left out key " +
                                  std::to_string(kvs.keys[i]));
    }
  }
  if (!s.ok()) {
    tracker()->Fail(ts, s);
    return ts;
  }
  // The application's slicer may repeat a key within a slice.
  Dispatch(ts, push, pull, cmd, priority, ring->epoch(), ring->replicas(),
           clock_.load(), KeyOrder::kUnknown, std::move(p), std::move(slices));
  return ts;
}

void KVWorkerCore::Impl::Dispatch(int64_t ts, bool push, bool pull, int cmd,
                                  int priority, uint64_t epoch, int replicas,
                                  int64_t clock, KeyOrder order, Pending p,
                                  std::vector<std::pair<int, RawKVs>> slices) {
  std::vector<int> recipients;
  recipients.reserve(slices.size());
  for (const auto& s : slices) recipients.push_back(s.first);
  p.responses.resize(p.plan.counts.size());
  if (recipients.empty()) {
    // Nothing to send (no keys): complete now, as ps-lite does.
    if (pull && p.sink.values) p.sink.values(0);
    if (pull && p.sink.lens) p.sink.lens(0);
    if (p.parent >= 0) {
      DeliverToParent(ts, &p);
    } else if (p.cb) {
      p.cb();
    }
    tracker()->Expect(ts, {});
    return;
  }
  const bool replicated = replicas > 0 || app_->node()->ring_replicas() > 0;
  p.push = push;
  p.cmd = cmd;
  p.priority = priority;
  p.clock = clock;
  p.epoch = epoch;
  if (replicated) {
    // Kept for a resend to the heir of a server that dies meanwhile.
    const std::vector<int>& ids = *p.ids;
    p.kept.resize(ids.size());
    p.resent.assign(ids.size(), 0);
    for (const auto& s : slices) {
      const size_t slot =
          std::find(ids.begin(), ids.end(), s.first) - ids.begin();
      if (slot < ids.size()) p.kept[slot] = s.second;
    }
  }
  // Key caching: how each slice's keys go (docs/protocol.md, "Key
  // caching"). Not a key run (24 bytes already; the run found here is the
  // one sent), nor a few keys.
  struct How {
    KeyCacheHints::Send send = KeyCacheHints::Send::kKeys;
    KeySignature sig;
    bool is_run = false;
    KeyRun run;
  };
  std::vector<How> how;
  if (key_cache_on_) {
    how.resize(slices.size());
    const std::vector<int>& ids = *p.ids;
    for (size_t i = 0; i < slices.size(); ++i) {
      const RawKVs& kvs = slices[i].second;
      How& h = how[i];
      h.is_run = FindKeyRun(kvs.keys, order, &h.run);
      if (h.is_run || kvs.keys.size() < kMinSignedKeys) continue;
      h.sig = SignKeys(kvs.keys);
      h.send = key_hints_.Decide(slices[i].first, h.sig);
      if (h.send != KeyCacheHints::Send::kSigned) continue;
      const size_t slot =
          std::find(ids.begin(), ids.end(), slices[i].first) - ids.begin();
      if (slot >= ids.size()) continue;
      if (p.signed_parts.empty()) p.signed_parts.resize(ids.size());
      p.signed_parts[slot] = kvs;
    }
  }
  int64_t pushed_below = 0;
  {
    MutexLock lock(&mu_);
    pending_[ts] = std::move(p);
    if (push && !pull) {
      open_pushes_.insert(ts);
      last_push_ = std::max(last_push_, ts);
    }
    pushed_below = PushedBelowLocked();
  }
  tracker()->Expect(ts, recipients);
  const int64_t done_below = replicated ? tracker()->OldestOpen() : 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    auto& s = slices[i];
    Message msg = NewRequest(ts, s.first, clock);
    msg.meta.push = push;
    msg.meta.pull = pull;
    msg.meta.cmd = cmd;
    msg.meta.priority = priority;
    msg.meta.epoch = epoch;
    msg.meta.done_below = done_below;
    msg.meta.pushed_below = pushed_below;
    if (how.empty()) {
      AddKVFrames(s.second, &msg, /*keys_as_requested=*/false, order);
    } else if (how[i].send == KeyCacheHints::Send::kSigned) {
      AddSignedKVFrames(s.second, how[i].sig, &msg);
      signed_parts_->Add();
    } else {
      AddKVFramesWithRun(s.second, how[i].is_run ? &how[i].run : nullptr, &msg);
      if (how[i].send == KeyCacheHints::Send::kKeep) {
        msg.meta.key_cache = kKeyCacheKeep;
      }
    }
    Status st = app_->node()->Send(std::move(msg));
    if (st.ok()) continue;
    if (replicated) {
      // The server may have died and failed over since the ring was read.
      std::shared_ptr<const KeyRing> now = app_->node()->key_ring();
      Message resend;
      bool again = false;
      if (now && now->IndexOf(s.first) < 0) {
        MutexLock lock(&mu_);
        auto it = pending_.find(ts);
        if (it == pending_.end()) continue;  // Answered or failed already.
        const std::vector<int>& ids = *it->second.ids;
        const size_t slot =
            std::find(ids.begin(), ids.end(), s.first) - ids.begin();
        again = slot < ids.size() && it->second.resent[slot] == 0 &&
                ResendLocked(ts, &it->second, slot, now, &resend);
        if (!again && slot < ids.size() && it->second.resent[slot] != 0) {
          continue;
        }
      }
      if (again && app_->node()->Send(std::move(resend)).ok()) continue;
    }
    FailRequest(ts, st);
    return;
  }
}

bool KVWorkerCore::Impl::ResendLocked(
    int64_t ts, Pending* p, size_t slot,
    const std::shared_ptr<const KeyRing>& ring, Message* out) {
  if (slot >= p->kept.size() || p->kept[slot].keys.empty()) return false;
  const RawKVs& kvs = p->kept[slot];
  const int heir = ring->Owner(kvs.keys[0]);
  Message msg = NewRequest(ts, heir, p->clock);
  msg.meta.push = p->push;
  msg.meta.pull = p->pull;
  msg.meta.cmd = p->cmd;
  msg.meta.priority = p->priority;
  msg.meta.epoch = ring->epoch();
  msg.meta.resend_for = (*p->ids)[slot];
  msg.meta.done_below = tracker()->OldestOpen();
  msg.meta.pushed_below = PushedBelowLocked();
  AddKVFrames(kvs, &msg);
  p->resent[slot] = heir;
  resent_->Add();
  *out = std::move(msg);
  return true;
}

void KVWorkerCore::Impl::OnFailover(int dead, const Status& status) {
  Node::RingUse ring_use(app_->node());  // Until the resends are sent.
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  std::vector<Message> resends;
  std::vector<int64_t> failed;
  std::vector<int64_t> ticks;
  // The parts sent to the dead server, and those resent to it when it
  // took over another's keys (the tracker waits for them under the first
  // server's id).
  std::vector<std::pair<int64_t, size_t>> owed;
  for (int64_t ts : tracker()->OwedBy(dead)) {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) {
      ticks.push_back(ts);  // A clock notice: the heir had its own.
      continue;
    }
    const std::vector<int>& ids = *it->second.ids;
    const size_t slot = std::find(ids.begin(), ids.end(), dead) - ids.begin();
    // A part refused for moved keys went elsewhere (or waits for a ring).
    if (slot >= ids.size() || slot >= it->second.resent.size() ||
        it->second.resent[slot] != 0 || Refused(it->second, slot)) {
      continue;
    }
    owed.emplace_back(ts, slot);
  }
  {
    MutexLock lock(&mu_);
    for (const auto& p : pending_) {
      const std::vector<int>& to = p.second.resent;
      for (size_t slot = 0; slot < to.size(); ++slot) {
        if (to[slot] == dead && !Refused(p.second, slot)) {
          owed.emplace_back(p.first, slot);
        }
      }
    }
  }
  for (const auto& o : owed) {
    MutexLock lock(&mu_);
    auto it = pending_.find(o.first);
    if (it == pending_.end()) continue;
    Message msg;
    if (ring && ResendLocked(o.first, &it->second, o.second, ring, &msg)) {
      resends.push_back(std::move(msg));
    } else {
      failed.push_back(o.first);
    }
  }
  for (int64_t ts : ticks) tracker()->OnResponse(ts, dead, Status::OK());
  for (int64_t ts : failed) FailRequest(ts, status);
  if (!resends.empty()) {
    LOG(WARNING) << "resending " << resends.size() << " request(s) owed by "
                 << "node " << dead << " to the server(s) now holding its "
                 << "keys";
  }
  for (Message& m : resends) {
    const int64_t ts = m.meta.timestamp;
    const int to = m.meta.recipient;
    Status st = app_->node()->Send(std::move(m));
    if (!st.ok()) {
      LOG(WARNING) << "resend of request " << ts << " to node " << to
                   << " failed: " << st;
      FailRequest(ts, st);
    }
  }
}

Message KVWorkerCore::Impl::NewRequest(int64_t ts, int recipient,
                                       int64_t clock) const {
  Message msg = AppMessage(app_->app_id(), app_->customer_id(), ts, recipient,
                           /*request=*/true);
  msg.meta.clock = clock;
  msg.meta.value_bytes = static_cast<int>(value_bytes_);
  return msg;
}

bool KVWorkerCore::Impl::Process(Message& msg) {
  const int64_t ts = msg.meta.timestamp;
  // The answer to a resend stands for the dead server's (OnFailover).
  const int sender =
      msg.meta.resend_for != 0 ? msg.meta.resend_for : msg.meta.sender;
  if (msg.meta.request || !tracker()->Expecting(ts, sender)) return true;
  if (msg.meta.clock_query != 0 && msg.meta.status_code == 0) {
    MutexLock lock(&mu_);
    auto it = clock_queries_.find(ts);
    if (it != clock_queries_.end()) {
      it->second.low = std::min(it->second.low, msg.meta.clock);
      it->second.high = std::max(it->second.high, msg.meta.clock);
      if (msg.meta.clock_query == 2) it->second.resumes = true;
    }
    return true;
  }
  if (msg.meta.status_code != 0) {
    // A part refused because its keys moved is re-routed, one refused for
    // its keys' signature goes again with its keys; any other error fails
    // the request when the customer records it.
    if (msg.meta.key_cache == kKeyCacheUnknown ||
        msg.meta.key_cache == kKeyCacheOff) {
      return !OnKeysRefused(ts, sender, msg.meta);
    }
    return msg.meta.moved_epoch == 0 || !OnMoved(ts, sender, msg.meta);
  }
  RawKVs raw;
  const Options& options = app_->node()->options();
  Status s = ParseKVFrames(
      msg, value_bytes_,
      KVLimits{options.max_keys_per_request, options.max_frame_mb}, &raw);
  Pending done;
  int64_t parent = -1;  // A failed child's parent fails too.
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return true;
    const std::vector<int>& ids = *it->second.ids;
    const size_t slot = std::find(ids.begin(), ids.end(), sender) - ids.begin();
    if (s.ok() && slot >= it->second.responses.size()) {
      s = Status::Corruption("response from unexpected node " +
                             std::to_string(sender));
    }
    if (s.ok() && msg.meta.keys_as_requested) {
      if (slot < it->second.sent_keys.size()) {
        raw.keys = it->second.sent_keys[slot];
        s = CheckAsRequested(raw, value_bytes_);
      } else {
        s = Status::Corruption("node " + std::to_string(sender) +
                               " left out the keys of a request that sent "
                               "none");
      }
    }
    if (!s.ok()) {
      parent = it->second.parent;
      pending_.erase(it);
    } else {
      it->second.responses[slot] = std::move(raw);
      if (msg.meta.wants_commit) {
        it->second.commit_to.push_back(msg.meta.sender);
      }
      if (tracker()->Outstanding(ts) > 1) return true;
      done = std::move(it->second);
      pending_.erase(it);
    }
  }
  PushDone(ts, done.commit_to);
  if (s.ok() && done.pull) s = Assemble(done);
  if (!s.ok()) {
    LOG(WARNING) << "request " << ts << " failed: " << s;
    tracker()->Fail(ts, s);
    if (done.parent >= 0) parent = done.parent;
    if (parent >= 0) FailRequest(parent, s);
    return true;
  }
  if (done.parent >= 0) {
    DeliverToParent(ts, &done);
  } else if (done.cb) {
    done.cb();
  }
  return true;
}

void KVWorkerCore::Impl::FailRequest(int64_t ts, const Status& status) {
  tracker()->Fail(ts, status);  // Nothing if it failed already.
  int64_t parent = -1;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return;
    parent = it->second.parent;
    pending_.erase(it);
  }
  PushDone(ts, {});
  if (parent >= 0) FailRequest(parent, status);
}

bool KVWorkerCore::Impl::OnMoved(int64_t ts, int peer, const Meta& meta) {
  const uint64_t epoch = meta.moved_epoch;
  size_t slot = 0;
  bool now = false;
  bool log = false;
  Status refuse;  // Not re-routed: the request fails with this.
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return false;
    Pending& p = it->second;
    const std::vector<int>& ids = *p.ids;
    slot = std::find(ids.begin(), ids.end(), peer) - ids.begin();
    if (slot >= ids.size()) return false;
    if (Refused(p, slot)) return true;  // A duplicate of the refusal.
    if (epoch <= p.epoch) {
      // A server refuses only a request sliced by an older ring than its
      // own: this answer is malformed.
      refuse = Status::Corruption(
          "node " + std::to_string(meta.sender) + " refused a part sliced " +
          "by ring epoch " + std::to_string(p.epoch) + " for keys moved by " +
          "epoch " + std::to_string(epoch) + ", which is not newer");
    } else if (p.push && slot < p.resent.size() && p.resent[slot] != 0) {
      // The dead server may have applied the part before it died (its
      // heir's dedup table knows it as its); a child request under a new
      // identity could apply it twice (docs/replication.md, "Re-routing").
      // A pull applies nothing: it is re-routed as any refused part.
      refuse = Status::Unavailable(
          "the part of request " + std::to_string(ts) + " resent for dead " +
          "node " + std::to_string(peer) + " was refused by node " +
          std::to_string(meta.sender) + " for keys moved by ring epoch " +
          std::to_string(epoch) + "; it is not re-routed, since node " +
          std::to_string(peer) +
          " may have applied it: " + meta.status_message);
    } else {
      if (p.moved.empty()) p.moved.resize(ids.size());
      Moved& m = p.moved[slot];
      m.refused = true;
      m.epoch = epoch;
      m.peer = peer;
      m.since_ms = app_->node()->clock()->NowMs();
      m.child = -1;
      now = app_->node()->ring_epoch() >= epoch;
      log = !now && epoch > logged_wait_epoch_;
      if (log) logged_wait_epoch_ = epoch;
    }
  }
  if (!refuse.ok()) {
    LOG(WARNING) << "request " << ts << " failed: " << refuse;
    FailRequest(ts, refuse);
    return true;
  }
  if (log) {
    LOG(INFO) << "app " << app_->app_id() << ": node " << meta.sender
              << " refused request parts for keys that moved by ring epoch "
              << epoch << "; they are re-routed once this node has that ring"
              << " (it has epoch " << app_->node()->ring_epoch() << ")";
  }
  if (now) Reroute(ts, slot);
  return true;
}

bool KVWorkerCore::Impl::OnKeysRefused(int64_t ts, int peer, const Meta& meta) {
  Message msg;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return false;
    Pending& p = it->second;
    const std::vector<int>& ids = *p.ids;
    const size_t slot = std::find(ids.begin(), ids.end(), peer) - ids.begin();
    if (slot >= p.signed_parts.size() || p.signed_parts[slot].keys.empty()) {
      return false;  // Its keys went as they are: a malformed refusal.
    }
    RawKVs part = std::move(p.signed_parts[slot]);
    p.signed_parts[slot] = RawKVs();
    const bool off = meta.key_cache == kKeyCacheOff;
    if (off) {
      key_hints_.Disable(peer);
    } else {
      key_hints_.Refused(peer, SignKeys(part.keys));
    }
    msg = NewRequest(ts, peer, p.clock);
    msg.meta.push = p.push;
    msg.meta.pull = p.pull;
    msg.meta.cmd = p.cmd;
    msg.meta.priority = p.priority;
    msg.meta.epoch = p.epoch;
    msg.meta.done_below = p.kept.empty() ? 0 : tracker()->OldestOpen();
    msg.meta.pushed_below = PushedBelowLocked();
    AddKVFrames(part, &msg);
    if (!off) msg.meta.key_cache = kKeyCacheKeep;
  }
  keys_refused_->Add();
  Status st = app_->node()->Send(std::move(msg));
  if (!st.ok()) FailRequest(ts, st);
  return true;
}

RawKVs KVWorkerCore::Impl::CutPart(const Pending& p, size_t slot) const {
  const RawKVs& in = p.request;
  const size_t n = in.keys.size();
  const bool has_vals = p.push && !in.vals.empty();
  const bool has_lens = p.push && !in.lens.empty();
  // Which of the request's keys went to `slot`.
  std::vector<uint8_t> mine(n, 0);
  if (p.plan.per_key) {
    for (size_t i = 0; i < n; ++i) mine[i] = p.plan.owner[i] == slot;
  } else {
    for (const KeySegment& seg : p.plan.segments) {
      if (static_cast<size_t>(seg.server) != slot) continue;
      std::fill(mine.begin() + seg.begin, mine.begin() + seg.end, 1);
    }
  }
  size_t count = 0, bytes = 0;
  const size_t bytes_per_key =
      has_vals && !has_lens && n > 0 ? in.vals.size() / n : 0;
  for (size_t i = 0; i < n; ++i) {
    if (!mine[i]) continue;
    ++count;
    bytes += has_lens ? static_cast<size_t>(in.lens[i]) * value_bytes_
                      : bytes_per_key;
  }
  RawKVs out;
  out.keys = UninitializedArray<Key>(count);
  if (has_vals) out.vals = UninitializedArray<char>(bytes);
  if (has_lens) out.lens = UninitializedArray<int>(count);
  size_t k = 0, at = 0, from = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = has_lens ? static_cast<size_t>(in.lens[i]) * value_bytes_
                              : bytes_per_key;
    if (mine[i]) {
      out.keys[k] = in.keys[i];
      if (has_lens) out.lens[k] = in.lens[i];
      if (has_vals && b > 0)
        std::memcpy(out.vals.data() + at, in.vals.data() + from, b);
      ++k;
      at += b;
    }
    from += b;
  }
  return out;
}

void KVWorkerCore::Impl::Reroute(int64_t ts, size_t slot) {
  Node::RingUse ring_use(app_->node());
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  Pending c;
  int64_t child = -1;
  bool push = false;
  int cmd = 0, priority = 0;
  int64_t clock = 0;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end() || !Refused(it->second, slot)) return;
    Pending& p = it->second;
    Moved& m = p.moved[slot];
    if (m.child >= 0 || !ring || ring->epoch() < m.epoch) return;
    c.request = CutPart(p, slot);
    c.pull = p.pull;
    c.keys = c.request.keys;
    c.parent = ts;
    c.parent_slot = slot;
    c.parent_peer = m.peer;
    push = p.push;
    cmd = p.cmd;
    priority = p.priority;
    clock = p.clock;
    // A new identity: see docs/replication.md, "Re-routing".
    child = tracker()->NewRequest();
    m.child = child;
  }
  rerouted_->Add();
  std::vector<size_t> seg_vals;
  Status s = SliceKeys(*ring, c.keys.data(), c.keys.size(), &c.plan);
  if (s.ok()) s = ValueOffsets(push, c.request, c.plan, &seg_vals);
  if (!s.ok()) {
    tracker()->Fail(child, s);
    FailRequest(ts, s);
    return;
  }
  std::vector<std::pair<int, RawKVs>> slices;
  BuildSlices(push, c.request, c.plan, seg_vals, &slices);
  const std::vector<int>& ids = ring->server_ids();
  if (c.pull) c.sent_keys.resize(c.plan.counts.size());
  for (auto& slice : slices) {
    if (c.pull) c.sent_keys[slice.first] = slice.second.keys;
    slice.first = ids[slice.first];
  }
  c.ids = std::shared_ptr<const std::vector<int>>(ring, &ring->server_ids());
  if (c.pull) {
    // The child's pull is assembled in its keys' order, lens included (the
    // parent's Assemble takes them as one server's answer).
    auto out = std::make_shared<RawKVs>();
    c.out = out;
    c.sink.values = [out](size_t bytes) {
      out->vals = UninitializedArray<char>(bytes);
      return out->vals.data();
    };
    c.sink.adopt = [out](const SArray<char>& bytes) {
      out->vals = bytes;
      return true;
    };
    c.sink.lens = [out](size_t n) {
      out->lens = UninitializedArray<int>(n);
      return out->lens.data();
    };
  }
  VLOG(1) << "re-routing the part of request " << ts << " for node "
          << c.parent_peer << " (" << c.keys.size() << " keys) as request "
          << child << " by ring epoch " << ring->epoch();
  // A part of a request the application's slicer may have cut: keys may
  // repeat.
  Dispatch(child, push, c.pull, cmd, priority, ring->epoch(), ring->replicas(),
           clock, KeyOrder::kUnknown, std::move(c), std::move(slices));
}

void KVWorkerCore::Impl::DeliverToParent(int64_t ts, Pending* child) {
  RawKVs res;
  res.keys = child->keys;
  if (child->out) {
    res.vals = child->out->vals;
    res.lens = child->out->lens;
  }
  const int64_t parent = child->parent;
  const int peer = child->parent_peer;
  Pending done;
  bool complete = false;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(parent);
    if (it == pending_.end()) return;  // It failed meanwhile.
    Pending& p = it->second;
    const size_t slot = child->parent_slot;
    if (!Refused(p, slot) || p.moved[slot].child != ts) return;
    p.responses[slot] = std::move(res);
    complete = tracker()->Outstanding(parent) <= 1;
    if (complete) {
      done = std::move(p);
      pending_.erase(it);
    }
  }
  if (complete) PushDone(parent, done.commit_to);
  if (!complete) {
    // Only the part is answered: the request waits for others.
    tracker()->OnResponse(parent, peer, Status::OK());
    return;
  }
  Status s;
  if (done.pull) s = Assemble(done);
  if (!s.ok()) {
    LOG(WARNING) << "request " << parent << " failed: " << s;
    tracker()->Fail(parent, s);
    if (done.parent >= 0) FailRequest(done.parent, s);
    return;
  }
  if (done.parent >= 0) {
    DeliverToParent(parent, &done);
  } else if (done.cb) {
    done.cb();
  }
  // As the customer records an answer after its handler: when Wait
  // returns, the values are in place and the callback has run.
  tracker()->OnResponse(parent, peer, Status::OK());
}

void KVWorkerCore::Impl::OnRingChanged() {
  const uint64_t epoch = app_->node()->ring_epoch();
  std::vector<std::pair<int64_t, size_t>> ready;
  {
    MutexLock lock(&mu_);
    for (const auto& p : pending_) {
      for (size_t slot = 0; slot < p.second.moved.size(); ++slot) {
        const Moved& m = p.second.moved[slot];
        if (m.refused && m.child < 0 && m.epoch <= epoch) {
          ready.emplace_back(p.first, slot);
        }
      }
    }
  }
  std::sort(ready.begin(), ready.end());  // Oldest first.
  for (const auto& r : ready) Reroute(r.first, r.second);
}

void KVWorkerCore::Impl::LogMovedWaits(int64_t older_than_ms) {
  constexpr size_t kMaxLines = 5;
  const int64_t now = app_->node()->clock()->NowMs();
  const uint64_t have = app_->node()->ring_epoch();
  std::vector<std::string> lines;
  size_t total = 0;
  {
    MutexLock lock(&mu_);
    for (const auto& p : pending_) {
      for (size_t slot = 0; slot < p.second.moved.size(); ++slot) {
        const Moved& m = p.second.moved[slot];
        if (!m.refused || m.child >= 0) continue;
        const int64_t waited = now - m.since_ms;
        if (waited < older_than_ms) continue;
        ++total;
        if (!WaitLogDue(waited, older_than_ms) || lines.size() >= kMaxLines) {
          continue;
        }
        lines.push_back("request " + std::to_string(p.first) +
                        ": its part for node " + std::to_string(m.peer) + " (" +
                        std::to_string(p.second.plan.counts[slot]) +
                        " keys) was refused for keys moved by ring epoch " +
                        std::to_string(m.epoch) + "; it has waited " +
                        std::to_string(waited / 1000) +
                        " s for this node to get that ring (it has epoch " +
                        std::to_string(have) +
                        "; rings come from the scheduler)");
      }
    }
  }
  for (const std::string& line : lines) {
    LOG(WARNING) << "app " << app_->app_id() << " (customer "
                 << app_->customer_id() << "): " << line;
  }
  if (total > lines.size() && !lines.empty()) {
    LOG(WARNING) << "app " << app_->app_id() << " (customer "
                 << app_->customer_id() << "): and " << total - lines.size()
                 << " more parts waiting for a ring";
  }
}

Status KVWorkerCore::Impl::Assemble(const Pending& p) const {
  const size_t n = p.keys.size();
  const size_t num = p.responses.size();
  const std::vector<size_t>& counts = p.plan.counts;
  size_t total = 0;
  int responders = 0;
  std::vector<size_t> bytes_per_key(num, 0);
  for (size_t r = 0; r < num; ++r) {
    const RawKVs& res = p.responses[r];
    if (counts[r] == 0) continue;
    ++responders;
    if (res.keys.size() != counts[r]) {
      return Status::Corruption("server " + std::to_string((*p.ids)[r]) +
                                " answered " + std::to_string(res.keys.size()) +
                                " keys for " + std::to_string(counts[r]) +
                                " requested");
    }
    if (res.lens.empty()) bytes_per_key[r] = res.vals.size() / res.keys.size();
    total += res.vals.size();
  }
  const bool want_lens = static_cast<bool>(p.sink.lens);
  int* lens_out = nullptr;
  if (want_lens) {
    lens_out = p.sink.lens(n);
    if (lens_out == nullptr) {
      return Status::InvalidArgument("the lens output has the wrong size for " +
                                     std::to_string(n) + " keys");
    }
  }
  // The keys a server answered for keys[begin..begin+count) of the request.
  auto check_keys = [&](size_t r, size_t at, size_t begin,
                        size_t count) -> Status {
    const Key* got = p.responses[r].keys.data() + at;
    const Key* want = p.keys.data() + begin;
    if (got == want) return Status::OK();  // The request's own keys.
    if (std::memcmp(got, want, count * sizeof(Key)) == 0) return Status::OK();
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    return Status::Corruption("server " + std::to_string((*p.ids)[r]) +
                              " answered key " + std::to_string(got[i]) +
                              " in place of " + std::to_string(want[i]));
  };
  // One server answered everything: take its buffer as is when allowed.
  if (responders == 1) {
    size_t r = 0;
    while (counts[r] == 0) ++r;
    const RawKVs& res = p.responses[r];
    PS_RETURN_IF_ERROR(check_keys(r, 0, 0, n));
    bool adopted = p.sink.adopt && p.sink.adopt(res.vals);
    if (!adopted) {
      char* dst = p.sink.values(total);
      if (dst == nullptr && total > 0) {
        return Status::InvalidArgument(
            "the pull output has the wrong size for " +
            std::to_string(total / value_bytes_) + " values");
      }
      if (total > 0) std::memcpy(dst, res.vals.data(), total);
    }
    if (lens_out != nullptr) {
      for (size_t i = 0; i < n; ++i) {
        lens_out[i] = res.lens.empty()
                          ? static_cast<int>(bytes_per_key[r] / value_bytes_)
                          : res.lens[i];
      }
    }
    return Status::OK();
  }
  char* dst = p.sink.values(total);
  if (dst == nullptr && total > 0) {
    return Status::InvalidArgument("the pull output has the wrong size for " +
                                   std::to_string(total / value_bytes_) +
                                   " values");
  }
  std::vector<size_t> cursor(num, 0), voff(num, 0);
  size_t out = 0;
  if (!p.plan.per_key) {
    // Segment by segment: every server's answer is its segments' keys in
    // order, so each segment's values are one copy.
    for (const KeySegment& seg : p.plan.segments) {
      const size_t r = static_cast<size_t>(seg.server);
      const RawKVs& res = p.responses[r];
      const size_t count = seg.end - seg.begin;
      const size_t c = cursor[r];
      PS_RETURN_IF_ERROR(check_keys(r, c, seg.begin, count));
      size_t bytes = bytes_per_key[r] * count;
      if (!res.lens.empty()) {
        size_t values = 0;
        for (size_t i = 0; i < count; ++i) {
          values += static_cast<size_t>(res.lens[c + i]);
        }
        bytes = values * value_bytes_;
      }
      if (bytes > 0) std::memcpy(dst + out, res.vals.data() + voff[r], bytes);
      if (lens_out != nullptr) {
        for (size_t i = 0; i < count; ++i) {
          lens_out[seg.begin + i] =
              res.lens.empty()
                  ? static_cast<int>(bytes_per_key[r] / value_bytes_)
                  : res.lens[c + i];
        }
      }
      cursor[r] += count;
      voff[r] += bytes;
      out += bytes;
    }
    return Status::OK();
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t r = p.plan.owner[i];
    const RawKVs& res = p.responses[r];
    const size_t c = cursor[r]++;
    if (res.keys[c] != p.keys[i]) {
      return Status::Corruption("server " + std::to_string((*p.ids)[r]) +
                                " answered key " + std::to_string(res.keys[c]) +
                                " in place of " + std::to_string(p.keys[i]));
    }
    size_t bytes = res.lens.empty()
                       ? bytes_per_key[r]
                       : static_cast<size_t>(res.lens[c]) * value_bytes_;
    if (bytes > 0) std::memcpy(dst + out, res.vals.data() + voff[r], bytes);
    voff[r] += bytes;
    out += bytes;
    if (lens_out != nullptr) {
      lens_out[i] = static_cast<int>(bytes / value_bytes_);
    }
  }
  return Status::OK();
}

// Every server learns of the new clock, also those this iteration did not
// touch: a server's vector clock must see every worker move on.
int64_t KVWorkerCore::Impl::Clock() {
  const int64_t ts = tracker()->NewRequest();
  const int64_t clock = clock_.fetch_add(1) + 1;
  SendClockNotices(ts, clock, /*query=*/false);
  return ts;
}

void KVWorkerCore::Impl::SendClockNotices(int64_t ts, int64_t clock,
                                          bool query) {
  // The servers on the ring: those that failed over are gone. Held until
  // the notices are sent (Node::RingUse).
  Node::RingUse ring_use(app_->node());
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  std::vector<int> ids = ring ? ring->server_ids() : app_->node()->server_ids();
  tracker()->Expect(ts, ids);
  int64_t pushed_below = 0;
  {
    MutexLock lock(&mu_);
    pushed_below = PushedBelowLocked();
  }
  for (int id : ids) {
    Message msg = NewRequest(ts, id, clock);
    msg.meta.clock_tick = true;
    msg.meta.pushed_below = pushed_below;
    msg.meta.clock_query = query ? 1 : 0;
    Status st = app_->node()->Send(std::move(msg));
    if (st.ok()) continue;
    // The server may have died and failed over since the ring was read: its
    // heir was on that ring too and has its own notice (as OnFailover
    // counts a notice the dead server owed).
    std::shared_ptr<const KeyRing> now = app_->node()->key_ring();
    if (ring && now && now != ring && now->IndexOf(id) < 0) {
      tracker()->OnResponse(ts, id, Status::OK());
      continue;
    }
    tracker()->Fail(ts, st);
    break;
  }
}

// Asks every server at which clock this worker starts there (a worker that
// resumes its rank: the lowest, the clock it had not finished everywhere;
// one that starts afresh: the highest, so that it waits for nobody's
// earlier rounds), takes it as its clock and tells every server.
StatusOr<int64_t> KVWorkerCore::Impl::JoinClock() {
  const int64_t ts = tracker()->NewRequest();
  {
    MutexLock lock(&mu_);
    clock_queries_[ts] = ClockAnswers();
  }
  SendClockNotices(ts, clock_.load(), /*query=*/true);
  Status s = app_->customer()->Wait(ts);
  ClockAnswers answers;
  {
    MutexLock lock(&mu_);
    answers = clock_queries_[ts];
    clock_queries_.erase(ts);
  }
  if (!s.ok()) return s;
  if (answers.high == std::numeric_limits<int64_t>::min()) {
    return Status::Unavailable("no server answered the clock query");
  }
  const int64_t clock = answers.resumes ? answers.low : answers.high;
  clock_.store(clock);
  const int64_t tick = tracker()->NewRequest();
  SendClockNotices(tick, clock, /*query=*/false);
  PS_RETURN_IF_ERROR(app_->customer()->Wait(tick));
  return clock;
}

// --- The facade.

KVWorkerCore::KVWorkerCore(AppImpl* app, size_t value_bytes)
    : impl_(std::make_unique<Impl>(app, value_bytes)) {}

KVWorkerCore::~KVWorkerCore() = default;

int KVWorkerCore::Submit(bool push, bool pull, int cmd, int priority,
                         const RawKVs& kvs, PullSink sink, Callback cb) {
  return ApiTimestamp(impl_->Submit(push, pull, cmd, priority, kvs,
                                    std::move(sink), std::move(cb)));
}

int KVWorkerCore::SubmitSliced(bool push, bool pull, int cmd, int priority,
                               const RawKVs& kvs,
                               std::vector<std::pair<bool, RawKVs>> slices,
                               PullSink sink, Callback cb) {
  return ApiTimestamp(impl_->SubmitSliced(push, pull, cmd, priority, kvs,
                                          std::move(slices), std::move(sink),
                                          std::move(cb)));
}

Status KVWorkerCore::Wait(int timestamp) { return impl_->Wait(timestamp); }

Status KVWorkerCore::WaitFor(int timestamp, int64_t timeout_ms) {
  return impl_->WaitFor(timestamp, timeout_ms);
}

int KVWorkerCore::Clock() { return ApiTimestamp(impl_->Clock()); }

int64_t KVWorkerCore::clock() const { return impl_->clock(); }

StatusOr<int64_t> KVWorkerCore::JoinClock() { return impl_->JoinClock(); }

const std::vector<Range>& KVWorkerCore::ServerKeyRanges() {
  return impl_->ServerKeyRanges();
}

}  // namespace ps
