// The scheduling policy of the threads that carry Ember's messages: a van's
// receive thread, ZeroMQ's I/O threads and the customers' threads
// (EMBER_THREAD_POLICY; docs/performance.md, "Thread policy").
//
// Under Linux's default policy (SCHED_OTHER) a thread that is woken may
// preempt the thread that woke it. Every message wakes a thread: a send wakes
// ZeroMQ's I/O thread, a receive the thread waiting for it. With more
// threads than cores, the sender is then often descheduled after each of the
// messages of a request, and the request costs a context switch per message.
// Under SCHED_BATCH a woken thread waits for the running one to block or to
// use up its time slice instead, so the sender finishes its burst and the
// receiver takes it whole. Measured on 2 cores: sparse 1000-key requests
// at 1 x 1 to 4 x 4 1.06-1.16 x, 1 M-key pushes at 2 x 2 1.4 x, 4 KB round
// trips 1.07 x. The cost: on a host whose every core is busy with other
// work, a message waits for the running task's slice (a few milliseconds)
// rather than preempting it.
//
// Only Ember's own threads are changed; the application's threads keep
// their policy. A thread that is not under SCHED_OTHER (a real-time one, or
// one the operator set otherwise) is left alone, and so are its children.
#ifndef PS_UTIL_THREAD_POLICY_H_
#define PS_UTIL_THREAD_POLICY_H_

#include <string>

#include "ps/status.h"

namespace ps {

enum class ThreadPolicy { kNormal, kBatch };

// "normal" or "batch".
StatusOr<ThreadPolicy> ParseThreadPolicy(const std::string& name);
const char* ThreadPolicyName(ThreadPolicy policy);

// The policy of the process's message threads from now on (set by
// Node::StartVan from EMBER_THREAD_POLICY). Before it is set: normal.
void SetMessageThreadPolicy(ThreadPolicy policy);
ThreadPolicy MessageThreadPolicy();

// Puts the calling thread under the message-thread policy, if it runs under
// SCHED_OTHER now. Returns whether its policy is now the one asked for. A
// refusal by the system is logged once per process, as a warning.
bool ApplyMessageThreadPolicy();

// Puts the calling thread under the message-thread policy for its scope
// (when it runs under SCHED_OTHER), and back under SCHED_OTHER after it:
// threads it creates meanwhile inherit the policy (ZeroMQ's I/O threads,
// created inside zmq_socket, take no other way that cannot abort).
class ScopedMessageThreadPolicy {
 public:
  ScopedMessageThreadPolicy();
  ~ScopedMessageThreadPolicy();
  ScopedMessageThreadPolicy(const ScopedMessageThreadPolicy&) = delete;
  ScopedMessageThreadPolicy& operator=(const ScopedMessageThreadPolicy&) =
      delete;

 private:
  bool changed_ = false;
};

}  // namespace ps

#endif  // PS_UTIL_THREAD_POLICY_H_
