// When to log a wait that lasts (EMBER_WAIT_LOG_INTERVAL_MS): at 1, 2, 4, 8,
// ... 64 intervals of waiting, then every 64 intervals. A wait that is part
// of a normal run (a server at the final barrier while the workers train for
// hours) is then reported a few times an hour, not every 5 s, and one that
// has just begun to last is reported at once.
//
// WaitLogging: a bounded wait on a condition variable that logs, every
// interval, that it is still waiting (a node waiting for its cluster), and
// may do something else periodically meanwhile (a held replacement asking
// again).
//
// Thread safety: WaitLogDue is a pure function; WaitLogging, as the
// condition variable it waits on.
#ifndef PS_UTIL_WAIT_LOG_H_
#define PS_UTIL_WAIT_LOG_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace ps {

// Whether a wait of `waited_ms` is due a line, for a caller that looks once
// every `interval_ms`.
inline bool WaitLogDue(int64_t waited_ms, int64_t interval_ms) {
  if (interval_ms <= 0 || waited_ms < interval_ms) return false;
  const int64_t n = waited_ms / interval_ms;
  return (n & (n - 1)) == 0 || n % 64 == 0;
}

// Waits on `cv` (`lock` holds its mutex) until `done()` or `timeout_ms` has
// passed, calling `log_waiting` every `log_interval_ms` meanwhile (never if
// that is 0 or less) and `every` every `every_ms` (never if that is 0 or
// less); returns done(). All three run with the lock held; `every` may
// release it and take it again.
inline bool WaitLogging(std::condition_variable* cv,
                        std::unique_lock<std::mutex>* lock, int64_t timeout_ms,
                        int64_t log_interval_ms,
                        const std::function<bool()>& done,
                        const std::function<void()>& log_waiting,
                        int64_t every_ms = 0,
                        const std::function<void()>& every = nullptr) {
  using Steady = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;
  const auto start = Steady::now();
  const auto deadline = start + Ms(timeout_ms);
  auto next_log = log_interval_ms > 0 ? start + Ms(log_interval_ms) : deadline;
  auto next_every = every_ms > 0 && every ? start + Ms(every_ms) : deadline;
  while (!done() && Steady::now() < deadline) {
    const auto next = std::min({deadline, next_log, next_every});
    if (cv->wait_until(*lock, next, done)) continue;
    if (next_log < deadline && Steady::now() >= next_log) {
      log_waiting();
      next_log = Steady::now() + Ms(log_interval_ms);
    }
    if (next_every < deadline && Steady::now() >= next_every) {
      every();
      next_every = Steady::now() + Ms(every_ms);
    }
  }
  return done();
}

}  // namespace ps

#endif  // PS_UTIL_WAIT_LOG_H_
