#include "util/thread_policy.h"

#include <glog/logging.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstring>

namespace ps {

namespace {

std::atomic<ThreadPolicy> message_policy{ThreadPolicy::kNormal};
std::atomic<bool> refusal_logged{false};

int CurrentPolicy() {
  int policy = 0;
  sched_param param{};
  if (pthread_getschedparam(pthread_self(), &policy, &param) != 0) return -1;
  return policy;
}

// Sets the calling thread's policy (priority 0, as SCHED_OTHER and
// SCHED_BATCH require); logs the first refusal of the process.
bool SetPolicy(int policy) {
  sched_param param{};
  const int rc = pthread_setschedparam(pthread_self(), policy, &param);
  if (rc == 0) return true;
  if (!refusal_logged.exchange(true)) {
    LOG(WARNING) << "cannot put Ember's message threads under "
                 << (policy == SCHED_BATCH ? "SCHED_BATCH" : "SCHED_OTHER")
                 << " (EMBER_THREAD_POLICY): " << std::strerror(rc)
                 << "; they keep the process's policy";
  }
  return false;
}

}  // namespace

StatusOr<ThreadPolicy> ParseThreadPolicy(const std::string& name) {
  if (name == "normal") return ThreadPolicy::kNormal;
  if (name == "batch") return ThreadPolicy::kBatch;
  return Status::InvalidArgument("unknown thread policy \"" + name +
                                 "\" (expected normal or batch)");
}

const char* ThreadPolicyName(ThreadPolicy policy) {
  return policy == ThreadPolicy::kBatch ? "batch" : "normal";
}

void SetMessageThreadPolicy(ThreadPolicy policy) {
  message_policy.store(policy, std::memory_order_relaxed);
}

ThreadPolicy MessageThreadPolicy() {
  return message_policy.load(std::memory_order_relaxed);
}

bool ApplyMessageThreadPolicy() {
  const int want =
      MessageThreadPolicy() == ThreadPolicy::kBatch ? SCHED_BATCH : SCHED_OTHER;
  const int now = CurrentPolicy();
  if (now == want) return true;
  if (now != SCHED_OTHER) return false;  // Real-time or set by the operator.
  return SetPolicy(want);
}

ScopedMessageThreadPolicy::ScopedMessageThreadPolicy() {
  if (MessageThreadPolicy() != ThreadPolicy::kBatch) return;
  if (CurrentPolicy() != SCHED_OTHER) return;
  changed_ = SetPolicy(SCHED_BATCH);
}

ScopedMessageThreadPolicy::~ScopedMessageThreadPolicy() {
  if (changed_) SetPolicy(SCHED_OTHER);
}

}  // namespace ps
