#include "transport/fault_van.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>

#include "util/erase_if.h"
#include "util/mix.h"

namespace ps {

namespace {

uint64_t Word(int64_t v) { return static_cast<uint64_t>(v); }

// A draw as a double uniform in [0, 1).
double Unit(uint64_t draw) {
  return static_cast<double>(draw >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

bool FaultTarget::Matches(const Meta& meta) const {
  const bool data = meta.control == Control::kNone;
  if (kind == Kind::kData && !data) return false;
  if (kind == Kind::kControl && data) return false;
  if (!data && !controls.empty() &&
      std::find(controls.begin(), controls.end(), meta.control) ==
          controls.end()) {
    return false;
  }
  if (data && migration && meta.copy_attempt == 0) return false;
  if (commit_notices && !(data && meta.commit_notice)) return false;
  for (const auto& link : spared) {
    if ((link.first == kAnyNode || link.first == meta.sender) &&
        (link.second == kAnyNode || link.second == meta.recipient)) {
      return false;
    }
  }
  if (links.empty()) return true;
  for (const auto& link : links) {
    if ((link.first == kAnyNode || link.first == meta.sender) &&
        (link.second == kAnyNode || link.second == meta.recipient)) {
      return true;
    }
  }
  return false;
}

Status FaultPlan::Validate() const {
  const std::pair<const char*, double> probabilities[] = {
      {"drop", drop},
      {"duplicate", duplicate},
      {"delay", delay},
      {"reorder", reorder}};
  double sum = 0;
  for (const auto& p : probabilities) {
    if (!(p.second >= 0 && p.second <= 1)) {
      return Status::InvalidArgument(std::string("fault plan: ") + p.first +
                                     " must be a probability in [0, 1], not " +
                                     std::to_string(p.second));
    }
    sum += p.second;
  }
  if (sum > 1 + 1e-9) {
    return Status::InvalidArgument(
        "fault plan: drop + duplicate + delay + reorder is " +
        std::to_string(sum) + ", more than 1 (a message gets one fault)");
  }
  if (max_delay < 1) {
    return Status::InvalidArgument("fault plan: max_delay must be >= 1, not " +
                                   std::to_string(max_delay));
  }
  if (fifo && reorder > 0) {
    return Status::InvalidArgument(
        "fault plan: reorder must be 0 with fifo (a fifo link keeps its "
        "order)");
  }
  return Status::OK();
}

std::string FaultPlan::DebugString() const {
  std::ostringstream out;
  out << "drop=" << drop << " duplicate=" << duplicate << " delay=" << delay
      << " reorder=" << reorder << " max_delay=" << max_delay
      << (fifo ? " fifo" : "") << " target="
      << (target.kind == FaultTarget::Kind::kAll    ? "all"
          : target.kind == FaultTarget::Kind::kData ? "data"
                                                    : "control");
  for (const auto& link : target.links) {
    out << " link=" << link.first << "->" << link.second;
  }
  for (Control c : target.controls) out << " control=" << ControlName(c);
  if (target.migration) out << " migration";
  if (target.commit_notices) out << " commit_notices";
  for (const auto& link : target.spared) {
    out << " spared=" << link.first << "->" << link.second;
  }
  return out.str();
}

namespace {

// Per FaultEvent::Kind, in the enum's order: its name, and the counter in
// FaultCounters that counts it.
struct KindInfo {
  const char* name;
  uint64_t FaultCounters::*counter;
};
constexpr KindInfo kKinds[] = {
    {"drop", &FaultCounters::dropped},
    {"duplicate", &FaultCounters::duplicated},
    {"delay", &FaultCounters::delayed},
    {"reorder", &FaultCounters::reordered},
    {"partitioned", &FaultCounters::partitioned},
    {"killed", &FaultCounters::killed},
};
static_assert(std::size(kKinds) ==
                  static_cast<size_t>(FaultEvent::Kind::kKilled) + 1,
              "kKinds has a row for each kind");

}  // namespace

const char* FaultKindName(FaultEvent::Kind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kKinds) ? kKinds[i].name : "?";
}

std::string FaultEvent::DebugString() const {
  std::ostringstream out;
  out << FaultKindName(kind) << " " << meta.sender << "->" << meta.recipient;
  if (meta.control != Control::kNone) {
    out << " " << ControlName(meta.control);
    if (meta.control == Control::kBarrier) {
      out << (meta.request ? " request" : " release")
          << " group=" << meta.barrier_group << " round=" << meta.barrier_round;
    }
  } else {
    out << " app=" << meta.app_id << " customer=" << meta.customer_id
        << " ts=" << meta.timestamp << (meta.request ? " request" : " response")
        << (meta.push ? " push" : "") << (meta.pull ? " pull" : "");
  }
  return out.str();
}

FaultInjector::FaultInjector(uint64_t seed, FaultPlan plan) : seed_(seed) {
  MutexLock lock(&state_mu_);
  plan_ = std::move(plan);
}

FaultInjector::~FaultInjector() = default;

Status FaultInjector::set_plan(const FaultPlan& plan) {
  PS_RETURN_IF_ERROR(plan.Validate());
  MutexLock lock(&state_mu_);
  plan_ = plan;
  return Status::OK();
}

FaultPlan FaultInjector::plan() const {
  MutexLock lock(&state_mu_);
  return plan_;
}

void FaultInjector::Partition(const std::vector<int>& a,
                              const std::vector<int>& b) {
  MutexLock lock(&state_mu_);
  partitions_.emplace_back(std::set<int>(a.begin(), a.end()),
                           std::set<int>(b.begin(), b.end()));
}

void FaultInjector::Heal() {
  MutexLock lock(&state_mu_);
  partitions_.clear();
}

void FaultInjector::Kill(int id) {
  MutexLock lock(&state_mu_);
  killed_.insert(id);
}

bool FaultInjector::IsKilled(int id) const {
  MutexLock lock(&state_mu_);
  return killed_.count(id) > 0;
}

uint64_t FaultInjector::Identity(const Meta& meta) {
  uint64_t h = kGoldenGamma;
  auto add = [&h](uint64_t v) { h = SplitMix64(h ^ v) + kGoldenGamma; };
  add(Word(meta.sender));
  add(Word(meta.recipient));
  add(Word(static_cast<int>(meta.control)));
  add(Word(meta.app_id));
  add(Word(meta.customer_id));
  add(Word(meta.timestamp));
  add((meta.request ? 1u : 0u) | (meta.push ? 2u : 0u) | (meta.pull ? 4u : 0u) |
      (meta.simple_app ? 8u : 0u) | (meta.clock_tick ? 16u : 0u));
  add(Word(meta.cmd));
  add(Word(meta.barrier_group));
  add(meta.barrier_round);
  add(Word(meta.failed_node));
  // JOINs carry no id yet: who joins tells them apart.
  for (const NodeInfo& n : meta.nodes) {
    if (meta.control != Control::kJoin) break;
    add(Word(static_cast<int>(n.role)));
    add(Word(n.rank_hint));
    add(Word(n.customer_id));
  }
  return h;
}

uint64_t FaultInjector::Draw(const Meta& meta, uint64_t occurrence,
                             uint64_t salt) const {
  uint64_t x = SplitMix64(SplitMix64(seed_) ^ Identity(meta));
  return SplitMix64(x + (occurrence * 4 + salt + 1) * kGoldenGamma);
}

void FaultInjector::Register(FaultVan* van) {
  MutexLock lock(&send_mu_);
  vans_.insert(van);
}

void FaultInjector::Unregister(FaultVan* van) {
  MutexLock lock(&send_mu_);
  if (!vans_.erase(van)) return;
  const uint64_t lost =
      EraseIf(&held_, [van](const Held& h) { return h.from == van; });
  MutexLock state(&state_mu_);
  counters_.lost_at_stop += lost;
  counters_.held = held_.size();
}

bool FaultInjector::ForcedDropLocked(const Meta& meta, bool in_flight,
                                     FaultEvent::Kind* kind) {
  if (killed_.count(meta.recipient) ||
      (!in_flight && killed_.count(meta.sender))) {
    *kind = FaultEvent::Kind::kKilled;
    return true;
  }
  for (const auto& p : partitions_) {
    if ((p.first.count(meta.sender) && p.second.count(meta.recipient)) ||
        (p.second.count(meta.sender) && p.first.count(meta.recipient))) {
      *kind = FaultEvent::Kind::kPartitioned;
      return true;
    }
  }
  return false;
}

void FaultInjector::RecordLocked(FaultEvent::Kind kind, const Meta& meta) {
  counters_.*kKinds[static_cast<size_t>(kind)].counter += 1;
  if (events_.size() < kMaxEvents) {
    FaultEvent event;
    event.kind = kind;
    event.meta = meta;
    event.meta.auth = Key128();
    events_.push_back(std::move(event));
  }
}

Message FaultInjector::Copy(const Message& msg) {
  Message copy;
  copy.meta = msg.meta;
  for (const SArray<char>& d : msg.data) {
    SArray<char> frame(d.size());
    if (d.size() > 0) std::memcpy(frame.data(), d.data(), d.size());
    copy.data.push_back(std::move(frame));
  }
  return copy;
}

Status FaultInjector::DeliverLocked(FaultVan* from, Message&& msg) {
  const size_t bytes = msg.data_bytes();
  Status s = from->inner_->Send(std::move(msg));
  if (s.ok()) {
    from->counters_.sent_messages++;
    from->counters_.sent_bytes += bytes;
  }
  return s;
}

void FaultInjector::ReleaseLocked(std::deque<Held>::iterator it) {
  Held held = std::move(*it);
  held_.erase(it);
  {
    MutexLock state(&state_mu_);
    counters_.held = held_.size();
    FaultEvent::Kind kind;
    if (ForcedDropLocked(held.msg.meta, /*in_flight=*/true, &kind)) {
      RecordLocked(kind, held.msg.meta);
      return;
    }
    counters_.released++;
  }
  // A held message was accepted long ago: a failure now is the network's,
  // which the sender learns of through heartbeats, as with any lost send.
  Status s = DeliverLocked(held.from, std::move(held.msg));
  (void)s;
}

void FaultInjector::ReleaseDueLocked(int sender, int recipient) {
  // Links with a held message still held, before `it` (fifo).
  std::set<std::pair<int, int>> blocked;
  for (auto it = held_.begin(); it != held_.end();) {
    const Meta& m = it->msg.meta;
    const std::pair<int, int> link(m.sender, m.recipient);
    if (it->keep_order && blocked.count(link)) {
      ++it;
      continue;
    }
    const bool overtaken =
        it->reorder && m.sender == sender && m.recipient == recipient;
    if (overtaken || it->due <= sent_) {
      ReleaseLocked(it);
      // Releasing erased the entry; start again (the deque is short).
      it = held_.begin();
      blocked.clear();
    } else {
      blocked.insert(link);
      ++it;
    }
  }
}

bool FaultInjector::LinkHeldLocked(int sender, int recipient) const {
  for (const Held& h : held_) {
    if (h.msg.meta.sender == sender && h.msg.meta.recipient == recipient) {
      return true;
    }
  }
  return false;
}

Status FaultInjector::OnSend(FaultVan* from, Message&& msg) {
  MutexLock lock(&send_mu_);
  if (!vans_.count(from)) {
    // Stopped: the wrapped van says so.
    return from->inner_->Send(std::move(msg));
  }
  ++sent_;
  const Meta& meta = msg.meta;
  const int sender = meta.sender;
  const int recipient = meta.recipient;
  FaultPlan plan;
  bool matched = false;
  bool fifo = false;
  {
    MutexLock state(&state_mu_);
    counters_.messages++;
    FaultEvent::Kind kind;
    if (ForcedDropLocked(meta, /*in_flight=*/false, &kind)) {
      RecordLocked(kind, meta);
      return Status::OK();
    }
    fifo = plan_.fifo;
    matched = plan_.target.Matches(meta);
    if (matched) {
      counters_.matched++;
      plan = plan_;
    }
  }
  if (fifo && LinkHeldLocked(sender, recipient)) {
    // Behind the held messages of its link, whatever its draw (it gets
    // none: the link's order decides when it arrives).
    ReleaseDueLocked(-1, -1);
    if (LinkHeldLocked(sender, recipient)) {
      Held behind{from, std::move(msg), 0, false, true};
      held_.push_back(std::move(behind));
      MutexLock state(&state_mu_);
      counters_.held = held_.size();
      return Status::OK();
    }
  }
  if (!matched) {
    Status s = DeliverLocked(from, std::move(msg));
    ReleaseDueLocked(sender, recipient);
    return s;
  }
  const uint64_t occurrence = occurrences_[Identity(meta)]++;
  const double u = Unit(Draw(meta, occurrence, 0));
  const uint64_t wait = Draw(meta, occurrence, 1);
  double edge = plan.drop;
  if (u < edge) {
    MutexLock state(&state_mu_);
    RecordLocked(FaultEvent::Kind::kDrop, meta);
    return Status::OK();
  }
  edge += plan.duplicate;
  if (u < edge) {
    {
      MutexLock state(&state_mu_);
      RecordLocked(FaultEvent::Kind::kDuplicate, meta);
    }
    Held copy{from, Copy(msg), 0, false, false};
    const uint64_t after = plan.fifo ? 0 : wait % (plan.max_delay + 1);
    Status s = DeliverLocked(from, std::move(msg));
    if (after == 0) {
      {
        MutexLock state(&state_mu_);
        counters_.released++;
      }
      Status again = DeliverLocked(from, std::move(copy.msg));
      (void)again;
    } else {
      copy.due = sent_ + after;
      held_.push_back(std::move(copy));
    }
    ReleaseDueLocked(sender, recipient);
    MutexLock state(&state_mu_);
    counters_.held = held_.size();
    return s;
  }
  edge += plan.delay;
  const bool delay = u < edge;
  edge += plan.reorder;
  const bool reorder = !delay && u < edge;
  if (delay || reorder) {
    {
      MutexLock state(&state_mu_);
      RecordLocked(
          delay ? FaultEvent::Kind::kDelay : FaultEvent::Kind::kReorder, meta);
    }
    // Held before the due ones are released, so a reorder is overtaken
    // only by a later message.
    ReleaseDueLocked(-1, -1);
    Held held{from, std::move(msg), 0, reorder, plan.fifo};
    held.due = sent_ + (delay ? 1 + wait % plan.max_delay : plan.max_delay);
    held_.push_back(std::move(held));
    MutexLock state(&state_mu_);
    counters_.held = held_.size();
    return Status::OK();
  }
  Status s = DeliverLocked(from, std::move(msg));
  ReleaseDueLocked(sender, recipient);
  return s;
}

bool FaultInjector::OnReceive(const Meta& meta) {
  MutexLock lock(&state_mu_);
  if (!killed_.count(meta.recipient)) return true;
  RecordLocked(FaultEvent::Kind::kKilled, meta);
  return false;
}

bool FaultInjector::Step() {
  MutexLock lock(&send_mu_);
  if (held_.empty()) return false;
  ReleaseLocked(held_.begin());
  return true;
}

bool FaultInjector::StepLink(int sender, int recipient) {
  MutexLock lock(&send_mu_);
  auto of_link = [sender, recipient](const Held& h) {
    return h.msg.meta.sender == sender && h.msg.meta.recipient == recipient;
  };
  auto it = std::find_if(held_.begin(), held_.end(), of_link);
  if (it == held_.end()) return false;
  ReleaseLocked(it);
  // The link's other held messages stay for the test to release: none
  // becomes due by the count of messages sent.
  for (Held& h : held_) {
    if (of_link(h)) h.due = std::numeric_limits<uint64_t>::max();
  }
  return true;
}

size_t FaultInjector::Flush() {
  size_t n = 0;
  while (Step()) ++n;
  return n;
}

size_t FaultInjector::held() const {
  MutexLock lock(&send_mu_);
  return held_.size();
}

FaultCounters FaultInjector::counters() const {
  MutexLock lock(&state_mu_);
  return counters_;
}

std::vector<FaultEvent> FaultInjector::events() const {
  MutexLock lock(&state_mu_);
  return events_;
}

FaultVan::FaultVan(std::unique_ptr<Van> inner, FaultInjector* injector)
    : inner_(std::move(inner)), injector_(injector) {
  injector_->Register(this);
}

FaultVan::~FaultVan() {
  Stop();
  injector_->Unregister(this);
}

StatusOr<int> FaultVan::Start(const std::string& host, int port,
                              Handler handler) {
  return inner_->Start(host, port,
                       [this, handler = std::move(handler)](Message&& msg) {
                         if (!injector_->OnReceive(msg.meta)) return;
                         counters_.received_messages++;
                         counters_.received_bytes += msg.data_bytes();
                         handler(std::move(msg));
                       });
}

Status FaultVan::Send(Message&& msg) {
  return injector_->OnSend(this, std::move(msg));
}

void FaultVan::Stop() {
  // After Unregister no release sends through this van; then it may stop.
  injector_->Unregister(this);
  inner_->Stop();
}

}  // namespace ps
