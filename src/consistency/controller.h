// ConsistencyController: a server's vector clock over the live workers and
// the rules of asp, ssp:s and bsp (include/ps/consistency.h) that decide when
// a push is applied and when a pull is answered.
//
// The controller never touches the store: it tells its owner, through
// callbacks, to run a request on the application's handle now, to
// acknowledge a push whose application it defers, or to fail a request.
// Not thread-safe: the owner calls it, and it calls back, on one thread (the
// server app's customer thread). Callbacks must not call back into it.
#ifndef PS_CONSISTENCY_CONTROLLER_H_
#define PS_CONSISTENCY_CONTROLLER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "node/consistency_config.h"
#include "ps/consistency.h"
#include "ps/internal/kv_request.h"
#include "util/clock.h"
#include "util/mutex.h"

namespace ps {

class ConsistencyController {
 public:
  struct Callbacks {
    // Hand the request to the application's handle; its answer goes out.
    std::function<void(const RawRequest&)> run;
    // Apply a push that was already acknowledged: the handle's answer must
    // not reach the worker again.
    std::function<void(const RawRequest&)> run_acked;
    // Answer a push now, with no values, before it is applied.
    std::function<void(const RawRequest&)> ack;
    // Answer the request with an error.
    std::function<void(const RawRequest&, const Status&)> fail;
  };

  // `workers`: the ids of the cluster's workers in rank order (rank order
  // is the order bsp applies a round in). `clock` is borrowed.
  ConsistencyController(ConsistencyConfig config, std::vector<int> workers,
                        Callbacks callbacks,
                        const Clock* clock = Clock::Real());
  ConsistencyController(const ConsistencyController&) = delete;
  ConsistencyController& operator=(const ConsistencyController&) = delete;

  const ConsistencyConfig& config() const { return config_; }

  // A push, pull or push-pull. Requests from nodes that are not workers of
  // the cluster are run at once.
  void OnRequest(RawRequest request);
  // Worker `sender` has finished every iteration before `clock`.
  void OnClock(int sender, int64_t clock);
  // bsp commits (docs/consistency.md, "A restart under bsp is exact"): a
  // push counts toward its round (and is applied) only once committed, known
  // to have reached every server its request went to. Worker `worker`'s
  // customer `customer` says every plain push of it below timestamp `below`
  // (the worker's timestamp, not a local one) is committed: those deferred
  // here are, and so is any such push that arrives later. A push-pull, and
  // a push another server forwards as committed (RawRequest::committed), is
  // committed on arrival. Returns how many deferred pushes of this server's
  // own data (not copies) it committed. Nothing outside bsp.
  size_t OnCommitted(int worker, int customer, int64_t below);
  // `worker` is dead or has left: stop waiting for it, drop what it left
  // pending, and go on with the others.
  void OnWorkerFailed(int worker, const Status& status);

  // Elastic workers (docs/consistency.md, "Elastic workers").
  // `worker` joined the running job, as a new worker or into a rank no
  // longer waited for: it takes part from the clock after the newest a
  // live worker is in (under asp and ssp as under bsp), and JoinClock
  // answers that clock. Ids above every known worker's are added (ranks
  // grow); others must be known. Nothing for a worker live and not away
  // (it joined already: its clock query came first).
  void OnWorkerJoined(int worker);
  // `worker` died and its rank is held for its restart: under ssp and bsp
  // the others wait for it as for a slow worker (its clock stays, its
  // pushes not yet applied stay); its waiting pulls are dropped (nobody
  // takes their answers). Under asp it is dropped (OnWorkerFailed).
  void OnWorkerAway(int worker, const Status& status);
  // `worker`, away, was restarted into its rank: it resumes at its clock
  // here (JoinClock). Under bsp, its pushes that its first incarnation
  // made here already are recognised and acknowledged without being
  // applied again: pushes at a clock below its clock here, and at its
  // clock the first n pushes to each key, n being how many the first
  // incarnation made. Its first incarnation's deferred pushes that are not
  // committed are dropped first (they never counted): their redone pushes
  // are applied. A worker not live is taken as joined; one live and
  // not away is back already (its clock query came first): nothing.
  void OnWorkerBack(int worker);
  // A worker's clock query: the clock it starts at here, and whether it
  // resumes (true: back) or starts afresh (joined, or any other worker).
  // Only a worker that joined asks: a query from one away or not live
  // here (it came before the scheduler's notice) takes it back, or in,
  // first; the notice then changes nothing.
  std::pair<int64_t, bool> JoinClock(int worker);
  // The node is failing: answer every waiting request with `status`.
  void OnFailAll(const Status& status);

  // One line for each of the (at most `max`) pulls held longer than
  // `older_than_ms` and due a line (util/wait_log.h: at 1, 2, 4, ... 64
  // such intervals, then every 64), saying what each waits for and on
  // whom, e.g. "pull
  // from worker 0 (id 9) at clock 7 has waited 5 s for worker 2 (id 13) at
  // clock 6"; a last line counts the rest.
  std::vector<std::string> DescribeLongWaits(int64_t older_than_ms,
                                             size_t max = 5) const;

  // bsp: the pushes acknowledged but not yet applied, in the order they
  // will be applied (copies of them go to a server that is to hold this
  // server's data, docs/replication.md).
  std::vector<RawRequest> DeferredPushes() const;

  // bsp, on the server that copies its data to another (docs/replication.md,
  // "Restoring copies"): the push counts (which round each worker's pushes
  // of a key at a clock are in) of the keys `in_range` selects, of the
  // pushes applied so far: the deferred ones, which travel as copies of
  // their own and are counted again on arrival, left out. Encoded: the
  // number of workers (32 bits), then per (clock, key): clock (64), key
  // (64) and a count (32) per worker in rank order.
  std::string AppliedCounts(const std::function<bool(Key)>& in_range) const;

  // bsp, on the server that receives such a copy, before the copied state:
  // drops the deferred pushes `replaced` selects (the copy's state holds
  // them, or they arrive again as copies) and replaces the push counts of
  // the keys `in_range` selects with `counts` (AppliedCounts of the other
  // server). `counts` are network bytes: a malformed one changes nothing.
  // Returns the number of pushes dropped.
  StatusOr<size_t> ReplaceCopiedData(
      const std::function<bool(const RawRequest&)>& replaced,
      const std::function<bool(Key)>& in_range, const char* counts,
      size_t size);

  // bsp, on a server that hands keys over to another, which takes them
  // (docs/replication.md, "Joining" and "Leaving"): takes what this
  // controller holds of the keys `moved` selects, for the pushes `whose`
  // selects (whose data they are), out of it:
  //   counts: AppliedCounts(moved), for the taker's ReplaceCopiedData;
  //   pushes: the parts of the deferred pushes that hold such keys (the
  //     rest of each push stays here, in its round), in the order they
  //     would have been applied; they are acknowledged already and no
  //     longer wait here;
  //   pulls: the waiting pulls that hold such keys (not the pull halves of
  //     push-pulls, which stay: their push halves were not acknowledged),
  //     no longer held here: the caller answers them.
  // The push counts of those keys go too.
  struct HandedOver {
    std::string counts;
    std::vector<RawRequest> pushes;
    std::vector<RawRequest> pulls;
  };
  HandedOver HandOver(const std::function<bool(const RawRequest&)>& whose,
                      const std::function<bool(Key)>& moved);

  // Thread-safe.
  ConsistencyStats stats() const;

 private:
  struct PendingPush {
    RawRequest request;
    int worker = 0;    // index into workers_
    uint64_t seq = 0;  // arrival order
    // Round of every key: the worker's earlier pushes to that key at the
    // same clock. The request's round is the largest.
    std::vector<uint32_t> rounds;
    uint32_t round = 0;
  };
  struct PendingPull {
    RawRequest request;
    int worker = 0;
    int64_t arrived_ms = 0;
    bool push_pull = false;  // the pull half of a push-pull (bsp)
  };

  int WorkerIndex(int id) const;
  // Whether a push of restarted worker `w` was made here by its first
  // incarnation (OnWorkerBack); counts it toward the redo. Before Tick.
  bool RedonePush(int w, const RawRequest& request);
  int64_t MinLiveClock() const;
  void Tick(int worker, int64_t clock);
  // The deferred pushes not committed yet (their rounds do not count), each
  // with whether its keys are sorted.
  using Uncommitted = std::vector<std::pair<const PendingPush*, bool>>;
  bool PushReady(const PendingPush& p, const Uncommitted& uncommitted) const;
  // The worker's timestamp of a push (a replicated one runs under a local
  // one).
  static int64_t WorkerTs(const RawRequest& r) {
    return r.timestamp >= 0 ? r.timestamp : r.origin_timestamp;
  }
  // Drops worker `w`'s deferred pushes that are not committed, and takes
  // them out of the push counts. Returns how many.
  size_t DropUncommitted(int w);
  bool PullReady(const PendingPull& p) const;
  bool HasPendingPush(int worker, const SArray<Key>& keys) const;
  void ApplyReadyPushes();
  void AnswerReadyPulls();
  void Answer(PendingPull& p, bool waited);
  void Progress();

  // Immutable after construction.
  const ConsistencyConfig config_;
  const Callbacks cb_;
  const Clock* const clock_;

  // Grows when a worker of a new rank joins (OnWorkerJoined).
  std::vector<int> workers_;
  std::unordered_map<int, int> index_;  // worker id -> rank
  std::vector<bool> live_;
  // Dead, with its rank held for its restart (OnWorkerAway); live_ too.
  std::vector<bool> away_;
  std::vector<int64_t> clocks_;
  // bsp, a restarted worker (OnWorkerBack): the clock it resumed at here
  // (-1: none), and its pushes per key at that clock so far.
  std::vector<int64_t> redo_clock_;
  std::vector<std::unordered_map<Key, uint32_t>> redo_counts_;
  // bsp commits: per worker and customer, the timestamp every plain push
  // below which is committed (OnCommitted). Reset with a new incarnation.
  std::vector<std::unordered_map<int, int64_t>> pushed_below_;
  int live_count_ = 0;
  uint64_t next_seq_ = 0;
  // bsp: deferred pushes, sorted by (clock, round, worker rank, arrival).
  std::vector<PendingPush> pushes_;
  // bsp: pushes per (clock, key, worker) so far, for rounds; clocks every
  // live worker has passed are pruned.
  std::map<int64_t, std::unordered_map<Key, std::vector<uint32_t>>> counts_;
  std::deque<PendingPull> pulls_;
  Status failed_;  // Set by OnFailAll.

  mutable Mutex stats_mu_;
  ConsistencyStats stats_ GUARDED_BY(stats_mu_);
};

}  // namespace ps

#endif  // PS_CONSISTENCY_CONTROLLER_H_
