// BlockingQueue<T>: a FIFO for handing work between threads, with Close().
//
// Thread-safe. Pop() blocks until an item arrives or the queue is closed;
// after Close(), Push() refuses new items and Pop() drains what is left, then
// returns false. No poison pills are needed for shutdown.
#ifndef PS_UTIL_BLOCKING_QUEUE_H_
#define PS_UTIL_BLOCKING_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

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
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }

  // Blocks for the next item; false once the queue is closed and empty.
  bool Pop(T* item) {
    MutexLock lock(&mu_);
    cv_.wait(lock.native(),
             [this]() REQUIRES(mu_) { return closed_ || !items_.empty(); });
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  // Non-blocking; false if nothing is queued.
  bool TryPop(T* item) {
    MutexLock lock(&mu_);
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
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
    return items_.size();
  }

 private:
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // PS_UTIL_BLOCKING_QUEUE_H_
