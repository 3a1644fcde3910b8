// The consistency controller with workers that come and go (elastic
// workers, docs/consistency.md): a dead worker whose rank is held is
// waited for as a slow one, a restarted one resumes at its clock and its
// pushes made before it died are not applied twice, a worker that is gone
// is dropped from the clocks, and a joiner takes part from the next clock.
// No transport; time is a fake clock.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testutil/controller_fixture.h"

namespace ps {
namespace {

class ElasticControllerTest : public ControllerFixture {
 protected:
  void OnRun(const RawRequest& r) override {
    if (r.pull) answered_.push_back(r.sender);
    if (r.push) Apply(r);
  }
  void OnRunAcked(const RawRequest& r) override { Apply(r); }
  void OnAck(const RawRequest& r) override { acked_.push_back(r.sender); }
  void OnFail(const RawRequest& r, const Status&) override {
    failed_.push_back(r.sender);
  }
  std::vector<int> Applied(Key k) { return applied_[k]; }

  std::vector<int> acked_;
  std::vector<int> answered_;  // pulls answered, by sender
  std::vector<int> failed_;
};

// B pushed key 1 of its clock 0 and died before it pushed key 2. Its rank
// is held: A's push of key 2 waits for it as for a slow worker. Restarted,
// B does clock 0 again: its push of key 1 is recognised and acknowledged,
// not applied again; its push of key 2 completes the round. Every key ends
// with one push of each worker, in rank order, as if B had been slow.
TEST_F(ElasticControllerTest, BspRestartedWorkerIsNotAppliedTwice) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  Push(kB, 1, 0, {1});  // The round of key 1 is complete: applied.
  Push(kA, 2, 0, {2});  // Waits for B's push of key 2, or its clock.
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  EXPECT_TRUE(Applied(2).empty());
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  EXPECT_EQ(c_->stats().live_workers, 2);  // Held, not dropped.
  EXPECT_TRUE(Applied(2).empty());
  c_->OnClock(kA, 1);
  Pull(kA, 3, 1, {1, 2});  // Waits for B to finish clock 0.
  EXPECT_TRUE(answered_.empty());

  c_->OnWorkerBack(kB);
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{0}, true));
  acked_.clear();
  Push(kB, 1, 0, {1});  // Its first incarnation's: acknowledged only.
  EXPECT_EQ(acked_, (std::vector<int>{kB}));
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
  Push(kB, 2, 0, {2});  // New: completes the round of key 2.
  EXPECT_EQ(Applied(2), (std::vector<int>{kA, kB}));
  EXPECT_TRUE(answered_.empty());
  c_->OnClock(kB, 1);
  EXPECT_EQ(answered_, (std::vector<int>{kA}));
  // Past the clock it resumed at, its pushes are new ones.
  Push(kA, 4, 1, {1});
  Push(kB, 3, 1, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB, kA, kB}));
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
}

// bsp commits (docs/consistency.md, "A restart under bsp is exact"): a
// push counts toward its round only once its worker says every part of its
// request reached its server (pushed_below past it).
TEST_F(ElasticControllerTest, BspUncommittedPushCountsForNobody) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  RawRequest b = Req(kB, 1, 0, true, false, {1});
  b.committed = false;
  c_->OnRequest(b);
  EXPECT_EQ(acked_, (std::vector<int>{kA, kB}));  // Acknowledged on arrival.
  EXPECT_TRUE(Applied(1).empty());  // A's round waits for B's commit.
  c_->OnClock(kB, 1);               // B finished clock 0: A's push goes.
  EXPECT_EQ(Applied(1), (std::vector<int>{kA}));
  EXPECT_EQ(c_->OnCommitted(kB, 0, 1), 0u);  // Not below 1: nothing.
  EXPECT_EQ(c_->OnCommitted(kB, 0, 2), 1u);
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  // A later push below what B said is committed on arrival.
  Push(kA, 2, 1, {1});
  RawRequest late = Req(kB, 1, 1, true, false, {1});
  late.committed = false;
  c_->OnRequest(late);
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB, kA, kB}));
}

// B's push reached this server but not every server of its request, and B
// died: back, its first incarnation's uncommitted push is dropped (it never
// counted), so the re-done push is applied, once; a committed one is
// recognised as before. The restarted worker's timestamps start afresh.
TEST_F(ElasticControllerTest, BspRestartDropsUncommittedPushes) {
  Make("bsp");
  Push(kA, 1, 0, {1, 2});
  RawRequest done = Req(kB, 5, 0, true, false, {1});
  done.committed = false;
  c_->OnRequest(done);
  RawRequest half = Req(kB, 6, 0, true, false, {2});
  half.committed = false;
  c_->OnRequest(half);
  EXPECT_EQ(c_->OnCommitted(kB, 0, 6), 1u);  // Push 5 reached everywhere.
  EXPECT_TRUE(Applied(1).empty());  // A's push waits behind key 2's round.
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  c_->OnWorkerBack(kB);
  EXPECT_EQ(c_->stats().pushes_dropped, 1u);
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{0}, true));
  RawRequest again1 = Req(kB, 1, 0, true, false, {1});
  again1.committed = false;
  c_->OnRequest(again1);  // Its first incarnation's push 5: redone.
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
  RawRequest again2 = Req(kB, 2, 0, true, false, {2});
  again2.committed = false;
  c_->OnRequest(again2);  // New: it counts once committed.
  EXPECT_TRUE(Applied(2).empty());
  // What the first incarnation said (6) is forgotten: 3 is news.
  EXPECT_EQ(c_->OnCommitted(kB, 0, 3), 1u);
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  EXPECT_EQ(Applied(2), (std::vector<int>{kA, kB}));
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
}

// A push twice to one key in a clock: the restarted worker's first push
// to it is its first incarnation's, the second a new one.
TEST_F(ElasticControllerTest, BspRedoCountsPushesPerKey) {
  Make("bsp");
  Push(kB, 1, 0, {5});  // B's round 0 of key 5, before it died.
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  c_->OnWorkerBack(kB);
  Push(kB, 1, 0, {5});  // Round 0 again: redone.
  Push(kB, 2, 0, {5});  // Round 1: new.
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
  Push(kA, 1, 0, {5});
  Push(kA, 2, 0, {5});
  EXPECT_EQ(Applied(5), (std::vector<int>{kA, kB, kA, kB}));
}

// B had finished clock 0 here before it died (its clock notice came): a
// push of its clock 0 again is its first incarnation's, and it resumes at
// clock 1 here.
TEST_F(ElasticControllerTest, BspPushBelowTheResumedClockIsRedone) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  Push(kB, 1, 0, {1});
  c_->OnClock(kB, 1);
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  c_->OnWorkerBack(kB);
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{1}, true));
  Push(kB, 1, 0, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
}

// A worker that is gone (left, or not back within its hold) is dropped:
// what waited for it goes on.
TEST_F(ElasticControllerTest, SspGoneWorkerIsDroppedFromTheClocks) {
  Make("ssp:1");
  c_->OnClock(kA, 2);
  Pull(kA, 1, 2, {1});  // Needs B at clock >= 1.
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  EXPECT_TRUE(answered_.empty());  // Held: still waited for.
  c_->OnWorkerFailed(kB, Status::Unavailable("B is gone"));
  EXPECT_EQ(answered_, (std::vector<int>{kA}));
  EXPECT_EQ(c_->stats().live_workers, 1);
}

// Under asp a worker that dies is dropped at once: asp waits for nobody.
TEST_F(ElasticControllerTest, AspAwayDropsAtOnce) {
  Make("asp");
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  EXPECT_EQ(c_->stats().live_workers, 1);
  Push(kA, 1, 0, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA}));
}

// C joins while A and B are at clock 3: rounds of clock 3 do not wait for
// it; from clock 4 on every round has its push, in rank order.
TEST_F(ElasticControllerTest, BspJoinerTakesPartFromTheNextClock) {
  Make("bsp");
  c_->OnClock(kA, 3);
  c_->OnClock(kB, 3);
  Push(kA, 1, 3, {1});
  c_->OnWorkerJoined(kC);
  EXPECT_EQ(c_->JoinClock(kC), std::make_pair(int64_t{4}, false));
  EXPECT_EQ(c_->stats().live_workers, 3);
  Push(kB, 1, 3, {1});  // The round of clock 3 is complete without C.
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  c_->OnClock(kC, 4);  // JoinClock's notice.
  c_->OnClock(kA, 4);
  c_->OnClock(kB, 4);
  Push(kC, 1, 4, {1});
  Push(kA, 2, 4, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));  // Waits for B.
  Push(kB, 2, 4, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB, kA, kB, kC}));
  // Its pull at clock 4 waits for nobody's earlier rounds.
  Pull(kC, 2, 4, {1});
  EXPECT_EQ(answered_, (std::vector<int>{kC}));
}

// A rank no longer waited for is taken afresh: the worker is live again
// from the next clock, and its old pushes do not count.
TEST_F(ElasticControllerTest, VacantRankIsTakenAfresh) {
  Make("bsp");
  c_->OnClock(kA, 2);
  c_->OnWorkerFailed(kB, Status::Unavailable("B is gone"));
  EXPECT_EQ(c_->stats().live_workers, 1);
  c_->OnWorkerJoined(kB);
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{3}, false));
  EXPECT_EQ(c_->stats().live_workers, 2);
  // A's pull at clock 2 does not wait for B (it starts at 3).
  Pull(kA, 1, 2, {1});
  EXPECT_EQ(answered_, (std::vector<int>{kA}));
  // An unknown id below the known ones is not taken.
  c_->OnWorkerJoined(7);
  EXPECT_EQ(c_->stats().live_workers, 2);
}

// The restarted worker's clock query may come before the scheduler's
// notice that it is back (they travel on different links): the query takes
// it back, and the notice then changes nothing.
TEST_F(ElasticControllerTest, ClockQueryBeforeTheNoticeTakesTheWorkerBack) {
  Make("bsp");
  Push(kA, 1, 0, {1});
  Push(kB, 1, 0, {1});
  c_->OnWorkerAway(kB, Status::Unavailable("B died"));
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{0}, true));
  c_->OnWorkerBack(kB);  // The notice, late: nothing changes.
  Push(kB, 1, 0, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
  EXPECT_EQ(c_->stats().pushes_redone, 1u);
}

// The same for a worker that takes a vacant rank afresh: the query takes it
// in at the next clock, and the later notice keeps what it has pushed.
TEST_F(ElasticControllerTest, ClockQueryBeforeTheNoticeTakesTheWorkerIn) {
  Make("bsp");
  c_->OnClock(kA, 1);
  c_->OnWorkerFailed(kB, Status::Unavailable("B is gone"));
  EXPECT_EQ(c_->JoinClock(kB), std::make_pair(int64_t{2}, false));
  c_->OnClock(kB, 2);
  Push(kB, 1, 2, {1});
  c_->OnWorkerJoined(kB);  // The notice, late: nothing changes.
  EXPECT_EQ(c_->stats().live_workers, 2);
  c_->OnClock(kA, 2);
  Push(kA, 1, 2, {1});
  EXPECT_EQ(Applied(1), (std::vector<int>{kA, kB}));
}

}  // namespace
}  // namespace ps
