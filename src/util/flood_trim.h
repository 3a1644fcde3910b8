// When to give the kernel back the memory a flood of garbage left behind.
//
// A node drops what it cannot decode or authenticate, but ZeroMQ has
// allocated each such message before the node saw it, and a flood that
// arrives faster than the node drops it is held meanwhile. The freed heap
// then stays in malloc's cache for reuse (EMBER_MALLOC_KEEP_MB keeps up to
// 256 MiB of it on purpose, for large messages), so without a trim a node's
// resident memory stays at the flood's peak. FloodTrim says when a flood
// has ended: at least `min_messages` were dropped since the last trim and
// none since the previous tick. The node's heartbeat thread asks every beat
// and then calls malloc_trim (docs/security.md, "Floods").
#ifndef PS_UTIL_FLOOD_TRIM_H_
#define PS_UTIL_FLOOD_TRIM_H_

#include <cstdint>

namespace ps {

class FloodTrim {
 public:
  explicit FloodTrim(uint64_t min_messages) : min_messages_(min_messages) {}

  // `dropped`: the count of messages dropped so far (it never decreases).
  // True once per flood, at the first tick without a new drop after at
  // least min_messages of them.
  bool Tick(uint64_t dropped) {
    const bool quiet = dropped == last_seen_;
    last_seen_ = dropped;
    if (!quiet || dropped - trimmed_at_ < min_messages_) return false;
    last_flood_ = dropped - trimmed_at_;
    trimmed_at_ = dropped;
    return true;
  }

  // Messages dropped between the last two trims (for the log line).
  uint64_t last_flood() const { return last_flood_; }

 private:
  const uint64_t min_messages_;
  uint64_t last_seen_ = 0;
  uint64_t trimmed_at_ = 0;
  uint64_t last_flood_ = 0;
};

}  // namespace ps

#endif  // PS_UTIL_FLOOD_TRIM_H_
