#include "ps/internal/postoffice.h"

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "node/node.h"
#include "ps/membership.h"
#include "ps/ps.h"
#include "transport/zmq_van.h"

namespace ps {

const char* Version() { return EMBER_VERSION; }

namespace {

// `verbose`: PS_VERBOSE, as Options read it.
void InitLogging(const char* argv0, int verbose) {
  static std::once_flag once;
  std::call_once(once, [argv0, verbose] {
    // Log to stderr unless the user configured glog; launchers collect it.
    if (std::getenv("GLOG_logtostderr") == nullptr &&
        std::getenv("GLOG_log_dir") == nullptr) {
      FLAGS_logtostderr = true;
    }
    if (verbose > FLAGS_v) FLAGS_v = verbose;
    if (!google::IsGoogleLoggingInitialized()) {
      google::InitGoogleLogging(argv0 != nullptr ? argv0 : "ember");
    }
  });
}

}  // namespace

[[noreturn]] void FailStop(const char* what, const Status& status) {
  LOG(ERROR) << what << " failed: " << status.ToString();
  google::FlushLogFiles(google::GLOG_INFO);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(1);
}

namespace {

// FailStop unless `status` is OK.
void FailStopIfError(const char* what, const Status& status) {
  if (!status.ok()) FailStop(what, status);
}

// kAborted naming `call` unless the node `n` has been created by Start.
Status RequireStarted(const Node* n, const char* call) {
  if (n != nullptr) return Status::OK();
  return Status::Aborted(std::string(call) + " before Start");
}

}  // namespace

Postoffice* Postoffice::Get() {
  // Never destroyed: the default node may still be in use while static
  // objects are torn down at exit.
  static Postoffice* const instance = new Postoffice(nullptr);
  return instance;
}

std::unique_ptr<Postoffice> Postoffice::Create(std::unique_ptr<Node> node) {
  return std::unique_ptr<Postoffice>(new Postoffice(std::move(node)));
}

Postoffice::Postoffice(std::unique_ptr<Node> node) : node_(std::move(node)) {}

Postoffice::~Postoffice() = default;

const Options& Postoffice::SettingsLocked() const {
  if (node_) return node_->options();
  if (!options_) {
    StatusOr<Options> read = Options::FromEnvironment();
    options_status_ = read.status();
    if (!read.ok()) {
      LOG(WARNING) << "the settings cannot be read (" << read.status()
                   << "); until Start reports it, the defaults answer";
    }
    options_ = std::make_unique<Options>(read.ok() ? std::move(read.value())
                                                   : Options());
  }
  return *options_;
}

Status Postoffice::EnsureNode() {
  std::lock_guard<std::mutex> lock(mu_);
  if (node_) return Status::OK();
  const Options options = SettingsLocked();
  PS_RETURN_IF_ERROR(options_status_);
  node_ = std::make_unique<Node>(options, std::make_unique<ZmqVan>());
  return Status::OK();
}

Node* Postoffice::node() {
  std::lock_guard<std::mutex> lock(mu_);
  return node_.get();
}

Status Postoffice::StartStatus(int customer_id, bool do_barrier) {
  PS_RETURN_IF_ERROR(EnsureNode());
  return node()->Start(customer_id, do_barrier);
}

void Postoffice::Start(int customer_id, const char* argv0,
                       const bool do_barrier) {
  InitLogging(argv0, verbose());
  FailStopIfError("ps::Start", StartStatus(customer_id, do_barrier));
}

Status Postoffice::FinalizeStatus(int customer_id, bool do_barrier) {
  Node* n = node();
  PS_RETURN_IF_ERROR(RequireStarted(n, "Finalize"));
  return n->Finalize(customer_id, do_barrier);
}

void Postoffice::Finalize(const int customer_id, const bool do_barrier) {
  FailStopIfError("ps::Finalize", FinalizeStatus(customer_id, do_barrier));
}

Status Postoffice::BarrierStatus(int customer_id, int node_group) {
  Node* n = node();
  PS_RETURN_IF_ERROR(RequireStarted(n, "Barrier"));
  return n->Barrier(customer_id, node_group);
}

void Postoffice::Barrier(int customer_id, int node_group) {
  FailStopIfError("ps::Postoffice::Barrier",
                  BarrierStatus(customer_id, node_group));
}

void Postoffice::RegisterExitCallback(const std::function<void()>& cb) {
  FailStopIfError("ps::RegisterExitCallback", EnsureNode());
  node()->RegisterExitCallback(cb);
}

void SetMembershipCallback(
    std::function<void(const MembershipChange& change)> callback) {
  Postoffice* po = Postoffice::Get();
  FailStopIfError("ps::SetMembershipCallback", po->EnsureNode());
  if (!callback) {
    po->node()->SetWorkerChangeCallback(nullptr);
    po->node()->SetServerChangeCallback(nullptr);
    return;
  }
  Node* node = po->node();
  node->SetServerChangeCallback(
      [callback, node](int id, Node::ServerEvent event, int num_servers) {
        MembershipChange change;
        change.kind = event == Node::ServerEvent::kJoined
                          ? MembershipChange::Kind::kServerJoined
                      : event == Node::ServerEvent::kFailed
                          ? MembershipChange::Kind::kServerFailed
                          : MembershipChange::Kind::kServerLeft;
        change.node_id = id;
        change.rank = Node::IdToRank(id);
        change.num_servers = num_servers;
        change.num_workers = node->num_workers();
        callback(change);
      });
  node->SetWorkerChangeCallback(
      [callback, node](int id, WorkerEvent event, int num_workers) {
        MembershipChange change;
        switch (event) {
          case WorkerEvent::kJoined:
            change.kind = MembershipChange::Kind::kWorkerJoined;
            break;
          case WorkerEvent::kBack:
            change.kind = MembershipChange::Kind::kWorkerBack;
            break;
          case WorkerEvent::kAway:
            change.kind = MembershipChange::Kind::kWorkerAway;
            break;
          case WorkerEvent::kGone:
          case WorkerEvent::kNone:
            change.kind = MembershipChange::Kind::kWorkerGone;
            break;
        }
        change.node_id = id;
        change.rank = Node::IdToRank(id);
        change.num_workers = num_workers;
        change.num_servers = node->num_servers();
        callback(change);
      });
}

int Postoffice::num_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_ ? node_->num_workers() : SettingsLocked().num_workers;
}

int Postoffice::num_servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_ ? node_->num_servers() : SettingsLocked().num_servers;
}

bool Postoffice::is_worker() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SettingsLocked().role == Role::kWorker;
}

bool Postoffice::is_server() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SettingsLocked().role == Role::kServer;
}

bool Postoffice::is_scheduler() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SettingsLocked().role == Role::kScheduler;
}

int Postoffice::my_rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!node_) return -1;
  int rank = node_->my_rank();
  return rank < 0 ? 0 : rank;
}

int Postoffice::verbose() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SettingsLocked().verbose;
}

const std::vector<int>& Postoffice::GetNodeIDs(int node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> ids =
      node_ ? node_->GetNodeIds(node_id) : std::vector<int>();
  auto& slot = node_ids_[node_id];
  if (slot != ids) slot = std::move(ids);
  return slot;
}

// While every server owns one range, in rank order (always, until
// membership changes), these are the ring's ranges, which at start-up are
// ps-lite's even split. Once a server owns several, ps-lite's one-range-per-
// rank shape cannot describe the ring: the even split over the current
// servers is returned, so key encodings that use it (MXNet, BytePS) keep
// their keys, and the ring routes them to whoever owns them now.
const std::vector<Range>& Postoffice::GetServerKeyRanges() {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<const KeyRing> ring = node_ ? node_->key_ring() : nullptr;
  int n = node_ ? node_->num_servers() : SettingsLocked().num_servers;
  std::vector<Range> ranges;
  if (ring && ring->num_ranges() == static_cast<size_t>(ring->num_servers())) {
    for (int s = 0; s < ring->num_servers(); ++s) {
      const std::vector<Range> own = ring->RangesOf(s);
      ranges.insert(ranges.end(), own.begin(), own.end());
    }
  } else {
    if (ring) n = ring->num_servers();
    for (int i = 0; i < n; ++i) {
      Key begin = kMaxKey / n * i;
      Key end = i + 1 == n ? kMaxKey : kMaxKey / n * (i + 1);
      ranges.emplace_back(begin, end);
    }
  }
  // The reference stays valid until the ranges change.
  bool same = ranges.size() == server_key_ranges_.size();
  for (size_t i = 0; same && i < ranges.size(); ++i) {
    same = ranges[i].begin() == server_key_ranges_[i].begin() &&
           ranges[i].end() == server_key_ranges_[i].end();
  }
  if (!same) server_key_ranges_ = std::move(ranges);
  return server_key_ranges_;
}

}  // namespace ps
