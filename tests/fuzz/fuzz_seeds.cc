// Writes the seed corpora of the fuzz targets from real messages and files,
// so the fuzzers start from inputs that reach deep into each decoder:
//   fuzz_seeds tests/fuzz/corpus
// (corpus/<target>/<name>; run again after a format change).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "app/kv_frames.h"
#include "message/message.h"
#include "model/checkpoint.h"
#include "model/model_control.h"
#include "partition/key_ring.h"

namespace {

std::string root;

void Write(const std::string& target, const std::string& name,
           const std::string& bytes) {
  std::string dir = root + "/" + target;
  mkdir(root.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

// A message as fuzz_message reads it: each frame with a 2-byte length.
std::string Frames(const ps::Message& msg) {
  std::string header;
  ps::EncodeMeta(msg.meta, msg.data, &header);
  std::vector<std::string> frames{header};
  for (const auto& d : msg.data) frames.emplace_back(d.data(), d.size());
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::string& f = frames[i];
    if (i + 1 < frames.size()) {
      out += static_cast<char>(f.size() & 0xff);
      out += static_cast<char>(f.size() >> 8);
    }
    out += f;
  }
  return out;
}

template <typename T>
ps::SArray<char> Frame(const std::vector<T>& v) {
  ps::SArray<char> a;
  a.CopyFrom(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return a;
}

void MessageSeeds() {
  ps::Message push;
  push.meta.sender = 9;
  push.meta.recipient = 8;
  push.meta.request = true;
  push.meta.push = true;
  push.meta.timestamp = 3;
  push.meta.value_bytes = 4;
  push.meta.auth = ps::Key128{0x6b6b6b6b6b6b6b6b, 0x6b6b6b6b6b6b6b6b};
  push.data = {Frame(std::vector<uint64_t>{1, 5, 9}),
               Frame(std::vector<float>{1, 2, 3})};
  Write("message", "push", Frames(push));
  push.data.push_back(Frame(std::vector<int>{1, 1, 1}));
  Write("message", "push_lens", Frames(push));

  // A push of keys 100..163 as a key run.
  ps::Message run;
  run.meta = push.meta;
  ps::RawKVs dense;
  dense.keys = ps::SArray<ps::Key>(64);
  for (size_t i = 0; i < dense.keys.size(); ++i) dense.keys[i] = 100 + i;
  dense.vals = Frame(std::vector<float>(64, 0.5f));
  ps::AddKVFrames(dense, &run, /*keys_as_requested=*/false,
                  ps::KeyOrder::kSortedUnique);
  Write("message", "push_key_run", Frames(run));

  ps::Message pull;
  pull.meta.sender = 8;
  pull.meta.recipient = 9;
  pull.meta.pull = true;
  pull.meta.keys_as_requested = true;
  pull.meta.value_bytes = 4;
  pull.data = {Frame(std::vector<float>{1, 2, 3, 4})};
  Write("message", "pull_response_as_requested", Frames(pull));

  ps::Message table;
  table.meta.sender = 1;
  table.meta.recipient = 9;
  table.meta.control = ps::Control::kNodeTable;
  table.meta.run_key = std::string(16, 'r');
  for (int id : {1, 8, 10, 9}) {
    ps::NodeInfo n;
    n.id = id;
    n.role = id == 1 ? ps::Role::kScheduler
                     : (id % 2 ? ps::Role::kWorker : ps::Role::kServer);
    n.host = "127.0.0.1";
    n.port = 4000 + id;
    table.meta.nodes.push_back(n);
  }
  auto ring = ps::KeyRing::EvenSplit({8, 10}, 1);
  table.meta.ring.epoch = 1;
  table.meta.ring.server_ids = ring->server_ids();
  table.meta.ring.begins = ring->begins();
  table.meta.ring.owners = ring->owners();
  Write("message", "node_table", Frames(table));

  ps::Message join;
  join.meta.recipient = 1;
  join.meta.request = true;
  join.meta.control = ps::Control::kJoin;
  join.meta.process_key = std::string(16, 'p');
  join.meta.nodes.push_back(table.meta.nodes[1]);
  Write("message", "join", Frames(join));

  ps::Message barrier;
  barrier.meta.sender = 9;
  barrier.meta.recipient = 1;
  barrier.meta.control = ps::Control::kBarrier;
  barrier.meta.barrier_group = 4;
  barrier.meta.status_code = 3;
  barrier.meta.status_message = "server 1 is dead";
  Write("message", "barrier_release", Frames(barrier));
}

void CheckpointSeeds() {
  ps::model::ModelShard shard;
  shard.version = 7;
  shard.num_servers = 2;
  shard.server_rank = 1;
  shard.ring_epoch = 3;
  shard.ring_server_ids = {8, 9};
  shard.ring_begins = {0, uint64_t{1} << 63};
  shard.ring_owners = {0, 1};
  shard.ring_replicas = 1;
  ps::model::TableShard t;
  t.name = "emb";
  t.table_id = 3;
  t.dim = 2;
  t.initializer = "normal(0,0.1)";
  t.optimizer = "adagrad(lr=0.1)";
  t.slot_floats = 2;
  t.ids = {4, 8};
  t.weights = {1, 2, 3, 4};
  t.slots = {0.1f, 0.1f, 0.2f, 0.2f};
  shard.tables.push_back(t);
  ps::model::DenseShard d;
  d.name = "w";
  d.shape = {2, 2};
  d.values = {1, 2, 3, 4};
  d.optimizer = "sgd(lr=0.1)";
  shard.dense.push_back(d);
  std::string path = root + "/checkpoint.tmp";
  if (!ps::model::WriteCheckpoint(path, shard).ok()) {
    std::fprintf(stderr, "cannot write a checkpoint\n");
    return;
  }
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  unlink(path.c_str());
  // Even first byte: the whole file; odd: the payload under a fixed header.
  Write("checkpoint", "file", std::string(1, '\0') + file);
  Write("checkpoint", "payload",
        std::string(1, '\1') + file.substr(ps::model::kCheckpointHeaderSize));
}

// A control request as fuzz_specs reads it: the head byte, then the body.
void Request(const std::string& name, const ps::model::ControlRequest& r) {
  int head = 0;
  std::string body = ps::model::EncodeControlRequest(r, &head);
  Write("specs", name, std::string(1, static_cast<char>(head)) + body);
}

void SpecSeeds() {
  using ps::model::ControlOp;
  ps::model::ControlRequest table;
  table.op = ControlOp::kRegisterTable;
  table.name = "emb";
  table.dim = 8;
  table.initializer = "normal(0,0.01)";
  table.optimizer = "adam(lr=0.001,beta1=0.9)";
  table.consistency = "ssp:2";
  Request("table", table);

  ps::model::ControlRequest dense;
  dense.op = ControlOp::kRegisterDense;
  dense.name = "w";
  dense.shape = {10, 10};
  dense.optimizer = "momentum(lr=0.1,nesterov=true)";
  dense.consistency = "bsp";
  Request("dense", dense);

  // Every spec the parsers know, carried in the fields they are read from.
  ps::model::ControlRequest specs = table;
  specs.name = "sgd(lr=0.1)";
  specs.initializer = "truncated_normal(0,1)";
  specs.optimizer = "ftrl(alpha=0.1,beta=1,l1=0.01,l2=0.01)";
  specs.consistency = "range";
  Request("optimizers", specs);
  specs.initializer = "uniform(-1,1)";
  specs.optimizer = "adagrad(0.1,initial_accumulator_value=0.1)";
  specs.consistency = "spread";
  Request("initializers", specs);
  specs.initializer = "constant(0.5)";
  specs.optimizer = "adam(0.01)";
  specs.consistency = "asp";
  Request("settings", specs);

  ps::model::ControlRequest save;
  save.op = ControlOp::kSave;
  save.dir = "/tmp/checkpoint";
  Request("save", save);
  ps::model::ControlRequest version;
  version.op = ControlOp::kVersion;
  Request("version", version);

  ps::model::ControlReply reply;
  reply.status = ps::Status::InvalidArgument("'emb' has another spec");
  reply.version = 12;
  Write("specs", "reply",
        std::string(1, '\0') + ps::model::EncodeControlReply(reply));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  root = argv[1];
  MessageSeeds();
  CheckpointSeeds();
  SpecSeeds();
  return 0;
}
