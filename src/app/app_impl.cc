#include "app/app_impl.h"

#include <glog/logging.h>

#include <algorithm>
#include <string>

#include "util/mutex.h"

namespace ps {

AppImpl::AppImpl(SimpleApp* app, int app_id, int customer_id,
                 Postoffice* postoffice)
    : app_(app),
      app_id_(app_id),
      customer_id_(customer_id),
      postoffice_(postoffice),
      node_(postoffice->node()) {
  CHECK(node_ != nullptr) << "create apps after ps::Start";
  request_handle_ = std::make_shared<SimpleApp::Handle>(
      [](const SimpleData& req, SimpleApp* a) { a->Response(req); });
  response_handle_ =
      std::make_shared<SimpleApp::Handle>([](const SimpleData&, SimpleApp*) {});
}

AppImpl::~AppImpl() { StopDelivery(); }

void AppImpl::StopDelivery() {
  std::unique_ptr<Customer> customer;
  {
    MutexLock lock(&mu_);
    customer = std::move(customer_);
  }
  if (!customer) return;
  // Joins the customer thread outside mu_. Until it has stopped, what it
  // still handles (a failover, a late answer) finds it through customer()
  // instead of making a new one.
  customer->Stop();
  customer_ptr_.store(nullptr, std::memory_order_release);
  customer.reset();
}

Customer* AppImpl::customer() {
  if (Customer* c = customer_ptr_.load(std::memory_order_acquire)) return c;
  MutexLock lock(&mu_);
  if (!customer_) {
    customer_ = std::make_unique<Customer>(
        app_id_, customer_id_, node_,
        [this](Message& msg) { return Process(msg); },
        /*held=*/true);
    customer_->set_failure_handler([this](int64_t ts, const Status& s) {
      FailureHandler handler;
      {
        MutexLock l(&mu_);
        handler = kv_failure_;
      }
      if (handler) handler(ts, s);
    });
    customer_->set_peer_failure_handler([this](int peer, const Status& s) {
      Customer::PeerFailureHandler handler;
      {
        MutexLock l(&mu_);
        handler = peer_failure_;
      }
      if (handler) handler(peer, s);
    });
    Customer* raw = customer_.get();
    customer_->set_failover_handler([this, raw](int peer, const Status& s) {
      Customer::FailoverHandler handler;
      {
        MutexLock l(&mu_);
        handler = failover_;
      }
      if (handler) {
        handler(peer, s);
      } else {
        // Nothing to resend with (a SimpleApp): what the dead server owed
        // fails, as without replicas.
        raw->tracker()->OnPeerFailed(peer, s);
      }
    });
    customer_->set_watch_handler([this](int64_t older_than_ms) {
      Customer::WatchHandler handler;
      {
        MutexLock l(&mu_);
        handler = watch_;
      }
      if (handler) handler(older_than_ms);
    });
    customer_->set_tick_handler([this] {
      Customer::TickHandler handler;
      {
        MutexLock l(&mu_);
        handler = tick_;
      }
      if (handler) handler();
    });
    customer_->set_ring_handler([this] {
      Customer::RingHandler handler;
      {
        MutexLock l(&mu_);
        handler = ring_;
      }
      if (handler) handler();
    });
    customer_->set_worker_handler([this](int worker, WorkerEvent event) {
      Customer::WorkerHandler handler;
      {
        MutexLock l(&mu_);
        handler = worker_;
      }
      if (handler) handler(worker, event);
    });
    customer_->Start();
    customer_ptr_.store(customer_.get(), std::memory_order_release);
  }
  return customer_.get();
}

void AppImpl::set_kv_handler(KVHandler handler, FailureHandler on_failure) {
  MutexLock lock(&mu_);
  kv_handler_ = std::move(handler);
  kv_failure_ = std::move(on_failure);
}

void AppImpl::set_inline_predicate(Customer::InlinePredicate predicate) {
  MutexLock lock(&mu_);
  if (customer_) customer_->set_inline_predicate(std::move(predicate));
}

void AppImpl::set_peer_failure_handler(Customer::PeerFailureHandler handler) {
  MutexLock lock(&mu_);
  peer_failure_ = std::move(handler);
}

void AppImpl::set_failover_handler(Customer::FailoverHandler handler) {
  MutexLock lock(&mu_);
  failover_ = std::move(handler);
}

void AppImpl::set_watch_handler(Customer::WatchHandler handler) {
  MutexLock lock(&mu_);
  watch_ = std::move(handler);
}

void AppImpl::set_tick_handler(Customer::TickHandler handler) {
  MutexLock lock(&mu_);
  tick_ = std::move(handler);
}

void AppImpl::set_ring_handler(Customer::RingHandler handler) {
  MutexLock lock(&mu_);
  ring_ = std::move(handler);
}

void AppImpl::set_worker_handler(Customer::WorkerHandler handler) {
  MutexLock lock(&mu_);
  worker_ = std::move(handler);
}

void AppImpl::set_request_handle(SimpleApp::Handle handle) {
  CHECK(handle) << "invalid request handle";
  MutexLock lock(&mu_);
  request_handle_ = std::make_shared<SimpleApp::Handle>(std::move(handle));
}

void AppImpl::set_response_handle(SimpleApp::Handle handle) {
  CHECK(handle) << "invalid response handle";
  MutexLock lock(&mu_);
  response_handle_ = std::make_shared<SimpleApp::Handle>(std::move(handle));
}

bool AppImpl::Process(Message& msg) {
  KVHandler handler;
  std::shared_ptr<SimpleApp::Handle> handle;
  {
    // One lock per message: the newest request and the handler together.
    MutexLock lock(&mu_);
    if (msg.meta.request && msg.meta.timestamp >= 0) {
      int64_t& newest = newest_request_[std::make_pair(msg.meta.sender,
                                                       msg.meta.customer_id)];
      newest = std::max(newest, msg.meta.timestamp);
    }
    if (!msg.meta.simple_app) {
      handler = kv_handler_;
    } else {
      handle = msg.meta.request ? request_handle_ : response_handle_;
    }
  }
  if (!msg.meta.simple_app) {
    if (handler) return handler(msg);
    LOG_EVERY_N(WARNING, 1000)
        << "app " << app_id_ << " has no key-value handler; dropping "
        << msg.meta.DebugString();
    return true;
  }
  SimpleData data;
  data.head = msg.meta.cmd;
  data.body = msg.meta.body;
  CopyOrigin(msg.meta, &data);
  (*handle)(data, app_);
  return true;
}

int AppImpl::Request(int head, const std::string& body, int recv_id) {
  EnableDelivery();  // The answers must be handled.
  RequestTracker* tracker = customer()->tracker();
  const int64_t ts = tracker->NewRequest();
  std::vector<int> recipients = node_->GetNodeIds(recv_id);
  tracker->Expect(ts, recipients);
  for (int to : recipients) {
    Message msg = AppMessage(app_id_, customer_id_, ts, to, /*request=*/true);
    msg.meta.simple_app = true;
    msg.meta.cmd = head;
    msg.meta.body = body;
    Status s = node_->Send(std::move(msg));
    if (!s.ok()) {
      tracker->Fail(ts, s);
      break;
    }
  }
  return ApiTimestamp(ts);
}

StatusOr<int64_t> AppImpl::ResolveOwn(int api) {
  const int64_t ts = customer()->tracker()->Resolve(api);
  if (ts < 0) {
    return Status::InvalidArgument("no request with timestamp " +
                                   std::to_string(api));
  }
  return ts;
}

Status AppImpl::Wait(int timestamp) {
  StatusOr<int64_t> ts = ResolveOwn(timestamp);
  if (!ts.ok()) return ts.status();
  return customer()->Wait(*ts);
}

Status AppImpl::WaitFor(int timestamp, int64_t timeout_ms) {
  StatusOr<int64_t> ts = ResolveOwn(timestamp);
  if (!ts.ok()) return ts.status();
  return customer()->WaitFor(*ts, timeout_ms);
}

int64_t AppImpl::ResolveRequest(int sender, int customer_id, int api) {
  if (api < 0) return api;
  MutexLock lock(&mu_);
  auto it = newest_request_.find(std::make_pair(sender, customer_id));
  if (it == newest_request_.end()) return -1;
  return ResolveApiTimestamp(api, it->second);
}

void AppImpl::Response(const SimpleData& req, const std::string& body) {
  const int64_t ts = ResolveRequest(req.sender, req.customer_id, req.timestamp);
  if (ts < 0) {
    LOG(WARNING) << "response to " << req.sender << " dropped: it sent no "
                 << "request with timestamp " << req.timestamp;
    return;
  }
  Message msg = AppMessage(app_id_, req.customer_id, ts, req.sender,
                           /*request=*/false);
  msg.meta.simple_app = true;
  msg.meta.cmd = req.head;
  msg.meta.body = body;
  Status s = node_->Send(std::move(msg));
  if (!s.ok()) LOG(WARNING) << "response to " << req.sender << " lost: " << s;
}

// --- SimpleApp, the public facade.

SimpleApp::SimpleApp() = default;

// A SimpleApp's messages are held until it sets a handle, sends its first
// request, or the node reaches a barrier, so a request that arrives right
// after construction is handled by the application's handle, not by the
// default one (a race in ps-lite).
SimpleApp::SimpleApp(int app_id, int customer_id) : SimpleApp() {
  InitApp(app_id, customer_id, nullptr);
}

SimpleApp::SimpleApp(int app_id, int customer_id, Postoffice* postoffice)
    : SimpleApp() {
  InitApp(app_id, customer_id, postoffice);
}

SimpleApp::~SimpleApp() { delete impl_; }

void SimpleApp::InitApp(int app_id, int customer_id, Postoffice* postoffice) {
  CHECK(impl_ == nullptr);
  if (postoffice == nullptr) postoffice = Postoffice::Get();
  impl_ = new AppImpl(this, app_id, customer_id, postoffice);
  impl_->customer();  // Registered now, held until EnableDelivery.
}

void SimpleApp::EnableDelivery() { impl_->EnableDelivery(); }

void SimpleApp::StopApp() { impl_->StopDelivery(); }

int SimpleApp::Request(int req_head, const std::string& req_body, int recv_id) {
  return impl_->Request(req_head, req_body, recv_id);
}

void SimpleApp::Wait(int timestamp) {
  Status s = impl_->Wait(timestamp);
  if (!s.ok()) FailStop("SimpleApp::Wait", s);
}

Status SimpleApp::WaitStatus(int timestamp) { return impl_->Wait(timestamp); }

Status SimpleApp::WaitStatus(int timestamp, int64_t timeout_ms) {
  return impl_->WaitFor(timestamp, timeout_ms);
}

void SimpleApp::Response(const SimpleData& recv_req,
                         const std::string& res_body) {
  impl_->Response(recv_req, res_body);
}

void SimpleApp::set_request_handle(const Handle& request_handle) {
  impl_->set_request_handle(request_handle);
  impl_->EnableDelivery();
}

void SimpleApp::set_response_handle(const Handle& response_handle) {
  // Releases nothing (see the header): responses follow a Request, which
  // releases the app.
  impl_->set_response_handle(response_handle);
}

KVRequestCounters GetKVRequestCounters(metrics::Registry* registry,
                                       int app_id) {
  static constexpr const char* kOps[3] = {"push", "pull", "pushpull"};
  const std::string app = metrics::Label("app", std::to_string(app_id));
  KVRequestCounters out;
  for (int op = 0; op < 3; ++op) {
    const std::string l = app + "," + metrics::Label("op", kOps[op]);
    out.requests[op] = registry->GetCounter(
        "ember_requests_total",
        "Key-value requests (workers: sent; servers: received)", l);
    out.keys[op] = registry->GetCounter(
        "ember_request_keys_total",
        "Keys in key-value requests (workers: sent; servers: received)", l);
  }
  return out;
}

}  // namespace ps
