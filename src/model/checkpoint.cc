#include "model/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>
#include <unordered_map>
#include <utility>

#include "model.pb.h"
#include "util/coding.h"
#include "util/crc32c.h"
#include "util/file.h"

namespace ps {
namespace model {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CopyingInputStream;
using google::protobuf::io::CopyingInputStreamAdaptor;
using google::protobuf::io::CopyingOutputStream;
using google::protobuf::io::CopyingOutputStreamAdaptor;
using google::protobuf::io::ZeroCopyInputStream;

// Bounds that keep one row (8 + 4 * (dim + slot_floats) bytes) far below
// protobuf's 2 GiB message limit, so any table can be cut into segments.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxSlotFloats = int64_t{1} << 26;

// Buffer size between protobuf and the file descriptor.
constexpr int kIoBlockBytes = 1 << 20;

// Writes everything it is given to a file descriptor and keeps the CRC32C of
// it. Used through a CopyingOutputStreamAdaptor, which batches protobuf's
// small writes.
class CrcFileWriter : public CopyingOutputStream {
 public:
  explicit CrcFileWriter(int fd) : fd_(fd) {}

  bool Write(const void* buffer, int size) override {
    const char* p = static_cast<const char*>(buffer);
    crc_ = Crc32c(crc_, p, size);
    bytes_ += size;
    while (size > 0) {
      ssize_t n = write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += n;
      size -= static_cast<int>(n);
    }
    return true;
  }

  uint32_t crc() const { return crc_; }
  uint64_t bytes() const { return bytes_; }
  int error() const { return error_; }

 private:
  const int fd_;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
  int error_ = 0;
};

// Reads at most `limit` bytes from a file descriptor and keeps the CRC32C of
// what it read. Every byte is read from the file once, so the CRC covers the
// payload in order even when protobuf backs up and rereads a buffer.
class CrcFileReader : public CopyingInputStream {
 public:
  CrcFileReader(int fd, uint64_t limit) : fd_(fd), remaining_(limit) {}

  int Read(void* buffer, int size) override {
    if (remaining_ == 0 || size <= 0) return 0;
    size_t want = static_cast<size_t>(
        std::min<uint64_t>(remaining_, static_cast<uint64_t>(size)));
    ssize_t n;
    do {
      n = read(fd_, buffer, want);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      error_ = errno;
      return -1;
    }
    if (n == 0) {
      short_ = true;  // the file shrank after we checked its size
      return 0;
    }
    crc_ = Crc32c(crc_, buffer, static_cast<size_t>(n));
    remaining_ -= static_cast<uint64_t>(n);
    return static_cast<int>(n);
  }

  // Reads and checksums whatever the parser left unread.
  void Drain() {
    std::vector<char> buffer(kIoBlockBytes);
    while (Read(buffer.data(), kIoBlockBytes) > 0) {
    }
  }

  uint32_t crc() const { return crc_; }
  uint64_t remaining() const { return remaining_; }
  bool short_read() const { return short_; }
  int error() const { return error_; }

 private:
  const int fd_;
  uint64_t remaining_;
  uint32_t crc_ = 0;
  bool short_ = false;
  int error_ = 0;
};

// ---- Writing
// -----------------------------------------------------------------

void FillInfo(const TableShard& table, ember::model::EmbeddingTableInfo* info) {
  info->set_name(table.name);
  info->set_dim(table.dim);
  info->set_initializer(table.initializer);
  info->set_optimizer(table.optimizer);
  info->set_dtype(ember::model::DT_FLOAT32);
  info->set_table_id(table.table_id);
}

// Serializes `piece` (one top-level entry of the Model) to `out`. Entries
// concatenate into one valid Model on the wire.
Status WritePiece(const ember::model::Model& piece,
                  CopyingOutputStreamAdaptor* out, const CrcFileWriter& writer,
                  const std::string& what) {
  if (piece.ByteSizeLong() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument(what +
                                   " is larger than a protobuf message can be");
  }
  if (!piece.SerializeToZeroCopyStream(out)) {
    if (writer.error() != 0)
      return IoError("cannot write " + what, writer.error());
    return Status::Internal("cannot serialize " + what);
  }
  return Status::OK();
}

Status ValidateDense(const DenseShard& dense);
Status ValidateTableRows(const TableShard& table);

Status WriteHead(const ModelShard& shard, CopyingOutputStreamAdaptor* out,
                 const CrcFileWriter& writer) {
  ember::model::Model head;
  head.set_version(shard.version);
  ember::model::ShardInfo* info = head.mutable_shard();
  info->set_server_rank(shard.server_rank);
  info->set_num_servers(shard.num_servers);
  info->set_ring_epoch(shard.ring_epoch);
  info->set_ring_virtual_nodes(shard.ring_virtual_nodes);
  for (int id : shard.ring_server_ids) info->add_ring_server_ids(id);
  info->set_ring_placement(static_cast<uint32_t>(shard.ring_placement));
  for (uint64_t b : shard.ring_begins) info->add_ring_begins(b);
  for (int o : shard.ring_owners) info->add_ring_owners(o);
  info->set_ring_replicas(shard.ring_replicas);
  return WritePiece(head, out, writer, "the shard header");
}

// Writes the parts of a shard as they come, each checked as ValidateShard
// checks a whole shard, and tables cut into segments.
class StreamSink : public CheckpointSink {
 public:
  StreamSink(const CheckpointWriteOptions& options,
             CopyingOutputStreamAdaptor* out, const CrcFileWriter& writer)
      : options_(options), out_(out), writer_(writer) {}

  Status AddDense(const DenseShard& dense) override {
    PS_RETURN_IF_ERROR(ValidateDense(dense));
    if (!dense_chunks_.emplace(dense.name, dense.chunk).second) {
      return Status::InvalidArgument("dense parameter '" + dense.name +
                                     "' chunk " + std::to_string(dense.chunk) +
                                     " appears twice");
    }
    ember::model::Model piece;
    ember::model::DenseParam* param = piece.add_dense_params();
    param->set_name(dense.name);
    for (int64_t d : dense.shape) param->add_shape(d);
    param->set_dtype(ember::model::DT_FLOAT32);
    EncodeFloats(dense.values.data(), dense.values.size(),
                 param->mutable_content());
    param->set_chunk(dense.chunk);
    param->set_offset(dense.offset);
    param->set_optimizer(dense.optimizer);
    EncodeFloats(dense.slots.data(), dense.slots.size(),
                 param->mutable_slots());
    return WritePiece(piece, out_, writer_, "dense parameter " + dense.name);
  }

  Status AddTableRows(const TableShard& table, uint64_t table_rows) override {
    PS_RETURN_IF_ERROR(ValidateTableRows(table));
    const std::string what = "embedding table '" + table.name + "'";
    auto [it, fresh] = tables_.try_emplace(table.table_id);
    Announced& a = it->second;
    if (fresh) {
      if (!table_names_.insert(table.name).second) {
        return Status::InvalidArgument(what + " appears twice");
      }
      a = Announced{table.name,
                    table.dim,
                    table.initializer,
                    table.optimizer,
                    table.slot_floats,
                    table_rows,
                    0};
    } else if (a.name != table.name || a.dim != table.dim ||
               a.initializer != table.initializer ||
               a.optimizer != table.optimizer ||
               a.slot_floats != table.slot_floats || a.rows != table_rows) {
      return Status::InvalidArgument("table id " +
                                     std::to_string(table.table_id) +
                                     " appears twice, with other specs");
    }
    const size_t rows = table.ids.size();
    if (rows > a.rows - a.written) {
      return Status::InvalidArgument(what + ": more rows than the " +
                                     std::to_string(a.rows) + " announced");
    }
    a.written += rows;
    // An empty table still gets one segment, to keep its info.
    if (rows == 0 && !(fresh && table_rows == 0)) return Status::OK();
    const size_t dim = static_cast<size_t>(table.dim);
    const size_t slot_floats = static_cast<size_t>(table.slot_floats);
    const size_t row_bytes =
        sizeof(uint64_t) + sizeof(float) * (dim + slot_floats);
    const size_t rows_per_segment =
        std::max<size_t>(1, options_.max_segment_bytes / row_bytes);
    size_t begin = 0;
    do {
      size_t end = std::min(rows, begin + rows_per_segment);
      ember::model::Model piece;
      ember::model::EmbeddingTable* segment = piece.add_embedding_tables();
      FillInfo(table, segment->mutable_info());
      segment->set_table_rows(table_rows);
      segment->set_slot_floats(table.slot_floats);
      segment->mutable_ids()->Add(table.ids.begin() + begin,
                                  table.ids.begin() + end);
      EncodeFloats(table.weights.data() + begin * dim, (end - begin) * dim,
                   segment->mutable_rows());
      EncodeFloats(table.slots.data() + begin * slot_floats,
                   (end - begin) * slot_floats, segment->mutable_slots());
      PS_RETURN_IF_ERROR(
          WritePiece(piece, out_, writer_, "embedding table " + table.name));
      begin = end;
    } while (begin < rows);
    return Status::OK();
  }

  // Every table got the rows it announced.
  Status Finish() const {
    for (const auto& t : tables_) {
      if (t.second.written != t.second.rows) {
        return Status::InvalidArgument(
            "embedding table '" + t.second.name + "' announced " +
            std::to_string(t.second.rows) + " rows but got " +
            std::to_string(t.second.written));
      }
    }
    return Status::OK();
  }

 private:
  struct Announced {
    std::string name;
    int dim;
    std::string initializer, optimizer;
    int slot_floats;
    uint64_t rows, written;
  };

  const CheckpointWriteOptions& options_;
  CopyingOutputStreamAdaptor* const out_;
  const CrcFileWriter& writer_;
  std::set<std::pair<std::string, uint64_t>> dense_chunks_;
  std::unordered_map<uint32_t, Announced> tables_;
  std::set<std::string> table_names_;
};

Status WriteAllAt(int fd, const char* data, size_t n, off_t offset) {
  while (n > 0) {
    ssize_t w = pwrite(fd, data, n, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write checkpoint header", errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
  return Status::OK();
}

// Writes header and payload to the open, empty file `fd`. The header goes
// last, once the payload's length and checksum are known.
Status WriteFile(int fd, const ModelShard& head,
                 const std::function<Status(CheckpointSink*)>& fill,
                 const CheckpointWriteOptions& options) {
  char header[kCheckpointHeaderSize] = {};
  PS_RETURN_IF_ERROR(WriteAllAt(fd, header, sizeof(header), 0));
  if (lseek(fd, kCheckpointHeaderSize, SEEK_SET) < 0) {
    return IoError("cannot seek in checkpoint", errno);
  }
  CrcFileWriter writer(fd);
  {
    CopyingOutputStreamAdaptor out(&writer, kIoBlockBytes);
    PS_RETURN_IF_ERROR(WriteHead(head, &out, writer));
    StreamSink sink(options, &out, writer);
    PS_RETURN_IF_ERROR(fill(&sink));
    PS_RETURN_IF_ERROR(sink.Finish());
    if (!out.Flush()) return IoError("cannot write checkpoint", writer.error());
  }
  std::memcpy(header, kCheckpointMagic, sizeof(kCheckpointMagic));
  EncodeFixed32(header + 8, kCheckpointFormatVersion);
  EncodeFixed32(header + 12, 0);
  EncodeFixed64(header + 16, writer.bytes());
  EncodeFixed32(header + 24, writer.crc());
  EncodeFixed32(header + 28, Crc32c(0, header, 28));
  return WriteAllAt(fd, header, sizeof(header), 0);
}

// ---- Reading
// -----------------------------------------------------------------

// Reads one length-delimited message; false if it does not parse or does not
// fill exactly its declared length.
bool ReadMessage(CodedInputStream* in, google::protobuf::MessageLite* message) {
  uint32_t length;
  if (!in->ReadVarint32(&length) || length > static_cast<uint32_t>(INT_MAX)) {
    return false;
  }
  CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
  bool ok = message->MergePartialFromCodedStream(in) &&
            in->ConsumedEntireMessage() && in->BytesUntilLimit() == 0;
  in->PopLimit(limit);
  return ok;
}

bool SkipField(CodedInputStream* in, uint32_t wire_type) {
  switch (wire_type) {
    case 0: {
      uint64_t unused;
      return in->ReadVarint64(&unused);
    }
    case 1:
      return in->Skip(8);
    case 2: {
      uint32_t length;
      return in->ReadVarint32(&length) &&
             length <= static_cast<uint32_t>(INT_MAX) &&
             in->Skip(static_cast<int>(length));
    }
    case 5:
      return in->Skip(4);
    default:  // groups are not used by any version of model.proto
      return false;
  }
}

Status ConvertDense(ember::model::DenseParam* param, DenseShard* dense) {
  dense->name = std::move(*param->mutable_name());
  if (param->dtype() != ember::model::DT_FLOAT32) {
    return Status::Corruption("dense parameter " + dense->name + " has dtype " +
                              std::to_string(param->dtype()) +
                              "; only float32 is supported");
  }
  if (param->content().size() % sizeof(float) != 0 ||
      param->slots().size() % sizeof(float) != 0) {
    return Status::Corruption("dense parameter " + dense->name +
                              " has a partial float32 element");
  }
  dense->shape.assign(param->shape().begin(), param->shape().end());
  dense->chunk = param->chunk();
  dense->offset = param->offset();
  AppendFloats(param->content(), &dense->values);
  dense->optimizer = std::move(*param->mutable_optimizer());
  AppendFloats(param->slots(), &dense->slots);
  return Status::OK();
}

// Appends one segment to the table it belongs to.
class TableAssembler {
 public:
  TableAssembler(std::vector<TableShard>* tables, uint64_t payload_bytes)
      : tables_(tables), payload_bytes_(payload_bytes) {}

  Status Add(ember::model::EmbeddingTable* segment) {
    const ember::model::EmbeddingTableInfo& info = segment->info();
    const std::string& name = info.name();
    if (info.dtype() != ember::model::DT_FLOAT32) {
      return Status::Corruption("embedding table " + name + " has dtype " +
                                std::to_string(info.dtype()) +
                                "; only float32 is supported");
    }
    if (info.dim() < 1 || info.dim() > kMaxDim) {
      return Status::Corruption("embedding table " + name + " has dim " +
                                std::to_string(info.dim()));
    }
    if (segment->slot_floats() < 0 || segment->slot_floats() > kMaxSlotFloats) {
      return Status::Corruption("embedding table " + name + " has " +
                                std::to_string(segment->slot_floats()) +
                                " slot floats per row");
    }
    const uint64_t ids = static_cast<uint64_t>(segment->ids_size());
    const uint64_t row_bytes =
        sizeof(float) * static_cast<uint64_t>(info.dim());
    const uint64_t slot_bytes =
        sizeof(float) * static_cast<uint64_t>(segment->slot_floats());
    // ids * row_bytes cannot overflow: ids < 2^31 and row_bytes <= 2^26.
    if (segment->rows().size() != ids * row_bytes ||
        segment->slots().size() != ids * slot_bytes) {
      return Status::Corruption(
          "embedding table " + name +
          ": inconsistent sizes: " + std::to_string(ids) + " ids of dim " +
          std::to_string(info.dim()) + " but " +
          std::to_string(segment->rows().size()) + " bytes of rows and " +
          std::to_string(segment->slots().size()) + " bytes of slots");
    }

    auto it = index_.find(info.table_id());
    TableShard* table;
    if (it == index_.end()) {
      index_.emplace(info.table_id(), tables_->size());
      expected_rows_.push_back(segment->table_rows());
      tables_->emplace_back();
      table = &tables_->back();
      table->name = name;
      table->table_id = info.table_id();
      table->dim = static_cast<int>(info.dim());
      table->initializer = info.initializer();
      table->optimizer = info.optimizer();
      table->slot_floats = segment->slot_floats();
      // The row count comes from the file; the payload size bounds what it
      // can honestly claim, so a corrupt count cannot make us over-allocate.
      uint64_t rows = std::min(segment->table_rows(),
                               payload_bytes_ / (sizeof(uint64_t) + row_bytes));
      table->ids.reserve(rows);
      table->weights.reserve(rows * table->dim);
      if (slot_bytes > 0) table->slots.reserve(rows * table->slot_floats);
    } else {
      table = &(*tables_)[it->second];
      const char* differs = nullptr;
      if (table->name != name) {
        differs = "name";
      } else if (table->dim != info.dim()) {
        differs = "dim";
      } else if (table->initializer != info.initializer()) {
        differs = "initializer";
      } else if (table->optimizer != info.optimizer()) {
        differs = "optimizer";
      } else if (table->slot_floats != segment->slot_floats()) {
        differs = "slot floats";
      } else if (expected_rows_[it->second] != segment->table_rows()) {
        differs = "row count";
      }
      if (differs != nullptr) {
        return Status::Corruption("segments of embedding table " +
                                  std::to_string(info.table_id()) +
                                  " disagree on its " + differs);
      }
    }
    table->ids.insert(table->ids.end(), segment->ids().begin(),
                      segment->ids().end());
    AppendFloats(segment->rows(), &table->weights);
    AppendFloats(segment->slots(), &table->slots);
    return Status::OK();
  }

  // Checks that every table got the rows its segments announced.
  Status Finish() const {
    for (size_t i = 0; i < tables_->size(); ++i) {
      const TableShard& table = (*tables_)[i];
      if (table.ids.size() != expected_rows_[i]) {
        return Status::Corruption(
            "embedding table " + table.name + " should have " +
            std::to_string(expected_rows_[i]) + " rows but has " +
            std::to_string(table.ids.size()));
      }
    }
    return Status::OK();
  }

 private:
  std::vector<TableShard>* const tables_;  // borrowed for the assembler's life
  const uint64_t payload_bytes_;
  std::unordered_map<uint32_t, size_t> index_;  // table id -> index in tables_
  std::vector<uint64_t> expected_rows_;         // parallel to tables_
};

// Parses the payload one top-level entry at a time, so no more than one
// segment is held as a protobuf message.
Status ParsePayload(ZeroCopyInputStream* input, uint64_t payload_bytes,
                    ModelShard* shard) {
  ember::model::ShardInfo info;
  TableAssembler assembler(&shard->tables, payload_bytes);
  const Status parse_error =
      Status::Corruption("payload does not parse as a Model");
  while (true) {
    // A fresh CodedInputStream per entry: its byte limit (2 GiB) then
    // applies to one entry, not to the whole file.
    CodedInputStream in(input);
    uint32_t tag = in.ReadTag();
    if (tag == 0) {
      if (in.ConsumedEntireMessage()) break;
      return parse_error;
    }
    const uint32_t field = tag >> 3;
    const uint32_t wire_type = tag & 7;
    const bool length_delimited = wire_type == 2;
    switch (field) {
      case 1: {  // version
        uint64_t version;
        if (wire_type != 0 || !in.ReadVarint64(&version)) return parse_error;
        shard->version = static_cast<int64_t>(version);
        break;
      }
      case 2: {  // dense_params
        ember::model::DenseParam param;
        if (!length_delimited || !ReadMessage(&in, &param)) return parse_error;
        shard->dense.emplace_back();
        PS_RETURN_IF_ERROR(ConvertDense(&param, &shard->dense.back()));
        break;
      }
      case 3: {  // embedding_tables
        ember::model::EmbeddingTable segment;
        if (!length_delimited || !ReadMessage(&in, &segment))
          return parse_error;
        PS_RETURN_IF_ERROR(assembler.Add(&segment));
        break;
      }
      case 4:  // shard; repeated occurrences merge, as protobuf's do
        if (!length_delimited || !ReadMessage(&in, &info)) return parse_error;
        break;
      default:  // a field from a later model.proto: skip it
        if (!SkipField(&in, wire_type)) return parse_error;
        break;
    }
  }
  PS_RETURN_IF_ERROR(assembler.Finish());
  shard->server_rank = info.server_rank();
  shard->num_servers = info.num_servers();
  shard->ring_epoch = info.ring_epoch();
  shard->ring_virtual_nodes = info.ring_virtual_nodes();
  shard->ring_server_ids.assign(info.ring_server_ids().begin(),
                                info.ring_server_ids().end());
  if (info.ring_placement() > 1) {
    return Status::Corruption("unknown ring placement " +
                              std::to_string(info.ring_placement()));
  }
  if (info.ring_begins_size() != info.ring_owners_size()) {
    return Status::Corruption(
        "the recorded ring has " + std::to_string(info.ring_begins_size()) +
        " range beginnings but " + std::to_string(info.ring_owners_size()) +
        " owners");
  }
  shard->ring_placement = static_cast<int>(info.ring_placement());
  shard->ring_begins.assign(info.ring_begins().begin(),
                            info.ring_begins().end());
  shard->ring_owners.assign(info.ring_owners().begin(),
                            info.ring_owners().end());
  shard->ring_replicas = info.ring_replicas();
  return Status::OK();
}

// Reads up to n bytes; returns how many, or -1 with errno set.
ssize_t ReadFully(int fd, char* buffer, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buffer + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

// Checks the first `got` bytes of a file of `file_size` bytes as a header and
// extracts the payload's length and checksum.
Status CheckHeader(const std::string& path, const char* header, size_t got,
                   uint64_t file_size, uint64_t* payload_bytes,
                   uint32_t* payload_crc) {
  const std::string truncated =
      path + " is truncated: " + std::to_string(file_size) +
      " bytes, shorter than the " + std::to_string(kCheckpointHeaderSize) +
      "-byte header";
  const size_t magic_bytes = std::min(got, sizeof(kCheckpointMagic));
  if (std::memcmp(header, kCheckpointMagic, magic_bytes) != 0) {
    return Status::Corruption(path + " is not an Ember checkpoint (bad magic)");
  }
  if (got < 12) return Status::Corruption(truncated);
  uint32_t version = DecodeFixed32(header + 8);
  if (version != kCheckpointFormatVersion) {
    return Status::Corruption(path +
                              " has unsupported checkpoint format version " +
                              std::to_string(version) + " (this build reads " +
                              std::to_string(kCheckpointFormatVersion) + ")");
  }
  if (got < kCheckpointHeaderSize) return Status::Corruption(truncated);
  if (Crc32c(0, header, 28) != DecodeFixed32(header + 28)) {
    return Status::Corruption(path + ": header checksum mismatch");
  }
  *payload_bytes = DecodeFixed64(header + 16);
  *payload_crc = DecodeFixed32(header + 24);
  const uint64_t available = file_size - kCheckpointHeaderSize;
  if (*payload_bytes > available) {
    return Status::Corruption(path + " is truncated: the header announces " +
                              std::to_string(*payload_bytes) +
                              " payload bytes, the file has " +
                              std::to_string(available));
  }
  if (*payload_bytes < available) {
    return Status::Corruption(path + " has " +
                              std::to_string(available - *payload_bytes) +
                              " bytes after the payload");
  }
  return Status::OK();
}

}  // namespace

namespace {

Status ValidateHead(const ModelShard& shard) {
  if (shard.num_servers < 1 || shard.server_rank < 0 ||
      shard.server_rank >= shard.num_servers) {
    return Status::InvalidArgument(
        "server rank " + std::to_string(shard.server_rank) + " of " +
        std::to_string(shard.num_servers) + " servers");
  }
  if (shard.ring_virtual_nodes < 0) {
    return Status::InvalidArgument("negative ring virtual node count");
  }
  if (shard.ring_begins.size() != shard.ring_owners.size()) {
    return Status::InvalidArgument("ring ranges without owners");
  }
  return Status::OK();
}

Status ValidateDense(const DenseShard& dense) {
  const std::string what = "dense parameter '" + dense.name + "' chunk " +
                           std::to_string(dense.chunk);
  if (dense.name.empty()) {
    return Status::InvalidArgument("dense parameter without a name");
  }
  uint64_t elements = 1;
  for (int64_t d : dense.shape) {
    if (d < 0 ||
        __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) {
      return Status::InvalidArgument(what + " has an invalid shape");
    }
  }
  if (dense.offset > elements ||
      dense.values.size() > elements - dense.offset) {
    return Status::InvalidArgument(
        what + ": " + std::to_string(dense.values.size()) +
        " values at offset " + std::to_string(dense.offset) +
        " do not fit its shape of " + std::to_string(elements) + " elements");
  }
  return Status::OK();
}

Status ValidateTableRows(const TableShard& table) {
  const std::string what = "embedding table '" + table.name + "'";
  if (table.name.empty()) {
    return Status::InvalidArgument("embedding table without a name");
  }
  if (table.dim < 1 || table.dim > kMaxDim) {
    return Status::InvalidArgument(what + " has dim " +
                                   std::to_string(table.dim));
  }
  if (table.slot_floats < 0 || table.slot_floats > kMaxSlotFloats) {
    return Status::InvalidArgument(what + " has " +
                                   std::to_string(table.slot_floats) +
                                   " slot floats per row");
  }
  size_t weights, slots;
  if (__builtin_mul_overflow(table.ids.size(), static_cast<size_t>(table.dim),
                             &weights) ||
      __builtin_mul_overflow(table.ids.size(),
                             static_cast<size_t>(table.slot_floats), &slots) ||
      table.weights.size() != weights || table.slots.size() != slots) {
    return Status::InvalidArgument(
        what + ": inconsistent sizes: " + std::to_string(table.ids.size()) +
        " ids of dim " + std::to_string(table.dim) + " with " +
        std::to_string(table.slot_floats) + " slot floats, but " +
        std::to_string(table.weights.size()) + " weights and " +
        std::to_string(table.slots.size()) + " slots");
  }
  return Status::OK();
}

}  // namespace

Status ValidateShard(const ModelShard& shard) {
  PS_RETURN_IF_ERROR(ValidateHead(shard));
  std::set<std::pair<std::string, uint64_t>> dense_chunks;
  for (const DenseShard& dense : shard.dense) {
    PS_RETURN_IF_ERROR(ValidateDense(dense));
    if (!dense_chunks.emplace(dense.name, dense.chunk).second) {
      return Status::InvalidArgument("dense parameter '" + dense.name +
                                     "' chunk " + std::to_string(dense.chunk) +
                                     " appears twice");
    }
  }
  std::set<uint32_t> table_ids;
  std::set<std::string> table_names;
  for (const TableShard& table : shard.tables) {
    PS_RETURN_IF_ERROR(ValidateTableRows(table));
    if (!table_ids.insert(table.table_id).second) {
      return Status::InvalidArgument(
          "table id " + std::to_string(table.table_id) + " appears twice");
    }
    if (!table_names.insert(table.name).second) {
      return Status::InvalidArgument("embedding table '" + table.name +
                                     "' appears twice");
    }
  }
  return Status::OK();
}

Status WriteCheckpointStream(const std::string& path, const ModelShard& header,
                             const std::function<Status(CheckpointSink*)>& fill,
                             const CheckpointWriteOptions& options) {
  if (!header.dense.empty() || !header.tables.empty()) {
    return Status::InvalidArgument(
        "a streamed checkpoint's header holds no parts");
  }
  PS_RETURN_IF_ERROR(ValidateHead(header));
  return WriteFileAtomically(
      path, [&](int fd) { return WriteFile(fd, header, fill, options); });
}

Status WriteCheckpoint(const std::string& path, const ModelShard& shard,
                       const CheckpointWriteOptions& options) {
  PS_RETURN_IF_ERROR(ValidateShard(shard));
  return WriteFileAtomically(path, [&](int fd) {
    return WriteFile(
        fd, shard,
        [&](CheckpointSink* sink) {
          for (const DenseShard& dense : shard.dense) {
            PS_RETURN_IF_ERROR(sink->AddDense(dense));
          }
          for (const TableShard& table : shard.tables) {
            PS_RETURN_IF_ERROR(sink->AddTableRows(table, table.ids.size()));
          }
          return Status::OK();
        },
        options);
  });
}

StatusOr<ModelShard> ReadCheckpoint(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no checkpoint at " + path);
    return IoError("cannot open " + path, errno);
  }
  ScopedFd closer(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return IoError("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument(path + " is not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  char header[kCheckpointHeaderSize];
  ssize_t got =
      ReadFully(fd, header, std::min<uint64_t>(file_size, sizeof(header)));
  if (got < 0) return IoError("cannot read " + path, errno);
  uint64_t payload_bytes = 0;
  uint32_t payload_crc = 0;
  PS_RETURN_IF_ERROR(CheckHeader(path, header, static_cast<size_t>(got),
                                 file_size, &payload_bytes, &payload_crc));

  // Parse while reading, then read the rest and check the checksum. A
  // checksum mismatch is reported in preference to the parse error it most
  // likely caused.
  CrcFileReader reader(fd, payload_bytes);
  ModelShard shard;
  Status parsed;
  {
    CopyingInputStreamAdaptor input(&reader, kIoBlockBytes);
    parsed = ParsePayload(&input, payload_bytes, &shard);
  }
  reader.Drain();
  if (reader.error() != 0)
    return IoError("cannot read " + path, reader.error());
  if (reader.short_read() || reader.remaining() != 0) {
    return Status::Corruption(path +
                              " is truncated: it shrank while being read");
  }
  if (reader.crc() != payload_crc) {
    return Status::Corruption(path + ": payload checksum mismatch");
  }
  if (!parsed.ok()) return Status::Corruption(path + ": " + parsed.message());
  Status valid = ValidateShard(shard);
  if (!valid.ok())
    return Status::Corruption(path +
                              ": inconsistent shard: " + valid.message());
  return shard;
}

}  // namespace model
}  // namespace ps
