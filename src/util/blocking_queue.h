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
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }

  // Blocks for the next item; false once the queue is closed and empty.
  bool Pop(T* item) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return closed_ || !items_.empty(); });
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  // Non-blocking; false if nothing is queued.
  bool TryPop(T* item) {
    std::lock_guard<std::mutex> lock(mu_);
    if (items_.empty()) return false;
    *item = std::move(items_.front());
    items_.pop_front();
    return true;
  }

  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;  // Guarded by mu_.
  bool closed_ = false;  // Guarded by mu_.
};

}  // namespace ps

#endif  // PS_UTIL_BLOCKING_QUEUE_H_
