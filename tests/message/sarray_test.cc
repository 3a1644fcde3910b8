#include "ps/sarray.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

namespace ps {
namespace {

TEST(SArrayTest, DefaultIsEmpty) {
  SArray<int> a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(a.data(), nullptr);
}

TEST(SArrayTest, SizeConstructorFillsWithValue) {
  SArray<int> zeros(4);
  EXPECT_EQ(zeros.size(), 4u);
  for (int v : zeros) EXPECT_EQ(v, 0);
  SArray<double> sevens(3, 7.5);
  EXPECT_EQ(sevens.size(), 3u);
  for (double v : sevens) EXPECT_EQ(v, 7.5);
}

TEST(SArrayTest, InitializerListCopiesElements) {
  SArray<int> a = {1, 2, 3};
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(a.front(), 1);
  EXPECT_EQ(a.back(), 3);
}

TEST(SArrayTest, ConstructorFromConstVectorCopies) {
  const std::vector<int> vec = {1, 2, 3};
  SArray<int> a(vec);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_NE(a.data(), vec.data());
  a[0] = 100;
  EXPECT_EQ(vec[0], 1);
  EXPECT_EQ(std::vector<int>(a.begin(), a.end()),
            std::vector<int>({100, 2, 3}));
}

TEST(SArrayTest, ConstructorFromSharedVectorSharesBuffer) {
  auto vec = std::make_shared<std::vector<int>>(std::vector<int>{4, 5, 6});
  SArray<int> a(vec);
  EXPECT_EQ(a.data(), vec->data());
  EXPECT_EQ(a.size(), 3u);
  (*vec)[1] = 50;
  EXPECT_EQ(a[1], 50);
}

TEST(SArrayTest, SharedVectorLivesWhileAnyCopyExists) {
  std::weak_ptr<std::vector<int>> watch;
  SArray<int> copy;
  {
    auto vec = std::make_shared<std::vector<int>>(std::vector<int>{1, 2});
    watch = vec;
    SArray<int> a(vec);
    copy = a;
  }
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(copy[1], 2);
  copy.clear();
  EXPECT_TRUE(watch.expired());
}

TEST(SArrayTest, AnAliasingPointerSharesPartOfItsOwnersBuffer) {
  std::weak_ptr<std::vector<int>> watch;
  SArray<int> part;
  {
    auto owner = std::make_shared<std::vector<int>>(std::vector<int>{1, 2, 3});
    watch = owner;
    part = SArray<int>(std::shared_ptr<int>(owner, owner->data() + 1), 2);
  }
  EXPECT_FALSE(watch.expired());
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part[0], 2);
  EXPECT_EQ(part[1], 3);
  part.clear();
  EXPECT_TRUE(watch.expired());
}

TEST(SArrayTest, MoveFromVectorTakesBufferWithoutCopying) {
  std::vector<int> vec = {7, 8, 9};
  const int* original = vec.data();
  SArray<int> a(std::move(vec));
  EXPECT_EQ(a.data(), original);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[2], 9);
}

TEST(SArrayTest, CopiesShareOneBuffer) {
  SArray<int> a = {1, 2, 3};
  SArray<int> b = a;
  SArray<int> c;
  c = b;
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.data(), c.data());
  EXPECT_EQ(a.ptr().use_count(), 3);
  c[0] = 42;
  EXPECT_EQ(a[0], 42);
}

TEST(SArrayTest, SegmentIsAViewIntoParent) {
  SArray<int> a = {0, 1, 2, 3, 4, 5};
  SArray<int> s = a.segment(2, 5);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.data(), a.data() + 2);
  EXPECT_EQ(s[0], 2);
  s[1] = 30;
  EXPECT_EQ(a[3], 30);
  a[4] = 40;
  EXPECT_EQ(s[2], 40);
}

TEST(SArrayTest, SegmentKeepsParentBufferAlive) {
  int frees = 0;
  SArray<int> s;
  {
    SArray<int> a;
    a.reset(new int[4]{1, 2, 3, 4}, 4, [&frees](int* p) {
      ++frees;
      delete[] p;
    });
    s = a.segment(1, 3);
  }
  EXPECT_EQ(frees, 0);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[1], 3);
  s.clear();
  EXPECT_EQ(frees, 1);
}

TEST(SArrayTest, EmptySegmentAtEnd) {
  SArray<int> a = {1, 2};
  SArray<int> s = a.segment(2, 2);
  EXPECT_TRUE(s.empty());
}

TEST(SArrayTest, PushBackOnSegmentDoesNotOverwriteParent) {
  // A segment's capacity ends at its end, so growing it reallocates.
  SArray<int> a = {0, 1, 2, 3};
  SArray<int> s = a.segment(0, 2);
  s.push_back(99);
  EXPECT_EQ(a[2], 2);
  EXPECT_NE(s.data(), a.data());
  EXPECT_EQ(std::vector<int>(s.begin(), s.end()), std::vector<int>({0, 1, 99}));
}

TEST(SArrayTest, ReinterpretFloatAsCharSharesBytes) {
  SArray<float> f = {1.0f, 2.0f, 3.0f};
  SArray<char> c(f);
  EXPECT_EQ(c.size(), 3 * sizeof(float));
  EXPECT_EQ(static_cast<void*>(c.data()), static_cast<void*>(f.data()));
  SArray<float> back(c);
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(back.data(), f.data());
  EXPECT_EQ(back[2], 3.0f);
  back[0] = 10.0f;
  EXPECT_EQ(f[0], 10.0f);
}

TEST(SArrayTest, ReinterpretKeepsBufferAlive) {
  int frees = 0;
  SArray<char> c;
  {
    SArray<float> f;
    f.reset(new float[2]{1.0f, 2.0f}, 2, [&frees](float* p) {
      ++frees;
      delete[] p;
    });
    c = f;
  }
  EXPECT_EQ(frees, 0);
  EXPECT_EQ(c.size(), 8u);
  c.clear();
  EXPECT_EQ(frees, 1);
}

TEST(SArrayTest, ReinterpretByAssignment) {
  SArray<char> c(16);
  SArray<uint64_t> k;
  k = c;
  EXPECT_EQ(k.size(), 2u);
  EXPECT_EQ(static_cast<void*>(k.data()), static_cast<void*>(c.data()));
}

TEST(SArrayTest, ReinterpretEmptyArray) {
  SArray<float> f;
  SArray<char> c(f);
  EXPECT_TRUE(c.empty());
}

TEST(SArrayDeathTest, ReinterpretWithIndivisibleSizeDies) {
  SArray<char> c(6);
  EXPECT_DEATH({ SArray<float> f(c); }, "cannot reinterpret");
}

TEST(SArrayDeathTest, AssignReinterpretWithIndivisibleSizeDies) {
  SArray<char> c(10);
  EXPECT_DEATH(
      {
        SArray<uint64_t> k;
        k = c;
      },
      "cannot reinterpret");
}

TEST(SArrayDeathTest, SegmentOutOfRangeDies) {
  SArray<int> a = {1, 2, 3};
  EXPECT_DEATH({ (void)a.segment(1, 4); }, "");
  EXPECT_DEATH({ (void)a.segment(2, 1); }, "");
}

TEST(SArrayDeathTest, FrontAndBackOfEmptyDie) {
  SArray<int> a;
  EXPECT_DEATH({ (void)a.front(); }, "");
  EXPECT_DEATH({ (void)a.back(); }, "");
}

TEST(SArrayTest, ResizeGrowsWithValueAndKeepsContents) {
  SArray<int> a = {1, 2};
  a.resize(5, 9);
  EXPECT_EQ(std::vector<int>(a.begin(), a.end()),
            std::vector<int>({1, 2, 9, 9, 9}));
  a.resize(6);
  EXPECT_EQ(a[5], 0);
}

TEST(SArrayTest, ResizeShrinksInPlace) {
  SArray<int> a = {1, 2, 3, 4};
  int* before = a.data();
  a.resize(2);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(a.data(), before);
  EXPECT_GE(a.capacity(), 4u);
}

TEST(SArrayTest, ResizeBeyondCapacityDetachesFromSharers) {
  SArray<int> a = {1, 2, 3};
  SArray<int> b = a;
  a.resize(10);
  EXPECT_NE(a.data(), b.data());
  a[0] = 100;
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(a[1], 2);
  EXPECT_EQ(a[2], 3);
}

TEST(SArrayTest, ReserveKeepsSizeAndContents) {
  SArray<int> a = {1, 2, 3};
  a.reserve(100);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_GE(a.capacity(), 100u);
  EXPECT_EQ(a[2], 3);
  int* data = a.data();
  a.reserve(10);  // Already enough: no reallocation.
  EXPECT_EQ(a.data(), data);
}

TEST(SArrayTest, PushBackAndPopBack) {
  SArray<int> a;
  for (int i = 0; i < 100; ++i) a.push_back(i);
  ASSERT_EQ(a.size(), 100u);
  EXPECT_GE(a.capacity(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a[i], i);
  a.pop_back();
  EXPECT_EQ(a.size(), 99u);
  EXPECT_EQ(a.back(), 98);
  SArray<int> empty;
  empty.pop_back();
  EXPECT_EQ(empty.size(), 0u);
}

TEST(SArrayTest, PushBackWithinCapacityDoesNotReallocate) {
  SArray<int> a;
  a.reserve(8);
  int* data = a.data();
  for (int i = 0; i < 8; ++i) a.push_back(i);
  EXPECT_EQ(a.data(), data);
}

TEST(SArrayTest, AppendConcatenates) {
  SArray<int> a = {1, 2};
  SArray<int> b = {3, 4, 5};
  a.append(b);
  EXPECT_EQ(std::vector<int>(a.begin(), a.end()),
            std::vector<int>({1, 2, 3, 4, 5}));
  EXPECT_EQ(b.size(), 3u);
  a.append(SArray<int>());
  EXPECT_EQ(a.size(), 5u);
  SArray<int> c;
  c.append(b);
  EXPECT_EQ(std::vector<int>(c.begin(), c.end()), std::vector<int>({3, 4, 5}));
  EXPECT_NE(c.data(), b.data());
}

TEST(SArrayTest, CopyFromPointerCopiesIntoOwnBuffer) {
  int src[] = {4, 5, 6};
  SArray<int> a;
  a.CopyFrom(src, 3);
  EXPECT_NE(a.data(), src);
  src[0] = 0;
  EXPECT_EQ(std::vector<int>(a.begin(), a.end()), std::vector<int>({4, 5, 6}));
}

TEST(SArrayTest, CopyFromSArrayMakesIndependentCopy) {
  SArray<int> a = {1, 2, 3};
  SArray<int> b;
  b.CopyFrom(a);
  EXPECT_NE(a.data(), b.data());
  b[0] = 10;
  EXPECT_EQ(a[0], 1);
  b.CopyFrom(b);  // Self-copy is a no-op.
  EXPECT_EQ(std::vector<int>(b.begin(), b.end()), std::vector<int>({10, 2, 3}));
}

TEST(SArrayTest, CopyFromIteratorsFreshBuffer) {
  SArray<int> a = {1, 2, 3};
  SArray<int> b = a;
  std::vector<int> src = {7, 8};
  a.CopyFrom(src.begin(), src.end());
  EXPECT_EQ(std::vector<int>(a.begin(), a.end()), std::vector<int>({7, 8}));
  EXPECT_EQ(b[0], 1);
}

TEST(SArrayTest, CopyFromEmpty) {
  SArray<int> a = {1, 2};
  a.CopyFrom(static_cast<const int*>(nullptr), 0);
  EXPECT_TRUE(a.empty());
}

// Counts destructor runs, so that delete[] on an array of these is visible.
struct Tracked {
  static int destroyed;
  ~Tracked() { ++destroyed; }
  int value = 0;
};
int Tracked::destroyed = 0;

TEST(SArrayTest, NonOwningPointerConstructorDoesNotFree) {
  Tracked::destroyed = 0;
  Tracked* raw = new Tracked[3];
  {
    SArray<Tracked> a(raw, 3);
    SArray<Tracked> b = a;
    EXPECT_EQ(a.data(), raw);
    EXPECT_EQ(b.size(), 3u);
  }
  EXPECT_EQ(Tracked::destroyed, 0);
  raw[0].value = 5;  // Still ours; ASan would flag a use after free.
  delete[] raw;
  EXPECT_EQ(Tracked::destroyed, 3);
}

TEST(SArrayTest, DeletablePointerConstructorFreesWhenLastCopyGoes) {
  Tracked::destroyed = 0;
  Tracked* raw = new Tracked[3];
  {
    SArray<Tracked> a(raw, 3, /*deletable=*/true);
    {
      SArray<Tracked> b = a;
      EXPECT_EQ(b.data(), raw);
    }
    EXPECT_EQ(Tracked::destroyed, 0);
  }
  EXPECT_EQ(Tracked::destroyed, 3);
}

TEST(SArrayTest, ResetFreesOnceWhenLastCopyGoes) {
  int frees = 0;
  auto deleter = [&frees](int* p) {
    ++frees;
    delete[] p;
  };
  SArray<int> a;
  a.reset(new int[2]{1, 2}, 2, deleter);
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(a.capacity(), 2u);
  SArray<int> b = a;
  SArray<int> s = a.segment(1, 2);
  a.clear();
  EXPECT_EQ(frees, 0);
  b.clear();
  EXPECT_EQ(frees, 0);
  EXPECT_EQ(s[0], 2);
  s.clear();
  EXPECT_EQ(frees, 1);
}

TEST(SArrayTest, ResetReleasesPreviousBuffer) {
  int frees = 0;
  auto deleter = [&frees](int* p) {
    ++frees;
    delete[] p;
  };
  SArray<int> a;
  a.reset(new int[2], 2, deleter);
  a.reset(new int[3], 3, deleter);
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(a.size(), 3u);
  a.clear();
  EXPECT_EQ(frees, 2);
  EXPECT_TRUE(a.empty());
}

TEST(SArrayTest, ResizeBeyondCapacityReleasesOldBuffer) {
  int frees = 0;
  SArray<int> a;
  a.reset(new int[2]{1, 2}, 2, [&frees](int* p) {
    ++frees;
    delete[] p;
  });
  a.resize(3);
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(a[1], 2);
}

TEST(SArrayTest, FindRangeOnSortedKeys) {
  SArray<uint64_t> keys = {1, 3, 5, 7, 9};
  Range r = FindRange<uint64_t>(keys, 3, 8);
  EXPECT_EQ(r.begin(), 1u);
  EXPECT_EQ(r.end(), 4u);

  r = FindRange<uint64_t>(keys, 0, 100);
  EXPECT_EQ(r.begin(), 0u);
  EXPECT_EQ(r.end(), 5u);

  r = FindRange<uint64_t>(keys, 4, 5);  // Upper bound is exclusive.
  EXPECT_EQ(r.size(), 0u);

  r = FindRange<uint64_t>(keys, 10, 20);
  EXPECT_EQ(r.begin(), 5u);
  EXPECT_EQ(r.end(), 5u);

  r = FindRange<uint64_t>(keys, 9, kMaxKey);
  EXPECT_EQ(r.begin(), 4u);
  EXPECT_EQ(r.end(), 5u);
}

TEST(SArrayTest, FindRangeWithEmptyOrInvertedBounds) {
  SArray<uint64_t> keys = {1, 2, 3};
  Range r = FindRange<uint64_t>(keys, 3, 3);
  EXPECT_EQ(r.begin(), 0u);
  EXPECT_EQ(r.end(), 0u);
  r = FindRange<uint64_t>(keys, 3, 1);
  EXPECT_EQ(r.size(), 0u);
  r = FindRange<uint64_t>(SArray<uint64_t>(), 0, 10);
  EXPECT_EQ(r.size(), 0u);
}

TEST(SArrayTest, StreamsShortDebugString) {
  SArray<int> small = {1, 2, 3};
  std::ostringstream os;
  os << small;
  EXPECT_EQ(os.str(), "[3]: 1 2 3 ");
  SArray<int> big(12);
  for (int i = 0; i < 12; ++i) big[i] = i;
  std::ostringstream os2;
  os2 << big;
  EXPECT_EQ(os2.str(), "[12]: 0 1 2 3 4 ... 7 8 9 10 11 ");
}

}  // namespace
}  // namespace ps
