// The server's side of key-value requests: validate, order by the
// consistency controller, hand to the application's handle, and send its
// answer back.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "consistency/controller.h"
#include "metrics/metrics.h"
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
  }
  ~Impl() {
    app_->node()->metrics()->RemoveCollector(collector_);
    app_->set_kv_handler(nullptr, nullptr);
    app_->set_peer_failure_handler(nullptr);
    app_->set_watch_handler(nullptr);
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

  void Respond(int cmd, bool push, bool pull, int sender, int timestamp,
               int customer_id, const RawKVs& res, const Status& error) {
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
    });
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

  void Send(int cmd, bool push, bool pull, int sender, int timestamp,
            int customer_id, const RawKVs& res, const Status& error) {
    bool keys_as_requested = false;
    if (pull && !push) {
      MutexLock lock(&mu_);
      auto it =
          pull_keys_.find(std::make_tuple(sender, customer_id, timestamp));
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
    if (!msg.meta.request) return;
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
      Answer(req, s);
      return;
    }
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
  std::map<std::tuple<int, int, int>, int> acked_ GUARDED_BY(mu_);
  // Pulls not yet answered: (sender, customer, timestamp) -> their keys,
  // held so that no other array can take their address meanwhile. At most
  // kMaxPullKeys (a handle that never answers cannot grow it); a pull
  // beyond that is answered with its keys.
  static constexpr size_t kMaxPullKeys = 1 << 16;
  struct HeldPull {
    SArray<Key> keys;
    int64_t arrived_us = 0;
  };
  std::map<std::tuple<int, int, int>, HeldPull> pull_keys_;  // mu_.

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
