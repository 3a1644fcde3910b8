#include "transport/zmq_van.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "util/clock.h"
#include "util/mutex.h"
#include "util/secret.h"
#include "util/thread_name.h"
#include "util/thread_policy.h"

namespace ps {

namespace {

// Linger for unsent messages when a socket closes at Stop().
constexpr int kLingerMs = 1000;
// Frames smaller than this, or not 8-byte aligned, are copied on receipt
// (ZeroMQ stores very small frames inside the zmq_msg_t itself).
constexpr size_t kZeroCopyMinBytes = 64;

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

// The ZAP endpoint ZeroMQ asks (RFC 27), and its domain for Ember.
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapDomain[] = "ember";

// Whether `key` is a 40-character Z85 CURVE key.
bool IsZ85Key(const std::string& key) {
  uint8_t raw[32];
  return key.size() == 40 && zmq_z85_decode(raw, key.c_str()) != nullptr;
}

// Receives one multipart message as strings; false on error or timeout.
bool ReceiveParts(void* socket, std::vector<std::string>* parts) {
  parts->clear();
  while (true) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, socket, 0) < 0) {
      zmq_msg_close(&part);
      return false;
    }
    parts->emplace_back(static_cast<const char*>(zmq_msg_data(&part)),
                        zmq_msg_size(&part));
    const bool more = zmq_msg_more(&part);
    zmq_msg_close(&part);
    if (!more) return true;
  }
}

void FreeSArray(void* /*data*/, void* hint) {
  delete static_cast<SArray<char>*>(hint);
}

// Whether a received frame is shared rather than copied.
bool ShareFrame(zmq_msg_t* frame) {
  return zmq_msg_size(frame) >= kZeroCopyMinBytes &&
         reinterpret_cast<uintptr_t>(zmq_msg_data(frame)) % 8 == 0;
}

// The bytes a copied frame takes in ReceivedFrames::copies: 8-aligned, and
// never none, so that even an empty frame's data is not null.
size_t CopySpace(size_t size) { return std::max<size_t>(8, (size + 7) & ~7); }

// Holds the data frames of one received message, which the message's
// SArrays point into: up to kMaxShared frames shared (ZeroMQ's buffers) and
// one buffer for the copies of the small or misaligned ones. So a message
// costs one or two allocations, not two per frame. Each of a message's
// frames keeps the others alive.
struct ReceivedFrames {
  static constexpr size_t kMaxShared = 4;
  zmq_msg_t shared[kMaxShared];
  size_t num_shared = 0;
  std::unique_ptr<char[]> copies;

  ReceivedFrames() = default;
  ReceivedFrames(const ReceivedFrames&) = delete;
  ReceivedFrames& operator=(const ReceivedFrames&) = delete;
  ~ReceivedFrames() {
    for (size_t i = 0; i < num_shared; ++i) zmq_msg_close(&shared[i]);
  }
};

// Wraps frames [first, end) as SArrays appended to `out`, closing them:
// copied if small or misaligned, else shared. Returns their bytes.
size_t TakeFrames(std::vector<zmq_msg_t>* frames, size_t first,
                  std::vector<SArray<char>>* out) {
  if (first >= frames->size()) return 0;
  size_t bytes = 0;
  size_t copy_bytes = 0;
  for (size_t i = first; i < frames->size(); ++i) {
    const size_t size = zmq_msg_size(&(*frames)[i]);
    bytes += size;
    if (!ShareFrame(&(*frames)[i])) copy_bytes += CopySpace(size);
  }
  out->reserve(out->size() + frames->size() - first);
  auto holder = std::make_shared<ReceivedFrames>();
  if (copy_bytes > 0) holder->copies.reset(new char[copy_bytes]);
  size_t copied = 0;
  for (size_t i = first; i < frames->size(); ++i) {
    zmq_msg_t* frame = &(*frames)[i];
    const size_t size = zmq_msg_size(frame);
    if (!ShareFrame(frame)) {
      char* to = holder->copies.get() + copied;
      std::memcpy(to, zmq_msg_data(frame), size);
      copied += CopySpace(size);
      zmq_msg_close(frame);
      out->emplace_back(std::shared_ptr<char>(holder, to), size);
      continue;
    }
    zmq_msg_t* owned;
    if (holder->num_shared < ReceivedFrames::kMaxShared) {
      owned = &holder->shared[holder->num_shared++];
      zmq_msg_init(owned);
      zmq_msg_move(owned, frame);
      out->emplace_back(std::shared_ptr<char>(
                            holder, static_cast<char*>(zmq_msg_data(owned))),
                        size);
      continue;
    }
    // More shared frames than the holder has room for: held on its own.
    owned = new zmq_msg_t;
    zmq_msg_init(owned);
    zmq_msg_move(owned, frame);
    SArray<char> array;
    array.reset(static_cast<char*>(zmq_msg_data(owned)), size, [owned](char*) {
      zmq_msg_close(owned);
      delete owned;
    });
    out->push_back(std::move(array));
  }
  return bytes;
}

// An IPv6 literal ("::1", "fe80::1%eth0"); names and IPv4 have no ':'.
bool IsIPv6Literal(const std::string& host) {
  return host.find(':') != std::string::npos;
}

// "host:port" as ZeroMQ's tcp:// endpoints want it: an IPv6 literal in
// brackets.
std::string HostPort(const std::string& host, const std::string& port) {
  return IsIPv6Literal(host) ? "[" + host + "]:" + port : host + ":" + port;
}

// Same-host endpoints: "ipc://@" and an abstract Unix socket name, which
// lives in the network namespace that bound it, needs no file and vanishes
// with its process.
constexpr char kAbstractPrefix[] = "ipc://@";

bool IsAbstractEndpoint(const std::string& endpoint) {
  return endpoint.rfind(kAbstractPrefix, 0) == 0;
}

// A fresh name nobody else can have bound: 128 random bits.
StatusOr<std::string> NewLocalEndpoint() {
  StatusOr<std::string> secret = NewSecret();
  if (!secret.ok()) return secret.status();
  static const char kHex[] = "0123456789abcdef";
  std::string name = std::string(kAbstractPrefix) + "ember-";
  for (unsigned char c : secret.value()) {
    name += kHex[c >> 4];
    name += kHex[c & 15];
  }
  return name;
}

// Whether something listens at the abstract socket `endpoint` in this
// network namespace. A peer in another namespace (another host, another
// container) is not found, and is reached by TCP. Nothing is sent: the
// probe connects and closes.
bool Reachable(const std::string& endpoint) {
  const std::string name = endpoint.substr(std::strlen(kAbstractPrefix));
  sockaddr_un addr{};
  if (name.empty() || name.size() + 1 > sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';  // Abstract: a leading NUL, then the name.
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
  // EAGAIN: it exists, with a full backlog.
  const bool found = rc == 0 || errno == EAGAIN;
  close(fd);
  return found;
}

}  // namespace

ZmqVan::ZmqVan() = default;

Status ZmqVan::set_security(const VanSecurity& security) {
  if (security.curve) {
    if (!zmq_has("curve")) {
      return Status::InvalidArgument(
          "EMBER_CURVE=1, but this libzmq was built without CURVE");
    }
    if (!IsZ85Key(security.public_key) || !IsZ85Key(security.secret_key)) {
      return Status::InvalidArgument(
          "EMBER_CURVE_KEY_FILE: the keys must be 40-character Z85 CURVE "
          "keys");
    }
    char derived[41];
    if (zmq_curve_public(derived, security.secret_key.c_str()) != 0 ||
        security.public_key != derived) {
      return Status::InvalidArgument(
          "EMBER_CURVE_KEY_FILE: the public key is not the secret key's");
    }
  }
  MutexLock lock(&mu_);
  if (started_) return Status::Internal("set_security after Start");
  security_ = security;
  return Status::OK();
}

Status ZmqVan::WriteCurveKeyFile(const std::string& path) {
  char public_key[41], secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Status::Internal("cannot make a CURVE key pair: " + ZmqError());
  }
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::InvalidArgument("cannot create " + path + ": " +
                                   std::strerror(errno));
  }
  std::string text = std::string(public_key) + "\n" + secret_key + "\n";
  const bool ok =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = close(fd) == 0;
  if (!ok || !closed) {
    unlink(path.c_str());
    return Status::Unavailable("cannot write " + path);
  }
  return Status::OK();
}

void ZmqVan::AbandonStart() {
  if (router_ != nullptr) zmq_close(router_);
  router_ = nullptr;
  local_endpoint_.clear();
  zap_stop_ = true;
  if (zap_thread_.joinable()) zap_thread_.join();
  zmq_ctx_term(context_);
  context_ = nullptr;
}

Status ZmqVan::StartZap() {
  void* zap = zmq_socket(context_, ZMQ_REP);
  if (zap == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
  const int timeout_ms = 100;  // How often the loop looks at zap_stop_.
  const int linger = 0;
  zmq_setsockopt(zap, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  zmq_setsockopt(zap, ZMQ_LINGER, &linger, sizeof(linger));
  if (zmq_bind(zap, kZapEndpoint) != 0) {
    Status s = Status::Internal("cannot bind the ZAP handler: " + ZmqError());
    zmq_close(zap);
    return s;
  }
  zap_stop_ = false;
  zap_thread_ = std::thread([this, zap] {
    NameThisThread("ember-zap");
    ZapLoop(zap);
    zmq_close(zap);
  });
  return Status::OK();
}

void ZmqVan::ZapLoop(void* socket) {
  uint8_t cluster_key[32];
  zmq_z85_decode(cluster_key, security_.public_key.c_str());
  std::vector<std::string> request;
  while (!zap_stop_) {
    if (!ReceiveParts(socket, &request)) {
      if (zmq_errno() == ETERM) return;  // The context is ending.
      continue;                          // A timeout: look at zap_stop_.
    }
    // version, request id, domain, address, routing id, mechanism,
    // credentials (CURVE: the client's 32-byte public key).
    const bool admitted = request.size() == 7 && request[0] == "1.0" &&
                          request[5] == "CURVE" && request[6].size() == 32 &&
                          std::memcmp(request[6].data(), cluster_key, 32) == 0;
    if (!admitted) {
      uint64_t left_out = 0;
      if (reject_log_.Allow("zap", Clock::Real()->NowMs(), &left_out)) {
        LOG(WARNING) << "refusing a connection"
                     << (request.size() > 3 ? " from " + request[3] : "")
                     << ": it does not hold the cluster's CURVE key"
                     << LogLimiter::Since(left_out);
      }
    }
    const std::string id = request.size() > 1 ? request[1] : "";
    const char* code = admitted ? "200" : "400";
    const char* text = admitted ? "OK" : "not a member of this cluster";
    zmq_send(socket, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(socket, id.data(), id.size(), ZMQ_SNDMORE);
    zmq_send(socket, code, 3, ZMQ_SNDMORE);
    zmq_send(socket, text, std::strlen(text), ZMQ_SNDMORE);
    zmq_send(socket, "", 0, ZMQ_SNDMORE);  // user id
    zmq_send(socket, "", 0, 0);            // metadata
  }
}

ZmqVan::~ZmqVan() { Stop(); }

StatusOr<int> ZmqVan::Start(const std::string& host, int port,
                            Handler handler) {
  MutexLock lock(&mu_);
  if (started_) return Status::Internal("van started twice");
  // The threads started here (ZeroMQ's I/O threads, inside the first
  // zmq_socket; the receive, ZAP and monitor threads) inherit it.
  ScopedMessageThreadPolicy thread_policy;
  context_ = zmq_ctx_new();
  if (context_ == nullptr) {
    return Status::Internal("zmq_ctx_new failed: " + ZmqError());
  }
  if (zmq_ctx_set(context_, ZMQ_MAX_SOCKETS, 65536) != 0) {
    LOG(WARNING) << "cannot raise ZeroMQ's socket limit: " << ZmqError();
  }
  if (security_.curve) {
    Status s = StartZap();
    if (!s.ok()) {
      AbandonStart();
      return s;
    }
  }
  router_ = zmq_socket(context_, ZMQ_ROUTER);
  if (router_ == nullptr) {
    Status s = Status::Internal("zmq_socket failed: " + ZmqError());
    AbandonStart();
    return s;
  }
  const int hwm = limits_.receive_queue;
  const int linger = 0;
  const int64_t max_frame = limits_.max_frame_bytes;
  const int curve_server = 1;
  // ZeroMQ binds IPv4 only unless told otherwise; with ZMQ_IPV6, "::"
  // takes IPv4 connections too.
  const int ipv6 = IsIPv6Literal(host) ? 1 : 0;
  bool options_ok =
      zmq_setsockopt(router_, ZMQ_RCVHWM, &hwm, sizeof(hwm)) == 0 &&
      zmq_setsockopt(router_, ZMQ_LINGER, &linger, sizeof(linger)) == 0 &&
      zmq_setsockopt(router_, ZMQ_MAXMSGSIZE, &max_frame, sizeof(max_frame)) ==
          0 &&
      zmq_setsockopt(router_, ZMQ_IPV6, &ipv6, sizeof(ipv6)) == 0;
  if (options_ok && security_.curve) {
    options_ok = zmq_setsockopt(router_, ZMQ_ZAP_DOMAIN, kZapDomain,
                                std::strlen(kZapDomain)) == 0 &&
                 zmq_setsockopt(router_, ZMQ_CURVE_SERVER, &curve_server,
                                sizeof(curve_server)) == 0 &&
                 zmq_setsockopt(router_, ZMQ_CURVE_SECRETKEY,
                                security_.secret_key.c_str(), 41) == 0;
  }
  if (!options_ok) {
    Status s = Status::Internal("cannot set the receiving socket's options: " +
                                ZmqError());
    AbandonStart();
    return s;
  }
  std::string endpoint =
      "tcp://" + HostPort(host, port == 0 ? "*" : std::to_string(port));
  if (zmq_bind(router_, endpoint.c_str()) != 0) {
    Status s =
        Status::Unavailable("cannot bind " + endpoint + ": " + ZmqError());
    AbandonStart();
    return s;
  }
  char last[256];
  size_t last_size = sizeof(last);
  if (zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, last, &last_size) != 0) {
    Status s =
        Status::Internal("cannot read the bound endpoint: " + ZmqError());
    AbandonStart();
    return s;
  }
  std::string bound(last);
  int bound_port = std::atoi(bound.substr(bound.rfind(':') + 1).c_str());
  if (limits_.local_endpoint) {
    // Without it, peers on this host use TCP: slower, never wrong.
    StatusOr<std::string> local = NewLocalEndpoint();
    if (local.ok() && zmq_bind(router_, local.value().c_str()) == 0) {
      local_endpoint_ = local.value();
    } else {
      LOG(WARNING) << "no same-host endpoint, peers on this host use TCP: "
                   << (local.ok() ? ZmqError() : local.status().ToString());
    }
  }
  int router_fd = -1;
  size_t fd_size = sizeof(router_fd);
  Status gate_status;
  if (zmq_getsockopt(router_, ZMQ_FD, &router_fd, &fd_size) != 0) {
    gate_status = Status::Internal("cannot get the socket's file descriptor: " +
                                   ZmqError());
  } else {
    gate_status = gate_.Init(router_fd, [this] { ReceiveAll(); });
  }
  if (!gate_status.ok()) {
    AbandonStart();
    return gate_status;
  }
  handler_ = std::move(handler);
  started_ = true;
  StartMonitor();
  io_thread_ = std::thread([this] {
    NameThisThread("ember-io");
    gate_.RunOwner();
  });
  return bound_port;
}

Status ZmqVan::Connect(int id, const std::string& host, int port,
                       const std::string& local) {
  PS_RETURN_IF_ERROR(CheckAddress(host, port));
  std::string address = HostPort(host, std::to_string(port));
  const bool use_local =
      limits_.local_endpoint && IsAbstractEndpoint(local) && Reachable(local);
  if (use_local) address = local;
  {
    MutexLock lock(&mu_);
    if (!started_ || stopping_) return Status::Unavailable("van is stopped");
    auto it = routes_.find(id);
    if (use_local && (it == routes_.end() || it->second != address)) {
      counters_.local_connections++;
    }
    routes_[id] = address;
    routes_version_.fetch_add(1, std::memory_order_acq_rel);
  }
  MutexLock lock(&send_mu_);
  dealer_of_.erase(id);
  if (!closed_) SocketFor(address);  // Errors are logged; Send reports them.
  return Status::OK();
}

void ZmqVan::Disconnect(int id) {
  std::string address;
  bool shared = false;
  {
    MutexLock lock(&mu_);
    auto it = routes_.find(id);
    if (it == routes_.end()) return;
    address = it->second;
    routes_.erase(it);
    routes_version_.fetch_add(1, std::memory_order_acq_rel);
    for (const auto& r : routes_) {
      if (r.second == address) shared = true;  // Another id still uses it.
    }
  }
  MutexLock lock(&send_mu_);
  dealer_of_.erase(id);
  if (shared) return;
  dealer_of_.clear();  // Other ids may point at the DEALER closed here.
  auto it = dealers_.find(address);
  if (it == dealers_.end()) return;
  zmq_close(it->second);  // Lingers kLingerMs for what was sent.
  dealers_.erase(it);
}

std::string ZmqVan::local_endpoint() const {
  MutexLock lock(&mu_);
  return local_endpoint_;
}

Status ZmqVan::Send(Message&& msg) {
  const int recipient = msg.meta.recipient;
  PeerCounters* peer = counters_.peers.For(recipient);
  {
    MutexLock lock(&send_mu_);
    if (closed_) return Status::Unavailable("van is stopped");
    auto known = dealer_of_.find(recipient);
    if (known != dealer_of_.end()) {
      DoSend(known->second->second, known->second->first, peer, &msg);
      return Status::OK();
    }
  }
  std::string address;
  uint64_t version = 0;
  {
    MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(
        FindRoute(started_ && !stopping_, routes_, recipient, &address));
    version = routes_version_.load(std::memory_order_acquire);
  }
  MutexLock lock(&send_mu_);
  if (closed_) return Status::Unavailable("van is stopped");
  void* socket = SocketFor(address);
  if (socket == nullptr) {
    counters_.CountSendError(peer);
    return Status::Unavailable("cannot connect to node " +
                               std::to_string(recipient) + " at " + address);
  }
  // Remembered only if no route changed since it was read: a change bumps
  // the version before it clears its ids here.
  if (routes_version_.load(std::memory_order_acquire) == version) {
    dealer_of_[recipient] = &*dealers_.find(address);
  }
  DoSend(socket, address, peer, &msg);
  return Status::OK();
}

void* ZmqVan::SocketFor(const std::string& address) {
  auto it = dealers_.find(address);
  if (it != dealers_.end()) return it->second;
  void* socket = zmq_socket(context_, ZMQ_DEALER);
  if (socket == nullptr) {
    LOG(ERROR) << "zmq_socket failed: " << ZmqError();
    return nullptr;
  }
  const int zero = 0;
  const int linger = kLingerMs;
  // Addresses are bracketed IPv6 literals, IPv4 literals or names (which
  // ZeroMQ then resolves to IPv4 only, as it always did).
  const int ipv6 = !address.empty() && address[0] == '[' ? 1 : 0;
  bool options_ok =
      zmq_setsockopt(socket, ZMQ_SNDHWM, &zero, sizeof(zero)) == 0 &&
      zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger)) == 0 &&
      zmq_setsockopt(socket, ZMQ_IPV6, &ipv6, sizeof(ipv6)) == 0;
  if (options_ok && security_.curve) {
    const char* pub = security_.public_key.c_str();
    options_ok = zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, pub, 41) == 0 &&
                 zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, pub, 41) == 0 &&
                 zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY,
                                security_.secret_key.c_str(), 41) == 0;
  }
  if (!options_ok) {
    LOG(ERROR) << "cannot set the options of a socket to " << address << ": "
               << ZmqError();
    zmq_close(socket);
    return nullptr;
  }
  std::string endpoint =
      IsAbstractEndpoint(address) ? address : "tcp://" + address;
  WatchDealer(socket, address);
  if (zmq_connect(socket, endpoint.c_str()) != 0) {
    LOG(ERROR) << "cannot connect to " << endpoint << ": " << ZmqError();
    zmq_close(socket);
    return nullptr;
  }
  dealers_[address] = socket;
  return socket;
}

void ZmqVan::DoSend(void* socket, const std::string& address,
                    PeerCounters* peer, Message* msg) {
  std::string& header = header_;
  EncodeMeta(msg->meta, msg->data, &header);
  size_t bytes = header.size();
  const size_t n = msg->data.size();
  int flags = n > 0 ? ZMQ_SNDMORE : 0;
  if (zmq_send(socket, header.data(), header.size(), flags) < 0) {
    counters_.CountSendError(peer);
    LOG(WARNING) << "send to " << address << " failed: " << ZmqError();
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    SArray<char>& d = msg->data[i];
    bytes += d.size();
    if (d.size() <= kCopyMaxBytes) {
      if (zmq_send(socket, d.data(), d.size(), i + 1 < n ? ZMQ_SNDMORE : 0) <
          0) {
        counters_.CountSendError(peer);
        LOG(WARNING) << "send to " << address << " failed: " << ZmqError();
        return;
      }
      continue;
    }
    // The frame holds a reference to the buffer until ZeroMQ frees it.
    zmq_msg_t frame;
    auto* ref = new SArray<char>(d);
    zmq_msg_init_data(&frame, ref->data(), ref->size(), FreeSArray, ref);
    if (zmq_msg_send(&frame, socket, i + 1 < n ? ZMQ_SNDMORE : 0) < 0) {
      counters_.CountSendError(peer);
      LOG(WARNING) << "send to " << address << " failed: " << ZmqError();
      zmq_msg_close(&frame);  // Runs FreeSArray.
      return;
    }
  }
  counters_.CountSent(peer, bytes);
}

void ZmqVan::LogRejected(const std::string& peer, const Status& why) {
  uint64_t left_out = 0;
  if (!reject_log_.Allow(peer, Clock::Real()->NowMs(), &left_out)) return;
  std::string id;
  for (unsigned char c : peer) {
    static const char kHex[] = "0123456789abcdef";
    id += kHex[c >> 4];
    id += kHex[c & 15];
  }
  LOG(WARNING) << "dropping a message from connection " << id << ": " << why
               << LogLimiter::Since(left_out);
}

void ZmqVan::ReceiveAll() {
  while (true) {
    // Frame 0: the sender's routing identity, added by ROUTER.
    zmq_msg_t identity;
    zmq_msg_init(&identity);
    if (zmq_msg_recv(&identity, router_, ZMQ_DONTWAIT) < 0) {
      const int error = zmq_errno();
      zmq_msg_close(&identity);
      if (error == EINTR) continue;  // Not drained yet: try again.
      if (error != EAGAIN) LOG(WARNING) << "receive failed: " << ZmqError();
      return;  // EAGAIN: nothing more for now.
    }
    bool more = zmq_msg_more(&identity);
    // The connection's routing id: whom a rejected message is counted to.
    std::string peer(static_cast<const char*>(zmq_msg_data(&identity)),
                     zmq_msg_size(&identity));
    zmq_msg_close(&identity);
    std::vector<zmq_msg_t>& frames = frames_;
    frames.clear();
    while (more) {
      frames.emplace_back();
      zmq_msg_init(&frames.back());
      if (zmq_msg_recv(&frames.back(), router_, 0) < 0) {
        zmq_msg_close(&frames.back());
        frames.pop_back();
        break;
      }
      more = zmq_msg_more(&frames.back());
    }
    if (frames.empty()) {
      counters_.rejected_messages++;
      LogRejected(peer, Status::Corruption("a message without header"));
      continue;
    }
    Message msg;
    std::vector<uint64_t>& frame_bytes = frame_bytes_;
    size_t total = zmq_msg_size(&frames[0]);
    Status s = DecodeMeta(static_cast<const char*>(zmq_msg_data(&frames[0])),
                          zmq_msg_size(&frames[0]), &msg.meta, &frame_bytes);
    zmq_msg_close(&frames[0]);
    total += TakeFrames(&frames, 1, &msg.data);
    if (s.ok()) s = CheckFrames(frame_bytes, msg.data);
    if (!s.ok()) {
      counters_.rejected_messages++;
      LogRejected(peer, s);
      continue;
    }
    counters_.CountReceived(counters_.peers.For(msg.meta.sender), total);
    handler_(std::move(msg));
  }
}

void ZmqVan::Stop() {
  {
    MutexLock lock(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    routes_version_.fetch_add(1, std::memory_order_acq_rel);
  }
  {
    MutexLock lock(&send_mu_);
    dealer_of_.clear();  // Sends take the way that sees stopping_.
  }
  gate_.Stop();
  if (io_thread_.joinable()) io_thread_.join();
  if (monitoring_) {
    // Each DEALER's monitor stops first (sending MONITOR_STOPPED), so that
    // no event is sent to a monitor socket already closed: libzmq would
    // leak such a message.
    MutexLock lock(&send_mu_);
    for (auto& entry : dealers_) zmq_socket_monitor(entry.second, nullptr, 0);
  }
  StopMonitor();
  {
    MutexLock lock(&send_mu_);
    closed_ = true;
    dealer_of_.clear();
    for (auto& entry : dealers_) zmq_close(entry.second);
    dealers_.clear();
  }
  zmq_close(router_);
  router_ = nullptr;
  zap_stop_ = true;
  if (zap_thread_.joinable()) zap_thread_.join();
  zmq_ctx_term(context_);  // Waits up to kLingerMs for unsent messages.
  context_ = nullptr;
}

// --- Peer events: ZeroMQ's socket monitor on the DEALERs.

void ZmqVan::StartMonitor() {
  if (!peer_event_handler_) return;
  if (!monitor_wake_.ok()) {
    LOG(WARNING) << "cannot watch connections to peers (no eventfd): "
                    "failures are detected by heartbeats only";
    return;
  }
  monitoring_ = true;
  monitor_thread_ = std::thread([this] {
    NameThisThread("ember-monitor");
    MonitorLoop();
  });
}

void ZmqVan::WatchDealer(void* socket, const std::string& address) {
  if (!monitoring_) return;
  const std::string endpoint =
      "inproc://ember-monitor-" + std::to_string(next_monitor_++);
  const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
                     ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_MONITOR_STOPPED;
  if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) {
    LOG(WARNING) << "cannot watch the connection to " << address << ": "
                 << ZmqError();
    return;
  }
  void* pair = zmq_socket(context_, ZMQ_PAIR);
  const int linger = 0;
  if (pair == nullptr ||
      zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
      zmq_connect(pair, endpoint.c_str()) != 0) {
    LOG(WARNING) << "cannot watch the connection to " << address << ": "
                 << ZmqError();
    if (pair != nullptr) zmq_close(pair);
    zmq_socket_monitor(socket, nullptr, 0);
    return;
  }
  {
    MutexLock lock(&monitor_mu_);
    new_watches_.push_back(Watch{pair, address});
  }
  monitor_wake_.Signal();
}

void ZmqVan::MonitorLoop() {
  std::vector<Watch> watches;
  std::vector<zmq_pollitem_t> items;
  while (true) {
    {
      MutexLock lock(&monitor_mu_);
      if (monitor_stop_) break;
      for (Watch& w : new_watches_) watches.push_back(std::move(w));
      new_watches_.clear();
    }
    items.assign(watches.size() + 1, zmq_pollitem_t{});
    items[0].fd = monitor_wake_.fd();
    items[0].events = ZMQ_POLLIN;
    for (size_t i = 0; i < watches.size(); ++i) {
      items[i + 1].socket = watches[i].pair;
      items[i + 1].events = ZMQ_POLLIN;
    }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), -1) < 0) {
      if (zmq_errno() == ETERM) break;
      continue;  // EINTR.
    }
    if (items[0].revents & ZMQ_POLLIN) monitor_wake_.Consume();
    std::vector<Watch> kept;
    for (size_t i = 0; i < watches.size(); ++i) {
      if ((items[i + 1].revents & ZMQ_POLLIN) &&
          !ReadMonitor(watches[i].pair, watches[i].address)) {
        zmq_close(watches[i].pair);  // Its DEALER is closed.
        continue;
      }
      kept.push_back(std::move(watches[i]));
    }
    watches.swap(kept);
  }
  MutexLock lock(&monitor_mu_);
  for (Watch& w : new_watches_) watches.push_back(std::move(w));
  new_watches_.clear();
  for (Watch& w : watches) {
    DrainMonitor(w.pair);
    zmq_close(w.pair);
  }
}

void ZmqVan::DrainMonitor(void* pair) {
  // Every event up to MONITOR_STOPPED (Stop has stopped the monitors), each
  // wait bounded: a message left unread in a closed socket may leak.
  const int timeout_ms = 200;
  zmq_setsockopt(pair, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  bool first = true;     // the next frame begins an event
  bool stopped = false;  // the event read is MONITOR_STOPPED
  for (int frames = 0; frames < 1000; ++frames) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, pair, 0) < 0) {
      zmq_msg_close(&part);
      return;
    }
    if (first && zmq_msg_size(&part) >= 2) {
      uint16_t event = 0;
      std::memcpy(&event, zmq_msg_data(&part), sizeof(event));
      stopped = event == ZMQ_EVENT_MONITOR_STOPPED;
    }
    first = !zmq_msg_more(&part);
    zmq_msg_close(&part);
    if (first && stopped) return;
  }
}

bool ZmqVan::ReadMonitor(void* pair, const std::string& address) {
  while (true) {
    // An event is two frames: 6 bytes (the event, 16 bits, and a value, 32
    // bits), then the endpoint.
    std::vector<std::string> parts;
    zmq_msg_t part;
    bool more = true;
    while (more) {
      zmq_msg_init(&part);
      const int flags = parts.empty() ? ZMQ_DONTWAIT : 0;
      if (zmq_msg_recv(&part, pair, flags) < 0) {
        zmq_msg_close(&part);
        return zmq_errno() != ETERM;  // EAGAIN: nothing more queued.
      }
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&part)),
                         zmq_msg_size(&part));
      more = zmq_msg_more(&part);
      zmq_msg_close(&part);
    }
    if (parts[0].size() < 6) continue;
    uint16_t event = 0;
    std::memcpy(&event, parts[0].data(), sizeof(event));
    PeerEvent e;
    switch (event) {
      case ZMQ_EVENT_MONITOR_STOPPED:
        return false;
      case ZMQ_EVENT_DISCONNECTED:
        e.kind = PeerEvent::Kind::kDisconnected;
        break;
      case ZMQ_EVENT_CONNECT_RETRIED:
        e.kind = PeerEvent::Kind::kReconnectFailed;
        break;
      case ZMQ_EVENT_CONNECTED:
        e.kind = PeerEvent::Kind::kConnected;
        break;
      default:
        continue;
    }
    e.address = address;
    {
      MutexLock lock(&mu_);
      if (stopping_) return true;
      for (const auto& r : routes_) {
        if (r.second == address) e.ids.push_back(r.first);
      }
    }
    VLOG(1) << "connection to " << address << ": ZeroMQ event " << event;
    peer_event_handler_(e);
  }
}

void ZmqVan::StopMonitor() {
  if (!monitor_thread_.joinable()) return;
  {
    MutexLock lock(&monitor_mu_);
    monitor_stop_ = true;
  }
  monitor_wake_.Signal();
  monitor_thread_.join();
}

}  // namespace ps
