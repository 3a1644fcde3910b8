// Clock: the time source of failure detection and deadlines, injectable so
// that unit tests control time instead of sleeping.
#ifndef PS_UTIL_CLOCK_H_
#define PS_UTIL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace ps {

// Milliseconds on a monotonic clock. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;

  // The process-wide steady clock.
  static const Clock* Real();
};

class SteadyClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

inline const Clock* Clock::Real() {
  static const SteadyClock clock;
  return &clock;
}

}  // namespace ps

#endif  // PS_UTIL_CLOCK_H_
