// InProcCluster: a scheduler, servers and workers in one process, joined by
// an InProcNetwork, with heartbeats driven by a FakeClock. No ports, no
// sleeps.
#ifndef PS_TESTUTIL_INPROC_CLUSTER_H_
#define PS_TESTUTIL_INPROC_CLUSTER_H_

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "node/node.h"
#include "ps/ps.h"
#include "testutil/fake_clock.h"
#include "transport/fault_van.h"
#include "transport/inproc_van.h"

namespace ps {

// Blocks until `done()` holds. The condition is a fact the test waits for
// (a message handled on another thread), not a guess about timing; the
// deadline only turns a bug into a failure instead of a hang.
inline bool WaitUntil(
    const std::function<bool()>& done,
    std::chrono::seconds deadline = std::chrono::seconds(30)) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

class InProcCluster {
 public:
  static constexpr int kTimeoutMs = 1000;

  // `tweak`, if given, edits every node's options (its role is set).
  // `faults`, if given, wraps every node's van in a FaultVan of that
  // injector (borrowed: it must outlive the cluster).
  InProcCluster(int num_servers, int num_workers,
                const std::function<void(Options*)>& tweak = nullptr,
                FaultInjector* faults = nullptr)
      : faults_(faults) {
    Options base;
    base.scheduler_host = "scheduler";
    base.scheduler_port = 1;
    base.node_host = "node";
    base.num_servers = num_servers;
    base.num_workers = num_workers;
    base.heartbeat_interval_ms = 0;  // The test drives liveness.
    base.heartbeat_timeout_ms = kTimeoutMs;
    base.start_timeout_ms = 30000;
    base.finalize_timeout_ms = 30000;
    base_ = base;
    tweak_ = tweak;
    auto make = [&](Options o) {
      if (tweak) tweak(&o);
      return Make(o);
    };
    Options s = base;
    s.role = Role::kScheduler;
    scheduler_ = make(s);
    for (int i = 0; i < num_servers; ++i) {
      Options o = base;
      o.role = Role::kServer;
      o.rank_hint = i;
      servers_.push_back(make(o));
    }
    for (int i = 0; i < num_workers; ++i) {
      Options o = base;
      o.role = Role::kWorker;
      o.rank_hint = i;
      workers_.push_back(make(o));
    }
  }

  ~InProcCluster() {
    // Nodes stop in their destructors; apps must be gone by now.
    workers_.clear();
    servers_.clear();
    scheduler_.reset();
  }

  // A server made after the cluster formed, with the cluster's options
  // (the constructor's `tweak` applied), `join` as EMBER_JOIN and the next
  // rank hint; `tweak`, if given, edits them last. Not started: the test
  // starts it (Postoffice::StartStatus). It is one of all() from now on.
  Postoffice* AddServer(bool join,
                        const std::function<void(Options*)>& tweak = nullptr) {
    Options o = base_;
    o.role = Role::kServer;
    o.rank_hint = static_cast<int>(servers_.size());
    if (tweak_) tweak_(&o);
    o.join = join;
    if (tweak) tweak(&o);
    std::unique_ptr<Postoffice> po = Make(o);
    std::lock_guard<std::mutex> lock(nodes_mu_);
    servers_.push_back(std::move(po));
    return servers_.back().get();
  }

  // A worker made after the cluster formed (elastic workers), with the
  // cluster's options: `join` as EMBER_JOIN, `rank` as EMBER_WORKER_RANK
  // (-1: none); `tweak`, if given, edits them last. Not started. It is one
  // of all() from now on.
  Postoffice* AddWorker(bool join, int rank,
                        const std::function<void(Options*)>& tweak = nullptr) {
    Options o = base_;
    o.role = Role::kWorker;
    if (tweak_) tweak_(&o);
    o.join = join;
    o.worker_rank = rank;
    o.rank_hint = rank;
    if (tweak) tweak(&o);
    std::unique_ptr<Postoffice> po = Make(o);
    std::lock_guard<std::mutex> lock(nodes_mu_);
    workers_.push_back(std::move(po));
    return workers_.back().get();
  }

  // Whether `p` was killed (KillByHeartbeat).
  bool killed(Postoffice* p) const { return killed_.count(p) > 0; }

  // Kills the scheduler as kill -9 would: its process is gone (its address
  // drops what is sent to it) and nothing it would have sent goes out.
  // scheduler() is null until RestartScheduler.
  void KillScheduler() { scheduler_.reset(); }

  // A scheduler started on the killed one's address (what is sent to it
  // from now on waits for it to bind) with the cluster's
  // options (the constructor's `tweak` applied) and scheduler_restart set;
  // `tweak`, if given, edits them last. Not started: the test starts it
  // (Postoffice::StartStatus, which returns once a member re-registered).
  Postoffice* RestartScheduler(
      const std::function<void(Options*)>& tweak = nullptr) {
    Options o = base_;
    o.role = Role::kScheduler;
    if (tweak_) tweak_(&o);
    o.scheduler_restart = true;
    if (tweak) tweak(&o);
    network_.Revive("scheduler:1");
    scheduler_ = Make(o);
    return scheduler_.get();
  }

  // Starts every node (with the start barrier) and checks it worked.
  void Start() {
    ForAll([](Postoffice* p) { return p->StartStatus(0, true); });
  }

  // Finalizes every node (with the final barrier) and checks it worked.
  void Finalize() {
    ForAll([](Postoffice* p) { return p->FinalizeStatus(0, true); });
  }

  Postoffice* scheduler() { return scheduler_.get(); }
  Postoffice* server(int rank) {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    return servers_[rank].get();
  }
  Postoffice* worker(int rank) {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    return workers_[rank].get();
  }
  // Safe beside AddServer and AddWorker on other threads.
  std::vector<Postoffice*> all() {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    std::vector<Postoffice*> v{scheduler_.get()};
    for (auto& s : servers_) v.push_back(s.get());
    for (auto& w : workers_) v.push_back(w.get());
    return v;
  }

  // Declares `victim` dead the way the scheduler would after missed
  // heartbeats: time passes, every other member beats (and we wait for the
  // echo, so the scheduler has recorded it), then the scheduler checks.
  // Nodes killed before stay dead; nodes still waiting to join do not beat.
  void KillByHeartbeat(Postoffice* victim) {
    network_.Sever(Address(victim));
    killed_.insert(victim);
    clock_.Advance(kTimeoutMs + 1);
    for (Postoffice* p : all()) {
      if (killed_.count(p) || p == scheduler() || !p->node()->ready()) {
        continue;
      }
      Beat(p);
    }
    scheduler()->node()->CheckLiveness();
  }

  // `p` beats and we wait for the scheduler's echo, so the scheduler and `p`
  // both know the other is alive at the current fake time.
  void Beat(Postoffice* p) {
    p->node()->SendHeartbeat();
    int64_t now = clock_.NowMs();
    ASSERT_TRUE(
        WaitUntil([&] { return p->node()->last_scheduler_echo_ms() == now; }));
  }

  // The host:port of node `id`, from the scheduler's table.
  std::string AddressOf(int id) { return scheduler()->node()->Address(id); }

  FakeClock* clock() { return &clock_; }
  InProcNetwork* network() { return &network_; }

 private:
  std::unique_ptr<Postoffice> Make(const Options& o) {
    std::unique_ptr<Van> van = std::make_unique<InProcVan>(&network_);
    if (faults_) van = std::make_unique<FaultVan>(std::move(van), faults_);
    return Postoffice::Create(
        std::make_unique<Node>(o, std::move(van), &clock_));
  }

  std::string Address(Postoffice* p) {
    int id = p->node()->my_id();
    return p == scheduler() ? "scheduler:1" : AddressOf(id);
  }

  void ForAll(const std::function<Status(Postoffice*)>& fn) {
    std::vector<Postoffice*> nodes = all();
    std::vector<Status> results(nodes.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = fn(nodes[i]); });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < nodes.size(); ++i) {
      ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
    }
  }

  FaultInjector* const faults_;
  Options base_;
  std::function<void(Options*)> tweak_;
  FakeClock clock_;
  InProcNetwork network_;  // Outlives the nodes (declared first).
  std::unique_ptr<Postoffice> scheduler_;
  std::mutex nodes_mu_;  // servers_ and workers_ as they grow
  std::vector<std::unique_ptr<Postoffice>> servers_;
  std::vector<std::unique_ptr<Postoffice>> workers_;
  std::set<Postoffice*> killed_;
};

// Finalizes `nodes` (with the final barrier), all at once, each on a thread
// of its own, and expects each to succeed: the end of a test whose nodes
// are not the cluster's own set (a node restarted or added).
inline void FinalizeAll(const std::vector<Postoffice*>& nodes) {
  std::vector<Status> results(nodes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = nodes[i]->FinalizeStatus(0, true); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
  }
}

}  // namespace ps

#endif  // PS_TESTUTIL_INPROC_CLUSTER_H_
