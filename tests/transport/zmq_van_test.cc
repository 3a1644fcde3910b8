// ZmqVan over loopback (ephemeral ports): peers in one network namespace
// are reached through their same-host endpoint, anything else through TCP,
// and a message arrives either way.
#include "transport/zmq_van.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "util/thread_policy.h"

namespace ps {
namespace {

// A started van and what it received.
class Peer {
 public:
  explicit Peer(bool local_endpoint) {
    VanLimits limits;
    limits.local_endpoint = local_endpoint;
    van_.set_limits(limits);
    StatusOr<int> port = van_.Start("127.0.0.1", 0, [this](Message&& msg) {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(std::move(msg));
      cv_.notify_all();
    });
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.ok() ? port.value() : 0;
  }
  ~Peer() { van_.Stop(); }

  ZmqVan& van() { return van_; }
  int port() const { return port_; }

  // The next message's sender, or -1 after 30 s without one.
  int NextSender() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(30),
                      [this] { return !received_.empty(); })) {
      return -1;
    }
    int sender = received_.front().meta.sender;
    received_.pop_front();
    return sender;
  }

 private:
  ZmqVan van_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> received_;
};

Message Hello(int from, int to) {
  Message msg;
  msg.meta.sender = from;
  msg.meta.recipient = to;
  msg.meta.request = true;
  msg.meta.push = true;
  return msg;
}

TEST(ZmqVanLocal, APeerInThisNamespaceIsReachedThroughItsLocalEndpoint) {
  Peer a(true), b(true);
  const std::string local = b.van().local_endpoint();
  ASSERT_EQ(local.rfind("ipc://@ember-", 0), 0u) << local;
  ASSERT_NE(local, a.van().local_endpoint());
  ASSERT_TRUE(a.van().Connect(9, "127.0.0.1", b.port(), local).ok());
  EXPECT_EQ(a.van().counters().local_connections.load(), 1u);
  ASSERT_TRUE(a.van().Send(Hello(8, 9)).ok());
  EXPECT_EQ(b.NextSender(), 8);
  // Connecting the same id again makes no second connection.
  ASSERT_TRUE(a.van().Connect(9, "127.0.0.1", b.port(), local).ok());
  EXPECT_EQ(a.van().counters().local_connections.load(), 1u);
}

TEST(ZmqVanLocal, AnEndpointNobodyBoundFallsBackToTcp) {
  Peer a(true), b(true);
  const std::string nobody = "ipc://@ember-" + std::string(32, '0');
  ASSERT_TRUE(a.van().Connect(9, "127.0.0.1", b.port(), nobody).ok());
  EXPECT_EQ(a.van().counters().local_connections.load(), 0u);
  ASSERT_TRUE(a.van().Send(Hello(8, 9)).ok());
  EXPECT_EQ(b.NextSender(), 8);
}

TEST(ZmqVanLocal, SwitchedOffNeitherBindsNorUsesOne) {
  Peer a(false), b(true);
  EXPECT_EQ(a.van().local_endpoint(), "");
  ASSERT_TRUE(
      a.van().Connect(9, "127.0.0.1", b.port(), b.van().local_endpoint()).ok());
  EXPECT_EQ(a.van().counters().local_connections.load(), 0u);
  ASSERT_TRUE(a.van().Send(Hello(8, 9)).ok());
  EXPECT_EQ(b.NextSender(), 8);
}

TEST(ZmqVanLocal, AStoppedPeerIsNotReachable) {
  Peer a(true);
  std::string gone;
  {
    Peer b(true);
    gone = b.van().local_endpoint();
  }
  ASSERT_TRUE(a.van().Connect(9, "127.0.0.1", 1, gone).ok());
  EXPECT_EQ(a.van().counters().local_connections.load(), 0u);
}

// Traffic is counted per peer as well as in total: by recipient id on
// sends, by the header's sender id on receipts, every byte of every frame.
TEST(ZmqVanTraffic, IsCountedPerPeerAndAddsUpToTheTotals) {
  Peer a(false), b(false), c(false);
  ASSERT_TRUE(a.van().Connect(9, "127.0.0.1", b.port(), "").ok());
  ASSERT_TRUE(a.van().Connect(11, "127.0.0.1", c.port(), "").ok());
  ASSERT_TRUE(b.van().Connect(8, "127.0.0.1", a.port(), "").ok());
  for (int i = 0; i < 3; ++i) {
    Message msg = Hello(8, 9);
    SArray<char> data(1000 * (i + 1), 'x');
    msg.data.push_back(data);
    ASSERT_TRUE(a.van().Send(std::move(msg)).ok());
    EXPECT_EQ(b.NextSender(), 8);
  }
  ASSERT_TRUE(a.van().Send(Hello(8, 11)).ok());
  EXPECT_EQ(c.NextSender(), 8);
  // From b, once as node 9 and twice with ids outside the table's range.
  for (int from : {9, -5, PeerTraffic::kMaxIds}) {
    ASSERT_TRUE(b.van().Send(Hello(from, 8)).ok());
    EXPECT_EQ(a.NextSender(), from);
  }
  std::map<int, std::array<uint64_t, 5>> seen;
  a.van().counters().peers.ForEach([&](int id, const PeerCounters& p) {
    seen[id] = {p.sent_messages, p.sent_bytes, p.received_messages,
                p.received_bytes, p.send_errors};
  });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[9][0], 3u);
  EXPECT_GT(seen[9][1], 6000u);  // The frames, and three headers.
  EXPECT_EQ(seen[9][2], 1u);
  EXPECT_EQ(seen[11][0], 1u);
  EXPECT_EQ(seen[11][2], 0u);
  EXPECT_EQ(seen[PeerTraffic::kOther][0], 0u);
  EXPECT_EQ(seen[PeerTraffic::kOther][2], 2u);
  std::array<uint64_t, 5> sum{};
  for (const auto& p : seen) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p.second[i];
  }
  const VanCounters& t = a.van().counters();
  EXPECT_EQ(sum[0], t.sent_messages.load());
  EXPECT_EQ(sum[1], t.sent_bytes.load());
  EXPECT_EQ(sum[2], t.received_messages.load());
  EXPECT_EQ(sum[3], t.received_bytes.load());
  EXPECT_EQ(sum[4], t.send_errors.load());
  // b counted what it sent to a under a's id, whatever it claimed to be.
  uint64_t to_a = 0;
  b.van().counters().peers.ForEach([&](int id, const PeerCounters& p) {
    EXPECT_EQ(id, 8);
    to_a += p.sent_messages;
  });
  EXPECT_EQ(to_a, 3u);
}

// ZeroMQ's monitor on the connections a van makes (Van::PeerEvent): a
// peer that stops is reported closed, then refusing to reconnect, with the
// ids routed to it.
class EventLog {
 public:
  void Add(const PeerEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    cv_.notify_all();
  }
  // Waits up to 30 s for an event of `kind`; its ids, or {-1} if none came.
  std::vector<int> WaitFor(PeerEvent::Kind kind) {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<int> ids = {-1};
    cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      for (const PeerEvent& e : events_) {
        if (e.kind == kind) {
          ids = e.ids;
          return true;
        }
      }
      return false;
    });
    return ids;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PeerEvent> events_;
};

void ExpectStopReported(bool local_endpoint) {
  EventLog log;
  ZmqVan watcher;
  VanLimits limits;
  limits.local_endpoint = local_endpoint;
  watcher.set_limits(limits);
  watcher.set_peer_event_handler([&](const PeerEvent& e) { log.Add(e); });
  ASSERT_TRUE(watcher.Start("127.0.0.1", 0, [](Message&&) {}).ok());
  auto peer = std::make_unique<Peer>(local_endpoint);
  ASSERT_TRUE(
      watcher
          .Connect(9, "127.0.0.1", peer->port(), peer->van().local_endpoint())
          .ok());
  ASSERT_TRUE(watcher.Send(Hello(8, 9)).ok());
  EXPECT_EQ(peer->NextSender(), 8);
  EXPECT_EQ(log.WaitFor(PeerEvent::Kind::kConnected), std::vector<int>{9});
  peer.reset();  // Stops its van: its sockets close, nothing listens.
  EXPECT_EQ(log.WaitFor(PeerEvent::Kind::kDisconnected), std::vector<int>{9});
  EXPECT_EQ(log.WaitFor(PeerEvent::Kind::kReconnectFailed),
            std::vector<int>{9});
  watcher.Stop();
}

TEST(ZmqVanPeerEvents, AStoppedPeerIsReportedClosedThenRefusingOverTcp) {
  ExpectStopReported(false);
}

TEST(ZmqVanPeerEvents, AStoppedPeerIsReportedClosedThenRefusingLocally) {
  ExpectStopReported(true);
}

// The threads of this process, by id, with their names.
std::map<pid_t, std::string> Threads() {
  std::map<pid_t, std::string> threads;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return threads;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name +
                       "/comm");
    std::string name;
    std::getline(comm, name);
    threads[static_cast<pid_t>(std::stol(entry->d_name))] = name;
  }
  closedir(dir);
  return threads;
}

// Under the batch policy every thread a van starts (ZeroMQ's, its receive
// thread) runs under SCHED_BATCH, and the thread that started it is back
// under SCHED_OTHER; under the normal policy nothing changes.
TEST(ZmqVanThreads, RunUnderTheMessageThreadPolicyAndTheCallersDoNot) {
  for (ThreadPolicy policy : {ThreadPolicy::kBatch, ThreadPolicy::kNormal}) {
    SCOPED_TRACE(ThreadPolicyName(policy));
    SetMessageThreadPolicy(policy);
    const std::map<pid_t, std::string> before = Threads();
    int started = 0;
    {
      Peer peer(false);
      EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
      const int want =
          policy == ThreadPolicy::kBatch ? SCHED_BATCH : SCHED_OTHER;
      for (const auto& [tid, name] : Threads()) {
        if (before.count(tid)) continue;
        ++started;
        EXPECT_EQ(sched_getscheduler(tid), want) << name;
      }
    }
    // ZeroMQ's I/O thread and reaper, and the van's receive thread.
    EXPECT_GE(started, 3);
  }
  SetMessageThreadPolicy(ThreadPolicy::kNormal);
}

}  // namespace
}  // namespace ps
