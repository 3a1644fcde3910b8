// ReceiveGate: guests drain on their own threads, leave when done, woken or
// stopped, never drain two at a time, and lose nothing beside the owner;
// all of it both for guests that sleep at once and for guests that spin
// (set_spin) for longer than any test runs, so that every exit is taken
// from the spin.
#include "transport/receive_gate.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/wake_fd.h"

namespace ps {
namespace {

// A source: a queue of ints and an eventfd written after every push, as
// InProcVan's inbox is.
class Source {
 public:
  Source() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~Source() { close(fd_); }
  int fd() const { return fd_; }

  void Push(int v) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(v);
    }
    uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), 8);
  }

  // The gate's drain: records every item and the thread that took it.
  void Drain() {
    EXPECT_FALSE(draining_.exchange(true)) << "two drains at once";
    uint64_t count;
    ssize_t n = read(fd_, &count, sizeof(count));
    (void)n;
    std::lock_guard<std::mutex> lock(mu_);
    while (!items_.empty()) {
      taken_.push_back(items_.front());
      takers_.push_back(std::this_thread::get_id());
      items_.pop_front();
    }
    draining_ = false;
    cv_.notify_all();
  }

  // Waits until `n` were taken, giving up after 20 s: false if fewer were
  // taken by then.
  bool WaitTaken(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20),
                        [&] { return taken_.size() >= n; });
  }

  size_t taken() {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_.size();
  }
  std::vector<int> taken_items() {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_;
  }
  std::vector<std::thread::id> takers() {
    std::lock_guard<std::mutex> lock(mu_);
    return takers_;
  }

 private:
  const int fd_;
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> items_;                // Guarded by mu_.
  std::vector<int> taken_;               // Guarded by mu_.
  std::vector<std::thread::id> takers_;  // Guarded by mu_.
};

// The parameter is the gate's spin, in microseconds.
class ReceiveGateTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(wake_.ok());
    ASSERT_TRUE(gate_.Init(source_.fd(), [this] { source_.Drain(); }).ok());
    gate_.set_spin(std::chrono::microseconds(GetParam()));
  }

  Source source_;
  WakeFd wake_;
  ReceiveGate gate_;
};

// Without an owner thread only the guest receives: everything it takes is
// taken on its own thread, and it leaves once done() holds.
TEST_P(ReceiveGateTest, AGuestDrainsOnItsOwnThreadUntilDone) {
  std::thread producer([this] {
    for (int i = 0; i < 100; ++i) source_.Push(i);
  });
  ReceiveGate::Result r =
      gate_.Visit(wake_.fd(), [this] { return source_.taken() == 100; });
  producer.join();
  EXPECT_EQ(r, ReceiveGate::Result::kDone);
  std::vector<int> taken = source_.taken_items();
  ASSERT_EQ(taken.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(taken[i], i);
  for (auto id : source_.takers()) EXPECT_EQ(id, std::this_thread::get_id());
}

// done() is read after the first drain, before any wait.
TEST_P(ReceiveGateTest, WhatIsAlreadyThereIsDrainedBeforeDoneIsRead) {
  source_.Push(7);
  EXPECT_EQ(gate_.Visit(wake_.fd(), [this] { return source_.taken() == 1; }),
            ReceiveGate::Result::kDone);
}

TEST_P(ReceiveGateTest, TheWakeDescriptorEndsAVisitAndIsLeftForTheCaller) {
  std::thread waker([this] { wake_.Signal(); });
  EXPECT_EQ(gate_.Visit(wake_.fd(), [] { return false; }),
            ReceiveGate::Result::kWoken);
  waker.join();
  wake_.Consume();  // The count is still there: this does not block.
}

TEST_P(ReceiveGateTest, StopEndsEveryVisitAndWaitsForTheGuestsToLeave) {
  std::atomic<int> left{0};
  std::vector<std::thread> guests;
  std::vector<ReceiveGate::Result> results(2);
  for (int g = 0; g < 2; ++g) {
    guests.emplace_back([&, g] {
      WakeFd wake;
      results[g] = gate_.Visit(wake.fd(), [] { return false; });
      left++;
    });
  }
  gate_.Stop();
  for (auto& t : guests) t.join();
  EXPECT_EQ(left.load(), 2);
  for (auto r : results) EXPECT_EQ(r, ReceiveGate::Result::kStopped);
  EXPECT_EQ(gate_.Visit(wake_.fd(), [] { return true; }),
            ReceiveGate::Result::kStopped);
}

// The handler runs under the gate: waiting in a gate from there would
// deadlock (this gate) or order two vans' locks (another), so it is refused.
TEST_P(ReceiveGateTest, AVisitFromInsideADrainIsRefused) {
  ReceiveGate other;
  Source other_source;
  ASSERT_TRUE(other.Init(other_source.fd(), [] {}).ok());
  std::vector<ReceiveGate::Result> inner;
  ReceiveGate nested;
  ASSERT_TRUE(nested
                  .Init(source_.fd(),
                        [&] {
                          inner.push_back(
                              nested.Visit(wake_.fd(), [] { return true; }));
                          inner.push_back(
                              other.Visit(wake_.fd(), [] { return true; }));
                        })
                  .ok());
  EXPECT_EQ(nested.Visit(wake_.fd(), [] { return true; }),
            ReceiveGate::Result::kDone);
  EXPECT_EQ(inner,
            (std::vector<ReceiveGate::Result>{ReceiveGate::Result::kBusy,
                                              ReceiveGate::Result::kBusy}));
}

// The owner's thread and two guests wait on one source while a producer
// pushes: every item is taken once, in order, one drain at a time. A guest
// whose done() became true by another thread's drain is woken through its
// wake descriptor, as Customer::Wait's tracker does.
TEST_P(ReceiveGateTest, OwnerAndGuestsTogetherLoseNothing) {
  constexpr size_t kItems = 20000;
  std::thread owner([this] { gate_.RunOwner(); });
  WakeFd wakes[2];
  std::vector<std::thread> guests;
  for (WakeFd& wake : wakes) {
    ASSERT_TRUE(wake.ok());
    guests.emplace_back([this, &wake] {
      auto done = [this] { return source_.taken() == kItems; };
      while (true) {
        ReceiveGate::Result r = gate_.Visit(wake.fd(), done);
        if (r == ReceiveGate::Result::kDone) break;
        ASSERT_EQ(r, ReceiveGate::Result::kWoken);
        wake.Consume();
        if (done()) break;
      }
    });
  }
  for (size_t i = 0; i < kItems; ++i) source_.Push(static_cast<int>(i));
  source_.WaitTaken(kItems);
  for (WakeFd& wake : wakes) wake.Signal();
  for (auto& t : guests) t.join();
  gate_.Stop();
  owner.join();
  std::vector<int> taken = source_.taken_items();
  ASSERT_EQ(taken.size(), kItems);
  for (size_t i = 0; i < kItems; ++i) ASSERT_EQ(taken[i], static_cast<int>(i));
}

// A guest that is nearly always in the gate and often takes something keeps
// the owner off the source; once the guest stays without its visits ending,
// the owner goes back to the source although the guest is still there.
TEST_P(ReceiveGateTest,
       AGuestAlwaysThereKeepsTheOwnerOffTheSourceWhileItTakes) {
  std::thread owner([this] { gate_.RunOwner(); });
  std::atomic<bool> stay{false};  // The guest's visits never end once set.
  std::atomic<bool> quit{false};
  std::thread guest([&] {
    size_t want = 1;  // A visit ends when this many were taken.
    while (!quit) {
      ReceiveGate::Result r = gate_.Visit(
          wake_.fd(), [&] { return !stay && source_.taken() >= want; });
      if (r == ReceiveGate::Result::kWoken) wake_.Consume();
      if (r == ReceiveGate::Result::kStopped) return;
      if (!stay) want = source_.taken() + 1;
    }
  });
  // Whoever takes each item, the guest's visit ends on it and it comes
  // straight back: push one at a time until the owner parks.
  int pushed = 0;
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!gate_.owner_parking() && std::chrono::steady_clock::now() < give_up) {
    if (source_.taken() == static_cast<size_t>(pushed)) source_.Push(pushed++);
    std::this_thread::yield();
  }
  EXPECT_TRUE(gate_.owner_parking()) << "the owner never left the source";
  // Now the guest stays, and no visit ends: the owner must come back.
  stay = true;
  while (gate_.owner_parking() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_FALSE(gate_.owner_parking()) << "the owner stayed off the source";
  quit = true;
  wake_.Signal();
  guest.join();
  gate_.Stop();
  owner.join();
  EXPECT_EQ(source_.taken(), static_cast<size_t>(pushed));
}

// A guest that took its message and went off to handle it does not strand
// what arrives meanwhile for others: the owner, whether or not it parked
// while the guest waited, is back on the source within a park and takes it.
TEST_P(ReceiveGateTest, WhatArrivesWhileTheGuestIsAwayIsTakenByTheOwner) {
  std::thread owner([this] { gate_.RunOwner(); });
  const std::thread::id owner_id = owner.get_id();
  std::mutex mu;
  std::condition_variable cv;
  bool handled = false;  // Guarded by mu: the guest has left and "handles".
  bool release = false;  // Guarded by mu.
  std::thread guest([&] {
    // Done if it took item 0 itself; woken if the owner took it first.
    EXPECT_NE(gate_.Visit(wake_.fd(), [this] { return source_.taken() >= 1; }),
              ReceiveGate::Result::kStopped);
    std::unique_lock<std::mutex> lock(mu);
    handled = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });  // Handling, for long.
  });
  source_.Push(0);
  // Whoever took item 0 drained the signal: if it was the owner, nothing
  // else would wake the guest (a van's dispatch wakes it through its wake
  // descriptor, as here).
  EXPECT_TRUE(source_.WaitTaken(1));
  wake_.Signal();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return handled; });
  }
  source_.Push(1);
  EXPECT_TRUE(source_.WaitTaken(2)) << "item 1 was stranded";
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  guest.join();
  gate_.Stop();
  owner.join();
  ASSERT_EQ(source_.takers().size(), 2u);
  EXPECT_EQ(source_.takers()[1], owner_id);
}

// A spinning guest runs while it waits (its thread's CPU clock advances), a
// sleeping one does not. The spinning guest is watched until it has run for
// 20 ms of CPU or 20 s have passed, then woken.
TEST(ReceiveGateSpinTest, ASpinningGuestRunsWhileItWaits) {
  Source source;
  WakeFd wake;
  ReceiveGate gate;
  ASSERT_TRUE(wake.ok());
  ASSERT_TRUE(gate.Init(source.fd(), [&] { source.Drain(); }).ok());
  gate.set_spin(std::chrono::hours(1));
  std::atomic<bool> entered{false};
  ReceiveGate::Result result = ReceiveGate::Result::kBusy;
  std::thread guest([&] {
    entered = true;
    result = gate.Visit(wake.fd(), [] { return false; });
  });
  while (!entered) std::this_thread::yield();
  clockid_t clock;
  ASSERT_EQ(pthread_getcpuclockid(guest.native_handle(), &clock), 0);
  auto cpu_ms = [&] {
    timespec t{};
    clock_gettime(clock, &t);
    return t.tv_sec * 1000.0 + t.tv_nsec / 1e6;
  };
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cpu_ms() < 20 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  const double ran_ms = cpu_ms();
  wake.Signal();
  guest.join();
  EXPECT_EQ(result, ReceiveGate::Result::kWoken);
  EXPECT_GE(ran_ms, 20) << "the guest slept instead of spinning";
}

// Waits against a 100 us budget: short (within it), long (beyond it but not
// twice, as a wake-up can make an unspun short wait) and very long (beyond
// twice).
constexpr std::chrono::microseconds kBudget(100), kShort(60), kLong(150),
    kVeryLong(250);

TEST(SpinAdvisorTest, StopsAfterMostlySpunLongWaits) {
  SpinAdvisor advisor;
  // From the top (8): four long spun waits leave it at 4, still spinning.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(advisor.ShouldSpin());
    advisor.Record(true, kLong, kBudget);
  }
  ASSERT_TRUE(advisor.ShouldSpin());
  advisor.Record(true, kLong, kBudget);
  EXPECT_FALSE(advisor.ShouldSpin());
}

TEST(SpinAdvisorTest, HalfShortHalfLongKeepsItWhereItIs) {
  SpinAdvisor advisor;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(advisor.ShouldSpin());
    advisor.Record(true, kShort, kBudget);
    ASSERT_TRUE(advisor.ShouldSpin());
    advisor.Record(true, kLong, kBudget);
  }
}

TEST(SpinAdvisorTest, UnspunWaitsCountDownOnlyWhenFarBeyondTheBudget) {
  SpinAdvisor advisor;
  for (int i = 0; i < 5; ++i) advisor.Record(true, kLong, kBudget);
  // Stopped (3). A little too long without the spin: no evidence either way.
  for (int i = 0; i < 100; ++i) advisor.Record(false, kLong, kBudget);
  advisor.Record(false, kShort, kBudget);  // 4: spinning again.
  EXPECT_TRUE(advisor.ShouldSpin());
  advisor.Record(false, kVeryLong, kBudget);  // 3.
  EXPECT_FALSE(advisor.ShouldSpin());
}

// The waits (counted from 1 after the spin stopped) that spin as probes
// while every wait takes far longer than the budget.
std::vector<int> ProbesWhileLong(SpinAdvisor* advisor, int waits) {
  std::vector<int> probes;
  for (int i = 1; i <= waits; ++i) {
    const bool spun = advisor->ShouldSpin();
    if (spun) probes.push_back(i);
    advisor->Record(spun, kVeryLong, kBudget);
  }
  return probes;
}

TEST(SpinAdvisorTest, ProbesBackOffWhileTheyMissUpToEvery256thWait) {
  SpinAdvisor advisor;
  for (int i = 0; i < 20; ++i) advisor.Record(true, kLong, kBudget);  // 0.
  // Gaps of 8, 16, 32, 64, 128, then 256 for good.
  EXPECT_EQ(ProbesWhileLong(&advisor, 1300),
            (std::vector<int>{8, 24, 56, 120, 248, 504, 760, 1016, 1272}));
}

TEST(SpinAdvisorTest, AProbeThatCatchesItsMessageBringsTheGapBackTo8) {
  SpinAdvisor advisor;
  for (int i = 0; i < 20; ++i) advisor.Record(true, kLong, kBudget);  // 0.
  ASSERT_EQ(ProbesWhileLong(&advisor, 300).size(), 5u);  // Gap now 256.
  // Short waits that did not spin count up but leave the gap as it is.
  advisor.Record(false, kShort, kBudget);  // 1.
  advisor.Record(false, kShort, kBudget);  // 2.
  int waits = 0;
  while (!advisor.ShouldSpin()) {
    advisor.Record(false, kLong, kBudget);  // No change.
    ++waits;
  }
  EXPECT_EQ(waits, 255 - 52);             // 52 waited since the last probe.
  advisor.Record(true, kShort, kBudget);  // A catch: 3, gap 8.
  waits = 0;
  while (!advisor.ShouldSpin()) {
    advisor.Record(false, kLong, kBudget);
    ++waits;
  }
  EXPECT_EQ(waits, 7);
  advisor.Record(true, kShort, kBudget);  // 4: spinning again.
  EXPECT_TRUE(advisor.ShouldSpin());
}

TEST(CpuContentionTest, ParsesTheRunnableCountOfProcLoadavg) {
  const std::string text = "0.52 0.58 0.59 3/467 12345\n";
  EXPECT_EQ(CpuContention::ParseRunnable(text.data(), text.size()), 3);
  const std::string many = "10.00 9.00 8.00 123/4567 1\n";
  EXPECT_EQ(CpuContention::ParseRunnable(many.data(), many.size()), 123);
  for (const std::string bad :
       {"", "0.52 0.58 0.59", "0.52 0.58 0.59 /467 1", "0.52 0.58 0.59 3",
        "0.52 0.58 0.59 x/467 1", "0.52 0.58 0.59 99999999999/1 1"}) {
    EXPECT_EQ(CpuContention::ParseRunnable(bad.data(), bad.size()), -1)
        << "'" << bad << "'";
  }
  // Reads only the bytes it is given.
  EXPECT_EQ(CpuContention::ParseRunnable(text.data(), 16), -1);
}

TEST(CpuContentionTest, SmoothedCountJudgesContentionAgainstTheCpus) {
  // Steady at the CPU count: not contended; one more thread than CPUs for a
  // few samples: contended; one sample alone does not tip it.
  int x16 = 2 * 16;
  x16 = CpuContention::Smooth(x16, 2);
  EXPECT_EQ(x16, 32);
  EXPECT_FALSE(CpuContention::Over(x16, 2));
  x16 = CpuContention::Smooth(x16, 3);
  EXPECT_FALSE(CpuContention::Over(x16, 2));
  for (int i = 0; i < 4; ++i) x16 = CpuContention::Smooth(x16, 4);
  EXPECT_TRUE(CpuContention::Over(x16, 2));
  for (int i = 0; i < 8; ++i) x16 = CpuContention::Smooth(x16, 1);
  EXPECT_FALSE(CpuContention::Over(x16, 2));
}

TEST(CpuContentionTest, ParsesThisMachinesProcLoadavg) {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) GTEST_SKIP() << "no /proc/loadavg on this machine";
  char buf[128];
  const size_t n = std::fread(buf, 1, sizeof(buf), f);
  std::fclose(f);
  // The reading thread itself is runnable.
  EXPECT_GE(CpuContention::ParseRunnable(buf, n), 1) << std::string(buf, n);
}

constexpr int64_t kAnHour = int64_t{3600} * 1000 * 1000;

INSTANTIATE_TEST_SUITE_P(SleepOrSpin, ReceiveGateTest,
                         ::testing::Values(int64_t{0}, kAnHour),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param == 0 ? "Sleeping" : "Spinning";
                         });

}  // namespace
}  // namespace ps
