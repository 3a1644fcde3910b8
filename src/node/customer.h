// Customer: one application object's mailbox on a node (ps-lite's Customer).
//
// Messages for (app_id, customer_id) are queued by the node's receive thread
// and handled, in order, on the customer's own thread, so application code
// never runs on the receive thread. A customer thread that has nothing
// queued and last handled a request (a server's) waits for the next one
// inside Van::CoReceive: it receives from the socket itself, beside the
// receive thread, and keeps a message for itself without a hand-off when it
// is the one to receive it. The customer tracks its outstanding
// requests; a response is recorded after the handler has run, so Wait()
// returns only once the handler has seen every response. Thread-safe.
//
// A customer whose handler runs no application code for some messages (a
// KVWorker's response without a callback: it only stores values into the
// waiting caller's buffer) may say so with set_inline_predicate. The receive
// thread then handles such a message itself when nothing is queued or
// running, which saves a thread hand-off on every round trip; order is kept
// (at most one event is handled at a time, in arrival order).
#ifndef PS_NODE_CUSTOMER_H_
#define PS_NODE_CUSTOMER_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "message/message.h"
#include "node/request_tracker.h"
#include "util/blocking_queue.h"
#include "util/mutex.h"
#include "util/wake_fd.h"

namespace ps {

class Node;

class Customer {
 public:
  // Runs on the customer thread for every data message. For a response it
  // returns whether the customer records it in the tracker now, as usual
  // (true), or the handler has taken it over and records it itself later
  // (false: a KVWorker re-routing a part that a server refused because its
  // keys moved).
  using Handler = std::function<bool(Message& msg)>;
  // Runs on the customer thread when a request fails (after it is marked
  // failed), so the application can drop what it kept for it.
  using FailureHandler = std::function<void(int64_t timestamp, const Status&)>;

  // A customer of `node` (borrowed; must outlive this customer), which
  // receives nothing until Start(). A `held` customer queues messages but
  // handles none until Release(), so an application can finish setting its
  // handles first.
  Customer(int app_id, int customer_id, Node* node, Handler handler,
           bool held = false);
  // Stop().
  ~Customer();
  Customer(const Customer&) = delete;
  Customer& operator=(const Customer&) = delete;

  int app_id() const { return app_id_; }
  int customer_id() const { return customer_id_; }
  Node* node() const { return node_; }
  RequestTracker* tracker() { return &tracker_; }

  void set_failure_handler(FailureHandler handler);
  // Runs on the customer thread when a peer is declared dead (its id) or the
  // node fails as a whole (-1), after the affected requests have failed.
  using PeerFailureHandler = std::function<void(int peer, const Status&)>;
  void set_peer_failure_handler(PeerFailureHandler handler);
  // Runs on the customer thread when server `peer` died and another took
  // over its data (docs/replication.md): the handler resends what the dead
  // server owed, or fails it. Without one, the requests still owed by the
  // peer fail as in OnPeerFailed. A response to a resent request carries
  // resend_for = the dead server and counts as that server's answer.
  using FailoverHandler = std::function<void(int peer, const Status&)>;
  void set_failover_handler(FailoverHandler handler);
  // Runs on the customer thread at each Watch(), after this customer has
  // logged its own long waits: an app logs what it holds (a server's
  // bsp/ssp pulls).
  using WatchHandler = std::function<void(int64_t older_than_ms)>;
  void set_watch_handler(WatchHandler handler);
  // Logs, on the customer thread, every request of this customer open for
  // longer than `older_than_ms` and due a line (util/wait_log.h), with whom
  // it waits for; then runs the watch handler. Called by the node every
  // EMBER_WAIT_LOG_INTERVAL_MS.
  void Watch(int64_t older_than_ms);

  // Fails, on the customer thread, every request of this customer that has
  // been sent and has waited longer than `older_than_ms` for its answers,
  // with kDeadlineExceeded naming the peers that still owe one (the
  // failure handler runs for each, as for a dead peer). Called by a
  // worker's node every heartbeat under EMBER_REQUEST_TIMEOUT_MS; never
  // blocks, and one not yet handled is not queued twice.
  void Expire(int64_t older_than_ms);

  // Runs on the customer thread at each Tick(): a server app sends again
  // what a membership change has not had acknowledged in time
  // (docs/replication.md, "Lost messages").
  using TickHandler = std::function<void()>;
  void set_tick_handler(TickHandler handler);
  // Called by the node at each liveness check (every heartbeat); never
  // blocks. A tick not yet handled is not queued twice.
  void Tick();

  // Runs on the customer thread after the node's key ring has changed
  // (OnRingChanged): a KVWorker re-routes what waited for the new ring.
  using RingHandler = std::function<void()>;
  void set_ring_handler(RingHandler handler);
  // Called by the node, after it has switched to a new key ring; never
  // blocks.
  void OnRingChanged();

  // Runs on the customer thread after a worker joined, came back, went
  // away or is gone (kWorkerChange; docs/consistency.md, "Elastic
  // workers"): a server's consistency controller follows the workers.
  using WorkerHandler = std::function<void(int worker, WorkerEvent event)>;
  void set_worker_handler(WorkerHandler handler);
  // Called by the node after it has updated its table; never blocks.
  void OnWorkerChange(int worker, WorkerEvent event);

  // Messages for which `predicate` (called under this customer's lock; it
  // must be cheap and must not block) returns true may be handled on the
  // receive thread. Set it before messages arrive.
  using InlinePredicate = std::function<bool(const Meta& meta)>;
  void set_inline_predicate(InlinePredicate predicate);

  // Called by the node's receive thread; never blocks.
  void Accept(Message&& msg);
  // Called by the node's receive thread under the node's lock (which keeps
  // this customer alive): true if the message may be handled right away on
  // this thread, in which case the caller must call RunClaimed with it
  // after releasing its lock; false: Accept it.
  bool Claim(const Meta& meta);
  void RunClaimed(Message&& msg);

  // The receive thread's way in, in two steps so that nothing is handled or
  // woken under the node's lock (a customer thread woken under it would
  // only block on it again when it sends its answer). Admit, under the
  // node's lock, decides: true, the message is handled on the calling
  // thread (a claim); false, it goes to the customer thread. Either way the
  // customer stays alive until Deliver, called after the node's lock is
  // released with Admit's answer, returns. Without `may_claim` the message
  // always goes to the customer thread.
  //
  // A third answer, kKeep, when the calling thread is this customer's own
  // thread receiving inside Van::CoReceive: it keeps the message and
  // handles it once it has left the van (so no application code runs while
  // it receives).
  enum class Route { kQueue, kHere, kKeep };
  Route Admit(const Meta& meta, bool may_claim);
  void Deliver(Message&& msg, Route route);

  // Waits for request `timestamp` of this customer's tracker. Unless another
  // thread already does so, the caller waits inside Van::CoReceive, so the
  // response it waits for is handled on its own thread if it receives it.
  Status Wait(int64_t timestamp);
  // The same, giving up after `timeout_ms` with kDeadlineExceeded naming
  // the peers that have not answered (the request stays open: their late
  // answers are handled and dropped). It waits on the tracker, not inside
  // the van: for rare requests (model control), not the data path.
  Status WaitFor(int64_t timestamp, int64_t timeout_ms);
  // Called when `peer` is declared dead: its requests fail on this thread.
  void OnPeerFailed(int peer, const Status& status);
  // Called when `peer` died and its data failed over (the node's ring has
  // changed already): the failover handler runs on this thread.
  void OnFailover(int peer, const Status& status);
  // Fails every open request (expulsion, abort).
  void FailAll(const Status& status);

  // Starts the customer thread and registers with the node; messages that
  // arrived for this id before are queued now. Call once.
  void Start();
  // Unregisters from the node, lets a claim in progress finish, and joins the
  // customer thread after it has handled what was queued. Idempotent; a
  // customer never started has nothing to stop.
  void Stop();

  // Starts handling messages (idempotent).
  void Release();
  // Whether messages are still held (Release not called yet).
  bool held() const {
    MutexLock lock(&mu_);
    return held_;
  }

  // Blocks until everything queued so far has been handled.
  void Drain();

 private:
  struct Event {
    Message msg;
    int failed_peer = -1;  // >= 0: a peer failure, not a message
    bool fail_all = false;
    bool failover = false;      // with failed_peer: it failed over
    int64_t watch_ms = -1;      // >= 0: a Watch, not a message
    int64_t expire_ms = -1;     // >= 0: an Expire, not a message
    bool tick = false;          // A Tick, not a message.
    bool ring_changed = false;  // The node's ring changed: not a message.
    // A worker's membership changed (worker_id): not a message.
    WorkerEvent worker_event = WorkerEvent::kNone;
    int worker_id = -1;
    Status status;
  };
  static constexpr uint8_t kTickQueued = 1;
  static constexpr uint8_t kWatchQueued = 2;
  static constexpr uint8_t kExpireQueued = 4;
  void QueueOnce(uint8_t kind, Event&& e) EXCLUDES(mu_);
  void ClearQueued(uint8_t kind) EXCLUDES(mu_);
  void LogLongWaits(int64_t older_than_ms);
  void FailExpired(int64_t older_than_ms);
  void Loop();
  // Waits for work inside the van (see Route::kKeep); false if the van
  // cannot be waited in now (then wait on the queue).
  bool CoReceive();
  // Queues `e` for the customer thread and wakes it; false (nothing
  // queued) once the queue is closed.
  bool Enqueue(Event&& e) EXCLUDES(mu_);
  // Wakes the customer thread if it waits inside the van.
  void WakeLoop();
  void Handle(Event& e);
  // Handle, then clear busy_ and count the event (busy_ is set).
  void HandleBusy(Event* e);
  // Replaces `*slot`, one of the handlers guarded by mu_, under mu_.
  template <typename H>
  void SetHandler(H* slot, H handler) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    *slot = std::move(handler);
  }

  const int app_id_;
  const int customer_id_;
  Node* const node_;
  Handler handler_;
  RequestTracker tracker_;
  BlockingQueue<Event> queue_;
  std::thread thread_;    // Started by Start(), joined by Stop().
  bool started_ = false;  // Start() and Stop() run on the owner's thread.

  mutable Mutex mu_;
  std::condition_variable idle_cv_;
  FailureHandler failure_handler_ GUARDED_BY(mu_);
  PeerFailureHandler peer_failure_handler_ GUARDED_BY(mu_);
  FailoverHandler failover_handler_ GUARDED_BY(mu_);
  WatchHandler watch_handler_ GUARDED_BY(mu_);
  TickHandler tick_handler_ GUARDED_BY(mu_);
  RingHandler ring_handler_ GUARDED_BY(mu_);
  WorkerHandler worker_handler_ GUARDED_BY(mu_);
  // The periodic events queued and not yet handled (QueueOnce's kinds).
  uint8_t periodic_queued_ GUARDED_BY(mu_) = 0;
  uint64_t queued_ GUARDED_BY(mu_) = 0;
  uint64_t handled_ GUARDED_BY(mu_) = 0;
  bool held_ GUARDED_BY(mu_) = false;
  // An event is being handled (by the customer thread or a claimant).
  bool busy_ GUARDED_BY(mu_) = false;
  // Messages admitted for the customer thread and not yet queued.
  int admitted_ GUARDED_BY(mu_) = 0;
  InlinePredicate inline_predicate_ GUARDED_BY(mu_);

  // The customer thread waits inside the van (CoReceive). Whoever clears
  // it (exchange) signals wake_; the thread then consumes that signal.
  std::atomic<bool> polling_{false};
  WakeFd wake_;
  // The last data message handled was a request: wait inside the van.
  std::atomic<bool> serves_requests_{false};
  // A message kept by the customer thread inside CoReceive (Route::kKeep).
  // Touched only by the customer thread.
  Event kept_;
  bool has_kept_ = false;
};

}  // namespace ps

#endif  // PS_NODE_CUSTOMER_H_
