#include "model/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "util/crc32c.h"

namespace ps {
namespace model {
namespace {

using Code = Status::Code;

// ---- Helpers ---------------------------------------------------------------

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint32_t Load32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

uint64_t Load64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

void Store32(std::string* bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    (*bytes)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void Store64(std::string* bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    (*bytes)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// A checkpoint file around `payload`, built from the documented format.
std::string FrameCheckpoint(const std::string& payload,
                            uint32_t version = kCheckpointFormatVersion) {
  std::string file(kCheckpointHeaderSize, '\0');
  std::memcpy(&file[0], kCheckpointMagic, 8);
  Store32(&file, 8, version);
  Store64(&file, 16, payload.size());
  Store32(&file, 24, Crc32c(0, payload.data(), payload.size()));
  Store32(&file, 28, Crc32c(0, file.data(), 28));
  return file + payload;
}

// Protobuf wire encoding, by hand, to build payloads the writer never makes.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string VarintField(int field, uint64_t v) {
  return Varint(field << 3 | 0) + Varint(v);
}

std::string BytesField(int field, const std::string& bytes) {
  return Varint(field << 3 | 2) + Varint(bytes.size()) + bytes;
}

std::string PackedFixed64(const std::vector<uint64_t>& values) {
  std::string out(values.size() * 8, '\0');
  for (size_t i = 0; i < values.size(); ++i) Store64(&out, 8 * i, values[i]);
  return out;
}

std::string PackedFloats(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    Store32(&out, 4 * i, bits);
  }
  return out;
}

constexpr int kFloat32 = 6;  // DataType.DT_FLOAT32
constexpr int kFloat64 = 7;

// Model.shard with one server.
std::string OneServerShardInfo() { return BytesField(4, VarintField(2, 1)); }

std::string TableInfo(const std::string& name, int dim, int dtype,
                      uint32_t table_id) {
  return BytesField(1, name) + VarintField(2, dim) + VarintField(5, dtype) +
         VarintField(6, table_id);
}

// One Model.embedding_tables entry.
std::string TableSegment(const std::string& info,
                         const std::vector<uint64_t>& ids,
                         const std::vector<float>& rows, uint64_t table_rows) {
  return BytesField(3, BytesField(1, info) + BytesField(2, PackedFixed64(ids)) +
                           BytesField(3, PackedFloats(rows)) +
                           VarintField(6, table_rows));
}

std::vector<float> RandomFloats(size_t n, std::mt19937_64* rng) {
  // Random bit patterns: NaNs with payloads, infinities, denormals, -0.0.
  std::vector<float> out(n);
  for (float& f : out) {
    uint32_t bits = static_cast<uint32_t>((*rng)());
    std::memcpy(&f, &bits, 4);
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void ExpectSameShard(const ModelShard& a, const ModelShard& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.server_rank, b.server_rank);
  EXPECT_EQ(a.num_servers, b.num_servers);
  EXPECT_EQ(a.ring_epoch, b.ring_epoch);
  EXPECT_EQ(a.ring_virtual_nodes, b.ring_virtual_nodes);
  EXPECT_EQ(a.ring_server_ids, b.ring_server_ids);
  EXPECT_EQ(a.ring_placement, b.ring_placement);
  EXPECT_EQ(a.ring_begins, b.ring_begins);
  EXPECT_EQ(a.ring_owners, b.ring_owners);
  EXPECT_EQ(a.ring_replicas, b.ring_replicas);
  ASSERT_EQ(a.dense.size(), b.dense.size());
  for (size_t i = 0; i < a.dense.size(); ++i) {
    SCOPED_TRACE("dense " + a.dense[i].name);
    EXPECT_EQ(a.dense[i].name, b.dense[i].name);
    EXPECT_EQ(a.dense[i].shape, b.dense[i].shape);
    EXPECT_EQ(a.dense[i].chunk, b.dense[i].chunk);
    EXPECT_EQ(a.dense[i].offset, b.dense[i].offset);
    EXPECT_EQ(a.dense[i].optimizer, b.dense[i].optimizer);
    EXPECT_TRUE(SameBits(a.dense[i].values, b.dense[i].values));
    EXPECT_TRUE(SameBits(a.dense[i].slots, b.dense[i].slots));
  }
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t i = 0; i < a.tables.size(); ++i) {
    SCOPED_TRACE("table " + a.tables[i].name);
    EXPECT_EQ(a.tables[i].name, b.tables[i].name);
    EXPECT_EQ(a.tables[i].table_id, b.tables[i].table_id);
    EXPECT_EQ(a.tables[i].dim, b.tables[i].dim);
    EXPECT_EQ(a.tables[i].initializer, b.tables[i].initializer);
    EXPECT_EQ(a.tables[i].optimizer, b.tables[i].optimizer);
    EXPECT_EQ(a.tables[i].slot_floats, b.tables[i].slot_floats);
    EXPECT_EQ(a.tables[i].ids, b.tables[i].ids);
    EXPECT_TRUE(SameBits(a.tables[i].weights, b.tables[i].weights));
    EXPECT_TRUE(SameBits(a.tables[i].slots, b.tables[i].slots));
  }
}

TableShard MakeTable(const std::string& name, uint32_t table_id, int dim,
                     int slot_floats, std::vector<uint64_t> ids,
                     std::mt19937_64* rng) {
  TableShard table;
  table.name = name;
  table.table_id = table_id;
  table.dim = dim;
  table.initializer = "uniform(-0.05,0.05)";
  table.optimizer = slot_floats > 0 ? "adagrad(lr=0.1)" : "sgd(lr=0.1)";
  table.slot_floats = slot_floats;
  table.ids = std::move(ids);
  table.weights = RandomFloats(table.ids.size() * dim, rng);
  table.slots = RandomFloats(table.ids.size() * slot_floats, rng);
  return table;
}

// A shard with a bit of everything: scalar and chunked dense parameters,
// tables with and without optimizer state, an empty table, the extreme ids,
// and names that are not UTF-8.
ModelShard MakeShard(uint64_t seed) {
  std::mt19937_64 rng(seed);
  ModelShard shard;
  shard.version = (int64_t{1} << 40) + 7;
  shard.server_rank = 2;
  shard.num_servers = 3;
  shard.ring_epoch = 42;
  shard.ring_virtual_nodes = 1024;
  shard.ring_server_ids = {8, 10, 12};
  shard.ring_placement = 1;
  shard.ring_begins = {0, 1ull << 62, 1ull << 63, ~0ull - 5};
  shard.ring_owners = {0, 2, 1, 2};
  shard.ring_replicas = 1;

  DenseShard weights;
  weights.name = "dense/kernel";
  weights.shape = {64, 10};
  weights.chunk = 1;
  weights.offset = 320;
  weights.values = RandomFloats(320, &rng);
  weights.optimizer = "adam(lr=0.001)";
  weights.slots = RandomFloats(641, &rng);
  shard.dense.push_back(weights);

  DenseShard bias;
  bias.name = std::string("bias\xff\x00x", 7);
  bias.values = {-0.0f, std::numeric_limits<float>::infinity()};
  bias.shape = {2};
  shard.dense.push_back(bias);

  DenseShard scalar;
  scalar.name = "global_step_scale";
  scalar.values = {1.5f};
  shard.dense.push_back(scalar);

  shard.tables.push_back(MakeTable(
      "user", 1, 8, 8,
      {0, std::numeric_limits<uint64_t>::max(), 1, 12345, uint64_t{1} << 63},
      &rng));
  shard.tables.push_back(MakeTable("empty", 2, 4, 1, {}, &rng));
  shard.tables.push_back(MakeTable("item", 0xffffffffu, 3, 0, {7, 0}, &rng));
  return shard;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
        "/checkpoint_test.XXXXXX";
    ASSERT_NE(mkdtemp(&pattern[0]), nullptr) << std::strerror(errno);
    dir_ = pattern;
    path_ = dir_ + "/shard-2.ckpt";
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::vector<std::string> DirectoryEntries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // Expects reading path_ to fail with Corruption whose message contains
  // `needle`.
  void ExpectCorruption(const std::string& needle) {
    StatusOr<ModelShard> read = ReadCheckpoint(path_);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), Code::kCorruption) << read.status();
    EXPECT_NE(read.status().message().find(needle), std::string::npos)
        << "'" << needle << "' not in: " << read.status();
  }

  std::string dir_;
  std::string path_;
};

// ---- Round trips
// -------------------------------------------------------------

TEST_F(CheckpointTest, RoundTripKeepsEveryBit) {
  const ModelShard shard = MakeShard(1);
  ASSERT_TRUE(WriteCheckpoint(path_, shard).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(shard, read.value());
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"shard-2.ckpt"});
}

// A shard streamed part by part, tables in slices of any size (empty ones
// too) and in any order of rows, reads back as the same shard as
// WriteCheckpoint's, and the two files are the same bytes when the parts
// come in WriteCheckpoint's order.
TEST_F(CheckpointTest, StreamedShardReadsBackAsTheWholeOne) {
  const ModelShard shard = MakeShard(3);
  ModelShard head = shard;
  head.dense.clear();
  head.tables.clear();
  auto slices = [&](CheckpointSink* sink, size_t slice) -> Status {
    for (const DenseShard& d : shard.dense) {
      PS_RETURN_IF_ERROR(sink->AddDense(d));
    }
    for (const TableShard& t : shard.tables) {
      const size_t dim = t.dim, sf = t.slot_floats;
      size_t begin = 0;
      do {
        const size_t end = std::min(t.ids.size(), begin + slice);
        TableShard part = t;
        part.ids.assign(t.ids.begin() + begin, t.ids.begin() + end);
        part.weights.assign(t.weights.begin() + begin * dim,
                            t.weights.begin() + end * dim);
        part.slots.assign(t.slots.begin() + begin * sf,
                          t.slots.begin() + end * sf);
        PS_RETURN_IF_ERROR(sink->AddTableRows(part, t.ids.size()));
        TableShard empty = part;
        empty.ids.clear();
        empty.weights.clear();
        empty.slots.clear();
        PS_RETURN_IF_ERROR(sink->AddTableRows(empty, t.ids.size()));
        begin = end;
      } while (begin < t.ids.size());
    }
    return Status::OK();
  };
  ASSERT_TRUE(WriteCheckpointStream(path_, head, [&](CheckpointSink* sink) {
                return slices(sink, 3);
              }).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(shard, read.value());

  // Whole tables in one part: WriteCheckpoint's bytes.
  ASSERT_TRUE(WriteCheckpointStream(path_, head, [&](CheckpointSink* sink) {
                return slices(sink, size_t{1} << 40);
              }).ok());
  const std::string streamed = ReadBytes(path_);
  ASSERT_TRUE(WriteCheckpoint(path_, shard).ok());
  EXPECT_EQ(streamed, ReadBytes(path_));
}

TEST_F(CheckpointTest, AStreamThatBreaksItsWordWritesNothing) {
  const ModelShard shard = MakeShard(4);
  ASSERT_FALSE(shard.tables.empty());
  ModelShard head = shard;
  head.dense.clear();
  head.tables.clear();
  const TableShard& t = shard.tables[0];
  // Fewer rows than announced.
  Status s = WriteCheckpointStream(path_, head, [&](CheckpointSink* sink) {
    return sink->AddTableRows(t, t.ids.size() + 1);
  });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  // More rows than announced.
  s = WriteCheckpointStream(path_, head, [&](CheckpointSink* sink) {
    PS_RETURN_IF_ERROR(sink->AddTableRows(t, t.ids.size()));
    return sink->AddTableRows(t, t.ids.size());
  });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  // The same table id with another spec.
  s = WriteCheckpointStream(path_, head, [&](CheckpointSink* sink) {
    TableShard other = t;
    other.dim = t.dim + 1;
    other.ids.clear();
    other.weights.clear();
    other.slots.clear();
    PS_RETURN_IF_ERROR(sink->AddTableRows(t, t.ids.size()));
    return sink->AddTableRows(other, t.ids.size());
  });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  // fill's own error, and a header that carries parts.
  s = WriteCheckpointStream(path_, head, [](CheckpointSink*) {
    return Status::Unavailable("the store went away");
  });
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  s = WriteCheckpointStream(path_, shard,
                            [](CheckpointSink*) { return Status::OK(); });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  EXPECT_TRUE(DirectoryEntries().empty());
}

TEST_F(CheckpointTest, EmptyShardRoundTrips) {
  ModelShard shard;
  ASSERT_TRUE(WriteCheckpoint(path_, shard).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(shard, read.value());
}

TEST_F(CheckpointTest, TablesSplitIntoManySegmentsReassemble) {
  std::mt19937_64 rng(3);
  ModelShard shard;
  std::vector<uint64_t> ids(1000);
  for (uint64_t& id : ids) id = rng();
  shard.tables.push_back(MakeTable("many", 5, 4, 2, ids, &rng));
  shard.tables.push_back(MakeTable("empty", 6, 4, 2, {}, &rng));
  // Rows bigger than a segment: one row per segment.
  shard.tables.push_back(MakeTable("wide", 7, 400, 0, {1, 2, 3}, &rng));
  CheckpointWriteOptions options;
  options.max_segment_bytes = 1000;
  ASSERT_TRUE(WriteCheckpoint(path_, shard, options).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(shard, read.value());

  // The same shard in one segment per table makes a smaller file: the small
  // segment size did split the tables.
  const std::string segmented = ReadBytes(path_);
  ASSERT_TRUE(WriteCheckpoint(path_, shard).ok());
  EXPECT_GT(segmented.size(), ReadBytes(path_).size());
}

TEST_F(CheckpointTest, FileHasTheDocumentedHeader) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(2)).ok());
  const std::string file = ReadBytes(path_);
  ASSERT_GT(file.size(), kCheckpointHeaderSize);
  EXPECT_EQ(file.substr(0, 8), "EMBERCKP");
  EXPECT_EQ(Load32(file, 8), 1u);
  EXPECT_EQ(Load32(file, 12), 0u);
  EXPECT_EQ(Load64(file, 16), file.size() - kCheckpointHeaderSize);
  EXPECT_EQ(Load32(file, 24), Crc32c(0, file.data() + 32, file.size() - 32));
  EXPECT_EQ(Load32(file, 28), Crc32c(0, file.data(), 28));
}

TEST_F(CheckpointTest, HandEncodedModelReads) {
  // Pins the field numbers of proto/model.proto: other tools write these.
  std::string payload =
      VarintField(1, 99) +
      BytesField(4, VarintField(1, 1) + VarintField(2, 4)) +
      BytesField(2, BytesField(1, "w") + VarintField(2, 3) +
                        VarintField(3, kFloat32) +
                        BytesField(4, PackedFloats({1, 2, 3}))) +
      TableSegment(TableInfo("t", 2, kFloat32, 9), {5, 6}, {1, 2, 3, 4}, 3) +
      TableSegment(TableInfo("t", 2, kFloat32, 9), {7}, {5, 6}, 3);
  WriteBytes(path_, FrameCheckpoint(payload));
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  const ModelShard& shard = read.value();
  EXPECT_EQ(shard.version, 99);
  EXPECT_EQ(shard.server_rank, 1);
  EXPECT_EQ(shard.num_servers, 4);
  ASSERT_EQ(shard.dense.size(), 1u);
  EXPECT_EQ(shard.dense[0].name, "w");
  EXPECT_EQ(shard.dense[0].shape, std::vector<int64_t>{3});
  EXPECT_EQ(shard.dense[0].values, (std::vector<float>{1, 2, 3}));
  ASSERT_EQ(shard.tables.size(), 1u);
  EXPECT_EQ(shard.tables[0].name, "t");
  EXPECT_EQ(shard.tables[0].table_id, 9u);
  EXPECT_EQ(shard.tables[0].dim, 2);
  EXPECT_EQ(shard.tables[0].ids, (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(shard.tables[0].weights, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(CheckpointTest, UnknownFieldsAreSkipped) {
  // Fields a later model.proto may add, of every wire type.
  std::string payload = OneServerShardInfo() + VarintField(20, 5) +
                        BytesField(21, "future") + Varint(22 << 3 | 1) +
                        std::string(8, 'x') + Varint(23 << 3 | 5) +
                        std::string(4, 'y') + VarintField(1, 3);
  WriteBytes(path_, FrameCheckpoint(payload));
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read.value().version, 3);
}

TEST_F(CheckpointTest, OverwriteReplacesTheOldShard) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(1)).ok());
  const ModelShard second = MakeShard(2);
  ASSERT_TRUE(WriteCheckpoint(path_, second).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(second, read.value());
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"shard-2.ckpt"});
}

// 200,000 rows of 16 floats, no optimizer slots: a shard too big for any
// fixed-size buffer round-trips whole. (No time limit: a timed assertion
// fails on a loaded machine or under a sanitizer; speed is bench/'s job.)
TEST_F(CheckpointTest, LargeShardRoundTrips) {
  std::mt19937_64 rng(11);
  ModelShard shard;
  std::vector<uint64_t> ids(200000);
  for (uint64_t& id : ids) id = rng();
  shard.tables.push_back(MakeTable("big", 1, 16, 0, std::move(ids), &rng));
  ASSERT_TRUE(WriteCheckpoint(path_, shard).ok());
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(shard, read.value());
}

// ---- Damaged and foreign files
// ------------------------------------------------

TEST_F(CheckpointTest, FlippedPayloadByteFailsTheChecksum) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(1)).ok());
  const std::string good = ReadBytes(path_);
  for (size_t at : {kCheckpointHeaderSize, kCheckpointHeaderSize + 1,
                    good.size() / 2, good.size() - 1}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    std::string bad = good;
    bad[at] ^= 0x10;
    WriteBytes(path_, bad);
    ExpectCorruption("payload checksum mismatch");
  }
}

TEST_F(CheckpointTest, DamagedHeaderIsDetected) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(1)).ok());
  const std::string good = ReadBytes(path_);
  for (size_t at : {12, 16, 20, 24, 28, 31}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    std::string bad = good;
    bad[at] ^= 0x01;
    WriteBytes(path_, bad);
    ExpectCorruption("header checksum mismatch");
  }
  std::string bad_magic = good;
  bad_magic[3] = 'X';
  WriteBytes(path_, bad_magic);
  ExpectCorruption("not an Ember checkpoint");
}

TEST_F(CheckpointTest, TruncatedFileIsCorruption) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(1)).ok());
  const std::string good = ReadBytes(path_);
  for (size_t length :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{11}, size_t{12},
        size_t{31}, size_t{32}, size_t{33}, good.size() / 2, good.size() - 1}) {
    SCOPED_TRACE("length " + std::to_string(length));
    WriteBytes(path_, good.substr(0, length));
    ExpectCorruption("truncated");
  }
}

TEST_F(CheckpointTest, TrailingBytesAreCorruption) {
  ASSERT_TRUE(WriteCheckpoint(path_, MakeShard(1)).ok());
  WriteBytes(path_, ReadBytes(path_) + "x");
  ExpectCorruption("1 bytes after the payload");
}

TEST_F(CheckpointTest, ForeignFilesAreNotCheckpoints) {
  WriteBytes(path_,
             "model_version: 3\nlearning_rate: 0.1\nthis is a text file\n");
  ExpectCorruption("not an Ember checkpoint");

  std::mt19937_64 rng(5);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  random[0] = 'Z';
  WriteBytes(path_, random);
  ExpectCorruption("not an Ember checkpoint");

  WriteBytes(path_, "EMBX");  // short, and not a prefix of the magic
  ExpectCorruption("not an Ember checkpoint");
}

TEST_F(CheckpointTest, UnsupportedFormatVersionIsCorruption) {
  WriteBytes(path_, FrameCheckpoint(OneServerShardInfo(), 2));
  ExpectCorruption("unsupported checkpoint format version 2");
}

TEST_F(CheckpointTest, PayloadThatDoesNotParseIsCorruption) {
  const std::vector<std::string> payloads = {
      std::string(1, '\0'),                  // field number 0
      "\x1a\xff\xff\xff\xff\x0f",            // a table longer than 2 GiB
      BytesField(3, "abc").substr(0, 4),     // a table cut short
      "\x1a\x01\x0c",                        // a stray end-group tag
      Varint(1 << 3 | 2) + Varint(1) + "x",  // version with the wrong wire type
      Varint(20 << 3 | 3) + Varint(20 << 3 | 4),    // a top-level group
      std::string("\x08\xff\xff\xff\xff\xff\xff"),  // an unterminated varint
  };
  for (size_t i = 0; i < payloads.size(); ++i) {
    SCOPED_TRACE("payload " + std::to_string(i));
    WriteBytes(path_, FrameCheckpoint(payloads[i]));
    ExpectCorruption("does not parse");
  }
}

TEST_F(CheckpointTest, InconsistentSizesAreCorruption) {
  const std::string info = TableInfo("t", 2, kFloat32, 1);
  struct Case {
    std::string payload;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {OneServerShardInfo() + TableSegment(info, {1, 2, 3}, {1, 2, 3, 4}, 3),
       "inconsistent sizes"},
      {OneServerShardInfo() + TableSegment(info, {1, 2}, {1, 2, 3, 4}, 5),
       "should have 5 rows"},
      {OneServerShardInfo() + TableSegment(info, {1}, {1, 2}, 2) +
           TableSegment(TableInfo("u", 2, kFloat32, 1), {2}, {3, 4}, 2),
       "disagree on its name"},
      {OneServerShardInfo() +
           TableSegment(TableInfo("t", 0, kFloat32, 1), {}, {}, 0),
       "dim 0"},
      {OneServerShardInfo() +
           TableSegment(TableInfo("t", 2, kFloat64, 1), {1}, {1, 2, 3, 4}, 1),
       "only float32"},
      {OneServerShardInfo() +
           BytesField(2, BytesField(1, "w") + VarintField(2, 2) +
                             VarintField(3, kFloat32) +
                             BytesField(4, PackedFloats({1, 2, 3}))),
       "do not fit its shape"},
      {OneServerShardInfo() +
           BytesField(2, BytesField(1, "w") + VarintField(3, kFloat32) +
                             BytesField(4, "abc")),
       "partial float32"},
      {BytesField(4, VarintField(1, 5) + VarintField(2, 2)),
       "server rank 5 of 2"},
      {std::string(), "server rank 0 of 0"},  // no shard info at all
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    WriteBytes(path_, FrameCheckpoint(c.payload));
    ExpectCorruption(c.needle);
  }
}

TEST_F(CheckpointTest, MissingFileIsNotFound) {
  StatusOr<ModelShard> read = ReadCheckpoint(dir_ + "/absent.ckpt");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), Code::kNotFound) << read.status();
}

TEST_F(CheckpointTest, DirectoryIsNotACheckpoint) {
  StatusOr<ModelShard> read = ReadCheckpoint(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), Code::kInvalidArgument) << read.status();
}

// ---- Atomic writes
// --------------------------------------------------------------

TEST_F(CheckpointTest, WriteIntoMissingDirectoryFails) {
  Status status =
      WriteCheckpoint(dir_ + "/no/such/dir/shard.ckpt", MakeShard(1));
  EXPECT_EQ(status.code(), Code::kNotFound) << status;
  EXPECT_TRUE(DirectoryEntries().empty());
}

TEST_F(CheckpointTest, InvalidShardIsRejectedAndOldFileKept) {
  const ModelShard old_shard = MakeShard(1);
  ASSERT_TRUE(WriteCheckpoint(path_, old_shard).ok());
  ModelShard bad = MakeShard(2);
  bad.tables[0].weights.pop_back();
  Status status = WriteCheckpoint(path_, bad);
  EXPECT_EQ(status.code(), Code::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("inconsistent sizes"), std::string::npos)
      << status;
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(old_shard, read.value());
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"shard-2.ckpt"});
}

TEST_F(CheckpointTest, WriteFailingHalfwayKeepsOldFile) {
  const ModelShard old_shard = MakeShard(1);
  ASSERT_TRUE(WriteCheckpoint(path_, old_shard).ok());
  ASSERT_LT(ReadBytes(path_).size(), 64u << 10);

  // A file size limit makes the write of a bigger shard fail with EFBIG after
  // its first 64 KiB are on disk.
  std::mt19937_64 rng(9);
  ModelShard big;
  std::vector<uint64_t> ids(20000);
  for (uint64_t& id : ids) id = rng();
  big.tables.push_back(MakeTable("big", 1, 16, 0, std::move(ids), &rng));
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 << 10;
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  Status status = WriteCheckpoint(path_, big);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);

  EXPECT_EQ(status.code(), Code::kUnavailable) << status;
  StatusOr<ModelShard> read = ReadCheckpoint(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameShard(old_shard, read.value());
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"shard-2.ckpt"});
}

// ---- Validation
// -------------------------------------------------------------------

TEST(ValidateShardTest, AcceptsAConsistentShard) {
  EXPECT_TRUE(ValidateShard(MakeShard(1)).ok());
}

TEST(ValidateShardTest, RejectsInconsistentShards) {
  struct Case {
    const char* what;
    void (*damage)(ModelShard*);
  };
  const Case cases[] = {
      {"rank out of range", [](ModelShard* s) { s->server_rank = 3; }},
      {"no servers", [](ModelShard* s) { s->num_servers = 0; }},
      {"negative virtual nodes",
       [](ModelShard* s) { s->ring_virtual_nodes = -1; }},
      {"ring ranges without owners",
       [](ModelShard* s) { s->ring_owners.pop_back(); }},
      {"unnamed dense", [](ModelShard* s) { s->dense[0].name.clear(); }},
      {"duplicate dense chunk",
       [](ModelShard* s) { s->dense.push_back(s->dense[0]); }},
      {"negative dimension", [](ModelShard* s) { s->dense[0].shape[0] = -1; }},
      {"overflowing shape",
       [](ModelShard* s) {
         s->dense[0].shape = {int64_t{1} << 40, int64_t{1} << 40};
       }},
      {"chunk past the end", [](ModelShard* s) { s->dense[0].offset = 400; }},
      {"too many values",
       [](ModelShard* s) { s->dense[2].values.push_back(1); }},
      {"duplicate table id", [](ModelShard* s) { s->tables[1].table_id = 1; }},
      {"duplicate table name",
       [](ModelShard* s) { s->tables[1].name = "user"; }},
      {"zero dim", [](ModelShard* s) { s->tables[1].dim = 0; }},
      {"negative slots", [](ModelShard* s) { s->tables[1].slot_floats = -1; }},
      {"missing weights",
       [](ModelShard* s) { s->tables[0].weights.pop_back(); }},
      {"extra slots", [](ModelShard* s) { s->tables[2].slots.push_back(0); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ModelShard shard = MakeShard(1);
    c.damage(&shard);
    EXPECT_EQ(ValidateShard(shard).code(), Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace model
}  // namespace ps
