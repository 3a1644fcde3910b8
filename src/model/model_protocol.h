// How ModelClient and ModelServer talk: app ids, the command word of a
// key-value request, and the key of a row.
//
// Control (registration, checkpoints, version) goes through a SimpleApp at
// ModelClient::kAppBase, as protobuf messages (model/model_control.h,
// proto/model_control.proto). Rows travel through KVWorker /
// KVServer<float> apps, one per consistency mode:
//   asp -> kAppBase + 1, bsp -> kAppBase + 2, ssp:s -> kAppBase + 3 + s.
// The command word of a key-value request is (op << 24) | table_id, so the
// server knows the table of every request and tables may share keys.
//
// Keys are placed by key range (partition/key_ring.h), so the model layer
// spreads its own rows over the key space, and thereby evenly over the
// servers, whatever the IDs look like:
// - Row `id` of table t has key id * kRowSpread + Salt(t) (mod 2^64). An odd
//   multiplier is a bijection (the server recovers the ID exactly), and
//   multiplying by 2^64 / golden ratio (Fibonacci hashing) puts sequential
//   IDs 0..N at near-equal spacing around the key space (the three-distance
//   theorem), so every server's range gets N / S of them, give or take a
//   few; hashed IDs stay uniform, IDs that differ only in high bits (slot
//   << 48 | id) spread by their low bits, and the per-table Salt rotates
//   each table's rows to a different start.
// - Chunk c of a dense parameter with C chunks has key
//   Salt(t) + c * DenseStep(C): the C chunks sit at equal spacing, so each
//   of S equal ranges holds floor(C / S) or ceil(C / S) of them.
#ifndef PS_MODEL_MODEL_PROTOCOL_H_
#define PS_MODEL_MODEL_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "node/consistency_config.h"
#include "ps/model.h"
#include "util/mix.h"

namespace ps {
namespace model {

constexpr int kControlApp = ModelClient::kAppBase;
constexpr int64_t kMaxModelStaleness = 64;

// Dense parameters are cut into chunks of this many floats.
constexpr int kDenseChunk = 16384;

enum class RowOp : int {
  kPull = 1,       // pull rows (tables: created on first pull)
  kPush = 2,       // push gradients
  kInitDense = 3,  // push initial values of dense chunks (first one wins)
  kPullDense = 4,  // pull dense chunks (must exist)
};

inline int RowCmd(RowOp op, uint32_t table_id) {
  return static_cast<int>((static_cast<uint32_t>(op) << 24) | table_id);
}
inline RowOp CmdOp(int cmd) {
  return static_cast<RowOp>(static_cast<uint32_t>(cmd) >> 24);
}
inline uint32_t CmdTable(int cmd) {
  return static_cast<uint32_t>(cmd) & 0xFFFFFFu;
}

inline uint64_t Salt(uint32_t table_id) {
  return Fmix64(kGoldenGamma * (table_id + 1));
}

// 2^64 / golden ratio, odd.
constexpr uint64_t kRowSpread = kGoldenGamma;
constexpr uint64_t kRowSpreadInverse = InverseModPow2(kRowSpread);
static_assert(kRowSpread * kRowSpreadInverse == 1, "bad inverse");

inline uint64_t RowKey(uint32_t table_id, uint64_t id) {
  return id * kRowSpread + Salt(table_id);
}
inline uint64_t RowId(uint32_t table_id, uint64_t key) {
  return (key - Salt(table_id)) * kRowSpreadInverse;
}

// The spacing of the chunk keys of a dense parameter with `chunks` chunks.
inline uint64_t DenseStep(uint64_t chunks) {
  return chunks == 0 ? 0 : UINT64_MAX / chunks;
}
inline uint64_t DenseKey(uint32_t table_id, uint64_t chunk, uint64_t chunks) {
  return Salt(table_id) + chunk * DenseStep(chunks);
}
// The chunk a dense key names, or `chunks` (no chunk) if none.
inline uint64_t DenseChunk(uint32_t table_id, uint64_t key, uint64_t chunks) {
  const uint64_t step = DenseStep(chunks);
  const uint64_t offset = key - Salt(table_id);
  if (step == 0 || offset % step != 0 || offset / step >= chunks) {
    return chunks;
  }
  return offset / step;
}

// A table's id: 24 bits of a hash of its name, never 0. The servers refuse
// a second name with the same id.
inline uint32_t TableId(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint32_t id = static_cast<uint32_t>(Fmix64(h) & 0xFFFFFFu);
  return id == 0 ? 1 : id;
}

inline StatusOr<int> KVAppFor(const std::string& consistency) {
  auto c = ConsistencyConfig::Parse(consistency);
  if (!c.ok()) return c.status();
  switch (c->mode) {
    case ConsistencyConfig::Mode::kAsp:
      return ModelClient::kAppBase + 1;
    case ConsistencyConfig::Mode::kBsp:
      return ModelClient::kAppBase + 2;
    case ConsistencyConfig::Mode::kSsp:
      if (c->staleness > kMaxModelStaleness) {
        return Status::InvalidArgument(
            "model tables support ssp staleness up to " +
            std::to_string(kMaxModelStaleness));
      }
      return static_cast<int>(ModelClient::kAppBase + 3 + c->staleness);
  }
  return Status::InvalidArgument("bad consistency");
}

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_MODEL_PROTOCOL_H_
