// BlockingQueue<T>: a FIFO for handing work between threads, with Close().
//
// Thread-safe. Pop() blocks until an item arrives or the queue is closed;
// after Close(), Push() refuses new items and Pop() drains what is left, then
// returns false. No poison pills are needed for shutdown.
//
// The items live in a ring of slots that grows by doubling, so a push or pop
// allocates nothing once the ring is large enough (a std::deque allocates a
// block per push of an item of 512 bytes or more, as a customer's Event
// is); when the queue empties with more than kKeptSlots slots, they are
// freed, so a burst leaves no large ring behind. T must be default-
// constructible and movable; a slot keeps a popped item's moved-from state.
#ifndef PS_UTIL_BLOCKING_QUEUE_H_
#define PS_UTIL_BLOCKING_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "util/mutex.h"

namespace ps {

template <typename T>
class BlockingQueue {
 public:
  BlockingQueue() = default;
  BlockingQueue(const BlockingQueue&) = delete;
  BlockingQueue& operator=(const BlockingQueue&) = delete;

  // Returns false (and drops `item`) if the queue is closed.
  bool Push(T item) {
    {
      MutexLock lock(&mu_);
      if (closed_) return false;
      if (count_ == slots_.size()) Grow();
      slots_[(head_ + count_) % slots_.size()] = std::move(item);
      ++count_;
    }
    cv_.notify_one();
    return true;
  }

  // Blocks for the next item; false once the queue is closed and empty.
  bool Pop(T* item) {
    MutexLock lock(&mu_);
    cv_.wait(lock.native(),
             [this]() REQUIRES(mu_) { return closed_ || count_ > 0; });
    if (count_ == 0) return false;
    TakeFrontLocked(item);
    return true;
  }

  // Non-blocking; false if nothing is queued.
  bool TryPop(T* item) {
    MutexLock lock(&mu_);
    if (count_ == 0) return false;
    TakeFrontLocked(item);
    return true;
  }

  void Close() {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool closed() const {
    MutexLock lock(&mu_);
    return closed_;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return count_;
  }

 private:
  static constexpr size_t kKeptSlots = 64;

  void TakeFrontLocked(T* item) REQUIRES(mu_) {
    *item = std::move(slots_[head_]);
    head_ = (head_ + 1) % slots_.size();
    if (--count_ == 0) {
      head_ = 0;
      if (slots_.size() > kKeptSlots) std::vector<T>().swap(slots_);
    }
  }

  // Doubles the ring (at least 8 slots), the items first in their order.
  void Grow() REQUIRES(mu_) {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < count_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    }
    slots_.swap(bigger);
    head_ = 0;
  }

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<T> slots_ GUARDED_BY(mu_);
  size_t head_ GUARDED_BY(mu_) = 0;  // The oldest item's slot.
  size_t count_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // PS_UTIL_BLOCKING_QUEUE_H_
