#include "message/message.h"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "app/kv_frames.h"

namespace ps {

// Test failures name status codes instead of dumping their bytes.
inline void PrintTo(Status::Code code, std::ostream* os) {
  *os << Status::CodeName(code);
}

namespace {

using Code = Status::Code;

std::string Encode(const Meta& meta,
                   const std::vector<SArray<char>>& data = {}) {
  std::string out;
  EncodeMeta(meta, data, &out);
  return out;
}

Status Decode(const std::string& bytes, Meta* meta,
              std::vector<uint64_t>* frame_bytes) {
  return DecodeMeta(bytes.data(), bytes.size(), meta, frame_bytes);
}

Status Decode(const std::string& bytes) {
  Meta meta;
  std::vector<uint64_t> frame_bytes;
  return Decode(bytes, &meta, &frame_bytes);
}

NodeInfo MakeNode(int id, Role role, const std::string& host, int port) {
  NodeInfo n;
  n.id = id;
  n.role = role;
  n.host = host;
  n.port = port;
  n.customer_id = id % 5 + 1;
  n.rank_hint = id % 11;
  n.rank = id / 2;
  n.incarnation = 0x1234567890abcdefULL + static_cast<uint64_t>(id);
  if (id % 2 == 0) {
    n.local_endpoint = "ipc://@ember-0123456789abcdef0123456789abcdef";
  }
  return n;
}

void ExpectNodeEq(const NodeInfo& a, const NodeInfo& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.port, b.port);
  EXPECT_EQ(a.customer_id, b.customer_id);
  EXPECT_EQ(a.rank_hint, b.rank_hint);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.incarnation, b.incarnation);
  EXPECT_EQ(a.local_endpoint, b.local_endpoint);
}

void ExpectMetaEq(const Meta& a, const Meta& b) {
  EXPECT_EQ(a.sender, b.sender);
  EXPECT_EQ(a.recipient, b.recipient);
  EXPECT_EQ(a.app_id, b.app_id);
  EXPECT_EQ(a.customer_id, b.customer_id);
  EXPECT_EQ(a.timestamp, b.timestamp);
  EXPECT_EQ(a.request, b.request);
  EXPECT_EQ(a.push, b.push);
  EXPECT_EQ(a.pull, b.pull);
  EXPECT_EQ(a.simple_app, b.simple_app);
  EXPECT_EQ(a.cmd, b.cmd);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.clock, b.clock);
  EXPECT_EQ(a.value_bytes, b.value_bytes);
  EXPECT_EQ(a.status_code, b.status_code);
  EXPECT_EQ(a.status_message, b.status_message);
  EXPECT_EQ(a.moved_epoch, b.moved_epoch);
  EXPECT_EQ(a.control, b.control);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    SCOPED_TRACE("node " + std::to_string(i));
    ExpectNodeEq(a.nodes[i], b.nodes[i]);
  }
  EXPECT_EQ(a.barrier_group, b.barrier_group);
  EXPECT_EQ(a.barrier_round, b.barrier_round);
  EXPECT_EQ(a.ring.epoch, b.ring.epoch);
  EXPECT_EQ(a.ring.placement, b.ring.placement);
  EXPECT_EQ(a.ring.server_ids, b.ring.server_ids);
  EXPECT_EQ(a.ring.begins, b.ring.begins);
  EXPECT_EQ(a.ring.owners, b.ring.owners);
  EXPECT_EQ(a.failed_node, b.failed_node);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.join_running, b.join_running);
  EXPECT_EQ(a.join_replace, b.join_replace);
  EXPECT_EQ(a.join_ask_ms, b.join_ask_ms);
  EXPECT_EQ(a.worker_event, b.worker_event);
  EXPECT_EQ(a.clock_query, b.clock_query);
  EXPECT_EQ(a.num_servers, b.num_servers);
  EXPECT_EQ(a.num_workers, b.num_workers);
}

// A data message with every data field set to a non-default value.
Meta FullDataMeta() {
  Meta m;
  m.sender = 9;
  m.recipient = 8;
  m.app_id = 3;
  m.customer_id = 2;
  m.timestamp = 123456;
  m.request = true;
  m.push = true;
  m.pull = true;
  m.simple_app = true;
  m.cmd = -17;
  m.priority = 5;
  m.body = std::string("binary\0body\xff", 12);
  m.epoch = 0xfedcba9876543210ULL;
  m.clock = -42;
  m.value_bytes = 4;
  m.status_code = static_cast<int>(Code::kAborted);
  m.status_message = "server 9 refused";
  m.moved_epoch = 0x8000000000000003ULL;
  m.clock_query = 2;
  return m;
}

// A control message with every control field set.
Meta FullControlMeta() {
  Meta m = FullDataMeta();
  m.control = Control::kNodeTable;
  m.nodes = {MakeNode(1, Role::kScheduler, "10.0.0.1", 9000),
             MakeNode(8, Role::kServer, "server-host", 65535),
             MakeNode(9, Role::kWorker, "", 0)};
  m.barrier_group = kServerGroup + kWorkerGroup;
  m.barrier_round = std::numeric_limits<uint64_t>::max();
  m.ring.epoch = 7;
  m.ring.placement = 1;
  m.ring.server_ids = {8, 10, 12};
  m.ring.begins = {0, 1ull << 62, std::numeric_limits<uint64_t>::max()};
  m.ring.owners = {2, 0, 1};
  m.failed_node = 10;
  m.reason = "heartbeat timeout";
  m.join_running = true;
  m.join_replace = true;
  m.join_ask_ms = 250;
  m.worker_event = WorkerEvent::kBack;
  m.num_servers = 4096;
  m.num_workers = 65536;
  return m;
}

TEST(MessageCodecTest, RoundTripsEveryDataField) {
  Meta in = FullDataMeta();
  Meta out;
  std::vector<uint64_t> frame_bytes = {99};
  ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
  ExpectMetaEq(in, out);
  EXPECT_EQ(out.control, Control::kNone);
  EXPECT_TRUE(frame_bytes.empty());
}

TEST(MessageCodecTest, RoundTripsEveryControlField) {
  Meta in = FullControlMeta();
  Meta out;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
  ExpectMetaEq(in, out);
}

TEST(MessageCodecTest, RoundTripsEveryControlCommand) {
  for (int c = static_cast<int>(Control::kJoin);
       c <= static_cast<int>(Control::kSwitched); ++c) {
    SCOPED_TRACE(ControlName(static_cast<Control>(c)));
    Meta in;
    in.control = static_cast<Control>(c);
    in.failed_node = 12;
    Meta out;
    std::vector<uint64_t> frame_bytes;
    ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
    EXPECT_EQ(out.control, in.control);
    EXPECT_EQ(out.failed_node, 12);
  }
}

TEST(MessageCodecTest, RoundTripsDefaultMeta) {
  Meta in;
  Meta out;
  out.sender = 77;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
  ExpectMetaEq(in, out);
  EXPECT_EQ(out.sender, Meta::kEmpty);
}

TEST(MessageCodecTest, RoundTripsExtremeValues) {
  Meta in;
  in.sender = std::numeric_limits<int>::min();
  in.recipient = std::numeric_limits<int>::max();
  in.timestamp = std::numeric_limits<int>::max();
  in.epoch = std::numeric_limits<uint64_t>::max();
  in.clock = std::numeric_limits<int64_t>::min();
  in.status_code = static_cast<int>(Code::kInternal);
  in.control = Control::kJoin;
  NodeInfo n =
      MakeNode(std::numeric_limits<int>::max(), Role::kWorker, "h", 65535);
  n.incarnation = std::numeric_limits<uint64_t>::max();
  n.rank_hint = -1;
  n.rank = -1;
  in.nodes = {n};
  in.ring.epoch = 1;
  in.ring.server_ids = {std::numeric_limits<int>::min(), -1, 0};
  Meta out;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
  ExpectMetaEq(in, out);
}

TEST(MessageCodecTest, DecodeClearsControlOfReusedMetaForDataMessage) {
  Meta out = FullControlMeta();
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(FullDataMeta()), &out, &frame_bytes).ok());
  EXPECT_EQ(out.control, Control::kNone);
  EXPECT_TRUE(out.nodes.empty());
}

TEST(MessageCodecTest, RecordsFrameSizes) {
  std::vector<SArray<char>> data = {SArray<char>(8), SArray<char>(),
                                    SArray<char>(13)};
  Meta out;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(Meta(), data), &out, &frame_bytes).ok());
  EXPECT_EQ(frame_bytes, std::vector<uint64_t>({8, 0, 13}));
  EXPECT_TRUE(CheckFrames(frame_bytes, data).ok());
}

TEST(MessageCodecTest, CheckFramesAcceptsNoFrames) {
  EXPECT_TRUE(CheckFrames({}, {}).ok());
}

TEST(MessageCodecTest, CheckFramesRejectsWrongFrameCount) {
  std::vector<SArray<char>> data = {SArray<char>(8), SArray<char>(4)};
  Status fewer = CheckFrames({8}, data);
  EXPECT_EQ(fewer.code(), Code::kCorruption);
  Status more = CheckFrames({8, 4, 0}, data);
  EXPECT_EQ(more.code(), Code::kCorruption);
  Status none = CheckFrames({}, data);
  EXPECT_EQ(none.code(), Code::kCorruption);
  Status missing = CheckFrames({0}, {});
  EXPECT_EQ(missing.code(), Code::kCorruption);
}

TEST(MessageCodecTest, CheckFramesRejectsWrongFrameSize) {
  std::vector<SArray<char>> data = {SArray<char>(8), SArray<char>(4)};
  Status s = CheckFrames({8, 5}, data);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("frame 1"), std::string::npos) << s;
  EXPECT_EQ(CheckFrames({7, 4}, data).code(), Code::kCorruption);
  EXPECT_EQ(CheckFrames({std::numeric_limits<uint64_t>::max(), 4}, data).code(),
            Code::kCorruption);
}

TEST(MessageCodecTest, RejectsGarbageBytes) {
  const std::vector<std::string> garbage = {
      std::string("\xff\xff\xff\xff", 4),  // Unterminated varint tag.
      std::string("\x0f", 1),              // Wire type 7 does not exist.
      std::string("\x00", 1),              // Field number 0.
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12),
      std::string("\x62\x7f", 2),  // body: length 127, no bytes.
      "this is not a protobuf at all",
  };
  for (const std::string& bytes : garbage) {
    Status s = Decode(bytes);
    EXPECT_EQ(s.code(), Code::kCorruption) << testing::PrintToString(bytes);
  }
}

TEST(MessageCodecTest, RejectsTruncatedHeader) {
  Meta in = FullControlMeta();
  in.body = std::string(200, 'b');
  const std::string bytes = Encode(in);
  // Cut inside the body string.
  size_t body_at = bytes.find(in.body);
  ASSERT_NE(body_at, std::string::npos);
  EXPECT_EQ(Decode(bytes.substr(0, body_at + 100)).code(), Code::kCorruption);
  // Cut inside the first field's 10-byte varint (sender is -1 ...).
  Meta negative;
  negative.sender = -5;
  const std::string varint = Encode(negative);
  ASSERT_GE(varint.size(), 11u);
  EXPECT_EQ(Decode(varint.substr(0, 5)).code(), Code::kCorruption);
  // Cut inside the nested control message.
  size_t host_at = bytes.find("server-host");
  ASSERT_NE(host_at, std::string::npos);
  EXPECT_EQ(Decode(bytes.substr(0, host_at + 3)).code(), Code::kCorruption);
}

TEST(MessageCodecTest, RoundTripsRejoin) {
  Meta in;
  in.control = Control::kRejoin;
  in.barrier_group = 4;
  in.barrier_round = 3;
  in.process_key = std::string(16, 'k');
  Meta out;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
  EXPECT_EQ(out.control, Control::kRejoin);
  EXPECT_EQ(out.barrier_round, 3u);
  EXPECT_EQ(out.process_key, in.process_key);
  EXPECT_STREQ(ControlName(Control::kRejoin), "rejoin");
  EXPECT_EQ(Decode(Encode([] {
              Meta m;
              m.control = static_cast<Control>(
                  static_cast<int>(Control::kSwitched) + 1);
              return m;
            }()))
                .code(),
            Code::kCorruption);
}

TEST(MessageCodecTest, RejectsUnknownControlCommand) {
  for (int cmd : {static_cast<int>(Control::kSwitched) + 1, 99, -1,
                  std::numeric_limits<int>::min()}) {
    Meta in;
    in.control = static_cast<Control>(cmd);
    Status s = Decode(Encode(in));
    EXPECT_EQ(s.code(), Code::kCorruption) << cmd;
    EXPECT_NE(s.message().find("control"), std::string::npos) << s;
  }
}

TEST(MessageCodecTest, RoundTripsWorkerChange) {
  Meta in = FullControlMeta();
  in.control = Control::kWorkerChange;
  for (WorkerEvent e : {WorkerEvent::kJoined, WorkerEvent::kBack,
                        WorkerEvent::kAway, WorkerEvent::kGone}) {
    in.worker_event = e;
    Meta out;
    std::vector<uint64_t> frame_bytes;
    ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok());
    ExpectMetaEq(in, out);
  }
  EXPECT_STREQ(ControlName(Control::kWorkerChange), "worker_change");
  EXPECT_STREQ(WorkerEventName(WorkerEvent::kAway), "away");
}

TEST(MessageCodecTest, RejectsUnknownWorkerEventAndClockQuery) {
  Meta in = FullControlMeta();
  in.control = Control::kWorkerChange;
  in.worker_event = static_cast<WorkerEvent>(5);
  EXPECT_EQ(Decode(Encode(in)).code(), Code::kCorruption);
  in.worker_event = static_cast<WorkerEvent>(-1);
  EXPECT_EQ(Decode(Encode(in)).code(), Code::kCorruption);
  Meta data = FullDataMeta();
  for (int q : {3, -1}) {
    data.clock_query = q;
    EXPECT_EQ(Decode(Encode(data)).code(), Code::kCorruption) << q;
  }
}

TEST(MessageCodecTest, RejectsUnknownStatusCode) {
  for (int code : {static_cast<int>(Code::kInternal) + 1, 1000, -1}) {
    Meta in;
    in.status_code = code;
    Status s = Decode(Encode(in));
    EXPECT_EQ(s.code(), Code::kCorruption) << code;
    EXPECT_NE(s.message().find("status code"), std::string::npos) << s;
    // The same inside a control message.
    in.control = Control::kBarrier;
    EXPECT_EQ(Decode(Encode(in)).code(), Code::kCorruption) << code;
  }
}

TEST(MessageCodecTest, AcceptsEveryKnownStatusCode) {
  for (int code = 0; code <= static_cast<int>(Code::kInternal); ++code) {
    Meta in;
    in.status_code = code;
    Meta out;
    std::vector<uint64_t> frame_bytes;
    ASSERT_TRUE(Decode(Encode(in), &out, &frame_bytes).ok()) << code;
    EXPECT_EQ(out.status_code, code);
  }
}

TEST(MessageCodecTest, RejectsNodeWithBadRole) {
  for (int role : {3, -1, 100}) {
    Meta in;
    in.control = Control::kNodeTable;
    in.nodes = {MakeNode(8, Role::kServer, "a", 1),
                MakeNode(9, static_cast<Role>(role), "b", 2)};
    Status s = Decode(Encode(in));
    EXPECT_EQ(s.code(), Code::kCorruption) << role;
    EXPECT_NE(s.message().find("role"), std::string::npos) << s;
  }
}

TEST(MessageCodecTest, RejectsNodeWithBadPort) {
  for (int port : {-1, 65536, std::numeric_limits<int>::max()}) {
    Meta in;
    in.control = Control::kJoin;
    in.nodes = {MakeNode(9, Role::kWorker, "b", port)};
    Status s = Decode(Encode(in));
    EXPECT_EQ(s.code(), Code::kCorruption) << port;
    EXPECT_NE(s.message().find("port"), std::string::npos) << s;
  }
}

TEST(MessageCodecTest, RejectsNodeWithMalformedLocalEndpoint) {
  const std::string good = "ipc://@ember-0123456789abcdef0123456789abcdef";
  for (const std::string& bad :
       {std::string("tcp://127.0.0.1:1"), std::string("ipc:///tmp/x"),
        good.substr(0, good.size() - 1), good + "0",
        std::string("ipc://@ember-0123456789ABCDEF0123456789abcdef"),
        std::string("ipc://@ember-0123456789abcdef0123456789abcde\n")}) {
    Meta in;
    in.control = Control::kJoin;
    in.nodes = {MakeNode(9, Role::kWorker, "b", 1)};
    in.nodes[0].local_endpoint = bad;
    Status s = Decode(Encode(in));
    EXPECT_EQ(s.code(), Code::kCorruption) << bad;
    EXPECT_NE(s.message().find("same-host endpoint"), std::string::npos) << s;
  }
}

TEST(MessageCodecTest, RoundTripsStatusMessageWithNonUtf8Bytes) {
  Meta in;
  in.status_code = static_cast<int>(Code::kInvalidArgument);
  in.status_message = "bad key \xff\xfe";
  in.control = Control::kAbort;
  in.reason = "\xc3";
  Meta out;
  std::vector<uint64_t> frame_bytes;
  google::protobuf::LogSilencer silence;
  Status s = Decode(Encode(in), &out, &frame_bytes);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.status_message, in.status_message);
  EXPECT_EQ(out.reason, in.reason);
}

// Decoding arbitrary bytes must end in ok or kCorruption, never a crash.
void ExpectDecodesOrCorruption(const std::string& bytes) {
  Meta meta;
  std::vector<uint64_t> frame_bytes;
  Status s = Decode(bytes, &meta, &frame_bytes);
  if (s.ok()) {
    // A decoded header is safe to use: check frames against no data.
    Status f = CheckFrames(frame_bytes, {});
    EXPECT_TRUE(f.ok() || f.code() == Code::kCorruption) << f;
    (void)meta.DebugString();
  } else {
    EXPECT_EQ(s.code(), Code::kCorruption)
        << s << " for " << testing::PrintToString(bytes);
  }
}

TEST(MessageCodecTest, RandomBytesNeverCrashDecoder) {
  google::protobuf::LogSilencer silence;
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> length(0, 96);
  std::uniform_int_distribution<int> byte(0, 255);
  int corrupt = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(length(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(byte(rng));
    ExpectDecodesOrCorruption(bytes);
    if (!Decode(bytes).ok()) ++corrupt;
  }
  // Random bytes are mostly not a header: the loop did exercise rejection.
  EXPECT_GT(corrupt, 1000);
}

TEST(MessageCodecTest, CorruptedValidHeadersNeverCrashDecoder) {
  google::protobuf::LogSilencer silence;
  const std::vector<SArray<char>> data = {SArray<char>(8), SArray<char>(16)};
  const std::vector<std::string> valid = {Encode(FullControlMeta(), data),
                                          Encode(FullDataMeta(), data)};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = valid[i % valid.size()];
    std::uniform_int_distribution<size_t> pos(0, bytes.size() - 1);
    if (i % 4 == 3) {
      bytes.resize(pos(rng));  // Truncation.
    } else {
      size_t at = pos(rng);
      char c = bytes[at];
      while (c == bytes[at]) c = static_cast<char>(byte(rng));
      bytes[at] = c;  // A single changed byte.
    }
    ExpectDecodesOrCorruption(bytes);
    if (!Decode(bytes).ok()) ++rejected;
  }
  EXPECT_GT(rejected, 0);
}

// --- Key-value frames.

template <typename T>
SArray<char> Bytes(const std::vector<T>& values) {
  return SArray<char>(SArray<T>(values));
}

Message MakeMessage(std::vector<SArray<char>> frames, int value_bytes = 0) {
  Message msg;
  msg.meta.value_bytes = value_bytes;
  msg.data = std::move(frames);
  return msg;
}

// The receiver's limits in these tests.
const KVLimits kLimits{/*max_keys_per_request=*/1 << 20, /*max_frame_mb=*/64};

Status Parse(const Message& msg, size_t value_bytes = sizeof(float)) {
  RawKVs kvs;
  return ParseKVFrames(msg, value_bytes, kLimits, &kvs);
}

TEST(KVFramesTest, RoundTripWithoutLensSharesBuffers) {
  RawKVs in;
  in.keys = SArray<Key>({1, 5, 9});
  SArray<float> vals = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  in.vals = SArray<char>(vals);
  Message msg;
  msg.meta.value_bytes = sizeof(float);
  AddKVFrames(in, &msg);
  ASSERT_EQ(msg.data.size(), 2u);
  EXPECT_EQ(static_cast<void*>(msg.data[0].data()),
            static_cast<void*>(in.keys.data()));
  EXPECT_EQ(msg.data[1].data(), in.vals.data());

  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(msg, sizeof(float), kLimits, &out).ok());
  EXPECT_EQ(std::vector<Key>(out.keys.begin(), out.keys.end()),
            std::vector<Key>({1, 5, 9}));
  EXPECT_EQ(out.keys.data(), in.keys.data());
  EXPECT_EQ(out.vals.size(), 6 * sizeof(float));
  EXPECT_EQ(out.vals.data(), in.vals.data());
  EXPECT_EQ(SArray<float>(out.vals)[5], 6.f);
  EXPECT_TRUE(out.lens.empty());
}

TEST(KVFramesTest, RoundTripWithLens) {
  RawKVs in;
  in.keys = SArray<Key>({2, 4, 6});
  in.vals = Bytes<double>({1, 2, 3, 4});
  in.lens = SArray<int>({1, 0, 3});
  Message msg;
  AddKVFrames(in, &msg);
  ASSERT_EQ(msg.data.size(), 3u);

  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(msg, sizeof(double), kLimits, &out).ok());
  EXPECT_EQ(out.keys.size(), 3u);
  EXPECT_EQ(out.vals.size(), 4 * sizeof(double));
  EXPECT_EQ(std::vector<int>(out.lens.begin(), out.lens.end()),
            std::vector<int>({1, 0, 3}));
  EXPECT_EQ(out.lens.data(), in.lens.data());
}

TEST(KVFramesTest, RoundTripThroughHeaderCodec) {
  RawKVs in;
  in.keys = SArray<Key>({kMaxKey});
  in.vals = Bytes<float>({0.5f, 1.5f});
  in.lens = SArray<int>({2});
  Message msg;
  msg.meta.value_bytes = sizeof(float);
  AddKVFrames(in, &msg);
  Message received;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(
      Decode(Encode(msg.meta, msg.data), &received.meta, &frame_bytes).ok());
  ASSERT_TRUE(CheckFrames(frame_bytes, msg.data).ok());
  received.data = msg.data;
  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(received, sizeof(float), kLimits, &out).ok());
  EXPECT_EQ(out.keys[0], kMaxKey);
  EXPECT_EQ(SArray<float>(out.vals)[1], 1.5f);
  EXPECT_EQ(out.lens[0], 2);
}

TEST(KVFramesTest, NoKeysMeansNoFrames) {
  RawKVs in;
  in.vals = Bytes<float>({1.f});  // Ignored without keys.
  Message msg;
  AddKVFrames(in, &msg);
  EXPECT_TRUE(msg.data.empty());

  RawKVs out;
  out.keys = SArray<Key>({1});
  ASSERT_TRUE(ParseKVFrames(msg, sizeof(float), kLimits, &out).ok());
  EXPECT_TRUE(out.keys.empty());
  EXPECT_TRUE(out.vals.empty());
  EXPECT_TRUE(out.lens.empty());
}

TEST(KVFramesTest, KeysWithoutValuesParse) {
  // A pull request: keys and an empty value frame.
  RawKVs in;
  in.keys = SArray<Key>({3, 4});
  Message msg;
  AddKVFrames(in, &msg);
  ASSERT_EQ(msg.data.size(), 2u);
  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(msg, sizeof(float), kLimits, &out).ok());
  EXPECT_EQ(out.keys.size(), 2u);
  EXPECT_TRUE(out.vals.empty());
}

// A pull response that leaves out its keys (they are the request's).
Message AsRequested(std::vector<SArray<char>> frames) {
  Message msg = MakeMessage(std::move(frames), sizeof(float));
  msg.meta.pull = true;
  msg.meta.keys_as_requested = true;
  return msg;
}

TEST(KVFramesTest, KeysAsRequestedLeavesOutTheKeysFrame) {
  RawKVs in;
  in.keys = SArray<Key>({3, 4});
  in.vals = Bytes<float>({1.f, 2.f, 3.f});
  in.lens = SArray<int>({1, 2});
  Message msg;
  msg.meta.pull = true;
  AddKVFrames(in, &msg, /*keys_as_requested=*/true);
  EXPECT_TRUE(msg.meta.keys_as_requested);
  ASSERT_EQ(msg.data.size(), 2u);
  EXPECT_EQ(msg.data[0].data(), in.vals.data());

  Message received;
  std::vector<uint64_t> frame_bytes;
  ASSERT_TRUE(
      Decode(Encode(msg.meta, msg.data), &received.meta, &frame_bytes).ok());
  EXPECT_TRUE(received.meta.keys_as_requested);
  received.data = msg.data;
  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(received, sizeof(float), kLimits, &out).ok());
  EXPECT_TRUE(out.keys.empty());
  EXPECT_EQ(out.vals.size(), 3 * sizeof(float));
  EXPECT_EQ(out.lens.size(), 2u);
  // The receiver fills in the keys it sent and checks the fit.
  out.keys = in.keys;
  EXPECT_TRUE(CheckAsRequested(out, sizeof(float)).ok());
  out.keys = SArray<Key>({3, 4, 5});
  EXPECT_EQ(CheckAsRequested(out, sizeof(float)).code(), Code::kCorruption);
}

TEST(KVFramesTest, KeysAsRequestedIsRefusedWhereItCannotBe) {
  SArray<char> vals = Bytes<float>({1.f, 2.f});
  // Only on a pull response.
  Message request = AsRequested({vals});
  request.meta.request = true;
  EXPECT_EQ(Parse(request).code(), Code::kCorruption);
  Message push = AsRequested({vals});
  push.meta.pull = false;
  EXPECT_EQ(Parse(push).code(), Code::kCorruption);
  // One or two frames.
  EXPECT_EQ(Parse(AsRequested({})).code(), Code::kCorruption);
  EXPECT_EQ(Parse(AsRequested({vals, Bytes<int>({2}), vals})).code(),
            Code::kCorruption);
  // Whole values; lengths whole, not negative, adding up to the values.
  EXPECT_EQ(Parse(AsRequested({SArray<char>(5)})).code(), Code::kCorruption);
  EXPECT_EQ(Parse(AsRequested({vals, SArray<char>(3)})).code(),
            Code::kCorruption);
  EXPECT_EQ(Parse(AsRequested({vals, Bytes<int>({-1, 3})})).code(),
            Code::kCorruption);
  EXPECT_EQ(Parse(AsRequested({vals, Bytes<int>({1, 2})})).code(),
            Code::kCorruption);
  // Another value size.
  Message doubles = AsRequested({vals});
  doubles.meta.value_bytes = sizeof(double);
  EXPECT_EQ(Parse(doubles).code(), Code::kInvalidArgument);
  // Values that do not divide over the keys the receiver sent.
  RawKVs kvs;
  ASSERT_TRUE(ParseKVFrames(AsRequested({Bytes<float>({1, 2, 3})}),
                            sizeof(float), kLimits, &kvs)
                  .ok());
  kvs.keys = SArray<Key>({1, 2});
  EXPECT_EQ(CheckAsRequested(kvs, sizeof(float)).code(), Code::kCorruption);
  kvs.keys = SArray<Key>({1, 2, 3});
  EXPECT_TRUE(CheckAsRequested(kvs, sizeof(float)).ok());
}

TEST(KVFramesTest, RejectsOneOrFourFrames) {
  SArray<char> keys = Bytes<Key>({1});
  SArray<char> vals = Bytes<float>({1.f});
  SArray<char> lens = Bytes<int>({1});
  Status one = Parse(MakeMessage({keys}));
  EXPECT_FALSE(one.ok());
  EXPECT_EQ(one.code(), Code::kCorruption);
  Status four = Parse(MakeMessage({keys, vals, lens, lens}));
  EXPECT_FALSE(four.ok());
  EXPECT_EQ(four.code(), Code::kCorruption);
}

TEST(KVFramesTest, RejectsKeyFrameNotMultipleOfKeySize) {
  Status s = Parse(MakeMessage({SArray<char>(12), Bytes<float>({1.f})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsValueFrameNotMultipleOfValueSize) {
  Status s = Parse(MakeMessage({Bytes<Key>({1}), SArray<char>(7)}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsMisalignedKeyFrame) {
  SArray<char> buffer(17);
  Status s = Parse(MakeMessage({buffer.segment(1, 17), Bytes<float>({1.f})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsLensCountDifferentFromKeys) {
  Status fewer = Parse(MakeMessage(
      {Bytes<Key>({1, 2, 3}), Bytes<float>({1, 2, 3}), Bytes<int>({1, 2})}));
  EXPECT_EQ(fewer.code(), Code::kCorruption) << fewer;
  Status more = Parse(
      MakeMessage({Bytes<Key>({1}), Bytes<float>({1, 2}), Bytes<int>({1, 1})}));
  EXPECT_EQ(more.code(), Code::kCorruption) << more;
  Status partial =
      Parse(MakeMessage({Bytes<Key>({1}), Bytes<float>({1}), SArray<char>(3)}));
  EXPECT_EQ(partial.code(), Code::kCorruption) << partial;
}

TEST(KVFramesTest, RejectsLensThatDoNotAddUpToValues) {
  Status s = Parse(MakeMessage(
      {Bytes<Key>({1, 2}), Bytes<float>({1, 2, 3}), Bytes<int>({1, 1})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
  Status over = Parse(MakeMessage(
      {Bytes<Key>({1, 2}), Bytes<float>({1, 2, 3}), Bytes<int>({2, 2})}));
  EXPECT_EQ(over.code(), Code::kCorruption) << over;
}

TEST(KVFramesTest, RejectsNegativeLens) {
  // -1 + 3 == 2 values: only the sign check catches it.
  Status s = Parse(MakeMessage(
      {Bytes<Key>({1, 2}), Bytes<float>({1, 2}), Bytes<int>({-1, 3})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsNegativeLensWithoutValues) {
  Status s = Parse(
      MakeMessage({Bytes<Key>({1, 2}), SArray<char>(), Bytes<int>({-1, -5})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsResponseWhoseLensCountValuesItDoesNotCarry) {
  Message msg = MakeMessage(
      {Bytes<Key>({1, 2}), SArray<char>(), Bytes<int>({2, 3})}, sizeof(float));
  msg.meta.request = false;
  msg.meta.pull = true;
  Status s = Parse(msg);
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsValuesThatDoNotDivideOverKeys) {
  Status s =
      Parse(MakeMessage({Bytes<Key>({1, 2, 3}), Bytes<float>({1, 2, 3, 4})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
}

TEST(KVFramesTest, RejectsValuesWithoutKeys) {
  Status s = Parse(MakeMessage({SArray<char>(), Bytes<float>({1, 2})}));
  EXPECT_EQ(s.code(), Code::kCorruption) << s;
  Status with_lens =
      Parse(MakeMessage({SArray<char>(), Bytes<float>({1}), SArray<char>()}));
  EXPECT_EQ(with_lens.code(), Code::kCorruption) << with_lens;
}

TEST(KVFramesTest, RejectsSenderWithDifferentValueSize) {
  Message msg = MakeMessage({Bytes<Key>({1}), Bytes<double>({1.0})},
                            static_cast<int>(sizeof(double)));
  Status s = Parse(msg, sizeof(float));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  // The same frames parse for a double-valued app.
  EXPECT_TRUE(Parse(msg, sizeof(double)).ok());
  // A sender that does not say (0) is checked by sizes alone.
  msg.meta.value_bytes = 0;
  EXPECT_TRUE(Parse(msg, sizeof(float)).ok());
}

// --- Key runs: keys in equal steps travel as (first key, count, step).

// Keys first, first + step, ..., n of them.
SArray<Key> KeysInSteps(Key first, size_t n, Key step = 1) {
  SArray<Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = first + i * step;
  return keys;
}

// A run frame as the wire carries it: first key, count, step.
SArray<char> RunFrame(uint64_t first, uint64_t count, uint64_t step = 1) {
  return Bytes<uint64_t>({first, count, step});
}

// A message whose keys frame is a run frame.
Message RunMessage(std::vector<SArray<char>> frames) {
  Message msg = MakeMessage(std::move(frames), sizeof(float));
  msg.meta.key_run = true;
  return msg;
}

TEST(KeyRunTest, KeysInEqualStepsTravelAsARunAndComeBackWhole) {
  // Steps of 1 (a dense tensor), and ps-lite's test_kv_app_benchmark's
  // layout (kMaxKey / num * i + rank).
  const Key wide = kMaxKey / 10000000;
  for (const SArray<Key>& keys :
       {KeysInSteps(1000, 500), KeysInSteps(3, 500, wide)}) {
    RawKVs in;
    in.keys = keys;
    std::vector<float> vals(1000);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
    in.vals = Bytes<float>(vals);
    in.lens = SArray<int>(500, 2);
    for (KeyOrder order : {KeyOrder::kUnknown, KeyOrder::kSortedUnique}) {
      Message msg;
      msg.meta.request = true;
      msg.meta.push = true;
      msg.meta.value_bytes = sizeof(float);
      AddKVFrames(in, &msg, /*keys_as_requested=*/false, order);
      EXPECT_TRUE(msg.meta.key_run);
      ASSERT_EQ(msg.data.size(), 3u);
      EXPECT_EQ(msg.data[0].size(), kKeyRunFrameBytes);
      // Values and lengths are still the caller's buffers.
      EXPECT_EQ(msg.data[1].data(), in.vals.data());
      EXPECT_EQ(static_cast<void*>(msg.data[2].data()),
                static_cast<void*>(in.lens.data()));

      Message received;
      std::vector<uint64_t> frame_bytes;
      ASSERT_TRUE(
          Decode(Encode(msg.meta, msg.data), &received.meta, &frame_bytes)
              .ok());
      EXPECT_TRUE(received.meta.key_run);
      ASSERT_TRUE(CheckFrames(frame_bytes, msg.data).ok());
      received.data = msg.data;
      RawKVs out;
      ASSERT_TRUE(ParseKVFrames(received, sizeof(float), kLimits, &out).ok());
      EXPECT_EQ(std::vector<Key>(out.keys.begin(), out.keys.end()),
                std::vector<Key>(in.keys.begin(), in.keys.end()));
      EXPECT_EQ(out.vals.data(), in.vals.data());
      EXPECT_EQ(out.lens.size(), 500u);
    }
  }
}

TEST(KeyRunTest, APullRequestRunParsesWithoutValues) {
  RawKVs in;
  in.keys = KeysInSteps(7, 4);  // 4 keys: 32 bytes, more than a run frame.
  Message msg;
  msg.meta.request = true;
  msg.meta.pull = true;
  AddKVFrames(in, &msg, false, KeyOrder::kSortedUnique);
  ASSERT_TRUE(msg.meta.key_run);
  ASSERT_EQ(msg.data.size(), 2u);  // The run, and an empty values frame.
  EXPECT_TRUE(msg.data[1].empty());
  RawKVs out;
  ASSERT_TRUE(ParseKVFrames(msg, sizeof(float), kLimits, &out).ok());
  EXPECT_EQ(std::vector<Key>(out.keys.begin(), out.keys.end()),
            std::vector<Key>({7, 8, 9, 10}));
  EXPECT_TRUE(out.vals.empty());
}

TEST(KeyRunTest, KeysThatAreNoRunOrTooFewGoAsTheyAre) {
  // Unequal steps (told by the ends; told only by the gaps); a
  // permutation; a repeated key whose ends look like a run; descending;
  // three keys (24 bytes, no saving); an order that forbids runs.
  const std::vector<std::pair<std::vector<Key>, KeyOrder>> cases = {
      {{1, 2, 4, 5, 6}, KeyOrder::kSortedUnique},
      {{1, 3, 5, 6, 9}, KeyOrder::kSortedUnique},
      {{1, 3, 2, 4}, KeyOrder::kUnknown},
      {{1, 2, 2, 4}, KeyOrder::kUnknown},
      {{5, 4, 3, 2}, KeyOrder::kUnknown},
      {{5, 4, 3, 2}, KeyOrder::kSortedUnique},
      {{8, 9, 10}, KeyOrder::kSortedUnique},
      {{1, 2, 3, 4}, KeyOrder::kAsIs},
  };
  for (const auto& c : cases) {
    RawKVs in;
    in.keys = SArray<Key>(c.first);
    in.vals = Bytes<float>(std::vector<float>(c.first.size(), 1.f));
    Message msg;
    AddKVFrames(in, &msg, false, c.second);
    EXPECT_FALSE(msg.meta.key_run) << c.first.size() << " keys";
    ASSERT_EQ(msg.data.size(), 2u);
    EXPECT_EQ(static_cast<void*>(msg.data[0].data()),
              static_cast<void*>(in.keys.data()));
    RawKVs out;
    ASSERT_TRUE(ParseKVFrames(msg, sizeof(float), kLimits, &out).ok());
    EXPECT_EQ(out.keys.data(), in.keys.data());
  }
  // Runs up to the largest key.
  KeyRun run;
  ASSERT_TRUE(
      FindKeyRun(KeysInSteps(kMaxKey - 3, 4), KeyOrder::kUnknown, &run));
  EXPECT_EQ(run.first, kMaxKey - 3);
  EXPECT_EQ(run.count, 4u);
  EXPECT_EQ(run.step, 1u);
  ASSERT_TRUE(
      FindKeyRun(KeysInSteps(kMaxKey - 30, 4, 10), KeyOrder::kUnknown, &run));
  EXPECT_EQ(run.step, 10u);
  // A keys_as_requested response sends no keys at all.
  RawKVs in;
  in.keys = KeysInSteps(1, 10);
  in.vals = Bytes<float>(std::vector<float>(10, 1.f));
  Message msg;
  msg.meta.pull = true;
  AddKVFrames(in, &msg, /*keys_as_requested=*/true, KeyOrder::kSortedUnique);
  EXPECT_FALSE(msg.meta.key_run);
  EXPECT_TRUE(msg.meta.keys_as_requested);
  EXPECT_EQ(msg.data.size(), 1u);
}

TEST(KeyRunTest, MalformedRunsAreRefusedBeforeAnythingIsAllocated) {
  SArray<char> vals = Bytes<float>({1, 2, 3, 4});
  // Good: 4 keys up to kMaxKey, in steps of 1 and of 5.
  EXPECT_TRUE(Parse(RunMessage({RunFrame(kMaxKey - 3, 4), vals})).ok());
  EXPECT_TRUE(Parse(RunMessage({RunFrame(kMaxKey - 15, 4, 5), vals})).ok());
  // Not 24 bytes.
  EXPECT_EQ(Parse(RunMessage({SArray<char>(16), vals})).code(),
            Code::kCorruption);
  EXPECT_EQ(Parse(RunMessage({SArray<char>(32), vals})).code(),
            Code::kCorruption);
  // No keys; a step of 0 (one key again and again).
  Status zero = Parse(RunMessage({RunFrame(5, 0), SArray<char>()}));
  EXPECT_EQ(zero.code(), Code::kCorruption) << zero;
  Status still = Parse(RunMessage({RunFrame(5, 4, 0), vals}));
  EXPECT_EQ(still.code(), Code::kCorruption) << still;
  // Past the largest key: by one, by a step, and by counts and steps whose
  // product wraps around.
  Status past = Parse(RunMessage({RunFrame(kMaxKey - 2, 4), vals}));
  EXPECT_EQ(past.code(), Code::kCorruption) << past;
  EXPECT_EQ(Parse(RunMessage({RunFrame(kMaxKey - 14, 4, 5), vals})).code(),
            Code::kCorruption);
  EXPECT_EQ(Parse(RunMessage({RunFrame(2, ~uint64_t{0}), vals})).code(),
            Code::kCorruption);
  EXPECT_EQ(
      Parse(RunMessage({RunFrame(0, 4, (~uint64_t{0} / 3) + 1), vals})).code(),
      Code::kCorruption);
  // More keys than a request may have (the limit's words, as for a keys
  // frame), or than a keys frame of EMBER_MAX_FRAME_MB could carry; a huge
  // count never reaches an allocation.
  KVLimits small{/*max_keys_per_request=*/100, /*max_frame_mb=*/64};
  RawKVs kvs;
  Status many = ParseKVFrames(RunMessage({RunFrame(0, 101), SArray<char>()}),
                              sizeof(float), small, &kvs);
  EXPECT_EQ(many.code(), Code::kInvalidArgument) << many;
  EXPECT_NE(many.message().find("EMBER_MAX_KEYS_PER_REQUEST is 100"),
            std::string::npos)
      << many;
  EXPECT_TRUE(ParseKVFrames(RunMessage({RunFrame(0, 100), SArray<char>()}),
                            sizeof(float), small, &kvs)
                  .ok());
  EXPECT_EQ(kvs.keys.size(), 100u);
  KVLimits tiny_frames{/*max_keys_per_request=*/1 << 28, /*max_frame_mb=*/1};
  const uint64_t frame_keys = (uint64_t{1} << 20) / sizeof(Key);
  Status big =
      ParseKVFrames(RunMessage({RunFrame(0, frame_keys + 1), SArray<char>()}),
                    sizeof(float), tiny_frames, &kvs);
  EXPECT_EQ(big.code(), Code::kInvalidArgument) << big;
  EXPECT_NE(big.message().find("EMBER_MAX_FRAME_MB is 1"), std::string::npos)
      << big;
  EXPECT_EQ(Parse(RunMessage({RunFrame(0, uint64_t{1} << 30), vals})).code(),
            Code::kInvalidArgument);
  // The values and lengths must fit the run's count.
  EXPECT_EQ(Parse(RunMessage({RunFrame(0, 3), vals})).code(),
            Code::kCorruption);
  EXPECT_EQ(
      Parse(RunMessage({RunFrame(0, 4), vals, Bytes<int>({1, 1, 2})})).code(),
      Code::kCorruption);
  EXPECT_TRUE(
      Parse(RunMessage({RunFrame(0, 3), vals, Bytes<int>({1, 1, 2})})).ok());
  // A run needs frames, and is never a keys_as_requested response.
  EXPECT_EQ(Parse(RunMessage({})).code(), Code::kCorruption);
  Message both = RunMessage({vals});
  both.meta.pull = true;
  both.meta.keys_as_requested = true;
  EXPECT_EQ(Parse(both).code(), Code::kCorruption);
}

TEST(NamesTest, EveryRoleAndControlHasItsNameAndOthersAreUnknown) {
  EXPECT_STREQ(RoleName(Role::kScheduler), "scheduler");
  EXPECT_STREQ(RoleName(Role::kServer), "server");
  EXPECT_STREQ(RoleName(Role::kWorker), "worker");
  EXPECT_STREQ(RoleName(static_cast<Role>(3)), "unknown");
  EXPECT_STREQ(RoleName(static_cast<Role>(-1)), "unknown");
  EXPECT_STREQ(ControlName(Control::kNone), "none");
  EXPECT_STREQ(ControlName(Control::kJoin), "join");
  EXPECT_STREQ(ControlName(Control::kNodeTable), "node_table");
  EXPECT_STREQ(ControlName(Control::kBarrier), "barrier");
  EXPECT_STREQ(ControlName(Control::kHeartbeat), "heartbeat");
  EXPECT_STREQ(ControlName(Control::kNodeFailed), "node_failed");
  EXPECT_STREQ(ControlName(Control::kAbort), "abort");
  EXPECT_STREQ(ControlName(Control::kLeave), "leave");
  EXPECT_STREQ(ControlName(Control::kReplicaReady), "replica_ready");
  EXPECT_STREQ(ControlName(Control::kHandoverDone), "handover_done");
  EXPECT_STREQ(ControlName(Control::kLeaveRequest), "leave_request");
  EXPECT_STREQ(ControlName(Control::kWorkerChange), "worker_change");
  EXPECT_STREQ(ControlName(Control::kRejoin), "rejoin");
  EXPECT_STREQ(ControlName(Control::kSwitched), "switched");
  EXPECT_STREQ(ControlName(static_cast<Control>(14)), "unknown");
}

}  // namespace
}  // namespace ps
