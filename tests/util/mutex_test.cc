#include "util/mutex.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <thread>
#include <vector>

namespace ps {
namespace {

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Mutex mu;
  int count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++count;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(count, 40000);
}

TEST(MutexTest, TryLockFailsWhileHeldAndSucceedsAfter) {
  Mutex mu;
  {
    MutexLock lock(&mu);
    std::thread other([&] { EXPECT_FALSE(mu.TryLock()); });
    other.join();
    lock.Unlock();
    bool took = false;
    std::thread again([&] {
      if (mu.TryLock()) {
        took = true;
        mu.Unlock();
      }
    });
    again.join();
    EXPECT_TRUE(took);
    lock.Lock();  // held again; the destructor releases it
  }
  bool free_again = false;
  if (mu.TryLock()) {
    free_again = true;
    mu.Unlock();
  }
  EXPECT_TRUE(free_again);
}

TEST(MutexTest, ConditionVariablesWaitThroughNative) {
  Mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.notify_all();
  });
  {
    MutexLock lock(&mu);
    cv.wait(lock.native(), [&] { return ready; });
    EXPECT_TRUE(ready);
    EXPECT_TRUE(lock.native().owns_lock());
  }
  setter.join();
}

}  // namespace
}  // namespace ps
