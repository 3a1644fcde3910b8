// ZmqVan: the TCP transport, over ZeroMQ.
//
// A ROUTER bound to this node's endpoint receives, through a ReceiveGate:
// the van's I/O thread waits on it, and so may idle application threads
// (Van::CoReceive). One DEALER per peer address sends; the thread that calls
// Send() writes the message to it itself, under send_mu_ (ZeroMQ sockets may
// change threads across a full memory barrier), so a request or a response
// reaches ZeroMQ without a hand-off to another thread of ours. Sends from
// one thread keep their order. Data frames of more than kCopyMaxBytes go
// to ZeroMQ without copying (zmq_msg_init_data with a free callback that
// drops a reference to the SArray); smaller ones are copied, which costs
// less than the two allocations, the reference count and the free callback
// on ZeroMQ's I/O thread that sharing them takes. Frames arrive without
// copying (the received zmq_msg_t backs the SArray). Hosts are IPv4 or IPv6
// literals (without brackets; ZMQ_IPV6 is set on the sockets that use an IPv6
// one) or, to connect, names, which ZeroMQ resolves to IPv4. Thread-safe.
#ifndef PS_TRANSPORT_ZMQ_VAN_H_
#define PS_TRANSPORT_ZMQ_VAN_H_

#include <zmq.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/gated_van.h"
#include "transport/receive_gate.h"
#include "util/log_limiter.h"
#include "util/mutex.h"
#include "util/wake_fd.h"

namespace ps {

class ZmqVan final : public GatedVan {
 public:
  ZmqVan();
  ~ZmqVan() override;
  ZmqVan(const ZmqVan&) = delete;
  ZmqVan& operator=(const ZmqVan&) = delete;

  // Data frames up to this size are copied into ZeroMQ's own buffer.
  static constexpr size_t kCopyMaxBytes = 4096;

  StatusOr<int> Start(const std::string& host, int port,
                      Handler handler) override;
  Status Connect(int id, const std::string& host, int port,
                 const std::string& local) override;
  std::string local_endpoint() const override;
  Status Send(Message&& msg) override;
  void Disconnect(int id) override;
  void Stop() override;
  [[nodiscard]] Status set_security(const VanSecurity& security) override;

  // Writes a new CURVE key pair to `path` (mode 0600): the public key, then
  // the secret key, one per line, in Z85 (EMBER_CURVE_KEY_FILE).
  [[nodiscard]] static Status WriteCurveKeyFile(const std::string& path);

 private:
  void DoSend(void* socket, const std::string& address, PeerCounters* peer,
              Message* msg) REQUIRES(send_mu_);
  void ReceiveAll();
  // One line per connection per second for the messages it drops.
  void LogRejected(const std::string& peer, const Status& why);
  void* SocketFor(const std::string& address) REQUIRES(send_mu_);
  // CURVE: ZeroMQ's authentication handler (ZAP, RFC 27) on its own
  // thread, admitting only clients with the cluster's public key.
  Status StartZap();
  // Undoes a Start that failed half-way.
  void AbandonStart() REQUIRES(mu_);
  void ZapLoop(void* socket);

  // Peer events (Van::set_peer_event_handler): ZeroMQ's socket monitor on
  // every DEALER, read by a thread of its own, which reports each event
  // with the ids routed to the DEALER's address.
  void StartMonitor() REQUIRES(mu_);
  // Watches a new DEALER; call before it connects.
  void WatchDealer(void* socket, const std::string& address) REQUIRES(send_mu_);
  void MonitorLoop();
  // Reports what one monitor socket has queued; false once its DEALER is
  // closed (the monitor stopped).
  bool ReadMonitor(void* pair, const std::string& address);
  void StopMonitor();
  // Reads what `pair` still holds, up to its MONITOR_STOPPED event.
  static void DrainMonitor(void* pair);

  VanSecurity security_;  // Set before Start.
  std::thread zap_thread_;
  std::atomic<bool> zap_stop_{false};

  void* context_ = nullptr;
  // Received from only under gate_ (by the I/O thread or a guest).
  void* router_ = nullptr;
  LogLimiter reject_log_;
  std::thread io_thread_;

  // address -> DEALER socket, and every use of those sockets.
  Mutex send_mu_;
  std::unordered_map<std::string, void*> dealers_ GUARDED_BY(send_mu_);
  bool closed_ GUARDED_BY(send_mu_) = false;
  // Send's shortcut: node id -> its entry in dealers_, so that a send to a
  // known peer takes one lock and no string copy or string hash. Filled by
  // Send only while routes_version_ is what it was when Send read the
  // route; emptied of an id when its route changes (Connect, Disconnect)
  // and of everything when a DEALER closes or Stop begins.
  std::unordered_map<int, const std::pair<const std::string, void*>*> dealer_of_
      GUARDED_BY(send_mu_);
  // Bumped under mu_ whenever routes_ changes or Stop begins.
  std::atomic<uint64_t> routes_version_{0};
  // The header's encoding buffer, reused from send to send.
  std::string header_ GUARDED_BY(send_mu_);
  // ReceiveAll's buffers, reused from message to message; touched only by
  // whoever holds gate_'s drain (ReceiveAll runs nowhere else).
  std::vector<zmq_msg_t> frames_;
  std::vector<uint64_t> frame_bytes_;

  // Monitors made by WatchDealer (a PAIR connected to the DEALER's monitor,
  // and the address) not yet taken by the monitor thread.
  struct Watch {
    void* pair = nullptr;
    std::string address;
  };
  std::atomic<bool> monitoring_{false};  // Set in Start.
  int next_monitor_ GUARDED_BY(send_mu_) = 0;
  Mutex monitor_mu_;
  std::vector<Watch> new_watches_ GUARDED_BY(monitor_mu_);
  bool monitor_stop_ GUARDED_BY(monitor_mu_) = false;
  WakeFd monitor_wake_;
  std::thread monitor_thread_;

  std::string local_endpoint_ GUARDED_BY(mu_);  // GatedVan::mu_
};

}  // namespace ps

#endif  // PS_TRANSPORT_ZMQ_VAN_H_
