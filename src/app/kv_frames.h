// The data frames of a key-value message: keys, values and optionally
// lengths (values per key), as in ps-lite. Parsing validates sizes so that
// bad bytes become a Status, never a crash.
#ifndef PS_APP_KV_FRAMES_H_
#define PS_APP_KV_FRAMES_H_

#include "message/message.h"
#include "ps/internal/kv_core.h"

namespace ps {

// Appends kvs's frames to `msg` without copying. No keys: no frames. With
// `keys_as_requested` (a pull response whose keys are the request's), the
// keys frame is left out and msg->meta says so.
void AddKVFrames(const RawKVs& kvs, Message* msg,
                 bool keys_as_requested = false);

// Reads the frames of `msg` into `kvs` (sharing the buffers). kCorruption if
// the frame count or sizes are inconsistent with `value_bytes`-byte values.
// A pull response marked keys_as_requested has no keys frame: kvs->keys is
// left empty for the caller, who knows the keys, to fill and check against
// the values (CheckAsRequested).
[[nodiscard]] Status ParseKVFrames(const Message& msg, size_t value_bytes,
                                   RawKVs* kvs);

// For a keys_as_requested response after kvs->keys was set to the request's
// keys: the values and lengths fit that many keys.
[[nodiscard]] Status CheckAsRequested(const RawKVs& kvs, size_t value_bytes);

}  // namespace ps

#endif  // PS_APP_KV_FRAMES_H_
