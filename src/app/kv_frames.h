// The data frames of a key-value message: keys, values and optionally
// lengths (values per key), as in ps-lite. Parsing validates sizes so that
// bad bytes become a Status, never a crash.
#ifndef PS_APP_KV_FRAMES_H_
#define PS_APP_KV_FRAMES_H_

#include <cstddef>
#include <cstdint>

#include "message/message.h"
#include "ps/internal/kv_core.h"

namespace ps {

// A key run: keys in equal steps, first, first + step, ..., first +
// (count - 1) * step (step 1: a dense tensor, a range of an MXNet/BytePS-
// style key encoding; larger steps: a strided layout such as ps-lite's
// test_kv_app_benchmark). It travels as a run frame of kKeyRunFrameBytes,
// the three words first, count, step as uint64 in host byte order, instead
// of count keys; meta.key_run marks it (docs/protocol.md, "Key runs").
// Only where that is shorter: count * sizeof(Key) > 24.
struct KeyRun {
  uint64_t first = 0;
  uint64_t count = 0;
  uint64_t step = 0;
};
constexpr size_t kKeyRunFrameBytes = 3 * sizeof(uint64_t);

// What the caller of AddKVFrames knows of the keys, which decides how much
// it takes to find a run. The first two keys and the last one rule out all
// but runs; a run in steps of 1 of sorted and unique keys needs nothing
// more, any other run every gap looked at.
enum class KeyOrder {
  kUnknown,       // anything
  kSortedUnique,  // ascending without duplicates
  kAsIs,          // never a run: the keys frame as it is
};

// True, and the run in *run, if `keys` go as a run frame (see above),
// given what `order` says of them.
bool FindKeyRun(const SArray<Key>& keys, KeyOrder order, KeyRun* run);

// Appends kvs's frames to `msg` without copying; keys that are a run
// (FindKeyRun) go as a run frame and msg->meta.key_run says so. No keys: no
// frames. With `keys_as_requested` (a pull response whose keys are the
// request's), the keys frame is left out and msg->meta says so.
void AddKVFrames(const RawKVs& kvs, Message* msg,
                 bool keys_as_requested = false,
                 KeyOrder order = KeyOrder::kUnknown);

// AddKVFrames for a request whose caller looked for a run already
// (FindKeyRun): `run` if the keys are one, null if they are not.
void AddKVFramesWithRun(const RawKVs& kvs, const KeyRun* run, Message* msg);

// Key caching (docs/protocol.md, "Key caching"): a worker that sends the
// same keys to a server again sends their signature instead, once the
// server was asked to keep them. Meta::key_cache says which of these a
// message is.
enum KeyCacheMode : int {
  kKeyCacheNone = 0,
  kKeyCacheKeep = 1,     // a request with its keys: keep them
  kKeyCacheSigned = 2,   // a request whose keys frame is a signature
  kKeyCacheUnknown = 3,  // a refusal: the server holds no such keys
  kKeyCacheOff = 4,      // a refusal: the server keeps no keys at all
};

// Which keys: the two halves of their 128-bit XXH3 hash (over the keys'
// bytes) and their count. It travels as a frame of kKeySignatureBytes, the
// three words in host byte order.
struct KeySignature {
  uint64_t low = 0;
  uint64_t high = 0;
  uint64_t count = 0;
  bool operator==(const KeySignature& o) const {
    return low == o.low && high == o.high && count == o.count;
  }
};
constexpr size_t kKeySignatureBytes = 3 * sizeof(uint64_t);

KeySignature SignKeys(const SArray<Key>& keys);

// Appends kvs's frames to `msg` with `sig` in place of the keys, and sets
// msg->meta.key_cache to kKeyCacheSigned.
void AddSignedKVFrames(const RawKVs& kvs, const KeySignature& sig,
                       Message* msg);

// Reads a signature frame: kCorruption unless it is kKeySignatureBytes
// long with a count of at least 1.
[[nodiscard]] Status ParseKeySignature(const SArray<char>& frame,
                                       KeySignature* sig);

// A receiver's limits (docs/protocol.md, "Limits"), which bound what a run
// frame may stand for: no more keys than a request may have, nor than a
// keys frame could carry.
struct KVLimits {
  int max_keys_per_request = 1 << 28;  // EMBER_MAX_KEYS_PER_REQUEST
  int max_frame_mb = 1024;             // EMBER_MAX_FRAME_MB
};

// Reads the frames of `msg` into `kvs` (sharing the buffers). kCorruption if
// the frame count or sizes are inconsistent with `value_bytes`-byte values.
// A run frame (meta.key_run) becomes a fresh keys array, after every check
// has passed: kCorruption if it is malformed (not 24 bytes, a count or
// step of 0, keys beyond kMaxKey), kInvalidArgument if it stands for more
// keys than `limits` allow. A pull response marked keys_as_requested has no
// keys frame: kvs->keys is left empty for the caller, who knows the keys, to
// fill and check against the values (CheckAsRequested).
[[nodiscard]] Status ParseKVFrames(const Message& msg, size_t value_bytes,
                                   const KVLimits& limits, RawKVs* kvs);

// For a keys_as_requested response after kvs->keys was set to the request's
// keys: the values and lengths fit that many keys.
[[nodiscard]] Status CheckAsRequested(const RawKVs& kvs, size_t value_bytes);

}  // namespace ps

#endif  // PS_APP_KV_FRAMES_H_
