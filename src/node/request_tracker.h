// RequestTracker: which responses each outstanding request still waits for.
//
// A request is identified by its timestamp, a 64-bit sequence that never
// wraps (ps/internal/timestamp.h: ps-lite's API sees its low 31 bits, and
// Resolve maps those back). It completes when every expected
// peer has answered, or fails as soon as one answer is an error or one peer is
// declared dead. Completed requests are removed at once; the Status of the
// last kMaxRememberedFailures failed requests is kept, so the table never
// grows over a long run. Waiting for a request whose failure has been
// forgotten returns kAborted ("outcome no longer known"), never a false OK.
// Thread-safe.
#ifndef PS_NODE_REQUEST_TRACKER_H_
#define PS_NODE_REQUEST_TRACKER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ps/status.h"
#include "util/mutex.h"
#include "util/wake_fd.h"

namespace ps {

class RequestTracker {
 public:
  static constexpr size_t kMaxRememberedFailures = 4096;

  // The first request gets timestamp `first` (>= 0; tests start near the
  // 2^31 boundary of the API's int).
  explicit RequestTracker(int64_t first = 0);
  RequestTracker(const RequestTracker&) = delete;
  RequestTracker& operator=(const RequestTracker&) = delete;

  // The next request gets timestamp `next` (>= 0); only before the first
  // request (false, and nothing changes, after it). A node starts a
  // customer where the last one of its (app, customer) ids stopped
  // (Node::AddCustomer); tests start near the API's wrap.
  bool StartAt(int64_t next);
  // The timestamp the next request would get.
  int64_t NextTimestamp() const;

  // Opens a request; it completes only after Expect().
  int64_t NewRequest();

  // The request that API timestamp `api` (its low 31 bits) names: the
  // newest issued with those bits; -1 if none was.
  int64_t Resolve(int api) const;

  // Sets the peers that owe a response (one entry per response; a peer may
  // appear once). An empty list completes the request now.
  void Expect(int64_t timestamp, std::vector<int> peers);

  // True if `timestamp` is open and still waits for `peer`.
  bool Expecting(int64_t timestamp, int peer) const;

  // Responses still owed; 0 if the request is not open.
  int Outstanding(int64_t timestamp) const;
  // The peers that still owe a response (none if the request is not open).
  std::vector<int> Owed(int64_t timestamp) const;

  // Records `peer`'s answer. Returns true if this completed the request
  // (successfully or not). Unexpected answers are ignored (false).
  bool OnResponse(int64_t timestamp, int peer, const Status& status);

  // Fails the request now (a send failed, bad arguments).
  void Fail(int64_t timestamp, const Status& status);

  // Fails every open request that still waits for `peer`; returns them.
  std::vector<int64_t> OnPeerFailed(int peer, const Status& status);

  // Fails every open request (shutdown, expulsion).
  std::vector<int64_t> FailAll(const Status& status);

  // Blocks until the request completes; its Status. timeout_ms < 0 waits
  // without a deadline (failure detection still wakes it).
  Status Wait(int64_t timestamp, int64_t timeout_ms = -1);

  // For a waiter that sleeps in poll(2) rather than on this tracker (see
  // Customer::Wait): once request `awaited` completes after SetWaker, by a
  // thread other than the caller, `waker` (borrowed until ClearWaker) is
  // signalled; with `awaited` < 0, the first completion of any request
  // does. Completions of other requests signal nothing. ClearWaker ends that
  // and says whether it was signalled (then the caller must Consume it).
  // One waker at a time: SetWaker returns false (and sets nothing) while
  // another is set, and also when `awaited` >= 0 is not open.
  bool SetWaker(WakeFd* waker, int64_t awaited = -1);
  bool ClearWaker();

  // Open requests older than `older_than_ms`, oldest first, at most `max`
  // of them; *total counts them all.
  struct LongWait {
    int64_t timestamp = 0;
    int64_t waited_ms = 0;
    bool expected = false;   // false: not sent yet
    std::vector<int> peers;  // still owed
  };
  std::vector<LongWait> LongWaits(int64_t older_than_ms, size_t max,
                                  size_t* total) const;

  // The open requests that still wait for `peer`, oldest first.
  std::vector<int64_t> OwedBy(int peer) const;
  // The oldest open request's timestamp; with none open, the next one to
  // be issued. Every request below it is complete.
  int64_t OldestOpen() const;

  bool IsOpen(int64_t timestamp) const;
  size_t open_requests() const;

 private:
  struct Entry {
    std::vector<int> peers;  // Still owed.
    bool expected = false;   // Expect() was called.
    std::chrono::steady_clock::time_point opened;
  };
  // Closes the request; the caller then calls NotifyAndUnlock (a waiter
  // woken under the lock would only block on it again).
  void CompleteLocked(int64_t timestamp, const Status& status) REQUIRES(mu_);
  // OwedBy, under mu_.
  std::vector<int64_t> OwedByLocked(int peer) const REQUIRES(mu_);
  // Not analysed: clang cannot see that lock->Unlock() releases mu_; its
  // callers are checked against RELEASE(mu_).
  void NotifyAndUnlock(MutexLock* lock) RELEASE(mu_) NO_THREAD_SAFETY_ANALYSIS;

  mutable Mutex mu_;
  std::condition_variable cv_;
  int64_t first_timestamp_ GUARDED_BY(mu_) = 0;  // The first issued.
  int64_t next_timestamp_ GUARDED_BY(mu_) = 0;
  std::map<int64_t, Entry> open_ GUARDED_BY(mu_);
  std::map<int64_t, Status> failed_ GUARDED_BY(mu_);
  // Requests at or below this timestamp may have failed and been forgotten.
  int64_t forgotten_up_to_ GUARDED_BY(mu_) = -1;
  // The waker (SetWaker).
  WakeFd* waker_ GUARDED_BY(mu_) = nullptr;
  std::thread::id waker_thread_ GUARDED_BY(mu_);
  bool waker_fired_ GUARDED_BY(mu_) = false;
  int64_t waker_for_ GUARDED_BY(mu_) = -1;  // The request awaited; < 0: any.
  bool wake_now_ GUARDED_BY(mu_) =
      false;  // Set by CompleteLocked for NotifyAndUnlock.
};

}  // namespace ps

#endif  // PS_NODE_REQUEST_TRACKER_H_
