#include "consistency/controller.h"

#include <glog/logging.h>

#include <algorithm>
#include <sstream>
#include <tuple>
#include <unordered_set>

#include "util/coding.h"
#include "util/erase_if.h"
#include "util/mutex.h"
#include "util/wait_log.h"

namespace ps {

std::string ConsistencyStats::ToString() const {
  std::ostringstream os;
  os << "pushes=" << pushes << " deferred=" << pushes_deferred
     << " dropped=" << pushes_dropped << " redone=" << pushes_redone
     << " pulls=" << pulls << " waited=" << pulls_waited
     << " failed=" << pulls_failed;
  if (pulls_waited > 0) {
    os << " wait_ms_mean=" << wait_ms_total / pulls_waited
       << " wait_ms_max=" << wait_ms_max;
  }
  os << " staleness_max=" << staleness_max << " staleness_hist=";
  for (size_t i = 0; i < staleness_histogram.size(); ++i) {
    os << (i ? "," : "") << staleness_histogram[i];
  }
  os << " clocks=" << clocks << " live_workers=" << live_workers
     << " min_clock=" << min_clock;
  return os.str();
}

ConsistencyController::ConsistencyController(ConsistencyConfig config,
                                             std::vector<int> workers,
                                             Callbacks callbacks,
                                             const Clock* clock)
    : config_(config),
      cb_(std::move(callbacks)),
      clock_(clock),
      workers_(std::move(workers)),
      live_(workers_.size(), true),
      away_(workers_.size(), false),
      clocks_(workers_.size(), 0),
      redo_clock_(workers_.size(), -1),
      redo_counts_(workers_.size()),
      pushed_below_(workers_.size()),
      live_count_(static_cast<int>(workers_.size())) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    index_[workers_[i]] = static_cast<int>(i);
  }
  stats_.live_workers = live_count_;
}

int ConsistencyController::WorkerIndex(int id) const {
  auto it = index_.find(id);
  return it == index_.end() ? -1 : it->second;
}

int64_t ConsistencyController::MinLiveClock() const {
  int64_t min = ConsistencyConfig::kUnbounded;
  for (size_t i = 0; i < clocks_.size(); ++i) {
    if (live_[i]) min = std::min(min, clocks_[i]);
  }
  return min;
}

void ConsistencyController::Tick(int worker, int64_t clock) {
  if (clock > clocks_[worker]) clocks_[worker] = clock;
}

void ConsistencyController::OnRequest(RawRequest request) {
  const int w = WorkerIndex(request.sender);
  if (w < 0) {
    // Not one of the cluster's workers (a scheduler or server acting as a
    // client): it has no clock to order by.
    cb_.run(request);
    return;
  }
  if (!live_[w]) {
    VLOG(1) << "dropping a request of dead worker " << request.sender;
    return;
  }
  if (!failed_.ok()) {
    cb_.fail(request, failed_);
    return;
  }
  const bool bsp = config_.mode == ConsistencyConfig::Mode::kBsp;
  if (bsp && request.push && redo_clock_[w] >= 0 && RedonePush(w, request)) {
    {
      MutexLock lock(&stats_mu_);
      ++stats_.pushes_redone;
    }
    if (!request.pull) {
      cb_.ack(request);
      return;
    }
    // A push-pull: its pull half is answered as any pull.
    request.push = false;
    request.kvs.vals = SArray<char>();
    request.kvs.lens = SArray<int>();
  }
  Tick(w, request.clock);
  if (request.push) {
    MutexLock lock(&stats_mu_);
    ++stats_.pushes;
  }
  if (!bsp) {
    PendingPull pull{std::move(request), w, clock_->NowMs()};
    if (!pull.request.pull) {
      cb_.run(pull.request);  // Applied on arrival.
    } else if (PullReady(pull)) {
      Answer(pull, /*waited=*/false);
    } else {
      if (pull.request.push) {
        // Apply the push half now and answer when the pull half may be.
        RawRequest push = pull.request;
        push.pull = false;
        cb_.run_acked(push);
        pull.request.push = false;
        pull.request.kvs.vals = SArray<char>();
      }
      pulls_.push_back(std::move(pull));
    }
    Progress();
    return;
  }

  // bsp.
  if (request.push) {
    PendingPush p;
    p.request = request;
    p.request.pull = false;
    // A push-pull is answered after its round: the worker cannot commit it
    // before, so it counts on arrival.
    if (request.pull) p.request.committed = true;
    if (!p.request.committed) {
      auto below = pushed_below_[w].find(request.customer_id);
      p.request.committed =
          below != pushed_below_[w].end() && WorkerTs(request) < below->second;
    }
    p.worker = w;
    p.seq = next_seq_++;
    auto& by_key = counts_[request.clock];
    const size_t n = request.kvs.keys.size();
    p.rounds.resize(n);
    for (size_t i = 0; i < n; ++i) {
      auto& c = by_key[request.kvs.keys[i]];
      if (c.size() < workers_.size()) c.resize(workers_.size(), 0);
      p.rounds[i] = c[w]++;
      p.round = std::max(p.round, p.rounds[i]);
    }
    if (!request.pull) cb_.ack(request);  // The pull half answers a push-pull.
    {
      MutexLock lock(&stats_mu_);
      ++stats_.pushes_deferred;
    }
    auto order = [](const PendingPush& a, const PendingPush& b) {
      return std::make_tuple(a.request.clock, a.round, a.worker, a.seq) <
             std::make_tuple(b.request.clock, b.round, b.worker, b.seq);
    };
    pushes_.insert(std::upper_bound(pushes_.begin(), pushes_.end(), p, order),
                   std::move(p));
  }
  if (request.pull) {
    const bool push_pull = request.push;
    request.push = false;
    request.kvs.vals = SArray<char>();
    pulls_.push_back(
        PendingPull{std::move(request), w, clock_->NowMs(), push_pull});
  }
  Progress();
}

void ConsistencyController::OnClock(int sender, int64_t clock) {
  const int w = WorkerIndex(sender);
  if (w < 0 || !live_[w] || away_[w]) return;
  Tick(w, clock);
  if (redo_clock_[w] >= 0 && clocks_[w] > redo_clock_[w]) {
    redo_clock_[w] = -1;  // Past the clock it resumed at: redone.
    redo_counts_[w].clear();
  }
  {
    MutexLock lock(&stats_mu_);
    ++stats_.clocks;
  }
  Progress();
}

void ConsistencyController::OnWorkerFailed(int worker, const Status& status) {
  const int w = WorkerIndex(worker);
  if (w < 0 || !live_[w]) return;
  live_[w] = false;
  away_[w] = false;
  redo_clock_[w] = -1;
  redo_counts_[w].clear();
  pushed_below_[w].clear();
  --live_count_;
  {
    MutexLock lock(&stats_mu_);
    stats_.live_workers = live_count_;
  }
  const size_t dropped =
      EraseIf(&pushes_, [w](const PendingPush& p) { return p.worker == w; });
  EraseIf(&pulls_, [w](const PendingPull& p) { return p.worker == w; });
  {
    MutexLock lock(&stats_mu_);
    stats_.pushes_dropped += dropped;
  }
  LOG(WARNING) << "consistency " << config_.ToString() << ": " << status
               << "; going on with " << live_count_ << " of " << workers_.size()
               << " workers"
               << (dropped ? ", dropping " + std::to_string(dropped) +
                                 " of its pushes not yet applied"
                           : "");
  Progress();
}

void ConsistencyController::OnWorkerAway(int worker, const Status& status) {
  const int w = WorkerIndex(worker);
  if (w < 0 || !live_[w] || away_[w]) return;
  if (config_.mode == ConsistencyConfig::Mode::kAsp) {
    OnWorkerFailed(worker, status);  // asp waits for nobody.
    return;
  }
  away_[w] = true;
  redo_clock_[w] = -1;
  redo_counts_[w].clear();
  EraseIf(&pulls_, [w](const PendingPull& p) { return p.worker == w; });
  LOG(WARNING) << "consistency " << config_.ToString() << ": " << status
               << "; its rank is held for its restart: the others wait for it "
               << "at clock " << clocks_[w] << " as for a slow worker";
  Progress();
}

void ConsistencyController::OnWorkerJoined(int worker) {
  int w = WorkerIndex(worker);
  if (w < 0) {
    if (!workers_.empty() && worker < workers_.back()) {
      LOG(ERROR) << "consistency: worker " << worker
                 << " joined with an id below the known workers'; ignored";
      return;
    }
    w = static_cast<int>(workers_.size());
    workers_.push_back(worker);
    index_[worker] = w;
    live_.push_back(false);
    away_.push_back(false);
    clocks_.push_back(0);
    redo_clock_.push_back(-1);
    redo_counts_.emplace_back();
    pushed_below_.emplace_back();
  }
  // It takes part from the clock after the newest a live worker is in, so
  // no round that may have begun waits for it.
  int64_t newest = -1;
  for (size_t j = 0; j < workers_.size(); ++j) {
    if (live_[j] && static_cast<int>(j) != w) {
      newest = std::max(newest, clocks_[j]);
    }
  }
  if (live_[w] && !away_[w]) return;  // Joined already (its clock query).
  if (away_[w]) {
    // Held for its restart, but joining afresh: what it left goes.
    OnWorkerFailed(worker, Status::Aborted("worker " + std::to_string(worker) +
                                           " joined afresh"));
  }
  const int64_t start = newest >= 0 ? newest + 1 : clocks_[w];
  live_[w] = true;
  away_[w] = false;
  ++live_count_;
  clocks_[w] = std::max(clocks_[w], start);
  redo_clock_[w] = -1;
  redo_counts_[w].clear();
  pushed_below_[w].clear();
  LOG(INFO) << "consistency " << config_.ToString() << ": worker " << w
            << " (id " << worker << ") joined; it takes part from clock "
            << clocks_[w] << "; " << live_count_ << " workers";
  Progress();
}

void ConsistencyController::OnWorkerBack(int worker) {
  const int w = WorkerIndex(worker);
  if (w >= 0 && live_[w] && !away_[w]) return;  // Back already.
  if (w < 0 || !live_[w]) {
    OnWorkerJoined(worker);
    return;
  }
  away_[w] = false;
  if (config_.mode == ConsistencyConfig::Mode::kBsp) {
    const size_t dropped = DropUncommitted(w);
    if (dropped > 0) {
      LOG(INFO) << "consistency " << config_.ToString() << ": worker " << w
                << " (id " << worker << ") is back; " << dropped
                << " push(es) of its first incarnation never reached every "
                   "server of their request: dropped, to be done again";
    }
    redo_clock_[w] = clocks_[w];
    redo_counts_[w].clear();
  }
  pushed_below_[w].clear();  // A new incarnation counts its timestamps anew.
  LOG(INFO) << "consistency " << config_.ToString() << ": worker " << w
            << " (id " << worker << ") is back; it resumes at clock "
            << clocks_[w];
  Progress();
}

std::pair<int64_t, bool> ConsistencyController::JoinClock(int worker) {
  int w = WorkerIndex(worker);
  if (w < 0 || !live_[w] || away_[w]) {
    // Its query came before the scheduler's notice of its join: only a
    // worker that joined asks, so it has (a dead one asks nothing).
    if (w >= 0 && live_[w]) {
      OnWorkerBack(worker);
    } else {
      OnWorkerJoined(worker);
    }
    w = WorkerIndex(worker);
    if (w < 0) return {0, false};
  }
  return {clocks_[w], redo_clock_[w] >= 0};
}

size_t ConsistencyController::DropUncommitted(int w) {
  size_t n = EraseIf(&pushes_, [this, w](const PendingPush& p) {
    if (p.worker != w || p.request.committed) return false;
    auto by_key = counts_.find(p.request.clock);
    if (by_key == counts_.end()) return true;
    for (Key k : p.request.kvs.keys) {
      auto it = by_key->second.find(k);
      if (it != by_key->second.end() &&
          static_cast<size_t>(w) < it->second.size() && it->second[w] > 0) {
        --it->second[w];
      }
    }
    return true;
  });
  if (n > 0) {
    MutexLock lock(&stats_mu_);
    stats_.pushes_dropped += n;
  }
  return n;
}

size_t ConsistencyController::OnCommitted(int worker, int customer,
                                          int64_t below) {
  if (config_.mode != ConsistencyConfig::Mode::kBsp) return 0;
  const int w = WorkerIndex(worker);
  if (w < 0 || !live_[w]) return 0;
  int64_t& known = pushed_below_[w][customer];
  if (below <= known) return 0;
  known = below;
  size_t committed = 0, own = 0;
  for (PendingPush& p : pushes_) {
    if (p.worker != w || p.request.committed ||
        p.request.customer_id != customer || WorkerTs(p.request) >= below) {
      continue;
    }
    p.request.committed = true;
    ++committed;
    if (p.request.replica_of == 0) ++own;
  }
  if (committed > 0) Progress();
  return own;
}

bool ConsistencyController::RedonePush(int w, const RawRequest& request) {
  const int64_t c = request.clock;
  if (c < clocks_[w]) return true;  // It had finished that clock here.
  if (c > redo_clock_[w]) {
    redo_clock_[w] = -1;  // Past the clock it resumed at: redone.
    redo_counts_[w].clear();
    return false;
  }
  auto by_key = counts_.find(c);
  size_t done = 0;
  const SArray<Key>& keys = request.kvs.keys;
  for (Key k : keys) {
    const uint32_t n = redo_counts_[w][k]++;
    if (by_key == counts_.end()) continue;
    auto it = by_key->second.find(k);
    if (it != by_key->second.end() &&
        static_cast<size_t>(w) < it->second.size() && n < it->second[w]) {
      ++done;
    }
  }
  if (done == keys.size() && !keys.empty()) return true;
  if (done > 0) {
    LOG(ERROR) << "consistency: restarted worker " << w << " pushed "
               << keys.size() << " keys at clock " << c << " of which " << done
               << " its first incarnation had pushed: not the same pushes, "
               << "so the run is not exact; counted as new";
  }
  return false;
}

void ConsistencyController::OnFailAll(const Status& status) {
  if (!failed_.ok()) return;
  failed_ = status;
  std::deque<PendingPull> pulls;
  pulls.swap(pulls_);
  {
    MutexLock lock(&stats_mu_);
    stats_.pushes_dropped += pushes_.size();
    stats_.pulls_failed += pulls.size();
  }
  pushes_.clear();
  for (auto& p : pulls) cb_.fail(p.request, status);
}

std::vector<std::string> ConsistencyController::DescribeLongWaits(
    int64_t older_than_ms, size_t max) const {
  std::vector<std::string> lines;
  const int64_t now = clock_->NowMs();
  size_t long_ones = 0;
  auto name = [this](size_t rank) {
    return "worker " + std::to_string(rank) + " (id " +
           std::to_string(workers_[rank]) + ")" +
           (away_[rank] ? " (dead; its rank is held for its restart)" : "");
  };
  for (const PendingPull& p : pulls_) {
    const int64_t waited = now - p.arrived_ms;
    if (!WaitLogDue(waited, older_than_ms)) continue;
    if (++long_ones > max) continue;
    const int64_t c = p.request.clock;
    std::string line = "pull from " + name(p.worker) + " at clock " +
                       std::to_string(c) + " has waited " +
                       std::to_string(waited / 1000) + " s";
    std::string behind;
    if (config_.staleness != ConsistencyConfig::kUnbounded) {
      // It needs every live worker at clock c - staleness or later.
      for (size_t j = 0; j < workers_.size(); ++j) {
        if (live_[j] && clocks_[j] < c - config_.staleness) {
          behind += (behind.empty() ? "" : ", ") + name(j) + " at clock " +
                    std::to_string(clocks_[j]);
        }
      }
    }
    if (!behind.empty()) {
      line += " for " + behind + " (staleness " +
              std::to_string(config_.staleness) + ")";
    } else if (config_.mode == ConsistencyConfig::Mode::kBsp &&
               HasPendingPush(p.worker, p.request.kvs.keys)) {
      // Its own pushes of the round wait for the others' pushes to the same
      // keys, or their clocks.
      std::string open;
      for (size_t j = 0; j < workers_.size(); ++j) {
        if (live_[j] && static_cast<int>(j) != p.worker && clocks_[j] <= c) {
          open += (open.empty() ? "" : ", ") + name(j) + " (clock " +
                  std::to_string(clocks_[j]) + ")";
        }
      }
      line += " for its own pushes of clock " + std::to_string(c) +
              " to be applied: the round needs the pushes or the clock of " +
              (open.empty() ? std::string("nobody (a bug)") : open);
    }
    lines.push_back(line);
  }
  if (long_ones > max) {
    lines.push_back("and " + std::to_string(long_ones - max) +
                    " more pulls held as long");
  }
  return lines;
}

bool ConsistencyController::PullReady(const PendingPull& p) const {
  if (config_.staleness != ConsistencyConfig::kUnbounded &&
      MinLiveClock() < p.request.clock - config_.staleness) {
    return false;
  }
  if (config_.mode == ConsistencyConfig::Mode::kBsp &&
      HasPendingPush(p.worker, p.request.kvs.keys)) {
    return false;
  }
  return true;
}

// Whether `worker` has a push not yet applied to any of `keys` (both sorted).
bool ConsistencyController::HasPendingPush(int worker,
                                           const SArray<Key>& keys) const {
  for (const PendingPush& p : pushes_) {
    if (p.worker != worker) continue;
    const SArray<Key>& a = p.request.kvs.keys;
    size_t i = 0, j = 0;
    while (i < a.size() && j < keys.size()) {
      if (a[i] == keys[j]) return true;
      if (a[i] < keys[j]) {
        ++i;
      } else {
        ++j;
      }
    }
  }
  return false;
}

// A push's round is complete for a key when every live worker has pushed
// that key as often at the same clock, or has finished that clock.
// A push that is not committed counts for nobody's round, its own either.
bool ConsistencyController::PushReady(const PendingPush& p,
                                      const Uncommitted& uncommitted) const {
  if (!p.request.committed) return false;
  const int64_t c = p.request.clock;
  auto by_key = counts_.find(c);
  const SArray<Key>& keys = p.request.kvs.keys;
  for (size_t j = 0; j < workers_.size(); ++j) {
    if (!live_[j] || clocks_[j] > c || static_cast<int>(j) == p.worker) {
      continue;
    }
    if (by_key == counts_.end()) return false;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = by_key->second.find(keys[i]);
      if (it == by_key->second.end() || it->second.size() <= j ||
          it->second[j] <= p.rounds[i]) {
        return false;
      }
    }
  }
  // The counts say the round is complete; not if a push that makes it up
  // is not committed yet (rare: checked last).
  for (const auto& held : uncommitted) {
    const PendingPush& u = *held.first;
    if (u.worker == p.worker || u.request.clock != c || !live_[u.worker] ||
        clocks_[u.worker] > c) {
      continue;
    }
    const SArray<Key>& theirs = u.request.kvs.keys;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (held.second) {
        const Key* at = std::lower_bound(theirs.begin(), theirs.end(), keys[i]);
        if (at != theirs.end() && *at == keys[i] &&
            u.rounds[at - theirs.begin()] <= p.rounds[i]) {
          return false;
        }
        continue;
      }
      for (size_t x = 0; x < theirs.size(); ++x) {
        if (theirs[x] == keys[i] && u.rounds[x] <= p.rounds[i]) return false;
      }
    }
  }
  return true;
}

// Applies, in (clock, round, rank, arrival) order, every push whose round is
// complete. A push waits behind an earlier one that touches one of its keys
// and is not ready yet, so every key sees its pushes in that order whatever
// the timing: that is what makes bsp runs reproducible.
void ConsistencyController::ApplyReadyPushes() {
  if (pushes_.empty()) return;
  Uncommitted uncommitted;
  for (const PendingPush& p : pushes_) {
    if (p.request.committed) continue;
    const SArray<Key>& keys = p.request.kvs.keys;
    uncommitted.emplace_back(
        &p, std::adjacent_find(keys.begin(), keys.end(),
                               std::greater_equal<Key>()) == keys.end());
  }
  // Decided first, moved after: `uncommitted` points into pushes_.
  std::unordered_set<Key> blocked;
  std::vector<bool> go(pushes_.size());
  for (size_t n = 0; n < pushes_.size(); ++n) {
    const SArray<Key>& keys = pushes_[n].request.kvs.keys;
    bool ok = PushReady(pushes_[n], uncommitted);
    if (ok && !blocked.empty()) {
      for (size_t i = 0; i < keys.size() && ok; ++i) {
        ok = blocked.count(keys[i]) == 0;
      }
    }
    go[n] = ok;
    if (!ok) blocked.insert(keys.begin(), keys.end());
  }
  std::vector<PendingPush> kept;
  std::vector<PendingPush> ready;
  for (size_t n = 0; n < pushes_.size(); ++n) {
    (go[n] ? ready : kept).push_back(std::move(pushes_[n]));
  }
  pushes_.swap(kept);
  for (const PendingPush& p : ready) cb_.run_acked(p.request);
}

void ConsistencyController::AnswerReadyPulls() {
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    if (PullReady(*it)) {
      Answer(*it, /*waited=*/true);
      it = pulls_.erase(it);
    } else {
      ++it;
    }
  }
}

void ConsistencyController::Answer(PendingPull& p, bool waited) {
  int64_t min = MinLiveClock();
  int64_t gap = min == ConsistencyConfig::kUnbounded
                    ? 0
                    : std::max<int64_t>(0, p.request.clock - min);
  {
    MutexLock lock(&stats_mu_);
    ++stats_.pulls;
    if (waited) {
      double ms = static_cast<double>(clock_->NowMs() - p.arrived_ms);
      ++stats_.pulls_waited;
      stats_.wait_ms_total += ms;
      stats_.wait_ms_max = std::max(stats_.wait_ms_max, ms);
    }
    auto& hist = stats_.staleness_histogram;
    hist[std::min<size_t>(static_cast<size_t>(gap), hist.size() - 1)]++;
    stats_.staleness_max = std::max(stats_.staleness_max, gap);
  }
  cb_.run(p.request);
}

void ConsistencyController::Progress() {
  if (config_.mode == ConsistencyConfig::Mode::kBsp) ApplyReadyPushes();
  AnswerReadyPulls();
  const int64_t min = MinLiveClock();
  while (!counts_.empty() && counts_.begin()->first < min) {
    counts_.erase(counts_.begin());
  }
  MutexLock lock(&stats_mu_);
  stats_.live_workers = live_count_;
  stats_.min_clock = min == ConsistencyConfig::kUnbounded ? 0 : min;
}

std::vector<RawRequest> ConsistencyController::DeferredPushes() const {
  std::vector<RawRequest> out;
  out.reserve(pushes_.size());
  for (const PendingPush& p : pushes_) out.push_back(p.request);
  return out;
}

std::string ConsistencyController::AppliedCounts(
    const std::function<bool(Key)>& in_range) const {
  const size_t n = workers_.size();
  std::map<std::pair<int64_t, Key>, std::vector<uint32_t>> counts;
  for (const auto& c : counts_) {
    for (const auto& k : c.second) {
      if (in_range(k.first)) {
        std::vector<uint32_t>& v = counts[std::make_pair(c.first, k.first)];
        v = k.second;
        v.resize(n, 0);
      }
    }
  }
  for (const PendingPush& p : pushes_) {
    for (Key k : p.request.kvs.keys) {
      auto it = counts.find(std::make_pair(p.request.clock, k));
      if (it != counts.end() && it->second[p.worker] > 0) {
        --it->second[p.worker];
      }
    }
  }
  std::string out(4 + counts.size() * (16 + 4 * n), '\0');
  char* o = &out[0];
  EncodeFixed32(o, static_cast<uint32_t>(n));
  o += 4;
  for (const auto& c : counts) {
    EncodeFixed64(o, static_cast<uint64_t>(c.first.first));
    EncodeFixed64(o + 8, c.first.second);
    o += 16;
    for (uint32_t v : c.second) {
      EncodeFixed32(o, v);
      o += 4;
    }
  }
  return out;
}

StatusOr<size_t> ConsistencyController::ReplaceCopiedData(
    const std::function<bool(const RawRequest&)>& replaced,
    const std::function<bool(Key)>& in_range, const char* counts, size_t size) {
  const size_t n = workers_.size();
  if (size < 4 || DecodeFixed32(counts) != n ||
      (size - 4) % (16 + 4 * n) != 0) {
    return Status::Corruption("push counts of " + std::to_string(size) +
                              " bytes for " + std::to_string(n) + " workers");
  }
  const size_t entries = (size - 4) / (16 + 4 * n);
  for (size_t i = 0; i < entries; ++i) {
    const Key k = DecodeFixed64(counts + 4 + i * (16 + 4 * n) + 8);
    if (!in_range(k)) {
      return Status::Corruption("push counts for key " + std::to_string(k) +
                                ", outside the ranges copied");
    }
  }
  const size_t dropped = EraseIf(&pushes_, [&replaced](const PendingPush& p) {
    return replaced(p.request);
  });
  for (auto& c : counts_) {
    for (auto k = c.second.begin(); k != c.second.end();) {
      k = in_range(k->first) ? c.second.erase(k) : std::next(k);
    }
  }
  const char* p = counts + 4;
  for (size_t i = 0; i < entries; ++i, p += 16 + 4 * n) {
    std::vector<uint32_t>& c =
        counts_[static_cast<int64_t>(DecodeFixed64(p))][DecodeFixed64(p + 8)];
    c.resize(n);
    for (size_t w = 0; w < n; ++w) c[w] = DecodeFixed32(p + 16 + 4 * w);
  }
  // Rounds the counts decide may be complete now, and pushes that waited
  // behind a dropped one may go.
  Progress();
  return dropped;
}

namespace {

// Splits `kvs` into the keys `take` selects and the others, each with its
// values (and lengths). False if its sizes do not fit together (a request
// that was parsed always fits).
bool SplitKVs(const RawKVs& kvs, const std::function<bool(Key)>& take,
              RawKVs* taken, RawKVs* kept) {
  const size_t n = kvs.keys.size();
  if (n == 0) return false;
  const bool lens = !kvs.lens.empty();
  if (lens && kvs.lens.size() != n) return false;
  // Bytes per key (without lengths) or per value (with them).
  size_t unit = 0;
  if (lens) {
    uint64_t values = 0;
    for (int l : kvs.lens) {
      if (l < 0) return false;
      values += static_cast<uint64_t>(l);
    }
    if (values == 0 ? !kvs.vals.empty() : kvs.vals.size() % values != 0) {
      return false;
    }
    unit = values == 0 ? 0 : kvs.vals.size() / values;
  } else {
    if (kvs.vals.size() % n != 0) return false;
    unit = kvs.vals.size() / n;
  }
  std::vector<Key> keys[2];
  std::vector<char> vals[2];
  std::vector<int> lengths[2];
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const int side = take(kvs.keys[i]) ? 0 : 1;
    const size_t bytes = lens ? unit * static_cast<size_t>(kvs.lens[i]) : unit;
    keys[side].push_back(kvs.keys[i]);
    vals[side].insert(vals[side].end(), kvs.vals.data() + offset,
                      kvs.vals.data() + offset + bytes);
    if (lens) lengths[side].push_back(kvs.lens[i]);
    offset += bytes;
  }
  RawKVs* out[2] = {taken, kept};
  for (int side = 0; side < 2; ++side) {
    out[side]->keys = SArray<Key>(std::move(keys[side]));
    out[side]->vals = SArray<char>(std::move(vals[side]));
    out[side]->lens = SArray<int>(std::move(lengths[side]));
  }
  return true;
}

bool AnyKey(const SArray<Key>& keys, const std::function<bool(Key)>& moved) {
  for (Key k : keys) {
    if (moved(k)) return true;
  }
  return false;
}

}  // namespace

ConsistencyController::HandedOver ConsistencyController::HandOver(
    const std::function<bool(const RawRequest&)>& whose,
    const std::function<bool(Key)>& moved) {
  HandedOver out;
  out.counts = AppliedCounts(moved);
  std::vector<PendingPush> kept;
  kept.reserve(pushes_.size());
  for (PendingPush& p : pushes_) {
    if (!whose(p.request) || !AnyKey(p.request.kvs.keys, moved)) {
      kept.push_back(std::move(p));
      continue;
    }
    RawKVs taken, rest;
    if (!SplitKVs(p.request.kvs, moved, &taken, &rest)) {
      LOG(ERROR) << "consistency: a deferred push of "
                 << p.request.kvs.keys.size() << " keys with "
                 << p.request.kvs.vals.size()
                 << " value bytes cannot be cut at the keys that move: it "
                    "moves whole";
      out.pushes.push_back(p.request);
      continue;
    }
    RawRequest part = p.request;
    part.kvs = std::move(taken);
    out.pushes.push_back(std::move(part));
    if (rest.keys.empty()) continue;
    // The rest keeps its place: its keys' rounds, the largest its round.
    std::vector<uint32_t> rounds;
    uint32_t round = 0;
    for (size_t i = 0; i < p.request.kvs.keys.size(); ++i) {
      if (moved(p.request.kvs.keys[i])) continue;
      rounds.push_back(p.rounds[i]);
      round = std::max(round, p.rounds[i]);
    }
    p.request.kvs = std::move(rest);
    p.rounds = std::move(rounds);
    p.round = round;
    kept.push_back(std::move(p));
  }
  // Still in (clock, round, rank, arrival) order: a round only shrank.
  auto order = [](const PendingPush& a, const PendingPush& b) {
    return std::make_tuple(a.request.clock, a.round, a.worker, a.seq) <
           std::make_tuple(b.request.clock, b.round, b.worker, b.seq);
  };
  std::stable_sort(kept.begin(), kept.end(), order);
  pushes_.swap(kept);
  for (auto it = pulls_.begin(); it != pulls_.end();) {
    if (!it->push_pull && AnyKey(it->request.kvs.keys, moved)) {
      out.pulls.push_back(std::move(it->request));
      it = pulls_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& c : counts_) {
    for (auto k = c.second.begin(); k != c.second.end();) {
      k = moved(k->first) ? c.second.erase(k) : std::next(k);
    }
  }
  // Pushes that waited behind a part that left may go, and pulls that
  // waited for one.
  Progress();
  return out;
}

ConsistencyStats ConsistencyController::stats() const {
  MutexLock lock(&stats_mu_);
  ConsistencyStats s = stats_;
  return s;
}

}  // namespace ps
