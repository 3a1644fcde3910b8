#include "node/node.h"

#include <glog/logging.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>

#include "metrics/http_server.h"
#include "metrics/progress_log.h"
#include "node/customer.h"
#include "util/erase_if.h"
#include "util/file.h"
#include "util/malloc_tuning.h"
#include "util/mutex.h"
#include "util/secret.h"
#include "util/thread_name.h"
#include "util/thread_policy.h"
#include "util/wait_log.h"

namespace ps {

namespace {

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(getpid());
}

int RoleGroup(Role role) {
  switch (role) {
    case Role::kScheduler:
      return 1;
    case Role::kServer:
      return 2;
    case Role::kWorker:
      return 4;
  }
  return 0;
}

// A fresh key, or empty if the kernel cannot make one (Start reports it).
std::string NewKeyOrEmpty() {
  StatusOr<std::string> key = NewSecret();
  if (!key.ok()) {
    LOG(ERROR) << "cannot make a key: " << key.status();
    return std::string();
  }
  return std::move(key.value());
}

// The run's key of a scheduler: a restarted one reads the key its
// predecessor wrote to EMBER_RUN_KEY_FILE (docs/security.md), any other
// makes a new one. Empty, with *error set, if neither works (Start fails
// with it).
std::string SchedulerRunKey(const Options& options, Status* error) {
  if (!options.scheduler_restart) return NewKeyOrEmpty();
  StatusOr<std::string> key = ReadSecretFile(options.run_key_file);
  if (!key.ok()) {
    *error = Status(key.status().code(),
                    "EMBER_SCHEDULER_RESTART=1: cannot take the run's key "
                    "from EMBER_RUN_KEY_FILE: " +
                        key.status().message());
    return std::string();
  }
  return std::move(key.value());
}

// Writes the port atomically (a launcher polls for the file).
Status WritePortFile(const std::string& path, int port) {
  Status s = WriteStringToFileAtomically(path, std::to_string(port) + "\n");
  if (s.ok()) return s;
  return Status(s.code(), "cannot write EMBER_PORT_FILE: " + s.message());
}

// Large received messages (ZeroMQ mallocs each one) come from malloc's heap
// and are reused (util/malloc_tuning.h). Process-wide; applied once.
void TuneMalloc(int keep_mb) {
  static std::once_flag once;
  std::call_once(once, [keep_mb] {
    if (keep_mb <= 0) return;
    const bool ok = TuneMallocForLargeMessages(keep_mb);
    VLOG(1) << "malloc keeps up to " << keep_mb << " MiB of freed memory"
            << (ok ? "" : " (not applied: this malloc refused)");
  });
}

// SIGTERM on a server asks to leave the running cluster (docs/replication.md,
// "Leaving"): the handler only sets a flag, which the heartbeat thread reads
// at its next beat. SA_RESETHAND: a second SIGTERM ends the process at once,
// as it would have without the handler. Process-wide; installed once, and
// only over the default action (never over a handler of the program's).
std::atomic<bool> leave_signalled{false};

void OnLeaveSignal(int) { leave_signalled.store(true); }

void InstallLeaveOnSigterm() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old;
    if (sigaction(SIGTERM, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) {
      LOG(INFO) << "SIGTERM has a handler already: it does not ask this "
                   "server to leave the cluster";
      return;
    }
    struct sigaction act;
    std::memset(&act, 0, sizeof(act));
    act.sa_handler = OnLeaveSignal;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESETHAND | SA_RESTART;
    if (sigaction(SIGTERM, &act, nullptr) != 0) {
      LOG(WARNING) << "cannot handle SIGTERM: it ends this server at once";
    }
  });
}

bool LeaveSignalled() { return leave_signalled.exchange(false); }

// Hands `msg` to `scheduler` if it is one of the control messages addressed
// to the scheduler's role (JOIN, a BARRIER request, HEARTBEAT, LEAVE);
// false, leaving it to the node, if it is not.
bool HandOverToScheduler(Scheduler* scheduler, const Message& msg) {
  switch (msg.meta.control) {
    case Control::kJoin:
      scheduler->HandleJoin(msg);
      return true;
    case Control::kBarrier:
      if (!msg.meta.request) return false;  // A release, for the node.
      scheduler->HandleBarrierRequest(msg);
      return true;
    case Control::kHeartbeat:
      scheduler->HandleHeartbeat(msg);
      return true;
    case Control::kLeave:
      scheduler->HandleLeave(msg);
      return true;
    case Control::kReplicaReady:
      scheduler->HandleReplicaReady(msg);
      return true;
    case Control::kHandoverDone:
      scheduler->HandleHandoverDone(msg);
      return true;
    case Control::kRejoin:
      scheduler->HandleRejoin(msg);
      return true;
    case Control::kLeaveRequest:
      if (!msg.meta.request) return false;  // A refusal, for the node.
      scheduler->HandleLeaveRequest(msg);
      return true;
    default:
      return false;
  }
}

}  // namespace

Node::Node(Options options, std::unique_ptr<Van> van, const Clock* clock)
    : options_(std::move(options)),
      van_(std::move(van)),
      clock_(clock),
      incarnation_(NewIncarnation()),
      process_key_(NewKeyOrEmpty()),
      process_auth_(ToKey128(process_key_)),
      scheduler_(options_.role == Role::kScheduler
                     ? std::make_unique<Scheduler>(
                           options_,
                           SchedulerRunKey(options_, &run_key_status_),
                           van_.get(), clock_, &counters_,
                           static_cast<SchedulerHost*>(this))
                     : nullptr) {
  if (scheduler_) {
    MutexLock lock(&mu_);
    run_key_ = scheduler_->run_key();
    run_auth_ = ToKey128(run_key_);
  }
}

Node::~Node() {
  StopMetrics();
  StopThreads();
  {
    MutexLock lock(&cb_mu_);
    cb_stop_ = true;
  }
  cb_cv_.notify_all();
  if (cb_thread_.joinable()) cb_thread_.join();
  van_->Stop();
}

Status Node::Start(int customer_id, bool do_barrier) {
  PS_RETURN_IF_ERROR(options_.Validate());
  {
    MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(run_key_status_);
    if (process_key_.empty() || (scheduler_ && run_key_.empty())) {
      return Status::Internal(
          "cannot make this node's keys (getrandom failed)");
    }
  }
  PS_RETURN_IF_ERROR(WriteRunKeyFile());
  PS_RETURN_IF_ERROR(StartVan());
  MutexLock lock(&mu_);
  if (scheduler_) {
    if (!table_ready_) {
      lock.Unlock();
      Status s = scheduler_->WaitFormed();
      if (!s.ok()) {
        lock.Lock();
        if (abort_status_.ok()) abort_status_ = s;
        lock.Unlock();
        // Let the ABORTs that explain the failure leave before we return
        // (the caller may exit at once).
        van_->Stop();
        return s;
      }
      lock.Lock();
    }
    logical_[customer_id] = kSchedulerId;
  } else if (!logical_.count(customer_id)) {
    // Every customer id that starts joins as a logical node of its own.
    Message join;
    join.meta.control = Control::kJoin;
    join.meta.recipient = kSchedulerId;
    join.meta.request = true;
    join.meta.cluster_token = options_.cluster_token;
    join.meta.process_key = process_key_;
    join.meta.join_running = options_.join;
    join.meta.join_replace = options_.join_replace;
    join.meta.num_servers = options_.num_servers;
    join.meta.num_workers = options_.num_workers;
    join.meta.consistency = options_.consistency.ToString();
    join.meta.replicas = options_.replicas;
    NodeInfo me;
    me.role = options_.role;
    me.host = my_host_;
    me.port = my_port_;
    me.customer_id = customer_id;
    me.rank_hint = options_.rank_hint;
    // A worker restarted into its rank claims it (elastic workers).
    if (options_.role == Role::kWorker) me.rank = options_.worker_rank;
    me.incarnation = incarnation_;
    me.local_endpoint = van_->local_endpoint();
    me.metrics_port = metrics_port_.load();
    join.meta.nodes.push_back(me);
    // A replacement asks again every beat while the scheduler holds its
    // join: a scheduler started again meanwhile learns of it, and one that
    // holds it can tell that it still lives (docs/replication.md).
    if (options_.join_replace) {
      join.meta.join_ask_ms = std::max(options_.heartbeat_interval_ms, 0);
    }
    const Meta ask_again = join.meta;  // A JOIN has no data frames.
    lock.Unlock();
    PS_RETURN_IF_ERROR(van_->Send(std::move(join)));
    lock.Lock();
    // The scheduler has its own start deadline and names what is missing;
    // ours is a little longer so its explanation arrives first.
    const auto start = std::chrono::steady_clock::now();
    const bool done = WaitLogging(
        &cv_, &lock.native(), options_.start_timeout_ms + 2000,
        options_.wait_log_interval_ms,
        [&]() REQUIRES(mu_) {
          return logical_.count(customer_id) > 0 || !abort_status_.ok();
        },
        [&] {
          LOG(WARNING) << "waiting "
                       << std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::steady_clock::now() - start)
                              .count()
                       << " s for the node table from the scheduler at "
                       << options_.scheduler_host << ":"
                       << options_.scheduler_port
                       << " (the cluster forms when every node has joined)";
        },
        ask_again.join_ask_ms,
        [&] {
          Message again;
          again.meta = ask_again;
          lock.native().unlock();
          Status s = van_->Send(std::move(again));
          if (!s.ok()) {
            LOG(WARNING) << "cannot ask to join again: " << s.ToString();
          }
          lock.native().lock();
        });
    if (!abort_status_.ok()) return abort_status_;
    if (!done) {
      return Status::DeadlineExceeded(
          "no node table from the scheduler at " + options_.scheduler_host +
          ":" + std::to_string(options_.scheduler_port) + " within " +
          std::to_string(options_.start_timeout_ms / 1000 + 2) +
          " s (is the scheduler running? do DMLC_NUM_SERVER and "
          "DMLC_NUM_WORKER match on every node?)");
    }
  }
  // A server that joined a running cluster meets no start barrier: the
  // others passed theirs long ago.
  if (joined_ring_ || joined_running_) do_barrier = false;
  // Nor does a restarted scheduler: its predecessor passed it.
  if (scheduler_ && options_.scheduler_restart) do_barrier = false;
  const bool leave_on_sigterm = options_.role == Role::kServer &&
                                options_.leave_on_sigterm &&
                                options_.heartbeat_interval_ms > 0;
  lock.Unlock();
  if (leave_on_sigterm) InstallLeaveOnSigterm();
  StartThreads();
  if (do_barrier) {
    return Barrier(customer_id, kScheduler + kServerGroup + kWorkerGroup);
  }
  return Status::OK();
}

Status Node::StartVan() {
  // Only the first Start of a process binds; the others wait for it here.
  MutexLock start_lock(&start_mu_);
  {
    MutexLock lock(&mu_);
    if (stopped_) return Status::Aborted("this node has already finalized");
    if (van_started_) return Status::OK();
  }
  TuneMalloc(options_.malloc_keep_mb);
  SetMessageThreadPolicy(options_.thread_policy);
  van_->set_spin(std::chrono::microseconds(options_.spin_us));
  VanLimits limits;
  limits.max_frame_bytes = int64_t{options_.max_frame_mb} << 20;
  limits.receive_queue = options_.receive_queue;
  limits.local_endpoint = options_.local_ipc;
  van_->set_limits(limits);
  VanSecurity security;
  security.curve = options_.curve;
  security.public_key = options_.curve_public_key;
  security.secret_key = options_.curve_secret_key;
  PS_RETURN_IF_ERROR(van_->set_security(security));
  bool scheduler = options_.role == Role::kScheduler;
  // Bound and announced addresses differ behind NAT, in containers and
  // under Kubernetes (docs/configuration.md, "Addresses").
  const std::string& host =
      scheduler ? options_.scheduler_host : options_.node_host;
  const std::string& bind_host =
      options_.bind_host.empty() ? host : options_.bind_host;
  int port = scheduler ? options_.scheduler_port : 0;
  if (scheduler && options_.disconnect_grace_ms >= 0) {
    // ZeroMQ's disconnect events, beside heartbeats (docs/replication.md).
    van_->set_peer_event_handler(
        [this](const PeerEvent& event) { scheduler_->OnPeerEvent(event); });
  }
  StatusOr<int> bound = van_->Start(bind_host, port, [this](Message&& msg) {
    OnMessage(std::move(msg), /*from_van=*/true);
  });
  if (!bound.ok()) {
    if (bound.status().code() != Status::Code::kUnavailable) {
      return bound.status();
    }
    return Status::Unavailable(
        bound.status().message() + " (the " + RoleName(options_.role) +
        " binds " + bind_host + " to announce " + host +
        "; EMBER_BIND_HOST sets another address to bind)");
  }
  if (!scheduler) {
    const std::string& to = options_.scheduler_address.empty()
                                ? options_.scheduler_host
                                : options_.scheduler_address;
    PS_RETURN_IF_ERROR(
        van_->Connect(kSchedulerId, to, options_.scheduler_port, ""));
  }
  if (scheduler && options_.cluster_token.empty()) {
    LOG(WARNING) << "EMBER_CLUSTER_TOKEN is not set: anyone who can reach "
                 << bind_host << ":" << bound.value()
                 << " may join this cluster before it forms (messages from "
                    "processes that did not join are refused either way)";
  }
  if (scheduler && !options_.port_file.empty()) {
    PS_RETURN_IF_ERROR(WritePortFile(options_.port_file, bound.value()));
  }
  {
    MutexLock lock(&mu_);
    my_host_ = host;
    my_port_ = bound.value();
    van_started_ = true;
    last_scheduler_echo_ms_ = clock_->NowMs();
    VLOG(1) << RoleName(options_.role) << " bound to " << bind_host << ":"
            << my_port_ << ", announced as " << my_host_ << ":" << my_port_;
  }
  StartMetrics(bind_host);
  return Status::OK();
}

void Node::StartThreads() {
  if (options_.heartbeat_interval_ms <= 0) return;
  MutexLock lock(&hb_mu_);
  if (heartbeat_thread_.joinable() || hb_stop_) return;
  heartbeat_thread_ = std::thread(&Node::HeartbeatLoop, this);
}

void Node::StopThreads() {
  {
    MutexLock lock(&hb_mu_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void Node::RequestLivenessCheck(int64_t delay_ms) {
  MutexLock lock(&hb_mu_);
  const auto at = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(std::max<int64_t>(delay_ms, 0));
  if (hb_check_due_ && hb_check_at_ <= at) return;
  hb_check_due_ = true;
  hb_check_at_ = at;
  hb_cv_.notify_all();
}

void Node::HeartbeatLoop() {
  NameThisThread("ember-heartbeat");
  MutexLock lock(&hb_mu_);
  const auto interval =
      std::chrono::milliseconds(options_.heartbeat_interval_ms);
  int64_t last_watch_ms = clock_->NowMs();
  auto next_beat = std::chrono::steady_clock::now() + interval;
  // A worker's request deadline is checked every tenth of it (at least 1 ms,
  // at most a beat), so a request fails within 10% of it, not a beat late.
  const bool expires =
      options_.request_timeout_ms > 0 && options_.role == Role::kWorker;
  const auto expire_period = std::chrono::milliseconds(
      expires ? std::clamp<int64_t>(options_.request_timeout_ms / 10, 1,
                                    options_.heartbeat_interval_ms)
              : options_.heartbeat_interval_ms);
  auto next_expire = std::chrono::steady_clock::now() + expire_period;
  while (!hb_stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      // A whole interval late or more: this process did not run meanwhile.
      const auto late = now - next_beat;
      next_beat = now + interval;
      // This round's check covers a check asked for by now.
      if (hb_check_due_ && hb_check_at_ <= now) hb_check_due_ = false;
      lock.Unlock();
      if (late >= interval) {
        ExcusePause(std::chrono::duration_cast<std::chrono::milliseconds>(late)
                        .count());
      }
      if (LeaveSignalled()) RequestLeave("SIGTERM");
      SendHeartbeat();
      CheckLiveness();
      const int64_t now_ms = clock_->NowMs();
      if (options_.wait_log_interval_ms > 0 &&
          now_ms - last_watch_ms >= options_.wait_log_interval_ms) {
        last_watch_ms = now_ms;
        WatchWaits();
      }
      TrimAfterFlood();
      lock.Lock();
      continue;
    }
    if (expires && now >= next_expire) {
      next_expire = now + expire_period;
      lock.Unlock();
      ExpireRequests();
      lock.Lock();
      continue;
    }
    if (hb_check_due_ && now >= hb_check_at_) {
      // A check asked for between beats (a suspect's grace is over).
      hb_check_due_ = false;
      lock.Unlock();
      CheckLiveness();
      lock.Lock();
      continue;
    }
    auto wake = hb_check_due_ ? std::min(next_beat, hb_check_at_) : next_beat;
    if (expires) wake = std::min(wake, next_expire);
    hb_cv_.wait_until(lock.native(), wake);
  }
}

uint64_t Node::DroppedMessages() const {
  return counters_.dropped_unknown_sender.load() +
         counters_.dropped_no_customer.load() +
         counters_.dropped_bad_control.load() +
         counters_.dropped_unauthenticated.load() +
         van_->counters().rejected_messages.load();
}

bool Node::TrimAfterFlood() {
  const uint64_t dropped = DroppedMessages();
  if (!flood_trim_.Tick(dropped)) return false;
  const int64_t before = metrics::ResidentBytes();
  malloc_trim(0);
  const int64_t after = metrics::ResidentBytes();
  counters_.dropped_at_last_trim = dropped;
  counters_.flood_trims++;
  LOG(INFO) << "a flood of " << flood_trim_.last_flood()
            << " dropped messages has ended: returned the freed memory it "
               "left to the system (resident "
            << (before >> 20) << " MB before, " << (after >> 20)
            << " MB after)";
  return true;
}

Message Node::SchedulerRequestLocked(Control control, int sender) const {
  Message m;
  m.meta.control = control;
  m.meta.request = true;
  m.meta.sender = sender >= 0 ? sender : logical_.begin()->second;
  m.meta.recipient = kSchedulerId;
  return m;
}

void Node::SendHeartbeat() {
  MutexLock lock(&mu_);
  if (options_.role == Role::kScheduler || logical_.empty() || stopped_) {
    return;
  }
  if (table_ready_ && beats_unanswered_ >= 2) {
    // No echo for two beats: the scheduler may have restarted and not
    // know us; a re-registration is a beat to one that does.
    SendRejoinsLocked();
    return;
  }
  ++beats_unanswered_;
  Message beat = SchedulerRequestLocked(Control::kHeartbeat);
  // What a lost message of a membership change would have said
  // (docs/replication.md, "Lost messages"): the ring this node has (the
  // scheduler sends a lagging member its table again), that its join or
  // leave has handed over (HANDOVER_DONE), and the copies it reported
  // under its ring that the last echo did not count (REPLICA_READY).
  beat.meta.epoch = ring_ ? ring_->epoch() : 0;
  // A server that joined and later leaves: only its leave counts then.
  beat.meta.handed_over = leave_ == LeaveState::kNone
                              ? handover_reported_
                              : leave_ == LeaveState::kLeft;
  auto reported = reported_holders_.find(beat.meta.sender);
  if (ring_ && reported != reported_holders_.end() &&
      reported->second.first == ring_->epoch()) {
    auto echoed = echoed_holders_.find(beat.meta.sender);
    for (int h : reported->second.second) {
      if (echoed == echoed_holders_.end() ||
          echoed->second.first != reported->second.first ||
          std::find(echoed->second.second.begin(), echoed->second.second.end(),
                    h) == echoed->second.second.end()) {
        beat.meta.holder_epoch = reported->second.first;
        beat.meta.holders = reported->second.second;
        break;
      }
    }
  }
  SendLocked(std::move(beat));
}

void Node::ResendMigration() {
  const int resend_ms = options_.MigrationResendMs();
  if (resend_ms < 0) return;
  MutexLock lock(&mu_);
  if (!table_ready_ || stopped_ || logical_.empty()) return;
  const int64_t now = clock_->NowMs();
  if (leave_ == LeaveState::kAsked && now - leave_asked_ms_ >= resend_ms) {
    // The request or its refusal may be lost; the scheduler ignores a
    // request of a server that is leaving already.
    leave_asked_ms_ = now;
    LOG(INFO) << "no answer to this server's request to leave within "
              << resend_ms << " ms (EMBER_MIGRATION_RESEND_MS): asking again";
    SendLocked(SchedulerRequestLocked(Control::kLeaveRequest));
  }
  MaybeLeftLocked();  // Its wait for the workers' switch is bounded.
  // Under mu_, so no customer is destroyed meanwhile; Tick only queues.
  for (const auto& c : customers_) {
    if (state_apps_.count(c.first.first)) c.second->Tick();
  }
}

void Node::CheckLiveness() {
  SweepEarlyMessages();
  ResendMigration();
  MutexLock lock(&mu_);
  if (!table_ready_ || stopped_) return;
  int64_t now = clock_->NowMs();
  if (scheduler_) {
    lock.Unlock();
    scheduler_->CheckLiveness();
    return;
  }
  if (dead_.count(kSchedulerId)) return;
  int64_t silent = now - last_scheduler_echo_ms_;
  if (silent > SchedulerWaitMs()) {
    lock.Unlock();
    HandleNodeFailed(
        kSchedulerId,
        "no heartbeat echo from the scheduler at " + options_.scheduler_host +
            ":" + std::to_string(options_.scheduler_port) + " for " +
            std::to_string(silent) +
            " ms; it did not come back within EMBER_SCHEDULER_WAIT_MS=" +
            std::to_string(SchedulerWaitMs()));
    return;
  }
  if (silent > options_.heartbeat_timeout_ms) SchedulerSilentLocked(silent);
}

void Node::ExcusePause(int64_t paused_ms) {
  LOG(WARNING) << "this process did not run for about " << paused_ms
               << " ms (its heartbeat thread woke that late: the machine may "
                  "be overloaded, or the process was stopped); that time is "
                  "not counted against its peers' heartbeats";
  if (scheduler_) {
    scheduler_->ExcusePause(paused_ms);
    return;
  }
  MutexLock lock(&mu_);
  last_scheduler_echo_ms_ =
      std::min(clock_->NowMs(), last_scheduler_echo_ms_ + paused_ms);
}

int64_t Node::SchedulerWaitMs() const {
  return std::max<int64_t>(options_.scheduler_wait_ms,
                           options_.heartbeat_timeout_ms);
}

void Node::SchedulerSilentLocked(int64_t silent_ms) {
  const int64_t now = clock_->NowMs();
  const int64_t interval = options_.wait_log_interval_ms > 0
                               ? options_.wait_log_interval_ms
                               : options_.heartbeat_timeout_ms;
  if (scheduler_silent_logged_ms_ >= 0 &&
      now - scheduler_silent_logged_ms_ < interval) {
    return;
  }
  scheduler_silent_logged_ms_ = now;
  LOG(WARNING) << "the scheduler at " << options_.scheduler_host << ":"
               << options_.scheduler_port << " has not answered for "
               << silent_ms / 1000
               << " s: waiting for it (data still goes to servers and "
                  "workers directly; barriers and membership changes wait "
                  "for it); re-registering every "
               << options_.heartbeat_interval_ms << " ms, giving up after "
               << SchedulerWaitMs() / 1000 << " s (EMBER_SCHEDULER_WAIT_MS)";
}

void Node::SendRejoinsLocked() {
  if (!ring_) return;
  const RingInfo ring = ring_->ToInfo();
  std::vector<NodeInfo> live;
  for (const auto& n : table_) {
    if (!dead_.count(n.first) && !left_.count(n.first)) {
      live.push_back(n.second);
    }
  }
  for (const auto& l : logical_) {
    Message m = SchedulerRequestLocked(Control::kRejoin, l.second);
    m.meta.customer_id = l.first;
    m.meta.process_key = process_key_;
    m.meta.cluster_token = options_.cluster_token;
    m.meta.nodes = live;
    m.meta.ring = ring;
    // A server's copy holders under this ring, as echoed and as reported.
    for (const auto* known : {&echoed_holders_, &reported_holders_}) {
      auto it = known->find(l.second);
      if (it == known->end() || it->second.first != ring_->epoch()) continue;
      m.meta.holder_epoch = ring_->epoch();
      for (int h : it->second.second) {
        if (std::find(m.meta.holders.begin(), m.meta.holders.end(), h) ==
            m.meta.holders.end()) {
          m.meta.holders.push_back(h);
        }
      }
    }
    m.meta.consistency = options_.consistency.ToString();
    m.meta.replicas = options_.replicas;
    // The barrier this logical node waits in, if any: a restarted
    // scheduler counts it as if the request had come again.
    auto since = barrier_since_.find(l.first);
    auto wait = barrier_waits_.find(l.first);
    auto number = barrier_numbers_.find(l.first);
    if (since != barrier_since_.end() && wait != barrier_waits_.end() &&
        !wait->second.first && number != barrier_numbers_.end()) {
      m.meta.barrier_group = since->second.first;
      m.meta.barrier_round = number->second;
    }
    SendLocked(std::move(m));
  }
}

void Node::OnSchedulerEchoLocked() {
  const int64_t now = clock_->NowMs();
  if (scheduler_silent_logged_ms_ >= 0) {
    LOG(WARNING) << "the scheduler answers again after "
                 << (now - last_scheduler_echo_ms_) / 1000
                 << " s of silence; barriers and membership changes go on";
    scheduler_silent_logged_ms_ = -1;
  }
  last_scheduler_echo_ms_ = now;
  beats_unanswered_ = 0;
}

Status Node::WriteRunKeyFile() {
  if (!scheduler_ || options_.scheduler_restart ||
      options_.run_key_file.empty()) {
    return Status::OK();
  }
  std::string key;
  {
    MutexLock lock(&mu_);
    if (van_started_) return Status::OK();  // Written by the first Start.
    key = run_key_;
  }
  Status s = WriteSecretFile(options_.run_key_file, key);
  if (s.ok()) return s;
  return Status(s.code(), "cannot write EMBER_RUN_KEY_FILE: " + s.message());
}

std::string Node::Address(int id) const {
  MutexLock lock(&mu_);
  auto it = table_.find(id);
  return it == table_.end() ? std::string() : it->second.address();
}

void Node::WatchWaits() {
  const int64_t interval = options_.wait_log_interval_ms;
  if (interval <= 0) return;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    const int64_t now = clock_->NowMs();
    // Under mu_, so no customer is destroyed meanwhile; Watch only queues.
    for (const auto& c : customers_) c.second->Watch(interval);
    for (const auto& b : barrier_since_) {
      if (!WaitLogDue(now - b.second.second, interval)) continue;
      LOG(WARNING) << "customer " << b.first << " has waited "
                   << (now - b.second.second) / 1000 << " s at a barrier over "
                   << "group " << b.second.first
                   << (scheduler_ ? ""
                       : scheduler_silent_logged_ms_ >= 0
                           ? " (the scheduler is silent: waiting for it)"
                           : " (the scheduler logs whom it waits for)");
    }
  }
  if (scheduler_) scheduler_->WatchWaits(interval);
}

void Node::ExpireRequests() {
  const int64_t timeout = options_.request_timeout_ms;
  if (timeout <= 0 || options_.role != Role::kWorker) return;
  MutexLock lock(&mu_);
  if (stopped_) return;
  // Under mu_, so no customer is destroyed meanwhile; Expire only queues.
  for (const auto& c : customers_) c.second->Expire(timeout);
}

Status Node::Barrier(int customer_id, int group) {
  // A program that reaches a barrier has set up its apps: let every held one
  // start handling messages (peers may need their answers to get here too).
  ReleaseCustomers();
  MutexLock lock(&mu_);
  if (!table_ready_) {
    return Status::Aborted("Barrier before Start");
  }
  // A server that has left waits for nobody (docs/replication.md,
  // "Leaving").
  if (leave_ == LeaveState::kLeft) return Status::OK();
  if (GetNodeIdsLocked(group).size() <= 1) return Status::OK();
  if ((group & RoleGroup(options_.role)) == 0) {
    return Status::InvalidArgument(
        "barrier over group " + std::to_string(group) + " called by a " +
        RoleName(options_.role) + ", which is not in that group");
  }
  if (!abort_status_.ok()) return abort_status_;
  auto id = logical_.find(customer_id);
  if (id == logical_.end()) {
    return Status::InvalidArgument("Barrier by customer " +
                                   std::to_string(customer_id) +
                                   ", which has not called Start");
  }
  barrier_waits_[customer_id] = {false, Status::OK()};
  barrier_since_[customer_id] = {group, clock_->NowMs()};
  // Numbered, so that a copy of the request or of its release (a network
  // that delivers twice) counts once.
  const uint64_t number = ++barrier_numbers_[customer_id];
  Message req = SchedulerRequestLocked(Control::kBarrier, id->second);
  req.meta.customer_id = customer_id;
  req.meta.barrier_group = group;
  req.meta.barrier_round = number;
  if (scheduler_) {
    lock.Unlock();
    scheduler_->HandleBarrierRequest(req);
    lock.Lock();
  } else {
    SendLocked(std::move(req));
  }
  cv_.wait(lock.native(), [&]() REQUIRES(mu_) {
    return barrier_waits_[customer_id].first || !abort_status_.ok();
  });
  Status s = barrier_waits_[customer_id].first
                 ? barrier_waits_[customer_id].second
                 : abort_status_;
  barrier_waits_.erase(customer_id);
  barrier_since_.erase(customer_id);
  return s;
}

Status Node::Finalize(int customer_id, bool do_barrier) {
  Status result;
  if (do_barrier) {
    result = Barrier(customer_id, kScheduler + kServerGroup + kWorkerGroup);
  }
  // No replacement server joins a job that is finishing.
  if (scheduler_) scheduler_->RefuseHeldJoins();
  MutexLock lock(&mu_);
  // A leaving server ends once its ranges are handed over (or the run
  // fails).
  while (leave_ == LeaveState::kHandingOver && abort_status_.ok() &&
         !stopped_) {
    if (!cv_.wait_for(lock.native(), std::chrono::seconds(5),
                      [&]() REQUIRES(mu_) {
                        return leave_ != LeaveState::kHandingOver ||
                               !abort_status_.ok() || stopped_;
                      })) {
      LOG(WARNING) << "Finalize waits for this server's hand-over of its "
                      "ranges to be acknowledged";
    }
  }
  finalized_.insert(customer_id);
  cv_.notify_all();
  if (customer_id != 0 && logical_.count(0)) return result;
  // After a failure nobody is worth waiting for: shut down at once.
  const bool failed = !result.ok() || !abort_status_.ok();
  // The last one out: wait (bounded) for this process's other logical nodes.
  auto timeout =
      std::chrono::milliseconds(failed ? 0 : options_.finalize_timeout_ms);
  cv_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) {
    for (const auto& l : logical_) {
      if (!finalized_.count(l.first)) return false;
    }
    return true;
  });
  lock.Unlock();
  std::vector<Customer*> customers;
  {
    MutexLock l(&mu_);
    for (const auto& c : customers_) customers.push_back(c.second);
  }
  for (Customer* c : customers) {
    c->Release();
    c->Drain();
  }
  // Heartbeats ran through the drain, so a slow drain is not taken for a
  // death; they stop before we tell the scheduler we leave.
  StopThreads();
  lock.Lock();
  if (options_.role != Role::kScheduler && table_ready_ &&
      !dead_.count(kSchedulerId)) {
    for (const auto& l : logical_) {
      SendLocked(SchedulerRequestLocked(Control::kLeave, l.second));
    }
  }
  if (options_.role == Role::kScheduler && table_ready_) {
    // Stay until every node has left or died, so nobody mistakes our exit
    // for a failure while finishing its own Finalize.
    cv_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) {
      for (const auto& n : table_) {
        if (n.first == kSchedulerId) continue;
        if (!left_.count(n.first) && !dead_.count(n.first)) return false;
      }
      return true;
    });
  }
  stopped_ = true;
  std::function<void()> callback = std::move(exit_callback_);
  exit_callback_ = nullptr;
  lock.Unlock();
  if (callback) callback();
  StopMetrics();
  van_->Stop();
  return result;
}

void Node::RegisterExitCallback(std::function<void()> callback) {
  MutexLock lock(&mu_);
  exit_callback_ = std::move(callback);
}

Status Node::Send(Message&& msg) {
  MutexLock lock(&mu_);
  if (msg.meta.sender == Meta::kEmpty) {
    auto it = logical_.find(msg.meta.customer_id);
    if (it == logical_.end()) it = logical_.begin();
    if (it == logical_.end()) {
      return Status::Aborted("send before Start");
    }
    msg.meta.sender = it->second;
  }
  if (!abort_status_.ok()) return abort_status_;
  const int64_t max_frame = int64_t{options_.max_frame_mb} << 20;
  for (const SArray<char>& d : msg.data) {
    if (static_cast<int64_t>(d.size()) > max_frame) {
      return Status::InvalidArgument(
          "a message frame of " + std::to_string(d.size()) +
          " bytes is larger than EMBER_MAX_FRAME_MB=" +
          std::to_string(options_.max_frame_mb) +
          " (every node refuses such frames)");
    }
  }
  int recipient = msg.meta.recipient;
  if (dead_.count(recipient)) {
    return Status::Unavailable(DescribeLocked(recipient) + " is dead");
  }
  if (table_ready_ && !table_.count(recipient)) {
    return Status::InvalidArgument("unknown recipient node " +
                                   std::to_string(recipient));
  }
  msg.meta.auth = AuthForLocked(recipient);
  if (IsLocalLocked(recipient)) {
    lock.Unlock();
    OnMessage(std::move(msg));
    return Status::OK();
  }
  lock.Unlock();
  return van_->Send(std::move(msg));
}

void Node::SendLocked(Message&& msg) {
  int recipient = msg.meta.recipient;
  if (IsLocalLocked(recipient)) {
    LOG(DFATAL) << "control message to self: " << msg.meta.DebugString();
    return;
  }
  if (msg.meta.auth.empty()) msg.meta.auth = AuthForLocked(recipient);
  SendControl(std::move(msg));
}

void Node::SendControl(Message&& msg) {
  const int recipient = msg.meta.recipient;
  const Control control = msg.meta.control;
  Status s = van_->Send(std::move(msg));
  std::string since;
  if (!s.ok() && LogAllowed("send to " + std::to_string(recipient), &since)) {
    LOG(WARNING) << ControlName(control) << " to node " << recipient
                 << " not sent: " << s << since;
  }
}

bool Node::LogAllowed(const std::string& key, std::string* since) {
  uint64_t left_out = 0;
  if (!drop_log_.Allow(key, clock_->NowMs(), &left_out)) return false;
  *since = LogLimiter::Since(left_out);
  return true;
}

Key128 Node::AuthForLocked(int recipient) const {
  if (scheduler_ && !IsLocalLocked(recipient)) {
    auto it = member_keys_.find(recipient);
    return it == member_keys_.end() ? Key128() : it->second;
  }
  return run_auth_;
}

bool Node::AuthenticLocked(const Meta& meta) const {
  if (options_.role != Role::kScheduler && meta.sender == kSchedulerId) {
    return KeysEqual(meta.auth, process_auth_);
  }
  return KeysEqual(meta.auth, run_auth_);
}

void Node::DropUnauthenticatedLocked(const Meta& meta) {
  counters_.dropped_unauthenticated++;
  // One key for all: the claimed sender is not to be trusted, and a flood
  // that claims ever-new senders must not buy more lines.
  std::string since;
  if (LogAllowed("unauthenticated", &since)) {
    LOG(WARNING) << "dropping a message without proof of membership (it "
                    "claims to come from node "
                 << meta.sender << "): " << meta.DebugString() << since;
  }
}

bool Node::IsLocalLocked(int id) const {
  for (const auto& l : logical_) {
    if (l.second == id) return true;
  }
  return false;
}

void Node::AddCustomer(Customer* customer) {
  MutexLock lock(&mu_);
  auto key = std::make_pair(customer->app_id(), customer->customer_id());
  CHECK(customers_.count(key) == 0) << "customer (" << key.first << ", "
                                    << key.second << ") registered twice";
  customers_[key] = customer;
  auto next = next_timestamps_.find(key);
  if (next != next_timestamps_.end()) {
    customer->tracker()->StartAt(next->second);
  }
  auto it = early_.find(customer->app_id());
  if (it == early_.end()) return;
  // Queued under mu_ (Accept never blocks): a message that arrives now is
  // dispatched after them, in the order it was sent (a copy's state before
  // its end, docs/replication.md).
  auto& backlog = it->second;
  for (auto m = backlog.begin(); m != backlog.end();) {
    if (FindCustomerLocked(m->second.meta) == customer) {
      customer->Accept(std::move(m->second));
      m = backlog.erase(m);
    } else {
      ++m;
    }
  }
  if (backlog.empty()) early_.erase(it);
}

void Node::ReleaseCustomers() {
  MutexLock lock(&mu_);
  for (const auto& c : customers_) c.second->Release();
}

void Node::RemoveCustomer(Customer* customer) {
  MutexLock lock(&mu_);
  const auto key = std::make_pair(customer->app_id(), customer->customer_id());
  customers_.erase(key);
  int64_t& next = next_timestamps_[key];
  next = std::max(next, customer->tracker()->NextTimestamp());
}

void Node::OnMessage(Message&& msg, bool from_van) {
  const Meta& meta = msg.meta;
  VLOG(2) << "received " << meta.DebugString();
  // Data is checked in DispatchData, joins by the scheduler (the token);
  // every other control message must prove its sender here.
  if (meta.control != Control::kNone && meta.control != Control::kJoin) {
    MutexLock lock(&mu_);
    if (!AuthenticLocked(meta)) {
      DropUnauthenticatedLocked(meta);
      return;
    }
  }
  if (scheduler_ && HandOverToScheduler(scheduler_.get(), msg)) return;
  switch (meta.control) {
    case Control::kNone:
      DispatchData(std::move(msg), from_van);
      return;
    case Control::kJoin:
    case Control::kLeave:
    case Control::kReplicaReady:
    case Control::kHandoverDone:
    case Control::kRejoin:
      break;  // For the scheduler only.
    case Control::kNodeTable:
      if (options_.role != Role::kScheduler) {
        HandleNodeTable(msg);
        return;
      }
      break;
    case Control::kBarrier:
      if (!meta.request) {
        HandleBarrierRelease(msg);
        return;
      }
      break;
    case Control::kHeartbeat: {
      // The scheduler's echo of this node's beat (or re-registration); to
      // a server, with the holders of its data.
      MutexLock lock(&mu_);
      OnSchedulerEchoLocked();
      if (meta.holder_epoch != 0) {
        echoed_holders_[meta.recipient] = {meta.holder_epoch, meta.holders};
      }
      return;
    }
    case Control::kNodeFailed:
      if (meta.sender == kSchedulerId) {
        HandleNodeFailed(meta.failed_node, meta.reason,
                         meta.ring.epoch != 0 ? &meta.ring : nullptr);
        return;
      }
      break;
    case Control::kAbort:
      if (meta.sender == kSchedulerId) {
        HandleAbort(meta.reason);
        return;
      }
      break;
    case Control::kWorkerChange:
      if (meta.sender == kSchedulerId && options_.role != Role::kScheduler) {
        HandleWorkerChange(msg);
        return;
      }
      break;
    case Control::kLeaveRequest:
      if (!meta.request && meta.sender == kSchedulerId) {
        HandleLeaveRefused(meta.reason);
        return;
      }
      break;
    case Control::kSwitched:
      if (options_.role == Role::kServer && HandleSwitched(meta)) return;
      break;
  }
  counters_.dropped_bad_control++;
  std::string since;
  if (LogAllowed("control from " + std::to_string(meta.sender), &since)) {
    LOG(WARNING) << "dropping unexpected control message " << meta.DebugString()
                 << since;
  }
}

// ps-lite routes by (app, customer) on workers and by (app, app) elsewhere;
// Ember also takes an app's only customer, so SimpleApp(7, 0) on a server
// is reachable too.
Customer* Node::FindCustomerLocked(const Meta& meta) const {
  const int app = meta.app_id;
  if (options_.role == Role::kWorker || !meta.request) {
    auto it = customers_.find({app, meta.customer_id});
    if (it != customers_.end()) return it->second;
  }
  if (options_.role != Role::kWorker) {
    auto it = customers_.find({app, app});
    if (it != customers_.end()) return it->second;
  }
  auto first = customers_.lower_bound({app, INT_MIN});
  if (first == customers_.end() || first->first.first != app) return nullptr;
  auto next = std::next(first);
  if (next != customers_.end() && next->first.first == app) return nullptr;
  return first->second;
}

void Node::DispatchData(Message&& msg, bool from_van) {
  Customer* customer = nullptr;
  Customer::Route route = Customer::Route::kQueue;
  {
    MutexLock lock(&mu_);
    int sender = msg.meta.sender;
    if (!table_ready_) {
      // After StartAsync a peer may be faster than our NODE_TABLE; keep its
      // messages (bounded) until we know who it is.
      // Not authenticated yet (the run key comes with the table): bounded
      // by count and bytes, so a flood before the table cannot grow us.
      const size_t bytes = msg.data_bytes();
      if (before_table_.size() >= kMaxHeldBeforeTable ||
          before_table_bytes_ + bytes > kMaxHeldBytesBeforeTable) {
        counters_.dropped_unknown_sender++;
        std::string since;
        if (LogAllowed("before table", &since)) {
          LOG(WARNING) << "dropping data that arrived before the node table "
                          "(holding "
                       << before_table_.size() << " messages, "
                       << before_table_bytes_ << " bytes)" << since;
        }
        return;
      }
      before_table_bytes_ += bytes;
      before_table_.push_back(std::move(msg));
      return;
    }
    if (!AuthenticLocked(msg.meta)) {
      DropUnauthenticatedLocked(msg.meta);
      return;
    }
    if (!table_.count(sender) && !dead_.count(sender) &&
        from_unknown_count_ < kMaxHeldFromUnknown) {
      // A member we have not heard of yet (a worker that joined): kept
      // until it is announced (ApplyWorkerChangeLocked).
      ++from_unknown_count_;
      from_unknown_[sender].emplace_back(clock_->NowMs(), std::move(msg));
      return;
    }
    if (!table_.count(sender) || dead_.count(sender)) {
      counters_.dropped_unknown_sender++;
      std::string since;
      if (LogAllowed("data from " + std::to_string(sender), &since)) {
        LOG(WARNING) << "dropping message from unknown or dead node " << sender
                     << ": " << msg.meta.DebugString() << since;
      }
      return;
    }
    customer = FindCustomerLocked(msg.meta);
    if (customer == nullptr) {
      // The application may not have created this app yet (a server's
      // KVServer is often made after Start returns); keep a bounded backlog.
      auto& backlog = early_[msg.meta.app_id];
      if (backlog.size() >= 100000) {
        counters_.dropped_no_customer++;
        LOG_EVERY_N(WARNING, 1000)
            << "dropping message for missing app " << msg.meta.app_id;
        return;
      }
      backlog.emplace_back(clock_->NowMs(), std::move(msg));
      return;
    }
    // Under mu_: RemoveCustomer takes it too, so the customer cannot be
    // destroyed under us; once admitted it stays alive until Deliver
    // returns (its destructor waits), which runs outside mu_.
    route = customer->Admit(msg.meta, from_van);
  }
  customer->Deliver(std::move(msg), route);
}

void Node::SweepEarlyMessages() {
  std::vector<Message> answers;
  {
    MutexLock lock(&mu_);
    int64_t now = clock_->NowMs();
    for (auto it = from_unknown_.begin(); it != from_unknown_.end();) {
      auto& held = it->second;
      const size_t before = held.size();
      EraseIf(&held, [&](const std::pair<int64_t, Message>& m) {
        return now - m.first > options_.missing_app_timeout_ms;
      });
      if (held.size() != before) {
        counters_.dropped_unknown_sender += before - held.size();
        from_unknown_count_ -= before - held.size();
        LOG(WARNING) << "dropping " << before - held.size()
                     << " messages from node " << it->first
                     << ", which nobody announced within "
                     << options_.missing_app_timeout_ms << " ms";
      }
      it = held.empty() ? from_unknown_.erase(it) : std::next(it);
    }
    for (auto it = early_.begin(); it != early_.end();) {
      auto& backlog = it->second;
      for (auto m = backlog.begin(); m != backlog.end();) {
        if (now - m->first <= options_.missing_app_timeout_ms) {
          ++m;
          continue;
        }
        const Meta& meta = m->second.meta;
        LOG(WARNING) << "no app " << meta.app_id << " on this node after "
                     << now - m->first << " ms; refusing "
                     << meta.DebugString();
        counters_.dropped_no_customer++;
        if (meta.request) {
          Message answer;
          answer.meta.app_id = meta.app_id;
          answer.meta.customer_id = meta.customer_id;
          answer.meta.simple_app = meta.simple_app;
          answer.meta.request = false;
          answer.meta.push = meta.push;
          answer.meta.pull = meta.pull;
          answer.meta.cmd = meta.cmd;
          answer.meta.timestamp = meta.timestamp;
          answer.meta.recipient = meta.sender;
          answer.meta.sender = meta.recipient;
          answer.meta.status_code = static_cast<int>(Status::Code::kNotFound);
          answer.meta.status_message =
              DescribeLocked(meta.recipient) + " has no app " +
              std::to_string(meta.app_id) + " (customer " +
              std::to_string(meta.customer_id) + ")";
          answers.push_back(std::move(answer));
        }
        m = backlog.erase(m);
      }
      it = backlog.empty() ? early_.erase(it) : std::next(it);
    }
  }
  for (Message& a : answers) {
    const int to = a.meta.recipient;
    Status s = Send(std::move(a));
    std::string since;
    if (!s.ok() && LogAllowed("send to " + std::to_string(to), &since)) {
      LOG(WARNING) << "cannot refuse a request of node " << to << ": " << s
                   << since;
    }
  }
}

void Node::HandleNodeTable(const Message& msg) {
  std::vector<Message> held;
  {
    MutexLock lock(&mu_);
    if (table_ready_) {
      HandleLaterNodeTableLocked(msg);
      return;
    }
    if (msg.meta.run_key.size() != kSecretBytes) {
      counters_.dropped_bad_control++;
      LOG(ERROR) << "dropping a node table without a valid run key";
      return;
    }
    const RingInfo& r = msg.meta.ring;
    auto ring = KeyRing::FromInfo(r);
    if (!ring.ok()) {
      LOG(ERROR) << "dropping a node table with a bad key ring: "
                 << ring.status();
      return;
    }
    SetRingLocked(std::make_shared<const KeyRing>(std::move(ring.value())));
    run_key_ = msg.meta.run_key;
    run_auth_ = ToKey128(run_key_);
    ApplyNodeTableLocked(msg);
    // A worker admitted into the running job (elastic workers).
    joined_running_ = msg.meta.join_running;
    if (ring_->epoch() > 1 && options_.role == Role::kServer &&
        !logical_.empty() && ring_->IndexOf(logical_.begin()->second) >= 0) {
      // Formation publishes epoch 1: this server joined a running cluster,
      // and its ranges' state comes from their former owners.
      joined_ring_ = ring_;
      LOG(INFO) << "joined a running cluster as "
                << DescribeLocked(logical_.begin()->second) << "; "
                << ring_->DebugString();
    }
    held.swap(before_table_);
    before_table_bytes_ = 0;
  }
  for (Message& m : held) DispatchData(std::move(m));
}

void Node::ApplyNodeTableLocked(const Message& msg) {
  std::string me = my_host_ + ":" + std::to_string(my_port_);
  for (const NodeInfo& n : msg.meta.nodes) {
    table_[n.id] = n;
    if (n.address() == me && n.role == options_.role) {
      logical_[n.customer_id] = n.id;
    } else if (n.id != kSchedulerId) {
      Status s = van_->Connect(n.id, n.host, n.port, n.local_endpoint);
      if (!s.ok()) LOG(ERROR) << "cannot connect to " << n.DebugString();
    }
  }
  TableReadyLocked();
  last_scheduler_echo_ms_ = clock_->NowMs();
  VLOG(1) << "node table: " << servers_.size() << " servers, "
          << workers_.size() << " workers, my id " << logical_.begin()->second;
}

void Node::HandleLaterNodeTableLocked(const Message& msg) {
  auto drop = [&](const std::string& why) REQUIRES(mu_) {
    counters_.dropped_bad_control++;
    std::string since;
    if (LogAllowed("later node table", &since)) {
      LOG(ERROR) << "dropping a later node table: " << why << since;
    }
  };
  if (!SecretsEqual(msg.meta.run_key, run_key_)) {
    return drop("its run key is not this run's");
  }
  auto ring = KeyRing::FromInfo(msg.meta.ring);
  if (!ring.ok()) return drop("a bad key ring: " + ring.status().ToString());
  // One per logical node of this process: the copies after the first are
  // not newer.
  if (!ring_ || ring->epoch() <= ring_->epoch()) return;
  std::vector<const NodeInfo*> added;
  std::set<int> listed;
  for (const NodeInfo& n : msg.meta.nodes) {
    listed.insert(n.id);
    if (n.id == kSchedulerId || table_.count(n.id)) continue;
    if (n.id < 8 || n.role == Role::kScheduler) {
      return drop("it names node " + std::to_string(n.id) + " as a member");
    }
    added.push_back(&n);
  }
  for (int id : ring->server_ids()) {
    const bool known =
        table_.count(id) ? !dead_.count(id) && !left_.count(id) : false;
    if (!known && !listed.count(id)) {
      return drop("its ring names node " + std::to_string(id) +
                  ", which is not a live server");
    }
  }
  const bool departure = IsDepartureLocked(msg, *ring);
  if (added.empty() && !departure) return drop("it adds no node");
  for (const NodeInfo* n : added) {
    table_[n->id] = *n;
    Status s = van_->Connect(n->id, n->host, n->port, n->local_endpoint);
    if (!s.ok()) LOG(ERROR) << "cannot connect to " << n->DebugString();
    LOG(INFO) << DescribeLocked(n->id) << " joined the running cluster";
  }
  servers_.clear();
  for (int id : IdsOfRole(table_, Role::kServer)) {
    if (!dead_.count(id) && !left_.count(id) && ring->IndexOf(id) >= 0) {
      servers_.push_back(id);
    }
  }
  workers_ = IdsOfRole(table_, Role::kWorker);
  LOG(INFO) << "switching to ring " << ring->DebugString();
  const int me = logical_.empty() ? -1 : logical_.begin()->second;
  const bool leaving = departure && options_.role == Role::kServer &&
                       ring_->IndexOf(me) >= 0 && ring->IndexOf(me) < 0;
  if (leaving) leave_ = LeaveState::kHandingOver;
  SetRingLocked(std::make_shared<const KeyRing>(std::move(ring.value())));
  if (leaving) StartLeavingLocked();
}

bool Node::IsDepartureLocked(const Message& msg, const KeyRing& ring) const {
  if (!ring_) return false;
  std::set<int> listed;
  for (const NodeInfo& n : msg.meta.nodes) listed.insert(n.id);
  for (int id : ring_->server_ids()) {
    if (ring.IndexOf(id) < 0 && listed.count(id) && !dead_.count(id) &&
        !left_.count(id)) {
      return true;
    }
  }
  return false;
}

void Node::TableReadyLocked() {
  servers_.clear();
  // The scheduler's own table keeps the dead (OnMembership after a
  // failover): they are no servers of the ring any more.
  // A server that is leaving (or has left) is off the ring too.
  for (int id : IdsOfRole(table_, Role::kServer)) {
    if (!dead_.count(id) && (!ring_ || ring_->IndexOf(id) >= 0)) {
      servers_.push_back(id);
    }
  }
  workers_ = IdsOfRole(table_, Role::kWorker);
  table_ready_ = true;
  cv_.notify_all();
}

void Node::HandleBarrierRelease(const Message& msg) {
  {
    // A release of an earlier barrier (a copy): not the one waited for.
    MutexLock lock(&mu_);
    auto it = barrier_numbers_.find(msg.meta.customer_id);
    if (msg.meta.barrier_round != 0 && (it == barrier_numbers_.end() ||
                                        it->second != msg.meta.barrier_round)) {
      counters_.dropped_bad_control++;
      return;
    }
  }
  Status s;
  if (msg.meta.status_code != 0) {
    s = Status(static_cast<Status::Code>(msg.meta.status_code),
               msg.meta.status_message);
  }
  OnBarrierReleased(msg.meta.customer_id, s);
}

void Node::OnBarrierReleased(int customer_id, const Status& status) {
  MutexLock lock(&mu_);
  auto it = barrier_waits_.find(customer_id);
  if (it == barrier_waits_.end()) return;
  it->second = {true, status};
  cv_.notify_all();
}

void Node::HandleNodeFailed(int id, const std::string& reason,
                            const RingInfo* failover) {
  Status status;
  {
    MutexLock lock(&mu_);
    if (dead_.count(id) || stopped_) return;
    if (failover != nullptr && !IsLocalLocked(id)) {
      // A failover (docs/replication.md): the dead server's ranges belong
      // to a server that holds a copy of its data, under a new epoch.
      auto ring = KeyRing::FromInfo(*failover);
      if (!ring.ok() || !ring_ || ring->epoch() <= ring_->epoch() ||
          ring->IndexOf(id) >= 0) {
        counters_.dropped_bad_control++;
        LOG(ERROR) << "dropping a failover notice for node " << id
                   << " with a bad key ring: "
                   << (ring.ok() ? ring->DebugString()
                                 : ring.status().ToString());
        return;
      }
      dead_.insert(id);
      servers_.erase(std::remove(servers_.begin(), servers_.end(), id),
                     servers_.end());
      SetRingLocked(std::make_shared<const KeyRing>(std::move(ring.value())));
      status =
          Status::Unavailable(DescribeLocked(id) + " died (" + reason +
                              "); failing over to " + ring_->DebugString());
      LOG(WARNING) << status.message();
      // Under mu_ so no customer is destroyed meanwhile; this never blocks.
      for (const auto& c : customers_) c.second->OnFailover(id, status);
      return;
    }
    if (IsLocalLocked(id)) {
      status = Status::Aborted(
          "this node was declared dead by the scheduler: " + reason);
    } else {
      dead_.insert(id);
      status =
          Status::Unavailable(DescribeLocked(id) + " died (" + reason + ")");
      MaybeLeftLocked();  // A leaver waits for no dead worker.
    }
    LOG(ERROR) << status.message();
    bool fail_all = status.code() == Status::Code::kAborted ||
                    id == kSchedulerId ||
                    options_.failure_policy == FailurePolicy::kAbort;
    if (!fail_all) {
      // Under mu_ so no customer is destroyed meanwhile; this never blocks.
      for (const auto& c : customers_) c.second->OnPeerFailed(id, status);
      return;
    }
  }
  FailEverything(status);
}

void Node::HandleAbort(const std::string& reason) {
  FailEverything(
      Status::Aborted("the scheduler aborted the cluster: " + reason));
}

void Node::FailEverything(const Status& status) {
  MutexLock lock(&mu_);
  LOG(ERROR) << status;
  FailAllLocked(status);
}

void Node::FailAllLocked(const Status& status) {
  if (abort_status_.ok()) abort_status_ = status;
  // Under mu_ so no customer is destroyed meanwhile; FailAll never blocks.
  for (const auto& c : customers_) c.second->FailAll(status);
  cv_.notify_all();
}

NodeInfo Node::SchedulerEntry() const {
  MutexLock lock(&mu_);
  NodeInfo me;
  me.id = kSchedulerId;
  me.role = Role::kScheduler;
  me.host = options_.scheduler_host;
  me.port = my_port_ > 0 ? my_port_ : options_.scheduler_port;
  me.rank = 0;
  me.incarnation = incarnation_;
  me.metrics_port = metrics_port_.load();
  return me;
}

void Node::OnMembership(const Membership& membership) {
  MutexLock lock(&mu_);
  // The scheduler's Start sets logical_; its Scheduler has connected to
  // every member.
  table_ = membership.nodes;
  SetRingLocked(membership.ring);
  member_keys_ = membership.member_keys;
  TableReadyLocked();
}

void Node::OnMemberDead(int id, const Status& status) {
  MutexLock lock(&mu_);
  dead_.insert(id);
  if (options_.failure_policy == FailurePolicy::kAbort) {
    FailAllLocked(status);
  } else {
    // Under mu_ so no customer is destroyed meanwhile; this never blocks.
    for (const auto& c : customers_) c.second->OnPeerFailed(id, status);
  }
}

void Node::OnMemberFailedOver(int id, std::shared_ptr<const KeyRing> ring,
                              const Status& status) {
  MutexLock lock(&mu_);
  dead_.insert(id);
  servers_.erase(std::remove(servers_.begin(), servers_.end(), id),
                 servers_.end());
  SetRingLocked(std::move(ring));
  // Under mu_ so no customer is destroyed meanwhile; this never blocks.
  for (const auto& c : customers_) c.second->OnFailover(id, status);
}

void Node::SetRingLocked(std::shared_ptr<const KeyRing> ring) {
  // The servers a later ring adds or drops, for the membership callback.
  std::vector<WorkerChangeNote> notes;
  if (ring_ && ring) {
    const int n = ring->num_servers();
    for (int id : ring->server_ids()) {
      if (ring_->IndexOf(id) < 0) {
        notes.push_back({id, WorkerEvent::kNone, 0, ServerEvent::kJoined, n});
      }
    }
    for (int id : ring_->server_ids()) {
      if (ring->IndexOf(id) >= 0) continue;
      notes.push_back(
          {id, WorkerEvent::kNone, 0,
           dead_.count(id) ? ServerEvent::kFailed : ServerEvent::kLeft, n});
    }
  }
  std::shared_ptr<const KeyRing> old = ring_;
  ring_ = std::move(ring);
  if (ring_) {
    ring_history_.push_back(ring_);
    if (ring_history_.size() > kRingHistory) ring_history_.pop_front();
  }
  ring_epoch_.store(ring_ ? ring_->epoch() : 0, std::memory_order_release);
  ring_replicas_.store(ring_ ? ring_->replicas() : 0,
                       std::memory_order_release);
  ring_servers_.store(ring_ ? ring_->num_servers() : 0,
                      std::memory_order_release);
  if (options_.role == Role::kWorker && old && ring_) {
    // A live server the new ring drops is leaving: it hears of this
    // worker's switch after every request sliced by the older ring
    // (RingUse).
    bool due = false;
    for (int id : old->server_ids()) {
      if (ring_->IndexOf(id) >= 0 || dead_.count(id)) continue;
      uint64_t& epoch = switched_due_[id];
      epoch = std::max(epoch, ring_->epoch());
      due = true;
    }
    if (due) {
      // The uses that began before this switch (they may have read the
      // older ring) are of the older generation; later ones read this
      // ring. Two switches in a row wait for every use.
      switch_all_ = switch_pending_.load();
      use_generation_.fetch_add(1);
      switch_pending_.store(true);
      SendSwitchedIfDrainedLocked();
    }
  }
  if (!notes.empty()) {
    // After the ring: a callback sees num_servers() of the new one.
    MutexLock cb(&cb_mu_);
    if (server_callback_) {
      worker_notes_.insert(worker_notes_.end(), notes.begin(), notes.end());
      cb_cv_.notify_all();
    }
  }
  // Under mu_ so no customer is destroyed meanwhile; this never blocks.
  for (const auto& c : customers_) c.second->OnRingChanged();
}

Status Node::InstallRingForTest(std::shared_ptr<const KeyRing> ring) {
  MutexLock lock(&mu_);
  if (!ring || !ring_ || ring->epoch() <= ring_->epoch()) {
    return Status::InvalidArgument(
        "a ring to install must follow this node's (epoch " +
        std::to_string(ring_ ? ring_->epoch() : 0) + ")");
  }
  for (int id : ring->server_ids()) {
    if (std::find(servers_.begin(), servers_.end(), id) == servers_.end()) {
      return Status::InvalidArgument("the ring names node " +
                                     std::to_string(id) +
                                     ", not a live server of this node's");
    }
  }
  LOG(INFO) << "switching to ring " << ring->DebugString() << " (test seam)";
  SetRingLocked(std::move(ring));
  return Status::OK();
}

void Node::OnMemberLeft(int id) {
  MutexLock lock(&mu_);
  left_.insert(id);
  cv_.notify_all();
}

void Node::AddStateApp(int app_id) {
  MutexLock lock(&mu_);
  state_apps_.insert(app_id);
}

void Node::RemoveStateApp(int app_id) {
  MutexLock lock(&mu_);
  state_apps_.erase(app_id);
}

void Node::StateCopied(int app_id, int holder, uint64_t epoch) {
  MutexLock lock(&mu_);
  if (!state_apps_.count(app_id) || logical_.empty()) return;
  std::set<int>& done = state_copied_[std::make_pair(holder, epoch)];
  done.insert(app_id);
  if (!std::includes(done.begin(), done.end(), state_apps_.begin(),
                     state_apps_.end())) {
    return;
  }
  state_copied_.erase(std::make_pair(holder, epoch));
  for (auto it = state_copied_.begin(); it != state_copied_.end();) {
    it = it->first.second < epoch ? state_copied_.erase(it) : std::next(it);
  }
  Message ready = SchedulerRequestLocked(Control::kReplicaReady);
  ready.meta.holder = holder;
  ready.meta.holder_epoch = epoch;
  auto& reported = reported_holders_[ready.meta.sender];
  if (reported.first != epoch) reported = {epoch, {}};
  reported.second.push_back(holder);
  SendLocked(std::move(ready));
}

std::shared_ptr<const KeyRing> Node::joined_ring() const {
  MutexLock lock(&mu_);
  return joined_ring_;
}

void Node::HandoverDone(int app_id) {
  MutexLock lock(&mu_);
  if (!joined_ring_ || handover_reported_ || logical_.empty()) return;
  handed_over_.insert(app_id);
  if (!std::includes(handed_over_.begin(), handed_over_.end(),
                     state_apps_.begin(), state_apps_.end())) {
    return;
  }
  handover_reported_ = true;
  SendLocked(SchedulerRequestLocked(Control::kHandoverDone));
}

int Node::num_workers() const {
  MutexLock lock(&mu_);
  if (!table_ready_) return options_.num_workers;
  int n = 0;
  for (int id : workers_) {
    if (!dead_.count(id) && !left_.count(id)) ++n;
  }
  return n;
}

void Node::SetWorkerChangeCallback(WorkerChangeCallback callback) {
  MutexLock lock(&cb_mu_);
  worker_callback_ = std::move(callback);
  if (!cb_thread_.joinable() && !cb_stop_) {
    cb_thread_ = std::thread(&Node::RunWorkerCallbacks, this);
  }
}

void Node::SetServerChangeCallback(ServerChangeCallback callback) {
  MutexLock lock(&cb_mu_);
  server_callback_ = std::move(callback);
  if (!cb_thread_.joinable() && !cb_stop_) {
    cb_thread_ = std::thread(&Node::RunWorkerCallbacks, this);
  }
}

void Node::RunWorkerCallbacks() {
  NameThisThread("ember-members");
  MutexLock lock(&cb_mu_);
  while (true) {
    cb_cv_.wait(lock.native(), [this]() REQUIRES(cb_mu_) {
      return cb_stop_ || !worker_notes_.empty();
    });
    if (cb_stop_) return;
    std::vector<WorkerChangeNote> notes;
    notes.swap(worker_notes_);
    WorkerChangeCallback callback = worker_callback_;
    ServerChangeCallback server_callback = server_callback_;
    lock.Unlock();
    for (const WorkerChangeNote& n : notes) {
      if (n.server != ServerEvent::kNone) {
        if (server_callback) server_callback(n.id, n.server, n.num_servers);
      } else if (callback) {
        callback(n.id, n.event, n.num_workers);
      }
    }
    lock.Lock();
  }
}

void Node::OnWorkerChange(const NodeInfo& worker, WorkerEvent event) {
  std::vector<Message> held;
  {
    MutexLock lock(&mu_);
    held = ApplyWorkerChangeLocked(worker, event);
  }
  for (Message& m : held) DispatchData(std::move(m));
}

void Node::HandleWorkerChange(const Message& msg) {
  std::vector<Message> held;
  MutexLock lock(&mu_);
  const NodeInfo* n = msg.meta.nodes.size() == 1 ? &msg.meta.nodes[0] : nullptr;
  if (!table_ready_ || n == nullptr || n->role != Role::kWorker || n->id < 9 ||
      n->id % 2 != 1 || n->rank != IdToRank(n->id) ||
      msg.meta.worker_event == WorkerEvent::kNone || IsLocalLocked(n->id)) {
    counters_.dropped_bad_control++;
    std::string since;
    if (LogAllowed("worker change", &since)) {
      LOG(WARNING) << "dropping a bad worker change " << msg.meta.DebugString()
                   << since;
    }
    return;
  }
  held = ApplyWorkerChangeLocked(*n, msg.meta.worker_event);
  lock.Unlock();
  for (Message& m : held) DispatchData(std::move(m));
}

std::vector<Message> Node::ApplyWorkerChangeLocked(const NodeInfo& worker,
                                                   WorkerEvent event) {
  const int id = worker.id;
  std::vector<Message> held;
  switch (event) {
    case WorkerEvent::kJoined:
    case WorkerEvent::kBack:
      table_[id] = worker;
      dead_.erase(id);
      left_.erase(id);
      away_.erase(id);
      if (!scheduler_ && !IsLocalLocked(id)) {
        // A restarted worker listens elsewhere: its id's route moves.
        Status s =
            van_->Connect(id, worker.host, worker.port, worker.local_endpoint);
        if (!s.ok()) LOG(ERROR) << "cannot connect to " << worker.DebugString();
      }
      workers_ = IdsOfRole(table_, Role::kWorker);
      if (auto it = from_unknown_.find(id); it != from_unknown_.end()) {
        for (auto& m : it->second) held.push_back(std::move(m.second));
        from_unknown_count_ -= it->second.size();
        from_unknown_.erase(it);
      }
      break;
    case WorkerEvent::kAway:
      away_.insert(id);
      break;
    case WorkerEvent::kGone:
      away_.erase(id);
      left_.insert(id);
      break;
    case WorkerEvent::kNone:
      return held;
  }
  int live = 0;
  for (int w : workers_) {
    if (!dead_.count(w) && !left_.count(w)) ++live;
  }
  MaybeLeftLocked();  // A leaver waits for no worker that is gone.
  LOG(INFO) << DescribeLocked(id) << " " << WorkerEventName(event) << "; "
            << live << " workers";
  // Under mu_ so no customer is destroyed meanwhile; this never blocks.
  for (const auto& c : customers_) c.second->OnWorkerChange(id, event);
  cv_.notify_all();
  MutexLock cb(&cb_mu_);
  worker_notes_.push_back(WorkerChangeNote{id, event, live});
  cb_cv_.notify_all();
  return held;
}

bool Node::RequestLeave(const std::string& why) {
  MutexLock lock(&mu_);
  auto cannot = [&](const std::string& because) {
    LOG(WARNING) << why
                 << ": this node cannot ask to leave the cluster: " << because;
    return false;
  };
  if (options_.role != Role::kServer) return cannot("it is no server");
  if (!table_ready_ || logical_.empty()) {
    return cannot("it has not joined yet");
  }
  if (stopped_ || !abort_status_.ok() || dead_.count(kSchedulerId)) {
    return cannot("it is finishing, or the cluster has failed");
  }
  if (leave_ != LeaveState::kNone) return cannot("it is leaving already");
  leave_ = LeaveState::kAsked;
  leave_asked_ms_ = clock_->NowMs();
  LOG(WARNING) << why << ": " << DescribeLocked(logical_.begin()->second)
               << " asks the scheduler to let it leave the running cluster";
  SendLocked(SchedulerRequestLocked(Control::kLeaveRequest));
  return true;
}

void Node::HandleLeaveRefused(const std::string& reason) {
  MutexLock lock(&mu_);
  if (leave_ != LeaveState::kAsked) return;
  leave_ = LeaveState::kNone;
  LOG(ERROR) << "the scheduler refused to let this server leave: " << reason
             << "; it goes on serving (a second SIGTERM ends it at once)";
}

bool Node::handing_over() const {
  MutexLock lock(&mu_);
  return leave_ == LeaveState::kHandingOver;
}

bool Node::has_left() const {
  MutexLock lock(&mu_);
  return leave_ == LeaveState::kLeft;
}

void Node::StartLeavingLocked() {
  LOG(WARNING) << "leaving the running cluster: handing this server's "
                  "ranges over to their new owners under "
               << ring_->DebugString();
  leave_epoch_ = ring_->epoch();
  leave_workers_.clear();
  for (int w : workers_) {
    if (!dead_.count(w) && !left_.count(w) && !away_.count(w)) {
      leave_workers_.insert(w);
    }
  }
  leave_handed_ms_ = 0;
  leave_wait_logged_ = false;
  // Without apps that hold state there is nothing to hand over.
  if (state_apps_.empty()) LeftLocked();
}

void Node::LeaveHandedOver(int app_id) {
  MutexLock lock(&mu_);
  if (leave_ != LeaveState::kHandingOver) return;
  leave_handed_.insert(app_id);
  if (!std::includes(leave_handed_.begin(), leave_handed_.end(),
                     state_apps_.begin(), state_apps_.end())) {
    return;
  }
  if (leave_handed_ms_ == 0)
    leave_handed_ms_ = std::max<int64_t>(clock_->NowMs(), 1);
  MaybeLeftLocked();
}

void Node::MaybeLeftLocked() {
  if (leave_ != LeaveState::kHandingOver || leave_handed_ms_ == 0) return;
  std::vector<int> waiting;
  for (int w : leave_workers_) {
    if (dead_.count(w) || left_.count(w) || away_.count(w)) continue;
    auto it = switched_.find(w);
    if (it == switched_.end() || it->second < leave_epoch_) {
      waiting.push_back(w);
    }
  }
  if (!waiting.empty()) {
    const int64_t bound =
        std::max<int64_t>(4 * int64_t{options_.MigrationResendMs()},
                          options_.heartbeat_timeout_ms);
    const bool wait = clock_->NowMs() - leave_handed_ms_ < bound;
    if (wait && leave_wait_logged_) return;
    std::string names;
    for (int w : waiting) {
      names += (names.empty() ? "" : ", ") + DescribeLocked(w);
    }
    if (wait) {
      leave_wait_logged_ = true;
      LOG(INFO) << "every new owner has acknowledged this server's ranges; "
                   "waiting for "
                << names
                << " to take the ring without it (every request it sliced "
                   "by the older ring comes first, and is answered)";
      return;
    }
    LOG(WARNING) << "leaving without word from " << names
                 << " that it took the ring without this server (" << bound
                 << " ms): a request it sliced by the older ring that "
                    "arrives later is lost, and its sender waits";
  }
  LeftLocked();
}

bool Node::HandleSwitched(const Meta& meta) {
  MutexLock lock(&mu_);
  auto it = table_.find(meta.sender);
  if (it == table_.end() || it->second.role != Role::kWorker ||
      meta.epoch == 0) {
    return false;
  }
  uint64_t& epoch = switched_[meta.sender];
  epoch = std::max(epoch, meta.epoch);
  MaybeLeftLocked();
  return true;
}

void Node::SendSwitchedLocked() {
  const int me = logical_.empty() ? 0 : logical_.begin()->second;
  for (const auto& due : switched_due_) {
    if (dead_.count(due.first) || IsLocalLocked(due.first)) continue;
    Message m;
    m.meta.control = Control::kSwitched;
    m.meta.sender = me;
    m.meta.recipient = due.first;
    m.meta.epoch = due.second;
    SendLocked(std::move(m));
  }
  switched_due_.clear();
}

bool Node::SwitchDrainedLocked() const {
  if (switch_all_) return uses_[0].load() == 0 && uses_[1].load() == 0;
  return uses_[(use_generation_.load() - 1) & 1].load() == 0;
}

void Node::SendSwitchedIfDrainedLocked() {
  if (!switch_pending_.load() || !SwitchDrainedLocked()) return;
  switch_pending_.store(false);
  switch_all_ = false;
  SendSwitchedLocked();
}

void Node::MaybeSendSwitched() {
  MutexLock lock(&mu_);
  SendSwitchedIfDrainedLocked();
}

// Sequentially consistent throughout: if a switch finds a use's count
// still 0, the use reads the ring after the switch stored it (under mu_);
// if the use ends after the switch looked, it sees the notices pending and
// sends them. A use counts itself in the generation it read only if no
// switch came in between: otherwise, with two switches before it ends, it
// would be counted in the parity of a generation no switch waits for while
// it holds the first switch's ring.
Node::RingUse::RingUse(Node* node) : node_(node) {
  while (true) {
    generation_ = node_->use_generation_.load();
    node_->uses_[generation_ & 1].fetch_add(1);
    if (node_->use_generation_.load() == generation_) return;
    Release();
  }
}

Node::RingUse::~RingUse() { Release(); }

void Node::RingUse::Release() {
  if (node_->uses_[generation_ & 1].fetch_sub(1) == 1 &&
      node_->switch_pending_.load()) {
    node_->MaybeSendSwitched();
  }
}

void Node::LeftLocked() {
  leave_ = LeaveState::kLeft;
  SendLocked(SchedulerRequestLocked(Control::kHandoverDone));
  LOG(WARNING) << "this server has left the running cluster: every new "
                  "owner has acknowledged its ranges; Finalize ends without "
                  "the others";
  // Its barriers wait for nobody now.
  for (auto& w : barrier_waits_) w.second = {true, Status::OK()};
  cv_.notify_all();
}

int Node::my_id(int customer_id) const {
  MutexLock lock(&mu_);
  auto it = logical_.find(customer_id);
  if (it != logical_.end()) return it->second;
  return logical_.empty() ? -1 : logical_.begin()->second;
}

int Node::my_rank() const {
  int id = my_id(0);
  return id < 0 ? -1 : IdToRank(id);
}

std::vector<int> Node::GetNodeIds(int group) const {
  MutexLock lock(&mu_);
  return GetNodeIdsLocked(group);
}

std::vector<int> Node::GetNodeIdsLocked(int group) const {
  return GroupIds(group, servers_, workers_);
}

std::vector<int> Node::server_ids() const {
  MutexLock lock(&mu_);
  return servers_;
}

std::shared_ptr<const KeyRing> Node::key_ring() const {
  MutexLock lock(&mu_);
  return ring_;
}

std::vector<std::shared_ptr<const KeyRing>> Node::RingsAfter(
    uint64_t after, uint64_t until) const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const KeyRing>> rings;
  uint64_t last = after;
  for (const auto& r : ring_history_) {
    if (r->epoch() <= after || r->epoch() > until) continue;
    // Epochs count up by one: a gap is a ring no longer kept.
    if (r->epoch() != last + 1) return {};
    rings.push_back(r);
    last = r->epoch();
  }
  if (last != until) return {};
  return rings;
}

bool Node::IsAlive(int id) const {
  MutexLock lock(&mu_);
  return table_.count(id) && !dead_.count(id) && !left_.count(id);
}

size_t Node::held_messages() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& e : early_) n += e.second.size();
  return n;
}

int64_t Node::last_scheduler_echo_ms() const {
  MutexLock lock(&mu_);
  return last_scheduler_echo_ms_;
}

bool Node::ready() const {
  MutexLock lock(&mu_);
  return table_ready_;
}

std::string Node::Describe(int id) const {
  MutexLock lock(&mu_);
  return DescribeLocked(id);
}

std::string Node::DescribeLocked(int id) const {
  return DescribeNode(table_, id);
}

}  // namespace ps
