// Clang's thread safety annotations, as macros that vanish for other
// compilers: the lock discipline that "Guarded by mu_" comments used to
// state, checked by clang's -Wthread-safety (a clang-15 build of CI,
// scripts/test.sh). util/mutex.h has the annotated Mutex they name.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_);
//   void BumpLocked() REQUIRES(mu_);
//   void Bump() EXCLUDES(mu_);
//
// std::mutex is not annotated in libstdc++, so members guarded this way use
// ps::Mutex. A lambda run under the lock (a condition variable's predicate)
// says so with REQUIRES: [&]() REQUIRES(mu_) { return ready_; }.
#ifndef PS_UTIL_THREAD_ANNOTATIONS_H_
#define PS_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define PS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PS_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks ("mutex").
#define CAPABILITY(x) PS_THREAD_ANNOTATION(capability(x))
// On a class: an RAII holder of a lock.
#define SCOPED_CAPABILITY PS_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only with the lock held.
#define GUARDED_BY(x) PS_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: what it points to is guarded by the lock.
#define PT_GUARDED_BY(x) PS_THREAD_ANNOTATION(pt_guarded_by(x))
// On a lock member: taken after (before) the named locks.
#define ACQUIRED_AFTER(...) PS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) PS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// On a function: the caller holds (must not hold) the locks.
#define REQUIRES(...) PS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) PS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it takes (releases) the locks and returns with them held
// (released).
#define ACQUIRE(...) PS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) PS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) \
  PS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: tells the analysis the lock is held (checked at run time).
#define ASSERT_CAPABILITY(x) PS_THREAD_ANNOTATION(assert_capability(x))
// On a function: returns a reference to the named lock.
#define RETURN_CAPABILITY(x) PS_THREAD_ANNOTATION(lock_returned(x))
// On a function: not analysed. Say why next to it.
#define NO_THREAD_SAFETY_ANALYSIS \
  PS_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // PS_UTIL_THREAD_ANNOTATIONS_H_
