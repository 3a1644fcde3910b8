// The consistency controller on its own: requests in, decisions out, no
// transport. Time is a fake clock.
#include "consistency/controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "testutil/controller_fixture.h"

namespace ps {
namespace {

struct Event {
  char kind;  // 'r' run, 'a' run_acked, 'k' ack, 'f' fail
  int sender;
  int ts;
  bool push;
  bool pull;
  bool operator==(const Event& o) const {
    return kind == o.kind && sender == o.sender && ts == o.ts &&
           push == o.push && pull == o.pull;
  }
};

std::ostream& operator<<(std::ostream& os, const Event& e) {
  return os << e.kind << "(" << e.sender << "," << e.ts << ","
            << (e.push ? "push" : "") << (e.pull ? "pull" : "") << ")";
}

class ControllerTest : public ControllerFixture {
 protected:
  void OnRun(const RawRequest& r) override { Log('r', r); }
  void OnRunAcked(const RawRequest& r) override { Log('a', r); }
  void OnAck(const RawRequest& r) override { Log('k', r); }
  void OnFail(const RawRequest& r, const Status& s) override {
    Log('f', r);
    last_error_ = s;
  }
  void Log(char kind, const RawRequest& r) {
    events_.push_back(
        {kind, r.sender, static_cast<int>(r.timestamp), r.push, r.pull});
    if (kind == 'a' || (kind == 'r' && r.push)) Apply(r);
  }
  std::vector<Event> Take() {
    std::vector<Event> e;
    e.swap(events_);
    return e;
  }

  std::vector<Event> events_;
  Status last_error_;
};

TEST_F(ControllerTest, AspRunsEverythingAtOnce) {
  Make("asp");
  Push(kA, 1, 5, {1});
  Pull(kA, 2, 5, {1});  // Five iterations ahead of B: asp does not care.
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, true, false},
                                        {'r', kA, 2, false, true}}));
  auto s = c_->stats();
  EXPECT_EQ(s.pulls, 1u);
  EXPECT_EQ(s.pulls_waited, 0u);
  EXPECT_EQ(s.staleness_max, 5);
}

TEST_F(ControllerTest, SspPullWaitsForTheSlowestWithinTheBound) {
  Make("ssp:1");
  Pull(kA, 1, 1, {1});  // 1 - 1 <= 0: answered.
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, false, true}}));
  c_->OnClock(kA, 2);
  Pull(kA, 2, 2, {1});  // Needs B at clock >= 1.
  EXPECT_TRUE(Take().empty());
  clock_.Advance(30);
  Push(kB, 1, 0, {1});  // Pushes are applied on arrival.
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kB, 1, true, false}}));
  c_->OnClock(kB, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 2, false, true}}));
  auto s = c_->stats();
  EXPECT_EQ(s.pulls, 2u);
  EXPECT_EQ(s.pulls_waited, 1u);
  EXPECT_EQ(s.wait_ms_max, 30);
  EXPECT_EQ(s.staleness_max, 1);
  EXPECT_EQ(s.min_clock, 1);
}

// A held pull says what it waits for and on whom, once it has waited long.
TEST_F(ControllerTest, LongHeldPullsAreDescribedWithWhomTheyWaitFor) {
  Make("ssp:1", {kA, kB, kC});
  c_->OnClock(kA, 7);
  c_->OnClock(kB, 6);
  Pull(kA, 1, 7, {1});  // Needs every worker at clock >= 6: C is at 0.
  EXPECT_TRUE(Take().empty());
  EXPECT_TRUE(c_->DescribeLongWaits(5000).empty());  // Not long yet.
  clock_.Advance(6000);
  std::vector<std::string> lines = c_->DescribeLongWaits(5000);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "pull from worker 0 (id 9) at clock 7 has waited 6 s for worker 2 "
            "(id 13) at clock 0 (staleness 1)");

  // bsp: a pull waits for its own pushes of the round, which wait for the
  // other workers.
  Make("bsp");
  Push(kA, 1, 0, {1});
  Take();
  Pull(kA, 2, 0, {1});
  clock_.Advance(6000);
  lines = c_->DescribeLongWaits(5000);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("for its own pushes of clock 0 to be applied: the "
                          "round needs the pushes or the clock of worker 1 "
                          "(id 11) (clock 0)"),
            std::string::npos)
      << lines[0];
  // At most `max` lines and a count of the rest.
  for (int ts = 3; ts < 10; ++ts) Pull(kA, ts, 0, {1});
  clock_.Advance(6000);
  lines = c_->DescribeLongWaits(5000, 2);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "and 6 more pulls held as long");
}

TEST_F(ControllerTest, SspPushPullAppliesThePushAndHoldsThePull) {
  Make("ssp:0");
  c_->OnClock(kA, 1);
  c_->OnRequest(Req(kA, 1, 1, true, true, {1}));
  EXPECT_EQ(Take(), (std::vector<Event>{{'a', kA, 1, true, false}}));
  c_->OnClock(kB, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, false, true}}));
}

TEST_F(ControllerTest, BspAcksPushesAndAppliesARoundInRankOrder) {
  Make("bsp", {kA, kB, kC});
  Push(kC, 1, 0, {1, 2});
  Push(kB, 1, 0, {1, 2});
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kC, 1, true, false},
                                        {'k', kB, 1, true, false}}));
  EXPECT_TRUE(applied_.empty());
  Push(kA, 1, 0, {1, 2});  // The round is complete.
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kA, 1, true, false},
                                        {'a', kA, 1, true, false},
                                        {'a', kB, 1, true, false},
                                        {'a', kC, 1, true, false}}));
}

TEST_F(ControllerTest, BspPullSeesExactlyThePreviousIterations) {
  Make("bsp");
  // Iteration 0: A pulls, pushes, ends it; B is slow.
  Pull(kA, 1, 0, {1});
  Push(kA, 2, 0, {1});
  c_->OnClock(kA, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, false, true},
                                        {'k', kA, 2, true, false}}));
  // A's pull of iteration 1 waits for B to finish iteration 0.
  Pull(kA, 3, 1, {1});
  EXPECT_TRUE(Take().empty());
  // B's pull of iteration 0 does not see A's iteration-0 push.
  Pull(kB, 1, 0, {1});
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kB, 1, false, true}}));
  EXPECT_TRUE(applied_.empty());
  Push(kB, 2, 0, {1});
  // Round (0, 0) of key 1 is complete: A's push then B's, then A's pull
  // still waits for B's clock.
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kB, 2, true, false},
                                        {'a', kA, 2, true, false},
                                        {'a', kB, 2, true, false}}));
  c_->OnClock(kB, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 3, false, true}}));
}

TEST_F(ControllerTest, BspWithoutClocksAggregatesTheKthPushOfEveryWorker) {
  Make("bsp");
  // dist_sync: push then pull, no Clock().
  Push(kA, 1, 0, {1});
  Pull(kA, 2, 0, {1});  // Waits for the round of its own push.
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kA, 1, true, false}}));
  Push(kA, 3, 0, {2});  // Another key, round 0 of its own.
  Take();
  Push(kB, 1, 0, {1});
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kB, 1, true, false},
                                        {'a', kA, 1, true, false},
                                        {'a', kB, 1, true, false},
                                        {'r', kA, 2, false, true}}));
  // A push-pull is answered once its round is complete, with the sum.
  c_->OnRequest(Req(kB, 2, 0, true, true, {2}));
  EXPECT_EQ(Take(), (std::vector<Event>{{'a', kA, 3, true, false},
                                        {'a', kB, 2, true, false},
                                        {'r', kB, 2, false, true}}));
}

TEST_F(ControllerTest, BspSecondPushOfAKeyWaitsForItsOwnRound) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  Push(kA, 2, 0, {1});  // Round 1.
  Push(kB, 1, 0, {1});  // Completes round 0 only.
  Take();
  EXPECT_EQ(applied_[1], (std::vector<int>{kA, kB}));
  Push(kB, 2, 0, {1});
  EXPECT_EQ(applied_[1], (std::vector<int>{kA, kB, kA, kB}));
}

// Whatever the interleaving of the workers' messages, every key sees its
// pushes in the same order: what makes bsp bitwise reproducible.
TEST_F(ControllerTest, BspOrderIsIndependentOfArrivalOrder) {
  struct Op {
    int worker;
    char what;  // 'p' push, 'l' pull, 'c' clock
    std::vector<Key> keys;
  };
  // Each worker's program: 4 iterations of pull, push (keys overlap across
  // workers and vary by iteration), clock.
  std::vector<std::vector<Op>> programs(3);
  const int ids[] = {kA, kB, kC};
  for (int w = 0; w < 3; ++w) {
    for (int it = 0; it < 4; ++it) {
      std::vector<Key> keys = {static_cast<Key>(it % 2),
                               static_cast<Key>(2 + (w + it) % 3), 7};
      std::sort(keys.begin(), keys.end());
      programs[w].push_back({ids[w], 'l', keys});
      programs[w].push_back({ids[w], 'p', keys});
      if (w == 1 && it == 2) programs[w].push_back({ids[w], 'p', {7}});
      programs[w].push_back({ids[w], 'c', {}});
    }
  }
  std::map<Key, std::vector<int>> first;
  for (int seed = 0; seed < 50; ++seed) {
    Make("bsp", {kA, kB, kC});
    applied_.clear();
    std::mt19937 rng(seed);
    std::vector<size_t> next(3, 0);
    std::vector<int64_t> clock(3, 0);
    std::vector<int> ts(3, 0);
    // A worker whose pull is not answered yet cannot go on (it Waits).
    std::vector<int> blocked_on(3, -1);
    int steps = 0;
    while (steps++ < 10000) {
      std::vector<int> ready;
      for (int w = 0; w < 3; ++w) {
        if (next[w] == programs[w].size()) continue;
        if (blocked_on[w] >= 0) {
          bool answered = false;
          for (const Event& e : events_) {
            answered |= e.kind == 'r' && e.sender == ids[w] &&
                        e.ts == blocked_on[w] && e.pull;
          }
          if (!answered) continue;
          blocked_on[w] = -1;
        }
        ready.push_back(w);
      }
      if (ready.empty()) break;
      int w = ready[rng() % ready.size()];
      const Op& op = programs[w][next[w]++];
      if (op.what == 'c') {
        c_->OnClock(op.worker, ++clock[w]);
      } else if (op.what == 'p') {
        Push(op.worker, ++ts[w], clock[w], op.keys);
      } else {
        Pull(op.worker, ++ts[w], clock[w], op.keys);
        blocked_on[w] = ts[w];
      }
    }
    for (int w = 0; w < 3; ++w) {
      ASSERT_EQ(next[w], programs[w].size()) << "seed " << seed << " stuck";
    }
    if (seed == 0) {
      first = applied_;
      EXPECT_EQ(first[7].size(), 13u);
    } else {
      EXPECT_EQ(applied_, first) << "seed " << seed;
    }
  }
}

TEST_F(ControllerTest, DeadWorkerIsNoLongerWaitedFor) {
  Make("bsp", {kA, kB, kC});
  c_->OnClock(kA, 1);
  c_->OnClock(kB, 1);
  Pull(kA, 1, 1, {1});  // Waits for C.
  EXPECT_TRUE(Take().empty());
  c_->OnWorkerFailed(kC, Status::Unavailable("worker 2 died"));
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, false, true}}));
  EXPECT_EQ(c_->stats().live_workers, 2);
  // Its late messages are ignored.
  Push(kC, 1, 0, {1});
  Pull(kC, 2, 0, {1});
  EXPECT_TRUE(Take().empty());
}

TEST_F(ControllerTest, DeadWorkersUnfinishedPushesAreDropped) {
  Make("bsp", {kA, kB, kC});
  Push(kC, 1, 0, {2});  // Pending: A and B are still in iteration 0.
  c_->OnClock(kA, 1);
  Pull(kA, 1, 1, {1, 2});
  Take();
  c_->OnWorkerFailed(kC, Status::Unavailable("worker 2 died"));
  EXPECT_TRUE(Take().empty());  // Still waiting for B.
  EXPECT_EQ(c_->stats().pushes_dropped, 1u);
  c_->OnClock(kB, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kA, 1, false, true}}));
  EXPECT_TRUE(applied_[2].empty());
}

TEST_F(ControllerTest, FailAllAnswersEveryWaitingPull) {
  Make("ssp:0");
  c_->OnClock(kA, 3);
  Pull(kA, 1, 3, {1});
  EXPECT_TRUE(Take().empty());
  c_->OnFailAll(Status::Aborted("the scheduler aborted the cluster"));
  EXPECT_EQ(Take(), (std::vector<Event>{{'f', kA, 1, false, true}}));
  EXPECT_EQ(last_error_.code(), Status::Code::kAborted);
  Pull(kB, 1, 0, {1});  // Later requests fail too.
  EXPECT_EQ(Take(), (std::vector<Event>{{'f', kB, 1, false, true}}));
  EXPECT_EQ(c_->stats().pulls_failed, 1u);
}

TEST_F(ControllerTest, RequestsFromNonWorkersRunAtOnce) {
  Make("bsp");
  Push(8, 1, 0, {1});  // A server acting as a client.
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', 8, 1, true, false}}));
}

TEST_F(ControllerTest, RequestClockAdvancesTheVectorClock) {
  // A request at clock c means its sender finished c - 1 iterations even if
  // the Clock notice is still on its way from another thread.
  Make("ssp:0");
  c_->OnClock(kA, 2);
  Pull(kA, 1, 2, {1});
  EXPECT_TRUE(Take().empty());
  Pull(kB, 1, 2, {1});
  EXPECT_EQ(Take(), (std::vector<Event>{{'r', kB, 1, false, true},
                                        {'r', kA, 1, false, true}}));
}

// A copy of another server's data under bsp (docs/replication.md,
// "Restoring copies"): the copying server sends the push counts of its
// applied pushes; the receiving server drops the copies it deferred (the
// state holds those applied, the rest come again) and takes the counts, so
// the pushes that come again fall in the rounds they had.
TEST_F(ControllerTest, ACopiedRangeReplacesDeferredCopiesAndPushCounts) {
  Make("bsp");
  // The copying server: A's first push and B's are round 0 and applied;
  // A's second is round 1 and waits for B's second.
  Push(kA, 1, 0, {1});
  Push(kA, 2, 0, {1});
  Push(kB, 1, 0, {1});
  Push(kA, 3, 0, {2});  // Waits for B: no count of key 2 goes.
  Take();
  const std::string counts = c_->AppliedCounts([](Key k) { return k < 100; });
  // (clock 0, key 1): A 1, B 1; (clock 0, key 2): A 0, B 0.
  ASSERT_EQ(counts.size(), 4u + 2 * (16 + 2 * 4));
  std::unique_ptr<ConsistencyController> source = std::move(c_);
  applied_.clear();

  // The receiving server holds, deferred, copies of A's two pushes (it has
  // not seen B's yet) and a push of its own data (key 500).
  Make("bsp");
  RawRequest mine = Req(kA, 7, 0, true, false, {500});
  c_->OnRequest(mine);
  for (int ts : {1, 2}) {
    RawRequest copy = Req(kA, ts, 0, true, false, {1});
    copy.replica_of = 4;
    c_->OnRequest(copy);
  }
  Take();
  auto in_range = [](Key k) { return k < 100; };
  auto copied = [&](const RawRequest& r) {
    return r.replica_of != 0 && in_range(r.kvs.keys[0]);
  };
  StatusOr<size_t> dropped =
      c_->ReplaceCopiedData(copied, in_range, counts.data(), counts.size());
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2u);
  EXPECT_TRUE(Take().empty());
  // A's second push comes again: round 1, behind B's second.
  RawRequest again = Req(kA, 2, 0, true, false, {1});
  again.replica_of = 4;
  c_->OnRequest(again);
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kA, 2, true, false}}))
      << "round 1 must wait for B's second push";
  RawRequest b2 = Req(kB, 2, 0, true, false, {1});
  b2.replica_of = 4;
  c_->OnRequest(b2);
  EXPECT_EQ(Take(), (std::vector<Event>{{'k', kB, 2, true, false},
                                        {'a', kA, 2, true, false},
                                        {'a', kB, 2, true, false}}));
  // The receiving server's own push is untouched: still waiting for B.
  EXPECT_EQ(applied_.count(500), 0u);
  EXPECT_EQ(applied_[1], (std::vector<int>{kA, kB}));
}

TEST_F(ControllerTest, MalformedCopiedPushCountsChangeNothing) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  Push(kB, 1, 0, {1});
  Take();
  const std::string good = c_->AppliedCounts([](Key) { return true; });
  Make("bsp", {kA, kB, kC});  // Another number of workers.
  RawRequest copy = Req(kA, 1, 0, true, false, {1});
  copy.replica_of = 4;
  c_->OnRequest(copy);
  Take();
  auto all = [](const RawRequest&) { return true; };
  auto any = [](Key) { return true; };
  const std::string cases[] = {
      good,                                // counts for 2 workers, not 3
      "",                                  // empty
      good.substr(0, 3),                   // short
      std::string("\x03\0\0\0", 4) + "x",  // a partial entry
  };
  for (const std::string& bad : cases) {
    StatusOr<size_t> r =
        c_->ReplaceCopiedData(all, any, bad.data(), bad.size());
    EXPECT_FALSE(r.ok());
  }
  // The deferred copy is still there: applied once B and C pass clock 0.
  c_->OnClock(kB, 1);
  c_->OnClock(kC, 1);
  EXPECT_EQ(Take(), (std::vector<Event>{{'a', kA, 1, true, false}}));
  // Counts for a key outside the ranges copied.
  Make("bsp");
  StatusOr<size_t> r = c_->ReplaceCopiedData(
      all, [](Key k) { return k > 1; }, good.data(), good.size());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside"), std::string::npos);
}

}  // namespace
}  // namespace ps
