// The worker's side of key-value requests: validation, slicing by the key
// ring (partition/slicer.h), sending one message per server, and placing
// pulled values in the order of the request's keys.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "metrics/metrics.h"
#include "partition/key_ring.h"
#include "partition/slicer.h"
#include "ps/internal/kv_core.h"
#include "util/mutex.h"

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
      : app_(app), value_bytes_(value_bytes) {
    InitMetrics();
    app_->set_kv_handler([this](Message& msg) { Process(msg); },
                         [this](int64_t ts, const Status&) { Forget(ts); });
    app_->set_failover_handler(
        [this](int dead, const Status& s) { OnFailover(dead, s); });
    // A key-value response runs no application code unless its request has
    // a callback: while none has, the receive thread may handle responses
    // itself (copying pulled values into the waiting caller's buffer).
    app_->set_inline_predicate([this](const Meta& meta) {
      return !meta.request && !meta.simple_app &&
             callbacks_.load(std::memory_order_acquire) == 0;
    });
  }

  ~Impl() {
    app_->node()->metrics()->RemoveCollector(collector_);
    app_->set_inline_predicate(nullptr);
    app_->set_kv_handler(nullptr, nullptr);
    app_->set_failover_handler(nullptr);
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
    collector_ = r->AddCollector([this, customer](metrics::Writer* w) {
      w->Gauge("ember_worker_clock",
               "Iterations this worker has ended (KVWorker::Clock)", customer,
               static_cast<double>(clock_.load()));
    });
  }
  void CountRequest(bool push, bool pull, size_t keys) {
    const int op = push && pull ? 2 : push ? 0 : 1;
    requests_[op]->Add();
    keys_[op]->Add(keys);
  }
  metrics::Counter* requests_[3] = {};
  metrics::Counter* keys_[3] = {};
  metrics::Counter* resent_ = nullptr;
  int collector_ = 0;

  // These return the 64-bit timestamp; the facade hands out its API int.
  int64_t Submit(bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
                 PullSink sink, Callback cb);
  int64_t SubmitSliced(bool push, bool pull, int cmd, int priority,
                       const RawKVs& kvs,
                       std::vector<std::pair<bool, RawKVs>> slices,
                       PullSink sink, Callback cb);
  Status Wait(int ts) { return app_->Wait(ts); }
  int64_t Clock();
  int64_t clock() const { return clock_.load(); }
  const std::vector<Range>& ServerKeyRanges() {
    return app_->postoffice()->GetServerKeyRanges();
  }

 private:
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
    bool push = false;
    int cmd = 0;
    int priority = 0;
    int64_t clock = 0;
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
  // `order`: what is known of each slice's keys (AddKVFrames).
  void Dispatch(int64_t ts, bool push, bool pull, int cmd, int priority,
                uint64_t epoch, KeyOrder order, Pending pending,
                std::vector<std::pair<int, RawKVs>> slices);
  void Process(Message& msg);
  // A request of this app to `recipient`, with no frames yet.
  Message NewRequest(int64_t ts, int recipient, int64_t clock) const;
  Status Assemble(const Pending& p) const;
  void Forget(int64_t ts) {
    MutexLock lock(&mu_);
    pending_.erase(ts);
  }

  AppImpl* const app_;
  const size_t value_bytes_;

  std::atomic<int64_t> clock_{0};  // Iterations ended (Clock calls).
  std::atomic<int> callbacks_{0};  // Requests whose callback is pending.

  Mutex mu_;
  std::unordered_map<int64_t, Pending> pending_ GUARDED_BY(mu_);
};

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
    std::vector<RawKVs*> out(num_servers, nullptr);
    for (size_t srv = 0; srv < num_servers; ++srv) {
      if (plan.counts[srv] == 0) continue;
      slices->emplace_back(static_cast<int>(srv), RawKVs());
    }
    for (auto& slice : *slices) out[slice.first] = &slice.second;
    std::vector<size_t> key_at(num_servers, 0), val_at(num_servers, 0);
    for (size_t g = 0; g < plan.segments.size(); ++g) {
      const KeySegment& seg = plan.segments[g];
      const size_t srv = static_cast<size_t>(seg.server);
      RawKVs& o = *out[srv];
      if (plan.segments_of[srv] == 1) {
        o.keys = kvs.keys.segment(seg.begin, seg.end);
        if (has_vals) o.vals = kvs.vals.segment(seg_vals[g], seg_vals[g + 1]);
        if (has_lens) o.lens = kvs.lens.segment(seg.begin, seg.end);
        continue;
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
  p.ids = std::shared_ptr<const std::vector<int>>(ring, &ring->server_ids());
  p.sink = std::move(sink);
  p.cb = std::move(cb);
  if (p.cb) p.cb_token = CallbackToken(&callbacks_);
  // SliceKeys checked that the keys are sorted and unique, and so is each
  // slice.
  Dispatch(ts, push, pull, cmd, priority, ring->epoch(),
           KeyOrder::kSortedUnique, std::move(p), std::move(slices));
  return ts;
}

int64_t KVWorkerCore::Impl::SubmitSliced(
    bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
    std::vector<std::pair<bool, RawKVs>> sliced, PullSink sink, Callback cb) {
  const int64_t ts = tracker()->NewRequest();
  CountRequest(push, pull, kvs.keys.size());
  Status s = Validate(push, kvs);
  auto ids =
      std::make_shared<const std::vector<int>>(app_->node()->server_ids());
  if (s.ok() && sliced.size() != ids->size()) {
    s = Status::InvalidArgument("the slicer made " +
                                std::to_string(sliced.size()) + " slices for " +
                                std::to_string(ids->size()) + " servers");
  }
  const size_t n = kvs.keys.size();
  Pending p;
  p.pull = pull;
  p.keys = kvs.keys;
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
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  // The application's slicer may repeat a key within a slice.
  Dispatch(ts, push, pull, cmd, priority, ring ? ring->epoch() : 0,
           KeyOrder::kUnknown, std::move(p), std::move(slices));
  return ts;
}

void KVWorkerCore::Impl::Dispatch(int64_t ts, bool push, bool pull, int cmd,
                                  int priority, uint64_t epoch, KeyOrder order,
                                  Pending p,
                                  std::vector<std::pair<int, RawKVs>> slices) {
  std::vector<int> recipients;
  recipients.reserve(slices.size());
  for (const auto& s : slices) recipients.push_back(s.first);
  p.responses.resize(p.plan.counts.size());
  if (recipients.empty()) {
    // Nothing to send (no keys): complete now, as ps-lite does.
    if (pull && p.sink.values) p.sink.values(0);
    if (pull && p.sink.lens) p.sink.lens(0);
    if (p.cb) p.cb();
    tracker()->Expect(ts, {});
    return;
  }
  const int64_t clock = clock_.load();
  const bool replicated = app_->node()->ring_replicas() > 0;
  p.push = push;
  p.cmd = cmd;
  p.priority = priority;
  p.clock = clock;
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
  {
    MutexLock lock(&mu_);
    pending_[ts] = std::move(p);
  }
  tracker()->Expect(ts, recipients);
  const int64_t done_below = replicated ? tracker()->OldestOpen() : 0;
  for (auto& s : slices) {
    Message msg = NewRequest(ts, s.first, clock);
    msg.meta.push = push;
    msg.meta.pull = pull;
    msg.meta.cmd = cmd;
    msg.meta.priority = priority;
    msg.meta.epoch = epoch;
    msg.meta.done_below = done_below;
    AddKVFrames(s.second, &msg, /*keys_as_requested=*/false, order);
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
    tracker()->Fail(ts, st);
    Forget(ts);
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
  AddKVFrames(kvs, &msg);
  p->resent[slot] = heir;
  resent_->Add();
  *out = std::move(msg);
  return true;
}

void KVWorkerCore::Impl::OnFailover(int dead, const Status& status) {
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
    if (slot >= ids.size() || it->second.resent[slot] != 0) continue;
    owed.emplace_back(ts, slot);
  }
  {
    MutexLock lock(&mu_);
    for (const auto& p : pending_) {
      const std::vector<int>& to = p.second.resent;
      for (size_t slot = 0; slot < to.size(); ++slot) {
        if (to[slot] == dead) owed.emplace_back(p.first, slot);
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
  for (int64_t ts : failed) {
    tracker()->Fail(ts, status);
    Forget(ts);
  }
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
      tracker()->Fail(ts, st);
      Forget(ts);
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

void KVWorkerCore::Impl::Process(Message& msg) {
  const int64_t ts = msg.meta.timestamp;
  // The answer to a resend stands for the dead server's (OnFailover).
  const int sender =
      msg.meta.resend_for != 0 ? msg.meta.resend_for : msg.meta.sender;
  if (msg.meta.request || !tracker()->Expecting(ts, sender)) return;
  if (msg.meta.status_code != 0) return;  // The customer fails the request.
  RawKVs raw;
  const Options& options = app_->node()->options();
  Status s = ParseKVFrames(
      msg, value_bytes_,
      KVLimits{options.max_keys_per_request, options.max_frame_mb}, &raw);
  Pending done;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return;
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
      pending_.erase(it);
    } else {
      it->second.responses[slot] = std::move(raw);
      if (tracker()->Outstanding(ts) > 1) return;
      done = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (s.ok() && done.pull) s = Assemble(done);
  if (!s.ok()) {
    LOG(WARNING) << "request " << ts << " failed: " << s;
    tracker()->Fail(ts, s);
    return;
  }
  if (done.cb) done.cb();
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
  // The servers on the ring: those that failed over are gone.
  std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
  std::vector<int> ids = ring ? ring->server_ids() : app_->node()->server_ids();
  tracker()->Expect(ts, ids);
  for (int id : ids) {
    Message msg = NewRequest(ts, id, clock);
    msg.meta.clock_tick = true;
    Status st = app_->node()->Send(std::move(msg));
    if (!st.ok()) {
      tracker()->Fail(ts, st);
      break;
    }
  }
  return ts;
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

int KVWorkerCore::Clock() { return ApiTimestamp(impl_->Clock()); }

int64_t KVWorkerCore::clock() const { return impl_->clock(); }

const std::vector<Range>& KVWorkerCore::ServerKeyRanges() {
  return impl_->ServerKeyRanges();
}

}  // namespace ps
