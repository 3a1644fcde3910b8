// ZmqVan: the TCP transport, over ZeroMQ.
//
// One I/O thread owns every socket: a ROUTER bound to this node's endpoint
// receives, and one DEALER per peer address sends. Other threads hand sends
// and connects to the I/O thread through a queue and an eventfd, so no
// socket is ever touched by two threads. Data frames go to ZeroMQ without
// copying (zmq_msg_init_data with a free callback that drops a reference to
// the SArray) and arrive without copying (the received zmq_msg_t backs the
// SArray). Thread-safe.
#ifndef PS_TRANSPORT_ZMQ_VAN_H_
#define PS_TRANSPORT_ZMQ_VAN_H_

#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>

#include "transport/van.h"

namespace ps {

class ZmqVan final : public Van {
 public:
  ZmqVan();
  ~ZmqVan() override;
  ZmqVan(const ZmqVan&) = delete;
  ZmqVan& operator=(const ZmqVan&) = delete;

  StatusOr<int> Start(const std::string& host, int port,
                      Handler handler) override;
  Status Connect(int id, const std::string& host, int port) override;
  Status Send(Message&& msg) override;
  void Stop() override;

 private:
  struct ConnectOp {
    std::string address;  // "host:port"
  };
  using Op = std::variant<ConnectOp, Message>;

  void Post(Op op);
  void IoLoop();
  void DrainOps();
  void DoSend(Message* msg);
  void ReceiveAll();
  void* SocketFor(const std::string& address);

  Handler handler_;
  void* context_ = nullptr;
  void* router_ = nullptr;  // Owned by the I/O thread once started.
  int wake_fd_ = -1;
  std::thread io_thread_;

  // Owned by the I/O thread: address -> DEALER socket.
  std::unordered_map<std::string, void*> dealers_;

  std::mutex mu_;
  std::deque<Op> ops_;                           // Guarded by mu_.
  std::unordered_map<int, std::string> routes_;  // Guarded by mu_.
  bool started_ = false;                         // Guarded by mu_.
  bool stopping_ = false;                        // Guarded by mu_.
};

}  // namespace ps

#endif  // PS_TRANSPORT_ZMQ_VAN_H_
