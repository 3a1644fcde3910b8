#include "node/options.h"

#include <gflags/gflags.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "node/host_address.h"

DEFINE_int32(ember_heartbeat_interval_ms, 500,
             "Interval between heartbeats to the scheduler; 0 disables them "
             "(env EMBER_HEARTBEAT_INTERVAL_MS)");
DEFINE_int32(ember_heartbeat_timeout_ms, 4000,
             "A node silent for this long is declared dead "
             "(env EMBER_HEARTBEAT_TIMEOUT_MS)");
DEFINE_int32(ember_disconnect_grace_ms, 200,
             "The scheduler declares a node dead this long after its "
             "connection closed and reconnecting was refused, unless it beat "
             "or left meanwhile; -1: heartbeats only "
             "(env EMBER_DISCONNECT_GRACE_MS)");
DEFINE_int32(ember_start_timeout, 60,
             "Seconds to wait for every node to join before start-up fails "
             "(env EMBER_START_TIMEOUT)");
DEFINE_string(ember_key_placement, "range",
              "Where keys go: range (ps-lite's: server r owns the key range "
              "GetServerKeyRanges()[r]) or spread (keys are mixed first, so "
              "clustered keys such as small integers spread evenly) "
              "(env EMBER_KEY_PLACEMENT)");
DEFINE_int32(ember_replicas, -1,
             "Further servers that keep a copy of each server's data (see "
             "docs/replication.md); -1: 1 with at least 2 servers, else 0. "
             "Overrides EMBER_REPLICAS.");
DEFINE_int32(ember_spin_us, 200,
             "Microseconds a thread waiting inside the van polls without "
             "blocking before it sleeps; 0 sleeps at once "
             "(env EMBER_SPIN_US)");

DEFINE_string(ember_consistency, "asp",
              "Servers' consistency mode: asp, ssp or bsp "
              "(env EMBER_CONSISTENCY)");
DEFINE_string(ember_staleness, "",
              "Staleness bound of ssp, in iterations (env EMBER_STALENESS)");

namespace ps {

namespace {

// Reads a text variable; a flag set on the command line wins. False if
// neither is set (then *value keeps the flag's default).
bool ReadString(const char* env, const char* flag, std::string* value,
                std::string* source) {
  gflags::CommandLineFlagInfo info;
  if (flag != nullptr && gflags::GetCommandLineFlagInfo(flag, &info) &&
      !info.is_default) {
    *value = info.current_value;
    *source = std::string("--") + flag;
    return true;
  }
  if (const char* s = std::getenv(env)) {
    *value = s;
    *source = env;
    return true;
  }
  return false;
}

Status ReadConsistency(ConsistencyConfig* config) {
  std::string mode = "asp", mode_source, staleness, staleness_source;
  ReadString("EMBER_CONSISTENCY", "ember_consistency", &mode, &mode_source);
  bool has_staleness = ReadString("EMBER_STALENESS", "ember_staleness",
                                  &staleness, &staleness_source);
  if (has_staleness && staleness.empty()) has_staleness = false;
  // "ssp:2" in EMBER_CONSISTENCY works too.
  auto parsed = mode.find_first_of(":(") != std::string::npos && !has_staleness
                    ? ConsistencyConfig::Parse(mode)
                    : ConsistencyConfig::FromSettings(
                          mode, has_staleness ? &staleness : nullptr);
  if (!parsed.ok()) {
    std::string where = mode_source.empty() ? "" : mode_source + "=" + mode;
    if (has_staleness) {
      where += (where.empty() ? "" : ", ") + staleness_source + "=" + staleness;
    }
    return Status::InvalidArgument(parsed.status().message() +
                                   (where.empty() ? "" : " (" + where + ")"));
  }
  *config = *parsed;
  return Status::OK();
}

// Reads an integer variable; a flag set on the command line wins.
Status ReadInt(const char* env, const char* flag, int min, int max,
               int* value) {
  gflags::CommandLineFlagInfo info;
  const char* s = nullptr;
  std::string source = env;
  if (flag != nullptr && gflags::GetCommandLineFlagInfo(flag, &info) &&
      !info.is_default) {
    s = info.current_value.c_str();
    source = std::string("--") + flag;
  } else {
    s = std::getenv(env);
  }
  if (s != nullptr) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
      return Status::InvalidArgument(source + "='" + s + "' is not an integer");
    }
    if (v < min || v > max) {
      return Status::InvalidArgument(source + "=" + s + " is out of range [" +
                                     std::to_string(min) + ", " +
                                     std::to_string(max) + "]");
    }
    *value = static_cast<int>(v);
  } else if (flag != nullptr && gflags::GetCommandLineFlagInfo(flag, &info)) {
    *value = std::atoi(info.current_value.c_str());
  }
  return Status::OK();
}

// The longest cluster token accepted (it travels in every join).
constexpr size_t kMaxTokenBytes = 4096;

Status ReadClusterToken(std::string* token) {
  const char* value = std::getenv("EMBER_CLUSTER_TOKEN");
  const char* file = std::getenv("EMBER_CLUSTER_TOKEN_FILE");
  if (value != nullptr && file != nullptr) {
    return Status::InvalidArgument(
        "EMBER_CLUSTER_TOKEN and EMBER_CLUSTER_TOKEN_FILE are both set; set "
        "one");
  }
  std::string source = "EMBER_CLUSTER_TOKEN";
  if (value != nullptr) {
    *token = value;
  } else if (file != nullptr) {
    source = std::string("EMBER_CLUSTER_TOKEN_FILE=") + file;
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return Status::InvalidArgument(
          source + ": cannot read the file: " + std::strerror(errno));
    }
    std::string contents((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
    if (in.bad()) {
      return Status::InvalidArgument(source + ": cannot read the file");
    }
    while (!contents.empty() &&
           (contents.back() == '\n' || contents.back() == '\r')) {
      contents.pop_back();
    }
    *token = contents;
  } else {
    return Status::OK();
  }
  if (token->empty()) {
    return Status::InvalidArgument(source + " is empty");
  }
  if (token->size() > kMaxTokenBytes) {
    return Status::InvalidArgument(source + " is longer than " +
                                   std::to_string(kMaxTokenBytes) + " bytes");
  }
  return Status::OK();
}

Status ReadCurve(Options* o) {
  int curve = 0;
  PS_RETURN_IF_ERROR(ReadInt("EMBER_CURVE", nullptr, 0, 1, &curve));
  const char* file = std::getenv("EMBER_CURVE_KEY_FILE");
  if (!curve) return Status::OK();
  if (file == nullptr || *file == '\0') {
    return Status::InvalidArgument(
        "EMBER_CURVE=1 needs EMBER_CURVE_KEY_FILE (make one with "
        "ember_scheduler --make_curve_key=FILE)");
  }
  const std::string source = std::string("EMBER_CURVE_KEY_FILE=") + file;
  std::ifstream in(file);
  if (!in) {
    return Status::InvalidArgument(
        source + ": cannot read the file: " + std::strerror(errno));
  }
  std::getline(in, o->curve_public_key);
  std::getline(in, o->curve_secret_key);
  if (o->curve_public_key.size() != 40 || o->curve_secret_key.size() != 40) {
    return Status::InvalidArgument(
        source +
        ": expected a public and a secret key, 40 Z85 characters "
        "each, on two lines");
  }
  o->curve = true;
  return Status::OK();
}

// The wildcard of `announced`'s family, for binding every interface.
std::string WildcardFor(const std::string& announced) {
  return IsIPv6Address(announced) ? "::" : "0.0.0.0";
}

// Sets node_host, bind_host and scheduler_address (docs/configuration.md,
// "Addresses"); needs role, scheduler_host and scheduler_port.
Status ChooseAddresses(Options* o) {
  int kubernetes = 0;
  PS_RETURN_IF_ERROR(ReadInt("DMLC_USE_KUBERNETES", nullptr, 0,
                             std::numeric_limits<int>::max(), &kubernetes));
  o->use_kubernetes = kubernetes > 0;
  std::string bind;
  if (const char* b = std::getenv("EMBER_BIND_HOST")) {
    if (std::string(b) == "*") {
      bind = "0.0.0.0";
    } else {
      auto host = NormalizeHost(b, "EMBER_BIND_HOST");
      if (!host.ok()) return host.status();
      // ZeroMQ binds numeric addresses (and interface names) only.
      auto numeric = ResolveHost(*host, "EMBER_BIND_HOST");
      if (!numeric.ok()) return numeric.status();
      bind = *numeric;
    }
  }
  o->scheduler_address = o->scheduler_host;
  if (o->role == Role::kScheduler) {
    o->node_host = o->scheduler_host;
    if (bind.empty() && o->use_kubernetes) bind = WildcardFor(o->node_host);
    if (bind.empty()) {
      auto numeric = ResolveHost(o->scheduler_host, "DMLC_PS_ROOT_URI");
      if (!numeric.ok()) {
        return Status::InvalidArgument(
            numeric.status().message() +
            " (the scheduler binds it; set EMBER_BIND_HOST to bind another "
            "address)");
      }
      bind = *numeric;
    }
    o->bind_host = bind;
    return Status::OK();
  }
  if (const char* host = std::getenv("DMLC_NODE_HOST")) {
    auto normal = NormalizeHost(host, "DMLC_NODE_HOST");
    if (!normal.ok()) return normal.status();
    o->node_host = *normal;
  } else if (const char* itf = std::getenv("DMLC_INTERFACE")) {
    if (*itf == '\0') {
      return Status::InvalidArgument("DMLC_INTERFACE is empty");
    }
    auto address = InterfaceAddress(itf, "DMLC_INTERFACE");
    if (!address.ok()) return address.status();
    o->node_host = *address;
  } else {
    auto scheduler = ResolveHost(o->scheduler_host, "DMLC_PS_ROOT_URI");
    if (scheduler.ok()) {
      o->scheduler_address = *scheduler;
      auto route =
          RouteAddress(*scheduler, o->scheduler_port, "DMLC_PS_ROOT_URI");
      if (!route.ok()) return route.status();
      o->node_host = *route;
    } else if (o->use_kubernetes) {
      // The Service's name may resolve only once the scheduler's pod is
      // ready; the pod's own address is what ps-lite announces there.
      auto pod = FirstNonLoopbackAddress(AF_INET);
      if (!pod.ok()) pod = FirstNonLoopbackAddress(AF_INET6);
      if (!pod.ok()) {
        return Status::InvalidArgument(scheduler.status().message() + ", and " +
                                       pod.status().message() +
                                       " (DMLC_USE_KUBERNETES=1)");
      }
      o->node_host = *pod;
    } else {
      return scheduler.status();
    }
  }
  if (bind.empty() && o->use_kubernetes) bind = WildcardFor(o->node_host);
  if (bind.empty()) {
    auto numeric = ResolveHost(o->node_host, "DMLC_NODE_HOST");
    if (!numeric.ok()) return numeric.status();
    bind = *numeric;
  }
  o->bind_host = bind;
  return Status::OK();
}

}  // namespace

Status ParseRole(const std::string& name, Role* role) {
  if (name == "scheduler") {
    *role = Role::kScheduler;
  } else if (name == "server") {
    *role = Role::kServer;
  } else if (name == "worker") {
    *role = Role::kWorker;
  } else {
    return Status::InvalidArgument("DMLC_ROLE='" + name +
                                   "': expected scheduler, server or worker");
  }
  return Status::OK();
}

StatusOr<Options> Options::FromEnvironment() {
  Options o;
  const char* role = std::getenv("DMLC_ROLE");
  if (role == nullptr) {
    return Status::InvalidArgument(
        "DMLC_ROLE is not set (scheduler, server or worker); "
        "scripts/local.sh sets it");
  }
  PS_RETURN_IF_ERROR(ParseRole(role, &o.role));
  const char* uri = std::getenv("DMLC_PS_ROOT_URI");
  if (uri == nullptr || *uri == '\0') {
    return Status::InvalidArgument(
        "DMLC_PS_ROOT_URI (the scheduler's address) is not set");
  }
  {
    auto host = NormalizeHost(uri, "DMLC_PS_ROOT_URI");
    if (!host.ok()) return host.status();
    o.scheduler_host = *host;
  }
  if (std::getenv("DMLC_PS_ROOT_PORT") == nullptr) {
    return Status::InvalidArgument(
        "DMLC_PS_ROOT_PORT (the scheduler's port) is not set");
  }
  // Only the scheduler may bind port 0 (any free port; see EMBER_PORT_FILE).
  PS_RETURN_IF_ERROR(ReadInt("DMLC_PS_ROOT_PORT", nullptr,
                             o.role == Role::kScheduler ? 0 : 1, 65535,
                             &o.scheduler_port));
  if (const char* f = std::getenv("EMBER_PORT_FILE")) o.port_file = f;
  PS_RETURN_IF_ERROR(ReadClusterToken(&o.cluster_token));
  PS_RETURN_IF_ERROR(ReadCurve(&o));
  if (const char* p = std::getenv("EMBER_ON_NODE_FAILURE")) {
    std::string policy = p;
    if (policy == "abort") {
      o.failure_policy = FailurePolicy::kAbort;
    } else if (policy == "continue") {
      o.failure_policy = FailurePolicy::kContinue;
    } else {
      return Status::InvalidArgument("EMBER_ON_NODE_FAILURE='" + policy +
                                     "': expected abort or continue");
    }
  }
  if (std::getenv("DMLC_NUM_SERVER") == nullptr ||
      std::getenv("DMLC_NUM_WORKER") == nullptr) {
    return Status::InvalidArgument(
        "DMLC_NUM_SERVER and DMLC_NUM_WORKER must be set");
  }
  PS_RETURN_IF_ERROR(
      ReadInt("DMLC_NUM_SERVER", nullptr, 1, 4096, &o.num_servers));
  PS_RETURN_IF_ERROR(
      ReadInt("DMLC_NUM_WORKER", nullptr, 1, 65536, &o.num_workers));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_REPLICAS", "ember_replicas", -1, 4095, &o.replicas));
  if (o.replicas < 0) o.replicas = o.num_servers >= 2 ? 1 : 0;
  PS_RETURN_IF_ERROR(ReadInt("PS_VERBOSE", nullptr, 0, 3, &o.verbose));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_RANK_HINT", nullptr, -1, 1 << 20, &o.rank_hint));
  {
    // 0, 1, or "replace": a server that takes the next vacant slot, its
    // join held by the scheduler until there is one (docs/replication.md,
    // "Joining").
    std::string join;
    std::string source;
    if (ReadString("EMBER_JOIN", nullptr, &join, &source)) {
      if (join == "replace") {
        if (o.role != Role::kServer) {
          return Status::InvalidArgument(
              "EMBER_JOIN=replace is for servers (a worker comes back into "
              "its rank with EMBER_WORKER_RANK)");
        }
        o.join_replace = true;
      } else if (join == "0" || join == "1") {
        o.join = join == "1";
      } else {
        return Status::InvalidArgument("EMBER_JOIN='" + join +
                                       "' is not 0, 1 or replace");
      }
    }
  }
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_WORKER_RANK", nullptr, -1, 65535, &o.worker_rank));
  if (o.worker_rank >= 0) o.rank_hint = o.worker_rank;
  PS_RETURN_IF_ERROR(ReadInt("EMBER_WORKER_REJOIN_MS", nullptr, -1, 86400000,
                             &o.worker_rejoin_ms));
  {
    int leave = 1;
    PS_RETURN_IF_ERROR(
        ReadInt("EMBER_LEAVE_ON_SIGTERM", nullptr, 0, 1, &leave));
    o.leave_on_sigterm = leave != 0;
  }
  PS_RETURN_IF_ERROR(ReadInt("EMBER_HEARTBEAT_INTERVAL_MS",
                             "ember_heartbeat_interval_ms", 0, 600000,
                             &o.heartbeat_interval_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_HEARTBEAT_TIMEOUT_MS",
                             "ember_heartbeat_timeout_ms", 1, 3600000,
                             &o.heartbeat_timeout_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_SCHEDULER_WAIT_MS", nullptr, 0, 86400000,
                             &o.scheduler_wait_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_MIGRATION_RESEND_MS", nullptr, -1, 3600000,
                             &o.migration_resend_ms));
  {
    int restart = 0;
    PS_RETURN_IF_ERROR(
        ReadInt("EMBER_SCHEDULER_RESTART", nullptr, 0, 1, &restart));
    o.scheduler_restart = restart != 0;
    if (const char* file = std::getenv("EMBER_RUN_KEY_FILE")) {
      o.run_key_file = file;
    }
  }
  PS_RETURN_IF_ERROR(ReadInt("EMBER_DISCONNECT_GRACE_MS",
                             "ember_disconnect_grace_ms", -1, 3600000,
                             &o.disconnect_grace_ms));
  int start_timeout_s = o.start_timeout_ms / 1000;
  PS_RETURN_IF_ERROR(ReadInt("EMBER_START_TIMEOUT", "ember_start_timeout", 1,
                             86400, &start_timeout_s));  // A day at most.
  o.start_timeout_ms = start_timeout_s * 1000;
  int model_timeout_s = o.model_timeout_ms / 1000;
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_MODEL_TIMEOUT", nullptr, 1, 86400, &model_timeout_s));
  o.model_timeout_ms = model_timeout_s * 1000;
  PS_RETURN_IF_ERROR(ReadInt("EMBER_WAIT_LOG_INTERVAL_MS", nullptr, 0, 3600000,
                             &o.wait_log_interval_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_REQUEST_TIMEOUT_MS", nullptr, 0, 86400000,
                             &o.request_timeout_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_MISSING_APP_TIMEOUT_MS", nullptr, 1,
                             86400000, &o.missing_app_timeout_ms));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_FINALIZE_TIMEOUT_MS", nullptr, 1, 3600000,
                             &o.finalize_timeout_ms));
  {
    std::string placement = FLAGS_ember_key_placement;
    std::string source;
    if (ReadString("EMBER_KEY_PLACEMENT", "ember_key_placement", &placement,
                   &source)) {
      auto parsed = ParsePlacement(placement);
      if (!parsed.ok()) {
        return Status::InvalidArgument(source + ": " +
                                       parsed.status().message());
      }
      o.placement = *parsed;
    }
  }
  // The scheduler's few control messages gain nothing from batching, and
  // its answers to joins and heartbeats should preempt.
  if (o.role == Role::kScheduler) o.thread_policy = ThreadPolicy::kNormal;
  {
    std::string policy;
    std::string source;
    if (ReadString("EMBER_THREAD_POLICY", nullptr, &policy, &source)) {
      auto parsed = ParseThreadPolicy(policy);
      if (!parsed.ok()) {
        return Status::InvalidArgument(source + ": " +
                                       parsed.status().message());
      }
      o.thread_policy = *parsed;
    }
  }
  // The scheduler receives only control messages: keeping freed memory for
  // large messages would only keep what a flood of them left behind.
  if (o.role == Role::kScheduler) o.malloc_keep_mb = 0;
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_MALLOC_KEEP_MB", nullptr, 0, 1 << 20, &o.malloc_keep_mb));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_MAX_FRAME_MB", nullptr, 1, 1 << 20, &o.max_frame_mb));
  PS_RETURN_IF_ERROR(ReadInt("EMBER_MAX_KEYS_PER_REQUEST", nullptr, 1,
                             std::numeric_limits<int>::max(),
                             &o.max_keys_per_request));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_KEY_CACHE_MB", nullptr, 0, 1 << 16, &o.key_cache_mb));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_RECEIVE_QUEUE", nullptr, 0, 1 << 24, &o.receive_queue));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_SPIN_US", "ember_spin_us", 0, 1000000, &o.spin_us));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_METRICS_PORT", nullptr, 0, 65535, &o.metrics_port));
  PS_RETURN_IF_ERROR(
      ReadInt("EMBER_STATS_INTERVAL", nullptr, 0, 86400, &o.stats_interval_s));
  int local_ipc = 1;
  PS_RETURN_IF_ERROR(ReadInt("EMBER_LOCAL_IPC", nullptr, 0, 1, &local_ipc));
  o.local_ipc = local_ipc != 0;
  PS_RETURN_IF_ERROR(ReadConsistency(&o.consistency));
  PS_RETURN_IF_ERROR(ChooseAddresses(&o));
  PS_RETURN_IF_ERROR(o.Validate());
  // A deadline nothing would check (Node::ExpireRequests runs on the
  // heartbeat thread; a program driving its own Options may call it).
  if (o.request_timeout_ms > 0 && o.heartbeat_interval_ms <= 0) {
    return Status::InvalidArgument(
        "EMBER_REQUEST_TIMEOUT_MS needs heartbeats "
        "(EMBER_HEARTBEAT_INTERVAL_MS > 0): the heartbeat thread checks the "
        "deadline");
  }
  return o;
}

Status Options::Validate() const {
  if (num_servers < 1) {
    return Status::InvalidArgument("need at least one server");
  }
  if (num_workers < 1) {
    return Status::InvalidArgument("need at least one worker");
  }
  if (replicas >= num_servers) {
    return Status::InvalidArgument(
        "EMBER_REPLICAS=" + std::to_string(replicas) + " needs at least " +
        std::to_string(replicas + 1) + " servers; DMLC_NUM_SERVER is " +
        std::to_string(num_servers));
  }
  if (role == Role::kScheduler && scheduler_restart && run_key_file.empty()) {
    return Status::InvalidArgument(
        "EMBER_SCHEDULER_RESTART=1 needs EMBER_RUN_KEY_FILE: the restarted "
        "scheduler reads the run's key from the file the first one wrote");
  }
  if (heartbeat_interval_ms > 0 &&
      heartbeat_timeout_ms < 2 * heartbeat_interval_ms) {
    return Status::InvalidArgument(
        "EMBER_HEARTBEAT_TIMEOUT_MS (" + std::to_string(heartbeat_timeout_ms) +
        ") must be at least twice EMBER_HEARTBEAT_INTERVAL_MS (" +
        std::to_string(heartbeat_interval_ms) + ")");
  }
  return Status::OK();
}

}  // namespace ps
