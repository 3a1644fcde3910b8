// The server's side of key-value requests: validate, order by the
// consistency controller, hand to the application's handle, and send its
// answer back.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "consistency/controller.h"
#include "metrics/metrics.h"
#include "partition/key_ring.h"
#include "ps/internal/kv_core.h"
#include "util/clock.h"
#include "util/log_limiter.h"
#include "util/mutex.h"

namespace ps {

class KVServerCore::Impl {
 public:
  Impl(AppImpl* app, size_t value_bytes, Handler handler)
      : app_(app),
        value_bytes_(value_bytes),
        handler_(std::move(handler)),
        config_(app->node()->options().consistency) {
    InitMetrics();
    app_->set_kv_handler([this](Message& msg) { Process(msg); }, nullptr);
    app_->set_peer_failure_handler(
        [this](int peer, const Status& s) { OnPeerFailed(peer, s); });
    app_->set_watch_handler([this](int64_t ms) { LogLongWaits(ms); });
    app_->set_failover_handler(
        [this](int dead, const Status&) { OnFailover(dead); });
  }
  ~Impl() {
    app_->node()->metrics()->RemoveCollector(collector_);
    app_->set_kv_handler(nullptr, nullptr);
    app_->set_peer_failure_handler(nullptr);
    app_->set_watch_handler(nullptr);
    app_->set_failover_handler(nullptr);
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
    return Status::OK();
  }

  ConsistencyStats stats() const {
    MutexLock lock(&mu_);
    return controller_ ? controller_->stats() : ConsistencyStats();
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
    rejected_metric_ =
        r->GetCounter("ember_rejected_requests_total",
                      "Requests refused as malformed or too large", app);
    copies_sent_ = r->GetCounter(
        "ember_replica_copies_sent_total",
        "Copies of pushes forwarded to the servers that replicate this "
        "server's data",
        app);
    copies_applied_ =
        r->GetCounter("ember_replica_copies_applied_total",
                      "Copies of other servers' pushes applied here", app);
    duplicates_ = r->GetCounter(
        "ember_duplicate_pushes_total",
        "Pushes received again (resent after failover, or delivered twice) "
        "and answered without being applied",
        app);
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
  // `resend_for` is echoed (docs/replication.md).
  void SendTo(int cmd, bool push, bool pull, int sender, int64_t timestamp,
              int customer_id, const RawKVs& res, const Status& error,
              int resend_for, int64_t handle_ts) {
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
    if (!error.ok()) {
      msg.meta.status_code = static_cast<int>(error.code());
      msg.meta.status_message = error.message();
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

  void Process(Message& msg) {
    if (!msg.meta.request) {
      if (msg.meta.replica_of != 0) OnReplicaAck(msg.meta);
      return;
    }
    if (msg.meta.clock_tick) {
      RawRequest tick;
      CopyOrigin(msg.meta, &tick);
      tick.cmd = msg.meta.cmd;
      Answer(tick, Status::OK());
      controller()->OnClock(msg.meta.sender, msg.meta.clock);
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
    }
    req.cmd = msg.meta.cmd;
    req.push = msg.meta.push;
    req.pull = msg.meta.pull;
    req.clock = msg.meta.clock;
    Status s = ParseKVFrames(msg, value_bytes_, &req.kvs);
    const int op = req.push && req.pull ? 2 : req.push ? 0 : 1;
    requests_[op]->Add();
    keys_[op]->Add(req.kvs.keys.size());
    const int max_keys = app_->node()->options().max_keys_per_request;
    if (s.ok() && req.kvs.keys.size() > static_cast<size_t>(max_keys)) {
      s = Status::InvalidArgument(
          "a request of " + std::to_string(req.kvs.keys.size()) +
          " keys; EMBER_MAX_KEYS_PER_REQUEST is " + std::to_string(max_keys));
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
      } else {
        Answer(req, s);
      }
      return;
    }
    if (!Replicate(msg.meta, &req)) return;
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
    controller()->OnRequest(std::move(req));
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

  // One request the handle sees under a local timestamp.
  struct Local {
    int reply_to = 0;  // the worker, or (a copy) the forwarding server
    int reply_customer = 0;
    int64_t reply_ts = 0;
    int resend_for = 0;     // echoed to the worker
    int replica_of = 0;     // a copy: its acknowledgement says whose data
    std::vector<int> owed;  // servers yet to acknowledge their copy
    bool answered = false;  // the handle has answered
    // The handle's answer, held until every copy is acknowledged.
    int cmd = 0;
    bool push = false;
    bool pull = false;
    RawKVs res;
    Status error;
  };

  // Applies the dedup table to request `req` (meta: as received) and
  // forwards copies; false if it was answered already (a duplicate).
  bool Replicate(const Meta& meta, RawRequest* req) {
    const bool copy = meta.replica_of != 0;
    const bool plain = !copy && meta.resend_for == 0;
    if (plain && !req->push) return true;  // A pull: nothing to do.
    std::shared_ptr<const KeyRing> ring = app_->node()->key_ring();
    if (plain && (!ring || ring->replicas() == 0)) return true;
    const int me = app_->node()->my_id();
    const int whose =
        copy ? meta.replica_of : (meta.resend_for != 0 ? meta.resend_for : me);
    bool duplicate = false;
    if (req->push) {
      MutexLock lock(&mu_);
      auto& seen = applied_[std::make_pair(req->sender, req->customer_id)];
      // The worker will never resend below done_below.
      seen.erase(seen.begin(),
                 seen.lower_bound(std::make_pair(meta.done_below, 0)));
      duplicate = !seen.emplace(req->timestamp, whose).second;
      if (seen.size() > kMaxApplied) seen.erase(seen.begin());
    }
    if (duplicate) {
      duplicates_->Add();
      if (copy) {
        SendAck(meta, Status::OK());
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
    int64_t ts = 0;
    {
      MutexLock lock(&mu_);
      do {
        next_local_ = (next_local_ + 1) & 0x3fffffff;
        ts = -1 - next_local_;
      } while (locals_.count(ts));
      local.owed = targets;
      locals_.emplace(ts, std::move(local));
    }
    std::vector<int> unsent;
    for (int t : targets) {
      Message m = AppMessage(app_->app_id(), app_->customer_id(), ts, t,
                             /*request=*/true);
      m.meta.push = true;
      m.meta.cmd = req->cmd;
      m.meta.clock = req->clock;
      m.meta.value_bytes = static_cast<int>(value_bytes_);
      m.meta.replica_of = whose;
      m.meta.origin_sender = req->sender;
      m.meta.origin_customer = req->customer_id;
      m.meta.origin_timestamp = origin_ts;
      m.meta.done_below = meta.done_below;
      AddKVFrames(req->kvs, &m);
      Status st = app_->node()->Send(std::move(m));
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

  // Acknowledges a duplicate copy at once.
  void SendAck(const Meta& meta, const Status& status) {
    Message m = AppMessage(app_->app_id(), meta.customer_id, meta.timestamp,
                           meta.sender, /*request=*/false);
    m.meta.push = true;
    m.meta.cmd = meta.cmd;
    m.meta.replica_of = meta.replica_of;
    if (!status.ok()) {
      m.meta.status_code = static_cast<int>(status.code());
      m.meta.status_message = status.message();
    }
    Status st = app_->node()->Send(std::move(m));
    if (!st.ok()) LOG(WARNING) << "acknowledgement lost: " << st;
  }

  void OnReplicaAck(const Meta& meta) {
    Status status;
    if (meta.status_code != 0) {
      status = Status(static_cast<Status::Code>(meta.status_code),
                      meta.status_message);
    }
    Acknowledged(meta.timestamp, meta.sender, status);
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
  // by (sender, customer) -> (timestamp, server whose data). At most
  // kMaxApplied per sender; the worker's done_below trims it.
  static constexpr size_t kMaxApplied = 1 << 20;
  std::unordered_map<int64_t, Local> locals_ GUARDED_BY(mu_);
  int next_local_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, int>, std::set<std::pair<int64_t, int>>> applied_
      GUARDED_BY(mu_);
  std::shared_ptr<const KeyRing> targets_ring_ GUARDED_BY(mu_);
  int targets_me_ GUARDED_BY(mu_) = 0;
  std::vector<int> targets_ GUARDED_BY(mu_);
  metrics::Counter* duplicates_ = nullptr;
  metrics::Counter* copies_sent_ = nullptr;
  metrics::Counter* copies_applied_ = nullptr;

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

Status KVServerCore::SetConsistency(const std::string& spec) {
  return impl_->SetConsistency(spec);
}

ConsistencyStats KVServerCore::consistency_stats() const {
  return impl_->stats();
}

}  // namespace ps
