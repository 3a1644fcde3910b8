// AppImpl: the library half of a SimpleApp (and of the KV apps built on it).
//
// It owns the app's Customer and routes each received message: SimpleApp
// messages to the request/response handles, key-value messages to the
// handler a KV core installs. Handlers run on the customer thread.
// Thread-safe.
#ifndef PS_APP_APP_IMPL_H_
#define PS_APP_APP_IMPL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "message/message.h"
#include "node/customer.h"
#include "node/node.h"
#include "ps/simple_app.h"
#include "util/mutex.h"

namespace ps {

class AppImpl {
 public:
  // Customer::Handler: false for a response the handler has taken over.
  using KVHandler = std::function<bool(Message& msg)>;
  using FailureHandler = Customer::FailureHandler;

  // `app` and `postoffice` are borrowed and outlive this object. Messages
  // are delivered once the customer exists: at EnableDelivery() (or the
  // first request).
  AppImpl(SimpleApp* app, int app_id, int customer_id, Postoffice* postoffice);
  ~AppImpl();

  int app_id() const { return app_id_; }
  int customer_id() const { return customer_id_; }
  Node* node() const { return node_; }
  Postoffice* postoffice() const { return postoffice_; }

  // The customer, created (held) on first use.
  Customer* customer();
  void EnableDelivery() { customer()->Release(); }
  // Destroys the customer: no handler runs after this returns.
  void StopDelivery();

  void set_kv_handler(KVHandler handler, FailureHandler on_failure);
  // Runs on the customer thread when a peer dies (its id) or the node fails
  // (-1).
  void set_peer_failure_handler(Customer::PeerFailureHandler handler);
  // Customer::set_failover_handler, on the customer thread; without one,
  // what the dead server owed fails.
  void set_failover_handler(Customer::FailoverHandler handler);
  // Customer::set_watch_handler, on the customer thread.
  void set_watch_handler(Customer::WatchHandler handler);
  // Customer::set_tick_handler, on the customer thread.
  void set_tick_handler(Customer::TickHandler handler);
  // Customer::set_ring_handler, on the customer thread.
  void set_ring_handler(Customer::RingHandler handler);
  // Customer::set_worker_handler, on the customer thread.
  void set_worker_handler(Customer::WorkerHandler handler);
  // Customer::set_inline_predicate on the app's customer, if it exists
  // (after StopDelivery it does not, and none is created).
  void set_inline_predicate(Customer::InlinePredicate predicate);
  void set_request_handle(SimpleApp::Handle handle);
  void set_response_handle(SimpleApp::Handle handle);

  // Timestamps at the API are ints (ps/internal/timestamp.h): Request
  // returns one; Wait and WaitFor resolve one to this customer's request.
  int Request(int head, const std::string& body, int recv_id);
  Status Wait(int timestamp);
  Status WaitFor(int timestamp, int64_t timeout_ms);
  void Response(const SimpleData& req, const std::string& body);

  // The 64-bit timestamp of the request of (sender, customer_id) that API
  // timestamp `api` names, for an answer to it: the newest this app has
  // received with those low bits; a negative `api` (a local request of
  // this server) unchanged; -1 if none was received.
  int64_t ResolveRequest(int sender, int customer_id, int api);

 private:
  // Customer::Handler.
  bool Process(Message& msg);
  // The tracker's request for API timestamp `api`, or kInvalidArgument.
  StatusOr<int64_t> ResolveOwn(int api);

  SimpleApp* const app_;
  const int app_id_;
  const int customer_id_;
  Postoffice* const postoffice_;
  Node* const node_;

  Mutex mu_;
  std::unique_ptr<Customer> customer_ GUARDED_BY(mu_);  // While created.
  // customer_.get() once created, read without mu_: every request asks for
  // the customer several times.
  std::atomic<Customer*> customer_ptr_{nullptr};
  KVHandler kv_handler_ GUARDED_BY(mu_);
  FailureHandler kv_failure_ GUARDED_BY(mu_);
  Customer::PeerFailureHandler peer_failure_ GUARDED_BY(mu_);
  Customer::WatchHandler watch_ GUARDED_BY(mu_);
  Customer::TickHandler tick_ GUARDED_BY(mu_);
  Customer::FailoverHandler failover_ GUARDED_BY(mu_);
  Customer::RingHandler ring_ GUARDED_BY(mu_);
  Customer::WorkerHandler worker_ GUARDED_BY(mu_);
  // Shared so a call runs the one instance (handles may hold state) without
  // holding mu_.
  std::shared_ptr<SimpleApp::Handle> request_handle_ GUARDED_BY(mu_);
  std::shared_ptr<SimpleApp::Handle> response_handle_ GUARDED_BY(mu_);
  // The newest request timestamp received from each (sender, customer):
  // what an answer's API timestamp resolves against. One entry per peer
  // customer.
  std::map<std::pair<int, int>, int64_t> newest_request_ GUARDED_BY(mu_);
};

// The key-value request counters of app `app_id` (docs/operations.md), by
// operation: [0] push, [1] pull, [2] push-pull. Workers count what they
// send, servers what they receive.
struct KVRequestCounters {
  metrics::Counter* requests[3] = {};
  metrics::Counter* keys[3] = {};
};
KVRequestCounters GetKVRequestCounters(metrics::Registry* registry, int app_id);

}  // namespace ps

#endif  // PS_APP_APP_IMPL_H_
