// Seeded fault schedules over an in-process cluster.
//
// RunSchedule(seed, schedule, workload) builds a scheduler, servers and
// workers over InProcVans wrapped in FaultVans sharing one FaultInjector
// seeded with `seed`, starts them fault-free, then lets every worker push
// +1 to the same keys (spread over every server) `iterations` times, a
// `window` of requests in flight, while the injector applies the
// schedule's FaultPlan and, at a point of the run, kills a server or cuts
// it off from the scheduler. Heartbeats run on a FakeClock the harness
// drives: no sleeps. It returns an Outcome: what the workers saw, what the
// servers applied, what was injected, and `violations`, the invariants
// that failed (empty: the schedule passed).
//
// Invariants checked (they hold today, and the replication work must keep
// them while it turns the recorded gaps into guarantees):
// - no request hangs: each completes, or fails with kUnavailable naming a
//   server that was killed, cut off, or declared dead because a message of
//   the request was lost (Ember does not resend yet: a dropped request or
//   response is never answered, see Outcome::lost);
// - a node that is killed or cut off from the scheduler is declared dead
//   within one heartbeat timeout of fake time;
// - every acknowledged push was applied by every live server, and every
//   stored value is exactly the number of pushes its server applied;
// - a server applies a push more than once only if the network duplicated
//   it (Outcome::duplicate_applications: Ember has no dedup yet);
// - the cluster still finalizes when nobody died.
//
// What is recorded rather than required (today's gaps, issue 22): lost
// requests, pushes applied twice, pushes applied whose ack never came.
//
// Replay: a failing seed replays with the same decisions for the same
// messages (see transport/fault_van.h for what depends on thread
// interleaving: when held messages are released).
#ifndef PS_TESTUTIL_FAULT_SCHEDULE_H_
#define PS_TESTUTIL_FAULT_SCHEDULE_H_

#include <glog/logging.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "node/node.h"
#include "ps/ps.h"
#include "testutil/fake_clock.h"
#include "testutil/inproc_cluster.h"
#include "transport/fault_van.h"
#include "transport/inproc_van.h"
#include "util/mutex.h"

namespace ps {

struct Workload {
  int servers = 3;
  int workers = 2;
  int iterations = 6;  // pushes per worker
  int keys = 48;       // keys per push, spread evenly over the key space
  int window = 2;      // pushes in flight per worker
  // After each push completes, the worker pulls every key and checks the
  // values against what was acknowledged before and issued since.
  bool pull_after_push = false;
  // Every this many pushes (0: never) a worker drains its window and
  // enters a barrier of the workers.
  int barrier_every = 0;
  FailurePolicy failure_policy = FailurePolicy::kContinue;
  // Copies of each server's data (EMBER_REPLICAS). With copies a killed
  // server's ranges fail over: every push must then complete, and the
  // final pull of every key must see each push exactly once; the plan
  // must keep links in order (FaultPlan::fifo) and drop nothing, as the
  // copies rely on a connection's order and on a dead peer being detected.
  int replicas = 0;
  // Keys not in equal steps (key i moved by i % 3), so that each server's
  // part is no key run and, repeated, goes as a signature (key caching),
  // and so do the copies of it.
  bool uneven_keys = false;
};

struct Schedule {
  // The drawn faults, from the end of the start barrier (from the first
  // JOIN if `from_start`) to the end of the workload.
  FaultPlan plan;
  bool from_start = false;
  // A server rank killed (FaultInjector::Kill) once worker 0 has completed
  // `after` pushes; -1: none. Detected through heartbeats.
  int kill_server = -1;
  // A server rank cut off from the scheduler (both ways) at the same
  // point; -1: none. Its workers can still reach it.
  int partition_server = -1;
  int after = 0;

  std::string DebugString() const {
    std::ostringstream out;
    out << plan.DebugString();
    if (from_start) out << " from_start";
    if (kill_server >= 0) out << " kill=server" << kill_server;
    if (partition_server >= 0) {
      out << " partition=scheduler|server" << partition_server;
    }
    if (kill_server >= 0 || partition_server >= 0) out << " after=" << after;
    return out.str();
  }
};

struct Outcome {
  uint64_t seed = 0;
  std::string schedule;
  int requests = 0;  // pushes the workers issued
  int pulls = 0;     // pulls that completed OK (pull_after_push)
  int barriers = 0;  // barriers that completed OK (barrier_every)
  int ok = 0;
  int failed = 0;
  // Requests that could never complete because one of their messages was
  // dropped (no resend today); ended by declaring the server that owed
  // the answer dead.
  int lost = 0;
  // Servers declared dead by the scheduler (ids).
  std::set<int> declared_dead;
  // Pushes a server applied again (same sender and timestamp).
  int64_t duplicate_applications = 0;
  // Push requests the injector duplicated.
  int64_t duplicated_pushes = 0;
  // Pushes a server applied whose request did not complete OK.
  int64_t unacknowledged_applications = 0;
  // Distinct failure messages the workers saw.
  std::set<std::string> failures;
  FaultCounters faults;
  // The first injected faults (FaultEvent::DebugString), for a failure's
  // report.
  std::vector<std::string> fault_log;
  std::vector<std::string> violations;
  // Wall time of the run, for the figures.
  double seconds = 0;

  bool passed() const { return violations.empty(); }
  std::string Describe() const {
    std::ostringstream out;
    out << "seed " << seed << " [" << schedule << "]: " << requests
        << " pushes, " << pulls << " pulls, " << barriers << " barriers, " << ok
        << " ok, " << failed << " failed, " << lost << " lost; applied twice "
        << duplicate_applications << " (of " << duplicated_pushes
        << " duplicated), unacknowledged " << unacknowledged_applications
        << "; injected: dropped " << faults.dropped << " duplicated "
        << faults.duplicated << " delayed " << faults.delayed << " reordered "
        << faults.reordered << " partitioned " << faults.partitioned
        << " killed " << faults.killed;
    for (const std::string& f : failures) out << "\n  failure: " << f;
    for (const std::string& v : violations) out << "\n  VIOLATION: " << v;
    if (!violations.empty()) {
      for (const std::string& e : fault_log) out << "\n  fault: " << e;
    }
    return out.str();
  }
};

// The nodes of one run, each over a FaultVan (like InProcCluster, which
// builds bare InProcVans).
class FaultCluster {
 public:
  static constexpr int kTimeoutMs = 1000;

  FaultCluster(const Workload& w, FaultInjector* injector)
      : injector_(injector) {
    Options base;
    base.scheduler_host = "scheduler";
    base.scheduler_port = 1;
    base.node_host = "node";
    base.num_servers = w.servers;
    base.num_workers = w.workers;
    base.heartbeat_interval_ms = 0;  // The harness drives liveness.
    base.heartbeat_timeout_ms = kTimeoutMs;
    // Real time (Node's start and finalize waits are not on the clock):
    // short enough that a start a fault breaks fails within seconds.
    base.start_timeout_ms = 3000;
    base.finalize_timeout_ms = 3000;
    base.failure_policy = w.failure_policy;
    base.replicas = w.replicas;
    Options s = base;
    s.role = Role::kScheduler;
    nodes_.push_back(Make(s));
    for (int i = 0; i < w.servers; ++i) {
      Options o = base;
      o.role = Role::kServer;
      o.rank_hint = i;
      nodes_.push_back(Make(o));
    }
    for (int i = 0; i < w.workers; ++i) {
      Options o = base;
      o.role = Role::kWorker;
      o.rank_hint = i;
      nodes_.push_back(Make(o));
    }
    num_servers_ = w.servers;
  }

  ~FaultCluster() {
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) it->reset();
  }

  // Runs `fn` on every node at once; the first failure, if any. If some
  // node has not returned within `deadline`, the scheduler is killed and
  // every node is told so (which ends every wait), and the result is
  // kDeadlineExceeded naming the nodes that hung.
  Status ForAll(const std::function<Status(Postoffice*)>& fn,
                std::chrono::seconds deadline = std::chrono::seconds(10)) {
    std::vector<Status> results(nodes_.size());
    std::vector<std::atomic<bool>> finished(nodes_.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      threads.emplace_back([&, i] {
        results[i] = fn(nodes_[i].get());
        finished[i] = true;
      });
    }
    auto all_finished = [&] {
      for (auto& f : finished) {
        if (!f) return false;
      }
      return true;
    };
    auto hanging = [&] {
      std::string list;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (!finished[i]) list += " " + std::to_string(i);
      }
      return list;
    };
    std::string hung;
    if (!WaitUntil([&] { return all_finished() || !Pump(); }, deadline) ||
        !all_finished()) {
      hung = hanging();
      KillScheduler();
      if (!WaitUntil(all_finished, std::chrono::seconds(10))) {
        LOG(FATAL) << "fault schedule: nodes" << hanging()
                   << " still hang after the scheduler was declared dead";
      }
    }
    for (auto& t : threads) t.join();
    if (!hung.empty()) {
      return Status(Status::Code::kDeadlineExceeded,
                    "nodes (0 scheduler, then servers, then workers)" + hung +
                        " had not returned after the deadline");
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!results[i].ok()) {
        return Status(results[i].code(), "node " + std::to_string(i) + ": " +
                                             results[i].message());
      }
    }
    return Status::OK();
  }

  // Ends every wait: the scheduler dies, a heartbeat timeout passes and
  // every node checks liveness.
  void KillScheduler() {
    injector_->Kill(Node::kSchedulerId);
    clock_.Advance(kTimeoutMs + 1);
    for (Postoffice* p : all()) p->node()->CheckLiveness();
  }

  // Call while waiting for the nodes: when no message has passed since the
  // last call, releases one held message. False once nothing is held and
  // nothing has been held or passed for 2 s (the nodes are stuck: they
  // wait for something no fault will release).
  bool Pump() {
    const auto now = std::chrono::steady_clock::now();
    const uint64_t messages = injector_->counters().messages;
    if (messages != last_messages_) {
      last_messages_ = messages;
      last_progress_ = now;
      return true;
    }
    for (int i = 0; i < 50; ++i) std::this_thread::yield();
    if (injector_->counters().messages != messages || injector_->Step()) {
      last_progress_ = now;
      return true;
    }
    return now - last_progress_ < std::chrono::seconds(2);
  }

  Postoffice* scheduler() { return nodes_[0].get(); }
  Postoffice* server(int rank) { return nodes_[1 + rank].get(); }
  Postoffice* worker(int rank) { return nodes_[1 + num_servers_ + rank].get(); }
  std::vector<Postoffice*> all() {
    std::vector<Postoffice*> v;
    for (auto& n : nodes_) v.push_back(n.get());
    return v;
  }
  FakeClock* clock() { return &clock_; }

  // One heartbeat timeout passes: every node but those in `silent` beats
  // (waiting, bounded, for the scheduler's echo; an echo can be lost to
  // the plan), then the scheduler and every node check liveness.
  void Detect(const std::set<int>& silent) {
    clock_.Advance(kTimeoutMs + 1);
    const int64_t now = clock_.NowMs();
    for (Postoffice* p : all()) {
      if (p == scheduler() || silent.count(p->node()->my_id())) continue;
      p->node()->SendHeartbeat();
      WaitUntil(
          [&] {
            injector_->Flush();
            return p->node()->last_scheduler_echo_ms() == now ||
                   injector_->IsKilled(p->node()->my_id());
          },
          std::chrono::seconds(5));
    }
    scheduler()->node()->CheckLiveness();
    for (Postoffice* p : all()) {
      if (p != scheduler()) p->node()->CheckLiveness();
    }
  }

 private:
  std::unique_ptr<Postoffice> Make(const Options& o) {
    return Postoffice::Create(std::make_unique<Node>(
        o,
        std::make_unique<FaultVan>(std::make_unique<InProcVan>(&network_),
                                   injector_),
        &clock_));
  }

  FaultInjector* const injector_;
  FakeClock clock_;
  InProcNetwork network_;  // Outlives the nodes (declared first).
  std::vector<std::unique_ptr<Postoffice>> nodes_;
  int num_servers_ = 0;
  uint64_t last_messages_ = 0;
  std::chrono::steady_clock::time_point last_progress_ =
      std::chrono::steady_clock::now();
};

namespace fault_schedule_internal {

// A server's store, and which pushes it applied (sender, timestamp).
struct ServerState {
  Mutex mu;
  std::map<Key, float> store GUARDED_BY(mu);
  std::map<std::pair<int, int>, int> applied GUARDED_BY(mu);
  int64_t applications GUARDED_BY(mu) = 0;
};

struct WorkerState {
  std::atomic<int> waiting_on{-1};  // the timestamp it waits for
  std::atomic<bool> in_barrier{false};
  std::atomic<bool> done{false};
  std::atomic<int> completed{0};
  Mutex mu;
  std::vector<std::pair<int, Status>> results GUARDED_BY(mu);
  // Pulls and barriers: what went wrong with them (a violation each).
  std::vector<std::string> problems GUARDED_BY(mu);
  int pulls GUARDED_BY(mu) = 0;
  int barriers GUARDED_BY(mu) = 0;
};

}  // namespace fault_schedule_internal

inline Outcome RunSchedule(uint64_t seed, const Schedule& schedule,
                           const Workload& workload) {
  using fault_schedule_internal::ServerState;
  using fault_schedule_internal::WorkerState;
  const auto began = std::chrono::steady_clock::now();
  Outcome out;
  out.seed = seed;
  out.schedule = schedule.DebugString();
  auto violate = [&out](const std::string& v) { out.violations.push_back(v); };

  FaultInjector injector(seed);
  if (schedule.from_start) {
    Status planned = injector.set_plan(schedule.plan);
    if (!planned.ok()) {
      violate(planned.ToString());
      return out;
    }
  }
  auto cluster = std::make_unique<FaultCluster>(workload, &injector);
  Status started = cluster->ForAll(
      [](Postoffice* p) { return p->StartStatus(0, /*do_barrier=*/true); });
  if (!started.ok()) {
    violate("the cluster did not start: " + started.ToString());
    out.faults = injector.counters();
    for (const FaultEvent& e : injector.events()) {
      if (out.fault_log.size() < 40) out.fault_log.push_back(e.DebugString());
    }
    return out;
  }

  // Servers: a summing store that records what it applied.
  std::vector<std::unique_ptr<ServerState>> states;
  std::vector<std::unique_ptr<KVServer<float>>> servers;
  for (int r = 0; r < workload.servers; ++r) {
    states.push_back(std::make_unique<ServerState>());
    ServerState* st = states.back().get();
    servers.push_back(std::make_unique<KVServer<float>>(0, cluster->server(r)));
    servers.back()->set_request_handle(
        [st](const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
          MutexLock lock(&st->mu);
          if (m.push) {
            for (size_t i = 0; i < d.keys.size(); ++i) {
              st->store[d.keys[i]] += d.vals[i];
            }
            st->applied[{m.sender, m.timestamp}]++;
            st->applications++;
            s->Response(m);
            return;
          }
          KVPairs<float> res;
          res.keys = d.keys;
          res.vals = SArray<float>(d.keys.size());
          for (size_t i = 0; i < d.keys.size(); ++i) {
            res.vals[i] = st->store[d.keys[i]];
          }
          s->Response(m, res);
        });
  }
  std::vector<std::unique_ptr<KVWorker<float>>> workers;
  for (int r = 0; r < workload.workers; ++r) {
    workers.push_back(
        std::make_unique<KVWorker<float>>(0, 0, cluster->worker(r)));
  }
  std::vector<Key> keys(workload.keys);
  const Key step = kMaxKey / static_cast<Key>(workload.keys);
  for (int i = 0; i < workload.keys; ++i) {
    keys[i] = step * i + step / 2 + (workload.uneven_keys ? i % 3 : 0);
  }
  const std::vector<float> ones(keys.size(), 1.0f);
  const std::vector<Range> ranges = cluster->worker(0)->GetServerKeyRanges();
  auto owner = [&ranges](Key k) {
    for (size_t r = 0; r < ranges.size(); ++r) {
      if (k >= ranges[r].begin() && k < ranges[r].end()) {
        return static_cast<int>(r);
      }
    }
    return static_cast<int>(ranges.size()) - 1;
  };

  Status planned = injector.set_plan(schedule.plan);
  if (!planned.ok()) {
    violate(planned.ToString());
    return out;
  }

  // The event: worker 0 reaches it, then waits until the driver has
  // applied it, so it falls at the same point of worker 0's run.
  const bool has_event =
      schedule.kill_server >= 0 || schedule.partition_server >= 0;
  std::atomic<bool> at_event{false};
  std::atomic<bool> event_done{!has_event};

  // Pushes acknowledged OK and issued, over all workers: the bounds of
  // what a pull may see.
  std::atomic<int64_t> acked{0};
  std::atomic<int64_t> issued{0};
  // Whether `s` names a server, for failures expected from the schedule
  // (checked precisely at the end).
  auto names_a_server = [](const Status& s) {
    return s.code() == Status::Code::kUnavailable &&
           s.message().find("server ") != std::string::npos;
  };

  std::vector<std::unique_ptr<WorkerState>> wstates;
  std::vector<std::thread> threads;
  for (int w = 0; w < workload.workers; ++w) {
    wstates.push_back(std::make_unique<WorkerState>());
  }
  for (int w = 0; w < workload.workers; ++w) {
    threads.emplace_back([&, w] {
      WorkerState* ws = wstates[w].get();
      KVWorker<float>* kv = workers[w].get();
      std::deque<int> in_flight;
      auto wait_oldest = [&] {
        const int ts = in_flight.front();
        in_flight.pop_front();
        ws->waiting_on = ts;
        Status s = kv->WaitStatus(ts);
        ws->waiting_on = -1;
        if (s.ok()) acked++;
        {
          MutexLock lock(&ws->mu);
          ws->results.emplace_back(ts, s);
        }
        ws->completed++;
        if (!workload.pull_after_push || !s.ok()) return;
        const int64_t floor = acked;
        std::vector<float> vals;
        const int pts = kv->Pull(keys, &vals);
        ws->waiting_on = pts;
        Status p = kv->WaitStatus(pts);
        ws->waiting_on = -1;
        const int64_t ceiling =
            issued + static_cast<int64_t>(injector.counters().duplicated);
        MutexLock lock(&ws->mu);
        if (!p.ok()) {
          if (!names_a_server(p)) {
            ws->problems.push_back("a pull failed: " + p.ToString());
          }
          return;
        }
        ws->pulls++;
        for (size_t i = 0; i < vals.size(); ++i) {
          if (vals[i] < floor || vals[i] > ceiling) {
            ws->problems.push_back(
                "a pull saw " + std::to_string(vals[i]) + " at key " +
                std::to_string(keys[i]) + ", outside [" +
                std::to_string(floor) + " acknowledged before it, " +
                std::to_string(ceiling) + " issued and duplicated]");
            break;
          }
        }
      };
      auto barrier = [&] {
        while (!in_flight.empty()) wait_oldest();
        ws->in_barrier = true;
        Status b = cluster->worker(w)->BarrierStatus(0, kWorkerGroup);
        ws->in_barrier = false;
        MutexLock lock(&ws->mu);
        if (b.ok()) {
          ws->barriers++;
        } else {
          // A barrier of the workers does not wait for servers.
          ws->problems.push_back("a barrier of the workers failed: " +
                                 b.ToString());
        }
      };
      for (int i = 0; i < workload.iterations; ++i) {
        if (w == 0 && !event_done && ws->completed == schedule.after) {
          while (!in_flight.empty()) wait_oldest();
          at_event = true;
          while (!event_done) std::this_thread::yield();
        }
        issued++;
        in_flight.push_back(kv->Push(keys, ones));
        if (static_cast<int>(in_flight.size()) >= workload.window) {
          wait_oldest();
        }
        if (workload.barrier_every > 0 &&
            (i + 1) % workload.barrier_every == 0) {
          barrier();
        }
      }
      while (!in_flight.empty()) wait_oldest();
      if (w == 0 && has_event && !event_done) {
        at_event = true;
        while (!event_done) std::this_thread::yield();
      }
      ws->done = true;
    });
  }

  // Which requests a dropped message made unanswerable, and who owes them.
  // `drops_only`: lost to the plan's drops, not to a kill or partition.
  auto lost_owers = [&](int worker_id, int ts, std::set<int>* owers,
                        bool drops_only = false) {
    bool lost = false;
    for (const FaultEvent& e : injector.events()) {
      const Meta& m = e.meta;
      if (m.control != Control::kNone || m.timestamp != ts) continue;
      if (e.kind == FaultEvent::Kind::kDuplicate ||
          e.kind == FaultEvent::Kind::kDelay ||
          e.kind == FaultEvent::Kind::kReorder) {
        continue;
      }
      if (drops_only && e.kind != FaultEvent::Kind::kDrop) continue;
      if (m.request && m.sender == worker_id) {
        owers->insert(m.recipient);
        lost = true;
      } else if (!m.request && m.recipient == worker_id) {
        owers->insert(m.sender);
        lost = true;
      }
    }
    return lost;
  };

  std::set<int> silenced;  // killed or cut off: they do not beat
  std::set<int> ended;     // declared dead to end lost requests
  std::set<int> expected_dead;
  auto all_done = [&] {
    for (auto& ws : wstates) {
      if (!ws->done) return false;
    }
    return true;
  };
  auto progress = [&] {
    uint64_t n = injector.counters().messages;
    for (auto& ws : wstates) n += ws->completed;
    return n;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool hung = false;
  while (!all_done()) {
    if (at_event && !event_done) {
      if (schedule.kill_server >= 0) {
        const int id = Node::ServerRankToId(schedule.kill_server);
        injector.Kill(id);
        silenced.insert(id);
        expected_dead.insert(id);
      }
      if (schedule.partition_server >= 0) {
        const int id = Node::ServerRankToId(schedule.partition_server);
        injector.Partition({Node::kSchedulerId}, {id});
        silenced.insert(id);
        expected_dead.insert(id);
      }
      cluster->Detect(silenced);
      event_done = true;
      continue;
    }
    // Every worker still running waits for a request that cannot be
    // answered: end those requests by declaring their owers dead.
    // (A worker in a barrier waits for the others.)
    std::set<int> owers;
    bool stuck = injector.held() == 0;
    for (int w = 0; w < workload.workers && stuck; ++w) {
      if (wstates[w]->done || wstates[w]->in_barrier) continue;
      if (w == 0 && at_event && !event_done) {
        stuck = false;
        break;
      }
      const int ts = wstates[w]->waiting_on;
      stuck = ts >= 0 && lost_owers(Node::WorkerRankToId(w), ts, &owers);
    }
    if (stuck && !owers.empty()) {
      for (int id : owers) {
        if (ended.count(id) || silenced.count(id)) continue;
        ended.insert(id);
        injector.Kill(id);
        silenced.insert(id);
      }
      cluster->Detect(silenced);
      continue;
    }
    const uint64_t before = progress();
    for (int i = 0; i < 50; ++i) std::this_thread::yield();
    if (progress() == before) {
      // Quiet: release one held message, and let the heartbeat timeout
      // pass for what was killed or cut off and is not declared dead yet.
      if (!injector.Step() && !silenced.empty()) cluster->Detect(silenced);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      hung = true;
      break;
    }
  }
  if (hung) {
    std::ostringstream waits;
    for (int w = 0; w < workload.workers; ++w) {
      if (wstates[w]->done) continue;
      waits << " worker " << w << " waits on ts " << wstates[w]->waiting_on;
    }
    violate("hang: requests neither completed nor failed within 20 s;" +
            waits.str() + "; held messages " + std::to_string(injector.held()));
    // End them the only way left: every server dies.
    for (int r = 0; r < workload.servers; ++r) {
      injector.Kill(Node::ServerRankToId(r));
      silenced.insert(Node::ServerRankToId(r));
    }
    cluster->Detect(silenced);
    event_done = true;
    // And the scheduler, which ends barriers too.
    if (!WaitUntil(all_done, std::chrono::seconds(2))) cluster->KillScheduler();
    if (!WaitUntil(all_done, std::chrono::seconds(10))) {
      LOG(FATAL) << "fault schedule: workers still hang after every server "
                    "was declared dead; "
                 << out.Describe();
    }
  }
  for (auto& t : threads) t.join();
  Status unplanned = injector.set_plan(FaultPlan());  // valid: cannot fail
  (void)unplanned;
  injector.Flush();
  out.faults = injector.counters();
  for (const FaultEvent& e : injector.events()) {
    if (out.fault_log.size() < 40) out.fault_log.push_back(e.DebugString());
  }

  for (int r = 0; r < workload.servers; ++r) {
    const int id = Node::ServerRankToId(r);
    if (!cluster->scheduler()->node()->IsAlive(id))
      out.declared_dead.insert(id);
  }
  for (int id : expected_dead) {
    if (!out.declared_dead.count(id)) {
      violate(cluster->scheduler()->node()->Describe(id) +
              " was killed or cut off but the scheduler did not declare it "
              "dead");
    }
  }
  for (int id : out.declared_dead) {
    if (!expected_dead.count(id) && !ended.count(id)) {
      violate(cluster->scheduler()->node()->Describe(id) +
              " was declared dead though it was neither killed nor cut off");
    }
  }

  // What the workers saw.
  std::set<std::pair<int, int>> acknowledged;  // (worker id, ts)
  std::set<std::pair<int, int>> failed;
  for (int w = 0; w < workload.workers; ++w) {
    const int wid = Node::WorkerRankToId(w);
    MutexLock lock(&wstates[w]->mu);
    for (const auto& result : wstates[w]->results) {
      out.requests++;
      const Status& s = result.second;
      if (s.ok()) {
        out.ok++;
        acknowledged.insert({wid, result.first});
        continue;
      }
      out.failed++;
      failed.insert({wid, result.first});
      std::set<int> owers;
      if (lost_owers(wid, result.first, &owers, /*drops_only=*/true)) {
        out.lost++;
      }
      out.failures.insert(s.ToString());
      bool named = false;
      for (int id : out.declared_dead) {
        const std::string who = "server " + std::to_string(Node::IdToRank(id));
        named = named || s.message().find(who) != std::string::npos;
      }
      if (s.code() != Status::Code::kUnavailable || !named) {
        violate("worker " + std::to_string(w) + " ts " +
                std::to_string(result.first) +
                " failed without naming a dead server: " + s.ToString());
      }
    }
  }
  for (int w = 0; w < workload.workers; ++w) {
    MutexLock lock(&wstates[w]->mu);
    out.pulls += wstates[w]->pulls;
    out.barriers += wstates[w]->barriers;
    for (const std::string& p : wstates[w]->problems) {
      violate("worker " + std::to_string(w) + ": " + p);
    }
  }
  if (out.requests != workload.workers * workload.iterations) {
    violate("the workers saw " + std::to_string(out.requests) + " results of " +
            std::to_string(workload.workers * workload.iterations) + " pushes");
  }
  if (out.declared_dead.empty() && out.failed > 0) {
    violate("requests failed though no server was declared dead");
  }

  if (workload.replicas > 0) {
    // Every push completed, whatever died, and every key, wherever it lives
    // now, holds each push once.
    if (out.failed > 0) {
      violate(std::to_string(out.failed) + " pushes failed with " +
              std::to_string(workload.replicas) + " copies of every server");
    }
    std::vector<float> pulled;
    Status pull = workers[0]->WaitStatus(workers[0]->Pull(keys, &pulled));
    const float want =
        static_cast<float>(workload.workers * workload.iterations);
    if (!pull.ok()) {
      violate("the final pull failed: " + pull.ToString());
    } else {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (pulled[i] != want) {
          violate("key " + std::to_string(keys[i]) + " holds " +
                  std::to_string(pulled[i]) + " after " +
                  std::to_string(workload.workers * workload.iterations) +
                  " pushes");
          break;
        }
      }
    }
  }
  // What the servers applied (without copies: a server applies copies of
  // others' pushes too, and a failover moves what it owns).
  std::map<int, int64_t> duplicated_to;  // server id -> duplicated pushes
  for (const FaultEvent& e : injector.events()) {
    if (e.kind == FaultEvent::Kind::kDuplicate && e.meta.request &&
        e.meta.push && e.meta.control == Control::kNone) {
      duplicated_to[e.meta.recipient]++;
      out.duplicated_pushes++;
    }
  }
  std::vector<Key> live_keys;
  for (Key k : workload.replicas > 0 ? std::vector<Key>() : keys) {
    if (!out.declared_dead.count(Node::ServerRankToId(owner(k)))) {
      live_keys.push_back(k);
    }
  }
  // Under abort a death fails every later request of every node: nothing
  // to pull from.
  if (workload.failure_policy == FailurePolicy::kAbort &&
      !out.declared_dead.empty()) {
    live_keys.clear();
  }
  std::vector<float> pulled;
  Status pull =
      live_keys.empty()
          ? Status::OK()
          : workers[0]->WaitStatus(workers[0]->Pull(live_keys, &pulled));
  if (!pull.ok()) {
    violate("the final pull from the live servers failed: " + pull.ToString());
  }
  for (int r = 0; r < workload.servers && workload.replicas == 0; ++r) {
    const int id = Node::ServerRankToId(r);
    if (out.declared_dead.count(id)) continue;
    ServerState* st = states[r].get();
    MutexLock lock(&st->mu);
    int64_t twice = 0;
    for (const auto& a : st->applied) {
      twice += a.second - 1;
      if (!acknowledged.count(a.first)) out.unacknowledged_applications++;
    }
    out.duplicate_applications += twice;
    if (twice > duplicated_to[id]) {
      violate("server " + std::to_string(r) + " applied " +
              std::to_string(twice) + " pushes again but only " +
              std::to_string(duplicated_to[id]) + " were duplicated");
    }
    for (const auto& ack : acknowledged) {
      if (!st->applied.count(ack)) {
        violate("server " + std::to_string(r) +
                " never applied the "
                "acknowledged push ts " +
                std::to_string(ack.second) + " of node " +
                std::to_string(ack.first));
      }
    }
    if (pull.ok()) {
      for (size_t i = 0; i < live_keys.size(); ++i) {
        if (owner(live_keys[i]) != r) continue;
        if (pulled[i] != static_cast<float>(st->applications)) {
          violate("key " + std::to_string(live_keys[i]) + " of server " +
                  std::to_string(r) + " holds " + std::to_string(pulled[i]) +
                  " after " + std::to_string(st->applications) +
                  " applied pushes");
          break;
        }
      }
    }
  }

  // Teardown: the final barrier when nobody died, else none.
  workers.clear();
  if (out.declared_dead.empty() && silenced.empty()) {
    Status fin = cluster->ForAll(
        [](Postoffice* p) { return p->FinalizeStatus(0, true); });
    if (!fin.ok()) violate("finalize failed: " + fin.ToString());
  }
  servers.clear();
  cluster.reset();
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count();
  return out;
}

}  // namespace ps

#endif  // PS_TESTUTIL_FAULT_SCHEDULE_H_
