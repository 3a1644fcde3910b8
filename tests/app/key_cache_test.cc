#include "app/key_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "app/kv_frames.h"
#include "message/message.h"

namespace ps {
namespace {

SArray<Key> Keys(Key first, size_t n, Key step = 3) {
  SArray<Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = first + step * i + i * i;
  return keys;
}

TEST(KeySignatureTest, EqualKeysSignAlikeAndAnyChangeSignsDifferently) {
  const SArray<Key> a = Keys(10, 100);
  SArray<Key> b;
  b.CopyFrom(a.data(), a.size());
  EXPECT_TRUE(SignKeys(a) == SignKeys(b));
  EXPECT_EQ(SignKeys(a).count, 100u);
  b[57] += 1;
  EXPECT_FALSE(SignKeys(a) == SignKeys(b));
  SArray<Key> shorter;
  shorter.CopyFrom(a.data(), a.size() - 1);
  EXPECT_FALSE(SignKeys(a) == SignKeys(shorter));
}

TEST(KeySignatureTest, TheFrameRoundTripsAndBadFramesAreRefused) {
  RawKVs kvs;
  kvs.keys = Keys(1, 40);
  kvs.vals = SArray<char>(40 * sizeof(float));
  Message msg;
  msg.meta.request = true;
  msg.meta.push = true;
  const KeySignature sig = SignKeys(kvs.keys);
  AddSignedKVFrames(kvs, sig, &msg);
  ASSERT_EQ(msg.data.size(), 2u);
  EXPECT_EQ(msg.meta.key_cache, kKeyCacheSigned);
  EXPECT_EQ(msg.data[0].size(), kKeySignatureBytes);
  KeySignature got;
  ASSERT_TRUE(ParseKeySignature(msg.data[0], &got).ok());
  EXPECT_TRUE(got == sig);

  SArray<char> short_frame(kKeySignatureBytes - 1);
  EXPECT_EQ(ParseKeySignature(short_frame, &got).code(),
            Status::Code::kCorruption);
  SArray<char> no_keys(kKeySignatureBytes, 0);
  EXPECT_EQ(ParseKeySignature(no_keys, &got).code(), Status::Code::kCorruption);

  // A signature the server did not resolve is never taken for keys.
  RawKVs parsed;
  EXPECT_EQ(ParseKVFrames(msg, sizeof(float), KVLimits(), &parsed).code(),
            Status::Code::kCorruption);
}

TEST(KeySignatureTest, KeyCacheMarksOutsideARequestWithKeysAreRefused) {
  RawKVs kvs;
  kvs.keys = Keys(1, 20);
  kvs.vals = SArray<char>(20 * sizeof(float));
  for (int mode :
       {static_cast<int>(kKeyCacheKeep), static_cast<int>(kKeyCacheUnknown),
        static_cast<int>(kKeyCacheOff), 7}) {
    for (bool request : {true, false}) {
      Message msg;
      msg.meta.request = request;
      msg.meta.push = true;
      AddKVFrames(kvs, &msg);
      msg.meta.key_cache = mode;
      RawKVs parsed;
      const Status s = ParseKVFrames(msg, sizeof(float), KVLimits(), &parsed);
      if (mode == kKeyCacheKeep && request) {
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(parsed.keys.size(), 20u);
      } else {
        EXPECT_EQ(s.code(), Status::Code::kCorruption)
            << "key_cache " << mode << (request ? " request" : " response");
      }
    }
  }
}

TEST(KeyCacheHintsTest, SeenOnceGoesAsKeysTwiceAsksToKeepThenSigned) {
  KeyCacheHints hints;
  const KeySignature a = SignKeys(Keys(1, 50));
  const KeySignature b = SignKeys(Keys(2, 50));
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kKeys);
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kKeep);
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kSigned);
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kSigned);
  // Another server, another set: each counts on its own.
  EXPECT_EQ(hints.Decide(10, a), KeyCacheHints::Send::kKeys);
  EXPECT_EQ(hints.Decide(8, b), KeyCacheHints::Send::kKeys);
  // A refusal: the part went again asking to keep, so the set counts as
  // kept.
  EXPECT_EQ(hints.Decide(10, a), KeyCacheHints::Send::kKeep);
  hints.Refused(10, a);
  EXPECT_EQ(hints.Decide(10, a), KeyCacheHints::Send::kSigned);
  // A server that keeps nothing gets keys from then on.
  hints.Disable(8);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kKeys);
  }
  hints.Refused(8, a);
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kKeys);
}

TEST(KeyCacheHintsTest, ARecordPastItsBoundStartsAfresh) {
  KeyCacheHints hints;
  const KeySignature a = SignKeys(Keys(1, 50));
  hints.Decide(8, a);
  hints.Decide(8, a);
  ASSERT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kSigned);
  KeySignature other;
  other.count = 50;
  for (size_t i = 1; i < KeyCacheHints::kMaxSetsPerServer; ++i) {
    other.low = i * 0x9e3779b97f4a7c15ull;
    hints.Decide(8, other);
  }
  // The record is full: the next set clears it, `a` included.
  other.low = 42;
  EXPECT_EQ(hints.Decide(8, other), KeyCacheHints::Send::kKeys);
  EXPECT_EQ(hints.Decide(8, a), KeyCacheHints::Send::kKeys);
}

TEST(KeyCacheTest, KeptKeysAreFoundByTheirSenderAndWholeSignatureOnly) {
  KeyCache cache(1 << 20);
  const SArray<Key> keys = Keys(5, 64);
  cache.Keep(9, keys);
  const KeySignature sig = SignKeys(keys);
  SArray<Key> got = cache.Find(9, sig);
  ASSERT_EQ(got.size(), keys.size());
  EXPECT_EQ(std::memcmp(got.data(), keys.data(), keys.size() * sizeof(Key)), 0);
  EXPECT_NE(got.data(), keys.data()) << "kept a copy, not the frame";
  EXPECT_TRUE(cache.Find(11, sig).empty()) << "another sender's";
  KeySignature wrong = sig;
  wrong.count += 1;
  EXPECT_TRUE(cache.Find(9, wrong).empty());
  wrong = sig;
  wrong.high ^= 1;
  EXPECT_TRUE(cache.Find(9, wrong).empty());
  EXPECT_EQ(cache.sets(), 1u);
  EXPECT_EQ(cache.bytes(), keys.size() * sizeof(Key));
  cache.Keep(9, keys);  // Kept again: still one.
  EXPECT_EQ(cache.sets(), 1u);
}

TEST(KeyCacheTest, TheBudgetDropsTheLeastRecentlyUsedFirst) {
  const size_t n = 100;
  KeyCache cache(2 * n * sizeof(Key));
  const SArray<Key> a = Keys(1, n), b = Keys(2, n), c = Keys(3, n);
  cache.Keep(1, a);
  cache.Keep(1, b);
  ASSERT_FALSE(cache.Find(1, SignKeys(a)).empty());  // a is now newer
  cache.Keep(1, c);
  EXPECT_FALSE(cache.Find(1, SignKeys(a)).empty());
  EXPECT_TRUE(cache.Find(1, SignKeys(b)).empty()) << "b was the oldest";
  EXPECT_FALSE(cache.Find(1, SignKeys(c)).empty());
  EXPECT_LE(cache.bytes(), 2 * n * sizeof(Key));
  // Larger than the whole budget: not kept, nothing dropped for it.
  cache.Keep(1, Keys(4, 3 * n));
  EXPECT_EQ(cache.sets(), 2u);
  KeyCache none(0);
  none.Keep(1, a);
  EXPECT_EQ(none.sets(), 0u);
  EXPECT_TRUE(none.Find(1, SignKeys(a)).empty());
}

}  // namespace
}  // namespace ps
