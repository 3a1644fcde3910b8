#include "util/thread_policy.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <thread>

namespace ps {
namespace {

int PolicyOfThisThread() {
  int policy = -1;
  sched_param param{};
  EXPECT_EQ(pthread_getschedparam(pthread_self(), &policy, &param), 0);
  return policy;
}

// Each test runs its threads in a fresh std::thread, so that no policy it
// sets outlives it, and sets the process's message policy back to normal.
class ThreadPolicyTest : public ::testing::Test {
 protected:
  void TearDown() override { SetMessageThreadPolicy(ThreadPolicy::kNormal); }
};

TEST_F(ThreadPolicyTest, ParsesItsTwoNamesAndNothingElse) {
  EXPECT_EQ(ParseThreadPolicy("batch").value(), ThreadPolicy::kBatch);
  EXPECT_EQ(ParseThreadPolicy("normal").value(), ThreadPolicy::kNormal);
  for (const char* bad : {"", "Batch", "idle", "fifo", "batch "}) {
    StatusOr<ThreadPolicy> p = ParseThreadPolicy(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), Status::Code::kInvalidArgument) << bad;
    }
  }
  EXPECT_STREQ(ThreadPolicyName(ThreadPolicy::kBatch), "batch");
  EXPECT_STREQ(ThreadPolicyName(ThreadPolicy::kNormal), "normal");
}

TEST_F(ThreadPolicyTest, BatchPutsAnOrdinaryThreadUnderSchedBatch) {
  SetMessageThreadPolicy(ThreadPolicy::kBatch);
  std::thread([] {
    ASSERT_EQ(PolicyOfThisThread(), SCHED_OTHER);
    EXPECT_TRUE(ApplyMessageThreadPolicy());
    EXPECT_EQ(PolicyOfThisThread(), SCHED_BATCH);
  }).join();
}

TEST_F(ThreadPolicyTest, NormalChangesNothing) {
  std::thread([] {
    EXPECT_TRUE(ApplyMessageThreadPolicy());
    EXPECT_EQ(PolicyOfThisThread(), SCHED_OTHER);
    ScopedMessageThreadPolicy scope;
    EXPECT_EQ(PolicyOfThisThread(), SCHED_OTHER);
  }).join();
}

TEST_F(ThreadPolicyTest, AThreadUnderAnotherPolicyIsLeftAlone) {
  SetMessageThreadPolicy(ThreadPolicy::kBatch);
  std::thread([] {
    // Any thread may lower itself to SCHED_IDLE.
    sched_param param{};
    ASSERT_EQ(pthread_setschedparam(pthread_self(), SCHED_IDLE, &param), 0);
    EXPECT_FALSE(ApplyMessageThreadPolicy());
    EXPECT_EQ(PolicyOfThisThread(), SCHED_IDLE);
    {
      ScopedMessageThreadPolicy scope;
      EXPECT_EQ(PolicyOfThisThread(), SCHED_IDLE);
    }
    EXPECT_EQ(PolicyOfThisThread(), SCHED_IDLE);
  }).join();
}

TEST_F(ThreadPolicyTest, ThreadsStartedInTheScopeInheritItAndTheCallerIsBack) {
  SetMessageThreadPolicy(ThreadPolicy::kBatch);
  std::thread([] {
    int child_policy = -1;
    {
      ScopedMessageThreadPolicy scope;
      EXPECT_EQ(PolicyOfThisThread(), SCHED_BATCH);
      std::thread([&child_policy] {
        child_policy = PolicyOfThisThread();
      }).join();
    }
    EXPECT_EQ(child_policy, SCHED_BATCH);
    EXPECT_EQ(PolicyOfThisThread(), SCHED_OTHER);
  }).join();
}

}  // namespace
}  // namespace ps
