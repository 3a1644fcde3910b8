// FaultVan over InProcVan, without nodes: three vans (ids 1, 2, 3) that
// send each other numbered messages, and what each fault does to them.
#include "transport/fault_van.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "testutil/inproc_cluster.h"
#include "transport/inproc_van.h"
#include "util/mutex.h"

namespace ps {
namespace {

struct Received {
  int sender = 0;
  int timestamp = 0;
  Control control = Control::kNone;
  const char* frame = nullptr;  // the data frame's buffer
  int value = 0;                // its first int
};

class FaultVanTest : public ::testing::Test {
 protected:
  static constexpr int kIds = 3;  // ids 1..3

  void Build(uint64_t seed, const FaultPlan& plan = FaultPlan()) {
    injector_ = std::make_unique<FaultInjector>(seed);
    ASSERT_TRUE(injector_->set_plan(plan).ok());
    std::vector<int> ports;
    for (int id = 1; id <= kIds; ++id) {
      vans_.push_back(std::make_unique<FaultVan>(
          std::make_unique<InProcVan>(&network_), injector_.get()));
      StatusOr<int> port = vans_.back()->Start("h", 0, [this](Message&& m) {
        Received r;
        r.sender = m.meta.sender;
        r.timestamp = m.meta.timestamp;
        r.control = m.meta.control;
        if (!m.data.empty()) {
          r.frame = m.data[0].data();
          std::memcpy(&r.value, m.data[0].data(), sizeof(int));
        }
        MutexLock lock(&mu_);
        got_[m.meta.recipient].push_back(r);
      });
      ASSERT_TRUE(port.ok()) << port.status();
      ports.push_back(port.value());
    }
    for (auto& van : vans_) {
      for (int id = 1; id <= kIds; ++id) {
        ASSERT_TRUE(van->Connect(id, "h", ports[id - 1], "").ok());
      }
    }
  }

  void TearDown() override {
    vans_.clear();
    injector_.reset();
  }

  // A data message numbered `ts` from `from` to `to`, with one frame
  // holding `ts`.
  Status Send(int from, int to, int ts, Control control = Control::kNone) {
    Message m;
    m.meta.sender = from;
    m.meta.recipient = to;
    m.meta.timestamp = ts;
    m.meta.control = control;
    if (control == Control::kNone) {
      m.meta.request = true;
      m.meta.push = true;
      m.AddData(SArray<int>({ts}));
    }
    return vans_[from - 1]->Send(std::move(m));
  }

  std::vector<Received> Got(int id) {
    MutexLock lock(&mu_);
    return got_[id];
  }
  size_t Count(int id) { return Got(id).size(); }
  bool WaitFor(int id, size_t n) {
    return WaitUntil([&] { return Count(id) >= n; });
  }
  // Timestamps received by `id`, in arrival order.
  std::vector<int> Timestamps(int id) {
    std::vector<int> ts;
    for (const Received& r : Got(id)) ts.push_back(r.timestamp);
    return ts;
  }
  // Sends data messages 0..n-1 from 1 to 2.
  void SendBarrage(int n) {
    for (int ts = 0; ts < n; ++ts) {
      ASSERT_TRUE(Send(1, 2, ts).ok());
    }
  }

  InProcNetwork network_;
  std::unique_ptr<FaultInjector> injector_;
  std::vector<std::unique_ptr<FaultVan>> vans_;
  Mutex mu_;
  std::map<int, std::vector<Received>> got_ GUARDED_BY(mu_);
};

// A marker from 3 to 2 sent after `n` messages from 1 to 2 arrives after
// them (the inbox keeps sending order): the end of what 1 sent.
constexpr int kMarker = 1000000;

TEST_F(FaultVanTest, WithoutAPlanEverythingPassesInOrder) {
  Build(1);
  SendBarrage(100);
  ASSERT_TRUE(WaitFor(2, 100));
  std::vector<int> want(100);
  for (int i = 0; i < 100; ++i) want[i] = i;
  EXPECT_EQ(Timestamps(2), want);
  FaultCounters c = injector_->counters();
  EXPECT_EQ(c.messages, 100u);
  EXPECT_EQ(c.matched, 100u);  // data messages, by default
  EXPECT_EQ(c.dropped + c.duplicated + c.delayed + c.reordered, 0u);
  EXPECT_EQ(vans_[0]->counters().sent_messages, 100u);
  EXPECT_EQ(vans_[1]->counters().received_messages, 100u);
  EXPECT_TRUE(injector_->events().empty());
}

TEST_F(FaultVanTest, DropLosesTheDrawnShareAndSendStillSucceeds) {
  FaultPlan plan;
  plan.drop = 0.3;
  Build(7, plan);
  SendBarrage(2000);
  ASSERT_TRUE(Send(3, 2, kMarker, Control::kHeartbeat).ok());  // not matched
  FaultCounters c = injector_->counters();
  ASSERT_TRUE(WaitFor(2, 2000 - c.dropped + 1));
  EXPECT_GT(c.dropped, 500u);
  EXPECT_LT(c.dropped, 700u);
  EXPECT_EQ(c.matched, 2000u);
  EXPECT_EQ(c.messages, 2001u);
  // Exactly the events' timestamps are missing, and the rest kept order.
  std::set<int> dropped;
  for (const FaultEvent& e : injector_->events()) {
    EXPECT_EQ(e.kind, FaultEvent::Kind::kDrop);
    dropped.insert(e.meta.timestamp);
  }
  EXPECT_EQ(dropped.size(), c.dropped);
  std::vector<int> want;
  for (int ts = 0; ts < 2000; ++ts) {
    if (!dropped.count(ts)) want.push_back(ts);
  }
  want.push_back(kMarker);
  EXPECT_EQ(Timestamps(2), want);
}

TEST_F(FaultVanTest, DuplicateDeliversACopyWithItsOwnBuffer) {
  FaultPlan plan;
  plan.duplicate = 1;
  plan.max_delay = 3;
  Build(3, plan);
  SendBarrage(50);
  EXPECT_EQ(injector_->counters().duplicated, 50u);
  injector_->Flush();
  ASSERT_TRUE(WaitFor(2, 100));
  std::map<int, std::vector<Received>> by_ts;
  for (const Received& r : Got(2)) by_ts[r.timestamp].push_back(r);
  ASSERT_EQ(by_ts.size(), 50u);
  for (const auto& entry : by_ts) {
    ASSERT_EQ(entry.second.size(), 2u) << "ts " << entry.first;
    EXPECT_EQ(entry.second[0].value, entry.first);
    EXPECT_EQ(entry.second[1].value, entry.first);
    EXPECT_NE(entry.second[0].frame, entry.second[1].frame);
  }
  FaultCounters c = injector_->counters();
  EXPECT_EQ(c.released, 50u);
  EXPECT_EQ(c.held, 0u);
}

// Delayed control messages (data is not targeted) are overtaken by what is
// sent after them and released after at most max_delay further messages.
TEST_F(FaultVanTest, DelayHoldsAMessageForSomeFurtherMessages) {
  FaultPlan plan;
  plan.delay = 1;
  plan.max_delay = 1;
  plan.target.kind = FaultTarget::Kind::kControl;
  Build(5, plan);
  ASSERT_TRUE(Send(1, 2, 0, Control::kHeartbeat).ok());
  EXPECT_EQ(injector_->held(), 1u);
  ASSERT_TRUE(Send(3, 2, 1).ok());  // data: passes, then releases the beat
  ASSERT_TRUE(WaitFor(2, 2));
  std::vector<Received> got = Got(2);
  EXPECT_EQ(got[0].timestamp, 1);
  EXPECT_EQ(got[1].control, Control::kHeartbeat);
  FaultCounters c = injector_->counters();
  EXPECT_EQ(c.delayed, 1u);
  EXPECT_EQ(c.released, 1u);
  EXPECT_EQ(c.held, 0u);
}

TEST_F(FaultVanTest, StepAndFlushReleaseHeldMessagesOldestFirst) {
  FaultPlan plan;
  plan.delay = 1;
  plan.max_delay = 1000000;
  Build(5, plan);
  SendBarrage(10);
  EXPECT_EQ(injector_->held(), 10u);
  EXPECT_EQ(Count(2), 0u);
  EXPECT_TRUE(injector_->Step());
  ASSERT_TRUE(WaitFor(2, 1));
  EXPECT_EQ(Timestamps(2), std::vector<int>{0});
  EXPECT_EQ(injector_->Flush(), 9u);
  EXPECT_FALSE(injector_->Step());
  ASSERT_TRUE(WaitFor(2, 10));
  std::vector<int> want(10);
  for (int i = 0; i < 10; ++i) want[i] = i;
  EXPECT_EQ(Timestamps(2), want);
}

// StepLink releases the oldest held message of one link, and pins the
// rest of that link: messages sent since on other links do not release
// them, so a test decides how two links' deliveries interleave.
TEST_F(FaultVanTest, StepLinkReleasesOneLinksOldestAndKeepsItsRest) {
  FaultPlan plan;
  plan.fifo = true;
  plan.delay = 1;
  plan.max_delay = 1000000;
  plan.target.links = {{1, 2}, {3, 2}};
  Build(6, plan);
  for (int ts = 0; ts < 3; ++ts) {
    ASSERT_TRUE(Send(1, 2, ts).ok());
    ASSERT_TRUE(Send(3, 2, kMarker + ts).ok());
  }
  EXPECT_EQ(injector_->held(), 6u);
  EXPECT_FALSE(injector_->StepLink(2, 1));  // holds nothing
  EXPECT_TRUE(injector_->StepLink(3, 2));
  EXPECT_TRUE(injector_->StepLink(1, 2));
  // Traffic elsewhere releases none of the rest (their behind-the-head
  // messages were due at once before).
  for (int ts = 0; ts < 20; ++ts) ASSERT_TRUE(Send(1, 3, ts).ok());
  ASSERT_TRUE(WaitFor(3, 20));
  EXPECT_EQ(injector_->held(), 4u);
  EXPECT_TRUE(injector_->StepLink(3, 2));
  EXPECT_TRUE(injector_->StepLink(3, 2));
  EXPECT_FALSE(injector_->StepLink(3, 2));
  EXPECT_EQ(injector_->Flush(), 2u);
  ASSERT_TRUE(WaitFor(2, 6));
  EXPECT_EQ(Timestamps(2),
            (std::vector<int>{kMarker, 0, kMarker + 1, kMarker + 2, 1, 2}));
}

// A reordered message is overtaken by the next one on its link.
TEST_F(FaultVanTest, ReorderLetsTheNextMessageOnTheLinkOvertake) {
  FaultPlan plan;
  plan.reorder = 1;
  plan.max_delay = 1000000;
  plan.target.kind = FaultTarget::Kind::kControl;
  Build(9, plan);
  ASSERT_TRUE(Send(1, 2, 0, Control::kHeartbeat).ok());
  ASSERT_TRUE(Send(1, 3, 1).ok());  // another link: no overtaking
  EXPECT_EQ(injector_->held(), 1u);
  ASSERT_TRUE(Send(1, 2, 2).ok());  // same link: overtakes
  ASSERT_TRUE(WaitFor(2, 2));
  std::vector<Received> got = Got(2);
  EXPECT_EQ(got[0].timestamp, 2);
  EXPECT_EQ(got[1].control, Control::kHeartbeat);
  EXPECT_EQ(injector_->counters().reordered, 1u);
}

// With fifo, a delay stalls its link: later messages of the link (faulted
// or not, data or control) wait behind the held one and arrive in sending
// order, while other links pass; duplicates follow their original at once.
TEST_F(FaultVanTest, FifoKeepsEachLinksOrder) {
  FaultPlan plan;
  plan.fifo = true;
  plan.delay = 0.3;
  plan.duplicate = 0.2;
  plan.max_delay = 5;
  plan.target.kind = FaultTarget::Kind::kData;
  Build(11, plan);
  const int n = 200;
  for (int ts = 0; ts < n; ++ts) {
    ASSERT_TRUE(Send(1, 2, ts).ok());
    if (ts % 7 == 0) {
      ASSERT_TRUE(Send(1, 2, ts, Control::kHeartbeat).ok());
    }
    ASSERT_TRUE(Send(3, 2, kMarker + ts).ok());
  }
  injector_->Flush();
  const FaultCounters c = injector_->counters();
  EXPECT_GT(c.delayed, 10u);
  EXPECT_GT(c.duplicated, 10u);
  ASSERT_TRUE(WaitFor(2, 2 * n + (n + 6) / 7 + c.duplicated));
  // Each link's messages in sending order, a duplicate right after its
  // original.
  std::map<int, std::vector<std::pair<int, Control>>> links;
  for (const Received& r : Got(2)) {
    links[r.sender].emplace_back(r.timestamp, r.control);
  }
  for (const auto& link : links) {
    const auto& seq = link.second;
    for (size_t i = 1; i < seq.size(); ++i) {
      EXPECT_LE(seq[i - 1].first, seq[i].first)
          << "link " << link.first << "->2 out of order at " << i;
    }
  }
  // And delays did stall link 1->2 while 3->2 went on: some marker
  // overtook some message of link 1->2.
  std::vector<Received> got = Got(2);
  bool overtaken = false;
  for (size_t i = 0; i < got.size() && !overtaken; ++i) {
    if (got[i].sender != 3) continue;
    for (size_t j = i + 1; j < got.size(); ++j) {
      if (got[j].sender == 1 && got[j].timestamp < got[i].timestamp - kMarker) {
        overtaken = true;
        break;
      }
    }
  }
  EXPECT_TRUE(overtaken);
  FaultPlan bad = plan;
  bad.reorder = 0.1;
  EXPECT_EQ(injector_->set_plan(bad).code(), Status::Code::kInvalidArgument);
}

TEST_F(FaultVanTest, LinksLimitWhichMessagesAreFaulted) {
  FaultPlan plan;
  plan.drop = 1;
  plan.target.links = {{1, 3}, {FaultTarget::kAnyNode, 1}};
  Build(2, plan);
  ASSERT_TRUE(Send(1, 2, 0).ok());
  ASSERT_TRUE(Send(1, 3, 1).ok());
  ASSERT_TRUE(Send(2, 1, 2).ok());
  ASSERT_TRUE(Send(3, 1, 3).ok());
  ASSERT_TRUE(Send(3, 2, 4).ok());
  ASSERT_TRUE(WaitFor(2, 2));
  EXPECT_EQ(Timestamps(2), (std::vector<int>{0, 4}));
  EXPECT_EQ(Count(3), 0u);
  EXPECT_EQ(Count(1), 0u);
  EXPECT_EQ(injector_->counters().dropped, 3u);
}

TEST_F(FaultVanTest, ControlsLimitWhichCommandsAreFaulted) {
  FaultPlan plan;
  plan.drop = 1;
  plan.target.kind = FaultTarget::Kind::kAll;
  plan.target.controls = {Control::kBarrier};
  Build(2, plan);
  ASSERT_TRUE(Send(1, 2, 0, Control::kBarrier).ok());
  ASSERT_TRUE(Send(1, 2, 1, Control::kHeartbeat).ok());
  ASSERT_TRUE(Send(1, 2, 2).ok());  // data: all kinds are targeted
  ASSERT_TRUE(Send(1, 2, 3).ok());
  ASSERT_TRUE(WaitFor(2, 1));
  EXPECT_EQ(Timestamps(2), std::vector<int>{1});
  EXPECT_EQ(injector_->counters().dropped, 3u);
}

// FaultTarget::migration picks a membership change's data messages (those
// of a state copy or hand-over), and `spared` links are never hit.
TEST(FaultTargetTest, MigrationAndSparedLinksLimitWhichMessagesMatch) {
  FaultTarget target;
  target.kind = FaultTarget::Kind::kAll;
  target.migration = true;
  target.controls = {Control::kNodeTable};
  target.spared = {{1, 12}};
  Meta push;
  push.sender = 9;
  push.recipient = 8;
  EXPECT_FALSE(target.Matches(push));  // a worker's push
  Meta chunk;
  chunk.sender = 8;
  chunk.recipient = 12;
  chunk.state_copy = 5;
  chunk.copy_attempt = 1;
  chunk.copy_seq = 1;
  EXPECT_TRUE(target.Matches(chunk));
  Meta table;
  table.control = Control::kNodeTable;
  table.sender = 1;
  table.recipient = 8;
  EXPECT_TRUE(target.Matches(table));
  table.recipient = 12;  // spared
  EXPECT_FALSE(target.Matches(table));
  Meta beat;
  beat.control = Control::kHeartbeat;
  beat.sender = 8;
  beat.recipient = 1;
  EXPECT_FALSE(target.Matches(beat));
  FaultPlan plan;
  plan.target = target;
  EXPECT_NE(plan.DebugString().find("migration spared=1->12"),
            std::string::npos)
      << plan.DebugString();
}

TEST_F(FaultVanTest, PartitionDropsBothWaysUntilHealed) {
  Build(1);
  injector_->Partition({1}, {2, 3});
  ASSERT_TRUE(Send(1, 2, 0).ok());
  ASSERT_TRUE(Send(3, 1, 1, Control::kHeartbeat).ok());
  ASSERT_TRUE(Send(2, 3, 2).ok());  // same side
  ASSERT_TRUE(WaitFor(3, 1));
  EXPECT_EQ(injector_->counters().partitioned, 2u);
  injector_->Heal();
  ASSERT_TRUE(Send(1, 2, 3).ok());
  ASSERT_TRUE(WaitFor(2, 1));
  EXPECT_EQ(Timestamps(2), std::vector<int>{3});
  EXPECT_EQ(Count(1), 0u);
}

// A killed node neither sends nor receives, even what was in flight to it.
TEST_F(FaultVanTest, KilledNodeIsMuteAndDeaf) {
  FaultPlan plan;
  plan.delay = 1;
  plan.target.links = {{1, 2}};
  Build(4, plan);
  ASSERT_TRUE(Send(1, 2, 0).ok());  // held
  injector_->Kill(2);
  EXPECT_TRUE(injector_->IsKilled(2));
  EXPECT_FALSE(injector_->IsKilled(1));
  ASSERT_TRUE(Send(2, 3, 1).ok());
  ASSERT_TRUE(Send(3, 2, 2).ok());
  injector_->Flush();
  ASSERT_TRUE(Send(1, 3, 3).ok());
  ASSERT_TRUE(WaitFor(3, 1));
  EXPECT_EQ(Timestamps(3), std::vector<int>{3});
  EXPECT_EQ(Count(2), 0u);
  FaultCounters c = injector_->counters();
  EXPECT_EQ(c.killed, 3u);
  EXPECT_EQ(c.released, 0u);
}

// What reaches a killed node's van is not handed to it.
TEST_F(FaultVanTest, KilledNodeDropsWhatReachesItsVan) {
  Build(4);
  // Kill only after the message has been handed to 2's inbox: send it
  // straight through the wrapped van, as one sent before the kill.
  injector_->Kill(2);
  Message m;
  m.meta.sender = 1;
  m.meta.recipient = 2;
  ASSERT_TRUE(vans_[0]->inner()->Send(std::move(m)).ok());
  ASSERT_TRUE(WaitUntil([&] { return injector_->counters().killed == 1; }));
  EXPECT_EQ(Count(2), 0u);
  EXPECT_EQ(vans_[1]->counters().received_messages, 0u);
}

std::vector<std::string> EventLog(FaultInjector* injector) {
  std::vector<std::string> log;
  for (const FaultEvent& e : injector->events()) {
    log.push_back(e.DebugString());
  }
  return log;
}

FaultPlan Mixed() {
  FaultPlan plan;
  plan.drop = 0.1;
  plan.duplicate = 0.1;
  plan.delay = 0.1;
  plan.reorder = 0.1;
  plan.target.kind = FaultTarget::Kind::kAll;
  return plan;
}

TEST_F(FaultVanTest, SameSeedMakesTheSameDecisions) {
  std::vector<std::vector<std::string>> logs;
  for (uint64_t seed : {11, 11, 12}) {
    Build(seed, Mixed());
    for (int ts = 0; ts < 300; ++ts) {
      ASSERT_TRUE(Send(1 + ts % 3, 1 + (ts + 1) % 3, ts % 7,
                       ts % 5 ? Control::kNone : Control::kHeartbeat)
                      .ok());
    }
    injector_->Flush();
    logs.push_back(EventLog(injector_.get()));
    EXPECT_GT(logs.back().size(), 80u);
    TearDown();
  }
  EXPECT_EQ(logs[0], logs[1]);
  EXPECT_NE(logs[0], logs[2]);
}

// The draw for a message depends on the seed, its identity and how many of
// the same identity came before, not on what else was sent meanwhile: the
// same messages in another interleaving get the same faults.
TEST_F(FaultVanTest, DecisionsDoNotDependOnTheInterleavingOfLinks) {
  std::vector<std::multiset<std::string>> seen;
  for (bool reversed : {false, true}) {
    Build(21, Mixed());
    for (int i = 0; i < 200; ++i) {
      int ts = reversed ? 199 - i : i;
      ASSERT_TRUE(Send(1 + ts % 2, 3, ts / 2).ok());
    }
    std::multiset<std::string> faults;
    for (const std::string& e : EventLog(injector_.get())) faults.insert(e);
    seen.push_back(faults);
    TearDown();
  }
  EXPECT_EQ(seen[0], seen[1]);
}

TEST(FaultInjectorTest, DrawDependsOnSeedIdentityAndOccurrence) {
  FaultInjector a(1), b(1), c(2);
  Meta m;
  m.sender = 9;
  m.recipient = 8;
  m.timestamp = 3;
  Meta other = m;
  other.timestamp = 4;
  EXPECT_EQ(a.Draw(m, 0, 0), b.Draw(m, 0, 0));
  EXPECT_NE(a.Draw(m, 0, 0), c.Draw(m, 0, 0));
  EXPECT_NE(a.Draw(m, 0, 0), a.Draw(m, 1, 0));
  EXPECT_NE(a.Draw(m, 0, 0), a.Draw(m, 0, 1));
  EXPECT_NE(a.Draw(m, 0, 0), a.Draw(other, 0, 0));
  // The auth and the epoch are not part of the identity (they differ from
  // run to run).
  Meta same = m;
  same.epoch = 7;
  same.auth.lo = 5;
  EXPECT_EQ(FaultInjector::Identity(m), FaultInjector::Identity(same));
}

TEST(FaultInjectorTest, BadPlansAreRefusedNamingTheField) {
  FaultInjector injector(1);
  FaultPlan plan;
  plan.drop = 1.5;
  Status s = injector.set_plan(plan);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("drop"), std::string::npos) << s;
  plan.drop = 0.6;
  plan.delay = 0.6;
  EXPECT_FALSE(injector.set_plan(plan).ok());
  plan.delay = 0;
  plan.max_delay = 0;
  s = injector.set_plan(plan);
  EXPECT_NE(s.message().find("max_delay"), std::string::npos) << s;
  EXPECT_EQ(injector.plan().drop, 0);  // unchanged
}

// Messages held for a van that stops are lost, counted, and never sent
// through it afterwards.
TEST_F(FaultVanTest, HeldMessagesOfAStoppedVanAreLost) {
  FaultPlan plan;
  plan.delay = 1;
  plan.max_delay = 1000000;
  Build(6, plan);
  SendBarrage(5);
  vans_[0]->Stop();
  EXPECT_EQ(injector_->held(), 0u);
  EXPECT_EQ(injector_->Flush(), 0u);
  EXPECT_EQ(injector_->counters().lost_at_stop, 5u);
  EXPECT_EQ(Send(1, 2, 9).code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace ps
