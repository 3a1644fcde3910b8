// The slicer: which server gets which part of a sorted key batch.
//
// Under range placement a sorted batch is cut at the ring's range boundaries
// by binary search into contiguous segments, O(segments * log n) with no
// per-key work but the sortedness check; the caller sends each segment as a
// zero-copy view of its arrays. Under spread placement every key is looked
// up on its own (Fmix64, then the range) and the plan lists each key's
// server instead.
//
// Keys must be sorted and unique: anything else is refused with
// InvalidArgument naming the first offending key, never placed silently
// (ps-lite's slicer misplaces such keys without a word).
//
// Thread safety: SliceKeys is a pure function of its arguments.
#ifndef PS_PARTITION_SLICER_H_
#define PS_PARTITION_SLICER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "partition/key_ring.h"
#include "ps/status.h"

namespace ps {

// A contiguous run of a batch's keys that goes to one server.
struct KeySegment {
  size_t begin = 0;  // index of the first key
  size_t end = 0;    // one past the last key
  int server = 0;    // server index in the ring
};

struct SlicePlan {
  // Range placement: the non-empty segments, in key order (a server may
  // have several when it owns several ranges).
  std::vector<KeySegment> segments;
  // Spread placement (per_key): the server index of every key.
  bool per_key = false;
  std::vector<uint16_t> owner;
  // Keys per server index (num_servers() entries).
  std::vector<size_t> counts;
  // Segments per server index (range placement only).
  std::vector<uint32_t> segments_of;
};

// Checks keys[0..n) are sorted and unique and fills *plan. Reuses the
// plan's vectors.
Status SliceKeys(const KeyRing& ring, const uint64_t* keys, size_t n,
                 SlicePlan* plan);

// The error for keys[i] not above keys[i - 1].
Status UnsortedKeys(const uint64_t* keys, size_t i);

}  // namespace ps

#endif  // PS_PARTITION_SLICER_H_
