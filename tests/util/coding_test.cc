#include "util/coding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ps {
namespace {

TEST(CodingTest, FixedWidthIntegersAreLittleEndian) {
  char b[8];
  EncodeFixed32(b, 0x01020304u);
  EXPECT_EQ(std::string(b, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(DecodeFixed32(b), 0x01020304u);
  EncodeFixed64(b, 0x0102030405060708ull);
  EXPECT_EQ(std::string(b, 8),
            std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(DecodeFixed64(b), 0x0102030405060708ull);
}

TEST(CodingTest, FixedWidthIntegersRoundTripAtTheExtremes) {
  char b[8];
  for (uint32_t v : {0u, 1u, 0x80u, 0xFFu, 0x80000000u, 0xFFFFFFFFu}) {
    EncodeFixed32(b, v);
    EXPECT_EQ(DecodeFixed32(b), v);
  }
  for (uint64_t v : {uint64_t{0}, uint64_t{1} << 63, ~uint64_t{0},
                     uint64_t{0x00FF00FF00FF00FF}}) {
    EncodeFixed64(b, v);
    EXPECT_EQ(DecodeFixed64(b), v);
  }
}

TEST(CodingTest, FloatsKeepEveryBitPattern) {
  std::vector<float> in{0.0f,
                        -0.0f,
                        1.5f,
                        -3.25e-38f,
                        std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::denorm_min()};
  uint32_t nan_bits = 0x7FC00123u;  // a NaN with a payload
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  in.push_back(nan);
  std::string bytes;
  EncodeFloats(in.data(), in.size(), &bytes);
  ASSERT_EQ(bytes.size(), in.size() * 4);
  EXPECT_EQ(DecodeFixed32(bytes.data() + 8), 0x3FC00000u);  // 1.5f
  std::vector<float> out{42.0f};
  AppendFloats(bytes, &out);
  ASSERT_EQ(out.size(), in.size() + 1);
  EXPECT_EQ(out[0], 42.0f);  // appended, not replaced
  EXPECT_EQ(std::memcmp(out.data() + 1, in.data(), in.size() * 4), 0);
}

TEST(CodingTest, APartialFloatIsIgnored) {
  std::vector<float> out;
  AppendFloats(std::string("\x00\x00\x80\x3f\x01\x02", 6), &out);
  EXPECT_EQ(out, std::vector<float>{1.0f});
  std::string bytes = "stale";
  EncodeFloats(nullptr, 0, &bytes);
  EXPECT_EQ(bytes, "");
}

}  // namespace
}  // namespace ps
