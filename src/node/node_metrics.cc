// The node's metrics (docs/operations.md): what the node itself reports,
// its HTTP endpoint (which serves the Scheduler's /status on the
// scheduler) and the progress line.

#include <glog/logging.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "metrics/http_server.h"
#include "metrics/progress_log.h"
#include "node/node.h"
#include "partition/key_ring.h"
#include "transport/van.h"

namespace ps {

namespace {

// The labels of peer `id` in the per-peer series: its id, and its role and
// rank from the node table `table`, else from the id.
std::string PeerLabels(const std::map<int, NodeInfo>& table, int id) {
  std::string role = "none";
  int rank = -1;
  auto it = table.find(id);
  if (it != table.end()) {
    role = RoleName(it->second.role);
    rank = it->second.rank;
  } else if (id == Node::kSchedulerId) {
    role = RoleName(Role::kScheduler);
    rank = 0;
  } else if (id >= 8) {
    // Not in the table (yet, or any more): ids are 8 + 2r for servers and
    // 9 + 2r for workers.
    role = RoleName(id % 2 == 0 ? Role::kServer : Role::kWorker);
    rank = Node::IdToRank(id);
  }
  return metrics::Label("peer", id == PeerTraffic::kOther
                                    ? std::string("other")
                                    : std::to_string(id)) +
         "," + metrics::Label("peer_role", role) + "," +
         metrics::Label("peer_rank", std::to_string(rank));
}

}  // namespace

void Node::StartMetrics(const std::string& bind_host) {
  metrics_.set_const_labels([this] { return MetricsLabels(); });
  metrics_.AddCollector([this](metrics::Writer* w) { CollectMetrics(w); });
  if (options_.metrics_port >= 0) {
    std::function<std::string()> status;
    if (scheduler_) {
      status = [this] { return scheduler_->StatusJson(); };
    }
    auto server =
        std::make_unique<metrics::HttpServer>(&metrics_, std::move(status));
    std::string error;
    int port = server->Start(bind_host, options_.metrics_port, &error);
    const std::string shown = bind_host.find(':') != std::string::npos
                                  ? "[" + bind_host + "]"
                                  : bind_host;
    if (port < 0) {
      // Metrics are an aid, not the job: the node runs on without them.
      LOG(ERROR) << "metrics: " << error
                 << " (EMBER_METRICS_PORT=" << options_.metrics_port
                 << "; 0 picks a free port); serving no metrics";
    } else {
      metrics_http_ = std::move(server);
      metrics_port_ = port;
      LOG(INFO) << "metrics: " << RoleName(options_.role) << " serves http://"
                << shown << ":" << port << "/metrics"
                << (options_.role == Role::kScheduler ? " and /status" : "");
    }
  }
  if (options_.stats_interval_s > 0) {
    progress_log_ = std::make_unique<metrics::ProgressLog>(&metrics_, [this] {
      MutexLock lock(&mu_);
      const int id = logical_.empty() ? -1 : logical_.begin()->second;
      return std::string(RoleName(options_.role)) + " " +
             std::to_string(id < 8 ? 0 : IdToRank(id)) + " (id " +
             std::to_string(id) + ")";
    });
    progress_log_->Start(options_.stats_interval_s);
  }
}

void Node::StopMetrics() {
  MutexLock lock(&start_mu_);
  if (progress_log_) progress_log_->Stop();
  if (metrics_http_) metrics_http_->Stop();
}

std::string Node::MetricsLabels() const {
  MutexLock lock(&mu_);
  int id = logical_.empty() ? -1 : logical_.begin()->second;
  int rank =
      id < 0 ? -1 : (options_.role == Role::kScheduler ? 0 : IdToRank(id));
  return metrics::Label("node", std::to_string(id)) + "," +
         metrics::Label("role", RoleName(options_.role)) + "," +
         metrics::Label("rank", std::to_string(rank));
}

void Node::CollectMetrics(metrics::Writer* w) const {
  const VanCounters& v = van_->counters();
  w->Counter("ember_messages_sent_total", "Messages sent by this node", "",
             v.sent_messages.load());
  w->Counter("ember_bytes_sent_total", "Bytes sent by this node", "",
             v.sent_bytes.load());
  w->Counter("ember_messages_received_total", "Messages received", "",
             v.received_messages.load());
  w->Counter("ember_bytes_received_total", "Bytes received", "",
             v.received_bytes.load());
  w->Counter("ember_send_errors_total",
             "Sends that failed after the transport accepted them", "",
             v.send_errors.load());
  const std::pair<const char*, uint64_t> dropped[] = {
      {"undecodable", v.rejected_messages.load()},
      {"unknown_sender", counters_.dropped_unknown_sender.load()},
      {"no_customer", counters_.dropped_no_customer.load()},
      {"bad_control", counters_.dropped_bad_control.load()},
      {"unauthenticated", counters_.dropped_unauthenticated.load()},
  };
  for (const auto& d : dropped) {
    w->Counter("ember_dropped_messages_total",
               "Messages dropped on receipt, by reason",
               metrics::Label("reason", d.first), d.second);
  }
  w->Counter("ember_flood_trims_total",
             "Times this node returned the freed memory a flood of dropped "
             "messages left to the system",
             "", counters_.flood_trims.load());
  struct Peer {
    int id;
    uint64_t sent_messages, sent_bytes, received_messages, received_bytes,
        send_errors;
  };
  std::vector<Peer> peers;
  v.peers.ForEach([&peers](int id, const PeerCounters& c) {
    peers.push_back({id, c.sent_messages.load(), c.sent_bytes.load(),
                     c.received_messages.load(), c.received_bytes.load(),
                     c.send_errors.load()});
  });
  MutexLock lock(&mu_);
  for (const Peer& p : peers) {
    const std::string labels = PeerLabels(table_, p.id);
    w->Counter("ember_peer_messages_sent_total",
               "Messages sent to one peer node", labels, p.sent_messages);
    w->Counter("ember_peer_bytes_sent_total", "Bytes sent to one peer node",
               labels, p.sent_bytes);
    w->Counter("ember_peer_messages_received_total",
               "Messages received from one peer node", labels,
               p.received_messages);
    w->Counter("ember_peer_bytes_received_total",
               "Bytes received from one peer node", labels, p.received_bytes);
    w->Counter("ember_peer_send_errors_total",
               "Sends to one peer node that failed after the transport "
               "accepted them",
               labels, p.send_errors);
  }
  size_t held = before_table_.size();
  for (const auto& e : early_) held += e.second.size();
  w->Gauge("ember_held_messages",
           "Data messages held for apps not created yet or before the node "
           "table",
           "", static_cast<double>(held));
  w->Gauge("ember_ring_epoch", "Epoch of the key ring this node routes by", "",
           ring_ ? static_cast<double>(ring_->epoch()) : 0);
  int servers = 0, workers = 0, dead = 0;
  for (const auto& n : table_) {
    if (dead_.count(n.first)) {
      ++dead;
      continue;
    }
    if (left_.count(n.first)) continue;
    if (n.second.role == Role::kServer) ++servers;
    if (n.second.role == Role::kWorker) ++workers;
  }
  w->Gauge("ember_cluster_servers", "Live servers in this node's table", "",
           servers);
  w->Gauge("ember_cluster_workers", "Live workers in this node's table", "",
           workers);
  w->Gauge("ember_cluster_dead_nodes", "Nodes declared dead", "", dead);
}

}  // namespace ps
