// Mutex and MutexLock: std::mutex and its lock with clang's thread safety
// annotations (util/thread_annotations.h), so GUARDED_BY and REQUIRES can
// name them. Same cost as std::mutex: every call is inline.
//
//   Mutex mu_;
//   std::condition_variable cv_;
//   bool ready_ GUARDED_BY(mu_) = false;
//   ...
//   MutexLock lock(&mu_);
//   cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return ready_; });
//
// Thread safety: as std::mutex.
#ifndef PS_UTIL_MUTEX_H_
#define PS_UTIL_MUTEX_H_

#include <mutex>

#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ps {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds the lock (where it cannot see
  // so itself); no run-time check.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction, or between Unlock() and
// Lock(). native() is the std::unique_lock for std::condition_variable,
// whose waits release and retake the lock as usual.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace ps

#endif  // PS_UTIL_MUTEX_H_
