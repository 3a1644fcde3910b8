// Checkpoint files: one server's shard of the model (dense parameters,
// embedding tables and their optimizer state) written to and read back from
// a file, independent of the stores that hold the model in memory.
//
// File format (all integers little-endian):
//
//   offset  size  field
//        0     8  magic "EMBERCKP"
//        8     4  format version (kCheckpointFormatVersion)
//       12     4  reserved, 0
//       16     8  payload length in bytes
//       24     4  CRC32C (Castagnoli) of the payload
//       28     4  CRC32C of bytes 0..27 of the header
//       32     -  payload: a serialized ember.model.Model (proto/model.proto)
//
// The file is exactly 32 + payload length bytes long. Within the payload an
// embedding table may be split over several segments (see model.proto), so
// that neither the writer nor the reader holds a second copy of a whole
// table and no protobuf message exceeds 2 GiB.
//
// Only float32 dense parameters and rows are written and read.
//
// Thread safety: the functions are thread-safe; they share no state. Two
// concurrent writes of the same path both complete, and the file holds one of
// the two shards whole.
#ifndef PS_MODEL_CHECKPOINT_H_
#define PS_MODEL_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace model {

// One dense parameter, or the chunk of it that this server owns.
struct DenseShard {
  std::string name;
  // The shape of the whole parameter; empty for a scalar.
  std::vector<int64_t> shape;
  // Which chunk of the parameter this is (0 when it is not split), and the
  // index of values[0] in the flattened parameter. offset + values.size()
  // must not exceed the number of elements the shape gives.
  uint64_t chunk = 0;
  uint64_t offset = 0;
  std::vector<float> values;
  // Optimizer spec and state; the layout of slots is the optimizer's.
  std::string optimizer;
  std::vector<float> slots;
};

// The rows of one embedding table that this server owns.
struct TableShard {
  std::string name;
  uint32_t table_id = 0;
  int dim = 0;  // floats per row, >= 1
  std::string initializer;
  std::string optimizer;
  int slot_floats = 0;  // optimizer state floats per row, >= 0
  // Row i has id ids[i], weights [i*dim, (i+1)*dim) and slots
  // [i*slot_floats, (i+1)*slot_floats). Ids are distinct.
  std::vector<uint64_t> ids;
  std::vector<float> weights;  // ids.size() * dim
  std::vector<float> slots;    // ids.size() * slot_floats
};

// One server's shard of the model.
struct ModelShard {
  int64_t version = 0;
  int server_rank = 0;  // 0 <= server_rank < num_servers
  int num_servers = 1;
  // The key ring the shard was cut by (src/partition/key_ring.h): its epoch,
  // virtual nodes per server (0 when no ring is recorded) and server ids in
  // ring order.
  uint64_t ring_epoch = 0;
  int ring_virtual_nodes = 0;
  std::vector<int> ring_server_ids;
  // The ring's ranges (ShardInfo in proto/model.proto): begins and owners of
  // equal length, empty when no ring is recorded; placement and replicas.
  int ring_placement = 0;
  std::vector<uint64_t> ring_begins;
  std::vector<int> ring_owners;
  int ring_replicas = 0;
  // Names are distinct among `dense` for a given chunk; table ids and table
  // names are distinct among `tables`.
  std::vector<DenseShard> dense;
  std::vector<TableShard> tables;
};

struct CheckpointWriteOptions {
  // Tables are written in segments of at most this many payload bytes (at
  // least one row each). Bounds the writer's extra memory; tests lower it to
  // exercise segmentation.
  size_t max_segment_bytes = size_t{64} << 20;
};

inline constexpr char kCheckpointMagic[8] = {'E', 'M', 'B', 'E',
                                             'R', 'C', 'K', 'P'};
inline constexpr uint32_t kCheckpointFormatVersion = 1;
inline constexpr size_t kCheckpointHeaderSize = 32;

// Checks that `shard` is consistent (the sizes above, distinct ids of tables
// and of dense chunks, valid ranks and dims); returns InvalidArgument naming
// the first problem. Does not check that row ids are distinct.
[[nodiscard]] Status ValidateShard(const ModelShard& shard);

// Writes `shard` to `path` atomically: the data goes to a temporary file
// "<path>.tmp.<pid>.<n>" in the same directory, which is fsynced and renamed
// over `path`, and the directory is fsynced. On any error the temporary file
// is removed and whatever was at `path` before is left untouched. Blocks on
// disk I/O.
//
// Errors: InvalidArgument if ValidateShard fails or a dense chunk is too big
// for one protobuf message (about 2 GiB); NotFound if the directory does not
// exist; Unavailable for other I/O failures (no space, permissions, ...),
// with the system's message.
[[nodiscard]] Status WriteCheckpoint(
    const std::string& path, const ModelShard& shard,
    const CheckpointWriteOptions& options = CheckpointWriteOptions());

// Adds a shard's parts to a checkpoint file being written by
// WriteCheckpointStream, so that a server can write its shard without
// holding it all in a ModelShard. Each part is checked as ValidateShard
// would check it (InvalidArgument names the problem) and written at once.
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // One dense parameter or chunk of one.
  [[nodiscard]] virtual Status AddDense(const DenseShard& dense) = 0;
  // Rows of the table `rows` describes (its name, id, dim, specs and slot
  // count, which every call for the table repeats), of a table that has
  // `table_rows` rows in all: the calls for one table must add exactly that
  // many (WriteCheckpointStream fails otherwise). `rows` may hold any number
  // of rows, 0 included; large parts are cut into segments.
  [[nodiscard]] virtual Status AddTableRows(const TableShard& rows,
                                            uint64_t table_rows) = 0;
};

// Writes a checkpoint as WriteCheckpoint does, atomically, with the version,
// rank and ring of `header` (whose dense and tables must be empty) and the
// parts that `fill` adds to the sink it is given (valid during the call).
// Errors: fill's own, those of WriteCheckpoint, and InvalidArgument if a
// table got another number of rows than it announced.
[[nodiscard]] Status WriteCheckpointStream(
    const std::string& path, const ModelShard& header,
    const std::function<Status(CheckpointSink*)>& fill,
    const CheckpointWriteOptions& options = CheckpointWriteOptions());

// Reads the checkpoint at `path`. Blocks on disk I/O. Memory use is the
// shard plus one segment.
//
// Errors: NotFound if there is no file at `path`; InvalidArgument if it is
// not a regular file; Unavailable if it cannot be read; Corruption, with a
// message saying which, if the file is truncated, is not an Ember checkpoint
// (wrong magic), has an unsupported format version, fails a checksum, does
// not parse, or parses into an inconsistent shard (ValidateShard, a dtype
// other than float32, segments of one table that disagree).
[[nodiscard]] StatusOr<ModelShard> ReadCheckpoint(const std::string& path);

}  // namespace model
}  // namespace ps

#endif  // PS_MODEL_CHECKPOINT_H_
