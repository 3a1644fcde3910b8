// LogLimiter: at most one log line per key (a peer, say) per interval, with
// the count of what was left out since, so a flood of bad input costs a
// bounded number of lines instead of one per message.
//
//   uint64_t left_out = 0;
//   if (limiter.Allow(peer, clock->NowMs(), &left_out)) {
//     LOG(WARNING) << "dropping message from " << peer << ": " << s
//                  << LogLimiter::Since(left_out);
//   }
//
// At most `max_keys` keys are remembered; beyond that every new key shares
// one slot, so a flood from ever-new peers is bounded too. Thread-safe.
#ifndef PS_UTIL_LOG_LIMITER_H_
#define PS_UTIL_LOG_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "util/mutex.h"

namespace ps {

class LogLimiter {
 public:
  explicit LogLimiter(int64_t interval_ms = 1000, size_t max_keys = 1024)
      : interval_ms_(interval_ms), max_keys_(max_keys) {}

  // Whether to log the event of `key` at `now_ms`. When it is, *left_out is
  // the number of that key's events not logged since its last line.
  bool Allow(const std::string& key, int64_t now_ms, uint64_t* left_out) {
    MutexLock lock(&mu_);
    auto it = slots_.find(key);
    if (it == slots_.end()) {
      const std::string& k = slots_.size() < max_keys_ ? key : kOverflow;
      it = slots_.emplace(k, Slot()).first;
    }
    Slot& slot = it->second;
    if (slot.logged && now_ms - slot.last_ms < interval_ms_) {
      ++slot.left_out;
      return false;
    }
    *left_out = slot.left_out;
    slot = Slot{true, now_ms, 0};
    return true;
  }

  // " (N more since the last line)" if N > 0, else "".
  static std::string Since(uint64_t left_out) {
    return left_out == 0
               ? std::string()
               : " (" + std::to_string(left_out) + " more since the last line)";
  }

 private:
  struct Slot {
    bool logged = false;
    int64_t last_ms = 0;
    uint64_t left_out = 0;
  };
  inline static const std::string kOverflow = "\x01(other keys)";
  const int64_t interval_ms_;
  const size_t max_keys_;
  Mutex mu_;
  std::unordered_map<std::string, Slot> slots_ GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_UTIL_LOG_LIMITER_H_
