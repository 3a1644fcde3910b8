#include "message/message.h"

#include <optional>
#include <sstream>

#include "meta.pb.h"

namespace ps {

namespace {

// names[value], or "unknown" for a value outside the enum (one decoded from
// the network, say).
template <typename Enum, size_t N>
const char* NameOf(Enum value, const char* const (&names)[N]) {
  const auto i = static_cast<size_t>(value);
  return i < N ? names[i] : "unknown";
}

}  // namespace

const char* RoleName(Role role) {
  static const char* const kNames[] = {"scheduler", "server", "worker"};
  return NameOf(role, kNames);
}

const char* ControlName(Control control) {
  // In the order of the enum's values, 0 to 13.
  static const char* const kNames[] = {
      "none",          "join",          "node_table",    "barrier",
      "heartbeat",     "node_failed",   "abort",         "leave",
      "replica_ready", "handover_done", "leave_request", "worker_change",
      "rejoin",        "switched"};
  return NameOf(control, kNames);
}

const char* WorkerEventName(WorkerEvent event) {
  static const char* const kNames[] = {"none", "joined", "back", "away",
                                       "gone"};
  return NameOf(event, kNames);
}

Message AppMessage(int app_id, int customer_id, int64_t timestamp,
                   int recipient, bool request) {
  Message msg;
  msg.meta.app_id = app_id;
  msg.meta.customer_id = customer_id;
  msg.meta.timestamp = timestamp;
  msg.meta.recipient = recipient;
  msg.meta.request = request;
  return msg;
}

std::string NodeInfo::DebugString() const {
  std::ostringstream os;
  os << RoleName(role);
  if (rank >= 0) os << " " << rank;
  os << " (id " << id << ", " << address();
  if (customer_id != 0) os << ", customer " << customer_id;
  os << ")";
  return os.str();
}

std::string Meta::DebugString() const {
  std::ostringstream os;
  os << "{" << sender << "->" << recipient;
  if (control != Control::kNone) {
    os << " control=" << ControlName(control);
  } else {
    os << " app=" << app_id << " customer=" << customer_id
       << " ts=" << timestamp << (request ? " request" : " response")
       << (push ? " push" : "") << (pull ? " pull" : "")
       << (key_run ? " key_run" : "");
    if (replica_of != 0) {
      os << " replica_of=" << replica_of << " origin=" << origin_sender << "/"
         << origin_customer << "/" << origin_timestamp;
    }
    if (resend_for != 0) os << " resend_for=" << resend_for;
    if (key_cache != 0) os << " key_cache=" << key_cache;
    if (state_copy != 0) os << " state_copy=" << state_copy;
    if (copy_attempt != 0) {
      os << " copy=" << copy_attempt << "/" << copy_seq
         << (copy_incomplete ? " incomplete" : "");
    }
    if (moved_epoch != 0) os << " moved_epoch=" << moved_epoch;
    if (commit_notice) os << " commit_notice";
    if (pushed_below != 0) os << " pushed_below=" << pushed_below;
  }
  os << "}";
  return os.str();
}

namespace {

// The most copy holders a control message may list: as many as servers
// (DMLC_NUM_SERVER is at most 4096).
constexpr int kMaxHolders = 4096;

// The fields that NodeInfo and NodePb share under one name, which ToPb and
// FromPb copy as they are: X(name) for each.
// clang-format off
#define PS_NODE_SAME_FIELDS(X)                                              \
  X(id) X(host) X(port) X(customer_id) X(rank_hint) X(rank) X(incarnation)  \
  X(local_endpoint)
// clang-format on

void ToPb(const NodeInfo& n, pb::NodePb* p) {
#define PS_SET_FIELD(field) p->set_##field(n.field);
  PS_NODE_SAME_FIELDS(PS_SET_FIELD)
#undef PS_SET_FIELD
  p->set_role(static_cast<int>(n.role));
  if (n.metrics_port >= 0) p->set_metrics_port_plus_one(n.metrics_port + 1);
}

// "ipc://@ember-" and 32 lowercase hex digits (ZmqVan's names), or "".
bool IsLocalEndpoint(const std::string& s) {
  static const std::string kPrefix = "ipc://@ember-";
  if (s.empty()) return true;
  if (s.size() != kPrefix.size() + 32 || s.compare(0, kPrefix.size(), kPrefix))
    return false;
  for (size_t i = kPrefix.size(); i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status FromPb(const pb::NodePb& p, NodeInfo* n) {
  if (p.role() < 0 || p.role() > 2) {
    return Status::Corruption("node with unknown role " +
                              std::to_string(p.role()));
  }
  if (p.port() < 0 || p.port() > 65535) {
    return Status::Corruption("node with bad port " + std::to_string(p.port()));
  }
  if (p.metrics_port_plus_one() < 0 || p.metrics_port_plus_one() > 65536) {
    return Status::Corruption("node with bad metrics port");
  }
  if (!IsLocalEndpoint(p.local_endpoint())) {
    return Status::Corruption("node with a malformed same-host endpoint");
  }
#define PS_GET_FIELD(field) n->field = p.field();
  PS_NODE_SAME_FIELDS(PS_GET_FIELD)
#undef PS_GET_FIELD
#undef PS_NODE_SAME_FIELDS
  n->role = static_cast<Role>(p.role());
  n->metrics_port = p.metrics_port_plus_one() - 1;
  return Status::OK();
}

// The header fields that Meta and MetaPb share under one name, which
// EncodeMeta and DecodeMeta copy as they are (an empty string is not sent,
// as proto3 sends no field at its default): X(name) for each. The others
// are mapped by hand.
// clang-format off
#define PS_META_SAME_FIELDS(X)                                              \
  X(sender) X(recipient) X(app_id) X(customer_id) X(timestamp) X(request)   \
  X(push) X(pull) X(simple_app) X(cmd) X(priority) X(body) X(epoch)         \
  X(clock) X(clock_tick) X(keys_as_requested) X(value_bytes)                \
  X(status_code) X(status_message) X(replica_of) X(origin_sender)           \
  X(origin_customer) X(origin_timestamp) X(resend_for) X(done_below)        \
  X(state_copy) X(moved_epoch) X(key_run) X(clock_query) X(handed_from)    \
  X(pushed_below) X(commit_notice) X(wants_commit) X(committed)             \
  X(copy_attempt) X(copy_seq) X(copy_incomplete) X(key_cache)
// clang-format on

// Whether a field differs from proto3's default, which is not sent anyway:
// setting an empty string field would allocate a string in the MetaPb for
// every message (body and status_message are empty in nearly all).
inline bool NotDefault(const std::string& s) { return !s.empty(); }
template <typename T>
inline bool NotDefault(T v) {
  return v != T{};
}

// Headers of at most this many bytes are coded in a protobuf message kept by
// the thread and reused, so that a data message's header allocates nothing
// (its repeated field of frame sizes keeps its capacity); larger ones, and
// control messages, in one of their own, so that no thread keeps a large
// header's memory.
constexpr size_t kReusedHeaderBytes = 1024;

// The thread's reused header; as the last use left it.
pb::MetaPb& ReusedHeader() {
  thread_local pb::MetaPb header;
  return header;
}

}  // namespace

void EncodeMeta(const Meta& meta, const std::vector<SArray<char>>& data,
                std::string* out) {
  const bool small =
      meta.control == Control::kNone &&
      meta.body.size() + meta.status_message.size() <= kReusedHeaderBytes / 2;
  std::optional<pb::MetaPb> own;
  pb::MetaPb& p = small ? ReusedHeader() : own.emplace();
  if (small) p.Clear();
#define PS_SET_FIELD(field) \
  if (NotDefault(meta.field)) p.set_##field(meta.field);
  PS_META_SAME_FIELDS(PS_SET_FIELD)
#undef PS_SET_FIELD
  p.set_auth_lo(meta.auth.lo);
  p.set_auth_hi(meta.auth.hi);
  if (meta.control != Control::kNone) {
    pb::ControlPb* c = p.mutable_control();
    c->set_cmd(static_cast<int>(meta.control));
    for (const NodeInfo& n : meta.nodes) ToPb(n, c->add_nodes());
    c->set_barrier_group(meta.barrier_group);
    c->set_barrier_round(meta.barrier_round);
    c->set_failed_node(meta.failed_node);
    if (!meta.reason.empty()) c->set_reason(meta.reason);
    if (!meta.process_key.empty()) c->set_process_key(meta.process_key);
    if (!meta.run_key.empty()) c->set_run_key(meta.run_key);
    if (!meta.cluster_token.empty()) c->set_cluster_token(meta.cluster_token);
    if (meta.join_running) c->set_join_running(true);
    if (meta.join_replace) c->set_join_replace(true);
    if (meta.join_ask_ms != 0) c->set_join_ask_ms(meta.join_ask_ms);
    if (meta.handed_over) c->set_handed_over(true);
    c->set_holder(meta.holder);
    c->set_holder_epoch(meta.holder_epoch);
    for (int h : meta.holders) c->add_holders(h);
    c->set_worker_event(static_cast<int>(meta.worker_event));
    c->set_num_servers(meta.num_servers);
    c->set_num_workers(meta.num_workers);
    if (!meta.consistency.empty()) c->set_consistency(meta.consistency);
    if (meta.replicas >= 0) c->set_replicas_plus_one(meta.replicas + 1);
    if (meta.ring.epoch != 0) {
      pb::RingPb* r = c->mutable_ring();
      r->set_epoch(meta.ring.epoch);
      r->set_placement(meta.ring.placement);
      for (int id : meta.ring.server_ids) r->add_server_ids(id);
      for (uint64_t b : meta.ring.begins) r->add_begins(b);
      for (int o : meta.ring.owners) r->add_owners(o);
      r->set_replicas(meta.ring.replicas);
    }
  }
  p.mutable_frame_bytes()->Reserve(static_cast<int>(data.size()));
  for (const auto& d : data) p.add_frame_bytes(d.size());
  p.SerializeToString(out);
}

Status DecodeMeta(const char* bytes, size_t size, Meta* meta,
                  std::vector<uint64_t>* frame_bytes) {
  std::optional<pb::MetaPb> own;
  // ParseFromArray clears it first.
  pb::MetaPb& p = size <= kReusedHeaderBytes ? ReusedHeader() : own.emplace();
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !p.ParseFromArray(bytes, static_cast<int>(size))) {
    return Status::Corruption("undecodable message header of " +
                              std::to_string(size) + " bytes");
  }
#define PS_GET_FIELD(field) meta->field = p.field();
  PS_META_SAME_FIELDS(PS_GET_FIELD)
#undef PS_GET_FIELD
  meta->auth.lo = p.auth_lo();
  meta->auth.hi = p.auth_hi();
  if (meta->replica_of < 0 || meta->origin_sender < 0 ||
      meta->origin_customer < 0 || meta->origin_timestamp < 0 ||
      meta->resend_for < 0 || meta->done_below < 0 || meta->pushed_below < 0 ||
      meta->state_copy < 0 || meta->state_copy > 5 || meta->clock_query < 0 ||
      meta->clock_query > 2 || meta->copy_attempt < 0 || meta->copy_seq < 0) {
    return Status::Corruption(
        "message header with a negative replication "
        "field");
  }
  meta->control = Control::kNone;
  meta->nodes.clear();
  meta->process_key.clear();
  meta->run_key.clear();
  meta->cluster_token.clear();
  meta->join_running = false;
  meta->join_replace = false;
  meta->join_ask_ms = 0;
  meta->handed_over = false;
  meta->worker_event = WorkerEvent::kNone;
  meta->num_servers = 0;
  meta->num_workers = 0;
  meta->consistency.clear();
  meta->replicas = -1;
  if (p.has_control()) {
    const pb::ControlPb& c = p.control();
    if (c.cmd() < static_cast<int>(Control::kNone) ||
        c.cmd() > static_cast<int>(Control::kSwitched)) {
      return Status::Corruption("unknown control command " +
                                std::to_string(c.cmd()));
    }
    meta->control = static_cast<Control>(c.cmd());
    meta->nodes.resize(c.nodes_size());
    for (int i = 0; i < c.nodes_size(); ++i) {
      PS_RETURN_IF_ERROR(FromPb(c.nodes(i), &meta->nodes[i]));
    }
    meta->barrier_group = c.barrier_group();
    meta->barrier_round = c.barrier_round();
    meta->failed_node = c.failed_node();
    meta->reason = c.reason();
    meta->process_key = c.process_key();
    meta->run_key = c.run_key();
    meta->cluster_token = c.cluster_token();
    meta->join_running = c.join_running();
    meta->join_replace = c.join_replace();
    meta->join_ask_ms = c.join_ask_ms();
    meta->handed_over = c.handed_over();
    meta->holder = c.holder();
    meta->holder_epoch = c.holder_epoch();
    if (c.holders_size() > kMaxHolders) {
      return Status::Corruption(
          "a list of " + std::to_string(c.holders_size()) +
          " copy holders (at most " + std::to_string(kMaxHolders) + ")");
    }
    meta->holders.assign(c.holders().begin(), c.holders().end());
    if (c.worker_event() < 0 ||
        c.worker_event() > static_cast<int>(WorkerEvent::kGone)) {
      return Status::Corruption("unknown worker event " +
                                std::to_string(c.worker_event()));
    }
    meta->worker_event = static_cast<WorkerEvent>(c.worker_event());
    meta->num_servers = c.num_servers();
    meta->num_workers = c.num_workers();
    meta->consistency = c.consistency();
    if (c.replicas_plus_one() < 0) {
      return Status::Corruption("EMBER_REPLICAS + 1 of " +
                                std::to_string(c.replicas_plus_one()));
    }
    meta->replicas = c.replicas_plus_one() - 1;
    meta->ring.epoch = c.ring().epoch();
    meta->ring.placement = c.ring().placement();
    meta->ring.server_ids.assign(c.ring().server_ids().begin(),
                                 c.ring().server_ids().end());
    meta->ring.begins.assign(c.ring().begins().begin(),
                             c.ring().begins().end());
    meta->ring.owners.assign(c.ring().owners().begin(),
                             c.ring().owners().end());
    meta->ring.replicas = c.ring().replicas();
    if (meta->ring.replicas < 0) {
      return Status::Corruption(
          "ring with " + std::to_string(meta->ring.replicas) + " replicas");
    }
  }
  if (meta->status_code < 0 ||
      meta->status_code > static_cast<int>(Status::Code::kInternal)) {
    return Status::Corruption("unknown status code " +
                              std::to_string(meta->status_code));
  }
  frame_bytes->assign(p.frame_bytes().begin(), p.frame_bytes().end());
  return Status::OK();
}

#undef PS_META_SAME_FIELDS

Status CheckFrames(const std::vector<uint64_t>& frame_bytes,
                   const std::vector<SArray<char>>& data) {
  if (frame_bytes.size() != data.size()) {
    return Status::Corruption(
        "header announces " + std::to_string(frame_bytes.size()) +
        " data frames, message has " + std::to_string(data.size()));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (frame_bytes[i] != data[i].size()) {
      return Status::Corruption("data frame " + std::to_string(i) + " has " +
                                std::to_string(data[i].size()) +
                                " bytes, header says " +
                                std::to_string(frame_bytes[i]));
    }
  }
  return Status::OK();
}

}  // namespace ps
