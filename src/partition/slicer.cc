#include "partition/slicer.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <string>

namespace ps {

namespace {

// Whether some keys[i] <= keys[i - 1] for i in [start, stop), start >= 1:
// four independent compares per step, no branch per key.
bool AnyUnsorted(const uint64_t* keys, size_t start, size_t stop) {
  uint64_t bad = 0;
  size_t i = start;
  for (; i + 4 <= stop; i += 4) {
    bad |= static_cast<uint64_t>(keys[i] <= keys[i - 1]) |
           static_cast<uint64_t>(keys[i + 1] <= keys[i]) |
           static_cast<uint64_t>(keys[i + 2] <= keys[i + 1]) |
           static_cast<uint64_t>(keys[i + 3] <= keys[i + 2]);
  }
  for (; i < stop; ++i) bad |= static_cast<uint64_t>(keys[i] <= keys[i - 1]);
  return bad != 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same with AVX2, four keys per compare (about 2 instructions a key
// instead of 5): unsigned order is signed order after flipping the top bit.
__attribute__((target("avx2"))) bool AnyUnsortedAvx2(const uint64_t* keys,
                                                     size_t start,
                                                     size_t stop) {
  const __m256i flip = _mm256_set1_epi64x(INT64_MIN);
  __m256i sorted = _mm256_set1_epi64x(-1);
  size_t i = start;
  for (; i + 4 <= stop; i += 4) {
    const __m256i now = _mm256_xor_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + i)), flip);
    const __m256i before = _mm256_xor_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + i - 1)),
        flip);
    sorted = _mm256_and_si256(sorted, _mm256_cmpgt_epi64(now, before));
  }
  const bool bad = !_mm256_testc_si256(sorted, _mm256_set1_epi64x(-1));
  return bad || AnyUnsorted(keys, i, stop);
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
#endif

// The index of the first key out of order (keys[i] <= keys[i - 1]), or 0.
// Blocks of keys are checked as a whole, and only a block that fails is
// searched.
size_t FirstUnsorted(const uint64_t* keys, size_t n) {
  constexpr size_t kBlock = 1024;
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx2 = HaveAvx2();
#endif
  for (size_t start = 1; start < n; start += kBlock) {
    const size_t stop = std::min(n, start + kBlock);
#if defined(__x86_64__) && defined(__GNUC__)
    const bool bad = avx2 ? AnyUnsortedAvx2(keys, start, stop)
                          : AnyUnsorted(keys, start, stop);
#else
    const bool bad = AnyUnsorted(keys, start, stop);
#endif
    if (!bad) continue;
    for (size_t i = start; i < stop; ++i) {
      if (keys[i] <= keys[i - 1]) return i;
    }
  }
  return 0;
}

}  // namespace

Status UnsortedKeys(const uint64_t* keys, size_t i) {
  return Status::InvalidArgument(
      "keys must be sorted and unique; key " + std::to_string(i) + " (" +
      std::to_string(keys[i]) + ") follows " + std::to_string(keys[i - 1]));
}

Status SliceKeys(const KeyRing& ring, const uint64_t* keys, size_t n,
                 SlicePlan* plan) {
  const size_t num_servers = ring.num_servers();
  plan->segments.clear();
  plan->owner.clear();
  plan->counts.assign(num_servers, 0);
  plan->segments_of.assign(num_servers, 0);
  plan->per_key = ring.placement() == Placement::kSpread;
  if (const size_t bad = FirstUnsorted(keys, n); bad != 0) {
    return UnsortedKeys(keys, bad);
  }
  if (n == 0) return Status::OK();
  if (plan->per_key) {
    plan->owner.resize(n);
    uint16_t* owner = plan->owner.data();
    size_t* counts = plan->counts.data();
    for (size_t i = 0; i < n; ++i) {
      const uint16_t s = static_cast<uint16_t>(ring.OwnerIndex(keys[i]));
      owner[i] = s;
      ++counts[s];
    }
    return Status::OK();
  }
  // Walk the ranges the batch touches: the range of the first key not yet
  // placed, then a binary search for the first key past it.
  size_t begin = 0;
  const size_t num_ranges = ring.num_ranges();
  plan->segments.reserve(std::min(num_ranges, n));
  while (begin < n) {
    const size_t r = ring.RangeAt(keys[begin]);
    size_t end = n;
    if (r + 1 < num_ranges) {
      end = std::lower_bound(keys + begin, keys + n, ring.range_begin(r + 1)) -
            keys;
    }
    const int s = ring.range_owner(r);
    plan->segments.push_back(KeySegment{begin, end, s});
    plan->counts[s] += end - begin;
    ++plan->segments_of[s];
    begin = end;
  }
  return Status::OK();
}

}  // namespace ps
