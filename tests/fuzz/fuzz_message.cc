// Fuzz target: a received message as the van sees it. The input is split
// into a header and data frames (FuzzFrames); the header is decoded, checked
// against the frames, and, when it decodes, the key-value frames are parsed
// as a server and as a worker would (key runs included), and a node table's
// ring is built.
// Nothing may crash, leak or allocate by an unchecked number.
#include <cstddef>
#include <cstdint>

#include "app/kv_frames.h"
#include "fuzz_frames.h"
#include "message/message.h"
#include "partition/key_ring.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<ps::SArray<char>> frames = ps::fuzz::SplitFrames(data, size);
  if (frames.empty()) return 0;
  ps::Message msg;
  std::vector<uint64_t> frame_bytes;
  ps::Status s = ps::DecodeMeta(frames[0].data(), frames[0].size(), &msg.meta,
                                &frame_bytes);
  if (!s.ok()) return 0;
  msg.data.assign(frames.begin() + 1, frames.end());
  if (!ps::CheckFrames(frame_bytes, msg.data).ok()) return 0;
  (void)msg.meta.DebugString();
  // Small limits: a key run may stand for at most 2^16 keys here.
  const ps::KVLimits limits{/*max_keys_per_request=*/1 << 16,
                            /*max_frame_mb=*/1};
  for (size_t value_bytes : {1, 4, 8}) {
    ps::RawKVs kvs;
    if (ps::ParseKVFrames(msg, value_bytes, limits, &kvs).ok() &&
        msg.meta.keys_as_requested) {
      // The worker fills in the request's keys: any sorted array will do.
      kvs.keys = ps::SArray<ps::Key>(kvs.vals.size() / value_bytes);
      for (size_t i = 0; i < kvs.keys.size(); ++i) kvs.keys[i] = i;
      (void)ps::CheckAsRequested(kvs, value_bytes);
    }
  }
  const ps::RingInfo& r = msg.meta.ring;
  auto ring = ps::KeyRing::FromRanges(r.server_ids, r.begins, r.owners, r.epoch,
                                      static_cast<ps::Placement>(r.placement));
  if (ring.ok()) {
    for (ps::Key k : {ps::Key{0}, ps::Key{1} << 63, ~ps::Key{0}}) {
      (void)ring->Owner(k);
    }
  }
  return 0;
}
