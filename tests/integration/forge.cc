// forge: a process that never joined the cluster, attacking it the way any
// local user could. It connects to the nodes' ports with ZeroMQ DEALER
// sockets (what Ember's nodes use) and sends, depending on --mode:
//
//   control  forged control messages in the scheduler's name (ABORT, a
//            NODE_TABLE with a bad ring, NODE_FAILED, heartbeat echoes),
//            forged heartbeats, LEAVEs and barrier requests in members'
//            names, forged pushes in workers' names, and a JOIN without the
//            cluster token, whose answer it prints;
//   garbage  random frames and headers that announce what is not there, as
//            fast as it can, for --seconds.
//
// The attacked job must finish with exact results (cluster_kv checks its
// sums); hostile_test.sh checks the nodes' logs and memory.
#include <gflags/gflags.h>
#include <zmq.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "message/message.h"
#include "meta.pb.h"

DEFINE_string(mode, "control", "control or garbage");
DEFINE_string(scheduler, "", "the scheduler's host:port");
DEFINE_string(nodes, "", "the members: id@host:port,...");
DEFINE_double(seconds, 10, "garbage: how long to send");
DEFINE_string(curve_public_key_file, "",
              "connect with ZeroMQ CURVE to nodes whose public key is the "
              "first line of this file (an EMBER_CURVE_KEY_FILE), with a key "
              "pair of our own: all an outsider can do");

namespace {

struct Target {
  int id = 0;  // 1: the scheduler
  std::string address;
  void* socket = nullptr;
};

bool ParseTargets(std::vector<Target>* targets) {
  if (FLAGS_scheduler.empty()) return false;
  targets->push_back({ps::Meta::kEmpty, FLAGS_scheduler, nullptr});
  targets->back().id = 1;
  std::stringstream list(FLAGS_nodes);
  std::string item;
  while (std::getline(list, item, ',')) {
    size_t at = item.find('@');
    if (at == std::string::npos) return false;
    targets->push_back({std::stoi(item.substr(0, at)), item.substr(at + 1)});
  }
  return true;
}

// Sends the header of `meta` and `frames`; false if the peer does not take
// it within the socket's send timeout.
bool Send(void* socket, const ps::Meta& meta,
          const std::vector<std::string>& frames = {}) {
  std::vector<ps::SArray<char>> data;
  for (const std::string& f : frames) {
    ps::SArray<char> a;
    a.CopyFrom(f.data(), f.size());
    data.push_back(a);
  }
  std::string header;
  ps::EncodeMeta(meta, data, &header);
  if (zmq_send(socket, header.data(), header.size(),
               frames.empty() ? 0 : ZMQ_SNDMORE) < 0) {
    return false;
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (zmq_send(socket, frames[i].data(), frames[i].size(),
                 i + 1 < frames.size() ? ZMQ_SNDMORE : 0) < 0) {
      return false;
    }
  }
  return true;
}

ps::Meta Control(int from, int to, ps::Control control) {
  ps::Meta m;
  m.sender = from;
  m.recipient = to;
  m.control = control;
  m.request = true;
  return m;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

int ForgeControl(void* context, std::vector<Target>* targets) {
  std::vector<int> servers, workers;
  for (const Target& t : *targets) {
    if (t.id >= 8) (t.id % 2 == 0 ? servers : workers).push_back(t.id);
  }
  int sent = 0;
  for (Target& t : *targets) {
    auto send = [&](const ps::Meta& m,
                    const std::vector<std::string>& frames = {}) {
      sent += Send(t.socket, m, frames) ? 1 : 0;
    };
    if (t.id == 1) {
      for (int s : servers) send(Control(s, 1, ps::Control::kHeartbeat));
      for (int w : workers) {
        send(Control(w, 1, ps::Control::kLeave));
        ps::Meta barrier = Control(w, 1, ps::Control::kBarrier);
        barrier.barrier_group = 4;  // Workers.
        send(barrier);
      }
      continue;
    }
    ps::Meta abort = Control(1, t.id, ps::Control::kAbort);
    abort.reason = "forged abort";
    send(abort);
    ps::Meta table = Control(1, t.id, ps::Control::kNodeTable);
    table.ring.epoch = 9;
    table.ring.server_ids = {t.id};
    table.ring.begins = {12345};  // Not a ring: it must begin at 0.
    table.ring.owners = {7};      // Out of range.
    table.run_key = std::string(16, 'k');
    send(table);
    ps::Meta failed = Control(1, t.id, ps::Control::kNodeFailed);
    failed.failed_node = t.id == servers[0] ? workers[0] : servers[0];
    failed.reason = "forged failure";
    send(failed);
    ps::Meta echo = Control(1, t.id, ps::Control::kHeartbeat);
    echo.request = false;
    echo.auth = ps::Key128{0x6161616161616161, 1};  // A guess.
    send(echo);
    if (t.id % 2 == 0) {
      // A push of 10^6 to the first keys, in every worker's name: if one
      // were applied, the workers' sums would be wrong.
      for (int w : workers) {
        ps::Meta push;
        push.sender = w;
        push.recipient = t.id;
        push.request = true;
        push.push = true;
        push.timestamp = 1 << 30;
        push.value_bytes = 4;
        std::vector<uint64_t> keys{0, 1, 2, 3};
        std::vector<float> vals(keys.size(), 1e6f);
        send(push, {Bytes(keys), Bytes(vals)});
      }
    }
  }
  std::printf("forge: sent %d forged control and data messages\n", sent);

  // A join without the cluster token, from a socket of our own that can
  // hear the answer.
  void* router = zmq_socket(context, ZMQ_ROUTER);
  if (zmq_bind(router, "tcp://127.0.0.1:*") != 0) {
    std::printf("forge: cannot bind: %s\n", zmq_strerror(zmq_errno()));
    return 1;
  }
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &size);
  std::string bound(endpoint);
  ps::Meta join = Control(ps::Meta::kEmpty, 1, ps::Control::kJoin);
  ps::NodeInfo me;
  me.role = ps::Role::kWorker;
  me.host = "127.0.0.1";
  me.port = std::stoi(bound.substr(bound.rfind(':') + 1));
  join.nodes.push_back(me);
  join.process_key = std::string(16, 'p');
  Send((*targets)[0].socket, join);
  int timeout_ms = 5000;
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  std::vector<std::string> frames;
  while (true) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, router, 0) < 0) {
      zmq_msg_close(&part);
      break;
    }
    frames.emplace_back(static_cast<char*>(zmq_msg_data(&part)),
                        zmq_msg_size(&part));
    bool more = zmq_msg_more(&part);
    zmq_msg_close(&part);
    if (!more) break;
  }
  ps::Meta answer;
  std::vector<uint64_t> frame_bytes;
  if (frames.size() >= 2 &&
      ps::DecodeMeta(frames[1].data(), frames[1].size(), &answer, &frame_bytes)
          .ok()) {
    std::printf("forge: the join was answered: %s: %s\n",
                ps::ControlName(answer.control), answer.reason.c_str());
  } else {
    std::printf("forge: the join was not answered within %d ms\n", timeout_ms);
  }
  zmq_close(router);
  return 0;
}

int ForgeGarbage(std::vector<Target>* targets) {
  std::mt19937_64 rng(42);
  // Frames are cut from a pool of random bytes (generating each afresh
  // would make the sender, not the receiver, the bottleneck).
  std::string pool(8 << 20, '\0');
  for (char& c : pool) c = static_cast<char>(rng());
  auto random_bytes = [&](size_t n) {
    return pool.substr(rng() % (pool.size() - n), n);
  };
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(FLAGS_seconds);
  uint64_t messages = 0, bytes = 0, refused = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (Target& t : *targets) {
      std::vector<std::string> frames;
      switch (rng() % 5) {
        case 0:  // Random bytes, one frame.
          frames.push_back(random_bytes(1 + rng() % 512));
          break;
        case 1:  // Random header, random frames.
          frames.push_back(random_bytes(1 + rng() % 64));
          for (int i = rng() % 4; i > 0; --i) {
            frames.push_back(random_bytes(rng() % 65536));
          }
          break;
        case 2: {  // A valid header announcing frames that are not there.
          ps::pb::MetaPb p;
          p.set_sender(9);
          p.set_recipient(t.id);
          p.set_request(true);
          p.set_push(true);
          p.add_frame_bytes(uint64_t{1} << 20);
          p.add_frame_bytes(uint64_t{1} << 40);
          p.add_frame_bytes(~uint64_t{0});
          std::string header;
          p.SerializeToString(&header);
          frames.push_back(header);
          frames.push_back(random_bytes(100));
          break;
        }
        case 3:  // A large frame (a large push's worth).
          frames.push_back(random_bytes(16));
          frames.push_back(random_bytes(rng() % (4 << 20)));
          break;
        default: {  // A well-formed push without proof of membership.
          ps::Meta m;
          m.sender = 9;
          m.recipient = t.id;
          m.request = true;
          m.push = true;
          m.value_bytes = 4;
          std::vector<ps::SArray<char>> data(2);
          std::string keys = random_bytes(8 * 64), vals = random_bytes(4 * 64);
          data[0].CopyFrom(keys.data(), keys.size());
          data[1].CopyFrom(vals.data(), vals.size());
          std::string header;
          ps::EncodeMeta(m, data, &header);
          frames = {header, keys, vals};
          break;
        }
      }
      bool ok = true;
      for (size_t i = 0; i < frames.size() && ok; ++i) {
        ok = zmq_send(t.socket, frames[i].data(), frames[i].size(),
                      i + 1 < frames.size() ? ZMQ_SNDMORE : 0) >= 0;
        bytes += frames[i].size();
      }
      ok ? ++messages : ++refused;
    }
  }
  std::printf(
      "forge: sent %llu garbage messages (%.1f MB) in %.1f s; %llu not taken "
      "(backpressure)\n",
      static_cast<unsigned long long>(messages), bytes / 1e6, FLAGS_seconds,
      static_cast<unsigned long long>(refused));
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::vector<Target> targets;
  if (!ParseTargets(&targets) ||
      (FLAGS_mode != "control" && FLAGS_mode != "garbage")) {
    std::fprintf(stderr,
                 "usage: forge --mode=control|garbage --scheduler=HOST:PORT "
                 "--nodes=ID@HOST:PORT,...\n");
    return 2;
  }
  std::string server_key;
  char public_key[41], secret_key[41];
  if (!FLAGS_curve_public_key_file.empty()) {
    std::ifstream in(FLAGS_curve_public_key_file);
    std::getline(in, server_key);
    if (server_key.size() != 40 || zmq_curve_keypair(public_key, secret_key)) {
      std::fprintf(stderr, "forge: no public key in %s\n",
                   FLAGS_curve_public_key_file.c_str());
      return 2;
    }
  }
  void* context = zmq_ctx_new();
  for (Target& t : targets) {
    t.socket = zmq_socket(context, ZMQ_DEALER);
    if (!server_key.empty()) {
      zmq_setsockopt(t.socket, ZMQ_CURVE_SERVERKEY, server_key.c_str(), 41);
      zmq_setsockopt(t.socket, ZMQ_CURVE_PUBLICKEY, public_key, 41);
      zmq_setsockopt(t.socket, ZMQ_CURVE_SECRETKEY, secret_key, 41);
    }
    int timeout_ms = 100, linger = 0;
    zmq_setsockopt(t.socket, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms));
    zmq_setsockopt(t.socket, ZMQ_LINGER, &linger, sizeof(linger));
    std::string endpoint = "tcp://" + t.address;
    if (zmq_connect(t.socket, endpoint.c_str()) != 0) {
      std::fprintf(stderr, "forge: cannot connect to %s\n", endpoint.c_str());
      return 1;
    }
  }
  int rc = FLAGS_mode == "control" ? ForgeControl(context, &targets)
                                   : ForgeGarbage(&targets);
  // Let the last messages leave before the sockets close.
  for (Target& t : targets) {
    int linger = 2000;
    zmq_setsockopt(t.socket, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(t.socket);
  }
  zmq_ctx_term(context);
  std::fflush(stdout);
  return rc;
}
