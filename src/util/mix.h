// Bijective 64-bit mixers, each with its inverse, in one place.
//
// Fmix64 is murmur3's 64-bit finalizer and SplitMix64 is the output function
// of Vigna's splitmix64 generator: both are bijections of 64-bit words in
// which every input bit affects every output bit. Being bijections, a value
// mixed with one of them can be recovered exactly (Unfmix64), which is what
// lets a key carry an ID without a lookup table.
//
// Thread safety: pure functions.
#ifndef PS_UTIL_MIX_H_
#define PS_UTIL_MIX_H_

#include <cstdint>

namespace ps {

namespace mix_internal {

// Newton's iteration for the inverse of an odd number modulo 2^64: x = a is
// right in the low 3 bits, and each step doubles the number of right bits.
constexpr uint64_t InverseModPow2(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}

constexpr uint64_t kFmix1 = 0xff51afd7ed558ccdULL;
constexpr uint64_t kFmix2 = 0xc4ceb9fe1a85ec53ULL;
constexpr uint64_t kFmix1Inverse = InverseModPow2(kFmix1);
constexpr uint64_t kFmix2Inverse = InverseModPow2(kFmix2);
static_assert(kFmix1 * kFmix1Inverse == 1, "bad inverse");
static_assert(kFmix2 * kFmix2Inverse == 1, "bad inverse");

}  // namespace mix_internal

// The inverse of an odd number modulo 2^64 (the multiplier of a bijective
// multiplicative hash).
constexpr uint64_t InverseModPow2(uint64_t odd) {
  return mix_internal::InverseModPow2(odd);
}

namespace mix_internal {

constexpr uint64_t XorShift33(uint64_t x) { return x ^ (x >> 33); }

// xorshift, multiply by a, xorshift, multiply by b, xorshift: fmix64 with
// (kFmix1, kFmix2), and its inverse with the inverses in reverse order
// (x ^ x >> 33 is its own inverse because 33 >= 32).
constexpr uint64_t Murmur3Rounds(uint64_t x, uint64_t a, uint64_t b) {
  return XorShift33(XorShift33(XorShift33(x) * a) * b);
}

}  // namespace mix_internal

// murmur3's fmix64.
constexpr uint64_t Fmix64(uint64_t x) {
  return mix_internal::Murmur3Rounds(x, mix_internal::kFmix1,
                                     mix_internal::kFmix2);
}

// The inverse of Fmix64: Unfmix64(Fmix64(x)) == x.
constexpr uint64_t Unfmix64(uint64_t x) {
  return mix_internal::Murmur3Rounds(x, mix_internal::kFmix2Inverse,
                                     mix_internal::kFmix1Inverse);
}

// 2^64 / golden ratio, odd: splitmix64's increment, and the multiplier of
// Fibonacci hashing.
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// splitmix64's output function.
constexpr uint64_t SplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace ps

#endif  // PS_UTIL_MIX_H_
