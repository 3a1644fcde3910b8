// Ember's addition to ps-lite's API: hearing of changes of the job's
// membership (elastic workers, docs/consistency.md "Elastic workers";
// servers joining, leaving and failing over, docs/replication.md). ps-lite
// programs need not include it; ps::NumWorkers() and ps::NumServers()
// reflect the current membership either way.
#ifndef PS_MEMBERSHIP_H_
#define PS_MEMBERSHIP_H_

#include <functional>

namespace ps {

// One change of the membership, as this node heard of it.
struct MembershipChange {
  enum class Kind {
    kWorkerJoined,  // a worker joined the running job (a new or vacant rank)
    kWorkerBack,    // a worker restarted into its held rank
    kWorkerAway,    // a worker died; its rank is held for its restart
    kWorkerGone,    // a worker left, or died and is not waited for
    kServerJoined,  // a server joined: the key ring now includes it
    kServerLeft,    // a server left on request: the ring no longer has it
    kServerFailed,  // a server died and its data failed over to its heir
  };
  Kind kind = Kind::kWorkerJoined;
  int node_id = -1;     // the worker's or server's node id
  int rank = -1;        // its rank
  int num_workers = 0;  // ps::NumWorkers() after the change
  int num_servers = 0;  // ps::NumServers() after the change
};

// Registers `callback` for the process's default node (made from the
// environment if it does not exist yet): it runs after every membership
// change the node hears of from then on, one at a time and in order, on a
// thread of its own (never the thread that receives messages, never with a
// lock of the library held). Replaces the previous callback; an empty one
// removes it. Fails the process (as ps::Start does) if the node cannot be
// made from the environment.
void SetMembershipCallback(
    std::function<void(const MembershipChange& change)> callback);

}  // namespace ps

#endif  // PS_MEMBERSHIP_H_
