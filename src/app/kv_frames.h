// The data frames of a key-value message: keys, values and optionally
// lengths (values per key), as in ps-lite. Parsing validates sizes so that
// bad bytes become a Status, never a crash.
#ifndef PS_APP_KV_FRAMES_H_
#define PS_APP_KV_FRAMES_H_

#include "message/message.h"
#include "ps/internal/kv_core.h"

namespace ps {

// Appends kvs's frames to `msg` without copying. No keys: no frames.
void AddKVFrames(const RawKVs& kvs, Message* msg);

// Reads the frames of `msg` into `kvs` (sharing the buffers). kCorruption if
// the frame count or sizes are inconsistent with `value_bytes`-byte values.
[[nodiscard]] Status ParseKVFrames(const Message& msg, size_t value_bytes,
                                   RawKVs* kvs);

}  // namespace ps

#endif  // PS_APP_KV_FRAMES_H_
