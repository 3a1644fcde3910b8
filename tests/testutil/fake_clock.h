// FakeClock: a Clock that moves only when a test says so.
#ifndef PS_TESTUTIL_FAKE_CLOCK_H_
#define PS_TESTUTIL_FAKE_CLOCK_H_

#include <atomic>

#include "util/clock.h"

namespace ps {

class FakeClock final : public Clock {
 public:
  int64_t NowMs() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_{1000000};
};

}  // namespace ps

#endif  // PS_TESTUTIL_FAKE_CLOCK_H_
