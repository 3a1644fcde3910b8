#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace ps {
namespace {

constexpr size_t kHuge = HugePageMemory::kHugePageBytes;

bool AllZero(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

TEST(HugePageMemoryTest, EmptyMapsNothing) {
  HugePageMemory none;
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.size(), 0u);
  HugePageMemory zero(0);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(zero.size(), 0u);
}

TEST(HugePageMemoryTest, SizeIsRoundedUpAndTheStartAlignedToAHugePage) {
  for (size_t bytes : {size_t{1}, kHuge - 1, kHuge, kHuge + 1, 5 * kHuge / 2}) {
    HugePageMemory memory(bytes);
    ASSERT_NE(memory.data(), nullptr) << bytes;
    EXPECT_EQ(memory.size(), (bytes + kHuge - 1) / kHuge * kHuge) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(memory.data()) % kHuge, 0u) << bytes;
  }
}

TEST(HugePageMemoryTest, StartsZeroedAndIsWritableToTheEnd) {
  HugePageMemory memory(3 * kHuge);
  ASSERT_TRUE(AllZero(memory.data(), memory.size()));
  unsigned char* p = static_cast<unsigned char*>(memory.data());
  std::memset(p, 0xab, memory.size());
  EXPECT_EQ(p[0], 0xab);
  EXPECT_EQ(p[memory.size() - 1], 0xab);
}

TEST(HugePageMemoryTest, MovingHandsOverTheMapping) {
  HugePageMemory a(kHuge);
  void* const data = a.data();
  static_cast<unsigned char*>(data)[7] = 42;

  HugePageMemory b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), kHuge);
  EXPECT_EQ(static_cast<unsigned char*>(b.data())[7], 42);

  // Assigning over a mapping releases it and takes the other.
  HugePageMemory c(2 * kHuge);
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), kHuge);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)

  // Self-assignment keeps it.
  HugePageMemory& same = c;
  c = std::move(same);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(static_cast<unsigned char*>(c.data())[7], 42);
}

}  // namespace
}  // namespace ps
