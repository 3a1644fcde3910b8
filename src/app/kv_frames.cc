#include "app/kv_frames.h"

// Header-only: the hash is inlined, no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace ps {

bool FindKeyRun(const SArray<Key>& keys, KeyOrder order, KeyRun* run) {
  const size_t n = keys.size();
  if (order == KeyOrder::kAsIs || n * sizeof(Key) <= kKeyRunFrameBytes) {
    return false;
  }
  const Key* k = keys.data();
  if (k[1] <= k[0] || k[n - 1] <= k[0]) return false;
  const uint64_t step = k[1] - k[0];
  const uint64_t span = k[n - 1] - k[0];
  // Random keys end here: the last key is not n - 1 steps from the first.
  if (span % step != 0 || span / step != n - 1) return false;
  // Sorted and unique, n keys that span n - 1 are every key between; any
  // other step (or order) needs every gap looked at.
  if (order != KeyOrder::kSortedUnique || step != 1) {
    for (size_t i = 2; i < n; ++i) {
      if (static_cast<uint64_t>(k[i] - k[i - 1]) != step) return false;
    }
  }
  run->first = k[0];
  run->count = n;
  run->step = step;
  return true;
}

void AddKVFrames(const RawKVs& kvs, Message* msg, bool keys_as_requested,
                 KeyOrder order) {
  if (kvs.keys.empty()) return;
  if (keys_as_requested) {
    msg->data.reserve(msg->data.size() + (kvs.lens.empty() ? 1 : 2));
    msg->meta.keys_as_requested = true;
    msg->AddData(kvs.vals);
    if (!kvs.lens.empty()) msg->AddData(kvs.lens);
    return;
  }
  KeyRun run;
  const bool is_run = FindKeyRun(kvs.keys, order, &run);
  AddKVFramesWithRun(kvs, is_run ? &run : nullptr, msg);
}

void AddKVFramesWithRun(const RawKVs& kvs, const KeyRun* run, Message* msg) {
  if (kvs.keys.empty()) return;
  // One allocation for the frames' vector, not one per frame added.
  msg->data.reserve(msg->data.size() + (kvs.lens.empty() ? 2 : 3));
  if (run) {
    const uint64_t words[3] = {run->first, run->count, run->step};
    SArray<char> frame;
    frame.CopyFrom(reinterpret_cast<const char*>(words), sizeof(words));
    msg->meta.key_run = true;
    msg->AddData(frame);
  } else {
    msg->AddData(kvs.keys);
  }
  msg->AddData(kvs.vals);
  if (!kvs.lens.empty()) msg->AddData(kvs.lens);
}

KeySignature SignKeys(const SArray<Key>& keys) {
  const XXH128_hash_t h = XXH3_128bits(keys.data(), keys.size() * sizeof(Key));
  KeySignature sig;
  sig.low = h.low64;
  sig.high = h.high64;
  sig.count = keys.size();
  return sig;
}

void AddSignedKVFrames(const RawKVs& kvs, const KeySignature& sig,
                       Message* msg) {
  msg->data.reserve(msg->data.size() + (kvs.lens.empty() ? 2 : 3));
  const uint64_t words[3] = {sig.low, sig.high, sig.count};
  SArray<char> frame;
  frame.CopyFrom(reinterpret_cast<const char*>(words), sizeof(words));
  msg->meta.key_cache = kKeyCacheSigned;
  msg->AddData(frame);
  msg->AddData(kvs.vals);
  if (!kvs.lens.empty()) msg->AddData(kvs.lens);
}

Status ParseKeySignature(const SArray<char>& frame, KeySignature* sig) {
  if (frame.size() != kKeySignatureBytes) {
    return Status::Corruption(
        "a key signature frame of " + std::to_string(frame.size()) +
        " bytes; expected " + std::to_string(kKeySignatureBytes));
  }
  uint64_t words[3];
  std::memcpy(words, frame.data(), sizeof(words));
  if (words[2] == 0) {
    return Status::Corruption("a key signature of no keys");
  }
  sig->low = words[0];
  sig->high = words[1];
  sig->count = words[2];
  return Status::OK();
}

namespace {

// The sender's value size, where it gave one, is this app's.
Status CheckValueBytes(const Message& msg, size_t value_bytes) {
  if (msg.meta.value_bytes != 0 &&
      static_cast<size_t>(msg.meta.value_bytes) != value_bytes) {
    return Status::InvalidArgument(
        "the sender's values have " + std::to_string(msg.meta.value_bytes) +
        " bytes, this app's have " + std::to_string(value_bytes));
  }
  return Status::OK();
}

// Lengths of a frame: aligned, a whole number of ints, none negative; their
// sum in *total.
Status ParseLens(const SArray<char>& frame, SArray<int>* lens, size_t* total) {
  if (frame.size() % sizeof(int) != 0 ||
      reinterpret_cast<uintptr_t>(frame.data()) % alignof(int) != 0) {
    return Status::Corruption("length frame of " +
                              std::to_string(frame.size()) + " bytes");
  }
  *lens = SArray<int>(frame);
  *total = 0;
  for (int len : *lens) {
    if (len < 0) return Status::Corruption("negative length");
    *total += static_cast<size_t>(len);
  }
  return Status::OK();
}

// A keys_as_requested pull response: values, then lengths if any.
Status ParseAsRequested(const Message& msg, size_t value_bytes, RawKVs* kvs) {
  const auto& d = msg.data;
  if (msg.meta.request || !msg.meta.pull) {
    return Status::Corruption(
        "only a pull response may leave out its keys frame");
  }
  if (d.size() != 1 && d.size() != 2) {
    return Status::Corruption("a pull response without keys has " +
                              std::to_string(d.size()) +
                              " data frames; expected 1 or 2");
  }
  if (d[0].size() % value_bytes != 0) {
    return Status::Corruption("value frame of " + std::to_string(d[0].size()) +
                              " bytes is not a whole number of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  *kvs = RawKVs();
  kvs->vals = d[0];
  if (d.size() == 2) {
    size_t total = 0;
    PS_RETURN_IF_ERROR(ParseLens(d[1], &kvs->lens, &total));
    if (total != d[0].size() / value_bytes) {
      return Status::Corruption("lengths add up to " + std::to_string(total) +
                                " values, frame has " +
                                std::to_string(d[0].size() / value_bytes));
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckAsRequested(const RawKVs& kvs, size_t value_bytes) {
  const size_t n = kvs.keys.size();
  const size_t nvals = kvs.vals.size() / value_bytes;
  if (!kvs.lens.empty() ? kvs.lens.size() != n
                        : (n == 0 ? nvals != 0 : nvals % n != 0)) {
    return Status::Corruption(
        std::to_string(nvals) + " values" +
        (kvs.lens.empty()
             ? ""
             : " and " + std::to_string(kvs.lens.size()) + " lengths") +
        " do not fit the " + std::to_string(n) + " keys requested");
  }
  return Status::OK();
}

namespace {

// A run frame (meta.key_run), checked against `limits` before anything is
// allocated for it.
Status ParseKeyRun(const SArray<char>& frame, const KVLimits& limits,
                   KeyRun* run) {
  if (frame.size() != kKeyRunFrameBytes) {
    return Status::Corruption("key run frame of " +
                              std::to_string(frame.size()) + " bytes; " +
                              std::to_string(kKeyRunFrameBytes) + " expected");
  }
  uint64_t words[3];
  std::memcpy(words, frame.data(), sizeof(words));
  const uint64_t first = words[0], count = words[1], step = words[2];
  if (count == 0) return Status::Corruption("key run of 0 keys");
  if (step == 0) return Status::Corruption("key run with a step of 0");
  const uint64_t max_key = std::numeric_limits<Key>::max();
  if (first > max_key || count - 1 > (max_key - first) / step) {
    return Status::Corruption("key run of " + std::to_string(count) +
                              " keys from " + std::to_string(first) +
                              " in steps of " + std::to_string(step) +
                              " passes the largest key");
  }
  // In the words of the check of a keys frame's count (KVServerCore).
  if (count > static_cast<uint64_t>(std::max(limits.max_keys_per_request, 0))) {
    return Status::InvalidArgument("a request of " + std::to_string(count) +
                                   " keys; EMBER_MAX_KEYS_PER_REQUEST is " +
                                   std::to_string(limits.max_keys_per_request));
  }
  const uint64_t frame_keys =
      (static_cast<uint64_t>(std::max(limits.max_frame_mb, 0)) << 20) /
      sizeof(Key);
  if (count > frame_keys) {
    return Status::InvalidArgument(
        "a key run of " + std::to_string(count) +
        " keys, more than a keys frame may carry (EMBER_MAX_FRAME_MB is " +
        std::to_string(limits.max_frame_mb) + ")");
  }
  run->first = first;
  run->count = count;
  run->step = step;
  return Status::OK();
}

// The keys of a checked run, in a fresh array.
SArray<Key> MaterializeRun(const KeyRun& run) {
  const size_t n = static_cast<size_t>(run.count);
  SArray<Key> keys;
  keys.reset(new Key[n], n, [](Key* p) { delete[] p; });
  Key* k = keys.data();
  if (run.step == 1) {
    const Key first = static_cast<Key>(run.first);
    for (size_t i = 0; i < n; ++i) k[i] = static_cast<Key>(first + i);
  } else {
    uint64_t key = run.first;
    for (size_t i = 0; i < n; ++i, key += run.step)
      k[i] = static_cast<Key>(key);
  }
  return keys;
}

}  // namespace

Status ParseKVFrames(const Message& msg, size_t value_bytes,
                     const KVLimits& limits, RawKVs* kvs) {
  const auto& d = msg.data;
  // A signature is resolved by the server before this (KeyCache); a
  // request asking to keep its keys has them.
  if (msg.meta.key_cache != kKeyCacheNone &&
      (msg.meta.key_cache != kKeyCacheKeep || !msg.meta.request ||
       msg.meta.key_run || msg.meta.keys_as_requested || d.empty())) {
    return Status::Corruption(
        "key_cache " + std::to_string(msg.meta.key_cache) +
        (msg.meta.key_cache == kKeyCacheSigned
             ? " (a signature of keys) where the keys were expected"
             : " is not a request with its keys"));
  }
  if (msg.meta.keys_as_requested) {
    if (msg.meta.key_run) {
      return Status::Corruption(
          "a message marked both key_run and keys_as_requested");
    }
    PS_RETURN_IF_ERROR(CheckValueBytes(msg, value_bytes));
    return ParseAsRequested(msg, value_bytes, kvs);
  }
  if (d.empty()) {
    if (msg.meta.key_run) {
      return Status::Corruption("a message marked key_run has no frames");
    }
    *kvs = RawKVs();
    return Status::OK();
  }
  if (d.size() != 2 && d.size() != 3) {
    return Status::Corruption("a key-value message has " +
                              std::to_string(d.size()) +
                              " data frames; expected 2 or 3");
  }
  PS_RETURN_IF_ERROR(CheckValueBytes(msg, value_bytes));
  KeyRun run;
  size_t n = 0;
  if (msg.meta.key_run) {
    PS_RETURN_IF_ERROR(ParseKeyRun(d[0], limits, &run));
    n = static_cast<size_t>(run.count);
  } else {
    if (d[0].size() % sizeof(Key) != 0) {
      return Status::Corruption("key frame of " + std::to_string(d[0].size()) +
                                " bytes is not a whole number of keys");
    }
    if (reinterpret_cast<uintptr_t>(d[0].data()) % alignof(Key) != 0) {
      return Status::Corruption("misaligned key frame");
    }
    n = d[0].size() / sizeof(Key);
  }
  if (d[1].size() % value_bytes != 0) {
    return Status::Corruption("value frame of " + std::to_string(d[1].size()) +
                              " bytes is not a whole number of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  const size_t nvals = d[1].size() / value_bytes;
  if (n == 0 && nvals != 0) {
    return Status::Corruption("values without keys");
  }
  SArray<int> lens;
  if (d.size() == 3) {
    if (d[2].size() != n * sizeof(int)) {
      return Status::Corruption("length frame of " +
                                std::to_string(d[2].size()) + " bytes for " +
                                std::to_string(n) + " keys");
    }
    size_t total = 0;
    PS_RETURN_IF_ERROR(ParseLens(d[2], &lens, &total));
    // Only a pull request may carry lengths without values (it asks for
    // them); otherwise the lengths must account for every value.
    bool pull_request = msg.meta.request && !msg.meta.push;
    if (!(pull_request && nvals == 0) && total != nvals) {
      return Status::Corruption("lengths add up to " + std::to_string(total) +
                                " values, frame has " + std::to_string(nvals));
    }
  } else if (n > 0 && nvals % n != 0) {
    return Status::Corruption(std::to_string(nvals) +
                              " values do not divide evenly over " +
                              std::to_string(n) + " keys");
  }
  kvs->keys = msg.meta.key_run ? MaterializeRun(run) : SArray<Key>(d[0]);
  kvs->vals = d[1];
  kvs->lens = lens;
  return Status::OK();
}

}  // namespace ps
