#include "transport/receive_gate.h"

#include <glog/logging.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

ReceiveGate::~ReceiveGate() {
  Stop();
  if (stop_fd_ >= 0) close(stop_fd_);
  if (owner_wake_fd_ >= 0) close(owner_wake_fd_);
}

Status ReceiveGate::Init(int source_fd, std::function<void()> drain) {
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  owner_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0 || owner_wake_fd_ < 0) {
    Status s = Status::Internal(std::string("eventfd failed: ") +
                                std::strerror(errno));
    if (stop_fd_ >= 0) close(stop_fd_);
    if (owner_wake_fd_ >= 0) close(owner_wake_fd_);
    stop_fd_ = owner_wake_fd_ = -1;
    return s;
  }
  source_fd_ = source_fd;
  drain_ = std::move(drain);
  return Status::OK();
}

bool ReceiveGate::DrainOnce() {
  if (tls_draining) return false;
  std::lock_guard<std::mutex> lock(drain_mu_);
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
  pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {owner_wake_fd_, POLLIN, 0}};
  uint64_t seen = ~uint64_t{0};  // Visits ended when the last park began.
  bool parked = false;
  Clock::time_point began{};         // When the last park began,
  std::chrono::nanoseconds held{0};  // and guest_time_ then.
  while (true) {
    int timeout_ms = kParkMs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      owner_parked_ = false;  // Awake now, however it was woken.
      if (stopping() || guests_ == 0) {
        return parked ? Park::kParked : Park::kNoGuest;
      }
      const Clock::time_point now = Clock::now();
      const std::chrono::nanoseconds guest_time =
          guest_time_ + (now - guests_since_);
      // Guests that were there for less than half the last park leave the
      // source unwatched too long for anyone else's messages: back to it.
      if (parked && 2 * (guest_time - held) < now - began) {
        return Park::kParked;
      }
      began = now;
      held = guest_time;
      if (visits_ended_ == seen) {
        // A guest has been there all through the last park: sleep until
        // the last one leaves (it writes owner_wake_fd_).
        owner_parked_ = true;
        timeout_ms = -1;
      }
      seen = visits_ended_;
    }
    int ready = poll(fds, 2, timeout_ms);
    if (ready < 0 && errno != EINTR) {
      LOG(ERROR) << "poll failed: " << std::strerror(errno);
      return Park::kFailed;
    }
    parked = true;
    if (ready > 0 && fds[1].revents != 0) {  // Not stale from an EINTR.
      uint64_t count;
      ssize_t n = read(owner_wake_fd_, &count, sizeof(count));
      (void)n;  // EAGAIN: already consumed; nothing else can fail here.
    }
  }
}

ReceiveGate::Result ReceiveGate::Visit(int wake_fd,
                                       const std::function<bool()>& done) {
  if (tls_draining) return Result::kBusy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping() || stop_fd_ < 0) return Result::kStopped;
    if (guests_++ == 0) guests_since_ = Clock::now();
  }
  pollfd fds[3] = {
      {source_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  // One spin budget per visit: a guest that keeps seeing nothing sleeps.
  const std::chrono::microseconds spin(
      spin_us_.load(std::memory_order_relaxed));
  const bool timed = spin.count() > 0;  // Timed for the advisor.
  const bool spins = timed && tls_spin_advisor.ShouldSpin();
  const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
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
    std::lock_guard<std::mutex> lock(mu_);
    ++visits_ended_;
    if (--guests_ == 0) {
      guest_time_ += Clock::now() - guests_since_;
      cv_.notify_all();
      if (owner_parked_) {  // Nobody polls the source now: the owner must.
        owner_parked_ = false;
        uint64_t one = 1;
        ssize_t n = write(owner_wake_fd_, &one, sizeof(one));
        (void)n;  // Only fails (EAGAIN) if the counter is full: still readable.
      }
    }
  }
  return result;
}

void ReceiveGate::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_fd_ < 0) return;
  if (!stopping_.exchange(true, std::memory_order_acq_rel)) {
    uint64_t one = 1;
    ssize_t n = write(stop_fd_, &one, sizeof(one));
    (void)n;
  }
  cv_.wait(lock, [this] { return guests_ == 0; });
}

}  // namespace ps
