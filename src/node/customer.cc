#include "node/customer.h"

#include <glog/logging.h>

#include <limits>
#include <string>
#include <vector>

#include "node/node.h"
#include "util/mutex.h"
#include "util/thread_name.h"
#include "util/thread_policy.h"
#include "util/wait_log.h"

namespace ps {

namespace {

// The customer whose own thread is receiving inside Van::CoReceive on this
// thread, if any.
thread_local Customer* tls_receiving_for = nullptr;

}  // namespace

Customer::Customer(int app_id, int customer_id, Node* node, Handler handler,
                   bool held)
    : app_id_(app_id),
      customer_id_(customer_id),
      node_(node),
      handler_(std::move(handler)),
      held_(held) {}

Customer::~Customer() { Stop(); }

void Customer::Start() {
  CHECK(!started_) << "Customer::Start called twice";
  started_ = true;
  thread_ = std::thread(&Customer::Loop, this);
  node_->AddCustomer(this);
}

void Customer::Stop() {
  if (!started_ || !thread_.joinable()) return;
  node_->RemoveCustomer(this);
  {
    // No new claims once removed; let a claimant in progress finish.
    MutexLock lock(&mu_);
    idle_cv_.wait(lock.native(),
                  [this]() REQUIRES(mu_) { return !busy_ && admitted_ == 0; });
  }
  Release();
  queue_.Close();
  WakeLoop();
  if (thread_.joinable()) thread_.join();
}

void Customer::set_failure_handler(FailureHandler handler) {
  SetHandler(&failure_handler_, std::move(handler));
}

void Customer::set_peer_failure_handler(PeerFailureHandler handler) {
  SetHandler(&peer_failure_handler_, std::move(handler));
}

void Customer::set_failover_handler(FailoverHandler handler) {
  SetHandler(&failover_handler_, std::move(handler));
}

void Customer::set_watch_handler(WatchHandler handler) {
  SetHandler(&watch_handler_, std::move(handler));
}

void Customer::set_tick_handler(TickHandler handler) {
  SetHandler(&tick_handler_, std::move(handler));
}

void Customer::set_ring_handler(RingHandler handler) {
  SetHandler(&ring_handler_, std::move(handler));
}

void Customer::set_worker_handler(WorkerHandler handler) {
  SetHandler(&worker_handler_, std::move(handler));
}

void Customer::OnWorkerChange(int worker, WorkerEvent event) {
  Event e;
  e.worker_event = event;
  e.worker_id = worker;
  Enqueue(std::move(e));
}

void Customer::OnRingChanged() {
  Event e;
  e.ring_changed = true;
  Enqueue(std::move(e));
}

void Customer::Tick() {
  {
    MutexLock lock(&mu_);
    if (!tick_handler_) return;
  }
  Event e;
  e.tick = true;
  QueueOnce(kTickQueued, std::move(e));
}

void Customer::Watch(int64_t older_than_ms) {
  Event e;
  e.watch_ms = older_than_ms;
  QueueOnce(kWatchQueued, std::move(e));
}

// A periodic event (Tick, Watch, Expire) is queued only if the last one of
// its kind has run: a slow customer thread sees one, not a backlog.
void Customer::QueueOnce(uint8_t kind, Event&& e) {
  {
    MutexLock lock(&mu_);
    if (periodic_queued_ & kind) return;  // The last one has not run yet.
    periodic_queued_ |= kind;
  }
  if (!Enqueue(std::move(e))) ClearQueued(kind);
}

void Customer::ClearQueued(uint8_t kind) {
  MutexLock lock(&mu_);
  periodic_queued_ &= static_cast<uint8_t>(~kind);
}

void Customer::LogLongWaits(int64_t older_than_ms) {
  constexpr size_t kMaxLines = 5;
  size_t total = 0;
  std::vector<RequestTracker::LongWait> waits =
      tracker_.LongWaits(older_than_ms, kMaxLines, &total);
  for (const RequestTracker::LongWait& w : waits) {
    if (!WaitLogDue(w.waited_ms, older_than_ms)) continue;
    std::string whom;
    if (!w.expected) {
      whom = " (being sent)";
    } else {
      constexpr size_t kMaxNames = 4;
      for (size_t i = 0; i < w.peers.size() && i < kMaxNames; ++i) {
        whom += (i ? ", " : " for ") + node_->Describe(w.peers[i]);
      }
      if (w.peers.size() > kMaxNames) {
        whom += " and " + std::to_string(w.peers.size() - kMaxNames) + " more";
      }
    }
    LOG(WARNING) << "app " << app_id_ << " (customer " << customer_id_
                 << "): request " << w.timestamp << " has waited "
                 << w.waited_ms / 1000 << " s" << whom;
  }
  if (total > waits.size()) {
    LOG(WARNING) << "app " << app_id_ << " (customer " << customer_id_
                 << "): and " << total - waits.size()
                 << " more requests waiting as long";
  }
}

void Customer::Expire(int64_t older_than_ms) {
  Event e;
  e.expire_ms = older_than_ms;
  QueueOnce(kExpireQueued, std::move(e));
}

void Customer::FailExpired(int64_t older_than_ms) {
  size_t total = 0;
  std::vector<RequestTracker::LongWait> waits = tracker_.LongWaits(
      older_than_ms, std::numeric_limits<size_t>::max(), &total);
  FailureHandler handler;
  {
    MutexLock lock(&mu_);
    handler = failure_handler_;
  }
  for (const RequestTracker::LongWait& w : waits) {
    // Still being sent: its peers are not known yet, and the sender fails
    // it itself if sending fails.
    if (!w.expected) continue;
    std::string whom;
    for (int peer : w.peers) {
      whom += (whom.empty() ? "" : ", ") + node_->Describe(peer);
    }
    // kUnavailable, as for a dead server, not kDeadlineExceeded: that code
    // from a bounded wait means the wait gave up and the request is still
    // open, so a caller that waits again on it must not see it here.
    Status status = Status::Unavailable(
        "request " + std::to_string(w.timestamp) + " of app " +
        std::to_string(app_id_) + " had no answer within " +
        std::to_string(older_than_ms) + " ms (EMBER_REQUEST_TIMEOUT_MS) from " +
        whom);
    LOG(WARNING) << status.message();
    tracker_.Fail(w.timestamp, status);
    if (handler) handler(w.timestamp, status);
  }
}

void Customer::set_inline_predicate(InlinePredicate predicate) {
  MutexLock lock(&mu_);
  inline_predicate_ = std::move(predicate);
}

bool Customer::Claim(const Meta& meta) {
  MutexLock lock(&mu_);
  if (!inline_predicate_ || held_ || busy_ || queued_ != handled_ ||
      queue_.closed() || !inline_predicate_(meta)) {
    return false;
  }
  busy_ = true;
  ++queued_;
  return true;
}

Customer::Route Customer::Admit(const Meta& meta, bool may_claim) {
  if (may_claim && tls_receiving_for == this) {
    MutexLock lock(&mu_);
    // Nothing queued and nothing running: this message is next in order.
    if (!held_ && !busy_ && queued_ == handled_ && !queue_.closed()) {
      busy_ = true;
      ++queued_;
      return Route::kKeep;
    }
  }
  if (may_claim && Claim(meta)) return Route::kHere;
  MutexLock lock(&mu_);
  ++admitted_;
  return Route::kQueue;
}

void Customer::Deliver(Message&& msg, Route route) {
  if (route == Route::kHere) {
    RunClaimed(std::move(msg));
    return;
  }
  if (route == Route::kKeep) {
    kept_.msg = std::move(msg);
    has_kept_ = true;
    return;
  }
  Accept(std::move(msg));
  MutexLock lock(&mu_);
  if (--admitted_ == 0) idle_cv_.notify_all();
}

void Customer::RunClaimed(Message&& msg) {
  Event e;
  e.msg = std::move(msg);
  HandleBusy(&e);
}

void Customer::HandleBusy(Event* e) {
  Handle(*e);
  // Drops the message's buffers before counting it handled. The rest of
  // the event is overwritten whole by its next use (TryPop, Deliver's kept
  // message), so it need not be reset here: resetting a Meta (its strings
  // and vectors) cost hundreds of instructions per message.
  e->msg.data.clear();
  MutexLock lock(&mu_);
  busy_ = false;
  ++handled_;
  idle_cv_.notify_all();
}

void Customer::Accept(Message&& msg) {
  Event e;
  e.msg = std::move(msg);
  Enqueue(std::move(e));
}

bool Customer::Enqueue(Event&& e) {
  {
    MutexLock lock(&mu_);
    ++queued_;
  }
  if (!queue_.Push(std::move(e))) {
    MutexLock lock(&mu_);
    --queued_;
    return false;
  }
  WakeLoop();
  return true;
}

void Customer::WakeLoop() {
  if (polling_.exchange(false)) wake_.Signal();
}

void Customer::OnFailover(int peer, const Status& status) {
  Event e;
  e.failed_peer = peer;
  e.failover = true;
  e.status = status;
  if (!Enqueue(std::move(e))) tracker_.OnPeerFailed(peer, status);
}

void Customer::OnPeerFailed(int peer, const Status& status) {
  Event e;
  e.failed_peer = peer;
  e.status = status;
  // A stopping customer's thread handles no more events: fail at once.
  if (!Enqueue(std::move(e))) tracker_.OnPeerFailed(peer, status);
}

void Customer::FailAll(const Status& status) {
  Event e;
  e.fail_all = true;
  e.status = status;
  if (!Enqueue(std::move(e))) tracker_.FailAll(status);
}

void Customer::Release() {
  {
    MutexLock lock(&mu_);
    if (!held_) return;
    held_ = false;
  }
  idle_cv_.notify_all();
}

void Customer::Drain() {
  MutexLock lock(&mu_);
  uint64_t target = queued_;
  idle_cv_.wait(lock.native(), [&]() REQUIRES(mu_) {
    return handled_ >= target || queue_.closed();
  });
}

void Customer::Loop() {
  NameThisThread("ember-app" + std::to_string(app_id_));
  ApplyMessageThreadPolicy();
  {
    MutexLock lock(&mu_);
    idle_cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return !held_; });
  }
  Event e;
  while (true) {
    if (!queue_.TryPop(&e)) {
      if (serves_requests_.load(std::memory_order_relaxed) && CoReceive()) {
        continue;
      }
      if (!queue_.Pop(&e)) break;
    }
    {
      // A claimant may be handling an earlier message.
      MutexLock lock(&mu_);
      idle_cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return !busy_; });
      busy_ = true;
    }
    HandleBusy(&e);
  }
}

bool Customer::CoReceive() {
  if (!wake_.ok()) return false;
  polling_.store(true);
  // Pushers look at polling_ after pushing; we look at the queue after
  // setting it: one of us sees the other.
  bool result = true;  // Something is queued already: go and take it.
  if (queue_.closed()) {
    result = false;  // Pop drains what is left, then the loop ends.
  } else if (queue_.size() == 0) {
    tls_receiving_for = this;
    ReceiveGate::Result r =
        node_->van()->CoReceive(wake_.fd(), [this] { return has_kept_; });
    tls_receiving_for = nullptr;
    result =
        r == ReceiveGate::Result::kDone || r == ReceiveGate::Result::kWoken;
  }
  if (!polling_.exchange(false)) wake_.Consume();
  if (has_kept_) {
    has_kept_ = false;
    HandleBusy(&kept_);  // Admit set busy_.
    result = true;
  }
  return result;
}

Status Customer::Wait(int64_t timestamp) {
  WakeFd* wake = WakeFd::ForThisThread();
  // One such waiter at a time (others wait on the tracker), whether or not
  // other requests are open: with several in flight the caller receives
  // their responses too, handling them as the van's thread would, instead of
  // being woken by that thread for each of its own.
  if (wake != nullptr && tls_receiving_for == nullptr &&
      tracker_.SetWaker(wake, timestamp)) {
    node_->van()->CoReceive(
        wake->fd(), [this, timestamp] { return !tracker_.IsOpen(timestamp); });
    if (tracker_.ClearWaker()) wake->Consume();
  }
  return tracker_.Wait(timestamp);
}

Status Customer::WaitFor(int64_t timestamp, int64_t timeout_ms) {
  Status s = tracker_.Wait(timestamp, timeout_ms);
  // A request that ended with a failure of its own is closed: its own
  // status stands. kDeadlineExceeded from here means still open.
  if (s.code() != Status::Code::kDeadlineExceeded) return s;
  std::vector<int> owed = tracker_.Owed(timestamp);
  if (owed.empty()) return s;
  std::string who;
  for (int peer : owed) {
    who += (who.empty() ? "" : ", ") + node_->Describe(peer);
  }
  return Status::DeadlineExceeded(
      "request " + std::to_string(timestamp) + " had no answer within " +
      std::to_string(timeout_ms) + " ms from " + who + " (still open)");
}

void Customer::Handle(Event& e) {
  if (e.tick) {
    TickHandler handler;
    {
      MutexLock lock(&mu_);
      periodic_queued_ &= static_cast<uint8_t>(~kTickQueued);
      handler = tick_handler_;
    }
    if (handler) handler();
    return;
  }
  if (e.watch_ms >= 0) {
    WatchHandler handler;
    {
      MutexLock lock(&mu_);
      periodic_queued_ &= static_cast<uint8_t>(~kWatchQueued);
      handler = watch_handler_;
    }
    LogLongWaits(e.watch_ms);
    if (handler) handler(e.watch_ms);
    return;
  }
  if (e.expire_ms >= 0) {
    ClearQueued(kExpireQueued);
    FailExpired(e.expire_ms);
    return;
  }
  if (e.worker_event != WorkerEvent::kNone) {
    WorkerHandler handler;
    {
      MutexLock lock(&mu_);
      handler = worker_handler_;
    }
    if (handler) handler(e.worker_id, e.worker_event);
    return;
  }
  if (e.ring_changed) {
    RingHandler handler;
    {
      MutexLock lock(&mu_);
      handler = ring_handler_;
    }
    if (handler) handler();
    return;
  }
  if (e.failover) {
    FailoverHandler failover;
    {
      MutexLock lock(&mu_);
      failover = failover_handler_;
    }
    if (failover) {
      failover(e.failed_peer, e.status);
      return;
    }
  }
  if (e.failed_peer >= 0 || e.fail_all) {
    std::vector<int64_t> failed =
        e.fail_all ? tracker_.FailAll(e.status)
                   : tracker_.OnPeerFailed(e.failed_peer, e.status);
    FailureHandler handler;
    PeerFailureHandler peer_handler;
    {
      MutexLock lock(&mu_);
      handler = failure_handler_;
      peer_handler = peer_failure_handler_;
    }
    if (handler) {
      for (int64_t ts : failed) handler(ts, e.status);
    }
    if (peer_handler) peer_handler(e.fail_all ? -1 : e.failed_peer, e.status);
    return;
  }
  const Meta& meta = e.msg.meta;
  const int64_t ts = meta.timestamp;
  // The answer to a request resent after failover stands for the dead
  // server's (set_failover_handler).
  int sender = meta.resend_for != 0 ? meta.resend_for : meta.sender;
  bool response = !meta.request;
  Status status;
  if (meta.status_code != 0) {
    status = Status(static_cast<Status::Code>(meta.status_code),
                    meta.status_message);
  }
  // A server that replicates also receives acknowledgements of its copies
  // (responses): they come with its requests, so it keeps receiving.
  serves_requests_.store(meta.request || meta.replica_of != 0,
                         std::memory_order_relaxed);
  const bool record = handler_(e.msg);
  if (response && record) {
    bool completed = tracker_.OnResponse(ts, sender, status);
    if (completed && !status.ok()) {
      FailureHandler handler;
      {
        MutexLock lock(&mu_);
        handler = failure_handler_;
      }
      if (handler) handler(ts, status);
    }
  }
}

}  // namespace ps
