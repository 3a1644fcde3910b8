// The Scheduler on its own, through a recording SchedulerHost: what it
// publishes to its node and in which order relative to what it sends, and
// the events it reports. Node-level behaviour is in node_test.cc.
#include "node/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "testutil/fake_clock.h"
#include "transport/inproc_van.h"
#include "util/secret.h"

namespace ps {
namespace {

// Records every call, in order, as one line each; messages are kept.
class RecordingHost final : public SchedulerHost {
 public:
  void SendControl(Message&& msg) override {
    calls.push_back(std::string("send ") + ControlName(msg.meta.control) +
                    " to " + std::to_string(msg.meta.recipient));
    sent.push_back(std::move(msg));
  }
  NodeInfo SchedulerEntry() const override {
    NodeInfo me;
    me.id = kSchedulerNodeId;
    me.role = Role::kScheduler;
    me.host = "scheduler";
    me.port = 1;
    me.rank = 0;
    me.metrics_port = 9100;
    return me;
  }
  void OnMembership(const Membership& m) override {
    calls.push_back("membership");
    membership = m;
  }
  void OnMemberDead(int id, const Status& status) override {
    calls.push_back("dead " + std::to_string(id));
    dead_status = status;
  }
  void OnMemberFailedOver(int id, std::shared_ptr<const KeyRing> ring,
                          const Status& status) override {
    calls.push_back("failed over " + std::to_string(id) + " at epoch " +
                    std::to_string(ring->epoch()));
    dead_status = status;
  }
  void OnMemberLeft(int id) override {
    calls.push_back("left " + std::to_string(id));
  }
  void OnBarrierReleased(int customer_id, const Status& status) override {
    calls.push_back("barrier " + std::to_string(customer_id) + " " +
                    (status.ok() ? "ok" : status.message()));
  }
  void RequestLivenessCheck(int64_t delay_ms) override {
    calls.push_back("check in " + std::to_string(delay_ms));
  }

  std::vector<std::string> calls;
  std::vector<Message> sent;
  Membership membership;
  Status dead_status;
};

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : van_(&network_) {
    options_.role = Role::kScheduler;
    options_.num_servers = 1;
    options_.num_workers = 1;
    options_.heartbeat_timeout_ms = 1000;
    options_.start_timeout_ms = 0;
    scheduler_ = std::make_unique<Scheduler>(
        options_, "0123456789abcdef", &van_, &clock_, &counters_, &host_);
  }

  // A JOIN from `role` at node:<port> with process key `key` (16 bytes).
  Message Join(Role role, int port, const std::string& key) {
    Message join;
    join.meta.control = Control::kJoin;
    join.meta.request = true;
    join.meta.process_key = key;
    NodeInfo n;
    n.role = role;
    n.host = "node";
    n.port = port;
    join.meta.nodes.push_back(n);
    return join;
  }

  void Form() {
    scheduler_->HandleJoin(Join(Role::kWorker, 20, std::string(16, 'w')));
    scheduler_->HandleJoin(Join(Role::kServer, 10, std::string(16, 's')));
  }

  // Node `sender` beats.
  void Beat(int sender) {
    Message beat;
    beat.meta.control = Control::kHeartbeat;
    beat.meta.request = true;
    beat.meta.sender = sender;
    scheduler_->HandleHeartbeat(beat);
  }

  Options options_;
  InProcNetwork network_;
  InProcVan van_;  // Only connected on: the host sends.
  FakeClock clock_;
  NodeCounters counters_;
  RecordingHost host_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, PublishesToItsNodeBeforeAnyMember) {
  Form();
  ASSERT_EQ(host_.calls.size(), 3u);
  EXPECT_EQ(host_.calls[0], "membership");
  EXPECT_EQ(host_.calls[1], "send node_table to 8");
  EXPECT_EQ(host_.calls[2], "send node_table to 9");
  EXPECT_TRUE(scheduler_->WaitFormed().ok());

  const Membership& m = host_.membership;
  ASSERT_EQ(m.nodes.size(), 3u);
  EXPECT_EQ(m.nodes.at(8).role, Role::kServer);
  EXPECT_EQ(m.nodes.at(9).role, Role::kWorker);
  // The table carries no metrics port for the scheduler (/status does).
  EXPECT_EQ(m.nodes.at(kSchedulerNodeId).metrics_port, -1);
  ASSERT_NE(m.ring, nullptr);
  EXPECT_EQ(m.ring->epoch(), 1u);
  EXPECT_EQ(m.ring->server_ids(), std::vector<int>{8});
  EXPECT_TRUE(KeysEqual(m.member_keys.at(8), ToKey128(std::string(16, 's'))));
  EXPECT_TRUE(KeysEqual(m.member_keys.at(9), ToKey128(std::string(16, 'w'))));

  // Each member's table carries the run key and that member's own key.
  for (const Message& t : host_.sent) {
    EXPECT_EQ(t.meta.run_key, "0123456789abcdef");
    EXPECT_TRUE(KeysEqual(t.meta.auth, m.member_keys.at(t.meta.recipient)));
    EXPECT_EQ(t.meta.nodes.size(), 3u);
  }
  EXPECT_NE(scheduler_->StatusJson().find("\"metrics_port\":9100"),
            std::string::npos);
}

TEST_F(SchedulerTest, LateJoinIsRefusedWithTheJoinersKey) {
  Form();
  host_.sent.clear();
  scheduler_->HandleJoin(Join(Role::kWorker, 30, std::string(16, 'x')));
  ASSERT_EQ(host_.sent.size(), 1u);
  EXPECT_EQ(host_.sent[0].meta.control, Control::kAbort);
  EXPECT_NE(host_.sent[0].meta.reason.find("already formed"),
            std::string::npos);
  EXPECT_TRUE(
      KeysEqual(host_.sent[0].meta.auth, ToKey128(std::string(16, 'x'))));
  // The refused node's temporary route is gone again.
  EXPECT_EQ(van_.num_routes(), 2u);
}

TEST_F(SchedulerTest, OwnBarrierIsReleasedThroughTheHost) {
  Form();
  auto request = [](int sender, int customer) {
    Message m;
    m.meta.control = Control::kBarrier;
    m.meta.request = true;
    m.meta.sender = sender;
    m.meta.customer_id = customer;
    m.meta.barrier_group = kScheduler + kServerGroup + kWorkerGroup;
    return m;
  };
  scheduler_->HandleBarrierRequest(request(kSchedulerNodeId, 3));
  scheduler_->HandleBarrierRequest(request(8, 0));
  EXPECT_EQ(host_.calls.back(), "send node_table to 9");
  host_.calls.clear();
  scheduler_->HandleBarrierRequest(request(9, 0));
  std::vector<std::string> expected = {"barrier 3 ok", "send barrier to 8",
                                       "send barrier to 9"};
  EXPECT_EQ(host_.calls, expected);
}

TEST_F(SchedulerTest, SilentMemberIsDeclaredDeadToAllAndToItsNode) {
  Form();
  clock_.Advance(600);
  Beat(9);  // The worker beats; the server not.
  clock_.Advance(600);
  host_.calls.clear();
  scheduler_->CheckLiveness();
  std::vector<std::string> expected = {"send node_failed to 8",
                                       "send node_failed to 9", "dead 8"};
  EXPECT_EQ(host_.calls, expected);
  EXPECT_EQ(host_.dead_status.code(), Status::Code::kUnavailable);
  EXPECT_NE(host_.dead_status.message().find("server 0"), std::string::npos)
      << host_.dead_status;
}

// A scheduler that did not run for a while (Node::ExcusePause: its
// heartbeat thread woke late) blames nobody for that time: the members'
// beats of it may wait unread. Silence after it counts again.
TEST_F(SchedulerTest, APauseOfTheSchedulerIsNotCountedAgainstItsMembers) {
  Form();
  clock_.Advance(1500);
  scheduler_->ExcusePause(1500);
  host_.calls.clear();
  scheduler_->CheckLiveness();
  // (Their first node tables go again: they have not beaten since.)
  for (const std::string& call : host_.calls) {
    EXPECT_TRUE(call.rfind("dead", 0) != 0 &&
                call.find("node_failed") == std::string::npos)
        << call;
  }
  clock_.Advance(1001);
  scheduler_->CheckLiveness();
  EXPECT_EQ(std::count(host_.calls.begin(), host_.calls.end(), "dead 8"), 1);
}

TEST_F(SchedulerTest, ForgedBeatFromTheSchedulerIsDropped) {
  Form();
  Message beat;
  beat.meta.control = Control::kHeartbeat;
  beat.meta.request = true;
  beat.meta.sender = kSchedulerNodeId;
  scheduler_->HandleHeartbeat(beat);
  EXPECT_EQ(counters_.dropped_bad_control.load(), 1u);
}

// Detection from the transport's events (docs/replication.md,
// "Detection"): the events are raised on the scheduler's in-process van,
// as ZmqVan raises ZeroMQ's, and time is the fake clock's.
class DisconnectTest : public SchedulerTest {
 protected:
  // A scheduler with EMBER_DISCONNECT_GRACE_MS = `grace`, formed, its
  // van's events going to it.
  void FormWithGrace(int grace) {
    options_.disconnect_grace_ms = grace;
    scheduler_ = std::make_unique<Scheduler>(
        options_, "0123456789abcdef", &van_, &clock_, &counters_, &host_);
    van_.set_peer_event_handler(
        [this](const PeerEvent& e) { scheduler_->OnPeerEvent(e); });
    Form();
    host_.calls.clear();
  }
  // The van's connection to server 8 (node:10).
  void Raise(PeerEvent::Kind kind) {
    PeerEvent e;
    e.kind = kind;
    e.ids = {8};
    e.address = "node:10";
    van_.RaisePeerEvent(e);
  }
  // Whether a liveness check now declares server 8 dead.
  bool DeadAfterCheck() {
    host_.calls.clear();
    scheduler_->CheckLiveness();
    for (const std::string& c : host_.calls) {
      if (c == "dead 8") return true;
    }
    return false;
  }
};

TEST_F(DisconnectTest, ACloseAndARefusedReconnectAreADeathAfterTheGrace) {
  FormWithGrace(200);
  clock_.Advance(100);
  Raise(PeerEvent::Kind::kDisconnected);
  EXPECT_TRUE(host_.calls.empty());  // A close alone is nothing yet.
  clock_.Advance(1);
  Raise(PeerEvent::Kind::kReconnectFailed);
  EXPECT_EQ(host_.calls, std::vector<std::string>({"check in 200"}));
  Raise(PeerEvent::Kind::kReconnectFailed);  // ZeroMQ retries: no news.
  clock_.Advance(199);
  EXPECT_FALSE(DeadAfterCheck());
  clock_.Advance(1);  // 301 ms after forming: far from the 1000 ms timeout.
  EXPECT_TRUE(DeadAfterCheck());
  EXPECT_NE(host_.dead_status.message().find("reconnecting was refused"),
            std::string::npos)
      << host_.dead_status;
  // Later events about a dead member change nothing.
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kReconnectFailed);
  clock_.Advance(500);
  EXPECT_FALSE(DeadAfterCheck());
}

TEST_F(DisconnectTest, WithNoGraceTheRefusedReconnectIsTheDeath) {
  FormWithGrace(0);
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kReconnectFailed);
  EXPECT_EQ(host_.calls.back(), "dead 8");
}

TEST_F(DisconnectTest, ATransientCloseIsNoDeath) {
  FormWithGrace(200);
  // Closed, then connected again: alive.
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kConnected);
  Raise(PeerEvent::Kind::kReconnectFailed);  // Not after a close: nothing.
  clock_.Advance(500);
  EXPECT_FALSE(DeadAfterCheck());
  // Closed and never refused (reconnecting hangs): heartbeats decide.
  Raise(PeerEvent::Kind::kDisconnected);
  clock_.Advance(400);
  EXPECT_FALSE(DeadAfterCheck());
  clock_.Advance(101);  // The heartbeat timeout (1000 ms) has passed.
  EXPECT_TRUE(DeadAfterCheck());
  EXPECT_NE(host_.dead_status.message().find("no heartbeat"), std::string::npos)
      << host_.dead_status;
}

TEST_F(DisconnectTest, ABeatOrALeaveWithinTheGraceIsNoDeath) {
  FormWithGrace(200);
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kReconnectFailed);
  clock_.Advance(50);
  Beat(8);  // Alive after all.
  clock_.Advance(300);
  EXPECT_FALSE(DeadAfterCheck());
  // A member that closes its connections as it leaves (Finalize sends
  // LEAVE, then stops its van; the LEAVE may arrive after the events).
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kReconnectFailed);
  clock_.Advance(100);
  Message leave;
  leave.meta.control = Control::kLeave;
  leave.meta.request = true;
  leave.meta.sender = 8;
  scheduler_->HandleLeave(leave);
  clock_.Advance(300);
  EXPECT_FALSE(DeadAfterCheck());
  Raise(PeerEvent::Kind::kDisconnected);  // It has left: not watched.
  Raise(PeerEvent::Kind::kReconnectFailed);
  EXPECT_FALSE(DeadAfterCheck());
}

TEST_F(DisconnectTest, WithTheGraceOffEventsAreIgnored) {
  FormWithGrace(-1);
  Raise(PeerEvent::Kind::kDisconnected);
  Raise(PeerEvent::Kind::kReconnectFailed);
  EXPECT_TRUE(host_.calls.empty());
  clock_.Advance(900);
  Beat(9);
  EXPECT_FALSE(DeadAfterCheck());
}

// Replacements (EMBER_JOIN=replace) that ask again while held
// (docs/replication.md, "Replacing a dead server"): 2 servers (8 at
// node:10, 10 at node:11) and a worker (9), with copies.
class HeldJoinTest : public SchedulerTest {
 protected:
  void FormTwoServers(bool restart = false) {
    options_.num_servers = 2;
    options_.replicas = 1;
    options_.start_timeout_ms = 60000;
    options_.scheduler_restart = restart;
    scheduler_ = std::make_unique<Scheduler>(
        options_, "0123456789abcdef", &van_, &clock_, &counters_, &host_);
    if (restart) return;
    Form();
    scheduler_->HandleJoin(Join(Role::kServer, 11, std::string(16, 't')));
    ASSERT_TRUE(scheduler_->WaitFormed().ok());
  }
  // A replacement's JOIN from node:<port> that asks again every `ask_ms`.
  Message Replacement(int port, char key, int ask_ms) {
    Message join = Join(Role::kServer, port, std::string(16, key));
    join.meta.join_replace = true;
    join.meta.join_ask_ms = ask_ms;
    return join;
  }
  // What was sent to the process with key `key`: its controls' names.
  std::vector<std::string> SentTo(char key) {
    std::vector<std::string> names;
    for (const Message& m : host_.sent) {
      if (KeysEqual(m.meta.auth, ToKey128(std::string(16, key)))) {
        names.push_back(ControlName(m.meta.control));
      }
    }
    return names;
  }
  std::string ReasonTo(char key) {
    for (const Message& m : host_.sent) {
      if (KeysEqual(m.meta.auth, ToKey128(std::string(16, key))) &&
          m.meta.control == Control::kAbort) {
        return m.meta.reason;
      }
    }
    return "";
  }
};

// Two replacements are held while both servers live. The older stops
// asking (it died while held); the younger asks on. When server 8 is
// declared dead, the silent one is dropped with an ABORT that says why,
// and the one that asked takes the vacant slot: a dead process never gets
// a share of the ranges.
TEST_F(HeldJoinTest, OneThatStopsAskingIsDroppedAndOneThatAsksIsAdmitted) {
  FormTwoServers();
  host_.sent.clear();
  scheduler_->HandleJoin(Replacement(30, 'a', 100));  // Dies while held.
  scheduler_->HandleJoin(Replacement(31, 'b', 100));
  EXPECT_TRUE(SentTo('a').empty());
  EXPECT_TRUE(SentTo('b').empty());
  for (int t = 0; t < 4; ++t) {
    clock_.Advance(300);
    Beat(9);
    Beat(10);  // Server 8 is silent.
    scheduler_->HandleJoin(Replacement(31, 'b', 100));
    scheduler_->CheckLiveness();
  }
  // 1200 ms: server 8 is dead, and so is the replacement at node:30.
  EXPECT_NE(std::find(host_.calls.begin(), host_.calls.end(),
                      "failed over 8 at epoch 2"),
            host_.calls.end());
  EXPECT_EQ(SentTo('a'), std::vector<std::string>{"abort"});
  EXPECT_NE(ReasonTo('a').find("did not ask again for 1200 ms (it asks "
                               "every 100 ms); it is taken for dead"),
            std::string::npos)
      << ReasonTo('a');
  EXPECT_TRUE(ReasonTo('b').empty());
  const std::vector<std::string> to_b = SentTo('b');
  EXPECT_NE(std::find(to_b.begin(), to_b.end(), "node_table"), to_b.end());
  // The ring: the survivor and the replacement (node:31 as server 2).
  ASSERT_NE(host_.membership.ring, nullptr);
  EXPECT_EQ(host_.membership.ring->server_ids(), (std::vector<int>{10, 12}));
  EXPECT_EQ(host_.membership.nodes.at(12).port, 31);
  // A copy of its JOIN that comes once it is a member changes nothing.
  host_.sent.clear();
  scheduler_->HandleJoin(Replacement(31, 'b', 100));
  EXPECT_TRUE(host_.sent.empty());
}

// A held join is admitted only if it asked in its last 3 periods: one that
// was silent for longer (but less than the heartbeat timeout) when the
// slot became vacant is admitted when it asks again.
TEST_F(HeldJoinTest, OneSilentLatelyIsAdmittedOnlyWhenItAsksAgain) {
  FormTwoServers();
  host_.sent.clear();
  scheduler_->HandleJoin(Replacement(30, 'a', 100));
  for (int t = 0; t < 4; ++t) {
    clock_.Advance(300);
    Beat(9);
    Beat(10);  // Server 8 is silent; so is the replacement after 300 ms.
    if (t == 0) scheduler_->HandleJoin(Replacement(30, 'a', 100));
    scheduler_->CheckLiveness();
  }
  // 1200 ms: server 8 is dead; the replacement last asked 900 ms ago.
  EXPECT_NE(std::find(host_.calls.begin(), host_.calls.end(),
                      "failed over 8 at epoch 2"),
            host_.calls.end());
  EXPECT_TRUE(SentTo('a').empty());
  scheduler_->HandleJoin(Replacement(30, 'a', 100));
  const std::vector<std::string> to_a = SentTo('a');
  EXPECT_NE(std::find(to_a.begin(), to_a.end(), "node_table"), to_a.end());
  EXPECT_EQ(host_.membership.ring->server_ids(), (std::vector<int>{10, 12}));
}

// A held join that does not ask again (join_ask_ms 0: the node has no
// heartbeats) is never taken for dead: only its start timeout ends it.
TEST_F(HeldJoinTest, OneThatNeverAsksIsKeptTillItsTimeout) {
  FormTwoServers();
  host_.sent.clear();
  scheduler_->HandleJoin(Replacement(30, 'a', 0));
  clock_.Advance(5000);
  Beat(8);
  Beat(9);
  Beat(10);
  scheduler_->CheckLiveness();
  EXPECT_TRUE(SentTo('a').empty());
  clock_.Advance(60000);
  Beat(8);
  Beat(9);
  Beat(10);
  scheduler_->CheckLiveness();
  EXPECT_NE(ReasonTo('a').find("no server slot became vacant within 60 s"),
            std::string::npos)
      << ReasonTo('a');
}

// A restarted scheduler that has not yet heard from the running cluster's
// members does not refuse a replacement that asks again (it is held once
// they re-register), but still refuses one that does not.
TEST_F(HeldJoinTest, ARestartedSchedulerLetsAReplacementThatAsksAgainWait) {
  FormTwoServers(/*restart=*/true);
  scheduler_->HandleJoin(Replacement(30, 'a', 100));
  EXPECT_TRUE(host_.sent.empty());
  scheduler_->HandleJoin(Replacement(31, 'b', 0));
  EXPECT_EQ(SentTo('b'), std::vector<std::string>{"abort"});
  EXPECT_NE(ReasonTo('b').find("the scheduler restarted"), std::string::npos)
      << ReasonTo('b');
}

}  // namespace
}  // namespace ps
