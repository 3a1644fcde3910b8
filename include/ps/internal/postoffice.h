// Postoffice: ps-lite's per-process node context, as a thin facade over
// Ember's node runtime.
//
// `Postoffice::Get()` is the process's default node, configured from the
// environment (DMLC_ROLE, DMLC_PS_ROOT_URI, ...) when Start() is first
// called. Ember programs and tests may create more Postoffices (several nodes
// in one process) with `Postoffice::Create`, and pass them to the apps'
// constructors. Thread-safe.
#ifndef PS_INTERNAL_POSTOFFICE_H_
#define PS_INTERNAL_POSTOFFICE_H_

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ps/base.h"
#include "ps/range.h"
#include "ps/status.h"

namespace ps {

class Node;
struct Options;
struct MembershipChange;

class Postoffice {
 public:
  // The process's default node.
  static Postoffice* Get();

  // A postoffice over an existing node (Ember; tests). Takes ownership.
  static std::unique_ptr<Postoffice> Create(std::unique_ptr<Node> node);

  ~Postoffice();
  Postoffice(const Postoffice&) = delete;
  Postoffice& operator=(const Postoffice&) = delete;

  // ps-lite's Start: joins the cluster; on failure logs why and exits the
  // process with a non-zero status. `argv0` initialises logging.
  void Start(int customer_id, const char* argv0, const bool do_barrier);
  // Ember: the same, returning the failure instead of exiting.
  [[nodiscard]] Status StartStatus(int customer_id, bool do_barrier);

  // ps-lite's Finalize: an optional barrier over every node, then shutdown
  // (for customer 0). A failed barrier (a dead node) logs why and exits the
  // process with a non-zero status.
  void Finalize(const int customer_id, const bool do_barrier = true);
  [[nodiscard]] Status FinalizeStatus(int customer_id, bool do_barrier);

  // Blocks until every node in `node_group` has called Barrier. A failure
  // (a dead member) logs why and exits the process non-zero.
  void Barrier(int customer_id, int node_group);
  [[nodiscard]] Status BarrierStatus(int customer_id, int node_group);

  // Runs at Finalize of customer 0, after the final barrier.
  void RegisterExitCallback(const std::function<void()>& cb);

  // The node's answers once it exists; before, the settings the node will
  // be made from (the environment and flags, read once; the defaults, with a
  // warning, if they cannot be read, in which case Start fails).
  int num_workers() const;
  int num_servers() const;
  bool is_worker() const;
  bool is_server() const;
  bool is_scheduler() const;
  int my_rank() const;
  int verbose() const;
  bool is_recovery() const { return false; }

  static int ServerRankToID(int rank) { return rank * 2 + 8; }
  static int WorkerRankToID(int rank) { return rank * 2 + 9; }
  static int IDtoRank(int id) { return id < 8 ? 0 : (id - 8) / 2; }

  // Node ids in a group (kServerGroup, kWorkerGroup + kScheduler, ...) or
  // {id} for a single node id.
  const std::vector<int>& GetNodeIDs(int node_id) const;

  // ps-lite's key ranges: [0, kMaxKey) cut evenly, one range per server
  // rank. A custom slicer (KVWorker::set_slicer) receives these and its i-th
  // slice goes to server rank i, as in ps-lite. Ember's default slicer does
  // not use them: it routes by the consistent-hash key ring.
  const std::vector<Range>& GetServerKeyRanges();

  // Ember: the node runtime behind this postoffice.
  Node* node();

 private:
  // ps/membership.h: makes the node if need be.
  friend void SetMembershipCallback(
      std::function<void(const MembershipChange& change)> callback);

  explicit Postoffice(std::unique_ptr<Node> node);
  Status EnsureNode();
  // The settings: the node's, or before there is a node, the environment's
  // (and flags'), read once into options_. mu_ held.
  const Options& SettingsLocked() const;

  mutable std::mutex mu_;
  std::unique_ptr<Node> node_;  // Created at the first Start of Get().
  // Read at the first need when there is no node yet; the node is made from
  // them, so each setting is read once. options_status_: why they could not
  // be read (Start fails with it; the queries use the defaults meanwhile).
  mutable std::unique_ptr<Options> options_;
  mutable Status options_status_;
  std::vector<Range> server_key_ranges_;
  mutable std::unordered_map<int, std::vector<int>> node_ids_;
};

// Logs `status` with `what` and ends the process with exit status 1. Used by
// ps-lite's void-returning calls when a peer dies, so the process fails fast
// instead of hanging.
[[noreturn]] void FailStop(const char* what, const Status& status);

}  // namespace ps

#endif  // PS_INTERNAL_POSTOFFICE_H_
