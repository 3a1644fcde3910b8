#include "util/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace ps {
namespace {

using crc32c_internal::Hardware;
using crc32c_internal::HardwareAvailable;
using crc32c_internal::Software;

std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// RFC 3720 (iSCSI) B.4 and the usual check value.
void ExpectPublishedValues(uint32_t (*crc)(uint32_t, const void*, size_t)) {
  EXPECT_EQ(crc(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc(0, "", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc(0, ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(crc(0, ascending.data(), ascending.size()), 0x46DD794Eu);
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) descending[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc(0, descending.data(), descending.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, TheTablesMatchPublishedCheckValues) {
  ExpectPublishedValues(&Software);
}

TEST(Crc32cTest, TheDispatchedFunctionMatchesPublishedCheckValues) {
  ExpectPublishedValues(&Crc32c);
}

TEST(Crc32cTest, TheInstructionMatchesPublishedCheckValues) {
  if (!HardwareAvailable()) GTEST_SKIP() << "no crc32 instruction here";
  ExpectPublishedValues(&Hardware);
}

// Every length 0..300 and every alignment of the start, so each tail length
// and the 8-byte main loop meet.
TEST(Crc32cTest, TheInstructionAgreesWithTheTablesAtEveryLengthAndAlignment) {
  if (!HardwareAvailable()) GTEST_SKIP() << "no crc32 instruction here";
  const std::string data = Random(320, 1);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= 308; ++n) {
      const uint32_t seed = static_cast<uint32_t>(n * 2654435761u);
      ASSERT_EQ(Hardware(seed, data.data() + offset, n),
                Software(seed, data.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32cTest, ExtendingInPiecesEqualsOneCall) {
  const std::string data = Random(1000, 7);
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  for (size_t split : {0, 1, 3, 7, 8, 9, 500, 999, 1000}) {
    uint32_t crc = Crc32c(0, data.data(), split);
    crc = Crc32c(crc, data.data() + split, data.size() - split);
    EXPECT_EQ(crc, whole) << "split at " << split;
    uint32_t soft = Software(0, data.data(), split);
    soft = Software(soft, data.data() + split, data.size() - split);
    EXPECT_EQ(soft, whole) << "split at " << split;
  }
}

TEST(Crc32cTest, EveryFlippedBitChangesTheChecksum) {
  std::string data = Random(64, 3);
  const uint32_t clean = Crc32c(0, data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_NE(Crc32c(0, data.data(), data.size()), clean) << "bit " << bit;
    data[bit / 8] ^= static_cast<char>(1 << (bit % 8));
  }
}

}  // namespace
}  // namespace ps
