#include "node/request_tracker.h"

#include <algorithm>
#include <chrono>

#include "ps/internal/timestamp.h"
#include "util/mutex.h"

namespace ps {

RequestTracker::RequestTracker(int64_t first)
    : first_timestamp_(first < 0 ? 0 : first),
      next_timestamp_(first < 0 ? 0 : first) {}

bool RequestTracker::StartAt(int64_t next) {
  MutexLock lock(&mu_);
  if (next < 0 || next_timestamp_ != first_timestamp_) return false;
  first_timestamp_ = next_timestamp_ = next;
  return true;
}

int64_t RequestTracker::NextTimestamp() const {
  MutexLock lock(&mu_);
  return next_timestamp_;
}

int64_t RequestTracker::NewRequest() {
  MutexLock lock(&mu_);
  const int64_t ts = next_timestamp_++;
  Entry& e = open_[ts];
  e.opened = std::chrono::steady_clock::now();
  return ts;
}

void RequestTracker::Expect(int64_t timestamp, std::vector<int> peers) {
  MutexLock lock(&mu_);
  auto it = open_.find(timestamp);
  if (it == open_.end()) return;  // Already failed.
  it->second.expected = true;
  it->second.peers = std::move(peers);
  if (!it->second.peers.empty()) return;
  CompleteLocked(timestamp, Status::OK());
  NotifyAndUnlock(&lock);
}

int64_t RequestTracker::Resolve(int api) const {
  MutexLock lock(&mu_);
  const int64_t ts = ResolveApiTimestamp(api, next_timestamp_ - 1);
  return ts < first_timestamp_ ? -1 : ts;
}

bool RequestTracker::Expecting(int64_t timestamp, int peer) const {
  MutexLock lock(&mu_);
  auto it = open_.find(timestamp);
  if (it == open_.end()) return false;
  const auto& p = it->second.peers;
  return std::find(p.begin(), p.end(), peer) != p.end();
}

int RequestTracker::Outstanding(int64_t timestamp) const {
  MutexLock lock(&mu_);
  auto it = open_.find(timestamp);
  return it == open_.end() ? 0 : static_cast<int>(it->second.peers.size());
}

bool RequestTracker::OnResponse(int64_t timestamp, int peer,
                                const Status& status) {
  MutexLock lock(&mu_);
  auto it = open_.find(timestamp);
  if (it == open_.end()) return false;
  auto& peers = it->second.peers;
  auto p = std::find(peers.begin(), peers.end(), peer);
  if (p == peers.end()) return false;
  peers.erase(p);
  if (status.ok() && !(peers.empty() && it->second.expected)) return false;
  CompleteLocked(timestamp, status);
  NotifyAndUnlock(&lock);
  return true;
}

void RequestTracker::Fail(int64_t timestamp, const Status& status) {
  MutexLock lock(&mu_);
  if (!open_.count(timestamp)) return;
  CompleteLocked(timestamp, status);
  NotifyAndUnlock(&lock);
}

std::vector<int64_t> RequestTracker::OnPeerFailed(int peer,
                                                  const Status& status) {
  MutexLock lock(&mu_);
  std::vector<int64_t> failed = OwedByLocked(peer);
  for (int64_t ts : failed) CompleteLocked(ts, status);
  if (failed.empty()) return failed;
  NotifyAndUnlock(&lock);
  return failed;
}

std::vector<int64_t> RequestTracker::FailAll(const Status& status) {
  MutexLock lock(&mu_);
  std::vector<int64_t> failed;
  for (const auto& entry : open_) failed.push_back(entry.first);
  for (int64_t ts : failed) CompleteLocked(ts, status);
  if (failed.empty()) return failed;
  NotifyAndUnlock(&lock);
  return failed;
}

void RequestTracker::CompleteLocked(int64_t timestamp, const Status& status) {
  open_.erase(timestamp);
  if (waker_ != nullptr && !waker_fired_ &&
      (waker_for_ < 0 || waker_for_ == timestamp) &&
      std::this_thread::get_id() != waker_thread_) {
    waker_fired_ = true;
    wake_now_ = true;
  }
  if (!status.ok()) {
    failed_[timestamp] = status;
    while (failed_.size() > kMaxRememberedFailures) {
      forgotten_up_to_ = std::max(forgotten_up_to_, failed_.begin()->first);
      failed_.erase(failed_.begin());
    }
  }
}

void RequestTracker::NotifyAndUnlock(MutexLock* lock) {
  WakeFd* waker = wake_now_ ? waker_ : nullptr;
  wake_now_ = false;
  lock->Unlock();
  cv_.notify_all();
  if (waker != nullptr) waker->Signal();
}

bool RequestTracker::SetWaker(WakeFd* waker, int64_t awaited) {
  MutexLock lock(&mu_);
  if (waker_ != nullptr) return false;
  if (awaited >= 0 && !open_.count(awaited)) return false;
  waker_ = waker;
  waker_for_ = awaited;
  waker_thread_ = std::this_thread::get_id();
  waker_fired_ = false;
  return true;
}

bool RequestTracker::ClearWaker() {
  MutexLock lock(&mu_);
  waker_ = nullptr;
  return waker_fired_;
}

std::vector<RequestTracker::LongWait> RequestTracker::LongWaits(
    int64_t older_than_ms, size_t max, size_t* total) const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<LongWait> waits;
  *total = 0;
  MutexLock lock(&mu_);
  // NewRequest stamps `opened` under mu_ as it takes the next timestamp,
  // so the oldest requests come first and the first one younger than
  // `older_than_ms` ends the scan: a check every few milliseconds
  // (EMBER_REQUEST_TIMEOUT_MS) costs the old requests, not every open one.
  for (const auto& entry : open_) {
    const int64_t waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            now - entry.second.opened)
            .count();
    if (waited < older_than_ms) break;
    if (++*total > max) continue;
    waits.push_back(LongWait{entry.first, waited, entry.second.expected,
                             entry.second.peers});
  }
  return waits;
}

std::vector<int> RequestTracker::Owed(int64_t timestamp) const {
  MutexLock lock(&mu_);
  auto it = open_.find(timestamp);
  return it == open_.end() ? std::vector<int>() : it->second.peers;
}

Status RequestTracker::Wait(int64_t timestamp, int64_t timeout_ms) {
  MutexLock lock(&mu_);
  if (timestamp < first_timestamp_ || timestamp >= next_timestamp_) {
    return Status::InvalidArgument("no request with timestamp " +
                                   std::to_string(timestamp));
  }
  auto done = [&]() REQUIRES(mu_) { return open_.count(timestamp) == 0; };
  if (timeout_ms < 0) {
    cv_.wait(lock.native(), done);
  } else if (!cv_.wait_for(lock.native(), std::chrono::milliseconds(timeout_ms),
                           done)) {
    return Status::DeadlineExceeded(
        "request " + std::to_string(timestamp) + " still waits for " +
        std::to_string(open_[timestamp].peers.size()) + " responses after " +
        std::to_string(timeout_ms) + " ms");
  }
  auto it = failed_.find(timestamp);
  if (it != failed_.end()) return it->second;
  if (timestamp <= forgotten_up_to_) {
    return Status::Aborted(
        "the outcome of request " + std::to_string(timestamp) +
        " is no longer known: more than " +
        std::to_string(kMaxRememberedFailures) +
        " later requests failed before anyone waited for it");
  }
  return Status::OK();
}

std::vector<int64_t> RequestTracker::OwedBy(int peer) const {
  MutexLock lock(&mu_);
  return OwedByLocked(peer);
}

std::vector<int64_t> RequestTracker::OwedByLocked(int peer) const {
  std::vector<int64_t> out;
  for (const auto& e : open_) {
    const auto& peers = e.second.peers;
    if (std::find(peers.begin(), peers.end(), peer) != peers.end()) {
      out.push_back(e.first);
    }
  }
  return out;
}

int64_t RequestTracker::OldestOpen() const {
  MutexLock lock(&mu_);
  return open_.empty() ? next_timestamp_ : open_.begin()->first;
}

bool RequestTracker::IsOpen(int64_t timestamp) const {
  MutexLock lock(&mu_);
  return open_.count(timestamp) > 0;
}

size_t RequestTracker::open_requests() const {
  MutexLock lock(&mu_);
  return open_.size();
}

}  // namespace ps
