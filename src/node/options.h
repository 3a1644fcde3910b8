// Options: every setting of a node, read once, in one place.
//
// Settings come from ps-lite's environment variables (DMLC_*), Ember's own
// (EMBER_*), or the same names as gflags on binaries that parse flags
// (--ember_heartbeat_interval_ms, ...). Environment variables win over flag
// defaults; a flag set on the command line wins over the environment.
#ifndef PS_NODE_OPTIONS_H_
#define PS_NODE_OPTIONS_H_

#include <string>

#include "message/message.h"
#include "node/consistency_config.h"
#include "partition/key_ring.h"
#include "ps/status.h"
#include "util/thread_policy.h"

namespace ps {

// What a node does when the scheduler declares another node dead.
enum class FailurePolicy {
  // Fail every pending and future request and barrier: the run ends, with
  // the dead node named. Right for ps-lite programs, which cannot recover.
  kAbort,
  // Fail only the requests that wait for the dead node; the rest goes on.
  kContinue,
};

struct Options {
  Role role = Role::kWorker;
  std::string scheduler_host = "127.0.0.1";
  int scheduler_port = 0;
  int num_servers = 1;
  int num_workers = 1;
  // The address this node announces: others connect to it
  // (docs/configuration.md, "Addresses"). A server or worker's is
  // DMLC_NODE_HOST, else the address of DMLC_INTERFACE, else that of the
  // interface on the route to the scheduler; the scheduler's is
  // DMLC_PS_ROOT_URI.
  std::string node_host;
  // The address the node binds (EMBER_BIND_HOST): by default the announced
  // address (resolved if it is a name), or 0.0.0.0 (:: for IPv6) under
  // Kubernetes. Differs from node_host behind NAT or in containers.
  std::string bind_host;
  // Where servers and workers connect to reach the scheduler:
  // scheduler_host, or the numeric address it resolved to when finding the
  // route needed it.
  std::string scheduler_address;
  // DMLC_USE_KUBERNETES > 0: ps-lite's switch for pods (the scheduler binds
  // 0.0.0.0 and announces DMLC_PS_ROOT_URI, a Service's name).
  bool use_kubernetes = false;
  int verbose = 0;  // PS_VERBOSE

  // Launch index among nodes of the same role; the scheduler uses it as the
  // rank when every node of that role supplied a distinct one.
  int rank_hint = -1;  // EMBER_RANK_HINT

  // A server that joins a cluster that has formed already (EMBER_JOIN=1;
  // docs/replication.md, "Joining"): it takes a share of the key ranges.
  // A server that joins while a server slot is vacant (after a failover)
  // is admitted without it.
  bool join = false;
  // A server started as the replacement of one that died (EMBER_JOIN=
  // replace): it takes the next vacant server slot, and if none is vacant
  // yet (the death is not yet declared) the scheduler holds its join until
  // one is, for at most start_timeout_ms.
  bool join_replace = false;
  // Elastic workers (docs/consistency.md, "Elastic workers"). A worker
  // restarted into a running job with the rank it had (EMBER_WORKER_RANK;
  // -1: none). Before the cluster forms it is the worker's rank hint.
  int worker_rank = -1;
  // Scheduler: -1 (default) a worker's death is a node failure as any
  // other (EMBER_ON_NODE_FAILURE); >= 0 workers are elastic: a dead
  // worker's rank is held this long for its restart (the others wait for
  // it as for a slow worker), then it is dropped; 0 drops it at once.
  int worker_rejoin_ms = -1;  // EMBER_WORKER_REJOIN_MS
  // A server leaves the running cluster on SIGTERM (EMBER_LEAVE_ON_SIGTERM,
  // default 1; docs/replication.md, "Leaving"): it asks the scheduler, hands
  // its ranges over and ends; a second SIGTERM ends it at once. 0: SIGTERM
  // ends it at once, as before (a failure).
  bool leave_on_sigterm = true;

  // Failure detection. Interval 0 disables heartbeats (unit tests drive
  // CheckLiveness() by hand instead).
  int heartbeat_interval_ms = 500;  // EMBER_HEARTBEAT_INTERVAL_MS
  int heartbeat_timeout_ms = 4000;  // EMBER_HEARTBEAT_TIMEOUT_MS
  // Membership changes (docs/replication.md, "Lost messages"): how long a
  // state copy or hand-over, a leave request or a ring a member lacks goes
  // unacknowledged before it is sent again (EMBER_MIGRATION_RESEND_MS). 0:
  // 3 x heartbeat_interval_ms (none without heartbeats); -1: never. The
  // timers run on the heartbeat thread (CheckLiveness).
  int migration_resend_ms = 0;
  // migration_resend_ms as it applies: -1 when nothing is resent.
  int MigrationResendMs() const {
    if (migration_resend_ms != 0) return migration_resend_ms;
    return heartbeat_interval_ms > 0 ? 3 * heartbeat_interval_ms : -1;
  }
  // The scheduler also declares a node dead when its connection to the
  // node closed, reconnecting was refused, and this long passed without a
  // heartbeat or LEAVE from it (docs/replication.md, "Detection"); -1:
  // heartbeats only.
  int disconnect_grace_ms = 200;    // EMBER_DISCONNECT_GRACE_MS
  int start_timeout_ms = 60000;     // EMBER_START_TIMEOUT (seconds in env)
  int finalize_timeout_ms = 10000;  // EMBER_FINALIZE_TIMEOUT_MS
  // How long a model-layer control request (register, Save, Load, version)
  // waits for every server before it fails naming the silent ones.
  int model_timeout_ms = 600000;  // EMBER_MODEL_TIMEOUT (seconds in env)
  // Every this often a wait that lasts (a request without its answers, a
  // barrier, a server's held bsp/ssp pull, the cluster forming) is logged
  // with what it waits for and on whom; 0 never.
  int wait_log_interval_ms = 5000;  // EMBER_WAIT_LOG_INTERVAL_MS
  // Workers: a request (push, pull, a SimpleApp request) that has not had
  // every answer this long fails with kDeadlineExceeded, naming the
  // servers that still owe one; checked every heartbeat. 0: no deadline
  // (a long wait is only logged).
  int request_timeout_ms = 0;  // EMBER_REQUEST_TIMEOUT_MS
  // How long a request may wait for its app to be created on this node
  // before it is answered kNotFound.
  int missing_app_timeout_ms = 10000;  // EMBER_MISSING_APP_TIMEOUT_MS

  // How many further servers keep a copy of each server's data, so that a
  // server's death loses nothing (docs/replication.md): EMBER_REPLICAS,
  // by default 1 with at least 2 servers, else 0. At most num_servers - 1.
  // The scheduler's value holds for the whole cluster.
  int replicas = 0;

  FailurePolicy failure_policy =
      FailurePolicy::kAbort;  // EMBER_ON_NODE_FAILURE

  // Scheduler restart (docs/replication.md, "Scheduler restart").
  // Servers and workers: how long a silent scheduler is waited for (its
  // heartbeat echoes stop) before the node fails naming it; meanwhile data
  // goes on, barriers and membership changes wait, and the node
  // re-registers every heartbeat (EMBER_SCHEDULER_WAIT_MS; at least the
  // heartbeat timeout).
  int scheduler_wait_ms = 60000;
  // Scheduler only: the run's key is written to this file (mode 0600) when
  // the scheduler starts, and read from it by a restarted scheduler
  // (EMBER_RUN_KEY_FILE).
  std::string run_key_file;
  // Scheduler only: this scheduler replaces one that died, on the same
  // address (EMBER_SCHEDULER_RESTART=1): it takes the run's key from
  // run_key_file and rebuilds the membership, the ring and the barriers
  // from the members' re-registrations instead of forming a cluster.
  bool scheduler_restart = false;

  // Scheduler only: if set, the bound port is written to this file (the
  // scheduler may bind port 0 and let launchers learn the port from it).
  std::string port_file;  // EMBER_PORT_FILE

  // The cluster's join token (EMBER_CLUSTER_TOKEN, or the contents of the
  // file named by EMBER_CLUSTER_TOKEN_FILE, trailing newline dropped): when
  // set, the scheduler admits only nodes that present it. When empty, anyone
  // who can reach the scheduler's port may join before the cluster forms
  // (the scheduler warns once); messages are authenticated either way
  // (docs/protocol.md, "Authentication").
  std::string cluster_token;

  // Limits on what a peer may send (docs/protocol.md, "Limits"). The largest
  // data frame or header, in MiB: ZeroMQ drops the connection of a peer that
  // sends a larger one before allocating it, and a node refuses to send
  // one (EMBER_MAX_FRAME_MB).
  int max_frame_mb = 1024;
  // Most keys in one key-value request: workers refuse to send more, servers
  // refuse to handle more (EMBER_MAX_KEYS_PER_REQUEST).
  int max_keys_per_request = 1 << 28;
  // Key caching (docs/protocol.md, "Key caching"), in MiB: what a server
  // keeps of the key sets workers repeat, for each of its key-value apps; a
  // worker with 0 sends every key, a server with 0 keeps none
  // (EMBER_KEY_CACHE_MB).
  int key_cache_mb = 64;
  // Messages received from one peer connection and not yet taken by the
  // node: beyond it ZeroMQ stops reading that connection, so a fast sender
  // waits instead of growing this process (EMBER_RECEIVE_QUEUE; 0: no
  // bound). ZeroMQ counts messages, not bytes.
  int receive_queue = 10000;

  // Encryption (docs/security.md): EMBER_CURVE=1 encrypts every connection
  // with ZeroMQ CURVE, with the cluster's key pair from EMBER_CURVE_KEY_FILE
  // (`ember_scheduler --make_curve_key=FILE` makes one); every node needs
  // the same file, and a process without it cannot connect at all.
  bool curve = false;
  std::string curve_public_key;  // Z85, 40 characters
  std::string curve_secret_key;

  // How the key ring places keys (EMBER_KEY_PLACEMENT: range or spread);
  // only the scheduler's setting matters: it goes out with the ring.
  Placement placement = Placement::kRange;

  // The scheduling policy of the threads that carry messages
  // (EMBER_THREAD_POLICY: batch, the default, or normal; the scheduler's
  // default is normal). See util/thread_policy.h.
  ThreadPolicy thread_policy = ThreadPolicy::kBatch;

  // Freed memory malloc keeps for reuse, in MiB (EMBER_MALLOC_KEEP_MB; 0
  // leaves malloc's settings alone). ZeroMQ allocates every received
  // message; with glibc's defaults each multi-megabyte one is a fresh
  // mapping, page-faulted and zeroed by the kernel, and freed memory is
  // returned at once. See Node::StartVan.
  int malloc_keep_mb = 256;

  // How long a thread that waits inside the van (a caller waiting for a
  // request, a server's customer thread between requests) polls
  // without blocking before it sleeps, in microseconds (EMBER_SPIN_US; 0
  // sleeps at once). It yields the CPU between polls. See ReceiveGate.
  int spin_us = 200;
  // Reach peers in this network namespace through a Unix socket instead of
  // TCP (EMBER_LOCAL_IPC).
  bool local_ipc = true;

  // Metrics (docs/operations.md): the port this node serves Prometheus'
  // text format on, at /metrics of its bind address (EMBER_METRICS_PORT;
  // 0 an ephemeral port, which the node logs; -1 off).
  int metrics_port = -1;
  // Every this many seconds the node logs a line of its progress
  // (EMBER_STATS_INTERVAL; 0 never).
  int stats_interval_s = 0;

  // Servers' consistency mode (EMBER_CONSISTENCY, EMBER_STALENESS); a
  // KVServer may override it.
  ConsistencyConfig consistency;

  // Reads the environment (and flags). Bad values are kInvalidArgument with
  // a message naming the variable.
  static StatusOr<Options> FromEnvironment();

  // Checks values that do not depend on where they came from.
  [[nodiscard]] Status Validate() const;
};

// Parses a role name ("scheduler", "server", "worker").
[[nodiscard]] Status ParseRole(const std::string& name, Role* role);

}  // namespace ps

#endif  // PS_NODE_OPTIONS_H_
