// Van: the transport seam. A van binds one receiving endpoint, reaches other
// nodes by id, and delivers received messages to a handler.
//
// Implementations: ZmqVan (TCP through ZeroMQ) and InProcVan (many nodes in
// one process, for tests). All methods are thread-safe. The handler runs on
// the van's own receive thread, or on a thread inside CoReceive, one call at
// a time, and must not block.
#ifndef PS_TRANSPORT_VAN_H_
#define PS_TRANSPORT_VAN_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "message/message.h"
#include "ps/status.h"
#include "transport/receive_gate.h"

namespace ps {

// Traffic with one peer node. Relaxed atomics, like VanCounters. What
// senders count and what the receiving thread counts sit on cache lines of
// their own, apart from other peers' too, so the threads counting them do
// not take the lines from each other.
struct PeerCounters {
  alignas(64) std::atomic<uint64_t> sent_messages{0};
  std::atomic<uint64_t> sent_bytes{0};
  std::atomic<uint64_t> send_errors{0};
  alignas(64) std::atomic<uint64_t> received_messages{0};
  std::atomic<uint64_t> received_bytes{0};
};

// A van's traffic per peer, by node id: sends by the recipient's id,
// receipts by the sender's id in the decoded header (before the node checks
// that the sender is a member). Made for the data path: finding a peer's
// counters takes two loads, without a lock or a map; the counters of
// kBlock consecutive ids are allocated together, once, when the first of
// them is counted. Ids outside [0, kMaxIds) (the negative ids of refused
// joins, a header's claim of an absurd id) share one entry, kOther, so the
// per-peer counts always add up to the van's totals. Thread-safe.
class PeerTraffic {
 public:
  static constexpr int kBlock = 256;
  static constexpr int kBlocks = 64;
  static constexpr int kMaxIds = kBlock * kBlocks;
  // The id ForEach gives the shared entry of ids outside [0, kMaxIds).
  static constexpr int kOther = -1;

  PeerTraffic() = default;
  PeerTraffic(const PeerTraffic&) = delete;
  PeerTraffic& operator=(const PeerTraffic&) = delete;
  ~PeerTraffic() {
    for (auto& b : blocks_) delete[] b.load(std::memory_order_acquire);
  }

  // The counters of node `id`; never null, valid for this object's life.
  PeerCounters* For(int id) {
    if (id < 0 || id >= kMaxIds) return &other_;
    std::atomic<PeerCounters*>& slot = blocks_[id / kBlock];
    PeerCounters* block = slot.load(std::memory_order_acquire);
    if (block == nullptr) {
      auto* fresh = new PeerCounters[kBlock];
      if (slot.compare_exchange_strong(block, fresh,
                                       std::memory_order_acq_rel)) {
        block = fresh;
      } else {
        delete[] fresh;  // Another thread's block won; `block` is it.
      }
    }
    return &block[id % kBlock];
  }

  // Calls fn(id, counters) for every id with any traffic, in id order, then
  // for kOther if it has any. Counters read during traffic may be a few
  // events apart from each other.
  void ForEach(
      const std::function<void(int id, const PeerCounters&)>& fn) const {
    for (int b = 0; b < kBlocks; ++b) {
      const PeerCounters* block = blocks_[b].load(std::memory_order_acquire);
      if (block == nullptr) continue;
      for (int i = 0; i < kBlock; ++i) {
        if (Used(block[i])) fn(b * kBlock + i, block[i]);
      }
    }
    if (Used(other_)) fn(kOther, other_);
  }

 private:
  static bool Used(const PeerCounters& c) {
    return c.sent_messages.load(std::memory_order_relaxed) != 0 ||
           c.received_messages.load(std::memory_order_relaxed) != 0 ||
           c.send_errors.load(std::memory_order_relaxed) != 0;
  }

  std::array<std::atomic<PeerCounters*>, kBlocks> blocks_{};
  PeerCounters other_;
};

struct VanCounters {
  std::atomic<uint64_t> sent_messages{0};
  std::atomic<uint64_t> sent_bytes{0};
  std::atomic<uint64_t> received_messages{0};
  std::atomic<uint64_t> received_bytes{0};
  // Peers reached through a same-host endpoint (Van::local_endpoint) rather
  // than TCP; counted per connection made.
  std::atomic<uint64_t> local_connections{0};
  // Messages dropped on receipt because they could not be decoded.
  std::atomic<uint64_t> rejected_messages{0};
  // Sends that failed after being accepted (socket errors).
  std::atomic<uint64_t> send_errors{0};
  // The sent, received and send_errors counts above, per peer; their sums
  // equal the totals (once the traffic counted is over).
  PeerTraffic peers;

  // Count one event in the totals and for its peer (`peer`: from
  // peers.For, found once per message). Relaxed, no lock.
  void CountSent(PeerCounters* peer, uint64_t bytes) {
    Add(&sent_messages, 1);
    Add(&sent_bytes, bytes);
    Add(&peer->sent_messages, 1);
    Add(&peer->sent_bytes, bytes);
  }
  void CountReceived(PeerCounters* peer, uint64_t bytes) {
    Add(&received_messages, 1);
    Add(&received_bytes, bytes);
    Add(&peer->received_messages, 1);
    Add(&peer->received_bytes, bytes);
  }
  void CountSendError(PeerCounters* peer) {
    Add(&send_errors, 1);
    Add(&peer->send_errors, 1);
  }

 private:
  static void Add(std::atomic<uint64_t>* c, uint64_t n) {
    c->fetch_add(n, std::memory_order_relaxed);
  }
};

// What a van accepts from its peers (Options has the settings).
struct VanLimits {
  // Largest frame (header or data) received, in bytes; < 0: any. A peer
  // that sends a larger one is disconnected before it is allocated.
  int64_t max_frame_bytes = -1;
  // Messages queued per peer connection before reading from it pauses;
  // 0: no bound.
  int receive_queue = 0;
  // Also bind a same-host endpoint (a Linux abstract Unix socket, reachable
  // only inside this network namespace) and reach peers through theirs
  // when they are in the same namespace.
  bool local_endpoint = false;
};

// Encryption of a van's connections (docs/security.md): ZeroMQ CURVE with
// one key pair for the whole cluster, in Z85 text (40 characters each).
// Every node's receiving socket is a CURVE server with the cluster's secret
// key and admits (through a ZAP handler) only clients that prove they hold
// it too; every sending socket is a CURVE client with the same pair.
struct VanSecurity {
  bool curve = false;
  std::string public_key;
  std::string secret_key;
};

// What a van learned about its connection to a peer (docs/replication.md,
// "Detection"). ZmqVan reports them for the connections it makes to peers
// (the DEALERs), from ZeroMQ's socket monitor.
struct PeerEvent {
  enum class Kind {
    kDisconnected,     // the connection closed (the peer closed it)
    kReconnectFailed,  // an attempt to connect again failed (refused)
    kConnected,        // connected (again)
  };
  Kind kind = Kind::kDisconnected;
  // The ids routed to the connection's address (Connect), and the address.
  std::vector<int> ids;
  std::string address;
};

class Van {
 public:
  using Handler = std::function<void(Message&& msg)>;
  using PeerEventHandler = std::function<void(const PeerEvent& event)>;

  virtual ~Van() = default;

  // Binds to host:port (port 0: an ephemeral port) and starts delivering
  // received messages to `handler`. `host` is a numeric address ("0.0.0.0"
  // or "::" for every interface; an IPv6 one without brackets). Returns the
  // bound port.
  [[nodiscard]] virtual StatusOr<int> Start(const std::string& host, int port,
                                            Handler handler) = 0;

  // Makes node `id` reachable at host:port, or through `local` (the peer's
  // local_endpoint(), "" if it has none) when that endpoint is reachable
  // from here. Several ids may share one address (logical workers of one
  // process). Reconnecting an id to a new address replaces the old route.
  [[nodiscard]] virtual Status Connect(int id, const std::string& host,
                                       int port, const std::string& local) = 0;

  // The same-host endpoint Start bound (VanLimits::local_endpoint), for
  // peers to pass to Connect; "" if none.
  virtual std::string local_endpoint() const { return ""; }

  // Sends `msg` to msg.meta.recipient; consumes it. The data frames are not
  // copied: their buffers are shared until the bytes have left. Fails with
  // kUnavailable if the recipient is unknown or the van is stopped; a failure
  // after the message was accepted is logged and counted, and is otherwise
  // detected by heartbeats.
  [[nodiscard]] virtual Status Send(Message&& msg) = 0;

  // Forgets `id`'s route and, once no other id uses its address, releases
  // what the connection holds (messages already sent still go out, within
  // the socket's linger). For peers met once: a node refused at the join.
  virtual void Disconnect(int id) = 0;
  // How many ids have a route (for tests: nothing may grow per peer met).
  virtual size_t num_routes() const = 0;

  // Stops receiving and releases the endpoint. Idempotent. Messages accepted
  // by Send are given a bounded time to leave.
  virtual void Stop() = 0;

  // Lets the calling thread, which has nothing else to do until `done()`
  // is true or `wake_fd` (an eventfd, polled and never read) becomes
  // readable, wait for messages itself and receive them beside the van's
  // own thread, so a message it will handle next needs no hand-off to it
  // (see ReceiveGate). Received messages go to the handler, on whichever
  // thread received them, one at a time. Returns kStopped if the van is not
  // running, kBusy if called from the handler.
  virtual ReceiveGate::Result CoReceive(int /*wake_fd*/,
                                        const std::function<bool()>& /*done*/) {
    return ReceiveGate::Result::kStopped;
  }

  // How long a thread inside CoReceive polls without blocking before it
  // sleeps (ReceiveGate::set_spin), while a CPU is idle (CpuContention);
  // 0 sleeps at once.
  virtual void set_spin(std::chrono::microseconds /*spin*/) {}

  // Before Start.
  virtual void set_limits(const VanLimits& limits) { limits_ = limits; }
  // Before Start; kInvalidArgument if this van cannot encrypt as asked.
  [[nodiscard]] virtual Status set_security(const VanSecurity& security) {
    if (security.curve) {
      return Status::InvalidArgument("this transport has no encryption");
    }
    return Status::OK();
  }
  const VanLimits& limits() const { return limits_; }

  // Before Start: `handler` learns of the van's connections to peers
  // closing, failing to reconnect and connecting (PeerEvent), on a thread
  // of the van's, one event at a time, with no lock of the van held (it
  // may call the van). A van that cannot watch its connections
  // (InProcVan) reports only what a test raises (RaisePeerEvent). Unset:
  // nothing is watched.
  virtual void set_peer_event_handler(PeerEventHandler handler) {
    peer_event_handler_ = std::move(handler);
  }
  // Reports `event` to the handler, as a van that saw it would: for tests,
  // on vans that see no connections (InProcVan, FaultVan over it).
  void RaisePeerEvent(const PeerEvent& event) const {
    if (peer_event_handler_) peer_event_handler_(event);
  }

  const VanCounters& counters() const { return counters_; }

 protected:
  // What Connect refuses: kInvalidArgument unless `host` is set and `port`
  // is in [1, 65535].
  static Status CheckAddress(const std::string& host, int port) {
    if (host.empty() || port <= 0 || port > 65535) {
      return Status::InvalidArgument("bad address " + host + ":" +
                                     std::to_string(port));
    }
    return Status::OK();
  }
  // Where Send sends to `recipient`: the address `routes` (node id ->
  // address) holds for it into *address; kUnavailable if the van is not
  // `running` or has no route to it.
  static Status FindRoute(bool running,
                          const std::unordered_map<int, std::string>& routes,
                          int recipient, std::string* address) {
    if (!running) return Status::Unavailable("van is stopped");
    auto it = routes.find(recipient);
    if (it == routes.end()) {
      return Status::Unavailable("no route to node " +
                                 std::to_string(recipient));
    }
    *address = it->second;
    return Status::OK();
  }

  VanCounters counters_;
  VanLimits limits_;
  PeerEventHandler peer_event_handler_;  // Set before Start.
};

}  // namespace ps

#endif  // PS_TRANSPORT_VAN_H_
