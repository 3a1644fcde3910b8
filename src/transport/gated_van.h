// GatedVan: what ZmqVan and InProcVan share. Each receives from one source
// through a ReceiveGate (the van's own thread runs the gate's owner loop,
// and idle threads may visit it through CoReceive), and reaches its peers
// through a table of routes, node id -> address. The derived van starts
// and stops the gate and keeps the table; this class answers for the gate
// and the table where every such van answers alike. Thread-safe.
#ifndef PS_TRANSPORT_GATED_VAN_H_
#define PS_TRANSPORT_GATED_VAN_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>

#include "transport/receive_gate.h"
#include "transport/van.h"
#include "util/mutex.h"

namespace ps {

class GatedVan : public Van {
 public:
  size_t num_routes() const override {
    MutexLock lock(&mu_);
    return routes_.size();
  }

  // kStopped unless the van has started and is not stopping.
  ReceiveGate::Result CoReceive(int wake_fd,
                                const std::function<bool()>& done) override {
    {
      MutexLock lock(&mu_);
      if (!started_ || stopping_) return ReceiveGate::Result::kStopped;
    }
    return gate_.Visit(wake_fd, done);
  }

  void set_spin(std::chrono::microseconds spin) override {
    gate_.set_spin(spin);
    gate_.set_contention(&CpuContention::Get());
  }

 protected:
  GatedVan() = default;

  Handler handler_;  // Set by Start.
  ReceiveGate gate_;

  mutable Mutex mu_;
  std::unordered_map<int, std::string> routes_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;   // Start succeeded.
  bool stopping_ GUARDED_BY(mu_) = false;  // Stop has begun.
};

}  // namespace ps

#endif  // PS_TRANSPORT_GATED_VAN_H_
