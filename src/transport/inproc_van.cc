#include "transport/inproc_van.h"

#include <glog/logging.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/mutex.h"
#include "util/thread_name.h"

namespace ps {

void InProcNetwork::Sever(const std::string& address) {
  MutexLock lock(&mu_);
  vans_.erase(address);
  unbound_.erase(address);
  severed_.insert(address);
}

void InProcNetwork::Revive(const std::string& address) {
  MutexLock lock(&mu_);
  severed_.erase(address);
}

StatusOr<int> InProcNetwork::Bind(const std::string& host, int port,
                                  InProcVan* van) {
  MutexLock lock(&mu_);
  if (port == 0) {
    while (vans_.count(host + ":" + std::to_string(next_port_))) ++next_port_;
    port = next_port_++;
  }
  std::string address = host + ":" + std::to_string(port);
  if (vans_.count(address)) {
    return Status::Unavailable("address " + address + " is in use");
  }
  vans_[address] = van;
  auto waiting = unbound_.find(address);
  if (waiting != unbound_.end()) {
    for (Packet& p : waiting->second) van->Enqueue(std::move(p));
    unbound_.erase(waiting);
  }
  return port;
}

void InProcNetwork::Unbind(const std::string& address) {
  // A stopped van's address stays dead, like a closed process's port.
  Sever(address);
}

bool InProcNetwork::Deliver(const std::string& address, std::string header,
                            std::vector<SArray<char>> data) {
  MutexLock lock(&mu_);
  if (severed_.count(address)) return false;
  auto it = vans_.find(address);
  if (it == vans_.end()) {
    unbound_[address].push_back({std::move(header), std::move(data)});
    return true;
  }
  it->second->Enqueue({std::move(header), std::move(data)});
  return true;
}

InProcVan::InProcVan(InProcNetwork* network) : network_(network) {}

InProcVan::~InProcVan() {
  Stop();
  if (ready_fd_ >= 0) close(ready_fd_);
}

StatusOr<int> InProcVan::Start(const std::string& host, int port,
                               Handler handler) {
  MutexLock lock(&mu_);
  if (started_) return Status::Internal("van started twice");
  if (ready_fd_ < 0) {
    ready_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ready_fd_ < 0) {
      return Status::Internal(std::string("eventfd failed: ") +
                              std::strerror(errno));
    }
    PS_RETURN_IF_ERROR(gate_.Init(ready_fd_, [this] { ReceiveAll(); }));
  }
  StatusOr<int> bound = network_->Bind(host, port, this);
  if (!bound.ok()) return bound.status();
  address_ = host + ":" + std::to_string(bound.value());
  handler_ = std::move(handler);
  started_ = true;
  receiver_ = std::thread([this] {
    NameThisThread("ember-inproc");
    gate_.RunOwner();
  });
  return bound.value();
}

Status InProcVan::Connect(int id, const std::string& host, int port,
                          const std::string& /*local*/) {
  PS_RETURN_IF_ERROR(CheckAddress(host, port));
  MutexLock lock(&mu_);
  routes_[id] = host + ":" + std::to_string(port);
  return Status::OK();
}

void InProcVan::Disconnect(int id) {
  MutexLock lock(&mu_);
  routes_.erase(id);
}

Status InProcVan::Send(Message&& msg) {
  std::string address;
  {
    MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(FindRoute(started_ && !stopping_, routes_,
                                 msg.meta.recipient, &address));
  }
  std::string header;
  EncodeMeta(msg.meta, msg.data, &header);
  size_t bytes = header.size() + msg.data_bytes();
  // A severed peer loses the message silently, as a dead process would.
  const int recipient = msg.meta.recipient;
  if (network_->Deliver(address, std::move(header), std::move(msg.data))) {
    counters_.CountSent(counters_.peers.For(recipient), bytes);
  }
  return Status::OK();
}

void InProcVan::Enqueue(Packet packet) {
  if (!inbox_.Push(std::move(packet))) return;
  uint64_t one = 1;
  ssize_t n = write(ready_fd_, &one, sizeof(one));
  (void)n;
}

void InProcVan::ReceiveAll() {
  // Reset the descriptor before looking, so a packet queued after the last
  // look has signalled it again.
  uint64_t count;
  ssize_t n = read(ready_fd_, &count, sizeof(count));
  (void)n;
  Packet packet;
  while (inbox_.TryPop(&packet)) {
    Message msg;
    std::vector<uint64_t> frame_bytes;
    // As ZeroMQ's ZMQ_MAXMSGSIZE would (it disconnects the peer instead).
    Status s;
    const int64_t max = limits_.max_frame_bytes;
    auto too_big = [max](size_t n) {
      return max >= 0 && static_cast<int64_t>(n) > max;
    };
    bool big = too_big(packet.header.size());
    for (const SArray<char>& d : packet.data) big = big || too_big(d.size());
    if (big) {
      s = Status::Corruption("a frame larger than " + std::to_string(max) +
                             " bytes");
    } else {
      s = DecodeMeta(packet.header.data(), packet.header.size(), &msg.meta,
                     &frame_bytes);
    }
    if (s.ok()) s = CheckFrames(frame_bytes, packet.data);
    if (!s.ok()) {
      counters_.rejected_messages++;
      LOG(WARNING) << "dropping message: " << s;
      continue;
    }
    msg.data = std::move(packet.data);
    counters_.CountReceived(counters_.peers.For(msg.meta.sender),
                            packet.header.size() + msg.data_bytes());
    handler_(std::move(msg));
  }
}

void InProcVan::Stop() {
  {
    MutexLock lock(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  network_->Unbind(address_);
  inbox_.Close();
  gate_.Stop();
  if (receiver_.joinable()) receiver_.join();
}

}  // namespace ps
