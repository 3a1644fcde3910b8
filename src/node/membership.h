// Membership: what the scheduler publishes about the cluster, and the
// helpers that the scheduler and every node read their tables with.
//
// Node ids follow ps-lite: the scheduler is 1, server rank r is 2r + 8,
// worker rank r is 2r + 9 (Node's statics of the same meaning forward
// here). A group (ps/base.h: kScheduler, kServerGroup, kWorkerGroup, added
// up) names the nodes of those roles; an id of 8 or more names one node.
//
// Thread safety: value types and pure functions.
#ifndef PS_NODE_MEMBERSHIP_H_
#define PS_NODE_MEMBERSHIP_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "message/message.h"
#include "partition/key_ring.h"
#include "ps/base.h"
#include "util/secret.h"

namespace ps {

constexpr int kSchedulerNodeId = 1;
inline int ServerRankToNodeId(int rank) { return rank * 2 + 8; }
inline int WorkerRankToNodeId(int rank) { return rank * 2 + 9; }

// One epoch of the cluster as the scheduler publishes it: to every member
// as a NODE_TABLE message (docs/protocol.md), to its own node as this
// value (SchedulerHost::OnMembership).
struct Membership {
  // Every node by id, the scheduler's own entry (id 1) included.
  std::map<int, NodeInfo> nodes;
  // The key ring of this epoch. Immutable.
  std::shared_ptr<const KeyRing> ring;
  // Each member's process key, by id: what every message from the
  // scheduler's process to that member carries (docs/protocol.md,
  // "Authentication").
  std::map<int, Key128> member_keys;
};

// The ids of `role` in `table`, in id order, which is rank order.
inline std::vector<int> IdsOfRole(const std::map<int, NodeInfo>& table,
                                  Role role) {
  std::vector<int> ids;
  for (const auto& entry : table) {
    if (entry.second.role == role) ids.push_back(entry.first);
  }
  return ids;
}

// The ids of `group` given the servers' and the workers' ids: the group's
// members, or {group} for a single node's id.
inline std::vector<int> GroupIds(int group, const std::vector<int>& servers,
                                 const std::vector<int>& workers) {
  if (group >= 8) return {group};
  std::vector<int> ids;
  if (group & kScheduler) ids.push_back(kSchedulerNodeId);
  if (group & kServerGroup) {
    ids.insert(ids.end(), servers.begin(), servers.end());
  }
  if (group & kWorkerGroup) {
    ids.insert(ids.end(), workers.begin(), workers.end());
  }
  return ids;
}

// "server 1 (id 10, 127.0.0.1:4567)", or "node <id>" if `table` lacks it.
inline std::string DescribeNode(const std::map<int, NodeInfo>& table, int id) {
  auto it = table.find(id);
  if (it == table.end()) return "node " + std::to_string(id);
  return it->second.DebugString();
}

}  // namespace ps

#endif  // PS_NODE_MEMBERSHIP_H_
