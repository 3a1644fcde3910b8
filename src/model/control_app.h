// The model layer's control SimpleApp (model/model_protocol.h): a SimpleApp
// that also hears of changes of its node's key ring, which ModelServer and
// ModelClient need for servers joining a running job (docs/model.md,
// "Servers joining and leaving").
//
// Thread safety: as SimpleApp.
#ifndef PS_MODEL_CONTROL_APP_H_
#define PS_MODEL_CONTROL_APP_H_

#include <functional>
#include <utility>

#include "app/app_impl.h"
#include "ps/simple_app.h"

namespace ps {
namespace model {

class ControlApp : public SimpleApp {
 public:
  ControlApp(int app_id, int customer_id, Postoffice* postoffice)
      : SimpleApp(app_id, customer_id, postoffice) {}
  ~ControlApp() override { impl_->set_ring_handler(nullptr); }

  // `handler` runs on the app's thread after each change of the node's key
  // ring (a join, a leave, a failover), in order with the app's messages.
  // Null removes it.
  void set_ring_handler(std::function<void()> handler) {
    impl_->set_ring_handler(std::move(handler));
  }
};

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_CONTROL_APP_H_
