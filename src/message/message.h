// Message: a header (Meta) plus zero or more data frames.
//
// Data frames are SArray<char> that share their buffers with the application
// (zero-copy). A Message is move-only; sending it consumes it.
#ifndef PS_MESSAGE_MESSAGE_H_
#define PS_MESSAGE_MESSAGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ps/internal/timestamp.h"
#include "ps/sarray.h"
#include "ps/status.h"
#include "util/secret.h"

namespace ps {

enum class Role : int { kScheduler = 0, kServer = 1, kWorker = 2 };

const char* RoleName(Role role);

// Control commands; kNone marks a data message.
enum class Control : int {
  kNone = 0,
  kJoin = 1,        // node -> scheduler: here I am (host, port, role)
  kNodeTable = 2,   // scheduler -> nodes: ids, ranks, addresses, the ring
  kBarrier = 3,     // request: node -> scheduler; response: release
  kHeartbeat = 4,   // node -> scheduler, and the scheduler's echo
  kNodeFailed = 5,  // scheduler -> nodes: a node was declared dead
  kAbort = 6,       // scheduler -> nodes: the cluster cannot go on
  kLeave = 7,       // node -> scheduler: orderly exit after Finalize
  // server -> scheduler: `holder` now holds a whole copy of my data
  kReplicaReady = 8,
  // server -> scheduler: a server that joined a running cluster has
  // received the state of its ranges from their former owners
  kHandoverDone = 9,
  // request, server -> scheduler: let me leave the running cluster (my
  // ranges move to the others); response, scheduler -> server: refused,
  // `reason` says why.
  kLeaveRequest = 10,
  // scheduler -> nodes: a worker joined, came back, is away or is gone
  // (`worker_event`, docs/consistency.md "Elastic workers").
  kWorkerChange = 11,
  // node -> scheduler: re-registration with a restarted scheduler (id,
  // role, rank, address, ring, the barrier it waits in); docs/replication.md,
  // "Scheduler restart".
  kRejoin = 12,
  // worker -> a server that leaves: this worker has taken a ring without
  // it (`epoch`). It follows, on that link, every request the worker
  // sliced by an older ring (its last word there); the leaver reports its
  // hand-over done only once every live worker's has come, so it answers
  // (or refuses) each of them before it stops (docs/replication.md,
  // "Leaving").
  kSwitched = 13,
};

// kWorkerChange's `worker_event`.
enum class WorkerEvent : int {
  kNone = 0,
  kJoined = 1,  // a new worker, or one that takes a vacant rank afresh
  kBack = 2,    // a worker restarted into its held rank: it resumes
  kAway = 3,    // a worker died; its rank is held for its restart
  kGone = 4,    // a worker left, or died and is not waited for
};
const char* WorkerEventName(WorkerEvent event);

const char* ControlName(Control control);

// Identity of one logical node. A worker process may host several logical
// workers (one per customer id that called Start), as in ps-lite.
struct NodeInfo {
  int id = -1;
  Role role = Role::kWorker;
  std::string host;
  int port = 0;
  int customer_id = 0;
  int rank_hint = -1;
  int rank = -1;
  uint64_t incarnation = 0;
  // Its same-host endpoint (Van::local_endpoint), "" if none.
  std::string local_endpoint;
  // The port its metrics are served on (docs/operations.md), -1 if none.
  int metrics_port = -1;

  std::string address() const { return host + ":" + std::to_string(port); }
  std::string DebugString() const;
};

// The key ring as it travels (partition/key_ring.h validates it): range i
// starts at begins[i] and is owned by server_ids[owners[i]].
struct RingInfo {
  uint64_t epoch = 0;
  int placement = 0;  // 0 range, 1 spread
  std::vector<int> server_ids;
  std::vector<uint64_t> begins;
  std::vector<int> owners;
  int replicas = 0;  // copies of each server's data beyond its own
};

struct Meta {
  static constexpr int kEmpty = -1;

  int sender = kEmpty;
  int recipient = kEmpty;
  int app_id = 0;
  int customer_id = 0;
  // The requester's 64-bit sequence (ps/internal/timestamp.h); negative:
  // a server's local request (replication).
  int64_t timestamp = 0;
  bool request = false;
  bool push = false;
  bool pull = false;
  bool simple_app = false;
  int cmd = 0;  // ps-lite's "head"
  int priority = 0;
  std::string body;
  uint64_t epoch = 0;
  int64_t clock = 0;        // the sender's clock (key-value requests)
  bool clock_tick = false;  // a KVWorker::Clock() notice
  // A pull response whose keys are the request's: no keys frame.
  bool keys_as_requested = false;
  // The keys frame is a key run: first key, count and step of keys in
  // equal steps (app/kv_frames.h), not every key.
  bool key_run = false;
  int value_bytes = 0;
  // Proof of membership (docs/protocol.md, "Authentication"); Node fills it
  // in and checks it.
  Key128 auth;

  // Replication (docs/replication.md); 0: none. A forwarded copy of a push
  // and its acknowledgement: the server whose data it is, and the identity
  // of the worker's request.
  int replica_of = 0;
  int origin_sender = 0;
  int origin_customer = 0;
  int64_t origin_timestamp = 0;
  // A push handed over under bsp with its keys, and copies of it: the
  // former owner whose part of the worker's request it was (its identity
  // with origin_*; docs/replication.md, "Joining").
  int handed_from = 0;
  // A request resent after failover, and its answer: the dead server whose
  // part of the request it is.
  int resend_for = 0;
  // Every request of the sender's customer below this timestamp is
  // complete (lets a server forget what it deduplicates).
  int64_t done_below = 0;
  // bsp commits (docs/consistency.md): every plain push of the sender's
  // customer (a forwarded notice: of origin_*) below this timestamp has
  // been acknowledged by every server it went to; a commit notice; a push's
  // answer asking for commits; a forwarded push that is committed.
  int64_t pushed_below = 0;
  bool commit_notice = false;
  bool wants_commit = false;
  bool committed = false;
  // A copy of a server's state (docs/replication.md): 1 the application's
  // state, 2 the dedup entries; 0 none.
  int state_copy = 0;
  // A state copy or hand-over (state_copy != 0, and the deferred pushes
  // sent within one) and its acknowledgement: which sending of it (from 1;
  // each resend has a higher one) and the message's place in it (from 1;
  // the end carries the count); 0 otherwise. copy_incomplete: an
  // acknowledgement of the end whose receiver missed a message of it.
  int64_t copy_attempt = 0;
  int copy_seq = 0;
  bool copy_incomplete = false;
  // An answer refusing a request sliced by an older ring (some of its keys
  // moved since): the server's ring epoch; 0 otherwise.
  uint64_t moved_epoch = 0;
  // Key caching (app/kv_frames.h, KeyCacheMode); 0: none.
  int key_cache = 0;

  // Non-ok only in a response whose request failed on the receiver.
  int status_code = 0;
  std::string status_message;

  // Control part.
  Control control = Control::kNone;
  std::vector<NodeInfo> nodes;
  int barrier_group = 0;
  uint64_t barrier_round = 0;
  RingInfo ring;
  int failed_node = kEmpty;
  std::string reason;
  std::string process_key;    // kJoin: the joining process's key
  std::string run_key;        // kNodeTable: the run's key
  std::string cluster_token;  // kJoin: EMBER_CLUSTER_TOKEN
  // kJoin: the node asks to join a cluster that has formed (EMBER_JOIN=1).
  bool join_running = false;
  // kJoin: a server that replaces a dead one (EMBER_JOIN=replace): held
  // until a server slot is vacant.
  bool join_replace = false;
  // kJoin with join_replace: the node sends its JOIN again every this many
  // ms while it is held (0: never).
  int join_ask_ms = 0;
  // kReplicaReady: who holds a whole copy of the sender's data, as of
  // which ring epoch.
  int holder = kEmpty;
  uint64_t holder_epoch = 0;
  // kHeartbeat echo to a server, kRejoin of a server: the servers counted
  // as holding a whole copy of its data, as of ring epoch holder_epoch.
  std::vector<int> holders;
  // kHeartbeat of a server that joined or leaves: it has received (joined)
  // or handed over (leaving) its ranges' state (HANDOVER_DONE again).
  bool handed_over = false;
  // kWorkerChange: what happened to the worker in `nodes` (its entry).
  WorkerEvent worker_event = WorkerEvent::kNone;
  // kJoin: the joining node's DMLC_NUM_SERVER and DMLC_NUM_WORKER (0: not
  // sent).
  int num_servers = 0;
  int num_workers = 0;
  // kJoin, kRejoin: the node's consistency setting (ConsistencyConfig's
  // text, "bsp", "ssp:3", ...) and EMBER_REPLICAS (empty and -1: not sent).
  std::string consistency;
  int replicas = -1;
  // A KVWorker's clock query (KVWorker::JoinClock) and its answer: 1 in the
  // query; in the answer 1 (the worker starts afresh at `clock`) or 2 (it
  // resumes its rank at `clock`). 0 in every other message.
  int clock_query = 0;

  std::string DebugString() const;
};

class Message {
 public:
  Message() = default;
  Message(Message&&) = default;
  Message& operator=(Message&&) = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  // Appends a frame sharing `array`'s buffer.
  template <typename V>
  void AddData(const SArray<V>& array) {
    data.emplace_back(SArray<char>(array));
  }

  size_t data_bytes() const {
    size_t n = 0;
    for (const auto& d : data) n += d.size();
    return n;
  }

  Meta meta;
  std::vector<SArray<char>> data;
};

// A message of app `app_id` to node `recipient`: a request (`request` true)
// of customer `customer_id` numbered `timestamp`, or the response to one,
// which echoes the requester's customer id and timestamp. The other header
// fields keep their defaults, for the caller to set.
Message AppMessage(int app_id, int customer_id, int64_t timestamp,
                   int recipient, bool request);

// Copies who sent a request (sender, customer id, timestamp: what its
// response goes back with) from its header into `request`, any struct with
// those three fields (SimpleData, RawRequest). An int timestamp (ps-lite's
// SimpleData) gets the API's int (ps/internal/timestamp.h).
template <typename Request>
void CopyOrigin(const Meta& meta, Request* request) {
  request->sender = meta.sender;
  request->customer_id = meta.customer_id;
  if constexpr (sizeof(request->timestamp) < sizeof(int64_t)) {
    request->timestamp = ApiTimestamp(meta.timestamp);
  } else {
    request->timestamp = meta.timestamp;
  }
}

// Encodes `meta` (with the sizes of `data` recorded) into `out`.
void EncodeMeta(const Meta& meta, const std::vector<SArray<char>>& data,
                std::string* out);

// Decodes a header; kCorruption if the bytes are not a valid header or the
// frames do not match the sizes it records.
[[nodiscard]] Status DecodeMeta(const char* bytes, size_t size, Meta* meta,
                                std::vector<uint64_t>* frame_bytes);

// Checks that `data` matches `frame_bytes` from the decoded header.
[[nodiscard]] Status CheckFrames(const std::vector<uint64_t>& frame_bytes,
                                 const std::vector<SArray<char>>& data);

}  // namespace ps

#endif  // PS_MESSAGE_MESSAGE_H_
