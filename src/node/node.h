// Node: the per-process runtime of one Ember node (ps-lite's Postoffice).
//
// It owns the van, this process's copy of the membership table (ids, ranks,
// addresses) and of the key ring, its side of barriers, heartbeats and
// failure detection, and it dispatches received messages to customers. A
// node whose role is scheduler also creates a Scheduler (node/scheduler.h),
// which runs the scheduler's side of those protocols: rendezvous, rank
// assignment, barrier counting, failure detection and notices
// (docs/protocol.md). The node hands it the control messages addressed to
// the scheduler and, as its SchedulerHost, learns from it the membership
// and the failures that other nodes learn from messages. There is no hidden
// singleton: tests build several nodes in one process over an InProcVan.
//
// A worker process may host several logical workers: every customer id that
// calls Start() joins as a worker of its own (ps-lite's multi-worker mode).
//
// Thread-safe. Received messages are dispatched by whichever thread receives
// them, one at a time: the van's thread, or an idle customer thread or a
// waiting caller inside Van::CoReceive. Dispatch only queues work for
// customers (or keeps it for the receiving thread itself, to handle after it
// has left the van) and never runs application code; exit callbacks run on
// the thread that calls Finalize().
#ifndef PS_NODE_NODE_H_
#define PS_NODE_NODE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "message/message.h"
#include "metrics/metrics.h"
#include "node/membership.h"
#include "node/options.h"
#include "node/scheduler.h"
#include "transport/van.h"
#include "util/clock.h"
#include "util/flood_trim.h"
#include "util/log_limiter.h"
#include "util/mutex.h"

namespace ps {

class Customer;
namespace metrics {
class HttpServer;
class ProgressLog;
}  // namespace metrics

class Node final : private SchedulerHost {
 public:
  static constexpr int kSchedulerId = kSchedulerNodeId;
  static int ServerRankToId(int rank) { return ServerRankToNodeId(rank); }
  static int WorkerRankToId(int rank) { return WorkerRankToNodeId(rank); }
  static int IdToRank(int id) { return id < 8 ? 0 : (id - 8) / 2; }

  // `clock` is borrowed and must outlive the node.
  Node(Options options, std::unique_ptr<Van> van,
       const Clock* clock = Clock::Real());
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Joins the cluster as logical node `customer_id` (the first call binds the
  // van) and waits for the node table; then, if `do_barrier`, for every node.
  // Fails with kDeadlineExceeded if the cluster does not form within the
  // start timeout (the message names what is missing), kAborted if the
  // scheduler refuses this node or gives up.
  [[nodiscard]] Status Start(int customer_id, bool do_barrier);

  // Leaves: an optional barrier over every node, then (for customer 0, once
  // the other logical nodes of this process have finalized) drains the
  // customers, tells the scheduler, runs the exit callback and stops the van.
  // Returns the barrier's Status; the node stops either way.
  [[nodiscard]] Status Finalize(int customer_id, bool do_barrier);

  // Blocks until every node of `group` has called Barrier with the same group.
  // Fails (kUnavailable) if a member dies, kAborted if this node is expelled
  // or the scheduler dies.
  [[nodiscard]] Status Barrier(int customer_id, int group);

  void RegisterExitCallback(std::function<void()> callback);

  // Sends a message. If meta.sender is unset it becomes this process's
  // logical id for meta.customer_id (the scheduler: 1). Messages to this
  // process's own ids are delivered locally. kUnavailable if the recipient is
  // dead or unknown.
  [[nodiscard]] Status Send(Message&& msg);

  // Customers register themselves; see Customer. A customer numbers its
  // requests on from where the last one of its (app, customer) ids in this
  // node stopped, so that an app created again (ps-lite allows it) never
  // reuses a request's timestamp: servers take a timestamp below what a
  // worker said it had every answer for as a late duplicate
  // (docs/replication.md).
  void AddCustomer(Customer* customer);
  void RemoveCustomer(Customer* customer);
  // Releases every held customer (see Customer); Barrier and Finalize do.
  void ReleaseCustomers();

  // --- Membership. Valid after Start() has returned OK.
  Role role() const { return options_.role; }
  const Options& options() const { return options_; }
  // The servers of the current ring (DMLC_NUM_SERVER before the node
  // table): it follows joins, leaves and failovers.
  int num_servers() const {
    const int n = ring_servers_.load(std::memory_order_acquire);
    return n > 0 ? n : options_.num_servers;
  }
  // DMLC_NUM_WORKER until the node table came; then the workers of the
  // current membership: those that formed the job or joined it since,
  // less those gone (a worker away, its rank held for its restart, counts).
  int num_workers() const EXCLUDES(mu_);

  // Elastic workers (docs/consistency.md, "Elastic workers"): `callback`
  // runs after every change of the workers' membership this node hears of
  // (the worker's id, what happened, num_workers() after it), one at a
  // time and in order, on a thread of its own ("ember-members"), never
  // with a lock of the node held. Replaces the previous; null removes it.
  using WorkerChangeCallback =
      std::function<void(int id, WorkerEvent event, int num_workers)>;
  void SetWorkerChangeCallback(WorkerChangeCallback callback) EXCLUDES(cb_mu_);
  // The same for the servers: `callback` runs after every ring change that
  // adds or removes a server (the server's id, what happened, the servers
  // of the new ring), in order with the workers' changes, on the same
  // thread. A server is kFailed when this node knew it dead as the ring
  // dropped it (a failover), kLeft otherwise (a leave).
  enum class ServerEvent { kNone, kJoined, kLeft, kFailed };
  using ServerChangeCallback =
      std::function<void(int id, ServerEvent event, int num_servers)>;
  void SetServerChangeCallback(ServerChangeCallback callback) EXCLUDES(cb_mu_);
  // This process's id for logical node `customer_id` (-1 if none).
  int my_id(int customer_id = 0) const;
  int my_rank() const;
  std::vector<int> GetNodeIds(int group) const;
  // Server ids in rank order.
  std::vector<int> server_ids() const;
  // The key ring of the current epoch (null before the node table came).
  // Immutable: callers keep the pointer for as long as they route by it.
  std::shared_ptr<const KeyRing> key_ring() const;
  // The rings this node installed after epoch `after`, oldest first, up to
  // and including `until` (the last kRingHistory rings are kept). A
  // component that handles ring changes on a thread of its own may find
  // several installed since it last looked: it steps through each, so that
  // a failover and a join that follow each other closely are handled as
  // two changes, not as one. Empty if a ring in between is no longer kept.
  std::vector<std::shared_ptr<const KeyRing>> RingsAfter(uint64_t after,
                                                         uint64_t until) const;
  static constexpr size_t kRingHistory = 16;
  // The epoch of key_ring() (0 before the node table came), without a lock.
  uint64_t ring_epoch() const {
    return ring_epoch_.load(std::memory_order_acquire);
  }
  // Its replicas() (0 before the node table came), without a lock: the data
  // path's test for replication.
  int ring_replicas() const {
    return ring_replicas_.load(std::memory_order_acquire);
  }
  // Test seam: the ring changes a running node hears of are failovers and
  // joins (a later node table); tests of other rings that move ranges
  // between live servers use this. It installs `ring` (a later epoch than the
  // current ring's, over servers this node knows) as if the scheduler had
  // published it: the node routes by it from then on and every customer
  // hears of it (Customer::OnRingChanged). kInvalidArgument otherwise.
  // Only tests call it.
  [[nodiscard]] Status InstallRingForTest(std::shared_ptr<const KeyRing> ring)
      EXCLUDES(mu_);
  bool IsAlive(int id) const;
  // "server 1 (id 10, 127.0.0.1:4567)".
  std::string Describe(int id) const;
  // "127.0.0.1:4567": where node `id` listens ("" if unknown).
  std::string Address(int id) const;
  bool ready() const;

  // --- Liveness. Called by the node's own heartbeat thread; public so tests
  // with a fake clock and heartbeats disabled can drive them.
  void SendHeartbeat();
  // Also runs the resend timers of membership changes (ResendMigration).
  void CheckLiveness();
  // This process did not run for about `paused_ms` (its heartbeat thread
  // woke that late: the machine overloaded, the process stopped): the
  // heartbeats and echoes of that time may wait unread, so that time is not
  // counted against the peers (the scheduler's members, a member's
  // scheduler). The heartbeat thread calls it.
  void ExcusePause(int64_t paused_ms) EXCLUDES(mu_);
  // Logs every wait that has lasted longer than EMBER_WAIT_LOG_INTERVAL_MS
  // and what it waits for: requests (each customer logs its own, on its
  // thread), barriers and, on the scheduler, whom a barrier waits for
  // (Scheduler::WatchWaits). The heartbeat thread calls it once an
  // interval.
  void WatchWaits();
  // A worker under EMBER_REQUEST_TIMEOUT_MS: has each customer fail the
  // requests that have waited longer than that for their answers
  // (Customer::Expire). The heartbeat thread calls it every tenth of the
  // timeout (at least 1 ms, at most a beat).
  void ExpireRequests() EXCLUDES(mu_);
  // Once a flood of dropped messages (at least kFloodTrimMessages since the
  // last trim) has ended, that is a whole beat without a new drop, returns
  // the freed heap malloc keeps to the kernel (malloc_trim): what ZeroMQ
  // allocated for the garbage (util/flood_trim.h). The heartbeat thread
  // calls it every beat. True if it trimmed.
  bool TrimAfterFlood();
  // Messages dropped on receipt so far, for every reason (the van's
  // undecodable ones too).
  uint64_t DroppedMessages() const;
  static constexpr uint64_t kFloodTrimMessages = 100;

  // --- Restoring copies (docs/replication.md). A server app whose state
  // is copied to other servers registers itself; once every registered app
  // has copied its state to server `holder` under ring epoch `epoch`, the
  // scheduler learns that `holder` holds a whole copy of this server's data
  // again (kReplicaReady).
  void AddStateApp(int app_id);
  void RemoveStateApp(int app_id);
  void StateCopied(int app_id, int holder, uint64_t epoch);

  // --- Joining (docs/replication.md, "Joining"). A server that joined a
  // cluster that had formed (its first node table's ring has an epoch
  // above the first and names it): that ring, under which the former
  // owners of its ranges hand their state over to it; null for a node that
  // formed the cluster. Its server apps hold requests until each former
  // owner has handed over (KVServerCore), then call HandoverDone; once
  // every registered state app has, the scheduler is told
  // (kHandoverDone).
  std::shared_ptr<const KeyRing> joined_ring() const EXCLUDES(mu_);
  void HandoverDone(int app_id) EXCLUDES(mu_);

  // --- Leaving (docs/replication.md, "Leaving"). A server asks the
  // scheduler to let it leave the running cluster (on SIGTERM too, with
  // heartbeats on, unless EMBER_LEAVE_ON_SIGTERM=0). Asynchronous: false,
  // logged, if this node cannot ask (not a server, no node table yet,
  // finalized, asked already). The scheduler refuses (logged here; the
  // node goes on serving) or publishes a ring without this server: then
  // its server apps hand their ranges over to the new owners (KVServerCore)
  // and call LeaveHandedOver once every new owner has acknowledged them;
  // once every state app has, the scheduler is told (kHandoverDone) and
  // this server has left: Barrier returns OK at once (a barrier it waits
  // at too), and Finalize ends without waiting for the others. Finalize
  // called meanwhile waits for the hand-over.
  bool RequestLeave(const std::string& why) EXCLUDES(mu_);
  // The ring without this server has come and its hand-over is not yet
  // acknowledged.
  bool handing_over() const EXCLUDES(mu_);
  // This server has left the cluster (its hand-over is acknowledged).
  bool has_left() const EXCLUDES(mu_);
  void LeaveHandedOver(int app_id) EXCLUDES(mu_);

  // Held by a worker's app while it reads the ring and sends what it
  // sliced by it (requests, clock notices). When a ring drops a live
  // server (it leaves), the worker tells that server so (kSwitched) once
  // every RingUse that began before the switch has ended: on that link
  // the notice follows every request sliced by the older ring. The leaver
  // reports its hand-over done only once every live worker's notice has
  // come, so it answers or refuses each such request before it stops
  // (docs/replication.md, "Leaving").
  class RingUse {
   public:
    explicit RingUse(Node* node);
    ~RingUse();
    RingUse(const RingUse&) = delete;
    RingUse& operator=(const RingUse&) = delete;

   private:
    // Ends the use; sends the notices it was the last to hold up.
    void Release();

    Node* const node_;
    uint64_t generation_ = 0;
  };

  // Data messages held for apps this node has not created (yet).
  size_t held_messages() const;

  // When the last heartbeat echo from the scheduler arrived (clock time).
  int64_t last_scheduler_echo_ms() const;

  Van* van() { return van_.get(); }
  // The clock the node measures waits by (a FakeClock in tests).
  const Clock* clock() const { return clock_; }
  const NodeCounters& counters() const { return counters_; }

  // This node's metrics (docs/operations.md): components register their
  // counters, histograms and collectors here. Lives as long as the node.
  metrics::Registry* metrics() { return &metrics_; }
  // The port /metrics is served on; -1 if none (EMBER_METRICS_PORT unset,
  // or before the van is bound).
  int metrics_port() const { return metrics_port_.load(); }

 private:
  // SchedulerHost: how the Scheduler of a scheduler-role node tells it
  // what other nodes learn from NODE_TABLE, NODE_FAILED and BARRIER
  // messages. Each takes mu_ (the Scheduler's lock is taken first).
  // Also the node's own SendLocked's last step.
  void SendControl(Message&& msg) override;
  NodeInfo SchedulerEntry() const override EXCLUDES(mu_);
  void OnMembership(const Membership& membership) override EXCLUDES(mu_);
  void OnMemberDead(int id, const Status& status) override EXCLUDES(mu_);
  void OnMemberFailedOver(int id, std::shared_ptr<const KeyRing> ring,
                          const Status& status) override EXCLUDES(mu_);
  void OnMemberLeft(int id) override EXCLUDES(mu_);
  void OnBarrierReleased(int customer_id, const Status& status) override
      EXCLUDES(mu_);
  void OnWorkerChange(const NodeInfo& worker, WorkerEvent event) override
      EXCLUDES(mu_);
  // A worker's membership changed (kWorkerChange, or OnWorkerChange on the
  // scheduler): the table, then every customer, then the callback. Returns
  // the data held from the worker before this node knew it
  // (from_unknown_), for the caller to dispatch once it has released mu_.
  [[nodiscard]] std::vector<Message> ApplyWorkerChangeLocked(
      const NodeInfo& worker, WorkerEvent event) REQUIRES(mu_);
  void HandleWorkerChange(const Message& msg) EXCLUDES(mu_);
  void RunWorkerCallbacks() EXCLUDES(cb_mu_);
  // Every change of ring_: sets it and its atomics, then tells every
  // customer (Customer::OnRingChanged).
  void SetRingLocked(std::shared_ptr<const KeyRing> ring) REQUIRES(mu_);
  // Wakes the heartbeat thread for a liveness check in `delay_ms`.
  void RequestLivenessCheck(int64_t delay_ms) override EXCLUDES(hb_mu_);

  Status StartVan();
  // `from_van`: received by the van (on its thread or a thread inside
  // CoReceive, which may handle or keep a message for a customer itself,
  // see Customer::Admit), not a local delivery.
  void OnMessage(Message&& msg, bool from_van = false);
  void DispatchData(Message&& msg, bool from_van = false);
  Customer* FindCustomerLocked(const Meta& meta) const REQUIRES(mu_);
  void SweepEarlyMessages();
  void HandleNodeTable(const Message& msg);
  // A node table after the first (a server joined): validated, then the
  // new nodes are added and the ring switches (docs/replication.md,
  // "Joining").
  void HandleLaterNodeTableLocked(const Message& msg) REQUIRES(mu_);
  // Whether a later node table's `ring` drops a live server of the current
  // ring that the table still lists (it leaves; docs/replication.md,
  // "Leaving"); a later table must add a node or do this.
  bool IsDepartureLocked(const Message& msg, const KeyRing& ring) const
      REQUIRES(mu_);
  // The ring without this server came: its hand-over begins.
  // The timers of membership changes (docs/replication.md, "Lost
  // messages"), on each liveness check: a LEAVE_REQUEST unanswered for
  // EMBER_MIGRATION_RESEND_MS is sent again, and every state app's customer
  // ticks (its server app resends what its copies lack).
  void ResendMigration() EXCLUDES(mu_);
  void StartLeavingLocked() REQUIRES(mu_);
  // The scheduler refused to let this server leave.
  void HandleLeaveRefused(const std::string& reason) EXCLUDES(mu_);
  // Every state app's hand-over is acknowledged: tells the scheduler,
  // releases this server's barriers.
  void LeftLocked() REQUIRES(mu_);
  // A leaver whose state apps are all handed over has left once every
  // live worker of its leave has taken the ring without it (kSwitched),
  // or when EMBER_MIGRATION_RESEND_MS x 4 (at least the heartbeat timeout)
  // has passed without it (logged).
  void MaybeLeftLocked() REQUIRES(mu_);
  // kSwitched from a worker. False if the message is not one to take.
  bool HandleSwitched(const Meta& meta) EXCLUDES(mu_);
  // Worker: sends the kSwitched notices due (switched_due_).
  void SendSwitchedLocked() REQUIRES(mu_);
  // Worker: whether the uses the pending notices wait for have ended.
  bool SwitchDrainedLocked() const REQUIRES(mu_);
  // Worker: sends the pending notices if their uses have ended.
  void SendSwitchedIfDrainedLocked() REQUIRES(mu_);
  void MaybeSendSwitched() EXCLUDES(mu_);
  void ApplyNodeTableLocked(const Message& msg) REQUIRES(mu_);
  // The table's ids by role, and the table is ready.
  void TableReadyLocked() REQUIRES(mu_);
  void HandleBarrierRelease(const Message& msg);
  // `failover`: the new ring of a failover notice (null: a plain death).
  void HandleNodeFailed(int id, const std::string& reason,
                        const RingInfo* failover = nullptr);
  void HandleAbort(const std::string& reason);
  void FailEverything(const Status& status);
  // Fails every customer's requests with `status`, which becomes the
  // node's abort status unless it has one.
  void FailAllLocked(const Status& status) REQUIRES(mu_);
  void StartThreads();
  void StopThreads();
  void HeartbeatLoop();
  // Scheduler restart (docs/replication.md, "Scheduler restart"). How long
  // a silent scheduler is waited for.
  int64_t SchedulerWaitMs() const;
  // The scheduler has not echoed for `silent_ms` (more than the heartbeat
  // timeout): logs, every wait-log interval, that the node waits for it.
  void SchedulerSilentLocked(int64_t silent_ms) REQUIRES(mu_);
  // A REJOIN for every logical node: its entry and this node's view of the
  // live members, the ring, the barrier it waits in. Sent instead of a
  // beat once two beats in a row went unanswered.
  void SendRejoinsLocked() REQUIRES(mu_);
  // An echo (or any answer) from the scheduler: it is alive.
  void OnSchedulerEchoLocked() REQUIRES(mu_);
  // The scheduler (unless restarted) writes the run's key to
  // EMBER_RUN_KEY_FILE, once, before it binds.
  Status WriteRunKeyFile() EXCLUDES(mu_);
  std::string DescribeLocked(int id) const REQUIRES(mu_);
  std::vector<int> GetNodeIdsLocked(int group) const REQUIRES(mu_);
  bool IsLocalLocked(int id) const REQUIRES(mu_);
  // Authentication (docs/protocol.md): what a message to `recipient` must
  // carry, and whether a received one carries what it must.
  Key128 AuthForLocked(int recipient) const REQUIRES(mu_);
  bool AuthenticLocked(const Meta& meta) const REQUIRES(mu_);
  // Counts and logs (rate-limited) a message dropped for want of proof.
  void DropUnauthenticatedLocked(const Meta& meta) REQUIRES(mu_);
  // Whether to log the event of `key` now (drop_log_); if so, *since says
  // how many of its events went unlogged before.
  bool LogAllowed(const std::string& key, std::string* since);

  // Metrics (node_metrics.cc): the HTTP endpoint and the progress line,
  // started once the van is bound and stopped with it.
  // Once, from StartVan.
  void StartMetrics(const std::string& bind_host) REQUIRES(start_mu_);
  void StopMetrics();
  void CollectMetrics(metrics::Writer* w) const;
  std::string MetricsLabels() const;

  // A control request of this node to the scheduler, from `sender` (-1:
  // this node's first logical id, which must exist).
  Message SchedulerRequestLocked(Control control, int sender = -1) const
      REQUIRES(mu_);
  void SendLocked(Message&& msg) REQUIRES(mu_);

  // Immutable after construction.
  const Options options_;
  const std::unique_ptr<Van> van_;
  const Clock* const clock_;
  // At most one line a second per peer for what is dropped or not sent.
  LogLimiter drop_log_;
  const uint64_t incarnation_;
  // This process's key, sent only to the scheduler in the join: what the
  // scheduler sends us carries it (empty if the kernel could not make one;
  // Start then fails).
  const std::string process_key_;
  const Key128 process_auth_;  // process_key_'s words
  // Why the Scheduler's run key could not be had (a restarted scheduler's
  // EMBER_RUN_KEY_FILE); Start fails with it. Set during construction.
  Status run_key_status_;

  NodeCounters counters_;
  // The scheduler's role: set if and only if this node's role is
  // scheduler. Declared after what it borrows (the van, the clock, the
  // counters), so it is destroyed before them.
  const std::unique_ptr<Scheduler> scheduler_;
  // Declared before what serves it, so it is destroyed after.
  metrics::Registry metrics_;
  std::unique_ptr<metrics::HttpServer> metrics_http_ GUARDED_BY(start_mu_);
  std::unique_ptr<metrics::ProgressLog> progress_log_ GUARDED_BY(start_mu_);
  std::atomic<int> metrics_port_{-1};
  Mutex start_mu_;  // Serialises binding the van.

  mutable Mutex mu_;
  std::condition_variable cv_;  // Table ready, barrier released, abort.
  bool van_started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::string my_host_ GUARDED_BY(mu_);
  int my_port_ GUARDED_BY(mu_) = 0;
  std::map<int, int> logical_ GUARDED_BY(mu_);  // customer id -> node id
  std::set<int> finalized_ GUARDED_BY(mu_);     // customer ids
  bool table_ready_ GUARDED_BY(mu_) = false;
  std::map<int, NodeInfo> table_ GUARDED_BY(mu_);
  std::vector<int> servers_ GUARDED_BY(mu_);  // ids by rank
  std::vector<int> workers_ GUARDED_BY(mu_);  // ids by rank
  std::shared_ptr<const KeyRing> ring_ GUARDED_BY(mu_);
  // The last kRingHistory rings installed, ring_ last (RingsAfter).
  std::deque<std::shared_ptr<const KeyRing>> ring_history_ GUARDED_BY(mu_);
  std::atomic<uint64_t> ring_epoch_{0};  // ring_'s, written under mu_
  std::atomic<int> ring_replicas_{0};    // ring_'s, written under mu_
  std::atomic<int> ring_servers_{0};     // ring_'s, written under mu_
  std::set<int> dead_ GUARDED_BY(mu_);
  std::set<int> left_ GUARDED_BY(mu_);
  // Restoring copies: the apps that copy state, and which have copied it
  // to (holder, ring epoch).
  std::set<int> state_apps_ GUARDED_BY(mu_);
  std::map<std::pair<int, uint64_t>, std::set<int>> state_copied_
      GUARDED_BY(mu_);
  // Joining: the ring this server joined under (joined_ring()), and the
  // state apps that have received their hand-over.
  std::shared_ptr<const KeyRing> joined_ring_ GUARDED_BY(mu_);
  std::set<int> handed_over_ GUARDED_BY(mu_);
  bool handover_reported_ GUARDED_BY(mu_) = false;
  // A worker admitted into a running job (its node table says so): it
  // meets no start barrier.
  bool joined_running_ GUARDED_BY(mu_) = false;
  // Workers away: dead, their ranks held for their restart.
  std::set<int> away_ GUARDED_BY(mu_);
  // Leaving: where this server is on its way out, and the state apps
  // whose hand-over every new owner has acknowledged.
  enum class LeaveState { kNone, kAsked, kHandingOver, kLeft };
  LeaveState leave_ GUARDED_BY(mu_) = LeaveState::kNone;
  // When the last LEAVE_REQUEST went out (clock time): asked again after
  // EMBER_MIGRATION_RESEND_MS without an answer (ResendMigration).
  int64_t leave_asked_ms_ GUARDED_BY(mu_) = 0;
  std::set<int> leave_handed_ GUARDED_BY(mu_);
  // The ring epoch this server leaves under, the live workers then, and
  // when every state app's hand-over was acknowledged (0: not yet).
  uint64_t leave_epoch_ GUARDED_BY(mu_) = 0;
  std::set<int> leave_workers_ GUARDED_BY(mu_);
  int64_t leave_handed_ms_ GUARDED_BY(mu_) = 0;
  bool leave_wait_logged_ GUARDED_BY(mu_) = false;
  // On a server: the newest ring epoch each worker said it switched to.
  std::map<int, uint64_t> switched_ GUARDED_BY(mu_);
  // On a worker: the kSwitched notices to send (server -> epoch) once the
  // RingUses that began before the switch have ended.
  std::map<int, uint64_t> switched_due_ GUARDED_BY(mu_);
  // RingUse's generation (a ring switch that drops a live server starts a
  // new one) and how many uses are under way, by its parity; whether
  // notices wait, and (after a second switch came while they waited) for
  // the uses of both parities. Lock-free on the data path.
  std::atomic<uint64_t> use_generation_{0};
  std::atomic<int64_t> uses_[2] = {};
  std::atomic<bool> switch_pending_{false};
  bool switch_all_ GUARDED_BY(mu_) = false;
  Status abort_status_ GUARDED_BY(mu_);
  std::map<int, std::pair<bool, Status>> barrier_waits_
      GUARDED_BY(mu_);  // by customer id
  // customer id -> the number of its last barrier request.
  std::map<int, uint64_t> barrier_numbers_ GUARDED_BY(mu_);
  std::map<int, std::pair<int, int64_t>> barrier_since_
      GUARDED_BY(mu_);  // -> group, start
  std::map<std::pair<int, int>, Customer*> customers_ GUARDED_BY(mu_);
  // Where the next customer of each (app, customer) ids starts numbering
  // its requests (AddCustomer).
  std::map<std::pair<int, int>, int64_t> next_timestamps_ GUARDED_BY(mu_);
  // Data messages for apps not created yet, by app id, with their arrival
  // time; requests held longer than options_.missing_app_timeout_ms are
  // answered kNotFound (no silent hang on a missing app).
  std::map<int, std::vector<std::pair<int64_t, Message>>> early_
      GUARDED_BY(mu_);
  // Data messages that arrived before our node table, at most
  // kMaxHeldBeforeTable of them and kMaxHeldBytesBeforeTable bytes.
  static constexpr size_t kMaxHeldBeforeTable = 100000;
  static constexpr size_t kMaxHeldBytesBeforeTable = size_t{256} << 20;
  std::vector<Message> before_table_ GUARDED_BY(mu_);
  // Data from a member this node has not heard of yet (it carries the run's
  // key, so its sender joined this run): a worker admitted into the running
  // job may send before the WORKER_CHANGE announcing it arrives here. By
  // sender, with the arrival time; dispatched when it is announced, dropped
  // after EMBER_MISSING_APP_TIMEOUT_MS; at most kMaxHeldFromUnknown.
  static constexpr size_t kMaxHeldFromUnknown = 10000;
  std::map<int, std::vector<std::pair<int64_t, Message>>> from_unknown_
      GUARDED_BY(mu_);
  size_t from_unknown_count_ GUARDED_BY(mu_) = 0;
  size_t before_table_bytes_ GUARDED_BY(mu_) = 0;
  std::function<void()> exit_callback_ GUARDED_BY(mu_);
  int64_t last_scheduler_echo_ms_ GUARDED_BY(mu_) = 0;
  // When the node last logged that it waits for a silent scheduler; -1:
  // it is not waiting.
  int64_t scheduler_silent_logged_ms_ GUARDED_BY(mu_) = -1;
  // Beats sent since the scheduler last echoed; from 2 on, the node
  // re-registers instead of beating.
  int beats_unanswered_ GUARDED_BY(mu_) = 0;
  // Logical server id -> (ring epoch, the servers holding a whole copy of
  // its data): as the scheduler last echoed them, and as this node reported
  // them (REPLICA_READY). A REJOIN carries both, so that a restarted
  // scheduler knows the copies made since ring epoch 1.
  std::map<int, std::pair<uint64_t, std::vector<int>>> echoed_holders_
      GUARDED_BY(mu_);
  std::map<int, std::pair<uint64_t, std::vector<int>>> reported_holders_
      GUARDED_BY(mu_);
  // The run's key, which members authenticate with: made for the Scheduler
  // at construction, learnt by the others from the node table.
  std::string run_key_ GUARDED_BY(mu_);
  Key128 run_auth_ GUARDED_BY(mu_);  // run_key_'s words
  // On the scheduler: each member's process key, which this process's
  // messages to it carry (published by the Scheduler).
  std::map<int, Key128> member_keys_ GUARDED_BY(mu_);

  // The worker-change callback and its thread.
  Mutex cb_mu_;
  std::condition_variable cb_cv_;
  WorkerChangeCallback worker_callback_ GUARDED_BY(cb_mu_);
  ServerChangeCallback server_callback_ GUARDED_BY(cb_mu_);
  // A worker's change (server kNone) or a server's.
  struct WorkerChangeNote {
    int id;
    WorkerEvent event;
    int num_workers;
    ServerEvent server = ServerEvent::kNone;
    int num_servers = 0;
  };
  std::vector<WorkerChangeNote> worker_notes_ GUARDED_BY(cb_mu_);
  bool cb_stop_ GUARDED_BY(cb_mu_) = false;
  std::thread cb_thread_;

  // Heartbeat thread.
  std::thread heartbeat_thread_;
  // Used by TrimAfterFlood only (the heartbeat thread, or a test's).
  FloodTrim flood_trim_{kFloodTrimMessages};
  Mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool hb_stop_ GUARDED_BY(hb_mu_) = false;
  // A liveness check asked for (RequestLivenessCheck) before the next beat.
  bool hb_check_due_ GUARDED_BY(hb_mu_) = false;
  std::chrono::steady_clock::time_point hb_check_at_ GUARDED_BY(hb_mu_);
};

}  // namespace ps

#endif  // PS_NODE_NODE_H_
