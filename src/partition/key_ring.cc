#include "partition/key_ring.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <utility>

namespace ps {

namespace {

// murmur3's fmix64 multipliers and their inverses modulo 2^64.
constexpr uint64_t kMix1 = KeyRing::kMix1;
constexpr uint64_t kMix2 = KeyRing::kMix2;

// Newton's iteration for the inverse of an odd number modulo 2^64: x = a is
// right in the low 3 bits, and each step doubles the number of right bits.
constexpr uint64_t InverseModPow2(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}

constexpr uint64_t kMix1Inverse = InverseModPow2(kMix1);
constexpr uint64_t kMix2Inverse = InverseModPow2(kMix2);
static_assert(kMix1 * kMix1Inverse == 1, "bad inverse");
static_assert(kMix2 * kMix2Inverse == 1, "bad inverse");

// Points use a different mixer (splitmix64's finalizer) than keys so that the
// structured inputs of points (id << 32 | replica) and small keys are not
// related by the same function.
constexpr uint64_t kPointSalt = 0x9e3779b97f4a7c15ULL;

uint64_t SplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int CeilLog2(uint64_t n) {
  int bits = 0;
  while ((uint64_t{1} << bits) < n) ++bits;
  return bits;
}

// About one bucket per point keeps the scan to a point or two, and the table
// no larger than the points themselves; the cap bounds the table at 4 MiB for
// very large rings, where the scan merely gets a little longer.
constexpr int kMinBucketBits = 8;
constexpr int kMaxBucketBits = 20;

}  // namespace

uint64_t KeyRing::KeyAtPosition(uint64_t position) {
  // x ^= x >> 33 is its own inverse because 33 >= 32.
  position ^= position >> 33;
  position *= kMix2Inverse;
  position ^= position >> 33;
  position *= kMix1Inverse;
  position ^= position >> 33;
  return position;
}

uint64_t KeyRing::PointPosition(int server_id, int replica) {
  // Injective in (server id, replica) and followed by bijections, so no two
  // points ever share a position and ties need no rule.
  const uint64_t input = (uint64_t{static_cast<uint32_t>(server_id)} << 32) |
                         static_cast<uint32_t>(replica);
  return SplitMix64(input + kPointSalt);
}

KeyRing::KeyRing(std::vector<int> server_ids, int virtual_nodes, uint64_t epoch)
    : server_ids_(std::move(server_ids)),
      virtual_nodes_(virtual_nodes),
      epoch_(epoch) {
  CHECK(!server_ids_.empty()) << "a key ring needs at least one server";
  CHECK_GE(virtual_nodes_, 1);
  CHECK_LE(server_ids_.size(), size_t{std::numeric_limits<uint16_t>::max()})
      << "server indices must fit in uint16_t";
  {
    std::unordered_set<int> seen(server_ids_.begin(), server_ids_.end());
    CHECK_EQ(seen.size(), server_ids_.size()) << "server ids must be distinct";
  }
  const uint64_t num_points =
      uint64_t{server_ids_.size()} * static_cast<uint64_t>(virtual_nodes_);
  CHECK_LT(num_points, uint64_t{std::numeric_limits<uint32_t>::max()})
      << "too many ring points";

  const int bucket_bits =
      std::clamp(CeilLog2(num_points), kMinBucketBits, kMaxBucketBits);
  bucket_shift_ = 64 - bucket_bits;
  const size_t num_buckets = size_t{1} << bucket_bits;

  // Counting sort by bucket: the prefix sums of the bucket sizes are exactly
  // the lookup table, and each bucket then holds about one point, so a final
  // insertion sort is linear. This keeps construction O(points + buckets).
  std::vector<Point> unsorted(num_points);
  bucket_start_.assign(num_buckets + 1, 0);
  size_t j = 0;
  for (size_t s = 0; s < server_ids_.size(); ++s) {
    for (int r = 0; r < virtual_nodes_; ++r) {
      const uint64_t position = PointPosition(server_ids_[s], r);
      unsorted[j++] = Point{position, static_cast<uint16_t>(s)};
      ++bucket_start_[(position >> bucket_shift_) + 1];
    }
  }
  for (size_t b = 0; b < num_buckets; ++b) {
    bucket_start_[b + 1] += bucket_start_[b];
  }
  points_.resize(num_points + 1);
  {
    std::vector<uint32_t> next(bucket_start_.begin(), bucket_start_.end() - 1);
    for (const Point& p : unsorted) {
      points_[next[p.position >> bucket_shift_]++] = p;
    }
  }
  // Every point is already inside its bucket, so this only sorts within
  // buckets.
  for (size_t i = 1; i < num_points; ++i) {
    const Point p = points_[i];
    size_t k = i;
    while (k > 0 && points_[k - 1].position > p.position) {
      points_[k] = points_[k - 1];
      --k;
    }
    points_[k] = p;
  }
  points_[num_points] =
      Point{std::numeric_limits<uint64_t>::max(), points_[0].server_index};
}

void KeyRing::Assign(const uint64_t* keys, size_t n, uint16_t* owner,
                     size_t* counts) const {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t s =
        points_[FirstPointAtOrAfter(Position(keys[i]))].server_index;
    owner[i] = s;
    ++counts[s];
  }
}

std::vector<int> KeyRing::Successors(uint64_t key, int n) const {
  std::vector<int> result;
  if (n <= 0) return result;
  const size_t want = std::min(static_cast<size_t>(n), server_ids_.size());
  result.reserve(want);
  std::vector<bool> taken(server_ids_.size(), false);
  const size_t num = num_points();
  size_t i = FirstPointAtOrAfter(Position(key));
  if (i == num) i = 0;  // the sentinel stands for points_[0]
  for (size_t step = 0; step < num && result.size() < want; ++step) {
    const int s = points_[i].server_index;
    if (!taken[s]) {
      taken[s] = true;
      result.push_back(s);
    }
    if (++i == num) i = 0;
  }
  return result;
}

}  // namespace ps
