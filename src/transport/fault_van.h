// FaultVan: a Van decorator that injects network faults, for tests.
//
// A FaultInjector holds a seed, a FaultPlan and the state of the faults
// that span nodes (partitions, killed nodes, messages held back). Every
// node of an in-process cluster wraps its van in a FaultVan sharing one
// injector; a FaultVan forwards everything to the van it wraps and passes
// each message through the injector on Send (and, for killed nodes, on
// receipt). Faults:
//
// - drop: the message is lost (Send still returns OK, as the network would).
// - duplicate: the message is delivered, and a copy (its frames copied) is
//   delivered again after 0..max_delay further messages.
// - delay: the message is held back and released after 1..max_delay further
//   messages have passed through the injector (any link), or by Step() or
//   Flush().
// - reorder: the message is held back until the next message on the same
//   (sender, recipient) link has been delivered, so that one overtakes it
//   (or until max_delay further messages, Step() or Flush()).
// - fifo (a plan setting, not a fault): each link keeps its order, as a
//   TCP connection (and so ZeroMQ) does: a message sent on a link while an
//   earlier one of it is held waits behind it and is released after it,
//   whatever its own draw; a duplicate's copy follows its original at once;
//   reorder is refused. Delays then stall a link rather than reorder it,
//   which protocols that rely on per-link order (replication) can take.
// - partition: every message between two sets of node ids is dropped until
//   Heal(); explicit, not drawn.
// - kill: a node stops sending and receiving for good, as after kill -9: what
//   it sends and what is sent to it is dropped, and what reaches its van is
//   not handed to it. Its peers learn of it only through heartbeats.
//
// drop, duplicate, delay and reorder are drawn per message, with the plan's
// probabilities, among the messages its FaultTarget matches (data messages,
// control messages or both; optionally only some (sender, recipient)
// links). A message gets at most one of them.
//
// Determinism. The draw for a message is a pure function of the seed, the
// message's identity (sender, recipient, control command, app, customer,
// timestamp, request/push/pull flags, command, barrier group and round,
// failed node; for a JOIN, the joining node's role, rank hint and customer
// id) and how many messages of that same identity the injector
// has seen before (so a resend or a heartbeat gets a fresh draw): SplitMix64
// (util/mix.h) over those words. So the same seed makes the same decisions
// for the same messages whatever the thread interleaving, as long as the
// nodes send the same messages. What does depend on the interleaving: when
// a held message is released (after how many further messages of any link,
// which counts messages in the order threads reach the injector) and what
// overtakes a reordered message, and, when two threads send messages of the
// same identity at once, which of the two gets which occurrence number.
// A run whose nodes send one request at a time and whose test calls Step()
// at fixed points replays exactly.
//
// Thread-safe. Sends through the injector are serialised: the wrapped van's
// Send runs under the injector's send lock (held messages are released in
// order), so the wrapped van must not call back into the injector from Send
// (InProcVan and ZmqVan do not). Receipt takes only a short, separate lock.
#ifndef PS_TRANSPORT_FAULT_VAN_H_
#define PS_TRANSPORT_FAULT_VAN_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/van.h"
#include "util/mutex.h"

namespace ps {

// Which messages the drawn faults (drop, duplicate, delay, reorder) may hit.
struct FaultTarget {
  // Any sender or recipient in `links`.
  static constexpr int kAnyNode = -1000;

  enum class Kind { kAll, kData, kControl };
  Kind kind = Kind::kData;
  // (sender, recipient) pairs, each side an id or kAnyNode; empty: every
  // link.
  std::vector<std::pair<int, int>> links;
  // Only these control commands (with kind kControl or kAll); empty: any.
  std::vector<Control> controls;
  // Only the data messages of a membership change (with kind kData or
  // kAll): a state copy's or hand-over's messages between servers and their
  // acknowledgements (Meta::copy_attempt != 0); not the workers' requests,
  // nor the copies of their pushes.
  bool migration = false;
  // Only the commit notices of workers' pushes (Meta::commit_notice, with
  // kind kData or kAll): a test holds them to keep pushes uncommitted, so
  // pending, on the servers (bsp).
  bool commit_notices = false;
  // Never these (sender, recipient) links, each side an id or kAnyNode
  // (e.g. a message that nothing resends).
  std::vector<std::pair<int, int>> spared;

  bool Matches(const Meta& meta) const;
};

// Per-message probabilities of the drawn faults, for the messages `target`
// matches. Each in [0, 1], their sum at most 1.
struct FaultPlan {
  double drop = 0;
  double duplicate = 0;
  double delay = 0;
  double reorder = 0;
  // A held message is released after at most this many further messages
  // (>= 1).
  int max_delay = 8;
  // Keep each link's order (see the file comment); reorder must be 0.
  bool fifo = false;
  FaultTarget target;

  // kInvalidArgument naming the bad field.
  [[nodiscard]] Status Validate() const;
  // "drop=0.1 duplicate=0 ... target=data" for logs and failure messages.
  std::string DebugString() const;
};

// What the injector has done (a snapshot).
struct FaultCounters {
  uint64_t messages = 0;      // every message sent through the injector
  uint64_t matched = 0;       // of which the plan's target matched
  uint64_t dropped = 0;       // drawn drops
  uint64_t duplicated = 0;    // messages sent twice
  uint64_t delayed = 0;       // messages held back by a delay
  uint64_t reordered = 0;     // messages held back by a reorder
  uint64_t released = 0;      // held messages (and copies) delivered
  uint64_t partitioned = 0;   // dropped by a partition
  uint64_t killed = 0;        // dropped because an end is killed
  uint64_t lost_at_stop = 0;  // held messages whose sender's van stopped
  uint64_t held = 0;          // held now
};

// One injected fault, in the order the injector applied it.
struct FaultEvent {
  enum class Kind {
    kDrop,
    kDuplicate,
    kDelay,
    kReorder,
    kPartitioned,
    kKilled,
  };
  Kind kind = Kind::kDrop;
  Meta meta;  // the message's header (without its auth)

  std::string DebugString() const;
};

const char* FaultKindName(FaultEvent::Kind kind);

class FaultVan;

class FaultInjector {
 public:
  // At most this many events are kept (events() says the first ones).
  static constexpr size_t kMaxEvents = 100000;

  explicit FaultInjector(uint64_t seed, FaultPlan plan = FaultPlan());
  ~FaultInjector();
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  uint64_t seed() const { return seed_; }

  // Replaces the plan (a default FaultPlan injects nothing). Takes effect
  // for the next message; held messages stay held.
  [[nodiscard]] Status set_plan(const FaultPlan& plan);
  FaultPlan plan() const;

  // Drops every message between a node of `a` and a node of `b`, in both
  // directions, until Heal(). Partitions add up.
  void Partition(const std::vector<int>& a, const std::vector<int>& b);
  // Ends every partition.
  void Heal();
  // Node `id` is dead for good (see the file comment).
  void Kill(int id);
  bool IsKilled(int id) const;

  // Releases the oldest held message; false if none was held.
  bool Step();
  // Releases the oldest held message of link (sender, recipient); false if
  // that link holds none. The link's other held messages then stay held
  // until StepLink, Step or Flush releases them (not as their delays run
  // out): a test orders what two links deliver to one node.
  bool StepLink(int sender, int recipient);
  // Releases every held message, oldest first; how many.
  size_t Flush();
  size_t held() const;

  FaultCounters counters() const;
  std::vector<FaultEvent> events() const;

  // The draw for a message of identity `meta` seen `occurrence` times
  // before: uniform in [0, 2^64). Exposed so tests can check that it
  // depends on the seed, the identity and the occurrence alone.
  uint64_t Draw(const Meta& meta, uint64_t occurrence, uint64_t salt) const;
  // The identity hash Draw uses.
  static uint64_t Identity(const Meta& meta);

 private:
  friend class FaultVan;
  struct Held {
    FaultVan* from = nullptr;
    Message msg;
    uint64_t due = 0;  // released once messages_ reaches it
    bool reorder = false;
    // fifo: not released before the earlier held messages of its link.
    bool keep_order = false;
  };

  void Register(FaultVan* van);
  // Drops the held messages `van` sent; after it returns the injector
  // never touches `van` again.
  void Unregister(FaultVan* van);
  Status OnSend(FaultVan* from, Message&& msg);
  // False if the message must not reach the recipient's node.
  bool OnReceive(const Meta& meta);

  // Why a message must be dropped whatever the plan (killed end,
  // partition); false if it need not.
  // `in_flight`: a held message being released, which a sender killed
  // since it was sent no longer stops.
  bool ForcedDropLocked(const Meta& meta, bool in_flight,
                        FaultEvent::Kind* kind) REQUIRES(state_mu_);
  void RecordLocked(FaultEvent::Kind kind, const Meta& meta)
      REQUIRES(state_mu_);
  Status DeliverLocked(FaultVan* from, Message&& msg) REQUIRES(send_mu_);
  void ReleaseLocked(std::deque<Held>::iterator it) REQUIRES(send_mu_);
  void ReleaseDueLocked(int sender, int recipient) REQUIRES(send_mu_);
  // Whether a message of link (sender, recipient) is held.
  bool LinkHeldLocked(int sender, int recipient) const REQUIRES(send_mu_);
  static Message Copy(const Message& msg);

  const uint64_t seed_;

  // Order: send_mu_ before state_mu_. The wrapped vans' Send runs under
  // send_mu_, never under state_mu_; receipt takes state_mu_ only.
  mutable Mutex send_mu_;
  std::deque<Held> held_ GUARDED_BY(send_mu_);
  std::set<FaultVan*> vans_ GUARDED_BY(send_mu_);
  uint64_t sent_ GUARDED_BY(send_mu_) = 0;  // messages through OnSend
  // How many messages of each identity have been seen.
  std::unordered_map<uint64_t, uint64_t> occurrences_ GUARDED_BY(send_mu_);

  mutable Mutex state_mu_;
  FaultPlan plan_ GUARDED_BY(state_mu_);
  std::vector<std::pair<std::set<int>, std::set<int>>> partitions_
      GUARDED_BY(state_mu_);
  std::set<int> killed_ GUARDED_BY(state_mu_);
  FaultCounters counters_ GUARDED_BY(state_mu_);
  std::vector<FaultEvent> events_ GUARDED_BY(state_mu_);
};

// Wraps `inner`, which it owns, and passes what it sends through
// `injector`, which it borrows (the injector must outlive it).
class FaultVan final : public Van {
 public:
  FaultVan(std::unique_ptr<Van> inner, FaultInjector* injector);
  ~FaultVan() override;

  // What the injector sees: messages received pass it before the handler.
  StatusOr<int> Start(const std::string& host, int port,
                      Handler handler) override;
  // Returns OK for a message the injector drops, as the network would.
  Status Send(Message&& msg) override;
  void Stop() override;

  // The rest is the wrapped van's.
  Status Connect(int id, const std::string& host, int port,
                 const std::string& local) override {
    return inner_->Connect(id, host, port, local);
  }
  std::string local_endpoint() const override {
    return inner_->local_endpoint();
  }
  void Disconnect(int id) override { inner_->Disconnect(id); }
  size_t num_routes() const override { return inner_->num_routes(); }
  ReceiveGate::Result CoReceive(int wake_fd,
                                const std::function<bool()>& done) override {
    return inner_->CoReceive(wake_fd, done);
  }
  void set_spin(std::chrono::microseconds spin) override {
    inner_->set_spin(spin);
  }
  void set_limits(const VanLimits& limits) override {
    Van::set_limits(limits);
    inner_->set_limits(limits);
  }
  Status set_security(const VanSecurity& security) override {
    return inner_->set_security(security);
  }
  // The wrapped van's events pass as they are; RaisePeerEvent on either
  // van reaches `handler`.
  void set_peer_event_handler(PeerEventHandler handler) override {
    Van::set_peer_event_handler(handler);
    inner_->set_peer_event_handler(std::move(handler));
  }

  // counters() counts what passed the injector (sent: handed to the wrapped
  // van; received: handed to the node); the wrapped van's are inner()'s.
  Van* inner() { return inner_.get(); }

 private:
  friend class FaultInjector;
  const std::unique_ptr<Van> inner_;
  FaultInjector* const injector_;
};

}  // namespace ps

#endif  // PS_TRANSPORT_FAULT_VAN_H_
