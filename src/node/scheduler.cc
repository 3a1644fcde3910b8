// The scheduler's role: rendezvous, rank assignment, publication of the
// membership, barriers, heartbeats and failure notices. docs/protocol.md
// describes the protocol.

#include "node/scheduler.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include "util/mutex.h"
#include "util/secret.h"
#include "util/wait_log.h"

namespace ps {

namespace {

// The ring's epoch when the cluster first forms.
constexpr uint64_t kFirstEpoch = 1;

// A control message of the scheduler to node `to` (a request: false).
Message SchedulerMessage(Control control, int to) {
  Message m;
  m.meta.control = control;
  m.meta.sender = kSchedulerNodeId;
  m.meta.recipient = to;
  return m;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

Scheduler::Scheduler(const Options& options, std::string run_key, Van* van,
                     const Clock* clock, NodeCounters* counters,
                     SchedulerHost* host)
    : options_(options),
      van_(van),
      clock_(clock),
      counters_(counters),
      host_(host),
      run_key_(std::move(run_key)) {}

Status Scheduler::WaitFormed() {
  MutexLock lock(&mu_);
  WaitLogging(
      &cv_, &lock.native(), options_.start_timeout_ms,
      options_.wait_log_interval_ms,
      [this]() REQUIRES(mu_) { return formed_ || !abort_status_.ok(); },
      [this]() REQUIRES(mu_) {
        if (options_.scheduler_restart) {
          LOG(WARNING) << "restarted scheduler: waiting for the members to "
                          "re-register (no member has yet)";
          return;
        }
        LOG(WARNING) << "waiting for the cluster to form: "
                     << MissingNodesLocked();
      });
  if (!abort_status_.ok()) return abort_status_;
  if (formed_) return Status::OK();
  Status s = Status::DeadlineExceeded(
      options_.scheduler_restart
          ? "no member re-registered with this restarted scheduler within " +
                std::to_string(options_.start_timeout_ms / 1000) +
                " s (EMBER_START_TIMEOUT)"
          : "the cluster did not form within " +
                std::to_string(options_.start_timeout_ms / 1000) +
                " s: " + MissingNodesLocked());
  for (const NodeInfo& n : joins_) {
    RejectLocked(n, join_keys_[n.address()], s.message());
  }
  abort_status_ = s;
  cv_.notify_all();
  return s;
}

std::string Scheduler::MissingNodesLocked() const {
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

void Scheduler::RejectLocked(const NodeInfo& node, const std::string& key,
                             const std::string& reason) {
  // Without its key the node would drop our ABORT anyway.
  if (key.empty()) return;
  int id = next_reject_id_--;
  if (!van_->Connect(id, node.host, node.port, "").ok()) return;
  Message abort = SchedulerMessage(Control::kAbort, id);
  abort.meta.reason = reason;
  abort.meta.auth = ToKey128(key);
  SendLocked(std::move(abort));
  // The refused node is not met again: keep nothing of it (a node that
  // joins again and again must not grow the scheduler).
  van_->Disconnect(id);
}

void Scheduler::HandleJoin(const Message& msg) {
  MutexLock lock(&mu_);
  if (msg.meta.nodes.size() != 1) {
    counters_->dropped_bad_control++;
    LOG(WARNING) << "dropping a join with " << msg.meta.nodes.size()
                 << " nodes";
    return;
  }
  const NodeInfo& node = msg.meta.nodes[0];
  const std::string& key = msg.meta.process_key;
  if (node.role == Role::kScheduler || node.host.empty() || node.port <= 0 ||
      key.size() != kSecretBytes) {
    counters_->dropped_bad_control++;
    std::string since;
    if (LogAllowed("bad join", &since)) {
      LOG(WARNING) << "dropping a malformed join from " << node.DebugString()
                   << since;
    }
    return;
  }
  if (!options_.cluster_token.empty() &&
      !SecretsEqual(msg.meta.cluster_token, options_.cluster_token)) {
    counters_->dropped_unauthenticated++;
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
  if (options_.scheduler_restart && !formed_ && msg.meta.join_replace &&
      msg.meta.join_ask_ms > 0) {
    // A replacement that asks again is held once the members have
    // re-registered; a refusal now would end it for nothing.
    std::string since;
    if (LogAllowed("early replacement", &since)) {
      LOG(WARNING) << "not yet answering the join of " << node.DebugString()
                   << " (EMBER_JOIN=replace): this scheduler restarted and "
                      "has not yet heard from the running cluster's members; "
                      "it asks again every "
                   << msg.meta.join_ask_ms << " ms" << since;
    }
    return;
  }
  if (options_.scheduler_restart && !formed_) {
    // A restarted scheduler never forms a new cluster: the running one's
    // members re-register first.
    LOG(WARNING) << "refusing the join of " << node.DebugString()
                 << ": this scheduler restarted and has not yet heard from "
                    "the running cluster's members";
    RejectLocked(node, key,
                 "the scheduler restarted and is rebuilding the running "
                 "cluster from its members; start this node again once it "
                 "has");
    return;
  }
  {
    // A member's join delivered twice (the same process, address and
    // customer): nothing to do, whenever the copy arrives.
    auto known = join_keys_.find(node.address());
    if (known != join_keys_.end() && SecretsEqual(known->second, key)) {
      for (const NodeInfo& n : joins_) {
        if (n.address() == node.address() &&
            n.customer_id == node.customer_id) {
          return;
        }
      }
    }
  }
  if (formed_ && node.role == Role::kServer && msg.meta.join_replace &&
      !msg.meta.join_running) {
    // A replacement (EMBER_JOIN=replace): its launcher saw the server it
    // replaces die, perhaps before this scheduler declared the death; it
    // waits for the vacant slot.
    if (LiveMemberAtLocked(node, /*same_customer=*/false) != Meta::kEmpty) {
      // A copy sent before its admission reached it (perhaps from a
      // scheduler that died since): it is a member now.
      return;
    }
    if (RefusedForSettingsLocked(msg)) return;
    const int64_t now = clock_->NowMs();
    const int64_t ask_ms = std::max(msg.meta.join_ask_ms, 0);
    for (HeldJoin& h : held_joins_) {
      if (h.node.address() != node.address()) continue;
      // Asked again: it lives. A process that took the address of one
      // that died meanwhile takes its place in the queue.
      h.node = node;
      h.key = key;
      h.asked_ms = now;
      h.ask_ms = ask_ms;
      ServeHeldJoinsLocked(now);  // It may have waited to be heard again.
      return;
    }
    held_joins_.push_back(
        HeldJoin{node, key, now + options_.start_timeout_ms, now, ask_ms});
    ServeHeldJoinsLocked(now);
    // Serving only removes joins: if this one is still held, it is last.
    if (!held_joins_.empty() &&
        held_joins_.back().node.address() == node.address()) {
      LOG(WARNING) << "holding the join of " << node.DebugString()
                   << " (EMBER_JOIN=replace) until a server slot is vacant "
                      "and no membership change is under way, for at most "
                   << options_.start_timeout_ms / 1000
                   << " s (EMBER_START_TIMEOUT)";
    }
    return;
  }
  if (formed_) {
    const bool server = node.role == Role::kServer &&
                        (msg.meta.join_running || SlotVacantLocked());
    bool worker = false;
    if (node.role == Role::kWorker) {
      bool vacant = false;
      for (int id : workers_) vacant |= DroppedWorkerLocked(id);
      worker = msg.meta.join_running || node.rank >= 0 || vacant;
    }
    if (server || worker) {
      if (RefusedForSettingsLocked(msg)) return;
      if (server) {
        AdmitServerLocked(node, key, !msg.meta.join_running);
      } else {
        AdmitWorkerLocked(node, key);
      }
      return;
    }
    LOG(WARNING) << "rejecting late " << node.DebugString()
                 << ": the cluster has already formed";
    if (msg.meta.join_running) {
      RejectLocked(node, key,
                   "only a server can join a cluster that has formed "
                   "(EMBER_JOIN=1 is set on this " +
                       std::string(RoleName(node.role)) + ")");
      return;
    }
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
    counters_->dropped_unauthenticated++;
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
  if (node.role == Role::kServer) RecordServerSettingsLocked(msg, node);
  joins_.push_back(node);
  join_keys_[node.address()] = key;
  VLOG(1) << "joined: " << node.DebugString() << " (" << joins_.size() << "/"
          << options_.num_servers + options_.num_workers << ")";
  if (static_cast<int>(joins_.size()) ==
      options_.num_servers + options_.num_workers) {
    FormLocked();
  }
}

bool Scheduler::RefusedForSettingsLocked(const Message& msg) {
  const std::string why = JoinSettingsMismatchLocked(msg);
  if (why.empty()) return false;
  const NodeInfo& node = msg.meta.nodes[0];
  LOG(WARNING) << "refusing the join of " << node.DebugString() << ": " << why
               << "; the job goes on unchanged";
  RejectLocked(node, msg.meta.process_key, why);
  return true;
}

void Scheduler::RecordServerSettingsLocked(const Message& msg,
                                           const NodeInfo& node) {
  if (!msg.meta.consistency.empty()) {
    if (servers_consistency_.empty()) {
      servers_consistency_ = msg.meta.consistency;
    } else if (servers_consistency_ != msg.meta.consistency && !formed_) {
      LOG(WARNING) << "servers start with different consistency settings: "
                   << node.DebugString() << " has " << msg.meta.consistency
                   << ", an earlier one " << servers_consistency_
                   << " (EMBER_CONSISTENCY, EMBER_STALENESS); servers that "
                      "join later must have "
                   << servers_consistency_;
    }
  }
  if (msg.meta.replicas >= 0) {
    if (servers_replicas_ < 0) {
      servers_replicas_ = msg.meta.replicas;
    } else if (servers_replicas_ != msg.meta.replicas && !formed_) {
      LOG(WARNING) << "servers start with different EMBER_REPLICAS: "
                   << node.DebugString() << " has " << msg.meta.replicas
                   << ", an earlier one " << servers_replicas_
                   << "; servers that join later must "
                   << "have " << servers_replicas_;
    }
  }
}

std::string Scheduler::JoinSettingsMismatchLocked(const Message& msg) const {
  const NodeInfo& node = msg.meta.nodes[0];
  const std::string who = "this " + std::string(RoleName(node.role)) + "'s ";
  if ((msg.meta.num_servers != 0 &&
       msg.meta.num_servers != options_.num_servers) ||
      (msg.meta.num_workers != 0 &&
       msg.meta.num_workers != options_.num_workers)) {
    return who + "DMLC_NUM_SERVER=" + std::to_string(msg.meta.num_servers) +
           " and DMLC_NUM_WORKER=" + std::to_string(msg.meta.num_workers) +
           " are not the job's (" + std::to_string(options_.num_servers) +
           " and " + std::to_string(options_.num_workers) + ")";
  }
  if (node.role != Role::kServer) return "";
  if (!msg.meta.consistency.empty() && !servers_consistency_.empty() &&
      msg.meta.consistency != servers_consistency_) {
    return who + "consistency " + msg.meta.consistency +
           " (EMBER_CONSISTENCY, EMBER_STALENESS) is not the running "
           "servers' (" +
           servers_consistency_ + ")";
  }
  if (msg.meta.replicas >= 0 && servers_replicas_ >= 0 &&
      msg.meta.replicas != servers_replicas_) {
    return who + "EMBER_REPLICAS=" + std::to_string(msg.meta.replicas) +
           " is not the running servers' (" +
           std::to_string(servers_replicas_) + ")";
  }
  return "";
}

void Scheduler::FormLocked() {
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
      n.id = role == Role::kServer ? ServerRankToNodeId(n.rank)
                                   : WorkerRankToNodeId(n.rank);
    }
  }
  // The scheduler's own entry; the cluster may form before the node's
  // Start() has returned from binding, so the host says where it is now.
  // Members learn its metrics port from /status, not from the table.
  NodeInfo me = host_->SchedulerEntry();
  me.metrics_port = -1;
  table_[kSchedulerNodeId] = me;
  int64_t now = clock_->NowMs();
  for (const NodeInfo& n : joins_) {
    table_[n.id] = n;
    member_keys_[n.id] = ToKey128(join_keys_[n.address()]);
    Status s = van_->Connect(n.id, n.host, n.port, n.local_endpoint);
    if (!s.ok()) LOG(ERROR) << "cannot connect to " << n.DebugString();
    last_beat_ms_[n.address()] = now;
    unconfirmed_tables_[n.id] = FirstTable{now, false};
  }
  servers_ = IdsOfRole(table_, Role::kServer);
  workers_ = IdsOfRole(table_, Role::kWorker);
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
  InstallRingLocked(std::make_shared<const KeyRing>(std::move(ring.value())));
  for (int id : servers_) holders_[id] = ring_->ReplicaTargets(id);
  PublishLocked();
  formed_ = true;
  LOG(INFO) << "cluster formed: " << servers_.size() << " servers, "
            << workers_.size() << " workers";
  cv_.notify_all();
}

bool Scheduler::SlotVacantLocked() const {
  return static_cast<int>(servers_.size()) < options_.num_servers ||
         unfilled_deaths_ > 0;
}

void Scheduler::AdmitServerLocked(const NodeInfo& node, const std::string& key,
                                  bool fills_vacancy) {
  auto refuse = [&](const std::string& why) REQUIRES(mu_) {
    LOG(WARNING) << "refusing the join of " << node.DebugString() << ": "
                 << why;
    RejectLocked(node, key, why);
  };
  if (joining_ >= 0) {
    return refuse("a membership change is under way (" +
                  DescribeLocked(joining_) +
                  " is receiving the state of its ranges); start this server "
                  "again once it has joined");
  }
  if (leaving_ >= 0) {
    return refuse("a membership change is under way (" +
                  DescribeLocked(leaving_) +
                  " is handing its ranges over to leave); start this server "
                  "again once it has left");
  }
  if (!ring_ ||
      ring_->num_servers() >= static_cast<int>(KeyRing::kMaxServers)) {
    return refuse("the key ring cannot take another server");
  }
  const int live = LiveMemberAtLocked(node, /*same_customer=*/false);
  if (live != Meta::kEmpty) {
    return refuse("a live member (" + DescribeLocked(live) +
                  ") has that address");
  }
  // A rank and an id never used in this run: members keep the ids of the
  // dead, and a message from or about a dead id must never reach the
  // newcomer.
  int rank = 0;
  for (const auto& n : table_) {
    if (n.second.role == Role::kServer)
      rank = std::max(rank, n.second.rank + 1);
  }
  NodeInfo n = node;
  n.rank = rank;
  n.id = ServerRankToNodeId(rank);
  if (table_.count(n.id)) return refuse("no free server id");
  auto next = ring_->AddServer(n.id, ring_->epoch() + 1);
  if (!next.ok()) {
    return refuse("cannot give it a share of the ranges: " +
                  next.status().ToString());
  }
  next->set_replicas(options_.replicas);
  Status s = van_->Connect(n.id, n.host, n.port, n.local_endpoint);
  if (!s.ok()) return refuse("cannot connect to it: " + s.ToString());
  table_[n.id] = n;
  if (fills_vacancy && unfilled_deaths_ > 0) --unfilled_deaths_;
  member_keys_[n.id] = ToKey128(key);
  joins_.push_back(n);
  join_keys_[n.address()] = key;
  suspects_.erase(n.address());
  last_beat_ms_[n.address()] = clock_->NowMs();
  unconfirmed_tables_[n.id] = FirstTable{clock_->NowMs(), false};
  // A holder keeps counting only while it still receives the copies of
  // that server's pushes (it is still one of its targets); the newcomer
  // holds nothing yet (its own data included, until the hand-over).
  for (auto& entry : holders_) {
    const std::vector<int> targets = next->ReplicaTargets(entry.first);
    auto& v = entry.second;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&targets](int h) {
                             return std::find(targets.begin(), targets.end(),
                                              h) == targets.end();
                           }),
            v.end());
  }
  holders_[n.id] = {};
  servers_.push_back(n.id);
  InstallRingLocked(std::make_shared<const KeyRing>(std::move(next.value())));
  joining_ = n.id;
  LOG(WARNING) << DescribeLocked(n.id)
               << " joins the running cluster; its ranges move to it from "
                  "their owners under "
               << ring_->DebugString();
  PublishLocked();
}

void Scheduler::ServeHeldJoinsLocked(int64_t now) {
  for (auto it = held_joins_.begin(); it != held_joins_.end();) {
    const int64_t silent_limit = std::max<int64_t>(
        options_.heartbeat_timeout_ms, HeldJoin::kFreshPeriods * it->ask_ms);
    if (it->ask_ms <= 0 || now - it->asked_ms <= silent_limit) {
      ++it;
      continue;
    }
    const std::string why = "its join was held, and it did not ask again for " +
                            std::to_string(now - it->asked_ms) +
                            " ms (it asks every " + std::to_string(it->ask_ms) +
                            " ms); it is taken for dead";
    LOG(WARNING) << "dropping the held join of " << it->node.DebugString()
                 << ": " << why;
    RejectLocked(it->node, it->key, why);
    it = held_joins_.erase(it);
  }
  while (!held_joins_.empty()) {
    const HeldJoin h = held_joins_.front();
    std::string why;
    if (!abort_status_.ok()) {
      why = abort_status_.message();
    } else if (finishing_) {
      why = "the job finished before a server slot became vacant";
    } else if (SlotVacantLocked() && joining_ < 0 && leaving_ < 0) {
      // One silent lately may have died since: it is admitted when it asks
      // again (or dropped once silent for the heartbeat timeout).
      if (h.SilentLately(now)) return;
      held_joins_.erase(held_joins_.begin());
      // The next one waits for this join to end (joining_), unless this
      // one is refused.
      AdmitServerLocked(h.node, h.key, /*fills_vacancy=*/true);
      continue;
    } else if (now >= h.until_ms) {
      why = "no server slot became vacant within " +
            std::to_string(options_.start_timeout_ms / 1000) +
            " s (EMBER_START_TIMEOUT): EMBER_JOIN=replace takes the slot of "
            "a server that died, and the job has " +
            std::to_string(servers_.size()) + " live servers of " +
            std::to_string(options_.num_servers);
    } else {
      return;  // Later ones came later: none is due either.
    }
    LOG(WARNING) << "refusing the held join of " << h.node.DebugString() << ": "
                 << why;
    RejectLocked(h.node, h.key, why);
    held_joins_.erase(held_joins_.begin());
  }
}

void Scheduler::RefuseHeldJoins() {
  MutexLock lock(&mu_);
  finishing_ = true;
  ServeHeldJoinsLocked(clock_->NowMs());
}

int Scheduler::LiveMemberAtLocked(const NodeInfo& node,
                                  bool same_customer) const {
  for (const auto& n : table_) {
    if (n.second.address() == node.address() &&
        (!same_customer || n.second.customer_id == node.customer_id) &&
        !dead_.count(n.first) && !left_.count(n.first)) {
      return n.first;
    }
  }
  return Meta::kEmpty;
}

bool Scheduler::DroppedWorkerLocked(int id) const {
  return options_.worker_rejoin_ms >= 0 && !away_.count(id) &&
         (dead_.count(id) || left_.count(id));
}

void Scheduler::AdmitWorkerLocked(const NodeInfo& node,
                                  const std::string& key) {
  auto refuse = [&](const std::string& why) REQUIRES(mu_) {
    LOG(WARNING) << "refusing the join of " << node.DebugString() << ": "
                 << why;
    RejectLocked(node, key, why);
  };
  const int live = LiveMemberAtLocked(node, /*same_customer=*/true);
  if (live != Meta::kEmpty) {
    return refuse("a live member (" + DescribeLocked(live) +
                  ") has that address");
  }
  int ranks = 0;  // Worker ranks used in this run: 0 .. ranks - 1.
  for (int id : workers_) ranks = std::max(ranks, table_[id].rank + 1);
  int rank = node.rank;
  WorkerEvent event = WorkerEvent::kJoined;
  if (rank >= 0) {
    if (rank >= ranks) {
      return refuse("EMBER_WORKER_RANK=" + std::to_string(rank) +
                    " is out of range: this job's workers have ranks 0.." +
                    std::to_string(ranks - 1) +
                    " (a new worker joins with EMBER_JOIN=1 instead)");
    }
    const int id = WorkerRankToNodeId(rank);
    if (!dead_.count(id) && !left_.count(id)) {
      return refuse("EMBER_WORKER_RANK=" + std::to_string(rank) +
                    " is held by a live worker, " + DescribeLocked(id) +
                    "; only a dead or departed worker's rank can be taken");
    }
    if (away_.count(id)) event = WorkerEvent::kBack;
  } else {
    // The lowest rank no longer waited for, else a new one.
    rank = ranks;
    for (int id : workers_) {
      if (DroppedWorkerLocked(id)) {
        rank = std::min(rank, table_[id].rank);
      }
    }
  }
  NodeInfo n = node;
  n.rank = rank;
  n.id = WorkerRankToNodeId(rank);
  Status s = van_->Connect(n.id, n.host, n.port, n.local_endpoint);
  if (!s.ok()) return refuse("cannot connect to it: " + s.ToString());
  table_[n.id] = n;
  member_keys_[n.id] = ToKey128(key);
  joins_.push_back(n);
  join_keys_[n.address()] = key;
  dead_.erase(n.id);
  left_.erase(n.id);
  away_.erase(n.id);
  if (std::find(workers_.begin(), workers_.end(), n.id) == workers_.end()) {
    workers_ = IdsOfRole(table_, Role::kWorker);
  }
  // Its barrier numbers start again at 1.
  for (auto it = barrier_numbers_.begin(); it != barrier_numbers_.end();) {
    it = it->first.first == n.id ? barrier_numbers_.erase(it) : std::next(it);
  }
  suspects_.erase(n.address());
  last_beat_ms_[n.address()] = clock_->NowMs();
  unconfirmed_tables_[n.id] = FirstTable{clock_->NowMs(), true};
  LOG(WARNING) << DescribeLocked(n.id)
               << (event == WorkerEvent::kBack
                       ? " is back: it resumes its rank"
                       : " joins the running job: it takes part from the "
                         "next clock");
  // The others first, so that they know it before it sends to them.
  WorkerChangeLocked(n.id, event);
  Message m = NodeTableLocked(n.id);
  m.meta.join_running = true;  // It meets no start barrier.
  SendLocked(std::move(m));
  EvaluateBarriersLocked();
}

void Scheduler::WorkerChangeLocked(int id, WorkerEvent event) {
  host_->OnWorkerChange(table_[id], event);
  for (const auto& entry : table_) {
    const int to = entry.first;
    if (to == kSchedulerNodeId || to == id || dead_.count(to) ||
        left_.count(to) || away_.count(to)) {
      continue;
    }
    Message m = SchedulerMessage(Control::kWorkerChange, to);
    m.meta.nodes.push_back(table_[id]);
    m.meta.worker_event = event;
    SendLocked(std::move(m));
  }
}

void Scheduler::PublishLocked() {
  // The node first: once a member has its table it may send to us.
  PublishToHostLocked();
  for (const auto& entry : table_) {
    const int to = entry.first;
    if (to == kSchedulerNodeId || dead_.count(to) || left_.count(to)) continue;
    SendLocked(NodeTableLocked(to));
  }
}

Message Scheduler::NodeTableLocked(int to) const {
  Message m = SchedulerMessage(Control::kNodeTable, to);
  for (const auto& e : table_) {
    if (!dead_.count(e.first) && !left_.count(e.first)) {
      m.meta.nodes.push_back(e.second);
    }
  }
  m.meta.ring = ring_->ToInfo();
  m.meta.run_key = run_key_;
  return m;
}

void Scheduler::HandleBarrierRequest(const Message& msg) {
  MutexLock lock(&mu_);
  int sender = msg.meta.sender;
  int group = msg.meta.barrier_group;
  if (!formed_ || !table_.count(sender) || group <= 0 || group >= 8) {
    counters_->dropped_bad_control++;
    LOG(WARNING) << "dropping a bad barrier request " << msg.meta.DebugString();
    return;
  }
  if (sender != kSchedulerNodeId && !member_keys_.count(sender)) {
    // A member that has not re-registered with this restarted scheduler
    // (a request queued while it was down): its release could not reach
    // it. Its REJOIN carries the barrier it waits in.
    VLOG(1) << "barrier request from " << DescribeLocked(sender)
            << " before its re-registration: left to its REJOIN";
    return;
  }
  CountBarrierLocked(sender, msg.meta.customer_id, group,
                     msg.meta.barrier_round);
}

void Scheduler::CountBarrierLocked(int sender, int customer, int group,
                                   uint64_t number) {
  if (number != 0) {
    uint64_t& last = barrier_numbers_[std::make_pair(sender, group)];
    if (number <= last) {
      counters_->dropped_bad_control++;
      VLOG(1) << "dropping a repeated barrier request from "
              << DescribeLocked(sender) << " (group " << group << ", number "
              << number << ")";
      return;
    }
    last = number;
  }
  auto& rounds = rounds_[group];
  // A node that is already in the oldest pending round joins the next one.
  size_t r = 0;
  while (r < rounds.size() && rounds[r].arrived.count(sender)) ++r;
  if (r == rounds.size()) {
    rounds.emplace_back();
    rounds.back().started_ms = clock_->NowMs();
  }
  rounds[r].arrived[sender] = customer;
  rounds[r].numbers[sender] = number;
  VLOG(1) << "barrier " << group << ": " << rounds[r].arrived.size()
          << " arrived";
  EvaluateBarriersLocked();
}

void Scheduler::EvaluateBarriersLocked() {
  for (auto& entry : rounds_) {
    int group = entry.first;
    auto& rounds = entry.second;
    while (!rounds.empty()) {
      const Round& round = rounds.front();
      std::string dead_member;
      bool complete = true;
      for (int id : GroupIds(group, servers_, workers_)) {
        if (left_.count(id) || DroppedWorkerLocked(id)) continue;
        if (away_.count(id)) {
          complete = false;  // Waited for as a slow worker.
          continue;
        }
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

void Scheduler::ReleaseRoundLocked(int group, const Round& round,
                                   const Status& status) {
  VLOG(1) << "releasing barrier " << group << ": " << status;
  for (const auto& a : round.arrived) {
    if (dead_.count(a.first)) continue;
    if (a.first == kSchedulerNodeId) {
      host_->OnBarrierReleased(a.second, status);
      continue;
    }
    Message release = SchedulerMessage(Control::kBarrier, a.first);
    release.meta.customer_id = a.second;
    release.meta.barrier_group = group;
    auto n = round.numbers.find(a.first);
    release.meta.barrier_round = n == round.numbers.end() ? 0 : n->second;
    release.meta.status_code = static_cast<int>(status.code());
    release.meta.status_message = status.message();
    SendLocked(std::move(release));
  }
}

void Scheduler::HandleHeartbeat(const Message& msg) {
  MutexLock lock(&mu_);
  auto it = table_.find(msg.meta.sender);
  // Only a server's or a worker's beat counts: one claiming to come from the
  // scheduler itself is forged (the scheduler would echo it to itself and
  // watch its own address).
  if (it == table_.end() || dead_.count(msg.meta.sender) ||
      msg.meta.sender == kSchedulerNodeId) {
    counters_->dropped_bad_control++;
    return;
  }
  const int64_t now = clock_->NowMs();
  // A server that has left beats until it finalizes: echoed, not watched.
  if (!left_.count(msg.meta.sender)) last_beat_ms_[it->second.address()] = now;
  unconfirmed_tables_.erase(msg.meta.sender);  // It has its table.
  // A beat after the failed reconnect: alive after all.
  auto suspect = suspects_.find(it->second.address());
  if (suspect != suspects_.end() && suspect->second.refused_ms >= 0 &&
      now >= suspect->second.refused_ms) {
    LOG(INFO) << DescribeLocked(msg.meta.sender)
              << " beats although its connection closed: not dead";
    suspects_.erase(suspect);
  }
  // A member that has not re-registered with this restarted scheduler gets
  // no echo (it could not prove it came from us): missing echoes make it
  // re-register.
  if (!member_keys_.count(msg.meta.sender)) return;
  if (!left_.count(msg.meta.sender)) OnBeatLocked(msg);
  SendEchoLocked(msg.meta.sender);
}

void Scheduler::OnBeatLocked(const Message& beat) {
  const int resend_ms = options_.MigrationResendMs();
  if (resend_ms < 0 || !formed_ || !ring_) return;
  const int id = beat.meta.sender;
  if (beat.meta.handed_over && HandoverDoneLocked(id)) {
    LOG(INFO) << "(" << DescribeLocked(id)
              << "'s hand-over was reported by its heartbeat: its "
                 "HANDOVER_DONE was lost)";
  }
  if (beat.meta.holder_epoch != 0 && !beat.meta.holders.empty()) {
    AdoptReportedHoldersLocked(id, beat.meta.holder_epoch, beat.meta.holders,
                               "reported again in its heartbeat");
  }
  if (beat.meta.epoch == 0 || beat.meta.epoch >= ring_->epoch()) {
    lagging_since_.erase(id);
    return;
  }
  const int64_t now = clock_->NowMs();
  auto since = lagging_since_.emplace(id, now).first;
  if (now - since->second < resend_ms) return;
  since->second = now;
  // What it missed: a failover's notice, or a join's or a leave's table.
  // A ring older than this scheduler remembers: its table.
  Message m;
  auto had = ring_servers_.find(beat.meta.epoch);
  if (had != ring_servers_.end()) {
    m = CatchUpMessageLocked(id, beat.meta.epoch, had->second,
                             "failed over; this notice was sent again, the "
                             "first was lost");
  }
  if (m.meta.control == Control::kNone) m = NodeTableLocked(id);
  LOG(WARNING) << DescribeLocked(id) << " beats with ring epoch "
               << beat.meta.epoch << ", not " << ring_->epoch() << ", for "
               << resend_ms << " ms (EMBER_MIGRATION_RESEND_MS): its "
               << (m.meta.control == Control::kNodeFailed ? "failover notice"
                                                          : "node table")
               << " was lost; sending it again";
  SendLocked(std::move(m));
}

void Scheduler::SendEchoLocked(int to) {
  Message echo = SchedulerMessage(Control::kHeartbeat, to);
  if (ring_ && ring_->replicas() > 0 && ring_->IndexOf(to) >= 0) {
    auto held = holders_.find(to);
    if (held != holders_.end()) echo.meta.holders = held->second;
    echo.meta.holder_epoch = ring_->epoch();
  }
  SendLocked(std::move(echo));
}

void Scheduler::AdoptReportedHoldersLocked(int id, uint64_t epoch,
                                           const std::vector<int>& reported,
                                           const char* how) {
  if (!ring_ || epoch != ring_->epoch() || ring_->IndexOf(id) < 0) return;
  const std::vector<int> targets = ring_->ReplicaTargets(id);
  std::vector<int>& held = holders_[id];
  for (int h : reported) {
    // Only a live target of the data under this ring can hold it; a list
    // from an older ring was dropped above.
    if (std::find(targets.begin(), targets.end(), h) == targets.end() ||
        !table_.count(h) || dead_.count(h) || left_.count(h) ||
        std::find(held.begin(), held.end(), h) != held.end()) {
      continue;
    }
    held.push_back(h);
    LOG(INFO) << "copies known again: " << DescribeLocked(h)
              << " holds a whole copy of the data of " << DescribeLocked(id)
              << " (" << how << "; " << held.size() << " of "
              << ring_->replicas() << " copies)";
  }
}

void Scheduler::HandleReplicaReady(const Message& msg) {
  MutexLock lock(&mu_);
  const int from = msg.meta.sender;
  const int holder = msg.meta.holder;
  auto gone = [&](int id) REQUIRES(mu_) {
    return !table_.count(id) || dead_.count(id) || left_.count(id);
  };
  if (!ring_ || ring_->IndexOf(from) < 0 || gone(from) || gone(holder)) {
    counters_->dropped_bad_control++;
    return;
  }
  const std::vector<int> targets = ring_->ReplicaTargets(from);
  if (msg.meta.holder_epoch != ring_->epoch() ||
      std::find(targets.begin(), targets.end(), holder) == targets.end()) {
    // The ring changed while the copy was made: the server copies again
    // under the new one.
    VLOG(1) << "copy of " << DescribeLocked(from) << "'s data on "
            << DescribeLocked(holder) << " made under ring epoch "
            << msg.meta.holder_epoch << ", now " << ring_->epoch();
    return;
  }
  std::vector<int>& held = holders_[from];
  if (std::find(held.begin(), held.end(), holder) != held.end()) return;
  held.push_back(holder);
  LOG(INFO) << "copies restored: " << DescribeLocked(holder)
            << " holds a whole copy of the data of " << DescribeLocked(from)
            << " (" << held.size() << " of " << ring_->replicas() << " copies)";
}

void Scheduler::HandleHandoverDone(const Message& msg) {
  MutexLock lock(&mu_);
  if (!HandoverDoneLocked(msg.meta.sender)) counters_->dropped_bad_control++;
}

bool Scheduler::HandoverDoneLocked(int id) {
  if (leaving_ >= 0 && id == leaving_) {
    LeaveDoneLocked();
    return true;
  }
  if (id != joining_ || joining_ < 0) return false;
  joining_ = -1;
  LOG(INFO) << DescribeLocked(id)
            << " has joined: it holds the state of its ranges and serves "
               "them; "
            << ring_->DebugString();
  return true;
}

void Scheduler::HandleRejoin(const Message& msg) {
  MutexLock lock(&mu_);
  const int sender = msg.meta.sender;
  const std::string& key = msg.meta.process_key;
  auto drop = [&](const std::string& why) REQUIRES(mu_) {
    counters_->dropped_bad_control++;
    std::string since;
    if (LogAllowed("rejoin " + std::to_string(sender), &since)) {
      LOG(WARNING) << "dropping a re-registration from node " << sender << ": "
                   << why << since;
    }
  };
  const NodeInfo* me = nullptr;
  for (const NodeInfo& n : msg.meta.nodes) {
    if (n.id == sender) me = &n;
  }
  if (me == nullptr || me->role == Role::kScheduler || me->host.empty() ||
      me->port <= 0 || me->rank < 0 || key.size() != kSecretBytes) {
    return drop("malformed (no entry of its own, or no process key)");
  }
  if (sender != (me->role == Role::kServer ? ServerRankToNodeId(me->rank)
                                           : WorkerRankToNodeId(me->rank))) {
    return drop("its id does not match its role and rank");
  }
  if (!options_.cluster_token.empty() &&
      !SecretsEqual(msg.meta.cluster_token, options_.cluster_token)) {
    counters_->dropped_unauthenticated++;
    std::string since;
    if (LogAllowed("rejoin token", &since)) {
      LOG(WARNING) << "refusing a re-registration as " << me->DebugString()
                   << ": "
                   << (msg.meta.cluster_token.empty() ? "no cluster token"
                                                      : "a wrong cluster token")
                   << " (EMBER_CLUSTER_TOKEN)" << since;
    }
    return;
  }
  auto parsed = KeyRing::FromInfo(msg.meta.ring);
  if (!parsed.ok())
    return drop("a bad key ring: " + parsed.status().ToString());
  for (int id : parsed->server_ids()) {
    bool listed = false;
    for (const NodeInfo& n : msg.meta.nodes) {
      listed = listed || (n.id == id && n.role == Role::kServer);
    }
    if (!listed) {
      return drop("its ring names node " + std::to_string(id) +
                  ", which it does not list as a live server");
    }
  }
  auto ring = std::make_shared<const KeyRing>(std::move(parsed.value()));
  if (!abort_status_.ok())
    return RejectLocked(*me, key, abort_status_.message());
  const Key128 key128 = ToKey128(key);
  auto known = member_keys_.find(sender);
  if (known != member_keys_.end() && !KeysEqual(known->second, key128)) {
    // The first process to re-register as a member keeps its id; what
    // another reports is not read.
    counters_->dropped_unauthenticated++;
    std::string since;
    if (LogAllowed("rejoin key", &since)) {
      LOG(WARNING) << "refusing a re-registration as " << DescribeLocked(sender)
                   << ": another process has registered with that id" << since;
    }
    return;
  }
  if (!formed_) {
    if (!options_.scheduler_restart) return drop("the cluster has not formed");
    AdoptReportedLocked(msg.meta.nodes, ring);
  } else if (options_.scheduler_restart && ring->epoch() > ring_->epoch()) {
    AdoptLaterRingLocked(msg.meta.nodes, ring);
  }
  auto it = table_.find(sender);
  if (it == table_.end() || it->second.role != me->role ||
      it->second.address() != me->address()) {
    counters_->dropped_bad_control++;
    LOG(WARNING) << "refusing the re-registration of " << me->DebugString()
                 << ": not a member of the running cluster as this scheduler "
                    "knows it";
    return RejectLocked(*me, key,
                        "the scheduler does not know " + me->DebugString() +
                            " as a member of the running cluster");
  }
  if (dead_.count(sender) || left_.count(sender)) {
    return RejectLocked(*me, key,
                        DescribeLocked(sender) +
                            " was declared dead or has left; it cannot "
                            "re-register");
  }
  const std::string address = it->second.address();
  if (me->role == Role::kServer) RecordServerSettingsLocked(msg, *me);
  if (known == member_keys_.end()) {
    member_keys_[sender] = key128;
    Status s = van_->Connect(sender, it->second.host, it->second.port,
                             it->second.local_endpoint);
    if (!s.ok()) LOG(ERROR) << "cannot connect to " << DescribeLocked(sender);
    reported_epoch_[sender] = ring->epoch();
    reported_servers_[sender] = ring->server_ids();
    size_t members = 0, registered = 0;
    for (const auto& n : table_) {
      if (n.first == kSchedulerNodeId || dead_.count(n.first) ||
          left_.count(n.first)) {
        continue;
      }
      ++members;
      registered += member_keys_.count(n.first);
    }
    LOG(INFO) << DescribeLocked(sender) << " re-registered (" << registered
              << " of " << members << " members)";
    if (registered == members) {
      LOG(WARNING) << "every member has re-registered: membership, ring and "
                      "barriers rebuilt; "
                   << ring_->DebugString();
    }
    PublishToHostLocked();
    CatchUpLocked(sender);
  }
  last_beat_ms_[address] = clock_->NowMs();
  suspects_.erase(address);
  if (me->role == Role::kServer) {
    AdoptReportedHoldersLocked(sender, msg.meta.holder_epoch, msg.meta.holders);
  }
  SendEchoLocked(sender);
  const int group = msg.meta.barrier_group;
  const uint64_t number = msg.meta.barrier_round;
  if (group > 0 && group < 8 && number > 0) {
    // Sent again with every re-registration: counted once.
    auto last = barrier_numbers_.find(std::make_pair(sender, group));
    if (last == barrier_numbers_.end() || last->second < number) {
      CountBarrierLocked(sender, msg.meta.customer_id, group, number);
    }
  }
}

void Scheduler::AdoptReportedLocked(const std::vector<NodeInfo>& nodes,
                                    std::shared_ptr<const KeyRing> ring) {
  NodeInfo me = host_->SchedulerEntry();
  me.metrics_port = -1;
  table_[kSchedulerNodeId] = me;
  const int64_t now = clock_->NowMs();
  for (const NodeInfo& n : nodes) {
    if (n.id < 8 || n.role == Role::kScheduler || n.host.empty() ||
        n.port <= 0) {
      continue;
    }
    table_[n.id] = n;
    // Members that do not re-register within the heartbeat timeout are
    // declared dead, as after silence.
    last_beat_ms_[n.address()] = now;
  }
  InstallRingLocked(std::move(ring));
  servers_.clear();
  for (int id : IdsOfRole(table_, Role::kServer)) {
    if (ring_->IndexOf(id) >= 0) {
      servers_.push_back(id);
    } else {
      dead_.insert(id);
    }
  }
  workers_ = IdsOfRole(table_, Role::kWorker);
  // Copies of epoch 1 are whole from the start (FormLocked); later ones
  // were counted by the scheduler that died, from REPLICA_READY reports.
  for (int id : servers_) {
    holders_[id] = ring_->epoch() == kFirstEpoch ? ring_->ReplicaTargets(id)
                                                 : std::vector<int>();
  }
  joining_ = -1;
  formed_ = true;
  LOG(WARNING) << "restarted scheduler: rebuilding the running cluster from "
                  "the members' reports: "
               << servers_.size() << " servers, " << workers_.size()
               << " workers, " << ring_->DebugString()
               << "; a member that does not re-register within "
               << options_.heartbeat_timeout_ms << " ms is declared dead";
  if (ring_->epoch() != kFirstEpoch && ring_->replicas() > 0) {
    LOG(WARNING) << "the copies made since ring epoch 1 are counted as "
                    "the servers report them when they re-register; until "
                    "then a server's death ends the run";
  }
  PublishToHostLocked();
  cv_.notify_all();
}

void Scheduler::AdoptLaterRingLocked(const std::vector<NodeInfo>& nodes,
                                     std::shared_ptr<const KeyRing> ring) {
  const int64_t now = clock_->NowMs();
  for (const NodeInfo& n : nodes) {
    if (n.id < 8 || n.role == Role::kScheduler || n.host.empty() ||
        n.port <= 0 || table_.count(n.id)) {
      continue;
    }
    table_[n.id] = n;
    last_beat_ms_[n.address()] = now;
    if (n.role == Role::kServer) holders_[n.id] = {};
  }
  LOG(WARNING) << "a member reports a later ring than this scheduler's ("
               << ring_->DebugString() << "): " << ring->DebugString();
  InstallRingLocked(std::move(ring));
  for (int id : std::vector<int>(servers_)) {
    if (ring_->IndexOf(id) >= 0) continue;
    dead_.insert(id);
    holders_.erase(id);
    LOG(WARNING) << DescribeLocked(id)
                 << " failed over before this scheduler restarted";
    host_->OnMemberFailedOver(
        id, ring_,
        Status::Unavailable(DescribeLocked(id) +
                            " failed over before the scheduler restarted"));
  }
  servers_.clear();
  for (int id : IdsOfRole(table_, Role::kServer)) {
    if (ring_->IndexOf(id) >= 0 && !dead_.count(id)) servers_.push_back(id);
  }
  workers_ = IdsOfRole(table_, Role::kWorker);
  for (const auto& e : reported_epoch_) {
    if (!dead_.count(e.first) && !left_.count(e.first)) CatchUpLocked(e.first);
  }
  PublishToHostLocked();
  EvaluateBarriersLocked();
}

void Scheduler::CatchUpLocked(int id) {
  auto reported = reported_epoch_.find(id);
  if (reported == reported_epoch_.end() || reported->second >= ring_->epoch()) {
    return;
  }
  Message m = CatchUpMessageLocked(id, reported->second, reported_servers_[id],
                                   "failed over while the scheduler restarted");
  reported->second = ring_->epoch();
  reported_servers_[id] = ring_->server_ids();
  if (m.meta.control == Control::kNone) return;
  LOG(INFO) << "bringing " << DescribeLocked(id) << " up to "
            << ring_->DebugString();
  SendLocked(std::move(m));
}

Message Scheduler::CatchUpMessageLocked(int id, uint64_t old_epoch,
                                        const std::vector<int>& had,
                                        const std::string& reason) {
  std::vector<int> gone;
  bool added = false;
  bool dropped = false;
  for (int s : had) {
    if (ring_->IndexOf(s) >= 0) continue;
    dropped = true;
    // A server that leaves or left hands its ranges over; one gone
    // otherwise failed over.
    if (!left_.count(s) && s != leaving_) gone.push_back(s);
  }
  for (int s : ring_->server_ids()) {
    added = added || std::find(had.begin(), had.end(), s) == had.end();
  }
  if (!gone.empty()) {
    if (gone.size() > 1 || added) {
      LOG(ERROR) << DescribeLocked(id) << " has ring epoch " << old_epoch
                 << "; more than one server's failover since cannot be "
                    "caught up: it learns of "
                 << DescribeLocked(gone[0]) << "'s only";
    }
    Message m = SchedulerMessage(Control::kNodeFailed, id);
    m.meta.ring = ring_->ToInfo();
    m.meta.failed_node = gone[0];
    m.meta.reason = reason;
    return m;
  }
  // A join or a leave it did not receive.
  if (added || dropped) return NodeTableLocked(id);
  return Message();
}

void Scheduler::InstallRingLocked(std::shared_ptr<const KeyRing> ring) {
  ring_ = std::move(ring);
  ring_servers_[ring_->epoch()] = ring_->server_ids();
  while (ring_servers_.size() > kRingHistory) {
    ring_servers_.erase(ring_servers_.begin());
  }
}

void Scheduler::PublishToHostLocked() {
  Membership membership;
  membership.nodes = table_;
  membership.ring = ring_;
  membership.member_keys = member_keys_;
  host_->OnMembership(membership);
}

void Scheduler::HandleLeaveRequest(const Message& msg) {
  MutexLock lock(&mu_);
  const int id = msg.meta.sender;
  if (!msg.meta.request || !formed_ || !table_.count(id) ||
      id == kSchedulerNodeId || dead_.count(id) || left_.count(id)) {
    counters_->dropped_bad_control++;
    return;
  }
  // The same request delivered again, or asked again: under way already.
  if (id == leaving_) return;
  auto refuse = [&](const std::string& why) REQUIRES(mu_) {
    LOG(WARNING) << "refusing to let " << DescribeLocked(id)
                 << " leave: " << why << "; the job goes on unchanged";
    Message no = SchedulerMessage(Control::kLeaveRequest, id);
    no.meta.reason = why;
    SendLocked(std::move(no));
  };
  if (table_[id].role != Role::kServer || !ring_ || ring_->IndexOf(id) < 0) {
    return refuse("it is not a server of the key ring");
  }
  if (joining_ >= 0 || leaving_ >= 0) {
    const int other = joining_ >= 0 ? joining_ : leaving_;
    return refuse("a membership change is under way (" + DescribeLocked(other) +
                  (joining_ >= 0 ? " is receiving the state of its ranges"
                                 : " is handing its ranges over to leave") +
                  "); ask again once it is over");
  }
  const int remain = ring_->num_servers() - 1;
  if (remain == 0) return refuse("it is the last server");
  if (options_.replicas > 0 && remain < options_.replicas + 1) {
    return refuse("EMBER_REPLICAS=" + std::to_string(options_.replicas) +
                  " copies of every server's data need " +
                  std::to_string(options_.replicas + 1) +
                  " servers, and only " + std::to_string(remain) +
                  " would remain");
  }
  auto next = ring_->RemoveServer(id, ring_->epoch() + 1);
  if (!next.ok()) {
    return refuse("cannot give its ranges to the others: " +
                  next.status().ToString());
  }
  next->set_replicas(options_.replicas);
  // Holders keep counting only while they are still targets under the new
  // ring (they receive the copies of its pushes), and a server whose
  // ranges grow by the leaver's has no whole copy anywhere until its new
  // copies are made (REPLICA_READY).
  const KeyRing& before = *ring_;
  for (auto& entry : holders_) {
    const int owner = entry.first;
    auto& v = entry.second;
    if (next->IndexOf(owner) < 0) continue;
    const std::vector<Range> had = before.RangesOf(before.IndexOf(owner));
    const std::vector<Range> has = next->RangesOf(next->IndexOf(owner));
    uint64_t had_size = 0, has_size = 0;
    for (const Range& r : had) had_size += r.end() - r.begin();
    for (const Range& r : has) has_size += r.end() - r.begin();
    if (has_size != had_size) {
      v.clear();
      continue;
    }
    const std::vector<int> targets = next->ReplicaTargets(owner);
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&targets](int h) {
                             return std::find(targets.begin(), targets.end(),
                                              h) == targets.end();
                           }),
            v.end());
  }
  holders_.erase(id);
  servers_.erase(std::remove(servers_.begin(), servers_.end(), id),
                 servers_.end());
  InstallRingLocked(std::make_shared<const KeyRing>(std::move(next.value())));
  leaving_ = id;
  LOG(WARNING) << DescribeLocked(id)
               << " leaves the running cluster; its ranges move to the other "
                  "servers under "
               << ring_->DebugString();
  PublishLocked();
  // A barrier need not wait for it any more.
  EvaluateBarriersLocked();
}

void Scheduler::LeaveDoneLocked() {
  const int id = leaving_;
  leaving_ = -1;
  left_.insert(id);
  host_->OnMemberLeft(id);
  // Its process may go on beating until it finalizes; it is no member to
  // watch any more.
  const std::string address = table_[id].address();
  bool all_left = true;
  for (const auto& n : table_) {
    if (n.second.address() == address && !left_.count(n.first) &&
        !dead_.count(n.first)) {
      all_left = false;
    }
  }
  if (all_left) {
    last_beat_ms_.erase(address);
    suspects_.erase(address);
  }
  // Its barrier requests are void: it waits at none any more.
  for (auto& entry : rounds_) {
    for (Round& round : entry.second) {
      round.arrived.erase(id);
      round.numbers.erase(id);
    }
  }
  LOG(INFO) << DescribeLocked(id)
            << " has left: its ranges are handed over and acknowledged; "
            << ring_->DebugString();
  EvaluateBarriersLocked();
}

void Scheduler::HandleLeave(const Message& msg) {
  MutexLock lock(&mu_);
  auto it = table_.find(msg.meta.sender);
  if (it == table_.end() || msg.meta.sender == kSchedulerNodeId) {
    counters_->dropped_bad_control++;
    return;
  }
  left_.insert(msg.meta.sender);
  host_->OnMemberLeft(msg.meta.sender);
  // A process has left once all its logical nodes have.
  bool all_left = true;
  for (const auto& n : table_) {
    if (n.second.address() == it->second.address() && !left_.count(n.first)) {
      all_left = false;
    }
  }
  if (all_left) {
    last_beat_ms_.erase(it->second.address());
    suspects_.erase(it->second.address());
  }
  VLOG(1) << it->second.DebugString() << " left";
  if (formed_ && it->second.role == Role::kWorker &&
      !dead_.count(msg.meta.sender)) {
    // Elastic workers: servers stop waiting for it in their clocks.
    WorkerChangeLocked(msg.meta.sender, WorkerEvent::kGone);
  }
  EvaluateBarriersLocked();
}

void Scheduler::CheckLiveness() {
  MutexLock lock(&mu_);
  if (!formed_) return;
  const int64_t now = clock_->NowMs();
  std::vector<int> expired_holds;
  for (const auto& a : away_) {
    if (now >= a.second) expired_holds.push_back(a.first);
  }
  for (int id : expired_holds) {
    away_.erase(id);
    LOG(WARNING) << DescribeLocked(id) << " did not come back within "
                 << options_.worker_rejoin_ms
                 << " ms (EMBER_WORKER_REJOIN_MS): the job goes on without it";
    WorkerChangeLocked(id, WorkerEvent::kGone);
  }
  if (!expired_holds.empty()) EvaluateBarriersLocked();
  ResendFirstTablesLocked(now);
  std::vector<std::pair<std::string, int64_t>> expired;
  for (const auto& beat : last_beat_ms_) {
    if (now - beat.second > options_.heartbeat_timeout_ms) {
      expired.push_back(beat);
    }
  }
  for (const auto& e : expired) {
    DeclareDeadLocked(
        e.first, "no heartbeat for " + std::to_string(now - e.second) + " ms");
  }
  std::vector<std::pair<std::string, Suspect>> refused;
  for (const auto& s : suspects_) {
    if (s.second.refused_ms >= 0 &&
        now - s.second.refused_ms >= options_.disconnect_grace_ms) {
      refused.push_back(s);
    }
  }
  for (const auto& r : refused) {
    DeclareDeadLocked(
        r.first, "its connection closed " +
                     std::to_string(now - r.second.closed_ms) +
                     " ms ago and reconnecting was refused; no heartbeat or "
                     "leave since");
  }
  // After every death of this check is declared: a replacement admitted
  // between two would join a ring about to lose another server.
  ServeHeldJoinsLocked(now);
}

void Scheduler::ResendFirstTablesLocked(int64_t now) {
  const int resend_ms = options_.MigrationResendMs();
  for (auto it = unconfirmed_tables_.begin();
       it != unconfirmed_tables_.end();) {
    const int id = it->first;
    FirstTable& first = it->second;
    if (!table_.count(id) || dead_.count(id) || left_.count(id)) {
      it = unconfirmed_tables_.erase(it);
      continue;
    }
    if (resend_ms >= 0 && now - first.sent_ms >= resend_ms) {
      LOG(WARNING) << DescribeLocked(id) << " has not beaten in the "
                   << now - first.sent_ms
                   << " ms since its node table was sent: it may have been "
                      "lost; sending it again (EMBER_MIGRATION_RESEND_MS)";
      Message m = NodeTableLocked(id);
      m.meta.join_running = first.join_running;
      SendLocked(std::move(m));
      first.sent_ms = now;
    }
    ++it;
  }
}

void Scheduler::ExcusePause(int64_t paused_ms) {
  MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  for (auto& beat : last_beat_ms_) {
    beat.second = std::min(now, beat.second + paused_ms);
  }
  for (auto& s : suspects_) {
    if (s.second.refused_ms >= 0) {
      s.second.refused_ms = std::min(now, s.second.refused_ms + paused_ms);
    }
  }
}

void Scheduler::OnPeerEvent(const PeerEvent& event) {
  MutexLock lock(&mu_);
  if (!formed_ || options_.disconnect_grace_ms < 0) return;
  // The member's address as the table has it (the van's may be its
  // same-host endpoint); a process that has left or died is no suspect.
  std::string address;
  for (int id : event.ids) {
    auto it = table_.find(id);
    if (it == table_.end() || id == kSchedulerNodeId) continue;
    if (!dead_.count(id) && !left_.count(id)) address = it->second.address();
  }
  if (address.empty()) return;
  const int64_t now = clock_->NowMs();
  switch (event.kind) {
    case PeerEvent::Kind::kDisconnected:
      suspects_[address] = Suspect{now, -1};
      VLOG(1) << "the connection to " << address << " closed";
      return;
    case PeerEvent::Kind::kConnected:
      if (suspects_.erase(address)) {
        LOG(INFO) << "the connection to " << address
                  << " closed and is back: not dead";
      }
      return;
    case PeerEvent::Kind::kReconnectFailed:
      break;
  }
  auto it = suspects_.find(address);
  if (it == suspects_.end() || it->second.refused_ms >= 0) return;
  it->second.refused_ms = now;
  // Also every member that finishes: it sends LEAVE, then closes its
  // sockets, and its LEAVE may come after these events.
  VLOG(1) << "the connection to " << address << " closed "
          << now - it->second.closed_ms
          << " ms ago and reconnecting was refused: declaring it dead unless "
          << "it beats or leaves within " << options_.disconnect_grace_ms
          << " ms";
  if (options_.disconnect_grace_ms == 0) {
    DeclareDeadLocked(address,
                      "its connection closed and reconnecting was refused");
    return;
  }
  host_->RequestLivenessCheck(options_.disconnect_grace_ms);
}

void Scheduler::DeclareDeadLocked(const std::string& address,
                                  const std::string& why) {
  last_beat_ms_.erase(address);
  suspects_.erase(address);
  std::vector<int> victims;
  for (const auto& n : table_) {
    if (n.second.address() == address && !dead_.count(n.first) &&
        !left_.count(n.first)) {
      victims.push_back(n.first);
    }
  }
  for (int id : victims) {
    dead_.insert(id);
    if (id == joining_) {
      LOG(ERROR) << DescribeLocked(id)
                 << " died before it had received the state of its ranges";
      joining_ = -1;
    }
    if (id == leaving_) {
      // Its ranges are off the ring already: no failover; the keys that
      // moved from it may not have reached their new owners.
      LOG(ERROR) << DescribeLocked(id)
                 << " died before its hand-over was acknowledged: the state "
                    "of the keys that moved from it may be lost";
      leaving_ = -1;
    }
  }
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
    if (options_.worker_rejoin_ms >= 0 && table_[id].role == Role::kWorker) {
      // Elastic workers: the job goes on; the victim alone hears that it
      // was declared dead (if it is alive after all, it stops).
      Message notice = SchedulerMessage(Control::kNodeFailed, id);
      notice.meta.failed_node = id;
      notice.meta.reason = why;
      SendLocked(std::move(notice));
      // Out of every barrier round it had arrived at.
      for (auto& entry : rounds_) {
        for (Round& r : entry.second) {
          r.arrived.erase(id);
          r.numbers.erase(id);
        }
      }
      if (options_.worker_rejoin_ms > 0) {
        away_[id] = clock_->NowMs() + options_.worker_rejoin_ms;
        LOG(WARNING) << who << ": its rank is held for "
                     << options_.worker_rejoin_ms
                     << " ms (EMBER_WORKER_REJOIN_MS) for its restart "
                        "(EMBER_WORKER_RANK="
                     << table_[id].rank << "); the others wait for it";
        host_->RequestLivenessCheck(options_.worker_rejoin_ms);
        WorkerChangeLocked(id, WorkerEvent::kAway);
      } else {
        WorkerChangeLocked(id, WorkerEvent::kGone);
      }
      continue;
    }
    auto h = heirs.find(id);
    if (!lost && h != heirs.end() && FailOverLocked(id, h->second, why)) {
      continue;
    }
    NotifyDeathLocked(id, why, nullptr);
    Status status = Status::Unavailable(who + " died (" + why + ")");
    if (options_.failure_policy == FailurePolicy::kAbort &&
        abort_status_.ok()) {
      abort_status_ = status;
    }
    // The node's own customers (a program running as scheduler).
    host_->OnMemberDead(id, status);
  }
  EvaluateBarriersLocked();
}

int Scheduler::HeirLocked(int id) const {
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
      // Or its connection closed and refused too (OnPeerEvent).
      auto suspect = t == table_.end() ? suspects_.end()
                                       : suspects_.find(t->second.address());
      const bool closed =
          suspect != suspects_.end() && suspect->second.refused_ms >= 0;
      if (!dead_.count(h) && !left_.count(h) && !silent && !closed) return h;
      lost += (lost.empty() ? "" : ", ") + DescribeLocked(h) +
              (dead_.count(h) ? " (dead too)"
               : silent       ? " (silent too)"
               : closed       ? " (its connection closed too)"
                              : " (left)");
    }
  }
  LOG(ERROR) << "no live server holds a whole copy of the data of "
             << DescribeLocked(id)
             << (lost.empty() ? std::string(" (no copy is whole since the "
                                            "last ring change)")
                              : " (copies were on " + lost + ")")
             << ": that data is lost";
  return -1;
}

bool Scheduler::FailOverLocked(int id, int heir, const std::string& why) {
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
  InstallRingLocked(std::make_shared<const KeyRing>(std::move(next.value())));
  servers_.erase(std::remove(servers_.begin(), servers_.end(), id),
                 servers_.end());
  ++unfilled_deaths_;
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
  // The node first, as for a new membership; then the members.
  host_->OnMemberFailedOver(
      id, ring_,
      Status::Unavailable(who + " died (" + why + "); " + DescribeLocked(heir) +
                          " took over its data"));
  const RingInfo info = ring_->ToInfo();
  NotifyDeathLocked(id, why, &info);
  return true;
}

void Scheduler::NotifyDeathLocked(int id, const std::string& why,
                                  const RingInfo* ring) {
  for (const auto& n : table_) {
    const int to = n.first;
    // The victim is told too: if it is in fact alive (a long pause), it
    // learns it was expelled instead of carrying on alone.
    if (to == kSchedulerNodeId || left_.count(to)) continue;
    if (dead_.count(to) && to != id) continue;
    Message notice = SchedulerMessage(Control::kNodeFailed, to);
    notice.meta.failed_node = id;
    notice.meta.reason = why;
    if (ring != nullptr) notice.meta.ring = *ring;
    SendLocked(std::move(notice));
  }
}

void Scheduler::WatchWaits(int64_t interval_ms) {
  MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  for (const auto& entry : rounds_) {
    if (entry.second.empty()) continue;
    const Round& round = entry.second.front();
    if (!WaitLogDue(now - round.started_ms, interval_ms)) continue;
    std::string missing;
    size_t count = 0;
    for (int id : GroupIds(entry.first, servers_, workers_)) {
      if (left_.count(id) || dead_.count(id) || round.arrived.count(id)) {
        continue;
      }
      if (++count <= 8) missing += (count > 1 ? ", " : "") + DescribeLocked(id);
    }
    if (count > 8) missing += " and " + std::to_string(count - 8) + " more";
    LOG(WARNING) << "barrier over group " << entry.first << " has waited "
                 << (now - round.started_ms) / 1000 << " s for " << missing;
  }
}

void Scheduler::SendLocked(Message&& msg) {
  if (msg.meta.auth.empty()) {
    auto it = member_keys_.find(msg.meta.recipient);
    // A member that has not re-registered with a restarted scheduler:
    // it would drop the message, which it cannot authenticate.
    if (it == member_keys_.end()) return;
    msg.meta.auth = it->second;
  }
  host_->SendControl(std::move(msg));
}

bool Scheduler::LogAllowed(const std::string& key, std::string* since) {
  uint64_t left_out = 0;
  if (!drop_log_.Allow(key, clock_->NowMs(), &left_out)) return false;
  *since = LogLimiter::Since(left_out);
  return true;
}

std::string Scheduler::DescribeLocked(int id) const {
  return DescribeNode(table_, id);
}

std::string Scheduler::StatusJson() const {
  MutexLock lock(&mu_);
  std::ostringstream os;
  os << "{\"epoch\":" << (ring_ ? ring_->epoch() : 0)
     << ",\"ready\":" << (formed_ ? "true" : "false")
     << ",\"num_servers\":" << options_.num_servers
     << ",\"num_workers\":" << options_.num_workers << ",\"placement\":"
     << JsonString(ring_ ? PlacementName(ring_->placement()) : "")
     << ",\"nodes\":[";
  bool first = true;
  auto node = [&](const NodeInfo& n, const char* state) {
    os << (first ? "" : ",") << "{\"id\":" << n.id
       << ",\"role\":" << JsonString(RoleName(n.role)) << ",\"rank\":" << n.rank
       << ",\"host\":" << JsonString(n.host) << ",\"port\":" << n.port
       << ",\"metrics_port\":" << n.metrics_port
       << ",\"state\":" << JsonString(state) << "}";
    first = false;
  };
  // The scheduler first (the lowest id), as its node has it now.
  node(host_->SchedulerEntry(), "alive");
  for (const auto& n : table_) {
    if (n.first == kSchedulerNodeId) continue;
    node(n.second, away_.count(n.first)   ? "away"
                   : dead_.count(n.first) ? "dead"
                   : left_.count(n.first) ? "left"
                                          : "alive");
  }
  os << "],\"ranges\":[";
  if (ring_) {
    for (size_t i = 0; i < ring_->num_ranges(); ++i) {
      int index = ring_->range_owner(i);
      os << (i ? "," : "") << "{\"begin\":" << ring_->range_begin(i)
         << ",\"last\":" << ring_->range_last(i)
         << ",\"server_id\":" << ring_->server_ids()[index]
         << ",\"server_index\":" << index << "}";
    }
  }
  os << "]}";
  return os.str();
}

}  // namespace ps
