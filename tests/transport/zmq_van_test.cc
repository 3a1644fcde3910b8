// ZmqVan over loopback (ephemeral ports): peers in one network namespace
// are reached through their same-host endpoint, anything else through TCP,
// and a message arrives either way.
#include "transport/zmq_van.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

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

}  // namespace
}  // namespace ps
