// The server's side of key-value requests: validate, order by the
// consistency controller, hand to the application's handle, and send its
// answer back.

#include <glog/logging.h>

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "consistency/controller.h"
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
    app_->set_kv_handler([this](Message& msg) { Process(msg); }, nullptr);
    app_->set_peer_failure_handler(
        [this](int peer, const Status& s) { OnPeerFailed(peer, s); });
    app_->set_watch_handler([this](int64_t ms) { LogLongWaits(ms); });
  }
  ~Impl() {
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
  void Send(int cmd, bool push, bool pull, int sender, int timestamp,
            int customer_id, const RawKVs& res, const Status& error) {
    bool keys_as_requested = false;
    if (pull && !push) {
      MutexLock lock(&mu_);
      auto it =
          pull_keys_.find(std::make_tuple(sender, customer_id, timestamp));
      if (it != pull_keys_.end()) {
        keys_as_requested = error.ok() &&
                            res.keys.data() == it->second.data() &&
                            res.keys.size() == it->second.size();
        pull_keys_.erase(it);
      }
    }
    Message msg;
    msg.meta.app_id = app_->app_id();
    msg.meta.customer_id = customer_id;
    msg.meta.request = false;
    msg.meta.push = push;
    msg.meta.pull = pull;
    msg.meta.cmd = cmd;
    msg.meta.timestamp = timestamp;
    msg.meta.recipient = sender;
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
      cb.run = [this](const RawRequest& r) { handler_(r); };
      cb.run_acked = [this](const RawRequest& r) {
        {
          MutexLock l(&mu_);
          ++acked_[std::make_tuple(r.sender, r.customer_id, r.timestamp)];
        }
        handler_(r);
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
      tick.sender = msg.meta.sender;
      tick.timestamp = msg.meta.timestamp;
      tick.customer_id = msg.meta.customer_id;
      tick.cmd = msg.meta.cmd;
      Answer(tick, Status::OK());
      controller()->OnClock(msg.meta.sender, msg.meta.clock);
      return;
    }
    RawRequest req;
    req.cmd = msg.meta.cmd;
    req.push = msg.meta.push;
    req.pull = msg.meta.pull;
    req.sender = msg.meta.sender;
    req.timestamp = msg.meta.timestamp;
    req.customer_id = msg.meta.customer_id;
    req.clock = msg.meta.clock;
    Status s = ParseKVFrames(msg, value_bytes_, &req.kvs);
    const int max_keys = app_->node()->options().max_keys_per_request;
    if (s.ok() && req.kvs.keys.size() > static_cast<size_t>(max_keys)) {
      s = Status::InvalidArgument(
          "a request of " + std::to_string(req.kvs.keys.size()) +
          " keys; EMBER_MAX_KEYS_PER_REQUEST is " + std::to_string(max_keys));
    }
    if (!s.ok()) {
      ++rejected_;
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
                                   req.timestamp)] = req.kvs.keys;
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
  std::map<std::tuple<int, int, int>, SArray<Key>> pull_keys_;  // mu_.
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
