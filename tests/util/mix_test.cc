#include "util/mix.h"

#include <gtest/gtest.h>

#include <bitset>
#include <cstdint>
#include <random>
#include <set>

namespace ps {
namespace {

TEST(MixTest, Fmix64IsMurmur3sFinalizerAndInvertible) {
  EXPECT_EQ(Fmix64(0), 0u);
  // murmur3's fmix64 of 1, computed by hand from its definition.
  uint64_t x = 1;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  EXPECT_EQ(Fmix64(1), x);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = rng();
    ASSERT_EQ(Unfmix64(Fmix64(v)), v);
    ASSERT_EQ(Fmix64(Unfmix64(v)), v);
  }
}

TEST(MixTest, SplitMix64MatchesTheReferenceGenerator) {
  // The first outputs of splitmix64 seeded with 0: state += gamma, then
  // the output function of the state.
  uint64_t state = 0;
  const uint64_t expected[] = {0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL,
                               0x06c45d188009454fULL};
  for (uint64_t e : expected) {
    state += kGoldenGamma;
    EXPECT_EQ(SplitMix64(state), e);
  }
}

TEST(MixTest, InverseModPow2Inverts) {
  for (uint64_t odd : {uint64_t{1}, uint64_t{3}, kGoldenGamma,
                       uint64_t{0xff51afd7ed558ccdULL}, ~uint64_t{0}}) {
    EXPECT_EQ(odd * InverseModPow2(odd), 1u) << odd;
  }
}

// Every input bit flips about half of the output bits.
TEST(MixTest, BothMixersAvalanche) {
  std::mt19937_64 rng(9);
  for (auto mix : {&SplitMix64, &Fmix64}) {
    for (int bit = 0; bit < 64; ++bit) {
      int flipped = 0;
      const int trials = 200;
      for (int t = 0; t < trials; ++t) {
        const uint64_t v = rng();
        flipped += static_cast<int>(
            std::bitset<64>(mix(v) ^ mix(v ^ (uint64_t{1} << bit))).count());
      }
      const double mean = static_cast<double>(flipped) / trials;
      EXPECT_GT(mean, 28.0) << "bit " << bit;
      EXPECT_LT(mean, 36.0) << "bit " << bit;
    }
  }
}

TEST(MixTest, SequentialInputsGiveDistinctOutputs) {
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 100000; ++i) {
    seen.insert(SplitMix64(i));
    seen.insert(Fmix64(i) ^ (uint64_t{1} << 63));
  }
  EXPECT_EQ(seen.size(), 200000u);
}

}  // namespace
}  // namespace ps
