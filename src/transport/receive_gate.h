// ReceiveGate: lets several threads take turns receiving from one source.
//
// A van's own receive thread waits for its socket, receives what has arrived
// and dispatches it. When the message is for an application thread that is
// asleep, that thread must then be woken: on a loaded 2-core machine each
// such hand-off costs tens of microseconds of a round trip. The gate removes
// the hand-off for a thread that would only be waiting anyway (a customer's
// thread with nothing queued, a caller in Wait): that thread waits on the
// source itself, as a guest, and the van's thread stays off the source while
// guests are there and that pays (ParkWhileGuests). Whichever thread wakes
// first takes the gate, receives everything that has arrived and dispatches it
// exactly as the van's thread would; a message the guest would handle next
// anyway is then already on the right thread. Application code never runs under
// the gate: a guest leaves the gate before it handles its message, and the
// van's own thread never runs application code at all.
//
// The source is a file descriptor that becomes readable when something may
// have arrived (it may also be readable spuriously), plus a drain function
// that receives until the source is empty. Draining to empty before every
// wait is what makes an edge-triggered descriptor (ZeroMQ's ZMQ_FD) safe
// with several waiters: whoever drains last saw the source empty. Drains are
// serialised by the gate's lock, so dispatch stays single-threaded.
//
// A guest may spin before it sleeps (set_spin): for up to that long per
// visit it polls the source without blocking, yielding the CPU between
// tries, and only then blocks; each thread spins only while its recent
// visits mostly ended within that time (SpinAdvisor). A thread that sleeps in
// poll(2) is woken by the kernel when the message arrives; on a virtual machine
// whose idle CPU has halted, that wake-up costs tens of microseconds of every
// round trip (the hypervisor must run the CPU again). A spinning guest sees the
// message without being woken. sched_yield between tries hands the CPU to any
// other runnable thread on it at once, so the spin uses only time the CPU would
// otherwise spend idle. The van's own thread never spins.
// Thread-safe.
#ifndef PS_TRANSPORT_RECEIVE_GATE_H_
#define PS_TRANSPORT_RECEIVE_GATE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "ps/status.h"
#include "util/mutex.h"

namespace ps {

// Whether more threads are runnable on the machine than it has CPUs: the
// kernel's count of runnable threads (/proc/loadavg's fourth field, which
// counts the asking thread too) sampled at most every kSampleMs by whichever
// thread asks, smoothed over the last few samples. Where /proc/loadavg
// cannot be read, never contended (the SpinAdvisor alone decides).
// Thread-safe; one per process.
//
// No thread spins while the machine's CPUs are all taken: a spinning
// thread's sched_yield does not hand its CPU to a thread queued on the other
// one, and the CPU it holds never looks idle to the scheduler, so with more
// runnable threads than CPUs (2 servers and 2 workers on 2 cores)
// every spin is time taken from a process that has work: on a 2-core EPYC
// VM, 4 servers x 4 workers of 1000-key pushes ran at 21-25 k requests/s
// spinning and 31 k not (docs/performance.md).
class CpuContention {
 public:
  static CpuContention& Get();
  // Whether the CPUs are all taken at `now`; samples if the last sample is
  // older than kSampleMs.
  bool Contended(std::chrono::steady_clock::time_point now);

  // Pure parts, for tests. The runnable count of a /proc/loadavg text
  // ("0.10 0.20 0.30 3/250 1234" gives 3), or -1 if it is malformed.
  static int ParseRunnable(const char* text, size_t size);
  // The smoothed count (fixed point, x16) after a sample.
  static int Smooth(int smoothed_x16, int runnable) {
    return smoothed_x16 - smoothed_x16 / 4 + runnable * 16 / 4;
  }
  // Whether a smoothed count means contention on `cpus` CPUs.
  static bool Over(int smoothed_x16, int cpus) {
    return smoothed_x16 > cpus * 16 + 8;
  }
  static constexpr int kSampleMs = 5;

 private:
  // Reads the run queue and updates the answer; returns it.
  bool SampleLocked(int64_t now) REQUIRES(sample_mu_);
  CpuContention();
  int fd_ = -1;
  int cpus_ = 1;
  std::atomic<int64_t> next_sample_ns_{0};
  std::atomic<int> smoothed_x16_{0};
  std::atomic<bool> contended_{false};
  Mutex sample_mu_;  // held by the one thread that samples
};

// Whether a thread's waits are short enough to be worth spinning for: a
// saturating count of its recent waits, up one for a wait that ended within
// the spin budget (a spin catches its message) and down one for a wait that
// did not (a spin only burns the CPU). Spinning is advised while the count
// is at least half its maximum, so a thread spins while most of its waits
// are short and stops when they are not: a server whose workers compute for
// milliseconds between requests, a cluster with more busy threads than
// CPUs. A wait that did not spin is longer by the very wake-up a spin saves,
// so it counts down only when it took over twice the budget. And a wait
// now and then spins against the advice (a probe), so a thread whose waits
// became short again finds out: the 8th wait after the spin stopped, and
// twice as many waits later after each probe that did not catch its
// message, up to every 256th; a spun wait within the budget brings the gap
// back to 8. The gap grows because a probe is not free in a CPU-bound
// process (4 MB pushes on 2 cores: a probe every 8th wait of the server's
// cost 16% of the throughput, far more than the probes' own CPU time; our
// guess is that a CPU with a spinning thread does not look idle to the
// scheduler, so a thread woken meanwhile queues behind a busy thread on the
// other CPU). Starts out advising a spin. Not thread-safe: one per thread.
class SpinAdvisor {
 public:
  // Whether the next wait should spin; counts the wait.
  bool ShouldSpin() {
    if (score_ >= kMax / 2) return true;
    if (++skipped_ < probe_gap_) return false;
    skipped_ = 0;
    probing_ = true;
    return true;
  }
  // How the wait ShouldSpin was asked for went: whether it spun, how long
  // it took, and the spin budget.
  void Record(bool spun, std::chrono::nanoseconds waited,
              std::chrono::nanoseconds budget) {
    if (waited <= budget) {
      score_ = std::min(score_ + 1, kMax);
      if (spun) probe_gap_ = kMinProbeGap;
    } else {
      if (spun || waited > 2 * budget) score_ = std::max(score_ - 1, 0);
      if (probing_) probe_gap_ = std::min(2 * probe_gap_, kMaxProbeGap);
    }
    probing_ = false;
  }

 private:
  static constexpr int kMax = 8;
  static constexpr unsigned kMinProbeGap = 8;
  static constexpr unsigned kMaxProbeGap = 256;
  int score_ = kMax;
  unsigned skipped_ = 0;  // Waits not spun since the last probe.
  unsigned probe_gap_ = kMinProbeGap;
  bool probing_ = false;  // The wait being recorded is a probe.
};

class ReceiveGate {
 public:
  enum class Result {
    kDone,     // done() returned true after a drain.
    kWoken,    // The guest's wake descriptor became readable (not consumed).
    kStopped,  // The gate is stopping; receive no more through it.
    kBusy,     // The calling thread is already draining this or another gate.
  };

  ReceiveGate() = default;
  ~ReceiveGate();
  ReceiveGate(const ReceiveGate&) = delete;
  ReceiveGate& operator=(const ReceiveGate&) = delete;

  // `source_fd` (borrowed) signals that the source may have something;
  // `drain` receives and dispatches everything it has now. Call once, before
  // any other method.
  [[nodiscard]] Status Init(int source_fd, std::function<void()> drain);

  // How long a visit polls without blocking before it sleeps; 0 (the
  // default) sleeps at once. May be changed at any time.
  void set_spin(std::chrono::microseconds spin) {
    spin_us_.store(spin.count(), std::memory_order_relaxed);
  }
  // Whose judgement stops the spin while the CPUs are all taken (the vans
  // pass CpuContention::Get()); null (the default) spins regardless.
  void set_contention(CpuContention* contention) {
    contention_.store(contention, std::memory_order_relaxed);
  }

  // The van's own receive loop: drains and waits until Stop(), then drains
  // once more and returns. While guests visit, the owner may stay off the
  // source (see ParkWhileGuests).
  void RunOwner();

  // A guest visit: drains, then waits (spinning first, see set_spin) on the
  // source, on `wake_fd` and on the stop signal, draining whenever the source
  // signals, until `done()` (read after every drain, by the calling thread) is
  // true, `wake_fd` is readable or the gate stops. `wake_fd` is only polled,
  // never read.
  Result Visit(int wake_fd, const std::function<bool()>& done);

  // Makes RunOwner and every visit return, and waits until no guest is left
  // (the owner's thread is the caller's to join). Idempotent.
  void Stop();

  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Whether the owner is off the source now (see ParkWhileGuests); for
  // tests and diagnostics.
  bool owner_parking() {
    MutexLock lock(&mu_);
    return parking_;
  }

 private:
  // Drains under the gate's lock; false if this thread already holds a gate.
  bool DrainOnce();

  // The owner's wait while guests visit: a guest polls the source and
  // drains it for everyone, so the owner can stay off it instead of being
  // woken by every message only to find the guest has drained it, or to
  // take the message first and hand it to the guest's thread. It parks for
  // kParkMs at a time (which bounds how long a message for a thread that is
  // not a guest waits meanwhile) and judges every window of kParkMs or more
  // afresh. It parks only while
  //  - at least kParkMinVisits visits ended in the window: a guest waiting
  //    for long (an idle server's thread) saves the owner no wake-ups, and
  //    a park costs one every kParkMs;
  //  - a guest was in the gate for at least kParkMinPresent of it, so a
  //    thread that visits now and then does not delay everyone else's
  //    messages;
  //  - and visits ended at kParkRate or more, or a guest was there for at
  //    least kParkAlwaysPresent of the window. At a lower rate with guests
  //    often away, the owner is better on the source: it takes what
  //    arrives while the guest is away handling, and parking there cost a
  //    4 MB push with the summing handle (~450 visits/s, a guest there 72%
  //    of the time) 11% (10 alternating rounds, 9 below 1): the server's
  //    app thread, woken straight by ZeroMQ's busy I/O thread, waited on
  //    the run queue for 0.57 ms per request instead of 0.25 ms. With the
  //    empty handle (~650 visits/s, a guest there 97%) parking pays: 1.13
  //    (10 rounds, 9 above 1). Against the owner on the source throughout,
  //    a sparse push went 14% faster and a 4 KB round trip 19% shorter.
  // kParkMs is 4: with 1, the owner's timer woke it as often as 4 MB
  // messages came, and the 4 MB push was 3-8% slower. Returns kNoGuest at
  // once when no guest visits or parking is not worth it, kParked once it
  // parked and then no guest is left, parking stopped being worth it or
  // the gate is stopping, kFailed if polling failed.
  enum class Park { kNoGuest, kParked, kFailed };
  Park ParkWhileGuests();
  static constexpr int kParkMs = 4;
  static constexpr uint64_t kParkMinVisits = 2;
  static constexpr double kParkMinPresent = 0.5;
  static constexpr double kParkRate = 2000;  // Visits per second.
  static constexpr double kParkAlwaysPresent = 0.9;

  int source_fd_ = -1;
  int stop_fd_ = -1;  // An eventfd, written once by Stop(), never read.
  std::function<void()> drain_;
  Mutex drain_mu_;  // The gate: held while draining.
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> spin_us_{0};
  std::atomic<CpuContention*> contention_{nullptr};

  Mutex mu_;
  std::condition_variable cv_;
  int guests_ GUARDED_BY(mu_) = 0;
  uint64_t visits_ended_ GUARDED_BY(mu_) = 0;
  // Time with a guest in the gate, up to guests_since_ (when guests_ last
  // became nonzero).
  std::chrono::nanoseconds guest_time_ GUARDED_BY(mu_){0};
  std::chrono::steady_clock::time_point guests_since_ GUARDED_BY(mu_);
  // The window over which parking is judged: since when, and visits_ended_
  // and the guests' time then; whether the last window was worth parking
  // in.
  std::chrono::steady_clock::time_point window_since_ GUARDED_BY(mu_);
  uint64_t window_visits_ GUARDED_BY(mu_) = 0;
  std::chrono::nanoseconds window_guest_time_ GUARDED_BY(mu_){0};
  bool park_worth_ GUARDED_BY(mu_) = false;
  bool parking_ GUARDED_BY(mu_) = false;  // The owner is in a park.
};

}  // namespace ps

#endif  // PS_TRANSPORT_RECEIVE_GATE_H_
