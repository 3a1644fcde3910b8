#include "node/request_tracker.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <ostream>
#include <thread>
#include <vector>

#include "ps/internal/timestamp.h"
#include "util/wake_fd.h"

namespace ps {

// Test failures name status codes instead of dumping their bytes.
inline void PrintTo(Status::Code code, std::ostream* os) {
  *os << Status::CodeName(code);
}

namespace {

using Code = Status::Code;

TEST(RequestTrackerTest, TimestampsAreDistinctAndIncreasing) {
  RequestTracker t;
  int a = t.NewRequest();
  int b = t.NewRequest();
  int c = t.NewRequest();
  EXPECT_EQ(a, 0);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_EQ(t.open_requests(), 3u);
}

// Timestamps are 64-bit and never wrap; the API's int (their low 31 bits)
// resolves to the newest request issued with those bits.
TEST(RequestTrackerTest, TimestampsGoOnPastTheApiIntAndResolveBack) {
  const int64_t start = (int64_t{1} << 31) - 2;
  RequestTracker t(start);
  std::vector<int64_t> ts;
  for (int i = 0; i < 4; ++i) ts.push_back(t.NewRequest());
  EXPECT_EQ(ts, std::vector<int64_t>({start, start + 1, start + 2, start + 3}));
  EXPECT_EQ(ApiTimestamp(ts[1]), std::numeric_limits<int>::max());
  EXPECT_EQ(ApiTimestamp(ts[2]), 0);
  EXPECT_EQ(ApiTimestamp(ts[3]), 1);
  for (int64_t x : ts) EXPECT_EQ(t.Resolve(ApiTimestamp(x)), x);
  // Never issued: below the first, above the newest, negative.
  EXPECT_EQ(t.Resolve(2), -1);
  EXPECT_EQ(t.Resolve(-1), -1);
  for (int64_t x : ts) t.Expect(x, {8});
  EXPECT_TRUE(t.OnResponse(ts[2], 8, Status::OK()));
  EXPECT_TRUE(t.Wait(ts[2]).ok());
  EXPECT_EQ(t.OldestOpen(), ts[0]);
  EXPECT_EQ(t.Wait(start - 1).code(), Code::kInvalidArgument);
  // Far past the boundary: the newest request with those bits.
  RequestTracker far(int64_t{5} << 31);
  const int64_t f = far.NewRequest();
  EXPECT_EQ(ApiTimestamp(f), 0);
  EXPECT_EQ(far.Resolve(0), f);
  EXPECT_EQ(ResolveApiTimestamp(7, f + 3), (int64_t{4} << 31) + 7);
  // Only before the first request.
  EXPECT_FALSE(far.StartAt(0));
  RequestTracker fresh;
  EXPECT_TRUE(fresh.StartAt(start));
  EXPECT_EQ(fresh.NewRequest(), start);
}

TEST(RequestTrackerTest, CompletesOnlyAfterAllExpectedResponses) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8, 10, 12});
  EXPECT_TRUE(t.IsOpen(ts));
  EXPECT_EQ(t.Outstanding(ts), 3);
  EXPECT_TRUE(t.Expecting(ts, 10));

  EXPECT_FALSE(t.OnResponse(ts, 10, Status::OK()));
  EXPECT_TRUE(t.IsOpen(ts));
  EXPECT_FALSE(t.Expecting(ts, 10));
  EXPECT_EQ(t.Outstanding(ts), 2);
  EXPECT_EQ(t.Wait(ts, 0).code(), Code::kDeadlineExceeded);

  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));
  EXPECT_TRUE(t.IsOpen(ts));
  EXPECT_EQ(t.Outstanding(ts), 1);

  EXPECT_TRUE(t.OnResponse(ts, 12, Status::OK()));
  EXPECT_FALSE(t.IsOpen(ts));
  EXPECT_EQ(t.Outstanding(ts), 0);
  EXPECT_TRUE(t.Wait(ts).ok());
  EXPECT_TRUE(t.Wait(ts, 0).ok());
}

TEST(RequestTrackerTest, DoesNotCompleteBeforeExpect) {
  RequestTracker t;
  int ts = t.NewRequest();
  EXPECT_TRUE(t.IsOpen(ts));
  EXPECT_EQ(t.Outstanding(ts), 0);
  EXPECT_EQ(t.Wait(ts, 0).code(), Code::kDeadlineExceeded);
  // A response before Expect() is not one the request waits for.
  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));
  EXPECT_TRUE(t.IsOpen(ts));
}

TEST(RequestTrackerTest, ExpectWithEmptyListCompletesAtOnce) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {});
  EXPECT_FALSE(t.IsOpen(ts));
  EXPECT_EQ(t.open_requests(), 0u);
  EXPECT_TRUE(t.Wait(ts, 0).ok());
}

TEST(RequestTrackerTest, ErrorResponseFailsRequestWithThatStatus) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8, 10});
  EXPECT_TRUE(t.OnResponse(ts, 10, Status::InvalidArgument("bad lens")));
  EXPECT_FALSE(t.IsOpen(ts));
  // The other peer's late answer is ignored.
  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));
  Status s = t.Wait(ts);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad lens");
}

TEST(RequestTrackerTest, FailFailsOpenRequest) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Fail(ts, Status::Unavailable("send failed"));
  EXPECT_FALSE(t.IsOpen(ts));
  // Expect() after a failure does not reopen the request.
  t.Expect(ts, {8});
  EXPECT_FALSE(t.IsOpen(ts));
  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));
  EXPECT_EQ(t.Wait(ts).code(), Code::kUnavailable);
}

TEST(RequestTrackerTest, FailOnCompletedRequestIsIgnored) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8});
  EXPECT_TRUE(t.OnResponse(ts, 8, Status::OK()));
  t.Fail(ts, Status::Internal("late"));
  EXPECT_TRUE(t.Wait(ts).ok());
}

TEST(RequestTrackerTest, OnPeerFailedFailsExactlyRequestsWaitingOnPeer) {
  RequestTracker t;
  int a = t.NewRequest();  // Waits on 8 and 10.
  int b = t.NewRequest();  // Waits on 10 only.
  int c = t.NewRequest();  // Waits on 8; 10 already answered.
  int d = t.NewRequest();  // Not yet expecting anyone.
  int e = t.NewRequest();  // Done.
  t.Expect(a, {8, 10});
  t.Expect(b, {10});
  t.Expect(c, {8, 10});
  EXPECT_FALSE(t.OnResponse(c, 10, Status::OK()));
  t.Expect(e, {10});
  EXPECT_TRUE(t.OnResponse(e, 10, Status::OK()));

  std::vector<int64_t> failed =
      t.OnPeerFailed(10, Status::Unavailable("10 died"));
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, std::vector<int64_t>({a, b}));

  EXPECT_FALSE(t.IsOpen(a));
  EXPECT_FALSE(t.IsOpen(b));
  EXPECT_TRUE(t.IsOpen(c));
  EXPECT_TRUE(t.IsOpen(d));
  EXPECT_EQ(t.Wait(a).code(), Code::kUnavailable);
  Status sb = t.Wait(b);
  EXPECT_EQ(sb.code(), Code::kUnavailable);
  EXPECT_EQ(sb.message(), "10 died");
  EXPECT_TRUE(t.Wait(e).ok());

  // c still completes normally.
  EXPECT_TRUE(t.OnResponse(c, 8, Status::OK()));
  EXPECT_TRUE(t.Wait(c).ok());

  // A second report of the same death finds nothing more.
  EXPECT_TRUE(t.OnPeerFailed(10, Status::Unavailable("again")).empty());
}

TEST(RequestTrackerTest, FailAllFailsEveryOpenRequest) {
  RequestTracker t;
  int a = t.NewRequest();
  int b = t.NewRequest();
  int done = t.NewRequest();
  t.Expect(a, {8});
  t.Expect(done, {});
  std::vector<int64_t> failed = t.FailAll(Status::Aborted("shutdown"));
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, std::vector<int64_t>({a, b}));
  EXPECT_EQ(t.open_requests(), 0u);
  EXPECT_EQ(t.Wait(a).code(), Code::kAborted);
  EXPECT_EQ(t.Wait(b).code(), Code::kAborted);
  EXPECT_TRUE(t.Wait(done).ok());
}

TEST(RequestTrackerTest, UnexpectedResponsesAreIgnored) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8, 10});
  EXPECT_FALSE(t.OnResponse(ts, 12, Status::OK()));  // Not asked.
  EXPECT_FALSE(t.OnResponse(ts, 12, Status::Internal("stranger")));
  EXPECT_FALSE(t.OnResponse(ts + 100, 8, Status::OK()));  // Unknown ts.
  EXPECT_FALSE(t.OnResponse(-1, 8, Status::OK()));
  EXPECT_EQ(t.Outstanding(ts), 2);

  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));
  EXPECT_FALSE(t.OnResponse(ts, 8, Status::OK()));  // Duplicate.
  EXPECT_EQ(t.Outstanding(ts), 1);
  EXPECT_TRUE(t.IsOpen(ts));

  EXPECT_TRUE(t.OnResponse(ts, 10, Status::OK()));
  EXPECT_FALSE(t.OnResponse(ts, 10, Status::OK()));  // After completion.
  EXPECT_TRUE(t.Wait(ts).ok());
}

TEST(RequestTrackerTest, WaitWithTimeoutReturnsDeadlineExceeded) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8, 10});
  Status s = t.Wait(ts, 0);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded);
  EXPECT_NE(s.message().find("2 responses"), std::string::npos) << s;
  s = t.Wait(ts, 1);
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded);
  // The timeout neither completes nor forgets the request.
  EXPECT_TRUE(t.IsOpen(ts));
  EXPECT_EQ(t.Outstanding(ts), 2);
  t.OnResponse(ts, 8, Status::OK());
  t.OnResponse(ts, 10, Status::OK());
  EXPECT_TRUE(t.Wait(ts, 0).ok());
}

TEST(RequestTrackerTest, WaitOnUnknownTimestampIsInvalidArgument) {
  RequestTracker t;
  EXPECT_EQ(t.Wait(0).code(), Code::kInvalidArgument);
  int ts = t.NewRequest();
  EXPECT_EQ(t.Wait(ts + 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(t.Wait(-1).code(), Code::kInvalidArgument);
  EXPECT_EQ(t.Wait(ts + 1, 0).code(), Code::kInvalidArgument);
}

TEST(RequestTrackerTest, CompletedRequestsArePruned) {
  RequestTracker t;
  for (int i = 0; i < 10000; ++i) {
    int ts = t.NewRequest();
    t.Expect(ts, {8, 10});
    t.OnResponse(ts, 10, Status::OK());
    t.OnResponse(ts, 8, Status::OK());
  }
  EXPECT_EQ(t.open_requests(), 0u);
  int failed = t.NewRequest();
  t.Expect(failed, {8});
  t.OnPeerFailed(8, Status::Unavailable("gone"));
  EXPECT_EQ(t.open_requests(), 0u);
}

TEST(RequestTrackerTest, RememberedFailuresAreBounded) {
  RequestTracker t;
  const int n = static_cast<int>(RequestTracker::kMaxRememberedFailures) + 10;
  std::vector<int> ts(n);
  for (int i = 0; i < n; ++i) {
    ts[i] = t.NewRequest();
    t.Fail(ts[i], Status::Aborted("failure " + std::to_string(i)));
  }
  EXPECT_EQ(t.open_requests(), 0u);
  // The newest kMaxRememberedFailures are still reported...
  for (int i = 10; i < n; ++i) {
    Status s = t.Wait(ts[i], 0);
    ASSERT_EQ(s.code(), Code::kAborted) << i;
    EXPECT_EQ(s.message(), "failure " + std::to_string(i));
  }
  // ...and the ten oldest were dropped.
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(t.Wait(ts[i], 0).message(), "failure " + std::to_string(i)) << i;
  }
}

TEST(RequestTrackerTest, WaitOnForgottenFailureDoesNotReportSuccess) {
  RequestTracker t;
  int first = t.NewRequest();
  t.Expect(first, {8});
  t.OnPeerFailed(8, Status::Unavailable("8 died"));
  for (size_t i = 0; i < RequestTracker::kMaxRememberedFailures; ++i) {
    t.Fail(t.NewRequest(), Status::Aborted("later"));
  }
  EXPECT_FALSE(t.Wait(first, 0).ok());
}

TEST(RequestTrackerTest, WaitWakesWhenLastResponseArrivesOnAnotherThread) {
  RequestTracker t;
  int ts = t.NewRequest();
  t.Expect(ts, {8, 10});
  std::mutex mu;
  std::condition_variable cv;
  bool waiter_started = false;
  Status result = Status::Internal("not set");
  std::thread waiter([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      waiter_started = true;
    }
    cv.notify_one();
    Status s = t.Wait(ts);
    std::lock_guard<std::mutex> lock(mu);
    result = s;
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return waiter_started; });
  }
  t.OnResponse(ts, 8, Status::OK());
  t.OnResponse(ts, 10, Status::OK());
  waiter.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST(RequestTrackerTest, PeerFailureWakesWaitersOnOtherThreads) {
  RequestTracker t;
  const int kWaiters = 4;
  std::vector<int> ts;
  for (int i = 0; i < kWaiters; ++i) {
    ts.push_back(t.NewRequest());
    t.Expect(ts.back(), {8, 10});
  }
  std::atomic<int> started{0};
  std::vector<Status> results(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      started.fetch_add(1);
      results[i] = t.Wait(ts[i]);  // No deadline: failure must wake it.
    });
  }
  // Spin (without sleeping) until every waiter is at least about to wait;
  // the outcome does not depend on whether they block before the failure.
  while (started.load() < kWaiters) std::this_thread::yield();
  std::vector<int64_t> failed = t.OnPeerFailed(10, Status::Unavailable("died"));
  EXPECT_EQ(failed.size(), static_cast<size_t>(kWaiters));
  for (auto& w : waiters) w.join();
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_EQ(results[i].code(), Code::kUnavailable) << i;
  }
}

TEST(RequestTrackerTest, ConcurrentResponsesCompleteEachRequestOnce) {
  RequestTracker t;
  const int kRequests = 500;
  const std::vector<int> peers = {8, 10, 12, 14};
  std::vector<int> ts;
  for (int i = 0; i < kRequests; ++i) {
    ts.push_back(t.NewRequest());
    t.Expect(ts.back(), peers);
  }
  std::atomic<int> completions{0};
  std::vector<std::thread> responders;
  for (int peer : peers) {
    responders.emplace_back([&, peer] {
      for (int i = 0; i < kRequests; ++i) {
        if (t.OnResponse(ts[i], peer, Status::OK())) completions.fetch_add(1);
      }
    });
  }
  for (auto& r : responders) r.join();
  EXPECT_EQ(completions.load(), kRequests);
  EXPECT_EQ(t.open_requests(), 0u);
  for (int i = 0; i < kRequests; ++i) EXPECT_TRUE(t.Wait(ts[i], 0).ok());
}

// A waiter sleeping in poll(2) is woken once by a completion on another
// thread, not by one on its own (it sees that itself); one waker at a time.
TEST(RequestTrackerTest, TheWakerIsWrittenOnceAndOnlyFromOtherThreads) {
  RequestTracker t;
  WakeFd wake;
  ASSERT_TRUE(wake.ok());
  int a = t.NewRequest();
  int b = t.NewRequest();
  int c = t.NewRequest();
  t.Expect(a, {8});
  t.Expect(b, {8});
  t.Expect(c, {8});
  ASSERT_TRUE(t.SetWaker(&wake));
  WakeFd other;
  EXPECT_FALSE(t.SetWaker(&other));
  EXPECT_TRUE(t.OnResponse(a, 8, Status::OK()));  // This thread: no write.
  EXPECT_FALSE(t.ClearWaker());
  ASSERT_TRUE(t.SetWaker(&wake));
  std::thread completer([&] {
    EXPECT_TRUE(t.OnResponse(b, 8, Status::OK()));
    t.Fail(c, Status::Unavailable("gone"));  // Already written: no more.
  });
  completer.join();
  EXPECT_TRUE(t.ClearWaker());
  wake.Consume();  // Exactly one count: this returns.
  pollfd pfd = {wake.fd(), POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "a second write";
  EXPECT_TRUE(t.Wait(b, 0).ok());
  EXPECT_EQ(t.Wait(c, 0).code(), Code::kUnavailable);
}

// A waker for one request is set only while that request is open, and only
// that request's completion on another thread signals it, however many
// others are open (Customer::Wait waits inside the van with several
// requests in flight).
TEST(RequestTrackerTest, TheWakerForOneRequestIsSignalledByThatRequestOnly) {
  RequestTracker t;
  WakeFd wake;
  ASSERT_TRUE(wake.ok());
  int a = t.NewRequest();
  EXPECT_FALSE(t.SetWaker(&wake, a + 1)) << "not open";
  int b = t.NewRequest();
  int c = t.NewRequest();
  t.Expect(a, {8});
  t.Expect(b, {8});
  t.Expect(c, {8});
  ASSERT_TRUE(t.SetWaker(&wake, a)) << "b and c are open too";
  std::thread others([&] {
    EXPECT_TRUE(t.OnResponse(b, 8, Status::OK()));
    t.Fail(c, Status::Unavailable("gone"));
  });
  others.join();
  pollfd pfd = {wake.fd(), POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "signalled by another request";
  std::thread completer([&] { EXPECT_TRUE(t.OnResponse(a, 8, Status::OK())); });
  completer.join();
  EXPECT_TRUE(t.ClearWaker());
  wake.Consume();
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "a second write";
  EXPECT_FALSE(t.SetWaker(&wake, a)) << "a has completed";
}

}  // namespace
}  // namespace ps
