// InProcVan: a van whose peers live in the same process, for unit tests.
//
// Vans join an InProcNetwork under an address "host:port". A send encodes the
// header exactly as the wire does (so the codec and its validation run), and
// the receiving van delivers messages in the order they were sent, on its
// thread or on a thread inside CoReceive, through a ReceiveGate as ZmqVan
// does.
// No sockets, no ports, no sleeps. Thread-safe.
#ifndef PS_TRANSPORT_INPROC_VAN_H_
#define PS_TRANSPORT_INPROC_VAN_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "transport/gated_van.h"
#include "util/blocking_queue.h"
#include "util/mutex.h"

namespace ps {

class InProcVan;

// The registry that connects InProcVans. Outlives its vans.
class InProcNetwork {
 public:
  InProcNetwork() = default;
  InProcNetwork(const InProcNetwork&) = delete;
  InProcNetwork& operator=(const InProcNetwork&) = delete;

  // Makes the van at `address` unreachable for good, as if its process had
  // died: messages to it are dropped.
  void Sever(const std::string& address);
  // A process is to be started again at `address` (a scheduler restarted
  // on its port): from now on messages to it wait for the van that binds
  // it, as ZeroMQ keeps them for a peer that reconnects.
  void Revive(const std::string& address);

 private:
  friend class InProcVan;
  StatusOr<int> Bind(const std::string& host, int port, InProcVan* van);
  void Unbind(const std::string& address);
  // Delivers an encoded message to the van at `address`; false if none.
  bool Deliver(const std::string& address, std::string header,
               std::vector<SArray<char>> data);

  struct Packet {
    std::string header;
    std::vector<SArray<char>> data;
  };

  Mutex mu_;
  std::map<std::string, InProcVan*> vans_ GUARDED_BY(mu_);
  // Messages to an address nobody has bound yet wait for it, as ZeroMQ
  // queues messages for a peer it has not reached yet.
  std::map<std::string, std::vector<Packet>> unbound_ GUARDED_BY(mu_);
  std::set<std::string> severed_ GUARDED_BY(mu_);
  int next_port_ GUARDED_BY(mu_) = 1;
};

class InProcVan final : public GatedVan {
 public:
  // `network` is borrowed and must outlive this van.
  explicit InProcVan(InProcNetwork* network);
  ~InProcVan() override;

  StatusOr<int> Start(const std::string& host, int port,
                      Handler handler) override;
  // `local` is ignored: every van of a network is local already.
  Status Connect(int id, const std::string& host, int port,
                 const std::string& local) override;
  Status Send(Message&& msg) override;
  void Disconnect(int id) override;
  void Stop() override;

 private:
  friend class InProcNetwork;
  using Packet = InProcNetwork::Packet;
  void Enqueue(Packet packet);
  // Delivers everything in the inbox (under gate_).
  void ReceiveAll();

  InProcNetwork* const network_;
  std::string address_;
  BlockingQueue<Packet> inbox_;
  // An eventfd written after every Enqueue: the inbox's descriptor for
  // gate_, so application threads can wait on it as they do on a socket.
  int ready_fd_ = -1;
  std::thread receiver_;
};

}  // namespace ps

#endif  // PS_TRANSPORT_INPROC_VAN_H_
