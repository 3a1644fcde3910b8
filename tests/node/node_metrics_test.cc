// The node's metrics (node_metrics.cc) over the in-process transport: the
// per-peer traffic series exist for every peer a node talks to, carry the
// peer's role and rank, and add up to the node's totals.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "node/node.h"
#include "ps/ps.h"
#include "testutil/inproc_cluster.h"

namespace ps {
namespace {

// The value of label `key` in a sample's labels ("" if absent).
std::string LabelValue(const metrics::Sample& s, const std::string& key) {
  const std::string start = key + "=\"";
  size_t at = s.labels.find(start);
  if (at == std::string::npos) return "";
  at += start.size();
  return s.labels.substr(at, s.labels.find('"', at) - at);
}

// Per-peer samples of `name`, by their peer label.
std::map<std::string, metrics::Sample> ByPeer(
    const std::vector<metrics::Sample>& samples, const std::string& name) {
  std::map<std::string, metrics::Sample> out;
  for (const auto& s : samples) {
    if (s.name == name) out[LabelValue(s, "peer")] = s;
  }
  return out;
}

const char* const kPairs[][2] = {
    {"ember_peer_messages_sent_total", "ember_messages_sent_total"},
    {"ember_peer_bytes_sent_total", "ember_bytes_sent_total"},
    {"ember_peer_messages_received_total", "ember_messages_received_total"},
    {"ember_peer_bytes_received_total", "ember_bytes_received_total"},
    {"ember_peer_send_errors_total", "ember_send_errors_total"},
};

// Whether, in one scrape of `p`, every per-peer family sums to its total.
bool PeersAddUp(Postoffice* p, std::string* why) {
  std::vector<metrics::Sample> s = p->node()->metrics()->Collect();
  for (const auto& pair : kPairs) {
    const double peers = metrics::Registry::Sum(s, pair[0]);
    const double total = metrics::Registry::Sum(s, pair[1]);
    if (peers != total) {
      *why = std::string(pair[0]) + " sums to " + std::to_string(peers) + ", " +
             pair[1] + " is " + std::to_string(total);
      return false;
    }
  }
  return true;
}

TEST(NodeMetricsTest, TrafficIsReportedPerPeerWithItsRoleAndRank) {
  InProcCluster cluster(2, 2);
  cluster.Start();
  std::vector<std::unique_ptr<KVServer<float>>> servers;
  for (int r = 0; r < 2; ++r) {
    servers.push_back(std::make_unique<KVServer<float>>(0, cluster.server(r)));
    servers.back()->set_request_handle(KVServerDefaultHandle<float>());
  }
  // Each worker pushes and pulls keys of both servers' ranges.
  for (int r = 0; r < 2; ++r) {
    KVWorker<float> kv(0, 0, cluster.worker(r));
    std::vector<Key> keys = {1, 2, kMaxKey / 2 + 1};
    std::vector<float> vals = {1, 2, 3}, out;
    ASSERT_TRUE(kv.WaitStatus(kv.Push(keys, vals)).ok());
    ASSERT_TRUE(kv.WaitStatus(kv.Pull(keys, &out)).ok());
  }
  // A worker's traffic: to both servers and the scheduler, labelled.
  std::vector<metrics::Sample> w0 =
      cluster.worker(0)->node()->metrics()->Collect();
  auto sent = ByPeer(w0, "ember_peer_messages_sent_total");
  auto bytes = ByPeer(w0, "ember_peer_bytes_received_total");
  for (int r = 0; r < 2; ++r) {
    const std::string id = std::to_string(Node::ServerRankToId(r));
    ASSERT_TRUE(sent.count(id)) << "no series for server " << r;
    EXPECT_EQ(LabelValue(sent[id], "peer_role"), "server");
    EXPECT_EQ(LabelValue(sent[id], "peer_rank"), std::to_string(r));
    EXPECT_GE(sent[id].value, 2) << "a push and a pull";
    EXPECT_GE(bytes[id].value, sizeof(float)) << "the pulled values";
  }
  ASSERT_TRUE(sent.count("1"));
  EXPECT_EQ(LabelValue(sent["1"], "peer_role"), "scheduler");
  EXPECT_EQ(LabelValue(sent["1"], "peer_rank"), "0");
  // The workers never talk to each other.
  EXPECT_FALSE(sent.count(std::to_string(Node::WorkerRankToId(1))));
  // A server heard from both workers.
  auto heard = ByPeer(cluster.server(1)->node()->metrics()->Collect(),
                      "ember_peer_messages_received_total");
  for (int r = 0; r < 2; ++r) {
    const std::string id = std::to_string(Node::WorkerRankToId(r));
    ASSERT_TRUE(heard.count(id)) << "no series for worker " << r;
    EXPECT_EQ(LabelValue(heard[id], "peer_role"), "worker");
    EXPECT_EQ(LabelValue(heard[id], "peer_rank"), std::to_string(r));
  }
  // The scheduler heard the joins before anyone had an id: "other".
  auto joins = ByPeer(cluster.scheduler()->node()->metrics()->Collect(),
                      "ember_peer_messages_received_total");
  ASSERT_TRUE(joins.count("other"));
  EXPECT_EQ(joins["other"].value, 4);
  EXPECT_EQ(LabelValue(joins["other"], "peer_role"), "none");
  // On every node the per-peer series add up to the totals, once the
  // messages in flight have been counted at both ends.
  for (Postoffice* p : cluster.all()) {
    std::string why;
    EXPECT_TRUE(WaitUntil([&] { return PeersAddUp(p, &why); }))
        << "node " << p->node()->my_id() << ": " << why;
  }
  cluster.Finalize();
  servers.clear();
}

}  // namespace
}  // namespace ps
