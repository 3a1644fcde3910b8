#include "transport/receive_gate.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/mutex.h"

namespace ps {

namespace {

// The gate this thread is draining, if any: a drain must not wait on a gate
// (its own: deadlock; another's: lock-order cycle between vans).
thread_local bool tls_draining = false;

using Clock = std::chrono::steady_clock;

// This thread's spin advice, for whichever gate it visits.
thread_local SpinAdvisor tls_spin_advisor;

// poll(2) that retries on EINTR; false on another error (logged). Until
// `spin_until` it polls without blocking, yielding the CPU between tries.
bool PollFds(pollfd* fds, nfds_t n, Clock::time_point spin_until = {}) {
  bool spinning = spin_until != Clock::time_point{};
  while (true) {
    int ready = poll(fds, n, spinning ? 0 : -1);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) {
      LOG(ERROR) << "poll failed: " << std::strerror(errno);
      return false;
    }
    if (spinning) {
      sched_yield();
      spinning = Clock::now() < spin_until;
    }
  }
}

}  // namespace

CpuContention& CpuContention::Get() {
  static CpuContention* const instance = new CpuContention();
  return *instance;
}

CpuContention::CpuContention() {
  fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = n > 0 ? static_cast<int>(n) : 1;
  smoothed_x16_.store(cpus_ * 16, std::memory_order_relaxed);
}

int CpuContention::ParseRunnable(const char* text, size_t size) {
  // Three load averages, then "runnable/total".
  size_t i = 0;
  for (int field = 0; field < 3; ++field) {
    while (i < size && text[i] != ' ') ++i;
    while (i < size && text[i] == ' ') ++i;
  }
  int runnable = 0;
  size_t digits = 0;
  for (; i < size && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    if (runnable > 100000) return -1;
    runnable = runnable * 10 + (text[i] - '0');
  }
  if (digits == 0 || i >= size || text[i] != '/') return -1;
  return runnable;
}

bool CpuContention::Contended(Clock::time_point at) {
  if (fd_ < 0) return false;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          at.time_since_epoch())
                          .count();
  if (now < next_sample_ns_.load(std::memory_order_relaxed)) {
    return contended_.load(std::memory_order_relaxed);
  }
  // One thread samples; the others take the last answer.
  if (!sample_mu_.TryLock()) return contended_.load(std::memory_order_relaxed);
  const bool over = SampleLocked(now);
  sample_mu_.Unlock();
  return over;
}

bool CpuContention::SampleLocked(int64_t now) {
  next_sample_ns_.store(now + int64_t{kSampleMs} * 1000000,
                        std::memory_order_relaxed);
  char buf[128];
  const ssize_t n = pread(fd_, buf, sizeof(buf), 0);
  const int runnable = n > 0 ? ParseRunnable(buf, static_cast<size_t>(n)) : -1;
  if (runnable < 0) return contended_.load(std::memory_order_relaxed);
  const int smoothed =
      Smooth(smoothed_x16_.load(std::memory_order_relaxed), runnable);
  smoothed_x16_.store(smoothed, std::memory_order_relaxed);
  const bool over = Over(smoothed, cpus_);
  contended_.store(over, std::memory_order_relaxed);
  return over;
}

ReceiveGate::~ReceiveGate() {
  Stop();
  if (stop_fd_ >= 0) close(stop_fd_);
}

Status ReceiveGate::Init(int source_fd, std::function<void()> drain) {
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    return Status::Internal(std::string("eventfd failed: ") +
                            std::strerror(errno));
  }
  source_fd_ = source_fd;
  drain_ = std::move(drain);
  return Status::OK();
}

bool ReceiveGate::DrainOnce() {
  if (tls_draining) return false;
  MutexLock lock(&drain_mu_);
  tls_draining = true;
  drain_();
  tls_draining = false;
  return true;
}

void ReceiveGate::RunOwner() {
  pollfd fds[2] = {{source_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (true) {
    DrainOnce();
    if (stopping()) return;
    switch (ParkWhileGuests()) {
      case Park::kNoGuest:
        break;
      case Park::kParked:
        continue;  // Guests may have left things: drain before waiting.
      case Park::kFailed:
        return;
    }
    if (!PollFds(fds, 2)) return;
  }
}

ReceiveGate::Park ReceiveGate::ParkWhileGuests() {
  pollfd stop = {stop_fd_, POLLIN, 0};
  bool parked = false;
  while (true) {
    {
      MutexLock lock(&mu_);
      parking_ = false;
      if (stopping() || guests_ == 0) {
        return parked ? Park::kParked : Park::kNoGuest;
      }
      // Whether to park is decided afresh for every window of kParkMs or
      // more, from the visits that ended in it and the share of it with a
      // guest in the gate (see ParkWhileGuests' comment in the header).
      const Clock::time_point now = Clock::now();
      const std::chrono::duration<double> window = now - window_since_;
      if (window >= std::chrono::milliseconds(kParkMs)) {
        const std::chrono::nanoseconds guest_time =
            guest_time_ + (now - guests_since_);
        const uint64_t visits = visits_ended_ - window_visits_;
        const double rate = static_cast<double>(visits) / window.count();
        const double present =
            std::chrono::duration<double>(guest_time - window_guest_time_) /
            window;
        park_worth_ = visits >= kParkMinVisits && present >= kParkMinPresent &&
                      (rate >= kParkRate || present >= kParkAlwaysPresent);
        window_since_ = now;
        window_visits_ = visits_ended_;
        window_guest_time_ = guest_time;
      }
      if (!park_worth_) return parked ? Park::kParked : Park::kNoGuest;
      parking_ = true;
    }
    if (poll(&stop, 1, kParkMs) < 0 && errno != EINTR) {
      LOG(ERROR) << "poll failed: " << std::strerror(errno);
      MutexLock lock(&mu_);
      parking_ = false;
      return Park::kFailed;
    }
    parked = true;
  }
}

ReceiveGate::Result ReceiveGate::Visit(int wake_fd,
                                       const std::function<bool()>& done) {
  if (tls_draining) return Result::kBusy;
  {
    MutexLock lock(&mu_);
    if (stopping() || stop_fd_ < 0) return Result::kStopped;
    if (guests_++ == 0) guests_since_ = Clock::now();
  }
  pollfd fds[3] = {
      {source_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  // One spin budget per visit: a guest that keeps seeing nothing sleeps.
  const std::chrono::microseconds spin(
      spin_us_.load(std::memory_order_relaxed));
  const bool timed = spin.count() > 0;  // Timed for the advisor.
  const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
  CpuContention* const contention = contention_.load(std::memory_order_relaxed);
  const bool spins = timed &&
                     (contention == nullptr || !contention->Contended(start)) &&
                     tls_spin_advisor.ShouldSpin();
  const Clock::time_point spin_until =
      spins ? start + spin : Clock::time_point{};  // Unset: no spinning.
  Result result;
  while (true) {
    DrainOnce();
    if (done()) {
      result = Result::kDone;
      break;
    }
    if (stopping() || !PollFds(fds, 3, spin_until)) {
      result = Result::kStopped;
      break;
    }
    if (fds[2].revents != 0) {
      result = Result::kWoken;
      break;
    }
  }
  if (timed && result != Result::kStopped) {
    tls_spin_advisor.Record(spins, Clock::now() - start, spin);
  }
  {
    MutexLock lock(&mu_);
    ++visits_ended_;
    if (--guests_ == 0) {
      guest_time_ += Clock::now() - guests_since_;
      cv_.notify_all();
    }
  }
  return result;
}

void ReceiveGate::Stop() {
  MutexLock lock(&mu_);
  if (stop_fd_ < 0) return;
  if (!stopping_.exchange(true, std::memory_order_acq_rel)) {
    uint64_t one = 1;
    ssize_t n = write(stop_fd_, &one, sizeof(one));
    (void)n;
  }
  cv_.wait(lock.native(), [this]() REQUIRES(mu_) { return guests_ == 0; });
}

}  // namespace ps
