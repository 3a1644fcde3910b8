// KeyRing: the consistent-hash ring that maps every 64-bit key to the server
// that owns it.
//
// A key is placed on the ring at Position(key), a bijective 64-bit mix, so both
// random keys and small contiguous keys spread evenly. Each server gets
// `virtual_nodes` points whose positions depend only on (server id, replica
// index); a key belongs to the server of the first point at or after its
// position, wrapping around past 2^64-1 to the first point. Every process that
// builds a ring from the same server ids and virtual node count gets the same
// owners, whatever the order of the ids. Adding a server only moves keys to
// it; removing one only moves its own keys.
//
// The epoch is carried as metadata (the ring version the scheduler
// publishes); it does not change any position, so rings of successive epochs
// stay consistent with each other.
//
// Lookups are O(1) amortised and never allocate: the sorted points are indexed
// by a direct-mapped table over the top bits of the position, and a lookup
// scans the few points of one bucket.
//
// Thread safety: a KeyRing is immutable after construction; any number of
// threads may call its const methods concurrently without synchronisation.
#ifndef PS_PARTITION_KEY_RING_H_
#define PS_PARTITION_KEY_RING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

class KeyRing {
 public:
  // One server's share of the ring deviates from the mean by about
  // 1/sqrt(virtual_nodes) (3% here), so the most loaded of 2 to 64 servers
  // stays within 10% of the mean, and 64 servers still build in under a
  // millisecond (64K points, about 1.3 MiB).
  static constexpr int kDefaultVirtualNodes = 1024;

  // Builds the ring. `server_ids` must be non-empty, distinct and at most
  // 65535 long, and `virtual_nodes` at least 1: anything else is a bug in the
  // caller and fails a CHECK. Server index i of this ring refers to
  // server_ids[i], in the order given.
  KeyRing(std::vector<int> server_ids, int virtual_nodes, uint64_t epoch);

  // Not copyable (a ring can be megabytes; share it through a pointer to
  // const instead), but movable.
  KeyRing(const KeyRing&) = delete;
  KeyRing& operator=(const KeyRing&) = delete;
  KeyRing(KeyRing&&) = default;
  KeyRing& operator=(KeyRing&&) = default;

  // The ring position of `key` (murmur3's fmix64 finalizer, a bijection).
  // The multipliers of the murmur3 fmix64 finalizer.
  static constexpr uint64_t kMix1 = 0xff51afd7ed558ccdULL;
  static constexpr uint64_t kMix2 = 0xc4ceb9fe1a85ec53ULL;

  // Inline: it runs once per key of every request (the worker's hot path).
  static uint64_t Position(uint64_t key) {
    key ^= key >> 33;
    key *= kMix1;
    key ^= key >> 33;
    key *= kMix2;
    key ^= key >> 33;
    return key;
  }

  // The inverse of Position: the unique key whose position is `position`.
  // Useful to build keys that land at a chosen place on the ring.
  static uint64_t KeyAtPosition(uint64_t position);

  // The ring position of point `replica` of server `server_id`. Distinct
  // (server id, replica) pairs always get distinct positions.
  static uint64_t PointPosition(int server_id, int replica);

  // The index into server_ids() of the server that owns `key`.
  int OwnerIndex(uint64_t key) const {
    return points_[FirstPointAtOrAfter(Position(key))].server_index;
  }

  // The id of the server that owns `key`.
  int Owner(uint64_t key) const { return server_ids_[OwnerIndex(key)]; }

  // For each of keys[0..n): owner[i] = OwnerIndex(keys[i]) and
  // ++counts[owner[i]]. `counts` has num_servers() slots that the caller has
  // initialised (normally to zero). Borrows all three arrays for the call
  // only. O(n + num_servers()), no allocation.
  void Assign(const uint64_t* keys, size_t n, uint16_t* owner,
              size_t* counts) const;

  // Up to `n` distinct server indices in ring order, starting with the owner
  // of `key`: the owner first, then the servers of the following points that
  // have not appeared yet. Returns min(n, num_servers()) indices; none if
  // n <= 0.
  std::vector<int> Successors(uint64_t key, int n) const;

  int num_servers() const { return static_cast<int>(server_ids_.size()); }
  const std::vector<int>& server_ids() const { return server_ids_; }
  uint64_t epoch() const { return epoch_; }
  int virtual_nodes() const { return virtual_nodes_; }
  // The number of points on the ring: num_servers() * virtual_nodes().
  size_t num_points() const { return points_.size() - 1; }

 private:
  struct Point {
    uint64_t position;
    uint16_t server_index;
  };

  // The index of the first point whose position is >= `position`; the
  // sentinel (index num_points()) stands for the wrap to the first point.
  size_t FirstPointAtOrAfter(uint64_t position) const {
    size_t i = bucket_start_[position >> bucket_shift_];
    // A bucket holds about one point, so the first two steps are done
    // without branches (a mispredicted scan costs more than the lookup), and
    // the loop only runs for crowded buckets. Neither can pass the sentinel,
    // whose position 2^64-1 is never below `position`.
    i += points_[i].position < position;
    i += points_[i].position < position;
    while (points_[i].position < position) ++i;
    return i;
  }

  // Immutable after construction.
  std::vector<int> server_ids_;
  int virtual_nodes_;
  uint64_t epoch_;
  // Sorted by position, followed by a sentinel at position 2^64-1 that
  // carries the server of points_[0], so that a lookup past the last point
  // wraps around without a branch.
  std::vector<Point> points_;
  // bucket_start_[b] is the index of the first point whose position is
  // >= b << bucket_shift_ (one extra slot at the end holds num_points()).
  std::vector<uint32_t> bucket_start_;
  int bucket_shift_;
};

}  // namespace ps

#endif  // PS_PARTITION_KEY_RING_H_
