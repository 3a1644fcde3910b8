// zmq_topology: what raw ZeroMQ moves in a parameter server's topology, the
// baseline of Ember's multi-server rows (scripts/bench.py).
//
//   zmq_topology --servers=2 --clients=2 --keys=1000 --bytes_per_key=4
//                [--mode=push] [--window=8] [--seconds=2]
//                [--replies=separate] [--forward=none]
//
// The program forks --servers server processes and --clients client
// processes before any ZeroMQ context exists. A "request" is what a worker's
// sparse request puts on the wire: one message to every server, carrying
// that server's share of the keys (8 bytes each) and, for a push, of the
// values; the answer is an empty acknowledgement (push) or the values
// (pull). Each client keeps --window requests in flight and waits for all
// of a request's answers before it counts it. Messages have three frames (a
// 32-byte header, keys, values), sent zero-copy from preallocated buffers.
//
// --replies=separate (the default) answers over a second TCP connection, as
// Ember and ps-lite do (every node receives on its ROUTER and sends through
// one DEALER per peer); --replies=same answers back over the request's
// connection.
//
// --transport=ipc reaches every peer through an abstract Unix socket, as
// Ember does between nodes of one network namespace (EMBER_LOCAL_IPC);
// tcp (the default) through loopback TCP.
//
// --curve encrypts every connection with ZeroMQ's CURVE, as EMBER_CURVE=1
// does (one key pair for all, made before the forks; every ROUTER a CURVE
// server, every DEALER a client): the ceiling of Ember's CURVE figures.
// --io_threads sets ZMQ_IO_THREADS of every process (ZeroMQ's default, 1,
// is what Ember uses); CURVE encrypts and decrypts on those threads.
//
// --forward=ack (separate replies, at least 2 servers) is the message
// pattern of Ember's replication with one copy (EMBER_REPLICAS=1,
// docs/replication.md): a server forwards each push it receives (its
// header, and the keys and values frames it received, not copied) to its
// successor server (index + 1, mod --servers) through a DEALER to that
// server's ROUTER; the successor acknowledges the copy (a header alone)
// through its DEALER to the forwarder's ROUTER, and only then does the
// forwarder answer the client. So a push is four messages instead of two,
// and every server also receives its predecessor's copies: the ceiling of
// Ember's on/off ratio. --forward=chain is chain replication's pattern
// instead: the successor answers the client itself (three messages). Pulls
// are not forwarded, as in Ember. Each server counts the copies it
// forwarded, the acknowledgements it received and the copies it received;
// the run fails unless they agree, and the RESULT line gives the copies.
// --forward=batch is --forward=ack with batched copies: while a server's
// copies are unacknowledged, the pushes it receives wait, and go on to the
// successor together in one message (one acknowledgement for all) when the
// acknowledgement comes; copy_messages in the RESULT line counts those
// messages. --forward=coalesce is --forward=batch sending, for each client
// in a batch, only its latest push's keys and values (with every held
// push's header, in one frame): the pattern of replicating the state of a
// key set a client repeats rather than each push to it (the holder
// overwriting the rows with the owner's values), whose copies shrink with
// the batch. --forward=async is --forward=ack answering the client at once,
// without waiting for the acknowledgement: the pattern of a worker that
// keeps each push until its copy is known to be held (it would learn so
// later) and so gets its answer first. --copy_keys=false leaves the keys frame
// out of every copy and
// --request_keys=false sends an 8-byte keys frame in each request: what the
// paper's key caching (the receiver knowing a request's keys already) could
// save at most (docs/replication.md, "Measured: batched copies").
//
// --requests=N makes every client send exactly N requests, with no warm-up,
// instead of running for --seconds: a fixed amount of work, whose
// instructions callgrind can count (scripts/bench_multi.py, "callgrind").
//
// Output, one line:
//   RESULT baseline=zmq_topology servers=2 clients=2 keys=1000 mode=push
//          window=8 req_s=... keys_s=... replies=separate transport=tcp
//          curve=0 io_threads=1 forward=none copies=0 ... client_pids=...
#include <gflags/gflags.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "util/malloc_tuning.h"

DEFINE_int32(servers, 2, "server processes");
DEFINE_int32(clients, 2, "client processes");
DEFINE_int64(keys, 1000, "keys per request, split evenly over the servers");
DEFINE_int32(bytes_per_key, 4, "value bytes per key");
DEFINE_string(mode, "push", "push or pull");
DEFINE_int32(window, 8, "requests in flight per client");
DEFINE_double(seconds, 2, "measured duration, in seconds");
DEFINE_double(warmup_seconds, 0.5, "unmeasured run first");
DEFINE_int64(requests, 0,
             "if > 0: every client sends exactly this many requests, with no "
             "warm-up, instead of running for --seconds (for callgrind)");
DEFINE_string(replies, "separate", "separate or same");
DEFINE_string(transport, "tcp", "tcp or ipc (abstract Unix sockets)");
DEFINE_int32(sndbuf, -1, "ZMQ_SNDBUF of every socket (-1: the OS default)");
DEFINE_int64(max_frame, 0,
             "if > 0: send keys and values in frames of at most this many "
             "bytes");
DEFINE_int32(malloc_keep_mb, 256,
             "malloc settings as an Ember node's (EMBER_MALLOC_KEEP_MB; 0 "
             "leaves malloc alone)");
DEFINE_int32(rcvbuf, -1, "ZMQ_RCVBUF of every socket (-1: the OS default)");
DEFINE_bool(curve, false, "encrypt every connection with ZeroMQ's CURVE");
DEFINE_int32(io_threads, 1, "ZMQ_IO_THREADS of every process");
DEFINE_string(forward, "none",
              "none; ack: each server forwards every push to its successor "
              "server and answers after the successor's acknowledgement; "
              "batch: as ack, but the pushes that come while a copy is "
              "unacknowledged wait and go on together in one message; "
              "coalesce: as batch, with only each client's latest keys and "
              "values; async: as ack, but the client is answered at once, "
              "not after the acknowledgement; chain: the successor answers "
              "the client");
DEFINE_bool(copy_keys, true,
            "false: a forwarded copy leaves out its keys frame, as if the "
            "successor knew the keys already (the paper's key caching)");
DEFINE_bool(request_keys, true,
            "false: a request's keys frame is 8 bytes, as if the server knew "
            "the keys already (the paper's key caching)");

namespace {

void NoFree(void*, void*) {}

// --curve: the one key pair of the run, made before the forks.
char g_public[41], g_secret[41];

void* NewContext() {
  void* ctx = zmq_ctx_new();
  zmq_ctx_set(ctx, ZMQ_IO_THREADS, FLAGS_io_threads);
  return ctx;
}

void* NewSocket(void* ctx, int type) {
  void* s = zmq_socket(ctx, type);
  zmq_setsockopt(s, ZMQ_SNDBUF, &FLAGS_sndbuf, sizeof(int));
  zmq_setsockopt(s, ZMQ_RCVBUF, &FLAGS_rcvbuf, sizeof(int));
  if (FLAGS_curve && type == ZMQ_ROUTER) {
    const int server = 1;
    zmq_setsockopt(s, ZMQ_CURVE_SERVER, &server, sizeof(server));
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, g_secret, 41);
  } else if (FLAGS_curve) {
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, g_public, 41);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, g_public, 41);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, g_secret, 41);
  }
  return s;
}

// What a message is (Header::kind); clients send kRequest.
enum Kind : uint8_t { kRequest = 0, kCopy = 1, kCopyAck = 2 };

struct Header {
  uint32_t client;
  uint32_t slot;
  uint64_t request;
  uint8_t kind;  // Kind
  uint8_t from;  // a copy or its acknowledgement: the sending server
  uint8_t pad[14];
};
static_assert(sizeof(Header) == 32, "a 32-byte header, as documented");

// What a server of --forward=ack|chain counts (written to the stats pipe once
// every client has said goodbye).
struct ForwardStats {
  int server;
  uint64_t forwarded;  // copies sent to the successor
  uint64_t acked;      // acknowledgements received from it
  uint64_t received;   // copies received from the predecessor
  uint64_t messages;   // messages that carried the copies sent
};

// A small frame (a header, often on the caller's stack) is copied; a large
// one is sent without a copy and must outlive the send (the I/O thread may
// read it later, as under CURVE).
bool SendOne(void* socket, const void* data, size_t size, bool more) {
  if (size <= sizeof(Header)) {
    return zmq_send(socket, data, size, more ? ZMQ_SNDMORE : 0) >= 0;
  }
  zmq_msg_t m;
  zmq_msg_init_data(&m, const_cast<void*>(data), size, NoFree, nullptr);
  if (zmq_msg_send(&m, socket, more ? ZMQ_SNDMORE : 0) < 0) {
    zmq_msg_close(&m);
    return false;
  }
  return true;
}

bool SendFrame(void* socket, const void* data, size_t size, bool more) {
  const size_t cap = FLAGS_max_frame > 0 ? FLAGS_max_frame : size;
  const char* p = static_cast<const char*>(data);
  while (size > cap) {
    if (!SendOne(socket, p, cap, true)) return false;
    p += cap;
    size -= cap;
  }
  return SendOne(socket, p, size, more);
}

// Receives every frame of one message; returns the number of frames.
int RecvAll(void* socket, std::vector<zmq_msg_t>* frames) {
  for (auto& f : *frames) zmq_msg_close(&f);
  frames->clear();
  int more = 1;
  while (more) {
    frames->emplace_back();
    zmq_msg_init(&frames->back());
    if (zmq_msg_recv(&frames->back(), socket, 0) < 0) return -1;
    more = zmq_msg_more(&frames->back());
  }
  return static_cast<int>(frames->size());
}

// The forking process's pid, which names this run's ipc endpoints.
pid_t g_run = 0;

// Binds `router` to a loopback TCP port (which names the endpoint either
// way) and, with --transport=ipc, to the ipc endpoint of that port; returns
// the port.
int BindEndpoint(void* router) {
  zmq_bind(router, "tcp://127.0.0.1:*");
  char endpoint[256];
  size_t len = sizeof(endpoint);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len);
  int port = std::atoi(std::strrchr(endpoint, ':') + 1);
  if (FLAGS_transport == "ipc") {
    zmq_bind(router, ("ipc://@zmq-topology-" + std::to_string(g_run) + "-" +
                      std::to_string(port))
                         .c_str());
  }
  return port;
}

void ConnectEndpoint(void* dealer, int port) {
  const std::string endpoint = FLAGS_transport == "ipc"
                                   ? "ipc://@zmq-topology-" +
                                         std::to_string(g_run) + "-" +
                                         std::to_string(port)
                                   : "tcp://127.0.0.1:" + std::to_string(port);
  zmq_connect(dealer, endpoint.c_str());
}

size_t ShareOf(int server) {
  const int64_t base = FLAGS_keys / FLAGS_servers;
  return static_cast<size_t>(base +
                             (server < FLAGS_keys % FLAGS_servers ? 1 : 0));
}

// A server: receives on its ROUTER and answers, either back through it
// (same) or through a DEALER to the client's ROUTER (separate). With
// --forward=ack|chain it also reads every server's port from `peer_ports_pipe`,
// forwards pushes to its successor and acknowledges its predecessor's
// copies, and writes its ForwardStats to `stats_pipe` once every client has
// said goodbye.
void RunServer(int index, int port_pipe, int client_ports_pipe,
               int peer_ports_pipe, int stats_pipe) {
  void* ctx = NewContext();
  void* router = NewSocket(ctx, ZMQ_ROUTER);
  int port = BindEndpoint(router);
  int msg[2] = {index, port};
  if (write(port_pipe, msg, sizeof(msg)) != sizeof(msg)) _exit(1);
  const bool same = FLAGS_replies == "same";
  auto dealer_to = [&](int p) {
    void* d = NewSocket(ctx, ZMQ_DEALER);
    int hwm = 0;
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    ConnectEndpoint(d, p);
    return d;
  };
  // Forwarding: one DEALER per peer server, as Ember has one per peer (with
  // 2 servers, copies and acknowledgements share it).
  void* to_successor = nullptr;
  void* to_predecessor = nullptr;
  const bool forward = FLAGS_forward != "none";
  const bool chain = FLAGS_forward == "chain";
  const bool async = FLAGS_forward == "async";
  if (forward) {
    std::vector<int> peers(FLAGS_servers);
    for (int s = 0; s < FLAGS_servers; ++s) {
      int m[2];
      if (read(peer_ports_pipe, m, sizeof(m)) != sizeof(m)) _exit(1);
      peers[m[0]] = m[1];
    }
    const int next = (index + 1) % FLAGS_servers;
    const int prev = (index + FLAGS_servers - 1) % FLAGS_servers;
    to_successor = dealer_to(peers[next]);
    to_predecessor = next == prev ? to_successor : dealer_to(peers[prev]);
  }
  std::vector<void*> to_client;
  if (!same) {
    std::vector<int> ports(FLAGS_clients);
    for (int c = 0; c < FLAGS_clients; ++c) {
      int m[2];
      if (read(client_ports_pipe, m, sizeof(m)) != sizeof(m)) _exit(1);
      ports[m[0]] = m[1];
    }
    for (int p : ports) to_client.push_back(dealer_to(p));
  }
  const bool pull = FLAGS_mode == "pull";
  std::vector<char> values(ShareOf(index) * FLAGS_bytes_per_key + 1);
  std::vector<zmq_msg_t> frames;
  ForwardStats stats{index, 0, 0, 0, 0};
  // --forward=batch: the pushes waiting for the copies in flight, and the
  // headers of those in flight (answered when their batch is acknowledged).
  const bool coalesce = FLAGS_forward == "coalesce";
  const bool batch = FLAGS_forward == "batch" || coalesce;
  struct Held {
    Header header;
    zmq_msg_t keys, values;
  };
  std::vector<Held> waiting;
  std::vector<Header> in_flight;
  auto send_coalesced = [&]() {
    Header b{};
    b.kind = kCopy;
    b.from = static_cast<uint8_t>(index);
    b.slot = static_cast<uint32_t>(waiting.size());
    SendFrame(to_successor, &b, sizeof(b), true);
    std::vector<Header> headers;
    std::vector<size_t> latest;  // per client, its last push in `waiting`
    for (size_t i = 0; i < waiting.size(); ++i) {
      headers.push_back(waiting[i].header);
      in_flight.push_back(waiting[i].header);
      size_t j = 0;
      while (j < latest.size() &&
             waiting[latest[j]].header.client != waiting[i].header.client) {
        ++j;
      }
      if (j == latest.size()) latest.push_back(i);
      latest[j] = i;
    }
    std::sort(latest.begin(), latest.end());  // the order they are sent in
    // Copied (zmq_send): `headers` is gone before the I/O thread sends.
    zmq_send(to_successor, headers.data(), headers.size() * sizeof(Header),
             ZMQ_SNDMORE);
    for (size_t i = 0; i < waiting.size(); ++i) {
      Held& held = waiting[i];
      const auto at = std::find(latest.begin(), latest.end(), i);
      if (at == latest.end()) {
        zmq_msg_close(&held.keys);
        zmq_msg_close(&held.values);
        continue;
      }
      const bool last = at + 1 == latest.end();
      if (FLAGS_copy_keys) {
        zmq_msg_send(&held.keys, to_successor, ZMQ_SNDMORE);
      } else {
        zmq_msg_close(&held.keys);
      }
      zmq_msg_send(&held.values, to_successor, last ? 0 : ZMQ_SNDMORE);
    }
    stats.forwarded += waiting.size();
    ++stats.messages;
    waiting.clear();
  };
  auto send_batch = [&]() {
    if (coalesce) {
      send_coalesced();
      return;
    }
    Header b{};
    b.kind = kCopy;
    b.from = static_cast<uint8_t>(index);
    b.slot = static_cast<uint32_t>(waiting.size());
    SendFrame(to_successor, &b, sizeof(b), true);
    for (size_t i = 0; i < waiting.size(); ++i) {
      Held& held = waiting[i];
      const bool last = i + 1 == waiting.size();
      SendFrame(to_successor, &held.header, sizeof(held.header), true);
      if (FLAGS_copy_keys) {
        zmq_msg_send(&held.keys, to_successor, ZMQ_SNDMORE);
      } else {
        zmq_msg_close(&held.keys);
      }
      zmq_msg_send(&held.values, to_successor, last ? 0 : ZMQ_SNDMORE);
      in_flight.push_back(held.header);
    }
    stats.forwarded += waiting.size();
    ++stats.messages;
    waiting.clear();
  };
  int goodbyes = 0;
  while (true) {
    int n = RecvAll(router, &frames);
    if (n < 0) break;
    // frames: identity, header, keys[, values]; an acknowledgement of a
    // copy is identity, header.
    if (n < 2) continue;
    if (zmq_msg_size(&frames[1]) != sizeof(Header)) {  // a client's goodbye
      if (forward && ++goodbyes == FLAGS_clients &&
          write(stats_pipe, &stats, sizeof(stats)) != sizeof(stats)) {
        _exit(1);
      }
      continue;
    }
    Header h;
    std::memcpy(&h, zmq_msg_data(&frames[1]), sizeof(h));
    if (h.kind == kCopy && batch) {
      // A batch of the predecessor's pushes (h.slot of them): one
      // acknowledgement for all.
      stats.received += h.slot;
      h.kind = kCopyAck;
      h.from = static_cast<uint8_t>(index);
      SendFrame(to_predecessor, &h, sizeof(h), false);
      continue;
    }
    if (h.kind == kCopyAck && batch) {
      stats.acked += h.slot;
      for (Header& a : in_flight) {
        a.kind = kRequest;
        SendFrame(to_client[a.client], &a, sizeof(a), false);
      }
      in_flight.clear();
      if (!waiting.empty()) send_batch();
      continue;
    }
    if (h.kind == kCopy) {
      // A copy of the predecessor's push: acknowledged with a header, to
      // the predecessor or (chain) as the answer to the client.
      ++stats.received;
      if (chain) {
        h.kind = kRequest;
        SendFrame(to_client[h.client], &h, sizeof(h), false);
        continue;
      }
      h.kind = kCopyAck;
      h.from = static_cast<uint8_t>(index);
      SendFrame(to_predecessor, &h, sizeof(h), false);
      continue;
    }
    if (h.kind == kCopyAck) {
      // The successor holds the copy: answer the client now (async: it
      // was answered already).
      ++stats.acked;
      if (async) continue;
      h.kind = kRequest;
      SendFrame(to_client[h.client], &h, sizeof(h), false);
      continue;
    }
    if (n < 3) continue;  // a request has keys
    if (batch && !pull && n == 4) {
      // Held until the copies in flight are acknowledged, then sent on with
      // every other push that came meanwhile, in one message.
      waiting.emplace_back();
      Held& held = waiting.back();
      held.header = h;
      zmq_msg_init(&held.keys);
      zmq_msg_init(&held.values);
      zmq_msg_move(&held.keys, &frames[2]);
      zmq_msg_move(&held.values, &frames[3]);
      if (in_flight.empty()) send_batch();
      continue;
    }
    if (forward && !pull && n >= 4) {
      // The request's own frames go on to the successor without a copy
      // (zmq_msg_send takes them); the answer waits for its ack.
      Header copy = h;
      copy.kind = kCopy;
      copy.from = static_cast<uint8_t>(index);
      SendFrame(to_successor, &copy, sizeof(copy), true);
      ++stats.messages;
      for (int i = FLAGS_copy_keys ? 2 : 3; i < n; ++i) {
        zmq_msg_send(&frames[i], to_successor, i + 1 < n ? ZMQ_SNDMORE : 0);
      }
      ++stats.forwarded;
      if (async) {
        h.kind = kRequest;
        SendFrame(to_client[h.client], &h, sizeof(h), false);
      }
      continue;
    }
    const size_t keys =
        FLAGS_request_keys ? zmq_msg_size(&frames[2]) / 8 : ShareOf(index);
    const size_t answer = pull ? keys * FLAGS_bytes_per_key : 0;
    void* out = same ? router : to_client[h.client];
    if (same) {
      zmq_msg_t id;
      zmq_msg_init(&id);
      zmq_msg_copy(&id, &frames[0]);
      zmq_msg_send(&id, router, ZMQ_SNDMORE);
    }
    SendFrame(out, &h, sizeof(h), answer > 0);
    if (answer > 0) SendFrame(out, values.data(), answer, false);
  }
  _exit(0);
}

void RunClient(int index, const std::vector<int>& server_ports,
               const std::vector<int>& port_pipes, int result_pipe) {
  void* ctx = NewContext();
  const bool same = FLAGS_replies == "same";
  void* router = nullptr;
  if (!same) {
    router = NewSocket(ctx, ZMQ_ROUTER);
    int port = BindEndpoint(router);
    // Every server reads every client's port from a pipe of its own.
    for (int s = 0; s < FLAGS_servers; ++s) {
      int msg[2] = {index, port};
      if (write(port_pipes[s], msg, sizeof(msg)) != sizeof(msg)) _exit(1);
    }
  }
  std::vector<void*> dealers;
  for (int p : server_ports) {
    void* d = NewSocket(ctx, ZMQ_DEALER);
    int hwm = 0;
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    ConnectEndpoint(d, p);
    dealers.push_back(d);
  }
  const bool pull = FLAGS_mode == "pull";
  std::vector<uint64_t> keys(FLAGS_keys + 1, 42);
  std::vector<char> values(FLAGS_keys * FLAGS_bytes_per_key + 1);
  std::vector<Header> headers(FLAGS_window * FLAGS_servers);
  std::vector<int> outstanding(FLAGS_window, 0);
  std::vector<zmq_pollitem_t> items;
  if (same) {
    for (void* d : dealers) items.push_back({d, 0, ZMQ_POLLIN, 0});
  } else {
    items.push_back({router, 0, ZMQ_POLLIN, 0});
  }
  std::vector<zmq_msg_t> frames;
  uint64_t next = 0;
  auto issue = [&](int slot) {
    size_t first = 0;
    for (int s = 0; s < FLAGS_servers; ++s) {
      const size_t n = ShareOf(s);
      Header& h = headers[slot * FLAGS_servers + s];
      h.client = static_cast<uint32_t>(index);
      h.slot = static_cast<uint32_t>(slot);
      h.request = next;
      SendFrame(dealers[s], &h, sizeof(h), true);
      SendFrame(dealers[s], keys.data() + first, FLAGS_request_keys ? n * 8 : 8,
                !pull);
      if (!pull) {
        SendFrame(dealers[s], values.data() + first * FLAGS_bytes_per_key,
                  n * FLAGS_bytes_per_key, false);
      }
      first += n;
    }
    outstanding[slot] = FLAGS_servers;
    ++next;
  };
  auto run = [&](double seconds) {
    for (int slot = 0; slot < FLAGS_window; ++slot) issue(slot);
    uint64_t done = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto stop = start + std::chrono::duration<double>(seconds);
    bool stopping = false;
    int in_flight = FLAGS_window;
    while (in_flight > 0) {
      zmq_poll(items.data(), static_cast<int>(items.size()), -1);
      for (auto& item : items) {
        if (!(item.revents & ZMQ_POLLIN)) continue;
        while (true) {
          // Drain what is there without blocking.
          zmq_msg_t first;
          zmq_msg_init(&first);
          if (zmq_msg_recv(&first, item.socket, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&first);
            break;
          }
          frames.clear();
          frames.push_back(first);
          while (zmq_msg_more(&frames.back())) {
            frames.emplace_back();
            zmq_msg_init(&frames.back());
            zmq_msg_recv(&frames.back(), item.socket, 0);
          }
          const zmq_msg_t& hf = frames[same ? 0 : 1];
          Header h;
          std::memcpy(&h, zmq_msg_data(const_cast<zmq_msg_t*>(&hf)), sizeof(h));
          for (auto& f : frames) zmq_msg_close(&f);
          if (--outstanding[h.slot] > 0) continue;
          ++done;
          // With --requests, exactly that many are issued, and the run
          // ends when the last is answered.
          if (!stopping && (FLAGS_requests > 0
                                ? next >= static_cast<uint64_t>(FLAGS_requests)
                                : std::chrono::steady_clock::now() >= stop)) {
            stopping = true;
          }
          if (stopping) {
            --in_flight;
          } else {
            issue(static_cast<int>(h.slot));
          }
        }
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return done / elapsed;
  };
  if (FLAGS_requests == 0) run(FLAGS_warmup_seconds);
  double req_s = run(FLAGS_seconds);
  if (write(result_pipe, &req_s, sizeof(req_s)) != sizeof(req_s)) _exit(1);
  // Tell the servers this client is done (a one-frame message).
  for (void* d : dealers) SendFrame(d, "x", 1, false);
  for (void* d : dealers) {
    int linger = 1000;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(d);
  }
  if (router) zmq_close(router);
  zmq_ctx_term(ctx);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_servers < 1 || FLAGS_clients < 1 || FLAGS_keys < FLAGS_servers ||
      FLAGS_window < 1 || (FLAGS_mode != "push" && FLAGS_mode != "pull") ||
      (FLAGS_replies != "same" && FLAGS_replies != "separate") ||
      (FLAGS_transport != "tcp" && FLAGS_transport != "ipc") ||
      FLAGS_io_threads < 1 ||
      (FLAGS_requests != 0 && FLAGS_requests < FLAGS_window)) {
    std::fprintf(stderr, "zmq_topology: bad flags\n");
    return 1;
  }
  if (FLAGS_forward != "none" && FLAGS_forward != "ack" &&
      FLAGS_forward != "chain" && FLAGS_forward != "batch" &&
      FLAGS_forward != "coalesce" && FLAGS_forward != "async") {
    std::fprintf(stderr,
                 "zmq_topology: --forward is none, ack, batch, coalesce, "
                 "async or chain\n");
    return 1;
  }
  const bool forward = FLAGS_forward != "none";
  const bool async = FLAGS_forward == "async";
  if (forward && (FLAGS_servers < 2 || FLAGS_servers > 255 ||
                  FLAGS_replies != "separate")) {
    std::fprintf(stderr,
                 "zmq_topology: --forward needs 2 to 255 servers and "
                 "--replies=separate\n");
    return 1;
  }
  if ((FLAGS_forward == "batch" || FLAGS_forward == "coalesce") &&
      FLAGS_max_frame > 0) {
    std::fprintf(stderr,
                 "zmq_topology: --forward=batch and coalesce need "
                 "--max_frame=0\n");
    return 1;
  }
  if (FLAGS_curve && zmq_curve_keypair(g_public, g_secret) != 0) {
    std::fprintf(stderr, "zmq_topology: no CURVE in this libzmq\n");
    return 1;
  }
  // Before the forks: every process allocates as an Ember node does.
  ps::TuneMallocForLargeMessages(FLAGS_malloc_keep_mb);
  g_run = getpid();
  int server_ports[2], results[2], stats[2];
  if (pipe(server_ports) || pipe(results) || pipe(stats)) return 1;
  // One pipe per server for the clients' ports (separate replies).
  // And one per server for the other servers' ports (forwarding).
  std::vector<int> to_server_read(FLAGS_servers),
      to_server_write(FLAGS_servers), peers_read(FLAGS_servers),
      peers_write(FLAGS_servers);
  for (int s = 0; s < FLAGS_servers; ++s) {
    int p[2], q[2];
    if (pipe(p) || pipe(q)) return 1;
    to_server_read[s] = p[0];
    to_server_write[s] = p[1];
    peers_read[s] = q[0];
    peers_write[s] = q[1];
  }
  std::vector<pid_t> pids;
  for (int s = 0; s < FLAGS_servers; ++s) {
    pid_t pid = fork();
    if (pid == 0) {
      RunServer(s, server_ports[1], to_server_read[s], peers_read[s], stats[1]);
    }
    pids.push_back(pid);
  }
  std::vector<int> ports(FLAGS_servers);
  for (int s = 0; s < FLAGS_servers; ++s) {
    int msg[2];
    if (read(server_ports[0], msg, sizeof(msg)) != sizeof(msg)) return 1;
    ports[msg[0]] = msg[1];
  }
  if (forward) {
    for (int s = 0; s < FLAGS_servers; ++s) {
      for (int t = 0; t < FLAGS_servers; ++t) {
        int msg[2] = {t, ports[t]};
        if (write(peers_write[s], msg, sizeof(msg)) != sizeof(msg)) return 1;
      }
    }
  }
  std::vector<pid_t> clients;
  for (int c = 0; c < FLAGS_clients; ++c) {
    pid_t pid = fork();
    if (pid == 0) RunClient(c, ports, to_server_write, results[1]);
    clients.push_back(pid);
  }
  double total = 0;
  for (int c = 0; c < FLAGS_clients; ++c) {
    double r = 0;
    if (read(results[0], &r, sizeof(r)) != sizeof(r)) return 1;
    total += r;
  }
  for (pid_t p : clients) waitpid(p, nullptr, 0);
  // Forwarding: every copy forwarded was received and (ack) acknowledged.
  uint64_t copies = 0, copy_messages = 0;
  bool copies_agree = true;
  if (forward) {
    uint64_t received = 0;
    for (int s = 0; s < FLAGS_servers; ++s) {
      ForwardStats st;
      if (read(stats[0], &st, sizeof(st)) != sizeof(st)) return 1;
      // Under chain the successor answers the client: no acknowledgements.
      // Under async the last copies may still be under way when the
      // servers count (nothing waited for them).
      const uint64_t want = FLAGS_forward != "chain" ? st.forwarded : 0;
      if (async ? st.acked > want : st.acked != want) {
        std::fprintf(stderr,
                     "zmq_topology: server %d forwarded %llu copies, %llu "
                     "acknowledged\n",
                     st.server, static_cast<unsigned long long>(st.forwarded),
                     static_cast<unsigned long long>(st.acked));
        copies_agree = false;
      }
      copies += st.forwarded;
      copy_messages += st.messages;
      received += st.received;
    }
    if ((async ? received > copies : received != copies) ||
        (copies == 0 && FLAGS_mode == "push")) {
      std::fprintf(stderr,
                   "zmq_topology: %llu copies forwarded, %llu received\n",
                   static_cast<unsigned long long>(copies),
                   static_cast<unsigned long long>(received));
      copies_agree = false;
    }
  }
  // The clients' process IDs name their callgrind files (--requests).
  std::string client_pids;
  for (pid_t p : clients) {
    if (!client_pids.empty()) client_pids += ",";
    client_pids += std::to_string(p);
  }
  // The servers serve until they are told to stop.
  for (pid_t p : pids) kill(p, SIGTERM);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  std::printf(
      "RESULT baseline=zmq_topology servers=%d clients=%d keys=%lld mode=%s "
      "window=%d req_s=%.1f keys_s=%.0f replies=%s transport=%s curve=%d "
      "io_threads=%d forward=%s copies=%llu copy_messages=%llu copy_keys=%d "
      "request_keys=%d client_pids=%s\n",
      FLAGS_servers, FLAGS_clients, static_cast<long long>(FLAGS_keys),
      FLAGS_mode.c_str(), FLAGS_window, total, total * FLAGS_keys,
      FLAGS_replies.c_str(), FLAGS_transport.c_str(), FLAGS_curve ? 1 : 0,
      FLAGS_io_threads, FLAGS_forward.c_str(),
      static_cast<unsigned long long>(copies),
      static_cast<unsigned long long>(copy_messages), FLAGS_copy_keys ? 1 : 0,
      FLAGS_request_keys ? 1 : 0, client_pids.c_str());
  return copies_agree ? 0 : 1;
}
