// SimpleApp: ps-lite's request/response app carrying an int head and a
// string body between nodes.
//
// Handles run on the app's own thread (its customer thread), never on the
// receive thread; Request and Wait may be called from any thread.
#ifndef PS_SIMPLE_APP_H_
#define PS_SIMPLE_APP_H_

#include <functional>
#include <string>

#include "ps/internal/postoffice.h"
#include "ps/status.h"

namespace ps {

class AppImpl;  // Library-internal.

struct SimpleData {
  int head;
  std::string body;
  int sender;
  int timestamp;
  int customer_id;
};

class SimpleApp {
 public:
  // An app on the default node (ps-lite).
  explicit SimpleApp(int app_id, int customer_id);
  // An app on `postoffice` (borrowed; must outlive the app).
  SimpleApp(int app_id, int customer_id, Postoffice* postoffice);
  virtual ~SimpleApp();
  SimpleApp(const SimpleApp&) = delete;
  SimpleApp& operator=(const SimpleApp&) = delete;

  // Sends (req_head, req_body) to node `recv_id` or to every node of a group;
  // returns a timestamp for Wait.
  virtual int Request(int req_head, const std::string& req_body, int recv_id);

  // Blocks until every recipient has responded. If a recipient dies, logs
  // which and exits the process non-zero (ps-lite has no error path).
  virtual void Wait(int timestamp);
  // Ember: the same, returning the failure.
  [[nodiscard]] Status WaitStatus(int timestamp);
  // Ember: the same, failing with kDeadlineExceeded (naming the nodes that
  // have not answered) after `timeout_ms`.
  [[nodiscard]] Status WaitStatus(int timestamp, int64_t timeout_ms);

  virtual void Response(const SimpleData& recv_req,
                        const std::string& res_body = "");

  using Handle = std::function<void(const SimpleData& recved, SimpleApp* app)>;
  // Received messages are held until the app sets its request handle, sends
  // its first request, or the node reaches a barrier (Finalize included), so
  // no request is handled by the default before the application's handle is
  // in place. Setting the response handle alone releases nothing: a response
  // can only come once the app has sent a request, and an app that sets its
  // response handle first would otherwise answer, with the default, a
  // request that arrives before its request handle is set.
  // Default: respond with an empty body.
  virtual void set_request_handle(const Handle& request_handle);
  // Default: nothing.
  virtual void set_response_handle(const Handle& response_handle);

 protected:
  SimpleApp();
  // Binds the app to a node. Its messages are held until EnableDelivery()
  // (or a barrier on the node).
  void InitApp(int app_id, int customer_id, Postoffice* postoffice);
  void EnableDelivery();
  // Stops handling messages (joins the app thread); subclasses call it first
  // in their destructors, before the state their handlers use goes away.
  void StopApp();

  AppImpl* impl_ = nullptr;  // Owned.
};

}  // namespace ps

#endif  // PS_SIMPLE_APP_H_
