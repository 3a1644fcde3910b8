// The server's side of key-value requests: validate, hand to the
// application's handle, and send its answer back.

#include <glog/logging.h>

#include <atomic>

#include "app/app_impl.h"
#include "app/kv_frames.h"
#include "ps/internal/kv_core.h"

namespace ps {

class KVServerCore::Impl {
 public:
  Impl(AppImpl* app, size_t value_bytes, Handler handler)
      : app_(app), value_bytes_(value_bytes), handler_(std::move(handler)) {
    app_->set_kv_handler([this](Message& msg) { Process(msg); }, nullptr);
  }
  ~Impl() { app_->set_kv_handler(nullptr, nullptr); }

  void Respond(int cmd, bool push, bool pull, int sender, int timestamp,
               int customer_id, const RawKVs& res, const Status& error) {
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
      AddKVFrames(res, &msg);
    }
    Status s = app_->node()->Send(std::move(msg));
    if (!s.ok()) {
      LOG(WARNING) << "response to node " << sender << " lost: " << s;
    }
  }

 private:
  void Process(Message& msg) {
    if (!msg.meta.request) return;
    RawRequest req;
    req.cmd = msg.meta.cmd;
    req.push = msg.meta.push;
    req.pull = msg.meta.pull;
    req.sender = msg.meta.sender;
    req.timestamp = msg.meta.timestamp;
    req.customer_id = msg.meta.customer_id;
    Status s = ParseKVFrames(msg, value_bytes_, &req.kvs);
    if (!s.ok()) {
      ++rejected_;
      LOG(WARNING) << "rejecting request " << msg.meta.DebugString() << ": "
                   << s;
      Respond(req.cmd, req.push, req.pull, req.sender, req.timestamp,
              req.customer_id, RawKVs(), s);
      return;
    }
    handler_(req);
  }

  AppImpl* const app_;
  const size_t value_bytes_;
  const Handler handler_;
  std::atomic<uint64_t> rejected_{0};
};

KVServerCore::KVServerCore(AppImpl* app, size_t value_bytes, Handler handler)
    : impl_(std::make_unique<Impl>(app, value_bytes, std::move(handler))) {}

KVServerCore::~KVServerCore() = default;

void KVServerCore::Respond(int cmd, bool push, bool pull, int sender,
                           int timestamp, int customer_id, const RawKVs& res,
                           const Status& error) {
  impl_->Respond(cmd, push, pull, sender, timestamp, customer_id, res, error);
}

}  // namespace ps
