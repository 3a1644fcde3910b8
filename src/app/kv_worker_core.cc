// The worker's side of key-value requests: validation, slicing by the key
// ring, sending one message per server, and reassembling pulled values in
// the order of the request's keys.

#include <glog/logging.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "partition/key_ring.h"
#include "ps/internal/kv_core.h"

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

// The error for keys[i] not above keys[i - 1].
Status Unsorted(const Key* keys, size_t i) {
  return Status::InvalidArgument(
      "keys must be sorted and unique; key " + std::to_string(i) + " (" +
      std::to_string(keys[i]) + ") follows " + std::to_string(keys[i - 1]));
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
    app_->set_kv_handler([this](Message& msg) { Process(msg); },
                         [this](int ts, const Status&) { Forget(ts); });
    // A key-value response runs no application code unless its request has
    // a callback: while none has, the receive thread may handle responses
    // itself (copying pulled values into the waiting caller's buffer).
    app_->set_inline_predicate([this](const Meta& meta) {
      return !meta.request && !meta.simple_app &&
             callbacks_.load(std::memory_order_acquire) == 0;
    });
  }

  ~Impl() {
    app_->set_inline_predicate(nullptr);
    app_->set_kv_handler(nullptr, nullptr);
  }

  int Submit(bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
             PullSink sink, Callback cb);
  int SubmitSliced(bool push, bool pull, int cmd, int priority,
                   const RawKVs& kvs,
                   std::vector<std::pair<bool, RawKVs>> slices, PullSink sink,
                   Callback cb);
  Status Wait(int ts) { return app_->Wait(ts); }
  int Clock();
  int64_t clock() const { return clock_.load(); }
  const std::vector<Range>& ServerKeyRanges() {
    return app_->postoffice()->GetServerKeyRanges();
  }

 private:
  struct Pending {
    bool pull = false;
    SArray<Key> keys;
    std::vector<uint16_t> owner;    // Server rank of every key (empty
                                    // when the ring has one server).
    std::vector<size_t> counts;     // Keys per server rank.
    std::vector<RawKVs> responses;  // By server rank.
    PullSink sink;
    Callback cb;
    CallbackToken cb_token;  // Held while cb is set.
  };

  // Where each server's keys and values lie in a request (indices into the
  // keys, byte offsets into the values), by server rank.
  struct SliceBounds {
    std::vector<size_t> first, last;  // first == n: the server has no keys.
    std::vector<size_t> val_begin, val_bytes;
    // The request's shape: a push with values, with lens, and the bytes of
    // every key's values when there are no lens.
    bool has_vals = false;
    bool has_lens = false;
    size_t bytes_per_key = 0;
  };

  RequestTracker* tracker() { return app_->customer()->tracker(); }
  Status Validate(bool push, const RawKVs& kvs) const;
  Status CheckShape(bool push, const RawKVs& kvs) const;
  // One pass over the keys: checks they are sorted and unique (and lens),
  // fills p->owner (only with several servers) and p->counts, and the
  // bounds of every server's slice.
  Status Scan(const KeyRing& ring, bool push, const RawKVs& kvs, Pending* p,
              SliceBounds* b) const;
  StatusOr<std::shared_ptr<const KeyRing>> Ring();
  void Dispatch(int ts, bool push, bool pull, int cmd, int priority,
                uint64_t epoch, Pending pending,
                std::vector<std::pair<int, RawKVs>> slices);
  void Process(Message& msg);
  // A request of this app to `recipient`, with no frames yet.
  Message NewRequest(int ts, int recipient, int64_t clock) const;
  Status Assemble(const Pending& p) const;
  void Forget(int ts) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(ts);
  }

  AppImpl* const app_;
  const size_t value_bytes_;

  std::atomic<int64_t> clock_{0};  // Iterations ended (Clock calls).
  std::atomic<int> callbacks_{0};  // Requests whose callback is pending.

  std::mutex mu_;
  std::unordered_map<int, Pending> pending_;  // Guarded by mu_.
  std::shared_ptr<const KeyRing> ring_;       // Guarded by mu_.
};

// Submit checks the same in Scan, in the pass that slices; a request the
// application sliced itself is checked here.
Status KVWorkerCore::Impl::Validate(bool push, const RawKVs& kvs) const {
  const size_t n = kvs.keys.size();
  for (size_t i = 1; i < n; ++i) {
    if (kvs.keys[i - 1] >= kvs.keys[i]) return Unsorted(kvs.keys.data(), i);
  }
  PS_RETURN_IF_ERROR(CheckShape(push, kvs));
  if (!push || kvs.lens.empty()) return Status::OK();
  size_t total = 0;
  for (int len : kvs.lens) {
    if (len < 0) return Status::InvalidArgument("negative length in lens");
    total += static_cast<size_t>(len);
  }
  const size_t nvals = kvs.vals.size() / value_bytes_;
  if (total != nvals) {
    return Status::InvalidArgument("lens add up to " + std::to_string(total) +
                                   " values, got " + std::to_string(nvals));
  }
  return Status::OK();
}

StatusOr<std::shared_ptr<const KeyRing>> KVWorkerCore::Impl::Ring() {
  RingInfo info = app_->node()->ring_info();
  if (info.server_ids.empty()) {
    return Status::Aborted("the node has no key ring (call ps::Start first)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ring_ || ring_->epoch() != info.epoch) {
    int vnodes = info.virtual_nodes > 0 ? info.virtual_nodes
                                        : KeyRing::kDefaultVirtualNodes;
    ring_ =
        std::make_shared<const KeyRing>(info.server_ids, vnodes, info.epoch);
  }
  return ring_;
}

// The shape checks of a push that do not look at every key: lens against
// keys, values against lens or keys.
Status KVWorkerCore::Impl::CheckShape(bool push, const RawKVs& kvs) const {
  if (!push) return Status::OK();
  const size_t n = kvs.keys.size();
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

Status KVWorkerCore::Impl::Scan(const KeyRing& ring, bool push,
                                const RawKVs& kvs, Pending* p,
                                SliceBounds* b) const {
  const size_t n = kvs.keys.size();
  const size_t num_servers = ring.num_servers();
  b->has_vals = push && !kvs.vals.empty();
  b->has_lens = push && !kvs.lens.empty();
  b->bytes_per_key =
      b->has_vals && !b->has_lens && n > 0 ? kvs.vals.size() / n : 0;
  const bool has_lens = b->has_lens;
  const size_t bytes_per_key = b->bytes_per_key;
  const Key* keys = kvs.keys.data();
  const int* lens = has_lens ? kvs.lens.data() : nullptr;
  p->counts.assign(num_servers, 0);
  b->first.assign(num_servers, n);
  b->last.assign(num_servers, 0);
  b->val_begin.assign(num_servers, 0);
  b->val_bytes.assign(num_servers, 0);
  size_t bad = 0;         // The first key out of order, if any (0: none).
  bool negative = false;  // A negative entry in lens.
  size_t offset = 0;      // Value bytes so far.
  if (num_servers == 1) {
    // One server owns everything: no lookups, and no owner per key (a
    // single response is taken as it is).
    for (size_t i = 1; i < n; ++i) {
      if (keys[i - 1] >= keys[i]) {
        bad = i;
        break;
      }
    }
    if (has_lens) {
      for (size_t i = 0; i < n; ++i) {
        negative |= lens[i] < 0;
        offset += static_cast<size_t>(lens[i]) * value_bytes_;
      }
    } else {
      offset = bytes_per_key * n;
    }
    if (n > 0) {
      p->counts[0] = n;
      b->first[0] = 0;
      b->last[0] = n - 1;
      b->val_bytes[0] = offset;
    }
  } else {
    p->owner.resize(n);
    uint16_t* owner = p->owner.data();
    size_t* counts = p->counts.data();
    for (size_t i = 0; i < n; ++i) {
      const Key key = keys[i];
      if (i > 0 && keys[i - 1] >= key) {
        bad = i;
        break;
      }
      const uint16_t s = static_cast<uint16_t>(ring.OwnerIndex(key));
      owner[i] = s;
      ++counts[s];
      size_t bytes = bytes_per_key;
      if (has_lens) {
        negative |= lens[i] < 0;
        bytes = static_cast<size_t>(lens[i]) * value_bytes_;
      }
      if (b->first[s] == n) {
        b->first[s] = i;
        b->val_begin[s] = offset;
      }
      b->last[s] = i;
      b->val_bytes[s] += bytes;
      offset += bytes;
    }
  }
  if (bad != 0) return Unsorted(keys, bad);
  if (negative) return Status::InvalidArgument("negative length in lens");
  if (has_lens && offset != kvs.vals.size()) {
    return Status::InvalidArgument(
        "lens add up to " + std::to_string(offset / value_bytes_) +
        " values, got " + std::to_string(kvs.vals.size() / value_bytes_));
  }
  return Status::OK();
}

int KVWorkerCore::Impl::Submit(bool push, bool pull, int cmd, int priority,
                               const RawKVs& kvs, PullSink sink, Callback cb) {
  int ts = tracker()->NewRequest();
  Status s = CheckShape(push, kvs);
  auto ring = Ring();
  if (s.ok() && !ring.ok()) s = ring.status();
  Pending p;
  SliceBounds bounds;
  if (s.ok()) s = Scan(*ring.value(), push, kvs, &p, &bounds);
  if (!s.ok()) {
    tracker()->Fail(ts, s);
    return ts;
  }
  const KeyRing& r = *ring.value();
  const size_t n = kvs.keys.size();
  const size_t num_servers = r.num_servers();
  p.pull = pull;
  p.keys = kvs.keys;
  p.sink = std::move(sink);
  p.cb = std::move(cb);
  if (p.cb) p.cb_token = CallbackToken(&callbacks_);
  const bool has_vals = bounds.has_vals;
  const bool has_lens = bounds.has_lens;
  const size_t bytes_per_key = bounds.bytes_per_key;
  const std::vector<size_t>& first = bounds.first;
  const std::vector<size_t>& last = bounds.last;
  const std::vector<size_t>& val_begin = bounds.val_begin;
  const std::vector<size_t>& val_bytes = bounds.val_bytes;
  // A server whose keys are one contiguous run gets views of the caller's
  // arrays (no copy); the others get their keys, values and lens gathered
  // in one more pass, into arrays allocated once at their final size.
  std::vector<std::pair<int, RawKVs>> slices;
  slices.reserve(num_servers);
  struct Cursor {
    Key* keys = nullptr;  // nullptr: this server is not gathered.
    char* vals = nullptr;
    int* lens = nullptr;
  };
  std::vector<Cursor> gather(num_servers);
  bool any_gather = false;
  for (size_t srv = 0; srv < num_servers; ++srv) {
    if (p.counts[srv] == 0) continue;
    slices.emplace_back(static_cast<int>(srv), RawKVs());
    RawKVs& out = slices.back().second;
    if (last[srv] - first[srv] + 1 == p.counts[srv]) {
      out.keys = kvs.keys.segment(first[srv], last[srv] + 1);
      if (has_vals) {
        out.vals =
            kvs.vals.segment(val_begin[srv], val_begin[srv] + val_bytes[srv]);
      }
      if (has_lens) out.lens = kvs.lens.segment(first[srv], last[srv] + 1);
      continue;
    }
    any_gather = true;
    Cursor& c = gather[srv];
    out.keys = UninitializedArray<Key>(p.counts[srv]);
    c.keys = out.keys.data();
    if (has_vals) {
      out.vals = UninitializedArray<char>(val_bytes[srv]);
      c.vals = out.vals.data();
    }
    if (has_lens) {
      out.lens = UninitializedArray<int>(p.counts[srv]);
      c.lens = out.lens.data();
    }
  }
  if (any_gather) {
    const Key* keys = kvs.keys.data();
    const char* vals = has_vals ? kvs.vals.data() : nullptr;
    const int* lens = has_lens ? kvs.lens.data() : nullptr;
    const uint16_t* owner = p.owner.data();
    Cursor* cursors = gather.data();
    for (size_t i = 0; i < n; ++i) {
      Cursor& c = cursors[owner[i]];
      const size_t bytes = has_lens
                               ? static_cast<size_t>(lens[i]) * value_bytes_
                               : bytes_per_key;
      if (c.keys != nullptr) {
        *c.keys++ = keys[i];
        if (has_vals) {
          CopyValue(c.vals, vals, bytes);
          c.vals += bytes;
        }
        if (has_lens) *c.lens++ = lens[i];
      }
      vals += has_vals ? bytes : 0;
    }
  }
  std::vector<int> ids = r.server_ids();
  for (auto& slice : slices) slice.first = ids[slice.first];
  Dispatch(ts, push, pull, cmd, priority, r.epoch(), std::move(p),
           std::move(slices));
  return ts;
}

int KVWorkerCore::Impl::SubmitSliced(
    bool push, bool pull, int cmd, int priority, const RawKVs& kvs,
    std::vector<std::pair<bool, RawKVs>> sliced, PullSink sink, Callback cb) {
  int ts = tracker()->NewRequest();
  Status s = Validate(push, kvs);
  std::vector<int> ids = app_->node()->server_ids();
  if (s.ok() && sliced.size() != ids.size()) {
    s = Status::InvalidArgument("the slicer made " +
                                std::to_string(sliced.size()) + " slices for " +
                                std::to_string(ids.size()) + " servers");
  }
  const size_t n = kvs.keys.size();
  Pending p;
  p.pull = pull;
  p.keys = kvs.keys;
  p.owner.assign(n, UINT16_MAX);
  p.counts.assign(ids.size(), 0);
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
      p.owner[pos - kvs.keys.begin()] = static_cast<uint16_t>(r);
    }
    p.counts[r] = sk.size();
    slices.emplace_back(ids[r], std::move(sliced[r].second));
  }
  for (size_t i = 0; s.ok() && i < n; ++i) {
    if (p.owner[i] == UINT16_MAX) {
      s = Status::InvalidArgument("the slicer left out key " +
                                  std::to_string(kvs.keys[i]));
    }
  }
  if (!s.ok()) {
    tracker()->Fail(ts, s);
    return ts;
  }
  Dispatch(ts, push, pull, cmd, priority, app_->node()->ring_info().epoch,
           std::move(p), std::move(slices));
  return ts;
}

void KVWorkerCore::Impl::Dispatch(int ts, bool push, bool pull, int cmd,
                                  int priority, uint64_t epoch, Pending p,
                                  std::vector<std::pair<int, RawKVs>> slices) {
  std::vector<int> recipients;
  for (const auto& s : slices) recipients.push_back(s.first);
  p.responses.resize(p.counts.size());
  if (recipients.empty()) {
    // Nothing to send (no keys): complete now, as ps-lite does.
    if (pull && p.sink.values) p.sink.values(0);
    if (pull && p.sink.lens) p.sink.lens(0);
    if (p.cb) p.cb();
    tracker()->Expect(ts, {});
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[ts] = std::move(p);
  }
  tracker()->Expect(ts, recipients);
  for (auto& s : slices) {
    Message msg = NewRequest(ts, s.first, clock_.load());
    msg.meta.push = push;
    msg.meta.pull = pull;
    msg.meta.cmd = cmd;
    msg.meta.priority = priority;
    msg.meta.epoch = epoch;
    AddKVFrames(s.second, &msg);
    Status st = app_->node()->Send(std::move(msg));
    if (!st.ok()) {
      tracker()->Fail(ts, st);
      Forget(ts);
      return;
    }
  }
}

Message KVWorkerCore::Impl::NewRequest(int ts, int recipient,
                                       int64_t clock) const {
  Message msg;
  msg.meta.app_id = app_->app_id();
  msg.meta.customer_id = app_->customer_id();
  msg.meta.request = true;
  msg.meta.timestamp = ts;
  msg.meta.clock = clock;
  msg.meta.value_bytes = static_cast<int>(value_bytes_);
  msg.meta.recipient = recipient;
  return msg;
}

void KVWorkerCore::Impl::Process(Message& msg) {
  const int ts = msg.meta.timestamp;
  const int sender = msg.meta.sender;
  if (msg.meta.request || !tracker()->Expecting(ts, sender)) return;
  if (msg.meta.status_code != 0) return;  // The customer fails the request.
  RawKVs raw;
  Status s = ParseKVFrames(msg, value_bytes_, &raw);
  Pending done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(ts);
    if (it == pending_.end()) return;
    int rank = Node::IdToRank(sender);
    if (s.ok() &&
        (rank < 0 || rank >= static_cast<int>(it->second.responses.size()))) {
      s = Status::Corruption("response from unexpected node " +
                             std::to_string(sender));
    }
    if (!s.ok()) {
      pending_.erase(it);
    } else {
      it->second.responses[rank] = std::move(raw);
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
  size_t total = 0;
  int responders = 0;
  std::vector<size_t> bytes_per_key(num, 0);
  for (size_t r = 0; r < num; ++r) {
    const RawKVs& res = p.responses[r];
    if (p.counts[r] == 0) continue;
    ++responders;
    if (res.keys.size() != p.counts[r]) {
      return Status::Corruption("server rank " + std::to_string(r) +
                                " answered " + std::to_string(res.keys.size()) +
                                " keys for " + std::to_string(p.counts[r]) +
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
  // One server answered everything: take its buffer as is when allowed.
  if (responders == 1) {
    size_t r = 0;
    while (p.counts[r] == 0) ++r;
    const RawKVs& res = p.responses[r];
    for (size_t i = 0; i < n; ++i) {
      if (res.keys[i] != p.keys[i]) {
        return Status::Corruption("server answered key " +
                                  std::to_string(res.keys[i]) +
                                  " in place of " + std::to_string(p.keys[i]));
      }
    }
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
  for (size_t i = 0; i < n; ++i) {
    const size_t r = p.owner[i];
    const RawKVs& res = p.responses[r];
    const size_t c = cursor[r]++;
    if (res.keys[c] != p.keys[i]) {
      return Status::Corruption("server rank " + std::to_string(r) +
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
int KVWorkerCore::Impl::Clock() {
  int ts = tracker()->NewRequest();
  const int64_t clock = clock_.fetch_add(1) + 1;
  std::vector<int> ids = app_->node()->server_ids();
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
  return impl_->Submit(push, pull, cmd, priority, kvs, std::move(sink),
                       std::move(cb));
}

int KVWorkerCore::SubmitSliced(bool push, bool pull, int cmd, int priority,
                               const RawKVs& kvs,
                               std::vector<std::pair<bool, RawKVs>> slices,
                               PullSink sink, Callback cb) {
  return impl_->SubmitSliced(push, pull, cmd, priority, kvs, std::move(slices),
                             std::move(sink), std::move(cb));
}

Status KVWorkerCore::Wait(int timestamp) { return impl_->Wait(timestamp); }

int KVWorkerCore::Clock() { return impl_->Clock(); }

int64_t KVWorkerCore::clock() const { return impl_->clock(); }

const std::vector<Range>& KVWorkerCore::ServerKeyRanges() {
  return impl_->ServerKeyRanges();
}

}  // namespace ps
