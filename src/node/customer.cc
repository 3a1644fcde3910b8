#include "node/customer.h"

#include <glog/logging.h>

#include "node/node.h"
#include "util/thread_name.h"

namespace ps {

Customer::Customer(int app_id, int customer_id, Node* node, Handler handler,
                   bool held)
    : app_id_(app_id),
      customer_id_(customer_id),
      node_(node),
      handler_(std::move(handler)),
      held_(held) {
  thread_ = std::thread(&Customer::Loop, this);
  node_->AddCustomer(this);
}

Customer::~Customer() {
  node_->RemoveCustomer(this);
  {
    // No new claims once removed; let a claimant in progress finish.
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return !busy_ && admitted_ == 0; });
  }
  Release();
  queue_.Close();
  if (thread_.joinable()) thread_.join();
}

void Customer::set_failure_handler(FailureHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_handler_ = std::move(handler);
}

void Customer::set_peer_failure_handler(PeerFailureHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_failure_handler_ = std::move(handler);
}

void Customer::set_inline_predicate(InlinePredicate predicate) {
  std::lock_guard<std::mutex> lock(mu_);
  inline_predicate_ = std::move(predicate);
}

bool Customer::Claim(const Meta& meta) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!inline_predicate_ || held_ || busy_ || queued_ != handled_ ||
      queue_.closed() || !inline_predicate_(meta)) {
    return false;
  }
  busy_ = true;
  ++queued_;
  return true;
}

bool Customer::Admit(const Meta& meta, bool may_claim) {
  if (may_claim && Claim(meta)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  ++admitted_;
  return false;
}

void Customer::Deliver(Message&& msg, bool admitted_inline) {
  if (admitted_inline) {
    RunClaimed(std::move(msg));
    return;
  }
  Accept(std::move(msg));
  std::lock_guard<std::mutex> lock(mu_);
  if (--admitted_ == 0) idle_cv_.notify_all();
}

void Customer::RunClaimed(Message&& msg) {
  Event e;
  e.msg = std::move(msg);
  HandleBusy(&e);
}

void Customer::HandleBusy(Event* e) {
  Handle(*e);
  *e = Event();  // Drops the message's buffers before counting it handled.
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
  ++handled_;
  idle_cv_.notify_all();
}

void Customer::Accept(Message&& msg) {
  Event e;
  e.msg = std::move(msg);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_;
  }
  if (!queue_.Push(std::move(e))) {
    std::lock_guard<std::mutex> lock(mu_);
    --queued_;
  }
}

void Customer::OnPeerFailed(int peer, const Status& status) {
  Event e;
  e.failed_peer = peer;
  e.status = status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_;
  }
  if (!queue_.Push(std::move(e))) {
    std::lock_guard<std::mutex> lock(mu_);
    --queued_;
    tracker_.OnPeerFailed(peer, status);
  }
}

void Customer::FailAll(const Status& status) {
  Event e;
  e.fail_all = true;
  e.status = status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_;
  }
  if (!queue_.Push(std::move(e))) {
    std::lock_guard<std::mutex> lock(mu_);
    --queued_;
    tracker_.FailAll(status);
  }
}

void Customer::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!held_) return;
    held_ = false;
  }
  idle_cv_.notify_all();
}

void Customer::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t target = queued_;
  idle_cv_.wait(lock, [&] { return handled_ >= target || queue_.closed(); });
}

void Customer::Loop() {
  NameThisThread("ember-app" + std::to_string(app_id_));
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return !held_; });
  }
  Event e;
  while (queue_.Pop(&e)) {
    {
      // A claimant may be handling an earlier message.
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [this] { return !busy_; });
      busy_ = true;
    }
    HandleBusy(&e);
  }
}

void Customer::Handle(Event& e) {
  if (e.failed_peer >= 0 || e.fail_all) {
    std::vector<int> failed =
        e.fail_all ? tracker_.FailAll(e.status)
                   : tracker_.OnPeerFailed(e.failed_peer, e.status);
    FailureHandler handler;
    PeerFailureHandler peer_handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = failure_handler_;
      peer_handler = peer_failure_handler_;
    }
    if (handler) {
      for (int ts : failed) handler(ts, e.status);
    }
    if (peer_handler) peer_handler(e.fail_all ? -1 : e.failed_peer, e.status);
    return;
  }
  const Meta& meta = e.msg.meta;
  int ts = meta.timestamp;
  int sender = meta.sender;
  bool response = !meta.request;
  Status status;
  if (meta.status_code != 0) {
    status = Status(static_cast<Status::Code>(meta.status_code),
                    meta.status_message);
  }
  handler_(e.msg);
  if (response) {
    bool completed = tracker_.OnResponse(ts, sender, status);
    if (completed && !status.ok()) {
      FailureHandler handler;
      {
        std::lock_guard<std::mutex> lock(mu_);
        handler = failure_handler_;
      }
      if (handler) handler(ts, status);
    }
  }
}

}  // namespace ps
