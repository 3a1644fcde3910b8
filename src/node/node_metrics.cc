// The node's metrics (docs/operations.md): what the node itself reports,
// its HTTP endpoint (which serves the Scheduler's /status on the
// scheduler) and the progress line.

#include <glog/logging.h>

#include <cstdint>
#include <utility>

#include "metrics/http_server.h"
#include "metrics/progress_log.h"
#include "node/node.h"
#include "partition/key_ring.h"

namespace ps {

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
  MutexLock lock(&mu_);
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
