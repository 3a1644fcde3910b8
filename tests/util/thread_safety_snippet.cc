// Compiled by the thread_safety_* ctests with clang's -Wthread-safety
// -Werror: as it is it must compile; with -DEMBER_BREAK_LOCKING, which
// touches a guarded member without its lock, it must not. So the
// annotations of util/thread_annotations.h are known to be checked.
#include <condition_variable>

#include "util/mutex.h"

namespace {

class Counter {
 public:
  void Add(int n) EXCLUDES(mu_) {
    ps::MutexLock lock(&mu_);
    AddLocked(n);
    cv_.notify_all();
  }
  void WaitFor(int n) EXCLUDES(mu_) {
    ps::MutexLock lock(&mu_);
    cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return count_ >= n; });
  }
#ifdef EMBER_BREAK_LOCKING
  int Peek() const { return count_; }
#endif

 private:
  void AddLocked(int n) REQUIRES(mu_) { count_ += n; }

  mutable ps::Mutex mu_;
  std::condition_variable cv_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.Add(1);
  c.WaitFor(1);
  return 0;
}
