// When to log a wait that lasts (EMBER_WAIT_LOG_INTERVAL_MS): at 1, 2, 4, 8,
// ... 64 intervals of waiting, then every 64 intervals. A wait that is part
// of a normal run (a server at the final barrier while the workers train for
// hours) is then reported a few times an hour, not every 5 s, and one that
// has just begun to last is reported at once.
//
// Thread safety: a pure function.
#ifndef PS_UTIL_WAIT_LOG_H_
#define PS_UTIL_WAIT_LOG_H_

#include <cstdint>

namespace ps {

// Whether a wait of `waited_ms` is due a line, for a caller that looks once
// every `interval_ms`.
inline bool WaitLogDue(int64_t waited_ms, int64_t interval_ms) {
  if (interval_ms <= 0 || waited_ms < interval_ms) return false;
  const int64_t n = waited_ms / interval_ms;
  return (n & (n - 1)) == 0 || n % 64 == 0;
}

}  // namespace ps

#endif  // PS_UTIL_WAIT_LOG_H_
