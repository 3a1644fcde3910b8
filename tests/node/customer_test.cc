// Customer: in-order handling on its own thread, and the receive thread's
// claims (inline handling of messages the predicate allows).
#include "node/customer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "testutil/inproc_cluster.h"

namespace ps {
namespace {

// A latch the handler can wait on.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class CustomerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<InProcCluster>(1, 1);
    cluster_->Start();
  }
  void TearDown() override {
    customer_.reset();
    cluster_->Finalize();
  }

  // A customer whose handler records (timestamp, thread) and, for the
  // timestamps in `blocking`, waits on gate_ first.
  void Make(std::vector<int> blocking = {}) {
    customer_ = std::make_unique<Customer>(
        77, 0, cluster_->worker(0)->node(), [this, blocking](Message& msg) {
          const int ts = msg.meta.timestamp;
          {
            std::lock_guard<std::mutex> lock(mu_);
            started_.push_back(ts);
          }
          started_cv_.notify_all();
          for (int b : blocking) {
            if (b == ts) gate_.Wait();
          }
          std::lock_guard<std::mutex> lock(mu_);
          order_.push_back(ts);
          threads_.push_back(std::this_thread::get_id());
          return true;
        });
    customer_->Start();
  }

  static Message Response(int ts) {
    Message msg;
    msg.meta.request = false;
    msg.meta.timestamp = ts;
    msg.meta.sender = 8;
    return msg;
  }

  void WaitStarted(int ts) {
    std::unique_lock<std::mutex> lock(mu_);
    started_cv_.wait(lock, [&] {
      return std::find(started_.begin(), started_.end(), ts) != started_.end();
    });
  }

  std::vector<int> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::unique_ptr<Customer> customer_;
  Gate gate_;
  std::mutex mu_;
  std::condition_variable started_cv_;
  std::vector<int> started_, order_;  // Guarded by mu_.
  std::vector<std::thread::id> threads_;
};

TEST_F(CustomerTest, WithoutAPredicateNothingIsClaimed) {
  Make();
  EXPECT_FALSE(customer_->Claim(Response(1).meta));
  customer_->Accept(Response(1));
  customer_->Drain();
  EXPECT_EQ(order(), std::vector<int>{1});
  EXPECT_NE(threads_[0], std::this_thread::get_id());
}

TEST_F(CustomerTest, AnIdleCustomerLetsTheCallerHandleAllowedMessages) {
  Make();
  customer_->set_inline_predicate([](const Meta& m) { return !m.request; });
  Message request = Response(2);
  request.meta.request = true;
  EXPECT_FALSE(customer_->Claim(request.meta));  // The predicate says no.
  ASSERT_TRUE(customer_->Claim(Response(1).meta));
  customer_->RunClaimed(Response(1));
  customer_->Accept(std::move(request));
  customer_->Drain();
  EXPECT_EQ(order(), (std::vector<int>{1, 2}));
  EXPECT_EQ(threads_[0], std::this_thread::get_id());
  EXPECT_NE(threads_[1], std::this_thread::get_id());
}

// The receive thread's two-step way in: Admit decides under the node's
// lock, Deliver handles or queues after it.
TEST_F(CustomerTest, AdmitRoutesAndDeliverHandlesOrQueues) {
  Make();
  customer_->set_inline_predicate([](const Meta& m) { return !m.request; });
  Message request = Response(2);
  request.meta.request = true;
  using Route = Customer::Route;
  EXPECT_EQ(customer_->Admit(Response(0).meta, /*may_claim=*/false),
            Route::kQueue);
  customer_->Deliver(Response(0), Route::kQueue);
  customer_->Drain();
  const Route route_1 = customer_->Admit(Response(1).meta, true);
  ASSERT_EQ(route_1, Route::kHere);
  customer_->Deliver(Response(1), route_1);
  const Route route_2 = customer_->Admit(request.meta, true);
  EXPECT_EQ(route_2, Route::kQueue);  // The predicate says no.
  customer_->Deliver(std::move(request), route_2);
  customer_->Drain();
  EXPECT_EQ(order(), (std::vector<int>{0, 1, 2}));
  EXPECT_NE(threads_[0], std::this_thread::get_id());
  EXPECT_EQ(threads_[1], std::this_thread::get_id());
  EXPECT_NE(threads_[2], std::this_thread::get_id());
}

// While the customer thread handles a message, a claim is refused (the new
// message must queue behind it).
TEST_F(CustomerTest, ABusyCustomerRefusesClaims) {
  Make({1});
  customer_->set_inline_predicate([](const Meta&) { return true; });
  customer_->Accept(Response(1));
  WaitStarted(1);
  EXPECT_FALSE(customer_->Claim(Response(2).meta));
  customer_->Accept(Response(2));
  gate_.Open();
  customer_->Drain();
  EXPECT_EQ(order(), (std::vector<int>{1, 2}));
}

// A message queued while a claimant is handling an earlier one waits for
// it: order is arrival order.
TEST_F(CustomerTest, AMessageQueuedDuringAClaimRunsAfterIt) {
  Make({1});
  customer_->set_inline_predicate(
      [](const Meta& m) { return m.timestamp == 1; });
  ASSERT_TRUE(customer_->Claim(Response(1).meta));
  std::thread claimant([&] { customer_->RunClaimed(Response(1)); });
  WaitStarted(1);
  EXPECT_FALSE(customer_->Claim(Response(2).meta));
  customer_->Accept(Response(2));
  customer_->Accept(Response(3));
  gate_.Open();
  claimant.join();
  customer_->Drain();
  EXPECT_EQ(order(), (std::vector<int>{1, 2, 3}));
}

TEST_F(CustomerTest, AHeldCustomerRefusesClaims) {
  customer_ = std::make_unique<Customer>(
      78, 0, cluster_->worker(0)->node(), [](Message&) { return true; },
      /*held=*/true);
  customer_->Start();
  customer_->set_inline_predicate([](const Meta&) { return true; });
  EXPECT_FALSE(customer_->Claim(Response(1).meta));
  customer_->Release();
  EXPECT_TRUE(customer_->Claim(Response(1).meta));
  customer_->RunClaimed(Response(1));
}

// Construction starts nothing: a message accepted before Start() waits
// (no thread exists to run it) and is handled once the thread starts;
// Stop() is idempotent, and so is the destructor's Stop() after it.
TEST_F(CustomerTest, NothingRunsBeforeStartAndStopIsIdempotent) {
  Node* node = cluster_->worker(0)->node();
  std::atomic<int> handled{0};
  auto customer = std::make_unique<Customer>(79, 0, node, [&](Message&) {
    handled.fetch_add(1);
    return true;
  });
  customer->Accept(Response(1));
  EXPECT_EQ(handled.load(), 0);
  customer->Start();
  customer->Drain();
  EXPECT_EQ(handled.load(), 1);
  customer->Stop();
  customer->Stop();
  customer.reset();
  // A customer never started is destroyed without touching the node.
  Customer idle(80, 0, node, [](Message&) { return true; });
}

// Many messages, claims and queueing mixed: every message is handled once,
// in arrival order.
TEST_F(CustomerTest, MixedClaimsAndQueueKeepEachSendersOrder) {
  Make();
  customer_->set_inline_predicate(
      [](const Meta& m) { return m.timestamp % 3 != 0; });
  auto feed = [&](int base) {
    for (int i = 0; i < 2000; ++i) {
      Message msg = Response(base + i);
      if (customer_->Claim(msg.meta)) {
        customer_->RunClaimed(std::move(msg));
      } else {
        customer_->Accept(std::move(msg));
      }
    }
  };
  feed(0);
  feed(100000);
  customer_->Drain();
  std::vector<int> got = order();
  ASSERT_EQ(got.size(), 4000u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], i < 2000 ? static_cast<int>(i)
                               : 100000 + static_cast<int>(i - 2000));
  }
}

}  // namespace
}  // namespace ps
