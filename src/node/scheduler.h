// Scheduler: the scheduler's role in a cluster (docs/protocol.md):
// rendezvous and rank assignment, the membership table and key ring it
// publishes, barrier counting, heartbeats, failure detection and notices,
// and the GET /status document.
//
// A Node whose role is scheduler creates one and hands it the control
// messages addressed to the scheduler: JOIN, BARRIER requests, HEARTBEAT
// beats and LEAVE (the node has checked their proof of membership; a join
// carries the cluster token instead, which the Scheduler checks). The
// Scheduler keeps its own view of the cluster under its own mutex and
// reaches the node it serves only through SchedulerHost:
//
//  - Sending: through SchedulerHost::SendControl, only to other processes,
//    every message carrying the recipient's process key (a refused join:
//    the joining process's key). It connects the members (and, for the
//    moment of a refusal, a refused node) on the node's Van. Nothing it
//    sends goes to its own node.
//  - Publishing: the membership of an epoch (every node's entry, the key
//    ring, the members' process keys) is made public in one place,
//    PublishLocked: first to its own node (SchedulerHost::OnMembership),
//    then as NODE_TABLE to every member. The cluster's forming publishes
//    epoch 1; a later epoch (a new ring after a failure) is published the
//    same way.
//  - Events: a member declared dead or gone, and the release of a barrier
//    that one of the node's own customers waits at, reach the node through
//    SchedulerHost too; the node never learns them from messages to itself.
//
// Lock order: Scheduler::mu_ before the node's lock. The Scheduler calls
// its host with mu_ held, so the node sees publications and events in the
// order they were made; a host must not call the Scheduler while it holds
// a lock that its SchedulerHost methods take.
//
// Thread-safe. Starts no thread: the node's threads call it.
#ifndef PS_NODE_SCHEDULER_H_
#define PS_NODE_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "message/message.h"
#include "node/membership.h"
#include "node/options.h"
#include "transport/van.h"
#include "util/clock.h"
#include "util/log_limiter.h"
#include "util/mutex.h"
#include "util/secret.h"

namespace ps {

// What a Scheduler needs of the node it serves. Called with the
// Scheduler's mutex held (see the lock order above); none may call back
// into the Scheduler.
class SchedulerHost {
 public:
  // Sends a control message to another process as it is (its auth set);
  // a failure is logged, rate-limited, not returned. Takes no lock.
  virtual void SendControl(Message&& msg) = 0;
  // The scheduler's own entry (id 1, rank 0): the address its node
  // announces (the configured one until the van is bound), its
  // incarnation and its metrics port.
  virtual NodeInfo SchedulerEntry() const = 0;
  // The membership of a new epoch, before any member receives its
  // NODE_TABLE. Today: once, when the cluster forms.
  virtual void OnMembership(const Membership& membership) = 0;
  // Member `id` is dead (`status` names it and says why); every other
  // member has been sent NODE_FAILED.
  virtual void OnMemberDead(int id, const Status& status) = 0;
  // Server `id` died and its data failed over: `ring` is the new ring
  // (without it), which every member is sent next with NODE_FAILED.
  virtual void OnMemberFailedOver(int id, std::shared_ptr<const KeyRing> ring,
                                  const Status& status) = 0;
  // Member `id` has left (it sent LEAVE from Finalize).
  virtual void OnMemberLeft(int id) = 0;
  // A barrier round in which the node's customer `customer_id` took part
  // is over: OK, or why it cannot complete.
  virtual void OnBarrierReleased(int customer_id, const Status& status) = 0;
  // Worker `worker` joined, came back, is away or is gone (elastic
  // workers, docs/consistency.md); every other member is sent
  // kWorkerChange.
  virtual void OnWorkerChange(const NodeInfo& /*worker*/,
                              WorkerEvent /*event*/) {}
  // Asks for a call of Scheduler::CheckLiveness in about `delay_ms`
  // (sooner than the next heartbeat check, when that is later); a host
  // without a timer of its own may do nothing (its next check comes).
  virtual void RequestLivenessCheck(int64_t /*delay_ms*/) {}

 protected:
  ~SchedulerHost() = default;
};

// Counters of one node, for tests, /metrics and the stats line at exit.
// On the scheduler, its Scheduler counts what it drops into its node's.
struct NodeCounters {
  std::atomic<uint64_t> dropped_unknown_sender{0};
  std::atomic<uint64_t> dropped_no_customer{0};
  std::atomic<uint64_t> dropped_bad_control{0};
  // Messages without proof of membership (docs/protocol.md,
  // "Authentication"), and joins without the cluster token.
  std::atomic<uint64_t> dropped_unauthenticated{0};
  // Times the node returned freed memory to the kernel after a flood of
  // dropped messages (Node::TrimAfterFlood).
  std::atomic<uint64_t> flood_trims{0};
  // The count of dropped messages (all reasons) at the last trim.
  std::atomic<uint64_t> dropped_at_last_trim{0};
};

class Scheduler {
 public:
  // `run_key` is the run's key, made by the node (the node's Start fails
  // if it is empty). `van`, `clock`, `counters` and `host` are borrowed and
  // must outlive the Scheduler; `van` is the scheduler node's, started by
  // the node, and the Scheduler only connects and disconnects peers on it.
  Scheduler(const Options& options, std::string run_key, Van* van,
            const Clock* clock, NodeCounters* counters, SchedulerHost* host);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The run's key, which members authenticate with (docs/protocol.md).
  const std::string& run_key() const { return run_key_; }

  // Waits until the cluster has formed, for at most the start timeout.
  // OK once it has; otherwise refuses every node that joined (an ABORT
  // naming what is missing), gives up for good and fails with
  // kDeadlineExceeded, or with the reason it gave up before.
  [[nodiscard]] Status WaitFormed() EXCLUDES(mu_);

  // Control messages to the scheduler (docs/protocol.md). Malformed or
  // unexpected ones are counted in the node's counters and dropped.
  void HandleJoin(const Message& msg) EXCLUDES(mu_);
  // Also the scheduler node's own barrier requests (sender 1).
  void HandleBarrierRequest(const Message& msg) EXCLUDES(mu_);
  // A member's beat: noted, and echoed.
  void HandleHeartbeat(const Message& msg) EXCLUDES(mu_);
  void HandleLeave(const Message& msg) EXCLUDES(mu_);
  // A server made a whole copy of its data on msg.meta.holder under ring
  // epoch msg.meta.holder_epoch: the holder counts again (holders_).
  void HandleReplicaReady(const Message& msg) EXCLUDES(mu_);
  // A server that joined the running cluster has received the state of its
  // ranges: the join is over, and another may begin.
  // Also the leaving server's: it has handed its ranges over and every
  // new owner has acknowledged them; it has left (docs/replication.md,
  // "Leaving").
  void HandleHandoverDone(const Message& msg) EXCLUDES(mu_);
  // A member's re-registration (docs/replication.md, "Scheduler restart"):
  // its entry, its view of the live members, its ring and the barrier it
  // waits in. A restarted scheduler (EMBER_SCHEDULER_RESTART=1) rebuilds
  // the membership from the first one and takes a later ring from any;
  // every scheduler records the member's process key (a second process
  // claiming a known member's id or address is refused), counts its
  // barrier, and echoes it like a beat.
  void HandleRejoin(const Message& msg) EXCLUDES(mu_);
  // A server asks to leave the running cluster (docs/replication.md,
  // "Leaving"): refused with the reason (a LEAVE_REQUEST answer, logged;
  // the job is untouched) if it is the last server, another membership
  // change is under way, or EMBER_REPLICAS copies could not be kept;
  // otherwise its ranges go to the other servers (KeyRing::RemoveServer)
  // under the next ring epoch, which PublishLocked sends every member.
  void HandleLeaveRequest(const Message& msg) EXCLUDES(mu_);

  // Declares dead every process that has not beaten for
  // EMBER_HEARTBEAT_TIMEOUT_MS, and every process whose connection closed
  // and refused to reconnect EMBER_DISCONNECT_GRACE_MS ago or more without
  // a beat or LEAVE since (OnPeerEvent). The node's heartbeat thread calls
  // it.
  void CheckLiveness() EXCLUDES(mu_);
  // The scheduler did not run for about `paused_ms` (Node::ExcusePause):
  // every member's last heartbeat, and every suspect's failed reconnect,
  // counts as that much later.
  void ExcusePause(int64_t paused_ms) EXCLUDES(mu_);
  // What the van learned about its connection to a member (the scheduler's
  // DEALER to it; docs/replication.md, "Detection"). A close followed by a
  // failed reconnect makes the member a suspect: without a heartbeat or a
  // LEAVE from it within EMBER_DISCONNECT_GRACE_MS of the failed
  // reconnect, CheckLiveness declares it dead (with a grace of 0, at
  // once). A close alone, or a reconnect that succeeds, declares nothing.
  void OnPeerEvent(const PeerEvent& event) EXCLUDES(mu_);
  // Logs every barrier round that has waited for `interval_ms` or more
  // (util/wait_log.h says how often), naming whom it waits for.
  void WatchWaits(int64_t interval_ms) EXCLUDES(mu_);

  // The job is finishing (the scheduler's final barrier has passed): the
  // replacements whose joins are held are refused, saying so, and so is
  // every later one.
  void RefuseHeldJoins() EXCLUDES(mu_);

  // GET /status: membership, epoch, ranges and where every node serves
  // its metrics, as JSON.
  std::string StatusJson() const EXCLUDES(mu_);

 private:
  // One round of a barrier over one group.
  struct Round {
    std::map<int, int> arrived;  // id -> customer id
    // id -> the barrier_round its request carried (0: none), echoed in
    // its release.
    std::map<int, uint64_t> numbers;
    int64_t started_ms = 0;  // when the first one arrived
  };

  // Ranks and ids for the joined nodes, the table and the first ring; then
  // PublishLocked.
  void FormLocked() REQUIRES(mu_);
  // Publishes the current membership (table_, ring_): to the host, then
  // to every member that is neither dead nor gone (the table it is sent
  // lists the live nodes).
  void PublishLocked() REQUIRES(mu_);
  // A server's join after the cluster formed (docs/replication.md,
  // "Joining"): admitted with the next server rank unless another join is
  // under way; it takes its share of the ranges (KeyRing::AddServer) under
  // the next ring epoch, which PublishLocked sends every member. One that
  // `fills_vacancy` (not EMBER_JOIN=1) takes the place of a dead server
  // not yet replaced, if any (unfilled_deaths_).
  void AdmitServerLocked(const NodeInfo& node, const std::string& key,
                         bool fills_vacancy) REQUIRES(mu_);
  // A worker's join after the cluster formed (elastic workers,
  // docs/consistency.md): a claim of its rank (EMBER_WORKER_RANK, in the
  // join's rank) takes back a rank whose worker is dead or gone; otherwise
  // the lowest rank no longer waited for, or the next new one. Refused
  // (the job untouched) for a rank out of range or held by a live worker.
  void AdmitWorkerLocked(const NodeInfo& node, const std::string& key)
      REQUIRES(mu_);
  // The JOIN (or REJOIN) of server `node` at formation or from the running
  // cluster: the settings it sent become the running servers' if none are
  // known yet (a later server's that differ are logged at formation).
  void RecordServerSettingsLocked(const Message& msg, const NodeInfo& node)
      REQUIRES(mu_);
  // Why a node joining the running job cannot be admitted with the
  // settings its JOIN carries (empty: it can): DMLC_NUM_SERVER and
  // DMLC_NUM_WORKER must be the scheduler's; a server's consistency
  // setting and EMBER_REPLICAS must be the running servers'. Settings a
  // JOIN or the record lacks are not checked.
  std::string JoinSettingsMismatchLocked(const Message& msg) const
      REQUIRES(mu_);
  // Refuses the JOIN `msg` (ABORT and a log line naming the setting) if its
  // settings are not the job's (JoinSettingsMismatchLocked); true if so.
  bool RefusedForSettingsLocked(const Message& msg) REQUIRES(mu_);
  // Tells the node and every live member but the worker itself
  // (kWorkerChange) what happened to worker `id`.
  void WorkerChangeLocked(int id, WorkerEvent event) REQUIRES(mu_);
  // Whether a dead worker no longer counts (elastic workers): barriers
  // go on without it.
  bool DroppedWorkerLocked(int id) const REQUIRES(mu_);
  // The live member (neither dead nor gone) at `node`'s address, and with
  // its customer id too if `same_customer`; Meta::kEmpty if none.
  int LiveMemberAtLocked(const NodeInfo& node, bool same_customer) const
      REQUIRES(mu_);
  // The leaving server's hand-over is acknowledged: it is a member no
  // more (left_), and another membership change may begin.
  void LeaveDoneLocked() REQUIRES(mu_);
  // The replacements whose joins are held (EMBER_JOIN=replace): the first
  // is admitted once a server slot is vacant and no membership change is
  // under way; each is refused once it has waited start_timeout_ms, or
  // when the run ends. One that asks again (join_ask_ms) but has not for
  // the heartbeat timeout (or 3 of its periods, if longer) is taken for
  // dead and dropped first, so a replacement that died while held never
  // takes a share of the ranges; one silent for more than 3 of its periods
  // is admitted only when it asks again.
  void ServeHeldJoinsLocked(int64_t now) REQUIRES(mu_);
  // Refuses a join: an ABORT with `reason`, authenticated with the
  // joining process's key.
  void RejectLocked(const NodeInfo& node, const std::string& key,
                    const std::string& reason) REQUIRES(mu_);
  // Counts `sender`'s (logical node `customer`'s) arrival at a barrier over
  // `group`, numbered `number` (0: unnumbered); a number already counted
  // is a copy and is dropped.
  void CountBarrierLocked(int sender, int customer, int group, uint64_t number)
      REQUIRES(mu_);
  // Scheduler restart: the membership reported by the first member that
  // re-registers (its live nodes and `ring`) becomes this scheduler's, as
  // if it had formed the cluster.
  void AdoptReportedLocked(const std::vector<NodeInfo>& nodes,
                           std::shared_ptr<const KeyRing> ring) REQUIRES(mu_);
  // A member reported a later ring than this scheduler's (the scheduler
  // died while it announced it): nodes it lists are added, servers
  // missing from it are dead (they failed over), and the members that
  // re-registered with an older ring are brought up to it.
  void AdoptLaterRingLocked(const std::vector<NodeInfo>& nodes,
                            std::shared_ptr<const KeyRing> ring) REQUIRES(mu_);
  // Brings member `id`, which re-registered with the ring of
  // reported_epoch_[id] over reported_servers_[id], up to ring_ with
  // CatchUpMessageLocked's message.
  void CatchUpLocked(int id) REQUIRES(mu_);
  // The message that brings member `id`, whose ring of `old_epoch` held
  // the servers `had`, up to ring_: a failover notice (with `reason`) for
  // a server gone from it that does not leave; else its node table if the
  // servers differ (a join or a leave it missed); else an empty message
  // (Control::kNone).
  Message CatchUpMessageLocked(int id, uint64_t old_epoch,
                               const std::vector<int>& had,
                               const std::string& reason) REQUIRES(mu_);
  // ring_ = `ring`, remembered in ring_servers_.
  void InstallRingLocked(std::shared_ptr<const KeyRing> ring) REQUIRES(mu_);
  // The membership as the host sees it (SchedulerHost::OnMembership),
  // without a NODE_TABLE to the members.
  void PublishToHostLocked() REQUIRES(mu_);
  void EvaluateBarriersLocked() REQUIRES(mu_);
  void ReleaseRoundLocked(int group, const Round& round, const Status& status)
      REQUIRES(mu_);
  void DeclareDeadLocked(const std::string& address, const std::string& why)
      REQUIRES(mu_);
  // The live server that holds a whole copy of dead server `id`'s data
  // (holders_), or -1 (logged: the data is lost). A holder silent for as
  // long as the dead one, or whose connection closed and refused too
  // (suspects_), is taken for dying with it.
  int HeirLocked(int id) const REQUIRES(mu_);
  // Server `id` died (already in dead_): hands its ranges to `heir` under a
  // new ring epoch, tells the node and every member (NODE_FAILED with the
  // ring; docs/replication.md); false if the ring cannot be made.
  bool FailOverLocked(int id, int heir, const std::string& why) REQUIRES(mu_);
  // NODE_FAILED{id, why} to every member still alive and to the victim;
  // with `ring`, a failover notice carrying the new ring.
  void NotifyDeathLocked(int id, const std::string& why, const RingInfo* ring)
      REQUIRES(mu_);
  // Sends to a member, with its process key unless msg.meta.auth is set
  // (SchedulerHost::SendControl).
  void SendLocked(Message&& msg) REQUIRES(mu_);
  // The echo of member `to`'s beat or re-registration; to a server on the
  // ring it lists the holders of the server's data (holders_), which the
  // server reports if it must re-register with a restarted scheduler.
  void SendEchoLocked(int to) REQUIRES(mu_);
  // A restarted scheduler counts the copy holders server `id` reports in
  // its REJOIN (under ring epoch `epoch`) that are live targets of its data
  // under the current ring.
  // `how` says where the list came from, for the log.
  void AdoptReportedHoldersLocked(int id, uint64_t epoch,
                                  const std::vector<int>& reported,
                                  const char* how = "at its re-registration")
      REQUIRES(mu_);
  // Lost messages of a membership change (docs/replication.md): what member
  // `id`'s beat says (its ring's epoch, that its hand-over is done, the
  // copies it reported): a member whose ring lags for
  // EMBER_MIGRATION_RESEND_MS is sent the current NODE_TABLE again; the rest
  // is taken as the HANDOVER_DONE and REPLICA_READY it repeats.
  void OnBeatLocked(const Message& beat) REQUIRES(mu_);
  // The joining or leaving server `id` has handed over (HANDOVER_DONE); false
  // if no join or leave of it is under way.
  bool HandoverDoneLocked(int id) REQUIRES(mu_);
  // The NODE_TABLE of the current membership and ring for member `to`.
  Message NodeTableLocked(int to) const REQUIRES(mu_);
  // Sends again the first node table of each member that has not beaten
  // since it was sent EMBER_MIGRATION_RESEND_MS ago (unconfirmed_tables_).
  void ResendFirstTablesLocked(int64_t now) REQUIRES(mu_);
  std::string MissingNodesLocked() const REQUIRES(mu_);
  std::string DescribeLocked(int id) const REQUIRES(mu_);
  // Whether to log the dropped message of `key` now; if so, *since says
  // how many of its kind went unlogged before.
  bool LogAllowed(const std::string& key, std::string* since);

  // Immutable after construction.
  const Options options_;
  Van* const van_;
  const Clock* const clock_;
  NodeCounters* const counters_;
  SchedulerHost* const host_;
  const std::string run_key_;
  // At most one line a second per kind of join dropped.
  LogLimiter drop_log_;

  mutable Mutex mu_;
  std::condition_variable cv_;  // Formed, or given up.
  // Why the scheduler gave up: the cluster did not form in time, or a
  // member died under EMBER_ON_NODE_FAILURE=abort. Later joins are refused
  // with it.
  Status abort_status_ GUARDED_BY(mu_);
  // Before the cluster forms: who joined, and with which process key.
  std::vector<NodeInfo> joins_ GUARDED_BY(mu_);
  std::map<std::string, std::string> join_keys_
      GUARDED_BY(mu_);  // address -> process key
  int next_reject_id_ GUARDED_BY(mu_) = -1000;
  // From the cluster's forming on: what PublishLocked publishes.
  bool formed_ GUARDED_BY(mu_) = false;
  std::map<int, NodeInfo> table_ GUARDED_BY(mu_);  // every node, by id
  std::vector<int> servers_ GUARDED_BY(mu_);       // ids by rank
  std::vector<int> workers_ GUARDED_BY(mu_);       // ids by rank
  std::shared_ptr<const KeyRing> ring_ GUARDED_BY(mu_);
  std::map<int, Key128> member_keys_ GUARDED_BY(mu_);  // id -> process key
  std::set<int> dead_ GUARDED_BY(mu_);
  std::set<int> left_ GUARDED_BY(mu_);
  std::map<int, std::vector<Round>> rounds_
      GUARDED_BY(mu_);  // group -> pending rounds
  std::map<std::string, int64_t> last_beat_ms_
      GUARDED_BY(mu_);  // address -> time
  // Members sent their first node table (at formation, or admitted into
  // the running job) that have not beaten since: it may have been lost, and
  // nothing else makes it come again. CheckLiveness sends it again every
  // EMBER_MIGRATION_RESEND_MS; their first beat ends that
  // (docs/replication.md, "Lost messages").
  struct FirstTable {
    int64_t sent_ms = 0;
    bool join_running = false;  // as first sent (a worker admitted late)
  };
  std::map<int, FirstTable> unconfirmed_tables_ GUARDED_BY(mu_);  // by id
  // Members whose connection closed (OnPeerEvent), by address: when it
  // closed, and when reconnecting first failed after that (-1: not yet).
  struct Suspect {
    int64_t closed_ms = 0;
    int64_t refused_ms = -1;
  };
  std::map<std::string, Suspect> suspects_ GUARDED_BY(mu_);
  // (id, group) -> the last barrier_round counted: a request with a number
  // no higher is a copy (the network delivered it twice) and is dropped.
  std::map<std::pair<int, int>, uint64_t> barrier_numbers_ GUARDED_BY(mu_);
  // Server id -> the servers that hold a whole copy of its data, in the
  // order failover prefers them (docs/replication.md).
  std::map<int, std::vector<int>> holders_ GUARDED_BY(mu_);
  // The server that joined last and has not yet reported its hand-over
  // done (HandleHandoverDone), or -1. A join meanwhile is refused.
  int joining_ GUARDED_BY(mu_) = -1;
  // Elastic workers (EMBER_WORKER_REJOIN_MS >= 0): dead workers whose
  // ranks are held for their restart, with the time the hold ends.
  std::map<int, int64_t> away_ GUARDED_BY(mu_);
  // Scheduler restart: what each member that re-registered reported (its
  // ring's epoch and servers), to bring it up to a later ring.
  std::map<int, uint64_t> reported_epoch_ GUARDED_BY(mu_);
  std::map<int, std::vector<int>> reported_servers_ GUARDED_BY(mu_);
  // The server that asked to leave and has not yet reported its hand-over
  // done, or -1. A join or another leave meanwhile is refused.
  int leaving_ GUARDED_BY(mu_) = -1;
  // Member id -> since when (clock time) its beats have shown a ring older
  // than ring_ (OnBeatLocked).
  std::map<int, int64_t> lagging_since_ GUARDED_BY(mu_);
  // The servers of the last kRingHistory rings (by epoch), so that a
  // lagging member is sent what it missed (OnBeatLocked).
  static constexpr size_t kRingHistory = 64;
  std::map<uint64_t, std::vector<int>> ring_servers_ GUARDED_BY(mu_);
  // The settings the running servers started with (consistency, as
  // ConsistencyConfig's text, and EMBER_REPLICAS), from the first server
  // JOIN or REJOIN that sent them; empty and -1 until then.
  std::string servers_consistency_ GUARDED_BY(mu_);
  int servers_replicas_ GUARDED_BY(mu_) = -1;
  // Joins of replacement servers (EMBER_JOIN=replace) that came while no
  // server slot was vacant, oldest first, with the time each is refused and
  // when it was last asked (the node asks again every ask_ms; 0: never).
  struct HeldJoin {
    // A join not asked again for this many of its periods may have died:
    // it is not admitted till it asks again, and dropped once silent for
    // the heartbeat timeout too.
    static constexpr int64_t kFreshPeriods = 3;

    // Whether it asks again but has not for kFreshPeriods of its periods.
    bool SilentLately(int64_t now) const {
      return ask_ms > 0 && now - asked_ms > kFreshPeriods * ask_ms;
    }

    NodeInfo node;
    std::string key;
    int64_t until_ms = 0;
    int64_t asked_ms = 0;
    int64_t ask_ms = 0;
  };
  std::vector<HeldJoin> held_joins_ GUARDED_BY(mu_);
  // Servers failed over whose place no server has taken since. A job grown
  // beyond DMLC_NUM_SERVER (EMBER_JOIN=1) has a vacant slot after a death
  // only by this count.
  int unfilled_deaths_ GUARDED_BY(mu_) = 0;
  // Whether a server slot is vacant: fewer live servers than
  // DMLC_NUM_SERVER, or a death not yet replaced.
  bool SlotVacantLocked() const REQUIRES(mu_);
  bool finishing_ GUARDED_BY(mu_) = false;  // RefuseHeldJoins was called
};

}  // namespace ps

#endif  // PS_NODE_SCHEDULER_H_
