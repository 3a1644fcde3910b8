// KeyRing: which server owns which range of the 64-bit key space.
//
// The key space [0, 2^64) is cut into ranges, each owned by one server; read
// in key order and wrapped around past 2^64 - 1, the ranges form a ring, and
// the servers after a range's owner on it are its successors (where replicas
// go). The ring is versioned by an epoch, which the scheduler publishes with
// it: every process routes by the ring of one epoch.
//
// At start-up (EvenSplit) server i owns exactly ps-lite's
// GetServerKeyRanges()[i]: [i * floor(2^64-1 / S), (i + 1) * floor(...)),
// the last range running to the end of the key space (it also owns the key
// 2^64 - 1, which ps-lite leaves to nobody). A client that encodes a key as
// ranges[r].begin() + k therefore reaches server r, as with ps-lite.
//
// Membership changes move whole ranges, as few as balance allows: AddServer
// gives the newcomer exactly 1/(S+1) of the key space, cut from the tails of
// the ranges of the servers holding the most (water-filling, so the most
// loaded server afterwards holds as little as possible); RemoveServer hands
// only the leaver's ranges to the servers holding the least. Adjacent ranges
// of one server are merged. A server may then own several ranges.
//
// Placement: under kRange (the default, ps-lite's) a key's position on the
// ring is the key itself, so a sorted batch is cut into contiguous runs by
// binary search (see slicer.h). Under kSpread (opt-in, for programs whose
// keys are small integers or otherwise clustered) a key's position is
// Fmix64(key): keys spread evenly whatever their values, at the price of a
// per-key lookup and gather on every request.
//
// Thread safety: a KeyRing is immutable after construction; any number of
// threads may call its const methods concurrently without synchronisation.
#ifndef PS_PARTITION_KEY_RING_H_
#define PS_PARTITION_KEY_RING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/range.h"
#include "ps/status.h"
#include "util/mix.h"

namespace ps {

enum class Placement : int {
  kRange = 0,   // a key's ring position is the key (ps-lite's placement)
  kSpread = 1,  // a key's ring position is Fmix64(key)
};

// "range" or "spread"; anything else is InvalidArgument.
StatusOr<Placement> ParsePlacement(const std::string& name);
const char* PlacementName(Placement placement);

struct RingInfo;  // message/message.h: the ring as it travels

class KeyRing {
 public:
  // At most this many servers (server indices fit in uint16_t).
  static constexpr size_t kMaxServers = 65535;

  // ps-lite's even split over server_ids.size() servers: server index i
  // (server_ids[i]) owns range i. InvalidArgument if server_ids is empty,
  // has duplicates, or is longer than kMaxServers.
  static StatusOr<KeyRing> EvenSplit(std::vector<int> server_ids,
                                     uint64_t epoch,
                                     Placement placement = Placement::kRange);

  // A ring from its description (as it travels in a node table): range i
  // starts at begins[i] and is owned by server index owners[i]. Validated
  // as bytes from the network must be: begins must start at 0 and rise
  // strictly, owners must index server_ids, every server must own at least
  // one range, the ids must be distinct. Adjacent ranges of one owner are
  // merged.
  static StatusOr<KeyRing> FromRanges(std::vector<int> server_ids,
                                      const std::vector<uint64_t>& begins,
                                      const std::vector<int>& owners,
                                      uint64_t epoch, Placement placement);

  // The ring of a node table (FromRanges, then its replicas), and back.
  static StatusOr<KeyRing> FromInfo(const RingInfo& info);
  RingInfo ToInfo() const;

  // The ring after `server_id` joins, at `epoch`: the newcomer (appended as
  // the last server index) gets 1/(S+1) of the key space from the servers
  // that hold the most; nothing else moves.
  StatusOr<KeyRing> AddServer(int server_id, uint64_t epoch) const;

  // The ring after `server_id` leaves, at `epoch`: its ranges go to the
  // servers that hold the least; nothing else moves. Server indices above
  // the leaver's shift down by one.
  StatusOr<KeyRing> RemoveServer(int server_id, uint64_t epoch) const;

  KeyRing(const KeyRing&) = default;
  KeyRing& operator=(const KeyRing&) = default;
  KeyRing(KeyRing&&) = default;
  KeyRing& operator=(KeyRing&&) = default;

  // The ring position of `key` under this ring's placement.
  uint64_t PositionOf(uint64_t key) const {
    return placement_ == Placement::kSpread ? Fmix64(key) : key;
  }

  // The index of the range holding ring position `position`. O(log ranges).
  size_t RangeAt(uint64_t position) const;

  // The index into server_ids() of the server that owns `key`.
  int OwnerIndex(uint64_t key) const {
    return owners_[RangeAt(PositionOf(key))];
  }
  // The id of the server that owns `key`.
  int Owner(uint64_t key) const { return server_ids_[OwnerIndex(key)]; }

  // Range i is [range_begin(i), range_begin(i + 1)), the last one running
  // through 2^64 - 1 inclusive.
  size_t num_ranges() const { return begins_.size(); }
  uint64_t range_begin(size_t i) const { return begins_[i]; }
  // The last position of range i (inclusive).
  uint64_t range_last(size_t i) const {
    return i + 1 < begins_.size() ? begins_[i + 1] - 1 : UINT64_MAX;
  }
  int range_owner(size_t i) const { return owners_[i]; }
  const std::vector<uint64_t>& begins() const { return begins_; }
  const std::vector<int>& owners() const { return owners_; }

  // The ranges of server index `s` in key order, as ps-lite's Range
  // [begin, end); a range reaching the end of the key space ends at
  // kMaxKey (2^64 - 1, which it owns too).
  std::vector<Range> RangesOf(int server_index) const;

  // How many ring positions server index `s` owns (up to 2^64).
  unsigned __int128 Share(int server_index) const;

  // Up to `n` distinct server indices in ring order, starting with the
  // owner of range `range`: the owner first, then the owners of the ranges
  // that follow, wrapping around. Returns min(n, num_servers()) indices;
  // none if n <= 0.
  std::vector<int> Successors(size_t range, int n) const;

  // The ring after server `dead_id` failed (docs/replication.md): every
  // range it owned goes to `heir_id`, which holds a copy of all of its data;
  // nothing else moves. Server indices above the dead one's shift down.
  StatusOr<KeyRing> FailOver(int dead_id, int heir_id, uint64_t epoch) const;

  // How many further servers keep a copy of each server's data: the
  // cluster's EMBER_REPLICAS, capped at num_servers() - 1.
  int replicas() const { return replicas_; }
  // Before the ring is shared (it is immutable afterwards).
  void set_replicas(int k) {
    replicas_ = std::max(0, std::min(k, num_servers() - 1));
  }
  // The ids of the servers that keep a copy of `server_id`'s data: for each
  // of its ranges, the replicas() servers that follow it on the ring
  // (Successors), in ring order, without repeats; none if replicas() is 0
  // or the server is not on the ring.
  std::vector<int> ReplicaTargets(int server_id) const;

  // The index of `server_id` in server_ids(), or -1.
  int IndexOf(int server_id) const;

  int num_servers() const { return static_cast<int>(server_ids_.size()); }
  const std::vector<int>& server_ids() const { return server_ids_; }
  uint64_t epoch() const { return epoch_; }
  Placement placement() const { return placement_; }

  // "epoch 3, range placement, 4 ranges: [0, 2^62) -> 8, ...", for logs.
  std::string DebugString() const;

 private:
  friend class StatusOr<KeyRing>;  // holds an empty ring beside an error
  KeyRing() = default;
  // Merges adjacent ranges of one owner and checks the invariants.
  Status Normalize();

  std::vector<int> server_ids_;
  std::vector<uint64_t> begins_;  // begins_[0] == 0, strictly rising
  std::vector<int> owners_;       // server index of each range
  uint64_t epoch_ = 0;
  Placement placement_ = Placement::kRange;
  int replicas_ = 0;
};

}  // namespace ps

#endif  // PS_PARTITION_KEY_RING_H_
