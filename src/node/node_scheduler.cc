// The scheduler's side of Node: rendezvous, rank assignment, barriers,
// heartbeats and failure notices. docs/protocol.md describes the protocol.

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <set>

#include "node/customer.h"
#include "node/node.h"
#include "util/mutex.h"
#include "util/secret.h"

namespace ps {

namespace {
// The ring's epoch when the cluster first forms.
constexpr uint64_t kFirstEpoch = 1;
}  // namespace

Status Node::SchedulerStart() {
  MutexLock lock(&mu_);
  WaitLoggingLocked(
      &lock, options_.start_timeout_ms,
      [this]() REQUIRES(mu_) { return table_ready_ || !abort_status_.ok(); },
      [this]() REQUIRES(mu_) {
        LOG(WARNING) << "waiting for the cluster to form: "
                     << MissingNodesLocked();
      });
  const bool formed = table_ready_;
  if (!abort_status_.ok()) return abort_status_;
  if (formed) return Status::OK();
  std::string missing = MissingNodesLocked();
  Status s = Status::DeadlineExceeded(
      "the cluster did not form within " +
      std::to_string(options_.start_timeout_ms / 1000) + " s: " + missing);
  for (const NodeInfo& n : joins_) {
    RejectLocked(n, join_keys_[n.address()], s.message());
  }
  abort_status_ = s;
  return s;
}

std::string Node::MissingNodesLocked() const {
  int servers = 0, workers = 0;
  for (const NodeInfo& n : joins_) {
    if (n.role == Role::kServer) ++servers;
    if (n.role == Role::kWorker) ++workers;
  }
  std::string s = std::to_string(servers) + " of " +
                  std::to_string(options_.num_servers) + " servers and " +
                  std::to_string(workers) + " of " +
                  std::to_string(options_.num_workers) + " workers joined";
  std::vector<std::string> missing;
  if (servers < options_.num_servers) {
    missing.push_back(std::to_string(options_.num_servers - servers) +
                      " server(s)");
  }
  if (workers < options_.num_workers) {
    missing.push_back(std::to_string(options_.num_workers - workers) +
                      " worker(s)");
  }
  if (!missing.empty()) {
    s += "; missing ";
    for (size_t i = 0; i < missing.size(); ++i) {
      s += (i ? " and " : "") + missing[i];
    }
  }
  return s;
}

void Node::RejectLocked(const NodeInfo& node, const std::string& key,
                        const std::string& reason) {
  // Without its key the node would drop our ABORT anyway.
  if (key.empty()) return;
  int id = next_reject_id_--;
  if (!van_->Connect(id, node.host, node.port, "").ok()) return;
  Message abort;
  abort.meta.control = Control::kAbort;
  abort.meta.sender = kSchedulerId;
  abort.meta.recipient = id;
  abort.meta.reason = reason;
  abort.meta.auth = ToKey128(key);
  SendLocked(std::move(abort));
  // The refused node is not met again: keep nothing of it (a node that
  // joins again and again must not grow the scheduler).
  van_->Disconnect(id);
}

void Node::HandleJoin(const Message& msg) {
  MutexLock lock(&mu_);
  if (msg.meta.nodes.size() != 1) {
    counters_.dropped_bad_control++;
    LOG(WARNING) << "dropping a join with " << msg.meta.nodes.size()
                 << " nodes";
    return;
  }
  const NodeInfo& node = msg.meta.nodes[0];
  const std::string& key = msg.meta.process_key;
  if (node.role == Role::kScheduler || node.host.empty() || node.port <= 0 ||
      key.size() != kSecretBytes) {
    counters_.dropped_bad_control++;
    std::string since;
    if (LogAllowed("bad join", &since)) {
      LOG(WARNING) << "dropping a malformed join from " << node.DebugString()
                   << since;
    }
    return;
  }
  if (!options_.cluster_token.empty() &&
      !SecretsEqual(msg.meta.cluster_token, options_.cluster_token)) {
    counters_.dropped_unauthenticated++;
    std::string since;
    if (LogAllowed("join token", &since)) {
      LOG(WARNING) << "refusing a join from " << node.DebugString() << ": "
                   << (msg.meta.cluster_token.empty() ? "no cluster token"
                                                      : "a wrong cluster token")
                   << " (EMBER_CLUSTER_TOKEN)" << since;
    }
    RejectLocked(node, key,
                 "this node's cluster token (EMBER_CLUSTER_TOKEN) does not "
                 "match the scheduler's");
    return;
  }
  if (!abort_status_.ok()) {
    RejectLocked(node, key, abort_status_.message());
    return;
  }
  if (table_ready_) {
    LOG(WARNING) << "rejecting late " << node.DebugString()
                 << ": the cluster has already formed";
    RejectLocked(node, key,
                 "the cluster has already formed with " +
                     std::to_string(options_.num_servers) + " servers and " +
                     std::to_string(options_.num_workers) +
                     " workers; this node is one too many");
    return;
  }
  auto known = join_keys_.find(node.address());
  if (known != join_keys_.end() && !SecretsEqual(known->second, key)) {
    // Another process claims the address of one that has joined: the first
    // keeps it.
    counters_.dropped_unauthenticated++;
    std::string since;
    if (LogAllowed("join key", &since)) {
      LOG(WARNING) << "refusing a join from " << node.DebugString()
                   << ": another process has joined from that address" << since;
    }
    return;
  }
  int same_role = 0;
  for (const NodeInfo& n : joins_) {
    if (n.address() == node.address() && n.customer_id == node.customer_id) {
      return;  // A duplicate.
    }
    if (n.role == node.role) ++same_role;
  }
  int expected =
      node.role == Role::kServer ? options_.num_servers : options_.num_workers;
  if (same_role >= expected) {
    LOG(WARNING) << "rejecting " << node.DebugString() << ": already "
                 << expected << " " << RoleName(node.role) << "s";
    RejectLocked(
        node, key,
        "DMLC_NUM_" +
            std::string(node.role == Role::kServer ? "SERVER" : "WORKER") +
            "=" + std::to_string(expected) +
            " and that many have joined already");
    return;
  }
  joins_.push_back(node);
  join_keys_[node.address()] = key;
  VLOG(1) << "joined: " << node.DebugString() << " (" << joins_.size() << "/"
          << options_.num_servers + options_.num_workers << ")";
  if (static_cast<int>(joins_.size()) ==
      options_.num_servers + options_.num_workers) {
    AssignAndBroadcastLocked();
  }
}

void Node::AssignAndBroadcastLocked() {
  // Ranks follow the launch hints when every node of a role gave a distinct
  // one; otherwise (or for ties) the order of arrival.
  for (Role role : {Role::kServer, Role::kWorker}) {
    std::vector<size_t> order;
    std::set<int> hints;
    bool use_hints = true;
    for (size_t i = 0; i < joins_.size(); ++i) {
      if (joins_[i].role != role) continue;
      order.push_back(i);
      if (joins_[i].rank_hint < 0 ||
          !hints.insert(joins_[i].rank_hint).second) {
        use_hints = false;
      }
    }
    if (use_hints) {
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) REQUIRES(mu_) {
                         return joins_[a].rank_hint < joins_[b].rank_hint;
                       });
    }
    for (size_t rank = 0; rank < order.size(); ++rank) {
      NodeInfo& n = joins_[order[rank]];
      n.rank = static_cast<int>(rank);
      n.id = role == Role::kServer ? ServerRankToId(n.rank)
                                   : WorkerRankToId(n.rank);
    }
  }
  // The scheduler's own entry; the cluster may form before the scheduler's
  // Start() has returned from binding, so it is made here.
  NodeInfo me;
  me.id = kSchedulerId;
  me.role = Role::kScheduler;
  me.host = options_.scheduler_host;
  me.port = my_port_ > 0 ? my_port_ : options_.scheduler_port;
  me.rank = 0;
  me.incarnation = incarnation_;
  table_[kSchedulerId] = me;
  int64_t now = clock_->NowMs();
  for (const NodeInfo& n : joins_) {
    table_[n.id] = n;
    member_keys_[n.id] = ToKey128(join_keys_[n.address()]);
    Status s = van_->Connect(n.id, n.host, n.port, n.local_endpoint);
    if (!s.ok()) LOG(ERROR) << "cannot connect to " << n.DebugString();
    last_beat_ms_[n.address()] = now;
  }
  for (const auto& entry : table_) {
    if (entry.second.role == Role::kServer) servers_.push_back(entry.first);
    if (entry.second.role == Role::kWorker) workers_.push_back(entry.first);
  }
  // servers_ holds every server's id in rank order, so server rank r owns
  // ps-lite's GetServerKeyRanges()[r].
  auto ring = KeyRing::EvenSplit(servers_, kFirstEpoch, options_.placement);
  if (!ring.ok()) {
    // Only if the cluster were larger than a ring can hold (the join
    // checks make that impossible).
    LOG(ERROR) << "cannot build the key ring: " << ring.status();
    return;
  }
  ring->set_replicas(options_.replicas);
  ring_ = std::make_shared<const KeyRing>(std::move(ring.value()));
  for (int id : servers_) holders_[id] = ring_->ReplicaTargets(id);
  const RingInfo info = ring_->ToInfo();
  for (const auto& entry : table_) {
    if (entry.first == kSchedulerId) continue;
    Message m;
    m.meta.control = Control::kNodeTable;
    m.meta.sender = kSchedulerId;
    m.meta.recipient = entry.first;
    for (const auto& e : table_) m.meta.nodes.push_back(e.second);
    m.meta.ring = info;
    m.meta.run_key = run_key_;
    SendLocked(std::move(m));
  }
  table_ready_ = true;
  LOG(INFO) << "cluster formed: " << servers_.size() << " servers, "
            << workers_.size() << " workers";
  cv_.notify_all();
}

void Node::HandleBarrierRequest(const Message& msg) {
  MutexLock lock(&mu_);
  int sender = msg.meta.sender;
  int group = msg.meta.barrier_group;
  if (!table_ready_ || !table_.count(sender) || group <= 0 || group >= 8) {
    counters_.dropped_bad_control++;
    LOG(WARNING) << "dropping a bad barrier request " << msg.meta.DebugString();
    return;
  }
  auto& rounds = rounds_[group];
  // A node that is already in the oldest pending round joins the next one.
  size_t r = 0;
  while (r < rounds.size() && rounds[r].arrived.count(sender)) ++r;
  if (r == rounds.size()) {
    rounds.emplace_back();
    rounds.back().started_ms = clock_->NowMs();
  }
  rounds[r].arrived[sender] = msg.meta.customer_id;
  VLOG(1) << "barrier " << group << ": " << rounds[r].arrived.size()
          << " arrived";
  EvaluateBarriersLocked();
}

void Node::EvaluateBarriersLocked() {
  for (auto& entry : rounds_) {
    int group = entry.first;
    auto& rounds = entry.second;
    while (!rounds.empty()) {
      const Round& round = rounds.front();
      std::vector<int> members = GetNodeIdsLocked(group);
      std::string dead_member;
      bool complete = true;
      for (int id : members) {
        if (left_.count(id)) continue;
        if (dead_.count(id)) {
          dead_member = DescribeLocked(id);
          break;
        }
        if (!round.arrived.count(id)) complete = false;
      }
      if (!dead_member.empty()) {
        ReleaseRoundLocked(
            group, round,
            Status::Unavailable("barrier over group " + std::to_string(group) +
                                " cannot complete: " + dead_member +
                                " is dead"));
      } else if (complete) {
        ReleaseRoundLocked(group, round, Status::OK());
      } else {
        break;
      }
      rounds.erase(rounds.begin());
    }
  }
}

void Node::ReleaseRoundLocked(int group, const Round& round,
                              const Status& status) {
  VLOG(1) << "releasing barrier " << group << ": " << status;
  for (const auto& a : round.arrived) {
    if (dead_.count(a.first)) continue;
    if (a.first == kSchedulerId) {
      auto it = barrier_waits_.find(a.second);
      if (it != barrier_waits_.end()) it->second = {true, status};
      cv_.notify_all();
      continue;
    }
    Message release;
    release.meta.control = Control::kBarrier;
    release.meta.request = false;
    release.meta.sender = kSchedulerId;
    release.meta.recipient = a.first;
    release.meta.customer_id = a.second;
    release.meta.barrier_group = group;
    release.meta.status_code = static_cast<int>(status.code());
    release.meta.status_message = status.message();
    SendLocked(std::move(release));
  }
}

void Node::HandleHeartbeatAtScheduler(const Message& msg) {
  MutexLock lock(&mu_);
  auto it = table_.find(msg.meta.sender);
  // Only a server's or a worker's beat counts: one claiming to come from the
  // scheduler itself is forged (the scheduler would echo it to itself and
  // watch its own address).
  if (it == table_.end() || dead_.count(msg.meta.sender) ||
      IsLocalLocked(msg.meta.sender)) {
    counters_.dropped_bad_control++;
    return;
  }
  last_beat_ms_[it->second.address()] = clock_->NowMs();
  Message echo;
  echo.meta.control = Control::kHeartbeat;
  echo.meta.request = false;
  echo.meta.sender = kSchedulerId;
  echo.meta.recipient = msg.meta.sender;
  SendLocked(std::move(echo));
}

void Node::HandleLeave(const Message& msg) {
  MutexLock lock(&mu_);
  auto it = table_.find(msg.meta.sender);
  if (it == table_.end() || IsLocalLocked(msg.meta.sender)) {
    counters_.dropped_bad_control++;
    return;
  }
  left_.insert(msg.meta.sender);
  // A process has left once all its logical nodes have.
  bool all_left = true;
  for (const auto& n : table_) {
    if (n.second.address() == it->second.address() && !left_.count(n.first)) {
      all_left = false;
    }
  }
  if (all_left) last_beat_ms_.erase(it->second.address());
  VLOG(1) << it->second.DebugString() << " left";
  EvaluateBarriersLocked();
  cv_.notify_all();
}

void Node::DeclareDeadLocked(const std::string& address,
                             const std::string& why) {
  last_beat_ms_.erase(address);
  std::vector<int> victims;
  for (const auto& n : table_) {
    if (n.second.address() == address && !dead_.count(n.first) &&
        !left_.count(n.first)) {
      victims.push_back(n.first);
    }
  }
  for (int id : victims) dead_.insert(id);
  // Servers whose data another holds fail over, unless some victim's data
  // is lost: then the run ends as without replicas.
  std::map<int, int> heirs;
  // A server that died earlier without failing over: the run is ending.
  bool lost = false;
  if (ring_) {
    for (int s : ring_->server_ids()) {
      if (dead_.count(s) &&
          std::find(victims.begin(), victims.end(), s) == victims.end()) {
        lost = true;
      }
    }
  }
  for (int id : victims) {
    if (!ring_ || ring_->IndexOf(id) < 0 || ring_->replicas() == 0) continue;
    const int heir = HeirLocked(id);
    if (heir < 0) lost = true;
    heirs[id] = heir;
  }
  for (int id : victims) {
    std::string who = DescribeLocked(id);
    LOG(ERROR) << who << " is dead: " << why;
    auto h = heirs.find(id);
    if (!lost && h != heirs.end() && FailOverLocked(id, h->second, why)) {
      continue;
    }
    for (const auto& n : table_) {
      int to = n.first;
      // The victim is told too: if it is in fact alive (a long pause), it
      // learns it was expelled instead of carrying on alone.
      if (to == kSchedulerId || left_.count(to)) continue;
      if (dead_.count(to) && to != id) continue;
      Message notice;
      notice.meta.control = Control::kNodeFailed;
      notice.meta.sender = kSchedulerId;
      notice.meta.recipient = to;
      notice.meta.failed_node = id;
      notice.meta.reason = why;
      SendLocked(std::move(notice));
    }
    // The scheduler's own customers (a program running as scheduler).
    Status status = Status::Unavailable(who + " died (" + why + ")");
    if (options_.failure_policy == FailurePolicy::kAbort) {
      if (abort_status_.ok()) abort_status_ = status;
      for (const auto& c : customers_) c.second->FailAll(status);
      cv_.notify_all();
    } else {
      for (const auto& c : customers_) c.second->OnPeerFailed(id, status);
    }
  }
  EvaluateBarriersLocked();
}

int Node::HeirLocked(int id) const {
  auto held = holders_.find(id);
  std::string lost;
  const int64_t now = clock_->NowMs();
  if (held != holders_.end()) {
    for (int h : held->second) {
      // A holder as silent as the dead one is dying with it (the same
      // liveness sweep is about to declare it).
      auto t = table_.find(h);
      auto beat = t == table_.end() ? last_beat_ms_.end()
                                    : last_beat_ms_.find(t->second.address());
      const bool silent = beat != last_beat_ms_.end() &&
                          now - beat->second > options_.heartbeat_timeout_ms;
      if (!dead_.count(h) && !left_.count(h) && !silent) return h;
      lost += (lost.empty() ? "" : ", ") + DescribeLocked(h) +
              (dead_.count(h) ? " (dead too)"
               : silent       ? " (silent too)"
                              : " (left)");
    }
  }
  LOG(ERROR) << "no live server holds a whole copy of the data of "
             << DescribeLocked(id)
             << (lost.empty() ? std::string(" (its copies are incomplete "
                                            "since an earlier failover)")
                              : " (copies were on " + lost + ")")
             << ": that data is lost";
  return -1;
}

bool Node::FailOverLocked(int id, int heir, const std::string& why) {
  const std::string who = DescribeLocked(id);
  const std::vector<int> held = holders_[id];
  auto next = ring_->FailOver(id, heir, ring_->epoch() + 1);
  if (!next.ok()) {
    LOG(ERROR) << "cannot fail over " << who << ": " << next.status();
    return false;
  }
  // The heir now serves its own data and the dead server's: a server holds
  // all of it only if it held a copy of both.
  std::vector<int> both;
  for (int h : holders_[heir]) {
    if (h != id && std::find(held.begin(), held.end(), h) != held.end()) {
      both.push_back(h);
    }
  }
  holders_.erase(id);
  for (auto& entry : holders_) {
    auto& v = entry.second;
    v.erase(std::remove(v.begin(), v.end(), id), v.end());
  }
  holders_[heir] = both;
  ring_ = std::make_shared<const KeyRing>(std::move(next.value()));
  servers_.erase(std::remove(servers_.begin(), servers_.end(), id),
                 servers_.end());
  LOG(WARNING) << "failover: " << DescribeLocked(heir)
               << " takes over the data "
               << "of " << who << "; " << ring_->DebugString();
  for (const auto& entry : holders_) {
    if (entry.second.empty()) {
      LOG(WARNING) << DescribeLocked(entry.first)
                   << " has no complete copy of its data elsewhere now: the "
                      "death of it would end the run";
    }
  }
  const RingInfo info = ring_->ToInfo();
  for (const auto& n : table_) {
    const int to = n.first;
    if (to == kSchedulerId || left_.count(to)) continue;
    if (dead_.count(to) && to != id) continue;
    Message notice;
    notice.meta.control = Control::kNodeFailed;
    notice.meta.sender = kSchedulerId;
    notice.meta.recipient = to;
    notice.meta.failed_node = id;
    notice.meta.reason = why;
    notice.meta.ring = info;
    SendLocked(std::move(notice));
  }
  // The scheduler's own customers (a program running as scheduler).
  const Status status =
      Status::Unavailable(who + " died (" + why + "); " + DescribeLocked(heir) +
                          " took over its data");
  for (const auto& c : customers_) c.second->OnFailover(id, status);
  return true;
}

}  // namespace ps
