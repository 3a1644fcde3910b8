// Consistency modes of a KVServer: how pushes and pulls of different workers
// are ordered against each other. One mechanism, a vector of worker clocks
// on every server, parameterised by a staleness bound:
//
//   asp      pushes are applied on arrival; pulls are answered at once.
//   ssp:s    pushes are applied on arrival; a pull from a worker at clock c
//            is answered once every live worker's clock is at least c - s.
//   bsp      pushes are acknowledged on arrival but applied only when their
//            round is complete, all together, in worker-rank order; a pull at
//            clock c is answered once every live worker has finished
//            iteration c - 1 and the rounds of the puller's own pushes to
//            those keys in this iteration are complete. Runs are bitwise
//            reproducible whatever the timing and the number of servers.
//
// A worker's clock counts the iterations it has finished:
// KVWorker::Clock() ends one. A program that never calls Clock() stays at
// clock 0; under bsp the k-th push of every worker to a key then forms one
// round (MXNet's dist_sync), and a pull waits for the rounds of its
// worker's earlier pushes. docs/consistency.md has the details.
//
// The mode comes from EMBER_CONSISTENCY (asp, ssp, bsp; default asp) and
// EMBER_STALENESS (ssp only), or KVServer::SetConsistency("ssp:2").
#ifndef PS_CONSISTENCY_H_
#define PS_CONSISTENCY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ps {

// What one server's controller saw, for logs and tests.
struct ConsistencyStats {
  uint64_t pushes = 0;           // push requests from workers
  uint64_t pushes_deferred = 0;  // acknowledged first, applied later (bsp)
  uint64_t pushes_dropped = 0;   // deferred pushes of workers that died
  // Pushes of a restarted worker that its first incarnation had made here
  // already (bsp; acknowledged, not applied again).
  uint64_t pushes_redone = 0;
  uint64_t pulls = 0;         // pull requests answered
  uint64_t pulls_waited = 0;  // ... that were not answerable on arrival
  uint64_t pulls_failed = 0;  // ... answered with an error instead
  double wait_ms_total = 0;   // summed over pulls that waited
  double wait_ms_max = 0;
  // Staleness of an answered pull: the requester's clock minus the slowest
  // live worker's clock, when it was answered (0 if the requester was the
  // slowest). histogram[i] counts pulls of staleness i; the last bucket
  // counts that and more.
  std::vector<uint64_t> staleness_histogram = std::vector<uint64_t>(9, 0);
  int64_t staleness_max = 0;
  uint64_t clocks = 0;  // Clock() ticks received
  int live_workers = 0;
  int64_t min_clock = 0;  // the slowest live worker's clock

  std::string ToString() const;
};

}  // namespace ps

#endif  // PS_CONSISTENCY_H_
