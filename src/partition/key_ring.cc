#include "partition/key_ring.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "message/message.h"

namespace ps {

namespace {

using u128 = unsigned __int128;

constexpr u128 kKeySpace = u128{1} << 64;

// A range being reshaped: [begin, begin + size), owned by server `owner`.
struct Piece {
  u128 begin;
  u128 size;
  int owner;
};

Status CheckIds(const std::vector<int>& server_ids) {
  if (server_ids.empty()) {
    return Status::InvalidArgument("a key ring needs at least one server");
  }
  if (server_ids.size() > KeyRing::kMaxServers) {
    return Status::InvalidArgument(
        "a key ring holds at most " + std::to_string(KeyRing::kMaxServers) +
        " servers, got " + std::to_string(server_ids.size()));
  }
  std::unordered_set<int> seen(server_ids.begin(), server_ids.end());
  if (seen.size() != server_ids.size()) {
    return Status::InvalidArgument("the server ids of a key ring repeat");
  }
  return Status::OK();
}

// The pieces of `ring`, in key order.
std::vector<Piece> PiecesOf(const KeyRing& ring) {
  std::vector<Piece> pieces;
  const size_t n = ring.num_ranges();
  pieces.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const u128 begin = ring.range_begin(i);
    const u128 end = i + 1 < n ? u128{ring.range_begin(i + 1)} : kKeySpace;
    pieces.push_back(Piece{begin, end - begin, ring.range_owner(i)});
  }
  return pieces;
}

std::string Hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// Water-filling over the servers in `order` (the fullest first when
// draining, the emptiest first when filling): the level L and the count k
// such that bringing the first k servers' shares to L moves `amount` keys
// out of them (drain) or into them (fill), with no other server past L. L is
// rounded down; the caller settles the remainder key by key.
std::pair<u128, int> WaterLevel(const std::vector<int>& order,
                                const std::vector<u128>& share, u128 amount,
                                bool drain) {
  const int n = static_cast<int>(order.size());
  u128 sum = 0;
  u128 level = 0;
  int k = 0;
  while (k < n) {
    sum += share[order[k]];
    ++k;
    if (drain && sum < amount) continue;
    level = drain ? (sum - amount) / k : (sum + amount) / k;
    if (k == n) break;
    const u128 next = share[order[k]];
    if (drain ? level >= next : level <= next) break;
  }
  return {level, k};
}

}  // namespace

StatusOr<Placement> ParsePlacement(const std::string& name) {
  if (name == "range") return Placement::kRange;
  if (name == "spread") return Placement::kSpread;
  return Status::InvalidArgument("unknown key placement '" + name +
                                 "' (range or spread)");
}

const char* PlacementName(Placement placement) {
  return placement == Placement::kSpread ? "spread" : "range";
}

StatusOr<KeyRing> KeyRing::EvenSplit(std::vector<int> server_ids,
                                     uint64_t epoch, Placement placement) {
  PS_RETURN_IF_ERROR(CheckIds(server_ids));
  const uint64_t n = server_ids.size();
  std::vector<uint64_t> begins(n);
  std::vector<int> owners(n);
  // ps-lite's Postoffice::GetServerKeyRanges(): kMaxKey / n * i.
  for (uint64_t i = 0; i < n; ++i) {
    begins[i] = UINT64_MAX / n * i;
    owners[i] = static_cast<int>(i);
  }
  return FromRanges(std::move(server_ids), begins, owners, epoch, placement);
}

StatusOr<KeyRing> KeyRing::FromRanges(std::vector<int> server_ids,
                                      const std::vector<uint64_t>& begins,
                                      const std::vector<int>& owners,
                                      uint64_t epoch, Placement placement) {
  PS_RETURN_IF_ERROR(CheckIds(server_ids));
  if (placement != Placement::kRange && placement != Placement::kSpread) {
    return Status::InvalidArgument("unknown key placement " +
                                   std::to_string(static_cast<int>(placement)));
  }
  if (begins.size() != owners.size()) {
    return Status::InvalidArgument(
        "a key ring has " + std::to_string(begins.size()) +
        " range starts and " + std::to_string(owners.size()) + " owners");
  }
  KeyRing ring;
  ring.server_ids_ = std::move(server_ids);
  ring.begins_ = begins;
  ring.owners_ = owners;
  ring.epoch_ = epoch;
  ring.placement_ = placement;
  PS_RETURN_IF_ERROR(ring.Normalize());
  return ring;
}

StatusOr<KeyRing> KeyRing::FromInfo(const RingInfo& info) {
  auto ring = FromRanges(info.server_ids, info.begins, info.owners, info.epoch,
                         static_cast<Placement>(info.placement));
  if (!ring.ok()) return ring;
  // A ring that lost servers to failover may keep a larger count than it
  // has servers left to hold copies: set_replicas caps it.
  if (info.replicas < 0 || static_cast<size_t>(info.replicas) > kMaxServers) {
    return Status::InvalidArgument(
        "a key ring of " + std::to_string(ring->num_servers()) +
        " servers with " + std::to_string(info.replicas) + " replicas");
  }
  ring->set_replicas(info.replicas);
  return ring;
}

RingInfo KeyRing::ToInfo() const {
  RingInfo info;
  info.epoch = epoch_;
  info.placement = static_cast<int>(placement_);
  info.server_ids = server_ids_;
  info.begins = begins_;
  info.owners = owners_;
  info.replicas = replicas_;
  return info;
}

Status KeyRing::Normalize() {
  if (begins_.empty() || begins_[0] != 0) {
    return Status::InvalidArgument("a key ring's ranges must start at key 0");
  }
  const int num = num_servers();
  std::vector<bool> owns(num, false);
  size_t out = 0;
  for (size_t i = 0; i < begins_.size(); ++i) {
    if (owners_[i] < 0 || owners_[i] >= num) {
      return Status::InvalidArgument(
          "range " + std::to_string(i) + " of a key ring is owned by server " +
          "index " + std::to_string(owners_[i]) + " of " + std::to_string(num));
    }
    if (i > 0 && begins_[i] <= begins_[i - 1]) {
      return Status::InvalidArgument(
          "the ranges of a key ring must rise strictly: range " +
          std::to_string(i) + " starts at " + Hex(begins_[i]) + " after " +
          Hex(begins_[i - 1]));
    }
    owns[owners_[i]] = true;
    if (out > 0 && owners_[out - 1] == owners_[i]) continue;  // merge
    begins_[out] = begins_[i];
    owners_[out] = owners_[i];
    ++out;
  }
  begins_.resize(out);
  owners_.resize(out);
  for (int s = 0; s < num; ++s) {
    if (!owns[s]) {
      return Status::InvalidArgument("server " +
                                     std::to_string(server_ids_[s]) +
                                     " owns no range of the key ring");
    }
  }
  return Status::OK();
}

StatusOr<KeyRing> KeyRing::AddServer(int server_id, uint64_t epoch) const {
  if (IndexOf(server_id) >= 0) {
    return Status::InvalidArgument("server " + std::to_string(server_id) +
                                   " is on the key ring already");
  }
  const int num = num_servers();
  const int newcomer = num;
  std::vector<u128> share(num);
  for (int s = 0; s < num; ++s) share[s] = Share(s);
  // Water-filling: the newcomer's share T comes from the k servers holding
  // the most, each brought down to one level L (so the most loaded server
  // afterwards holds as little as any choice allows).
  const u128 target = kKeySpace / (num + 1);
  std::vector<int> order(num);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return share[a] > share[b]; });
  const auto [level, k] = WaterLevel(order, share, target, /*drain=*/true);
  std::vector<u128> take(num, 0);
  u128 taken = 0;
  for (int i = 0; i < k; ++i) {
    const int s = order[i];
    take[s] = share[s] > level ? share[s] - level : 0;
    taken += take[s];
  }
  // The level was rounded down: give back the excess, one key at a time.
  for (int i = 0; taken > target && i < k; ++i) {
    if (take[order[i]] > 0) {
      --take[order[i]];
      --taken;
    }
  }
  // Each donor gives the tails of its ranges, from the last one back.
  std::vector<Piece> pieces = PiecesOf(*this);
  std::vector<Piece> added;
  for (size_t j = pieces.size(); j-- > 0;) {
    Piece& p = pieces[j];
    u128& need = take[p.owner];
    if (need == 0) continue;
    if (p.size <= need) {
      need -= p.size;
      p.owner = newcomer;
    } else {
      const u128 keep = p.size - need;
      added.push_back(Piece{p.begin + keep, need, newcomer});
      p.size = keep;
      need = 0;
    }
  }
  pieces.insert(pieces.end(), added.begin(), added.end());
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  std::vector<uint64_t> begins;
  std::vector<int> owners;
  for (const Piece& p : pieces) {
    begins.push_back(static_cast<uint64_t>(p.begin));
    owners.push_back(p.owner);
  }
  std::vector<int> ids = server_ids_;
  ids.push_back(server_id);
  return FromRanges(std::move(ids), begins, owners, epoch, placement_);
}

StatusOr<KeyRing> KeyRing::RemoveServer(int server_id, uint64_t epoch) const {
  const int leaver = IndexOf(server_id);
  if (leaver < 0) {
    return Status::InvalidArgument("server " + std::to_string(server_id) +
                                   " is not on the key ring");
  }
  const int num = num_servers();
  if (num == 1) {
    return Status::InvalidArgument("the last server cannot leave the ring");
  }
  std::vector<u128> share(num);
  for (int s = 0; s < num; ++s) share[s] = Share(s);
  const u128 freed = share[leaver];
  // Water-filling the other way: the k servers holding the least are
  // raised to one level L with the leaver's keys.
  std::vector<int> order;
  for (int s = 0; s < num; ++s) {
    if (s != leaver) order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return share[a] < share[b]; });
  const auto [level, k] = WaterLevel(order, share, freed, /*drain=*/false);
  std::vector<u128> give(num, 0);
  u128 given = 0;
  for (int i = 0; i < k; ++i) {
    const int s = order[i];
    give[s] = level > share[s] ? level - share[s] : 0;
    given += give[s];
  }
  // The level was rounded down: hand out the rest, one key at a time.
  for (int i = 0; given < freed; i = (i + 1) % k) {
    ++give[order[i]];
    ++given;
  }
  // The leaver's ranges, in key order, are cut into consecutive pieces for
  // the recipients in turn.
  std::vector<Piece> pieces;
  int next = 0;  // index into order
  for (const Piece& p : PiecesOf(*this)) {
    if (p.owner != leaver) {
      pieces.push_back(p);
      continue;
    }
    u128 begin = p.begin;
    u128 left = p.size;
    while (left > 0) {
      while (give[order[next]] == 0) ++next;
      const int to = order[next];
      const u128 part = std::min(left, give[to]);
      pieces.push_back(Piece{begin, part, to});
      give[to] -= part;
      begin += part;
      left -= part;
    }
  }
  std::vector<uint64_t> begins;
  std::vector<int> owners;
  for (const Piece& p : pieces) {
    begins.push_back(static_cast<uint64_t>(p.begin));
    owners.push_back(p.owner > leaver ? p.owner - 1 : p.owner);
  }
  std::vector<int> ids = server_ids_;
  ids.erase(ids.begin() + leaver);
  return FromRanges(std::move(ids), begins, owners, epoch, placement_);
}

size_t KeyRing::RangeAt(uint64_t position) const {
  // The last range starting at or before `position`; begins_[0] == 0.
  return std::upper_bound(begins_.begin(), begins_.end(), position) -
         begins_.begin() - 1;
}

std::vector<Range> KeyRing::RangesOf(int server_index) const {
  std::vector<Range> ranges;
  for (size_t i = 0; i < begins_.size(); ++i) {
    if (owners_[i] != server_index) continue;
    const uint64_t end = i + 1 < begins_.size() ? begins_[i + 1] : UINT64_MAX;
    ranges.emplace_back(begins_[i], end);
  }
  return ranges;
}

unsigned __int128 KeyRing::Share(int server_index) const {
  u128 total = 0;
  for (size_t i = 0; i < begins_.size(); ++i) {
    if (owners_[i] != server_index) continue;
    total += u128{range_last(i)} - begins_[i] + 1;
  }
  return total;
}

std::vector<int> KeyRing::Successors(size_t range, int n) const {
  std::vector<int> result;
  if (n <= 0 || begins_.empty()) return result;
  const size_t want = std::min(static_cast<size_t>(n), server_ids_.size());
  std::vector<bool> taken(server_ids_.size(), false);
  size_t i = range % begins_.size();
  for (size_t step = 0; step < begins_.size() && result.size() < want; ++step) {
    const int s = owners_[i];
    if (!taken[s]) {
      taken[s] = true;
      result.push_back(s);
    }
    if (++i == begins_.size()) i = 0;
  }
  return result;
}

StatusOr<KeyRing> KeyRing::FailOver(int dead_id, int heir_id,
                                    uint64_t epoch) const {
  const int dead = IndexOf(dead_id);
  const int heir = IndexOf(heir_id);
  if (dead < 0 || heir < 0 || dead == heir) {
    return Status::InvalidArgument(
        "cannot fail over server " + std::to_string(dead_id) + " to " +
        std::to_string(heir_id) + " on a ring of servers " + DebugString());
  }
  std::vector<int> owners;
  owners.reserve(owners_.size());
  for (int o : owners_) {
    const int s = o == dead ? heir : o;
    owners.push_back(s > dead ? s - 1 : s);
  }
  std::vector<int> ids = server_ids_;
  ids.erase(ids.begin() + dead);
  auto ring = FromRanges(std::move(ids), begins_, owners, epoch, placement_);
  if (ring.ok()) ring->set_replicas(replicas_);
  return ring;
}

std::vector<int> KeyRing::ReplicaTargets(int server_id) const {
  std::vector<int> targets;
  const int self = IndexOf(server_id);
  if (self < 0 || replicas_ <= 0) return targets;
  for (size_t r = 0; r < owners_.size(); ++r) {
    if (owners_[r] != self) continue;
    for (int s : Successors(r, replicas_ + 1)) {
      const int id = server_ids_[s];
      if (s != self &&
          std::find(targets.begin(), targets.end(), id) == targets.end()) {
        targets.push_back(id);
      }
    }
  }
  return targets;
}

int KeyRing::IndexOf(int server_id) const {
  for (size_t i = 0; i < server_ids_.size(); ++i) {
    if (server_ids_[i] == server_id) return static_cast<int>(i);
  }
  return -1;
}

std::string KeyRing::DebugString() const {
  std::ostringstream os;
  os << "epoch " << epoch_ << ", " << PlacementName(placement_)
     << " placement, " << begins_.size() << " ranges:";
  for (size_t i = 0; i < begins_.size(); ++i) {
    os << (i ? ", " : " ") << "[" << Hex(begins_[i]) << ", "
       << Hex(range_last(i)) << "] -> " << server_ids_[owners_[i]];
  }
  return os.str();
}

}  // namespace ps
