// The server's side of key-value requests: validate, order by the
// consistency controller, hand to the application's handle, and send its
// answer back.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "app/app_impl.h"
#include "app/key_cache.h"
#include "app/kv_frames.h"
#include "consistency/controller.h"
#include "metrics/metrics.h"
#include "partition/key_ring.h"
#include "ps/internal/kv_core.h"
#include "util/clock.h"
#include "util/coding.h"
#include "util/log_limiter.h"
#include "util/mutex.h"

namespace ps {

class KVServerCore::Impl {
 public:
  Impl(AppImpl* app, size_t value_bytes, Handler handler)
      : app_(app),
        value_bytes_(value_bytes),
        handler_(std::move(handler)),
        config_(app->node()->options().consistency),
        key_cache_(static_cast<size_t>(app->node()->options().key_cache_mb)
                   << 20) {
    bsp_.store(config_.mode == ConsistencyConfig::Mode::kBsp,
               std::memory_order_relaxed);
    InitMetrics();
    app_->set_kv_handler(
        [this](Message& msg) {
          Process(msg);
          return true;
        },
        nullptr);
    app_->set_peer_failure_handler(
        [this](int peer, const Status& s) { OnPeerFailed(peer, s); });
    app_->set_watch_handler([this](int64_t ms) { LogLongWaits(ms); });
    app_->set_failover_handler(
        [this](int dead, const Status&) { OnFailover(dead); });
    app_->set_ring_handler([this] { OnRingChanged(); });
    app_->set_tick_handler([this] { ResendUnacknowledged(); });
    app_->set_worker_handler([this](int worker, WorkerEvent event) {
      OnWorkerChange(worker, event);
    });
    app_->node()->AddStateApp(app_->app_id());
    std::shared_ptr<const KeyRing> joined = app_->node()->joined_ring();
    const int me = app_->node()->my_id();
    bool handed_over = false;
    {
      MutexLock lock(&mu_);
      synced_ring_ = app_->node()->key_ring();
      handover_ring_ = synced_ring_;
      ring_seen_.store(synced_ring_ ? synced_ring_->epoch() : 0,
                       std::memory_order_relaxed);
      if (joined) {
        // A server that joined the running cluster: its ranges' state comes
        // from every other server of the ring it joined under; its copies
        // are made once that has arrived.
        synced_ring_ = nullptr;
        for (int id : joined->server_ids()) {
          if (id != me) awaiting_.insert(id);
        }
        handed_over = awaiting_.empty();
        holding_.store(!handed_over, std::memory_order_relaxed);
      }
    }
    if (handed_over) app_->node()->HandoverDone(app_->app_id());
  }
  ~Impl() {
    app_->node()->RemoveStateApp(app_->app_id());
    app_->node()->metrics()->RemoveCollector(collector_);
    app_->set_kv_handler(nullptr, nullptr);
    app_->set_peer_failure_handler(nullptr);
    app_->set_watch_handler(nullptr);
    app_->set_failover_handler(nullptr);
    app_->set_ring_handler(nullptr);
    app_->set_tick_handler(nullptr);
    app_->set_worker_handler(nullptr);
    MutexLock lock(&mu_);
    if (controller_ && (config_.mode != ConsistencyConfig::Mode::kAsp ||
                        app_->node()->options().verbose > 0)) {
      LOG(INFO) << "server app " << app_->app_id() << " consistency "
                << config_.ToString() << ": "
                << controller_->stats().ToString();
    }
  }

  Status SetConsistency(const std::string& spec) {
    auto config = ConsistencyConfig::Parse(spec);
    if (!config.ok()) return config.status();
    MutexLock lock(&mu_);
    if (controller_ && !(controller_->config() == *config)) {
      return Status::InvalidArgument(
          "consistency of server app " + std::to_string(app_->app_id()) +
          " is already " + config_.ToString() +
          ": set it before the first request arrives");
    }
    config_ = *config;
    bsp_.store(config_.mode == ConsistencyConfig::Mode::kBsp,
               std::memory_order_relaxed);
    return Status::OK();
  }

  ConsistencyStats stats() const {
    MutexLock lock(&mu_);
    return controller_ ? controller_->stats() : ConsistencyStats();
  }

  void set_state_hooks(StateHooks hooks) {
    MutexLock lock(&mu_);
    hooks_ = std::move(hooks);
  }

  // `api` is the timestamp the handle saw (ps/internal/timestamp.h).
  void Respond(int cmd, bool push, bool pull, int sender, int api,
               int customer_id, const RawKVs& res, const Status& error) {
    const int64_t timestamp = app_->ResolveRequest(sender, customer_id, api);
    if (timestamp == -1 && api >= 0) {
      LOG(WARNING) << "an answer to node " << sender << " dropped: it sent no "
                   << "request with timestamp " << api;
      return;
    }
    {
      // A deferred push was acknowledged when it arrived; the handle's
      // answer when it is finally applied goes nowhere.
      MutexLock lock(&mu_);
      auto it = acked_.find(std::make_tuple(sender, customer_id, timestamp));
      if (it != acked_.end()) {
        if (--it->second == 0) acked_.erase(it);
        if (!error.ok()) {
          LOG(WARNING) << "a deferred push from node " << sender
                       << " (acknowledged already) was refused by the "
                          "handle: "
                       << error;
        }
        return;
      }
    }
    Send(cmd, push, pull, sender, timestamp, customer_id, res, error);
  }

 private:
  // Metrics (docs/operations.md). Counters and histograms are touched on
  // the data path (relaxed atomic adds); the consistency controller's
  // figures are read at each scrape.
  void InitMetrics() {
    metrics::Registry* r = app_->node()->metrics();
    const std::string app =
        metrics::Label("app", std::to_string(app_->app_id()));
    const KVRequestCounters counters = GetKVRequestCounters(r, app_->app_id());
    std::copy(counters.requests, counters.requests + 3, requests_);
    std::copy(counters.keys, counters.keys + 3, keys_);
    const struct {
      metrics::Counter** counter;
      const char* name;
      const char* help;
    } counter_table[] = {
        {&rejected_metric_, "ember_rejected_requests_total",
         "Requests refused as malformed or too large"},
        {&copies_sent_, "ember_replica_copies_sent_total",
         "Copies of pushes forwarded to the servers that replicate this "
         "server's data"},
        {&copies_applied_, "ember_replica_copies_applied_total",
         "Copies of other servers' pushes applied here"},
        {&copy_keys_resent_, "ember_replica_copy_keys_resent_total",
         "Copies sent as a key signature that their holder did not hold, "
         "sent again with their keys"},
        {&duplicates_, "ember_duplicate_pushes_total",
         "Pushes and copies received again (resent after failover, delivered "
         "twice, or late) and not applied again: a push is answered, a late "
         "copy dropped"},
        {&key_cache_hits_, "ember_key_cache_hits_total",
         "Requests whose keys came as a signature of keys kept here"},
        {&key_cache_misses_, "ember_key_cache_misses_total",
         "Requests refused for a signature of keys not kept here (the "
         "worker sends them again with their keys)"},
    };
    for (const auto& c : counter_table) {
      *c.counter = r->GetCounter(c.name, c.help, app);
    }
    pull_wait_ = r->GetHistogram(
        "ember_server_pull_wait_seconds",
        "From a pull's arrival to its answer leaving (includes waits for "
        "ssp/bsp)",
        app);
    push_apply_ =
        r->GetHistogram("ember_server_push_apply_seconds",
                        "Time the request handle takes to apply a push", app);
    collector_ = r->AddCollector([this, app](metrics::Writer* w) {
      ConsistencyStats s = stats();
      w->Counter("ember_consistency_wait_seconds_total",
                 "Time pulls waited for slower workers (ssp/bsp)", app,
                 s.wait_ms_total / 1000.0);
      w->Counter("ember_consistency_pulls_waited_total",
                 "Pulls not answerable on arrival (ssp/bsp)", app,
                 static_cast<double>(s.pulls_waited));
      w->Gauge("ember_consistency_min_clock",
               "The slowest live worker's clock, as this server knows it", app,
               static_cast<double>(s.min_clock));
      w->Gauge("ember_consistency_live_workers",
               "Live workers the consistency controller counts", app,
               s.live_workers);
      w->Gauge("ember_key_cache_bytes",
               "Bytes of keys kept for workers that repeat key sets", app,
               static_cast<double>(key_cache_.bytes()));
      w->Gauge("ember_dedup_entries",
               "Pushes the dedup table remembers (those whose worker may "
               "still resend them)",
               app, static_cast<double>(DedupEntries()));
    });
  }
  size_t DedupEntries() const {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& seen : applied_) n += seen.second.size();
    return n;
  }
  static int64_t NowUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void RunHandler(const RawRequest& r) {
    if (!r.push) {
      handler_(r);
      return;
    }
    const int64_t start = NowUs();
    handler_(r);
    push_apply_->ObserveUs(NowUs() - start);
  }

  void Send(int cmd, bool push, bool pull, int sender, int64_t timestamp,
            int customer_id, const RawKVs& res, const Status& error) {
    if (timestamp < 0) {
      // A request the handle saw under a local timestamp (replication).
      FinishLocal(cmd, push, pull, timestamp, res, error);
      return;
    }
    SendTo(cmd, push, pull, sender, timestamp, customer_id, res, error, 0,
           timestamp);
  }

  // The answer to (to, customer_id, timestamp); `handle_ts` is the
  // timestamp the handle saw (the pull's keys are held under it);
  // `resend_for` is echoed (docs/replication.md); `moved_epoch` goes with
  // a refusal for keys that moved (CheckOwned).
  void SendTo(int cmd, bool push, bool pull, int sender, int64_t timestamp,
              int customer_id, const RawKVs& res, const Status& error,
              int resend_for, int64_t handle_ts, uint64_t moved_epoch = 0,
              int key_cache = kKeyCacheNone) {
    bool keys_as_requested = false;
    if (pull && !push) {
      MutexLock lock(&mu_);
      auto it =
          pull_keys_.find(std::make_tuple(sender, customer_id, handle_ts));
      if (it != pull_keys_.end()) {
        keys_as_requested = error.ok() &&
                            res.keys.data() == it->second.keys.data() &&
                            res.keys.size() == it->second.keys.size();
        pull_wait_->ObserveUs(NowUs() - it->second.arrived_us);
        pull_keys_.erase(it);
      }
    }
    Message msg = AppMessage(app_->app_id(), customer_id, timestamp, sender,
                             /*request=*/false);
    msg.meta.push = push;
    msg.meta.pull = pull;
    msg.meta.cmd = cmd;
    msg.meta.value_bytes = static_cast<int>(value_bytes_);
    msg.meta.resend_for = resend_for;
    // bsp: the push counts once the worker says it reached every server of
    // its request (a push-pull counts on arrival).
    msg.meta.wants_commit =
        push && !pull && error.ok() && bsp_.load(std::memory_order_relaxed);
    if (!error.ok()) {
      msg.meta.status_code = static_cast<int>(error.code());
      msg.meta.status_message = error.message();
      msg.meta.moved_epoch = moved_epoch;
      msg.meta.key_cache = key_cache;
    } else {
      AddKVFrames(res, &msg, keys_as_requested);
    }
    Status s = app_->node()->Send(std::move(msg));
    if (!s.ok()) {
      LOG(WARNING) << "response to node " << sender << " lost: " << s;
    }
  }

  void Answer(const RawRequest& r, const Status& error) {
    Send(r.cmd, r.push, r.pull, r.sender, r.timestamp, r.customer_id, RawKVs(),
         error);
  }

  // On the customer thread, like every call into the controller.
  ConsistencyController* controller() {
    MutexLock lock(&mu_);
    if (!controller_) {
      ConsistencyController::Callbacks cb;
      cb.run = [this](const RawRequest& r) { RunHandler(r); };
      cb.run_acked = [this](const RawRequest& r) {
        {
          MutexLock l(&mu_);
          ++acked_[std::make_tuple(r.sender, r.customer_id, r.timestamp)];
        }
        RunHandler(r);
      };
      cb.ack = [this](const RawRequest& r) { Answer(r, Status::OK()); };
      cb.fail = [this](const RawRequest& r, const Status& s) { Answer(r, s); };
      controller_ = std::make_unique<ConsistencyController>(
          config_, app_->node()->GetNodeIds(kWorkerGroup), std::move(cb));
      if (config_.mode != ConsistencyConfig::Mode::kAsp) {
        LOG(INFO) << "server app " << app_->app_id() << ": consistency "
                  << config_.ToString();
      }
    }
    return controller_.get();
  }

  // The pulls the consistency controller holds, and on whom they wait.
  void LogLongWaits(int64_t older_than_ms) {
    MutexLock lock(&mu_);
    if (!controller_) return;
    for (const std::string& line :
         controller_->DescribeLongWaits(older_than_ms)) {
      LOG(WARNING) << "server app " << app_->app_id() << " ("
                   << config_.ToString() << "): " << line;
    }
  }

  void OnPeerFailed(int peer, const Status& status) {
    if (peer < 0) {
      controller()->OnFailAll(status);
    } else {
      controller()->OnWorkerFailed(peer, status);
    }
  }

  // Elastic workers (docs/consistency.md): the controller follows them.
  void OnWorkerChange(int worker, WorkerEvent event) {
    const Status status = Status::Unavailable(app_->node()->Describe(worker) +
                                              " is " + WorkerEventName(event));
    switch (event) {
      case WorkerEvent::kJoined:
        ForgetDoneBelow(worker);
        controller()->OnWorkerJoined(worker);
        return;
      case WorkerEvent::kBack:
        ForgetDoneBelow(worker);
        controller()->OnWorkerBack(worker);
        return;
      case WorkerEvent::kAway:
        controller()->OnWorkerAway(worker, status);
        return;
      case WorkerEvent::kGone:
        controller()->OnWorkerFailed(worker, status);
        return;
      case WorkerEvent::kNone:
        return;
    }
  }

  // A worker that joined or came back into its rank numbers its requests
  // afresh: what its earlier incarnation said it had every answer for says
  // nothing of them (StaleLocked).
  void ForgetDoneBelow(int worker) {
    MutexLock lock(&mu_);
    for (auto it = done_below_.begin(); it != done_below_.end();) {
      it = it->first.first == worker ? done_below_.erase(it) : std::next(it);
    }
  }

  // KVWorker::JoinClock's query: the clock the worker starts at here.
  // Only a worker (customer) that starts anew asks, before its first
  // request: its request numbers start afresh, so what the dedup table holds
  // of an earlier incarnation's would take its new pushes for duplicates.
  void AnswerClockQuery(const Meta& meta) {
    {
      MutexLock lock(&mu_);
      applied_.erase(std::make_pair(meta.sender, meta.customer_id));
      done_below_.erase(std::make_pair(meta.sender, meta.customer_id));
    }
    const std::pair<int64_t, bool> start = controller()->JoinClock(meta.sender);
    Message msg = AppMessage(app_->app_id(), meta.customer_id, meta.timestamp,
                             meta.sender, /*request=*/false);
    msg.meta.cmd = meta.cmd;
    msg.meta.clock_tick = true;
    msg.meta.clock = start.first;
    msg.meta.clock_query = start.second ? 2 : 1;
    msg.meta.value_bytes = static_cast<int>(value_bytes_);
    Status s = app_->node()->Send(std::move(msg));
    if (!s.ok()) {
      LOG(WARNING) << "clock answer to node " << meta.sender << " lost: " << s;
    }
  }

  void Process(Message& msg) {
    if (!msg.meta.request) {
      if (msg.meta.state_copy != 0) {
        OnStateAck(msg.meta);
      } else if (msg.meta.replica_of != 0) {
        OnReplicaAck(msg.meta);
      }
      return;
    }
    if (HoldForCopy(msg)) return;
    if (msg.meta.commit_notice) {
      NoteCommits(msg.meta);
      return;
    }
    if (HoldIfAhead(msg)) return;
    if (msg.meta.state_copy != 0) {
      LoadCopy(msg);
      return;
    }
    if (msg.meta.copy_attempt != 0 && msg.meta.replica_of != 0) {
      // A deferred push sent within a copy or hand-over: taken only in its
      // place in the newest sending (docs/replication.md, "Lost messages").
      bool take = false;
      {
        MutexLock lock(&mu_);
        take = StepLocked(msg.meta) == Step::kTake;
      }
      if (!take) {
        duplicates_->Add();
        SendAck(msg.meta, Status::OK());
        return;
      }
    }
    if (holding_.load(std::memory_order_relaxed) && msg.meta.replica_of == 0 &&
        !msg.meta.clock_tick) {
      // A server that joined: its own requests wait for its ranges' state.
      // (Only the customer thread reads or writes holding_.)
      Message held = SharingFrames(msg);
      MutexLock lock(&mu_);
      held_.push_back(std::move(held));
      return;
    }
    if (msg.meta.clock_tick && msg.meta.clock_query != 0) {
      AnswerClockQuery(msg.meta);
      return;
    }
    if (msg.meta.clock_tick) {
      RawRequest tick;
      CopyOrigin(msg.meta, &tick);
      tick.cmd = msg.meta.cmd;
      Answer(tick, Status::OK());
      NoteCommits(msg.meta);
      controller()->OnClock(msg.meta.sender, msg.meta.clock);
      return;
    }
    // A worker's key caching goes on to the copies of its push (Relay).
    Relay relay;
    if (msg.meta.replica_of == 0) relay.mode = msg.meta.key_cache;
    if (msg.meta.key_cache == kKeyCacheSigned &&
        !ResolveKeys(&msg, &relay.sig)) {
      return;
    }
    RawRequest req;
    CopyOrigin(msg.meta, &req);
    if (msg.meta.replica_of != 0) {
      // A copy forwarded by the server whose data it is: the handle sees
      // the worker's request.
      req.sender = msg.meta.origin_sender;
      req.customer_id = msg.meta.origin_customer;
      req.timestamp = msg.meta.origin_timestamp;
      req.handed_from = msg.meta.handed_from;
      req.committed = msg.meta.committed;
    }
    req.cmd = msg.meta.cmd;
    req.push = msg.meta.push;
    req.pull = msg.meta.pull;
    req.clock = msg.meta.clock;
    const Options& options = app_->node()->options();
    Status s = ParseKVFrames(
        msg, value_bytes_,
        KVLimits{options.max_keys_per_request, options.max_frame_mb}, &req.kvs);
    const int op = req.push && req.pull ? 2 : req.push ? 0 : 1;
    requests_[op]->Add();
    keys_[op]->Add(req.kvs.keys.size());
    const int max_keys = options.max_keys_per_request;
    if (s.ok() && req.kvs.keys.size() > static_cast<size_t>(max_keys)) {
      s = Status::InvalidArgument(
          "a request of " + std::to_string(req.kvs.keys.size()) +
          " keys; EMBER_MAX_KEYS_PER_REQUEST is " + std::to_string(max_keys));
    }
    uint64_t moved_epoch = 0;  // Set when refused for keys that moved.
    if (s.ok() && msg.meta.replica_of == 0 && msg.meta.epoch != 0 &&
        msg.meta.epoch < app_->node()->ring_epoch() &&
        !AppliedHere(msg.meta, req)) {
      s = CheckOwned(msg.meta.epoch, req.kvs.keys, &moved_epoch);
    }
    if (!s.ok()) {
      ++rejected_;
      rejected_metric_->Add();
      uint64_t left_out = 0;
      if (reject_log_.Allow(std::to_string(req.sender), Clock::Real()->NowMs(),
                            &left_out)) {
        LOG(WARNING) << "rejecting request " << msg.meta.DebugString() << ": "
                     << s << LogLimiter::Since(left_out);
      }
      if (msg.meta.replica_of != 0) {
        SendAck(msg.meta, s);  // To the forwarder, not the worker.
      } else if (req.timestamp < 0) {
        Answer(req, s);
      } else {
        // A resent part's answer names whose part it is, as its success
        // would; a refusal for moved keys says this ring's epoch, so the
        // worker re-routes the part (docs/replication.md, "Re-routing").
        SendTo(req.cmd, req.push, req.pull, req.sender, req.timestamp,
               req.customer_id, RawKVs(), s, msg.meta.resend_for, req.timestamp,
               moved_epoch);
      }
      return;
    }
    if (msg.meta.key_cache == kKeyCacheKeep) {
      // A worker's keys, or (a copy) those the forwarding server relays.
      key_cache_.Keep(msg.meta.sender, req.kvs.keys);
    }
    if (!Replicate(msg.meta, &req, relay)) return;
    if (req.pull && !req.push && !req.kvs.keys.empty()) {
      // A response that answers with these very keys (the handle passed
      // the request's keys on, as ps-lite's handles do) leaves them out
      // (keys_as_requested): a third of a 4-byte pull's bytes.
      MutexLock lock(&mu_);
      if (pull_keys_.size() < kMaxPullKeys) {
        pull_keys_[std::make_tuple(req.sender, req.customer_id,
                                   req.timestamp)] = {req.kvs.keys, NowUs()};
      }
    }
    NoteCommits(msg.meta);
    controller()->OnRequest(std::move(req));
  }

  // bsp commits (docs/consistency.md, "A restart under bsp is exact"): what
  // a worker's message (or a server's forwarded commit notice) says of the
  // worker's pushes. When pushes of this server's data become committed,
  // the servers that keep copies of it learn it too: their copies of those
  // pushes wait for the same commit.
  void NoteCommits(const Meta& meta) {
    if (meta.pushed_below <= 0 || !bsp_.load(std::memory_order_relaxed)) {
      return;
    }
    const bool forwarded = meta.replica_of != 0;
    const int worker = forwarded ? meta.origin_sender : meta.sender;
    const int customer = forwarded ? meta.origin_customer : meta.customer_id;
    const size_t own =
        controller()->OnCommitted(worker, customer, meta.pushed_below);
    if (own == 0 || forwarded || app_->node()->ring_replicas() == 0) return;
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    if (!ring) return;
    const int me = app_->node()->my_id();
    for (int t : TargetsOf(ring, me)) {
      Message m = AppMessage(app_->app_id(), app_->customer_id(), 0, t,
                             /*request=*/true);
      m.meta.commit_notice = true;
      m.meta.replica_of = me;
      m.meta.origin_sender = worker;
      m.meta.origin_customer = customer;
      m.meta.pushed_below = meta.pushed_below;
      Status st = app_->node()->Send(std::move(m));
      if (!st.ok()) {
        VLOG(1) << "a commit notice to node " << t << " lost: " << st;
      }
    }
  }

  // A request sliced by the ring of an older epoch: refused if it holds a
  // key this server does not own under the current ring (the keys moved
  // since), so that it is never applied where the key no longer lives.
  // *moved_epoch is then the epoch of that ring (the answer carries it).
  // Whether push `req` is in the dedup table as applied here: a network
  // duplicate of a push applied before its keys moved. It is answered as a
  // duplicate (Replicate), not refused: a refusal can overtake the answer
  // of the push itself (which waits for its copies), and the worker would
  // re-route, and so apply again, a push applied here. Without copies
  // there is no dedup table (docs/replication.md, "Re-routing").
  bool AppliedHere(const Meta& meta, const RawRequest& req) {
    if (!req.push) return false;
    const int whose =
        meta.resend_for != 0 ? meta.resend_for : app_->node()->my_id();
    MutexLock lock(&mu_);
    const auto who = std::make_pair(req.sender, req.customer_id);
    if (StaleLocked(who, meta, req.timestamp)) return true;
    auto it = applied_.find(who);
    return it != applied_.end() &&
           it->second.count(std::make_pair(
               req.timestamp, DedupId(whose, meta.handed_from))) > 0;
  }

  // Whether a push (or its copy) with the worker's timestamp `ts` comes
  // from before what worker `who` has said it has every answer for: a
  // network duplicate delivered late, after the worker's done_below has
  // trimmed its entry from the dedup table. The deferred pushes of a state
  // copy (copy_attempt != 0) are exempt: acknowledged to the worker before
  // they were applied (bsp), they may well lie below it.
  bool StaleLocked(const std::pair<int, int>& who, const Meta& meta, int64_t ts)
      REQUIRES(mu_) {
    if (meta.copy_attempt != 0) return false;
    auto it = done_below_.find(who);
    return it != done_below_.end() && ts < it->second;
  }

  Status CheckOwned(uint64_t epoch, const SArray<Key>& keys,
                    uint64_t* moved_epoch) {
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    const int me = app_->node()->my_id();
    if (!ring) return Status::OK();
    for (Key k : keys) {
      if (ring->Owner(k) == me) continue;
      *moved_epoch = ring->epoch();
      return Status::Unavailable(
          "request sliced by ring epoch " + std::to_string(epoch) +
          " reached node " + std::to_string(me) + " at epoch " +
          std::to_string(ring->epoch()) + ", which does not own key " +
          std::to_string(k) + " now (node " + std::to_string(ring->Owner(k)) +
          " does): refused, not applied");
    }
    return Status::OK();
  }

  // Key caching (docs/protocol.md, "Key caching"): a request whose keys
  // frame is a signature gets the keys kept under it in its place, and true
  // (*sig: the signature). Not kept here (or no keys kept at all): the
  // request is refused, saying so, and false; the worker (or, for a copy,
  // the server that forwarded it) sends the part again with its keys. A
  // malformed signature is left for ParseKVFrames to refuse.
  bool ResolveKeys(Message* msg, KeySignature* sig) {
    if (msg->data.empty() || !ParseKeySignature(msg->data[0], sig).ok()) {
      return true;
    }
    const SArray<Key> keys = key_cache_.Find(msg->meta.sender, *sig);
    if (!keys.empty()) {
      key_cache_hits_->Add();
      msg->data[0] = SArray<char>(keys);
      msg->meta.key_cache = kKeyCacheNone;
      return true;
    }
    key_cache_misses_->Add();
    const bool off = key_cache_.max_bytes() == 0;
    const Status refused =
        Status::Unavailable(off ? "this server keeps no keys "
                                  "(EMBER_KEY_CACHE_MB=0)"
                                : "no keys kept under the request's "
                                  "signature");
    const int answer = off ? kKeyCacheOff : kKeyCacheUnknown;
    if (msg->meta.replica_of != 0) {
      SendAck(msg->meta, refused, /*incomplete=*/false, answer);
      return false;
    }
    SendTo(msg->meta.cmd, msg->meta.push, msg->meta.pull, msg->meta.sender,
           msg->meta.timestamp, msg->meta.customer_id, RawKVs(), refused,
           msg->meta.resend_for, msg->meta.timestamp, 0, answer);
    return false;
  }

  // --- Replication (docs/replication.md).
  //
  // A push to a server whose data is replicated is applied once (the
  // dedup table, by the worker's request identity and the server whose
  // data it is), forwarded to the servers that keep copies, and answered
  // once the handle has answered and every copy has been acknowledged. A
  // forwarded copy is applied through the same handle and acknowledged to
  // the server that forwarded it. The handle sees such requests under a
  // local, negative timestamp, so that answers find their way back.

  // How a worker's push used key caching, which its copies follow: a copy
  // of a push whose keys came as a signature goes as that signature, and
  // one whose keys the worker asked to keep asks the holder to keep them
  // (kept under the forwarding server's id). A holder that does not hold
  // the set refuses the copy, which then goes again with its keys
  // (OnCopyKeysRefused).
  struct Relay {
    int mode = kKeyCacheNone;  // the push's Meta::key_cache as received
    KeySignature sig;          // with kKeyCacheSigned
  };

  // A copy sent as a signature, kept until acknowledged in case the holder
  // refuses it: what ForwardCopy needs to send it again with its keys.
  struct SignedCopy {
    RawRequest req;
    int whose = 0;
    int64_t origin_ts = 0;
    int64_t done_below = 0;
    KeyOrder order = KeyOrder::kUnknown;
    int64_t pushed_below = 0;
  };

  // One request the handle sees under a local timestamp.
  struct Local {
    int reply_to = 0;  // the worker, or (a copy) the forwarding server
    int reply_customer = 0;
    int64_t reply_ts = 0;
    int resend_for = 0;     // echoed to the worker
    int replica_of = 0;     // a copy: its acknowledgement says whose data
    int64_t origin_ts = 0;  // the worker's timestamp
    std::vector<int> owed;  // servers yet to acknowledge their copy
    bool answered = false;  // the handle has answered
    // The handle's answer, held until every copy is acknowledged.
    int cmd = 0;
    bool push = false;
    bool pull = false;
    RawKVs res;
    Status error;
    // Its copies went as a signature (Relay).
    std::shared_ptr<const SignedCopy> signed_copy;
  };

  // Applies the dedup table to request `req` (meta: as received) and
  // forwards copies; false if it was answered already (a duplicate).
  bool Replicate(const Meta& meta, RawRequest* req, const Relay& relay) {
    const bool copy = meta.replica_of != 0;
    const bool plain = !copy && meta.resend_for == 0;
    if (plain && !req->push) return true;  // A pull: nothing to do.
    // Without replicas, a plain push needs no ring (no lock on this path).
    if (plain && app_->node()->ring_replicas() == 0) return true;
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    if (plain && (!ring || ring->replicas() == 0)) return true;
    const int me = app_->node()->my_id();
    const int whose =
        copy ? meta.replica_of : (meta.resend_for != 0 ? meta.resend_for : me);
    bool duplicate = false;
    bool stale = false;
    if (req->push) {
      const int64_t known_as = DedupId(whose, meta.handed_from);
      const auto who = std::make_pair(req->sender, req->customer_id);
      MutexLock lock(&mu_);
      stale = StaleLocked(who, meta, req->timestamp);
      if (!stale && meta.copy_attempt == 0) {
        int64_t& below = done_below_[who];
        below = std::max(below, meta.done_below);
      }
      auto& seen = applied_[who];
      // The worker will never resend below done_below.
      seen.erase(seen.begin(),
                 seen.lower_bound(std::make_pair(meta.done_below, 0)));
      duplicate = stale || !seen.emplace(req->timestamp, known_as).second;
      if (seen.size() > kMaxApplied) seen.erase(seen.begin());
    }
    if (stale) {
      // The worker has every answer of this request: it was applied when
      // it first came, and nobody waits for another answer. A copy is
      // dropped; a push is answered with an error, which the worker
      // ignores (it expects no answer), so that a worker restarted into its
      // rank without KVWorker::JoinClock, whose requests start afresh, is
      // told so rather than left waiting.
      duplicates_->Add();
      const Status late = Status::InvalidArgument(
          (copy ? "a copy of push " : "push ") +
          std::to_string(req->timestamp) + " of node " +
          std::to_string(req->sender) +
          " came after the worker said it had every answer below its "
          "timestamp: a late duplicate, not applied (a worker restarted "
          "into its rank calls KVWorker::JoinClock before its first "
          "request)");
      uint64_t left_out = 0;
      if (reject_log_.Allow("stale " + std::to_string(req->sender),
                            Clock::Real()->NowMs(), &left_out)) {
        LOG(INFO) << "server app " << app_->app_id() << ": " << late.message()
                  << LogLimiter::Since(left_out);
      }
      if (!copy) {
        SendTo(req->cmd, req->push, req->pull, req->sender, req->timestamp,
               req->customer_id, RawKVs(), late, meta.resend_for,
               req->timestamp);
      }
      return false;
    }
    if (duplicate) {
      duplicates_->Add();
      if (copy) {
        SendAck(meta, Status::OK());
        return false;
      }
      if (AnswerPending(*req, meta.resend_for)) {
        // The push is applied here, but its answer waits for its copies'
        // acknowledgements (locals_), and answers this one too. An answer
        // now would tell the worker that the push is safe before its copy
        // is: were this server to die then, the push would be lost.
        uint64_t left_out = 0;
        if (reject_log_.Allow("pending " + std::to_string(req->sender),
                              Clock::Real()->NowMs(), &left_out)) {
          LOG(INFO) << "server app " << app_->app_id() << ": push "
                    << req->timestamp << " of node " << req->sender
                    << " came again while its copies are unacknowledged: "
                    << "its pending answer answers it"
                    << LogLimiter::Since(left_out);
        }
        return false;
      }
      if (!req->pull) {
        SendTo(req->cmd, req->push, req->pull, req->sender, req->timestamp,
               req->customer_id, RawKVs(), Status::OK(), meta.resend_for,
               req->timestamp);
        return false;
      }
      // A push-pull applied already: answer its pull part only.
      req->push = false;
      req->kvs.vals.clear();
      req->kvs.lens.clear();
    }
    // A target that died without failing over yet fails its send below.
    std::vector<int> targets;
    if (!copy && req->push && ring) targets = TargetsOf(ring, me);
    if (whose != me) req->replica_of = whose;
    if (copy) copies_applied_->Add();
    if (!copy && targets.empty() && meta.resend_for == 0) return true;
    Local local;
    local.reply_to = copy ? meta.sender : req->sender;
    local.reply_customer = copy ? meta.customer_id : req->customer_id;
    local.reply_ts = copy ? meta.timestamp : req->timestamp;
    local.resend_for = copy ? 0 : meta.resend_for;
    local.replica_of = copy ? meta.replica_of : 0;
    const int64_t origin_ts = req->timestamp;
    local.origin_ts = req->timestamp;
    req->origin_timestamp = origin_ts;
    // A run arrived as a run (sorted and unique); keys that did not are
    // forwarded as they came.
    const KeyOrder order =
        meta.key_run ? KeyOrder::kSortedUnique : KeyOrder::kAsIs;
    if (relay.mode == kKeyCacheSigned && !targets.empty()) {
      local.signed_copy = std::make_shared<const SignedCopy>(SignedCopy{
          *req, whose, origin_ts, meta.done_below, order, meta.pushed_below});
    }
    int64_t ts = 0;
    {
      MutexLock lock(&mu_);
      ts = NewLocalTsLocked();
      local.owed = targets;
      locals_.emplace(ts, std::move(local));
    }
    std::vector<int> unsent;
    CopyHow how;
    how.order = order;
    how.pushed_below = meta.pushed_below;
    for (int t : targets) {
      how.keys = CopyKeysTo(t, relay);
      Status st =
          ForwardCopy(t, ts, whose, *req, origin_ts, meta.done_below, how);
      if (!st.ok()) {
        LOG(WARNING) << "cannot forward a copy of a push to node " << t << ": "
                     << st;
        unsent.push_back(t);
      }
    }
    for (int t : unsent) Acknowledged(ts, t, Status::OK());
    copies_sent_->Add(targets.size() - unsent.size());
    req->timestamp = ts;
    return true;
  }

  // Whether the part of worker request `req` (a push received again) that
  // `resend_for` names (0: this server's own) has an answer of this
  // server's still to come (locals_). Another part of the same request
  // (one resent for a dead server, beside this server's own) is answered
  // on its own, so it does not count.
  bool AnswerPending(const RawRequest& req, int resend_for) {
    MutexLock lock(&mu_);
    for (const auto& l : locals_) {
      const Local& x = l.second;
      if (x.replica_of == 0 && x.reply_to == req.sender &&
          x.reply_customer == req.customer_id && x.reply_ts == req.timestamp &&
          x.resend_for == resend_for) {
        return true;
      }
    }
    return false;
  }

  // How ForwardCopy sends a copy, beyond what it copies.
  struct CopyHow {
    // What is known of the push's keys (AddKVFrames).
    KeyOrder order = KeyOrder::kUnknown;
    // A hand-over's deferred push: the ring it moves keys under (0: none;
    // HoldIfAhead).
    uint64_t epoch = 0;
    // Its sending and place within a state copy or hand-over (0: none, a
    // push's copy).
    int64_t attempt = 0;
    int seq = 0;
    // The worker's (Meta::pushed_below) on a fresh push; a push the
    // controller holds says whether it is committed itself.
    int64_t pushed_below = 0;
    // How its keys go (CopyKeysTo); by default with the copy, not kept.
    Relay keys;
  };

  // Sends target `t` a copy of push `req` (the worker's timestamp
  // `origin_ts`, its done_below) of the data of server `whose`, under local
  // timestamp `ts`.
  Status ForwardCopy(int t, int64_t ts, int whose, const RawRequest& req,
                     int64_t origin_ts, int64_t done_below,
                     const CopyHow& how) {
    Message m = AppMessage(app_->app_id(), app_->customer_id(), ts, t,
                           /*request=*/true);
    m.meta.push = true;
    m.meta.epoch = how.epoch;
    m.meta.cmd = req.cmd;
    m.meta.clock = req.clock;
    m.meta.value_bytes = static_cast<int>(value_bytes_);
    m.meta.replica_of = whose;
    m.meta.origin_sender = req.sender;
    m.meta.origin_customer = req.customer_id;
    m.meta.origin_timestamp = origin_ts;
    m.meta.handed_from = req.handed_from;
    m.meta.done_below = done_below;
    m.meta.copy_attempt = how.attempt;
    m.meta.copy_seq = how.seq;
    m.meta.pushed_below = how.pushed_below;
    m.meta.committed = req.committed;
    if (how.keys.mode == kKeyCacheSigned) {
      AddSignedKVFrames(req.kvs, how.keys.sig, &m);
    } else {
      AddKVFrames(req.kvs, &m, /*keys_as_requested=*/false, how.order);
      if (how.keys.mode == kKeyCacheKeep) m.meta.key_cache = kKeyCacheKeep;
    }
    return app_->node()->Send(std::move(m));
  }

  // A local timestamp no request in locals_ or copies_ holds.
  int64_t NewLocalTsLocked() REQUIRES(mu_) {
    int64_t ts = 0;
    do {
      next_local_ = (next_local_ + 1) & 0x3fffffff;
      ts = -1 - next_local_;
    } while (locals_.count(ts) || copies_.count(ts));
    return ts;
  }

  // ring->ReplicaTargets(me), kept per ring (rings are immutable).
  std::vector<int> TargetsOf(const std::shared_ptr<const KeyRing>& ring,
                             int me) {
    MutexLock lock(&mu_);
    if (ring != targets_ring_ || me != targets_me_) {
      targets_ = ring->ReplicaTargets(me);
      targets_ring_ = ring;
      targets_me_ = me;
    }
    return targets_;
  }

  // The handle answered a request it saw under local timestamp `ts`.
  void FinishLocal(int cmd, bool push, bool pull, int64_t ts, const RawKVs& res,
                   const Status& error) {
    Local done;
    {
      MutexLock lock(&mu_);
      auto it = locals_.find(ts);
      if (it == locals_.end()) return;  // Answered already.
      Local& l = it->second;
      if (l.replica_of == 0 && !l.owed.empty()) {
        l.answered = true;
        l.cmd = cmd;
        l.push = push;
        l.pull = pull;
        l.res = res;
        l.error = error;
        return;  // Sent when the last copy is acknowledged.
      }
      done = std::move(l);
      locals_.erase(it);
    }
    if (done.replica_of != 0) {
      Message m = AppMessage(app_->app_id(), done.reply_customer, done.reply_ts,
                             done.reply_to, /*request=*/false);
      m.meta.push = true;
      m.meta.cmd = cmd;
      m.meta.replica_of = done.replica_of;
      if (!error.ok()) {
        m.meta.status_code = static_cast<int>(error.code());
        m.meta.status_message = error.message();
      }
      Status st = app_->node()->Send(std::move(m));
      if (!st.ok()) {
        LOG(WARNING) << "acknowledgement to node " << done.reply_to
                     << " lost: " << st;
      }
      return;
    }
    SendTo(cmd, push, pull, done.reply_to, done.reply_ts, done.reply_customer,
           res, error, done.resend_for, ts);
  }

  // Acknowledges a duplicate copy at once, or a message of a state copy or
  // hand-over (its sending and place echoed; `incomplete`: the end of a
  // sending of which a message was missed).
  void SendAck(const Meta& meta, const Status& status, bool incomplete = false,
               int key_cache = kKeyCacheNone) {
    Message m = AppMessage(app_->app_id(), meta.customer_id, meta.timestamp,
                           meta.sender, /*request=*/false);
    m.meta.push = true;
    m.meta.cmd = meta.cmd;
    m.meta.replica_of = meta.replica_of;
    m.meta.state_copy = meta.state_copy;
    m.meta.copy_attempt = meta.copy_attempt;
    m.meta.copy_seq = meta.copy_seq;
    m.meta.copy_incomplete = incomplete;
    m.meta.key_cache = key_cache;
    if (!status.ok()) {
      m.meta.status_code = static_cast<int>(status.code());
      m.meta.status_message = status.message();
    }
    Status st = app_->node()->Send(std::move(m));
    if (!st.ok()) LOG(WARNING) << "acknowledgement lost: " << st;
  }

  void OnReplicaAck(const Meta& meta) {
    if (meta.key_cache == kKeyCacheUnknown || meta.key_cache == kKeyCacheOff) {
      OnCopyKeysRefused(meta);
      return;
    }
    Status status;
    if (meta.status_code != 0) {
      status = Status(static_cast<Status::Code>(meta.status_code),
                      meta.status_message);
    }
    Acknowledged(meta.timestamp, meta.sender, status);
  }

  // How a copy to holder `t` carries its keys, following the worker
  // (Relay): as the worker sent them, unless `t` keeps no keys.
  Relay CopyKeysTo(int t, const Relay& relay) {
    if (relay.mode != kKeyCacheSigned && relay.mode != kKeyCacheKeep) {
      return Relay();
    }
    MutexLock lock(&mu_);
    return copy_keys_off_.count(t) > 0 ? Relay() : relay;
  }

  // Holder `meta.sender` does not hold the keys of the signed copy of local
  // request `meta.timestamp` (or keeps none): the copy goes again with its
  // keys, asking the holder to keep them unless it keeps none. Still owed:
  // the holder acknowledges the copy that carries keys.
  void OnCopyKeysRefused(const Meta& meta) {
    const int t = meta.sender;
    const bool off = meta.key_cache == kKeyCacheOff;
    std::shared_ptr<const SignedCopy> copy;
    {
      MutexLock lock(&mu_);
      if (off) copy_keys_off_.insert(t);
      auto it = locals_.find(meta.timestamp);
      if (it == locals_.end()) return;
      const auto& owed = it->second.owed;
      if (std::find(owed.begin(), owed.end(), t) == owed.end()) return;
      copy = it->second.signed_copy;
    }
    if (!copy) return;  // Not a signed copy's: a stray answer.
    copy_keys_resent_->Add();
    CopyHow how;
    how.order = copy->order;
    how.pushed_below = copy->pushed_below;
    if (!off) how.keys.mode = kKeyCacheKeep;
    Status st = ForwardCopy(t, meta.timestamp, copy->whose, copy->req,
                            copy->origin_ts, copy->done_below, how);
    if (!st.ok()) {
      LOG(WARNING) << "cannot forward a copy of a push to node " << t << ": "
                   << st;
      Acknowledged(meta.timestamp, t, Status::OK());
    }
  }

  // Server `from` acknowledged (or can no longer acknowledge) its copy of
  // local request `ts`.
  void Acknowledged(int64_t ts, int from, const Status& status) {
    Local done;
    {
      MutexLock lock(&mu_);
      auto it = locals_.find(ts);
      if (it == locals_.end()) return;
      Local& l = it->second;
      auto o = std::find(l.owed.begin(), l.owed.end(), from);
      if (o == l.owed.end()) return;
      l.owed.erase(o);
      if (!status.ok()) {
        LOG(ERROR) << "node " << from << " refused its copy of a push from "
                   << "node " << l.reply_to << ": " << status
                   << "; its copy of this server's data is now incomplete";
      }
      if (!l.owed.empty() || !l.answered) return;
      done = std::move(l);
      locals_.erase(it);
    }
    SendTo(done.cmd, done.push, done.pull, done.reply_to, done.reply_ts,
           done.reply_customer, done.res, done.error, done.resend_for, ts);
  }

  // Server `dead` failed over: the copies it owed will never be
  // acknowledged (the scheduler knows its copies are gone).
  void OnFailover(int dead) {
    ReleaseCopyHold(dead, "the copying server died");
    std::vector<int64_t> owed_by_dead;
    {
      MutexLock lock(&mu_);
      for (const auto& l : locals_) {
        const auto& o = l.second.owed;
        if (std::find(o.begin(), o.end(), dead) != o.end()) {
          owed_by_dead.push_back(l.first);
        }
      }
    }
    for (int64_t ts : owed_by_dead) Acknowledged(ts, dead, Status::OK());
    {
      // Copies of this server's state to the dead server are void.
      MutexLock lock(&mu_);
      for (auto it = copies_.begin(); it != copies_.end();) {
        it = it->second.target == dead ? copies_.erase(it) : std::next(it);
      }
    }
    HandOverForDead(dead);
    // A server that joined copies its data once it has it all.
    if (!holding_.load(std::memory_order_relaxed)) RestoreCopies();
  }

  // --- Restoring copies (docs/replication.md, "Restoring copies").
  //
  // After a failover a server's data may have fewer than k whole copies:
  // the dead server held some, and the heir's data grew by the dead
  // server's. Each server compares its replica targets and ranges under
  // the new ring with those under which its copies were last whole, and
  // sends each target that lacks a whole copy its state: the handle's
  // state in chunks (StateHooks), then copies of the pushes it has
  // acknowledged but not yet applied (bsp), then its dedup entries. Pushes
  // go on meanwhile: from the switch of the ring on, every push is
  // forwarded to the new targets too, and the messages from one server to
  // another arrive in the order they were sent, so a target applies the
  // state and then every later push. Once every chunk is acknowledged, the
  // node tells the scheduler, which counts the target as a holder again.

  // What a hand-over sends (SendHandover): whose data (0: this server's;
  // else a dead server's, from its copy here), under bsp its pending
  // pushes, the state chunks, and its deferred pushes.
  struct HandoverBody {
    int whose = 0;
    bool bsp = false;
    SArray<char> pending;
    std::vector<SArray<char>> chunks;
    std::vector<RawRequest> deferred;
  };

  struct Copy {
    int target = 0;
    std::shared_ptr<const KeyRing> ring;  // the ring it was made under
    uint64_t epoch = 0;
    Status status;
    bool handover = false;  // a hand-over to a server that joined
    bool leave = false;     // ... or from this server, which leaves
    // Lost messages (docs/replication.md): the copy_attempt of its last
    // sending and when that went out (the node's clock); unacknowledged
    // after EMBER_MIGRATION_RESEND_MS it is sent again.
    int64_t attempt = 0;
    int64_t sent_ms = 0;
    // A hand-over's messages, kept to be sent again as they were: the
    // state of the moved keys does not change here after the switch. (A
    // copy of this server's own data is read afresh instead: pushes go on.)
    HandoverBody body;
  };

  // On the customer thread, after the ring changed.
  void RestoreCopies() {
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    const int me = app_->node()->my_id();
    if (!ring || ring->replicas() == 0 || ring->IndexOf(me) < 0) return;
    std::shared_ptr<const KeyRing> synced;
    {
      MutexLock lock(&mu_);
      synced = synced_ring_;
      synced_ring_ = ring;
    }
    if (synced == ring) return;
    std::vector<int> had;
    const bool same_ranges = SameRanges(synced, ring, me);
    if (synced && synced->IndexOf(me) >= 0) had = synced->ReplicaTargets(me);
    std::vector<int> need;
    for (int t : ring->ReplicaTargets(me)) {
      if (!same_ranges || std::find(had.begin(), had.end(), t) == had.end()) {
        need.push_back(t);
      }
    }
    if (need.empty()) return;
    CopyState(ring, need);
  }

  // Sends each of `need` a copy of this server's data under `ring` (read
  // now): RestoreCopies, and a copy sent again (ResendUnacknowledged).
  void CopyState(const std::shared_ptr<const KeyRing>& ring,
                 const std::vector<int>& need) {
    const int me = app_->node()->my_id();
    const std::string app = "server app " + std::to_string(app_->app_id());
    bool bsp = false;
    StateHooks hooks;
    {
      MutexLock lock(&mu_);
      bsp = config_.mode == ConsistencyConfig::Mode::kBsp;
      hooks = hooks_;
    }
    if (!hooks.dump) {
      LOG(ERROR) << app
                 << ": its request handle has no state handle "
                    "(KVServer::set_state_handle), so no new copy of this "
                    "server's data can be made; the death of this server "
                    "would end the run";
      return;
    }
    std::vector<std::string> chunks;
    Status s = hooks.dump([&ring, me](Key k) { return ring->Owner(k) == me; },
                          kCopyChunkBytes, &chunks);
    if (!s.ok()) {
      LOG(ERROR) << app << ": cannot read its state to copy it: " << s;
      return;
    }
    // The dedup entries of this server's data: its own and those of the
    // dead servers it took over (no longer on the ring).
    std::vector<int64_t> dedup;
    std::vector<RawRequest> deferred;  // bsp: this server's, to copy too
    std::string counts;
    if (bsp) controller();  // Created if no request came yet.
    {
      MutexLock lock(&mu_);
      for (const auto& e : applied_) {
        for (const auto& tw : e.second) {
          const int whose = WhoseOf(tw.second);
          if (whose != me && ring->IndexOf(whose) >= 0) continue;
          dedup.insert(dedup.end(),
                       {e.first.first, e.first.second, tw.first, tw.second});
        }
      }
      if (bsp) {
        for (RawRequest& r : controller_->DeferredPushes()) {
          const int whose = r.replica_of != 0 ? r.replica_of : me;
          if (whose != me) {
            // Copies of other live servers' data are theirs to copy.
            if (ring->IndexOf(whose) >= 0) continue;
            // A server off the ring: one that died, whose keys this server
            // took over as its heir, or one that left, which handed its
            // keys to their new owners itself. Only a copy of keys this
            // server owns now is its data: one of a leaver's keys that
            // moved to the target would reach it twice (its own, from the
            // leaver's hand-over, and this copy) and be applied twice.
            // One of keys that moved here came in the leaver's hand-over
            // and replaced this copy (LoadPending).
            const bool mine = std::any_of(
                r.kvs.keys.begin(), r.kvs.keys.end(),
                [&ring, me](Key k) { return ring->Owner(k) == me; });
            if (!mine) continue;
          }
          deferred.push_back(std::move(r));
        }
        counts = controller_->AppliedCounts(
            [&ring, me](Key k) { return ring->Owner(k) == me; });
      }
    }
    // bsp: first what the target's consistency controller needs to replace
    // its pending pushes of this server's data (LoadPending).
    SArray<char> pending_frame;
    if (bsp) {
      pending_frame = Adopt(EncodePending(
          ring->RangesOf(ring->IndexOf(me)), deferred,
          [me](const RawRequest& r) {
            return r.replica_of != 0 ? r.replica_of : me;
          },
          counts));
    }
    // Frames that share the chunks' buffers, sent to every target.
    size_t bytes = 0;
    std::vector<SArray<char>> frames;
    for (std::string& c : chunks) {
      bytes += c.size();
      frames.push_back(Adopt(std::move(c)));
    }
    std::string dedup_bytes(reinterpret_cast<const char*>(dedup.data()),
                            dedup.size() * sizeof(int64_t));
    const SArray<char> dedup_frame = Adopt(std::move(dedup_bytes));
    for (int t : need) {
      int64_t ts = 0;
      int64_t attempt = 0;
      {
        MutexLock lock(&mu_);
        ts = NewLocalTsLocked();
        attempt = ++next_attempt_;
        Copy& c = copies_[ts];
        c.target = t;
        c.ring = ring;
        c.epoch = ring->epoch();
        c.attempt = attempt;
        c.sent_ms = app_->node()->clock()->NowMs();
      }
      // Each message's place in this sending; the end (the dedup entries)
      // carries the count.
      int seq = 0;
      Status st;
      if (bsp) st = SendState(t, ts, 3, pending_frame, 0, 0, attempt, ++seq);
      for (const SArray<char>& f : frames) {
        if (st.ok()) st = SendState(t, ts, 1, f, 0, 0, attempt, ++seq);
      }
      for (const RawRequest& r : deferred) {
        if (!st.ok()) break;
        const int whose = r.replica_of != 0 ? r.replica_of : me;
        CopyHow how;
        how.attempt = attempt;
        how.seq = ++seq;
        st = ForwardCopy(t, ts, whose, r, OriginTs(r), 0, how);
      }
      if (st.ok()) st = SendState(t, ts, 2, dedup_frame, 0, 0, attempt, ++seq);
      if (!st.ok()) {
        LOG(ERROR) << app << ": copy of this server's data to node " << t
                   << " failed: " << st;
        MutexLock lock(&mu_);
        copies_.erase(ts);
        continue;
      }
      LOG(INFO) << app << ": copying this server's data to node " << t
                << " for ring epoch " << ring->epoch() << " (" << frames.size()
                << " chunk(s), " << bytes << " bytes, " << deferred.size()
                << " deferred push(es), " << dedup.size() / 4
                << " dedup entries)";
    }
  }

  // The worker's timestamp of push `r` (a replicated push runs under a
  // local, negative one).
  static int64_t OriginTs(const RawRequest& r) {
    return r.timestamp >= 0 ? r.timestamp : r.origin_timestamp;
  }

  // What the dedup table knows a push by, beside the worker's request:
  // whose data it is (a server id) and, for a part that a former owner
  // handed over under bsp, that former owner (else 0). Whose alone is not
  // enough: two former owners may hand parts of one request to one server.
  // The former owner alone is not either: a leaver's range may split
  // between two new owners, one of which keeps a copy of the other's data,
  // and so holds two parts of one request that the leaver handed over.
  static int64_t DedupId(int whose, int handed_from) {
    return static_cast<int64_t>(
        (static_cast<uint64_t>(static_cast<uint32_t>(handed_from)) << 32) |
        static_cast<uint32_t>(whose));
  }
  static int WhoseOf(int64_t id) {
    return static_cast<int>(static_cast<uint32_t>(id));
  }

  // A copy's pending pushes (state_copy 3, bsp): the ranges copied, the
  // identities of the deferred pushes that follow as copies (sender,
  // customer, worker's timestamp, DedupId; as in the dedup entries), and
  // ConsistencyController::AppliedCounts for those ranges:
  //   ranges (64), then begin and end (64 each) per range;
  //   pushes (64), then 4 x 64 bits per push; the counts to the end.
  // `whose`: whose data each push is as the receiver takes it.
  static std::string EncodePending(
      const std::vector<Range>& ranges, const std::vector<RawRequest>& deferred,
      const std::function<int(const RawRequest&)>& whose,
      const std::string& counts) {
    std::string out(8 + 16 * ranges.size() + 8 + 32 * deferred.size(), '\0');
    char* o = &out[0];
    EncodeFixed64(o, ranges.size());
    o += 8;
    for (const Range& r : ranges) {
      EncodeFixed64(o, r.begin());
      EncodeFixed64(o + 8, r.end());
      o += 16;
    }
    EncodeFixed64(o, deferred.size());
    o += 8;
    for (const RawRequest& r : deferred) {
      const int64_t id[4] = {r.sender, r.customer_id, OriginTs(r),
                             DedupId(whose(r), r.handed_from)};
      for (int64_t v : id) {
        EncodeFixed64(o, static_cast<uint64_t>(v));
        o += 8;
      }
    }
    return out + counts;
  }

  // A copy's pending pushes from server `from` (EncodePending), before its
  // state: this server's deferred copies of pushes to the ranges copied are
  // dropped (the state holds those the copying server has applied; the
  // others follow as copies again, so their dedup entries go too), and the
  // consistency controller's push counts of those ranges become the copying
  // server's. Without this, a copy this server deferred and the copying
  // server has applied since would be applied twice.
  Status LoadPending(int from, const SArray<char>& frame) {
    const char* p = frame.data();
    const size_t size = frame.size();
    if (size < 8) return Status::Corruption("a short pending-pushes copy");
    const uint64_t nranges = DecodeFixed64(p);
    if (nranges > (size - 8) / 16 || size - 8 - 16 * nranges < 8) {
      return Status::Corruption("a pending-pushes copy of bad size");
    }
    std::vector<std::pair<Key, Key>> ranges(nranges);
    for (uint64_t i = 0; i < nranges; ++i) {
      ranges[i] = {DecodeFixed64(p + 8 + 16 * i),
                   DecodeFixed64(p + 16 + 16 * i)};
      if (ranges[i].first >= ranges[i].second ||
          (i > 0 && ranges[i].first < ranges[i - 1].second)) {
        return Status::Corruption("a pending-pushes copy with bad ranges");
      }
    }
    const char* q = p + 8 + 16 * nranges;
    const size_t rest = size - (q - p);
    const uint64_t npushes = DecodeFixed64(q);
    if (npushes > (rest - 8) / 32) {
      return Status::Corruption("a pending-pushes copy of bad size");
    }
    q += 8;
    std::vector<int64_t> ids(4 * npushes);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>(DecodeFixed64(q + 8 * i));
    }
    q += 32 * npushes;
    // The ranges are ring positions (under spread placement a key's is
    // Fmix64 of it); the last range's end, UINT64_MAX, holds that position.
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    auto in_range = [&ranges, &ring](Key k) {
      const uint64_t pos = ring ? ring->PositionOf(k) : k;
      auto it = std::upper_bound(
          ranges.begin(), ranges.end(), pos,
          [](uint64_t x, const std::pair<Key, Key>& r) { return x < r.first; });
      if (it == ranges.begin()) return false;
      const Key end = std::prev(it)->second;
      return pos < end || end == std::numeric_limits<Key>::max();
    };
    {
      MutexLock lock(&mu_);
      if (config_.mode != ConsistencyConfig::Mode::kBsp) {
        return Status::InvalidArgument(
            "pending bsp pushes copied to a server app that is not bsp (" +
            config_.ToString() + ")");
      }
    }
    // The pushes that follow: one deferred here already came in an earlier
    // sending of this hand-over (docs/replication.md, "Lost messages"),
    // as this server's own push; it follows again.
    const int me = app_->node()->my_id();
    std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> follow;
    for (size_t i = 0; i + 3 < ids.size(); i += 4) {
      follow.emplace(ids[i], ids[i + 1], ids[i + 2], ids[i + 3]);
    }
    StatusOr<size_t> dropped = controller()->ReplaceCopiedData(
        [&in_range, &follow, me](const RawRequest& r) {
          if (follow.count(
                  std::make_tuple(r.sender, r.customer_id, OriginTs(r),
                                  DedupId(r.replica_of != 0 ? r.replica_of : me,
                                          r.handed_from)))) {
            return true;
          }
          // A copy made under an older ring may hold keys of two servers'
          // ranges now (a join or a leave moved some): both copy theirs.
          if (r.replica_of == 0) return false;
          for (Key k : r.kvs.keys) {
            if (in_range(k)) return true;
          }
          return false;
        },
        in_range, q, size - (q - p));
    if (!dropped.ok()) return dropped.status();
    StateHooks hooks;
    {
      MutexLock lock(&mu_);
      hooks = hooks_;
    }
    if (hooks.begin) hooks.begin(in_range);
    MutexLock lock(&mu_);
    for (size_t i = 0; i + 3 < ids.size(); i += 4) {
      auto it = applied_.find(std::make_pair(static_cast<int>(ids[i]),
                                             static_cast<int>(ids[i + 1])));
      if (it != applied_.end()) {
        it->second.erase(std::make_pair(ids[i + 2], ids[i + 3]));
      }
    }
    VLOG(1) << "server app " << app_->app_id() << ": a copy from node " << from
            << " replaces " << *dropped << " deferred push(es); " << npushes
            << " follow";
    return Status::OK();
  }

  // An array that owns `bytes` (no copy).
  static SArray<char> Adopt(std::string&& bytes) {
    auto owner = std::make_shared<std::string>(std::move(bytes));
    SArray<char> a;
    if (owner->empty()) return a;
    a.reset(&(*owner)[0], owner->size(), [owner](char*) {});
    return a;
  }

  // Whether server `me` owns the same ranges under both rings.
  static bool SameRanges(const std::shared_ptr<const KeyRing>& a,
                         const std::shared_ptr<const KeyRing>& b, int me) {
    if (!a || !b || a->IndexOf(me) < 0 || b->IndexOf(me) < 0) return false;
    const std::vector<Range> x = a->RangesOf(a->IndexOf(me));
    const std::vector<Range> y = b->RangesOf(b->IndexOf(me));
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].begin() != y[i].begin() || x[i].end() != y[i].end()) {
        return false;
      }
    }
    return true;
  }

  // Whether `meta` is a message of a hand-over: its chunks (5), its end
  // (4), and (bsp) its pending pushes (3 under a ring epoch; a copy's have
  // none).
  static bool IsHandover(const Meta& meta) {
    return meta.state_copy == 4 || meta.state_copy == 5 ||
           (meta.state_copy == 3 && meta.epoch != 0);
  }

  // One message of a copy: `kind` 1 a chunk of state, 2 dedup entries, 3
  // pending pushes (bsp), 4 the end of a hand-over (no frame), 5 a chunk of
  // a hand-over.
  // `whose`: the server whose state it is (0: this one's); a hand-over an
  // heir makes for a dead server names it.
  // `epoch`: a hand-over's, the ring it moves keys under (0: none).
  // `attempt`, `seq`: its sending and place in it (docs/replication.md,
  // "Lost messages").
  Status SendState(int t, int64_t ts, int kind, const SArray<char>& frame,
                   int whose, uint64_t epoch, int64_t attempt, int seq) {
    Message m = AppMessage(app_->app_id(), app_->customer_id(), ts, t,
                           /*request=*/true);
    m.meta.push = true;
    m.meta.state_copy = kind;
    m.meta.replica_of = whose != 0 ? whose : app_->node()->my_id();
    m.meta.value_bytes = static_cast<int>(value_bytes_);
    if (kind != 4) m.AddData(frame);  // The end of a hand-over has none.
    m.meta.epoch = epoch;
    m.meta.copy_attempt = attempt;
    m.meta.copy_seq = seq;
    return app_->node()->Send(std::move(m));
  }

  // A message of a copy of another server's state (RestoreCopies).
  void LoadCopy(const Message& msg) {
    Status s;
    StateHooks hooks;
    // A hand-over (its chunks, 5, and its end, 4) is taken only while this
    // server awaits it: a copy the network delivers late, after the end,
    // would replace what later pushes made of those keys. One an heir
    // makes for a dead former owner names it (HandOverForDead).
    const int whose =
        msg.meta.replica_of != 0 ? msg.meta.replica_of : msg.meta.sender;
    bool ignore = false;
    const bool handover = IsHandover(msg.meta);
    Step step = Step::kTake;
    {
      MutexLock lock(&mu_);
      hooks = hooks_;
      ignore = handover && !awaiting_.count(whose);
      if (ignore) {
        CloseStreamLocked(msg.meta);
      } else {
        step = StepLocked(msg.meta);
      }
    }
    if (step != Step::kTake) {
      // Taken already, of an older sending, or after a lost message of its
      // sending: it changes nothing. The end of a sending with a gap says
      // so, and the sender sends it all again.
      const bool end = msg.meta.state_copy == (handover ? 4 : 2);
      if (step == Step::kGap && end) {
        LOG(WARNING) << "server app " << app_->app_id() << ": "
                     << (handover ? "hand-over" : "copy") << " from node "
                     << msg.meta.sender << " (sending " << msg.meta.copy_attempt
                     << ") lost a message: asking for it again";
      }
      SendAck(msg.meta, Status::OK(), step == Step::kGap && end);
      // A sending with a gap is sent whole again, and replaces what this
      // one left: nothing to wait for meanwhile.
      if (step == Step::kGap && end && !handover) {
        ReleaseCopyHold(msg.meta.sender, "it lost a message");
      }
      return;
    }
    if (ignore) {
      uint64_t left_out = 0;
      if (reject_log_.Allow("handover " + std::to_string(msg.meta.sender),
                            Clock::Real()->NowMs(), &left_out)) {
        LOG(WARNING) << "server app " << app_->app_id()
                     << ": ignoring a hand-over message from node "
                     << msg.meta.sender << " (of the keys of node " << whose
                     << "): this server awaits none from it"
                     << LogLimiter::Since(left_out);
      }
      SendAck(msg.meta, Status::OK());
      return;
    }
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    // A hand-over awaited here (checked above) may come from a server that
    // leaves, which is off the ring.
    if (!ring || (ring->IndexOf(msg.meta.sender) < 0 && !handover)) {
      s = Status::InvalidArgument("a copy of server state from node " +
                                  std::to_string(msg.meta.sender) +
                                  ", which is not a server on the ring");
    } else if (msg.meta.state_copy == 3 && msg.data.size() == 1) {
      s = LoadPending(msg.meta.sender, msg.data[0]);
    } else if (msg.meta.state_copy == 4) {
      if (!msg.data.empty()) {
        s = Status::Corruption("the end of a hand-over with " +
                               std::to_string(msg.data.size()) + " frames");
      }
    } else if (msg.meta.state_copy == 2 && msg.data.empty()) {
      // No dedup entries (an empty frame may not travel).
    } else if (msg.data.size() != 1) {
      s = Status::Corruption("a state copy of " +
                             std::to_string(msg.data.size()) + " frames");
    } else if (msg.meta.state_copy == 1 || msg.meta.state_copy == 5) {
      if (!hooks.load) {
        s = Status::Unavailable(
            "this server's request handle has no state handle "
            "(KVServer::set_state_handle): it cannot hold a copy of another "
            "server's data");
      } else {
        s = hooks.load(msg.data[0].data(), msg.data[0].size());
      }
    } else if (msg.data[0].size() % (4 * sizeof(int64_t)) != 0) {
      s = Status::Corruption("dedup entries of " +
                             std::to_string(msg.data[0].size()) + " bytes");
    } else {
      const size_t n = msg.data[0].size() / sizeof(int64_t);
      std::vector<int64_t> e(n);
      if (n > 0) std::memcpy(e.data(), msg.data[0].data(), n * sizeof(int64_t));
      MutexLock lock(&mu_);
      for (size_t i = 0; i + 3 < n; i += 4) {
        auto& seen = applied_[std::make_pair(static_cast<int>(e[i]),
                                             static_cast<int>(e[i + 1]))];
        seen.emplace(e[i + 2], e[i + 3]);
        if (seen.size() > kMaxApplied) seen.erase(seen.begin());
      }
    }
    if (!s.ok()) {
      uint64_t left_out = 0;
      if (reject_log_.Allow("copy " + std::to_string(msg.meta.sender),
                            Clock::Real()->NowMs(), &left_out)) {
        LOG(ERROR) << "refusing a copy of the state of node " << msg.meta.sender
                   << ": " << s << LogLimiter::Since(left_out);
      }
    }
    SendAck(msg.meta, s);
    if (s.ok() && msg.meta.state_copy == 4) OnHandoverEnd(whose);
    if (!handover && msg.meta.state_copy == 3 && s.ok()) {
      // A bsp copy begins: the pending round it carries (the model layer's)
      // and the deferred pushes that complete it arrive apart, and a
      // request of another node handled between them could end the round
      // here half made (a pull flushes a bsp table's round), applying one
      // worker's gradients apart from another's. The copying server sends
      // it all at once: other nodes' requests wait for its end.
      MutexLock lock(&mu_);
      copy_from_.store(msg.meta.sender, std::memory_order_relaxed);
      copy_since_ms_ = app_->node()->clock()->NowMs();
    } else if (!handover && msg.meta.state_copy == 2) {
      ReleaseCopyHold(msg.meta.sender, nullptr);
    }
  }

  // Holds `msg`, a request of a node other than the one whose bsp copy is
  // arriving, until that copy's end (LoadCopy).
  bool HoldForCopy(const Message& msg) {
    const int from = copy_from_.load(std::memory_order_relaxed);
    if (from == 0 || msg.meta.sender == from) return false;
    Message held = SharingFrames(msg);
    MutexLock lock(&mu_);
    copy_held_.push_back(std::move(held));
    return true;
  }

  // A message that shares `msg`'s frames, to be held and handled later.
  static Message SharingFrames(const Message& msg) {
    Message shared;
    shared.meta = msg.meta;
    shared.data = msg.data;
    return shared;
  }

  // The bsp copy from `from` has ended (or will not end: `why` says why):
  // the requests held meanwhile are handled, in order.
  void ReleaseCopyHold(int from, const char* why) {
    std::vector<Message> held;
    {
      MutexLock lock(&mu_);
      if (copy_from_.load(std::memory_order_relaxed) != from) return;
      copy_from_.store(0, std::memory_order_relaxed);
      held.swap(copy_held_);
    }
    if (why != nullptr) {
      LOG(WARNING) << "server app " << app_->app_id() << ": the copy from node "
                   << from << " did not end (" << why << "): serving the "
                   << held.size() << " request(s) held for it";
    }
    for (Message& m : held) Process(m);
  }

  // --- Joining (docs/replication.md, "Joining").
  //
  // When a ring adds servers, every server that owned a range that moved
  // to a newcomer sends it the state of those keys (chunks, state_copy 5)
  // and then the end of its hand-over (state_copy 4); every other server
  // sends the end alone. It reads that state on its app thread when it
  // hears of the ring: a request sliced by the older ring for keys that
  // moved has been refused since the node switched (CheckOwned), so the
  // state holds every push applied here to those keys and nothing follows
  // it. The newcomer holds its own requests until every server of the ring
  // it joined under has ended its hand-over, then makes its copies
  // (RestoreCopies) and serves what it held, in order.

  // On the customer thread: the node's ring changed. Then the messages
  // that came ahead of it (HoldIfAhead) are handled.
  void OnRingChanged() {
    HandleRingChange();
    std::vector<Message> ahead;
    {
      MutexLock lock(&mu_);
      const uint64_t seen = ring_seen_.load(std::memory_order_relaxed);
      for (auto it = ahead_.begin(); it != ahead_.end();) {
        if (it->meta.epoch <= seen) {
          ahead.push_back(std::move(*it));
          it = ahead_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Message& m : ahead) Process(m);
  }

  void HandleRingChange() {
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    if (ring) ring_seen_.store(ring->epoch(), std::memory_order_relaxed);
    const int me = app_->node()->my_id();
    std::shared_ptr<const KeyRing> prev;
    {
      MutexLock lock(&mu_);
      prev = handover_ring_;
      handover_ring_ = ring;
      // A holder may have come back with a key cache: sign copies to every
      // holder again (one refusal each from those that still keep none).
      if (prev != ring) copy_keys_off_.clear();
    }
    if (!prev || !ring || prev == ring) return;
    // Every ring installed since the last one handled, in turn: a failover
    // and a join close behind it are two changes (the heir hands the dead
    // server's keys over as its own), not one from a ring in which another
    // server owned them.
    std::vector<std::shared_ptr<const KeyRing>> steps =
        app_->node()->RingsAfter(prev->epoch(), ring->epoch());
    if (steps.empty()) steps.push_back(ring);
    for (const auto& step : steps) {
      HandleRingStep(prev, step, me);
      prev = step;
    }
  }

  // One ring change, from `prev` to `ring` (HandleRingChange).
  void HandleRingStep(const std::shared_ptr<const KeyRing>& prev,
                      const std::shared_ptr<const KeyRing>& ring, int me) {
    bool waiting = false;
    {
      MutexLock lock(&mu_);
      waiting = !awaiting_.empty();
    }
    std::vector<int> newcomers;
    for (int id : ring->server_ids()) {
      if (prev->IndexOf(id) < 0) newcomers.push_back(id);
    }
    const bool left = HandleLeave(*prev, *ring);
    // A failover adds nobody: OnFailover restores the copies.
    if (newcomers.empty()) {
      // After a leave: those that await no hand-over copy at once.
      if (left && !holding_.load(std::memory_order_relaxed)) RestoreCopies();
      return;
    }
    {
      MutexLock lock(&mu_);
      join_prev_ring_ = prev;
      join_ring_ = ring;
    }
    if (prev->IndexOf(me) >= 0) {
      for (int n : newcomers) {
        if (n != me) HandOver(*prev, *ring, n);
      }
    }
    if (!waiting) RestoreCopies();
  }

  // Sends newcomer `to` the state of the keys server `whose` (0: this one)
  // owned under `prev` that `to` owns under `ring`, then the end of the
  // hand-over.
  // Returns the hand-over's local timestamp (copies_), 0 if it failed.
  int64_t HandOver(const KeyRing& prev, const KeyRing& ring, int to,
                   int whose = 0) {
    const int me = whose != 0 ? whose : app_->node()->my_id();
    const std::string app = "server app " + std::to_string(app_->app_id());
    StateHooks hooks;
    bool bsp = false;
    {
      MutexLock lock(&mu_);
      hooks = hooks_;
      bsp = config_.mode == ConsistencyConfig::Mode::kBsp;
    }
    std::vector<std::string> chunks;
    auto moved = [&prev, &ring, me, to](Key k) {
      return prev.Owner(k) == me && ring.Owner(k) == to;
    };
    // bsp: the pending pushes of the moved keys go first (state_copy 3, as
    // a copy's: LoadPending there), then the state, then the deferred parts
    // of pushes to those keys as pushes of the newcomer's own data, which
    // it applies when their rounds complete there.
    SArray<char> pending_frame;
    std::vector<RawRequest> deferred;
    if (bsp) {
      const int self = app_->node()->my_id();
      // The pushes of `me`'s data: its own, and those of a server that died
      // before `prev` (off it), which this server took over as heir; their
      // keys (moved: `me`'s under `prev`) say the rest.
      ConsistencyController::HandedOver taken = controller()->HandOver(
          [me, self, &prev](const RawRequest& r) {
            const int owner = r.replica_of != 0 ? r.replica_of : self;
            return owner == me || prev.IndexOf(owner) < 0;
          },
          moved);
      // They become the newcomer's own pushes (replica_of: it), each known
      // by this server's part of its request (the newcomer may take other
      // parts of it from other former owners).
      for (RawRequest& r : taken.pushes) {
        if (r.handed_from == 0) r.handed_from = me;
      }
      // They reach `to` as copies of its own data (ForwardCopy below).
      pending_frame = Adopt(EncodePending(
          MovedRanges(prev, ring, me, to), taken.pushes,
          [to](const RawRequest&) { return to; }, taken.counts));
      deferred = std::move(taken.pushes);
      // A pull held for its worker's pushes to those keys is answered
      // there, after their round: refused here, its worker re-routes it.
      for (const RawRequest& r : taken.pulls) RefuseMoved(r, ring);
    }
    if (!hooks.dump) {
      LOG(ERROR) << app << ": its request handle has no state handle "
                 << "(KVServer::set_state_handle), so the state of the keys "
                 << "that moved to node " << to << " cannot move with them: "
                 << "node " << to << " starts them empty";
    } else {
      Status s = hooks.dump(moved, kCopyChunkBytes, &chunks);
      if (!s.ok()) {
        LOG(ERROR) << app << ": cannot read the state of the keys that moved "
                   << "to node " << to << ": " << s;
        chunks.clear();
      }
    }
    size_t bytes = 0;
    int64_t ts = 0;
    {
      MutexLock lock(&mu_);
      ts = NewLocalTsLocked();
      Copy& c = copies_[ts];
      c.target = to;
      c.epoch = ring.epoch();
      c.handover = true;
      c.body.whose = whose;
      c.body.bsp = bsp;
      c.body.pending = pending_frame;
      for (std::string& chunk : chunks) {
        bytes += chunk.size();
        c.body.chunks.push_back(Adopt(std::move(chunk)));
      }
      c.body.deferred = std::move(deferred);
    }
    size_t ndeferred = 0;
    Status st = SendHandover(ts, &ndeferred);
    if (!st.ok()) {
      LOG(ERROR) << app << ": hand-over to node " << to << " failed: " << st;
      MutexLock lock(&mu_);
      copies_.erase(ts);
      return 0;
    }
    LOG(INFO) << app << ": handing the keys that moved to node " << to
              << " under ring epoch " << ring.epoch() << " over ("
              << chunks.size() << " chunk(s), " << bytes << " bytes"
              << (bsp ? ", " + std::to_string(ndeferred) + " deferred push(es)"
                      : std::string())
              << ")"
              << (whose != 0 ? " for dead node " + std::to_string(whose) +
                                   ", from its copy here"
                             : std::string());
    return ts;
  }

  // Sends hand-over `ts` (copies_) under a new attempt: the pending pushes
  // (bsp), the chunks, the deferred pushes, the end, each numbered in this
  // sending (docs/replication.md, "Lost messages"). *deferred: how many
  // pushes it moves.
  Status SendHandover(int64_t ts, size_t* deferred) {
    int to = 0;
    uint64_t epoch = 0;
    int64_t attempt = 0;
    HandoverBody body;
    {
      MutexLock lock(&mu_);
      auto it = copies_.find(ts);
      if (it == copies_.end()) return Status::OK();
      Copy& c = it->second;
      c.attempt = ++next_attempt_;
      c.sent_ms = app_->node()->clock()->NowMs();
      to = c.target;
      epoch = c.epoch;
      attempt = c.attempt;
      body = c.body;
    }
    const int whose = body.whose;
    *deferred = body.deferred.size();
    int seq = 0;
    Status st;
    if (body.bsp) {
      st = SendState(to, ts, 3, body.pending, whose, epoch, attempt, ++seq);
    }
    for (const SArray<char>& chunk : body.chunks) {
      if (st.ok())
        st = SendState(to, ts, 5, chunk, whose, epoch, attempt, ++seq);
    }
    for (const RawRequest& r : body.deferred) {
      if (!st.ok()) break;
      CopyHow how;
      how.epoch = epoch;
      how.attempt = attempt;
      how.seq = ++seq;
      st = ForwardCopy(to, ts, to, r, OriginTs(r), 0, how);
    }
    if (st.ok()) {
      st = SendState(to, ts, 4, SArray<char>(), whose, epoch, attempt, ++seq);
    }
    return st;
  }

  // --- Lost messages (docs/replication.md, "Lost messages").
  //
  // Every message of a state copy or hand-over carries the number of its
  // sending (copy_attempt, growing with each sending of this app) and its
  // place in it (copy_seq, from 1; the end carries the count). A sender
  // whose copy's end is not acknowledged within EMBER_MIGRATION_RESEND_MS,
  // or is acknowledged as incomplete, sends the whole copy again under a new
  // attempt: a hand-over as it was (the moved keys' state is frozen here
  // after the switch, and the receiver holds its own requests for them
  // until the end), a copy of its own data read afresh (pushes go on, and
  // every one forwarded after the read follows it on the link). The
  // receiver takes, per sender and kind (hand-over or copy), the messages
  // of the newest attempt in order: one it took already, one of an older
  // attempt, and every one after a gap change nothing (they are
  // acknowledged), and the end of an attempt with a gap is answered as
  // incomplete. Links keep their order, so a sending is never mixed with
  // another: a sending taken whole, its pending pushes first, replaces what
  // an earlier, partial one left.

  enum class Step { kTake, kSkip, kGap };
  struct Stream {
    int64_t attempt = 0;
    int next = 1;  // the copy_seq expected next
    bool broken = false;
  };
  static std::pair<int, bool> StreamOf(const Meta& meta) {
    return {meta.sender, IsHandover(meta) || meta.epoch != 0};
  }
  // Where message `meta` of a copy or hand-over stands in its stream:
  // kTake, the next of the newest sending; kSkip, one taken already or of
  // an older sending; kGap, one after a message of its sending was missed.
  Step StepLocked(const Meta& meta) REQUIRES(mu_) {
    if (meta.copy_attempt == 0) return Step::kTake;
    Stream& st = streams_[StreamOf(meta)];
    if (meta.copy_attempt < st.attempt) return Step::kSkip;
    if (meta.copy_attempt > st.attempt)
      st = Stream{meta.copy_attempt, 1, false};
    if (st.broken) return Step::kGap;
    if (meta.copy_seq < st.next) return Step::kSkip;
    if (meta.copy_seq > st.next) {
      st.broken = true;
      return Step::kGap;
    }
    ++st.next;
    return Step::kTake;
  }
  // A hand-over message ignored (this app awaits none from its sender):
  // the rest of its sending is too (its deferred pushes in particular).
  void CloseStreamLocked(const Meta& meta) REQUIRES(mu_) {
    if (meta.copy_attempt == 0) return;
    Stream& st = streams_[StreamOf(meta)];
    if (meta.copy_attempt < st.attempt) return;
    st = Stream{meta.copy_attempt, 1, true};
  }

  // On the customer thread at each tick of the node (every heartbeat):
  // sends again every copy and hand-over whose end has gone
  // unacknowledged for EMBER_MIGRATION_RESEND_MS.
  void ResendUnacknowledged() {
    const int resend_ms = app_->node()->options().MigrationResendMs();
    const int64_t now = app_->node()->clock()->NowMs();
    const int from = copy_from_.load(std::memory_order_relaxed);
    if (from != 0) {
      // A sender that stopped without dying, or whose end was lost, sends
      // its copy again after resend_ms: held twice that long, the requests
      // go on (a copy's later sending replaces what this one left).
      int64_t since = 0;
      {
        MutexLock lock(&mu_);
        since = copy_since_ms_;
      }
      const int64_t bound = 2 * static_cast<int64_t>(std::max(resend_ms, 1000));
      if (now - since >= bound) {
        ReleaseCopyHold(from, "its end did not come in time");
      }
    }
    if (resend_ms < 0) return;
    std::vector<int64_t> due;
    {
      MutexLock lock(&mu_);
      for (const auto& c : copies_) {
        if (now - c.second.sent_ms >= resend_ms) due.push_back(c.first);
      }
    }
    for (int64_t ts : due) SendAgain(ts, resend_ms);
  }

  // Sends copy or hand-over `ts` again (see above); `after_ms`: how long
  // it went unacknowledged (-1: its end was answered as incomplete).
  void SendAgain(int64_t ts, int after_ms) {
    const std::string app = "server app " + std::to_string(app_->app_id());
    const std::string why =
        after_ms < 0 ? "a message of it was lost"
                     : "unacknowledged after " + std::to_string(after_ms) +
                           " ms (EMBER_MIGRATION_RESEND_MS)";
    Copy c;
    {
      MutexLock lock(&mu_);
      auto it = copies_.find(ts);
      if (it == copies_.end()) return;
      c = it->second;
      if (!c.handover) copies_.erase(it);
    }
    if (!app_->node()->IsAlive(c.target)) {
      MutexLock lock(&mu_);
      copies_.erase(ts);
      return;
    }
    if (c.handover) {
      LOG(WARNING) << app << ": hand-over to node " << c.target
                   << " under ring epoch " << c.epoch << ": " << why
                   << "; sending it again";
      size_t ignored = 0;
      Status st = SendHandover(ts, &ignored);
      if (!st.ok()) {
        LOG(ERROR) << app << ": hand-over to node " << c.target
                   << " could not be sent again: " << st;
      }
      return;
    }
    // A copy of this server's data: made afresh, under the current ring, if
    // the target still is one and no newer copy to it is under way.
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    const int me = app_->node()->my_id();
    if (!ring || ring->IndexOf(me) < 0) return;
    const std::vector<int> targets = ring->ReplicaTargets(me);
    if (std::find(targets.begin(), targets.end(), c.target) == targets.end()) {
      return;
    }
    {
      MutexLock lock(&mu_);
      for (const auto& other : copies_) {
        if (!other.second.handover && other.second.target == c.target) return;
      }
    }
    LOG(WARNING) << app << ": copy of this server's data to node " << c.target
                 << ": " << why << "; copying again";
    CopyState(ring, {c.target});
  }

  // The ring positions server `from` owned under `prev` that server `to`
  // owns under `ring`, in order (RangesOf: the last range's end,
  // UINT64_MAX, holds that position too).
  static std::vector<Range> MovedRanges(const KeyRing& prev,
                                        const KeyRing& ring, int from, int to) {
    std::vector<Range> out;
    const int a = prev.IndexOf(from);
    const int b = ring.IndexOf(to);
    if (a < 0 || b < 0) return out;
    const std::vector<Range> x = prev.RangesOf(a);
    const std::vector<Range> y = ring.RangesOf(b);
    for (const Range& r : x) {
      for (const Range& q : y) {
        const uint64_t begin = std::max(r.begin(), q.begin());
        const uint64_t end = std::min(r.end(), q.end());
        if (begin < end) out.emplace_back(begin, end);
      }
    }
    std::sort(out.begin(), out.end(), [](const Range& l, const Range& r) {
      return l.begin() < r.begin();
    });
    return out;
  }

  // Refuses request `r` (held by the consistency controller) because its
  // keys moved to another server under `ring`: its worker re-routes it
  // (docs/replication.md, "Re-routing").
  void RefuseMoved(const RawRequest& r, const KeyRing& ring) {
    const Status s = Status::Unavailable(
        "request held for its round at node " +
        std::to_string(app_->node()->my_id()) + ", whose keys moved to " +
        "another server under ring epoch " + std::to_string(ring.epoch()) +
        ": refused, not answered here");
    if (r.timestamp < 0) {
      // A resend for a dead server (held under a local timestamp): the
      // refusal goes to its worker as the request's own answer would, with
      // the epoch, so that the worker re-routes it too. (It failed before:
      // a replacement that joined under bsp failed a held pull.)
      Local local;
      {
        MutexLock lock(&mu_);
        auto it = locals_.find(r.timestamp);
        if (it == locals_.end()) return;  // Answered already.
        local = std::move(it->second);
        locals_.erase(it);
      }
      SendTo(r.cmd, r.push, r.pull, local.reply_to, local.reply_ts,
             local.reply_customer, RawKVs(), s, local.resend_for, r.timestamp,
             ring.epoch());
      return;
    }
    SendTo(r.cmd, r.push, r.pull, r.sender, r.timestamp, r.customer_id,
           RawKVs(), s, 0, r.timestamp, ring.epoch());
  }

  // Server `dead` failed over. If it was a former owner of keys that moved
  // to a server that joined, it may have died before handing them over:
  // its heir (this server, if it took over the dead server's ranges) hands
  // them over from its copy, which holds them as they were at the switch
  // (the dead server applied no push to them after it). The newcomer takes
  // it only if it still awaits the dead server's end (LoadCopy).
  void HandOverForDead(int dead) {
    std::shared_ptr<const KeyRing> prev, joined;
    {
      MutexLock lock(&mu_);
      prev = join_prev_ring_;
      joined = join_ring_;
    }
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    const int me = app_->node()->my_id();
    if (!prev || !joined || !ring || prev->IndexOf(dead) < 0 ||
        joined->IndexOf(dead) < 0 || ring->IndexOf(me) < 0) {
      return;
    }
    const std::vector<Range> ranges = joined->RangesOf(joined->IndexOf(dead));
    if (ranges.empty()) return;
    const int heir =
        ring->server_ids()[ring->range_owner(ring->RangeAt(ranges[0].begin()))];
    if (heir != me) return;
    for (int n : joined->server_ids()) {
      if (prev->IndexOf(n) >= 0 || n == dead || ring->IndexOf(n) < 0) continue;
      HandOver(*prev, *joined, n, dead);
    }
  }

  // Server `from` ended its hand-over to this server.
  void OnHandoverEnd(int from) {
    std::vector<Message> held;
    {
      MutexLock lock(&mu_);
      if (!awaiting_.erase(from) || !awaiting_.empty()) return;
      held.swap(held_);
      holding_.store(false, std::memory_order_relaxed);
    }
    LOG(INFO) << "server app " << app_->app_id()
              << ": every former owner has handed its keys over; serving "
              << held.size() << " held request(s)";
    app_->node()->HandoverDone(app_->app_id());
    RestoreCopies();
    for (Message& m : held) Process(m);
  }

  // --- Leaving (docs/replication.md, "Leaving").
  //
  // When a ring drops a live server (it asked to leave), the leaver hands
  // each server that takes some of its ranges (KeyRing::RemoveServer) the
  // state of those keys, as a former owner does for a newcomer (chunks,
  // state_copy 5, then the end, 4), and reports to its node once every
  // new owner has acknowledged the end. A new owner holds its own requests
  // from the moment it handles the ring until the leaver's end arrives,
  // then makes its copies (RestoreCopies) and serves them, as a newcomer
  // does. A request sliced by the new ring, or a hand-over under it, can
  // reach a new owner before this app has handled that ring: it waits for
  // it (HoldIfAhead), or it would be applied before the state and be lost
  // when the state replaces its keys.

  // Holds `msg` until this app has handled the ring it comes under: an
  // own request sliced by a newer ring, or a hand-over message under one.
  bool HoldIfAhead(const Message& msg) {
    // A hand-over's message, or (bsp) a deferred push it moves.
    const bool handover = IsHandover(msg.meta) ||
                          (msg.meta.state_copy == 0 &&
                           msg.meta.replica_of != 0 && msg.meta.epoch != 0);
    const bool own = msg.meta.state_copy == 0 && msg.meta.replica_of == 0 &&
                     !msg.meta.clock_tick;
    if ((!handover && !own) ||
        msg.meta.epoch <= ring_seen_.load(std::memory_order_relaxed)) {
      return false;
    }
    Message held = SharingFrames(msg);
    MutexLock lock(&mu_);
    ahead_.push_back(std::move(held));
    return true;
  }

  // The servers that own some of `leaver`'s ranges of `prev` under `ring`.
  static std::vector<int> NewOwners(const KeyRing& prev, const KeyRing& ring,
                                    int leaver) {
    std::set<int> owners;
    const int index = prev.IndexOf(leaver);
    if (index < 0) return {};
    for (const Range& r : prev.RangesOf(index)) {
      const uint64_t last = r.end() == UINT64_MAX ? UINT64_MAX : r.end() - 1;
      for (size_t i = ring.RangeAt(r.begin());
           i < ring.num_ranges() && ring.range_begin(i) <= last; ++i) {
        owners.insert(ring.server_ids()[ring.range_owner(i)]);
      }
    }
    return std::vector<int>(owners.begin(), owners.end());
  }

  // A ring change from `prev` to `ring`: for each live server it drops
  // (one that leaves; a failover's dead server is not live), this server
  // hands its ranges over if it is the leaver, or awaits them if it takes
  // some. True if a server left.
  bool HandleLeave(const KeyRing& prev, const KeyRing& ring) {
    const int me = app_->node()->my_id();
    bool any = false;
    for (int leaver : prev.server_ids()) {
      if (ring.IndexOf(leaver) >= 0 || !app_->node()->IsAlive(leaver)) {
        continue;
      }
      any = true;
      const std::vector<int> owners = NewOwners(prev, ring, leaver);
      if (leaver == me) {
        std::vector<int64_t> started;
        for (int to : owners) {
          const int64_t ts = HandOver(prev, ring, to);
          if (ts != 0) started.push_back(ts);
        }
        bool none = false;
        {
          MutexLock lock(&mu_);
          for (int64_t ts : started) {
            copies_[ts].leave = true;
            leave_pending_.insert(copies_[ts].target);
          }
          none = leave_pending_.empty();
        }
        // Nothing could be sent (logged): nothing to wait for.
        if (none) app_->node()->LeaveHandedOver(app_->app_id());
      } else if (std::find(owners.begin(), owners.end(), me) != owners.end()) {
        MutexLock lock(&mu_);
        awaiting_.insert(leaver);
        holding_.store(true, std::memory_order_relaxed);
        LOG(INFO) << "server app " << app_->app_id()
                  << ": awaiting the keys that move here from node " << leaver
                  << ", which leaves (ring epoch " << ring.epoch() << ")";
      }
    }
    return any;
  }

  // New owner `target` acknowledged the end of this leaving server's
  // hand-over.
  void LeaveHandOverAcked(int target) {
    {
      MutexLock lock(&mu_);
      if (!leave_pending_.erase(target) || !leave_pending_.empty()) return;
    }
    LOG(INFO) << "server app " << app_->app_id()
              << ": every new owner has acknowledged the keys this server "
                 "handed over";
    app_->node()->LeaveHandedOver(app_->app_id());
  }

  void OnStateAck(const Meta& meta) {
    Copy done;
    bool incomplete = false;
    {
      MutexLock lock(&mu_);
      auto it = copies_.find(meta.timestamp);
      if (it == copies_.end() || it->second.target != meta.sender) return;
      Copy& c = it->second;
      // An answer to an earlier sending changes nothing.
      if (meta.copy_attempt != c.attempt) return;
      if (meta.status_code != 0 && c.status.ok()) {
        c.status = Status(static_cast<Status::Code>(meta.status_code),
                          meta.status_message);
      }
      // A copy is acknowledged with its end's answer, which the target
      // sends after every other message's (one link, one thread, in order)
      // and only once it took every one of this sending: a message's
      // answer the network delivers twice must not end it early, nor may a
      // lost one.
      if (meta.state_copy != (c.handover ? 4 : 2)) return;
      incomplete = meta.copy_incomplete;
      if (!incomplete) {
        done = c;
        copies_.erase(it);
      }
    }
    if (incomplete) {
      SendAgain(meta.timestamp, -1);
      return;
    }
    const std::string app = "server app " + std::to_string(app_->app_id());
    if (done.handover) {
      if (!done.status.ok()) {
        LOG(ERROR) << app << ": node " << done.target
                   << " refused the hand-over of its keys: " << done.status;
      } else {
        VLOG(1) << app << ": node " << done.target
                << " has the state of the keys it took over";
      }
      if (done.leave) LeaveHandOverAcked(done.target);
      return;
    }
    if (!done.status.ok()) {
      LOG(ERROR) << app << ": node " << done.target
                 << " refused the copy of this server's data: " << done.status;
      return;
    }
    // The ring may have changed while the copy was made: it still counts if
    // this server's ranges are the same and the target is still one (the
    // newer ring's RestoreCopies left it to this copy).
    std::shared_ptr<const KeyRing> now = app_->node()->key_ring();
    const int me = app_->node()->my_id();
    uint64_t epoch = done.epoch;
    if (now && now->epoch() != done.epoch) {
      const std::vector<int> targets = now->ReplicaTargets(me);
      if (!SameRanges(done.ring, now, me) ||
          std::find(targets.begin(), targets.end(), done.target) ==
              targets.end()) {
        return;  // Copied again under the newer ring.
      }
      epoch = now->epoch();
    }
    LOG(INFO) << app << ": node " << done.target
              << " holds a whole copy of this server's data (ring epoch "
              << epoch << ")";
    app_->node()->StateCopied(app_->app_id(), done.target, epoch);
  }

  AppImpl* const app_;
  const size_t value_bytes_;
  const Handler handler_;
  std::atomic<uint64_t> rejected_{0};
  // At most a line a second per worker about its rejected requests.
  LogLimiter reject_log_;

  mutable Mutex mu_;
  ConsistencyConfig config_ GUARDED_BY(mu_);
  // Created at the first message; used on the customer thread only.
  std::unique_ptr<ConsistencyController> controller_ GUARDED_BY(mu_);
  // Requests acknowledged before their handle ran: (sender, customer,
  // timestamp) -> answers to swallow.
  std::map<std::tuple<int, int, int64_t>, int> acked_ GUARDED_BY(mu_);
  // Pulls not yet answered: (sender, customer, timestamp) -> their keys,
  // held so that no other array can take their address meanwhile. At most
  // kMaxPullKeys (a handle that never answers cannot grow it); a pull
  // beyond that is answered with its keys.
  static constexpr size_t kMaxPullKeys = 1 << 16;
  struct HeldPull {
    SArray<Key> keys;
    int64_t arrived_us = 0;
  };
  std::map<std::tuple<int, int, int64_t>, HeldPull> pull_keys_;  // mu_.

  // Replication: requests under local timestamps, and the pushes applied,
  // by (sender, customer) -> (timestamp, DedupId). At most kMaxApplied per
  // sender; the worker's done_below trims it.
  static constexpr size_t kMaxApplied = 1 << 20;
  std::unordered_map<int64_t, Local> locals_ GUARDED_BY(mu_);
  int next_local_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, int>, std::set<std::pair<int64_t, int64_t>>> applied_
      GUARDED_BY(mu_);
  // The highest done_below each (sender, customer) has sent (StaleLocked).
  std::map<std::pair<int, int>, int64_t> done_below_ GUARDED_BY(mu_);
  // Holders that keep no keys: copies to them carry their keys as they are
  // (CopyKeysTo).
  std::set<int> copy_keys_off_ GUARDED_BY(mu_);
  // Restoring copies: how the handle's state is read and written, the
  // ring under which the copies of this server's data were last whole, and
  // the copies under way by local timestamp.
  static constexpr size_t kCopyChunkBytes = 4 << 20;
  StateHooks hooks_ GUARDED_BY(mu_);
  std::shared_ptr<const KeyRing> synced_ring_ GUARDED_BY(mu_);
  std::map<int64_t, Copy> copies_ GUARDED_BY(mu_);
  // Lost messages: the last copy_attempt this app used, and per sender and
  // kind (true: hand-over) where its newest sending stands here.
  int64_t next_attempt_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, bool>, Stream> streams_ GUARDED_BY(mu_);
  // Joining: the ring of the last ring change this app handled, the
  // servers whose hand-over a newly joined server still awaits, and its
  // requests held meanwhile.
  std::shared_ptr<const KeyRing> handover_ring_ GUARDED_BY(mu_);
  std::set<int> awaiting_ GUARDED_BY(mu_);
  // The rings before and after the last join this app saw (a former
  // owner's heir hands over for it, HandOverForDead).
  std::shared_ptr<const KeyRing> join_prev_ring_ GUARDED_BY(mu_);
  std::shared_ptr<const KeyRing> join_ring_ GUARDED_BY(mu_);
  std::vector<Message> held_ GUARDED_BY(mu_);
  // bsp: the server whose copy of its data is arriving (its pending pushes
  // taken, its end not yet; 0: none), since when (the node's clock), and
  // the requests of other nodes held meanwhile (HoldForCopy). copy_from_
  // is written on the customer thread only and read there without mu_.
  std::atomic<int> copy_from_{0};
  int64_t copy_since_ms_ GUARDED_BY(mu_) = 0;
  std::vector<Message> copy_held_ GUARDED_BY(mu_);
  // config_ is bsp (read on the data path without mu_).
  std::atomic<bool> bsp_{false};
  std::atomic<bool> holding_{false};  // !awaiting_.empty(), without a lock
  // Leaving: the epoch of the ring this app last handled (customer thread
  // only), the messages that came sliced by (or handing over under) a
  // newer one, and the new owners yet to acknowledge this server's
  // hand-over.
  std::atomic<uint64_t> ring_seen_{0};
  std::vector<Message> ahead_ GUARDED_BY(mu_);
  std::set<int> leave_pending_ GUARDED_BY(mu_);
  std::shared_ptr<const KeyRing> targets_ring_ GUARDED_BY(mu_);
  int targets_me_ GUARDED_BY(mu_) = 0;
  std::vector<int> targets_ GUARDED_BY(mu_);
  metrics::Counter* duplicates_ = nullptr;
  metrics::Counter* key_cache_hits_ = nullptr;
  metrics::Counter* key_cache_misses_ = nullptr;
  // The key sets workers asked this app to keep (docs/protocol.md, "Key
  // caching").
  KeyCache key_cache_;
  metrics::Counter* copies_sent_ = nullptr;
  metrics::Counter* copies_applied_ = nullptr;
  metrics::Counter* copy_keys_resent_ = nullptr;

  metrics::Counter* requests_[3] = {};
  metrics::Counter* keys_[3] = {};
  metrics::Counter* rejected_metric_ = nullptr;
  metrics::Histogram* pull_wait_ = nullptr;
  metrics::Histogram* push_apply_ = nullptr;
  int collector_ = 0;
};

KVServerCore::KVServerCore(AppImpl* app, size_t value_bytes, Handler handler)
    : impl_(std::make_unique<Impl>(app, value_bytes, std::move(handler))) {}

KVServerCore::~KVServerCore() = default;

void KVServerCore::Respond(int cmd, bool push, bool pull, int sender,
                           int timestamp, int customer_id, const RawKVs& res,
                           const Status& error) {
  impl_->Respond(cmd, push, pull, sender, timestamp, customer_id, res, error);
}

void KVServerCore::set_state_hooks(StateHooks hooks) {
  impl_->set_state_hooks(std::move(hooks));
}

Status KVServerCore::SetConsistency(const std::string& spec) {
  return impl_->SetConsistency(spec);
}

ConsistencyStats KVServerCore::consistency_stats() const {
  return impl_->stats();
}

}  // namespace ps
