// ControllerFixture: a ConsistencyController on its own, with no transport
// and a fake clock. Requests go in through Push and Pull; the controller's
// decisions come out through the four hooks a test overrides to record what
// it checks (controller_test.cc, elastic_controller_test.cc).
#ifndef PS_TESTUTIL_CONTROLLER_FIXTURE_H_
#define PS_TESTUTIL_CONTROLLER_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "consistency/controller.h"
#include "testutil/fake_clock.h"

namespace ps {

class ControllerFixture : public ::testing::Test {
 protected:
  static constexpr int kA = 9, kB = 11, kC = 13;  // workers of ranks 0, 1, 2

  // What the controller decided (its Callbacks): run a request, run one
  // that is acknowledged already, acknowledge without running, fail.
  virtual void OnRun(const RawRequest& r) = 0;
  virtual void OnRunAcked(const RawRequest& r) = 0;
  virtual void OnAck(const RawRequest& r) = 0;
  virtual void OnFail(const RawRequest& r, const Status& s) = 0;

  // A controller of `spec` ("asp", "ssp:2", "bsp") over `workers`.
  void Make(const std::string& spec, std::vector<int> workers = {kA, kB}) {
    auto config = ConsistencyConfig::Parse(spec);
    ASSERT_TRUE(config.ok()) << config.status();
    ConsistencyController::Callbacks cb;
    cb.run = [this](const RawRequest& r) { OnRun(r); };
    cb.run_acked = [this](const RawRequest& r) { OnRunAcked(r); };
    cb.ack = [this](const RawRequest& r) { OnAck(r); };
    cb.fail = [this](const RawRequest& r, const Status& s) { OnFail(r, s); };
    c_ = std::make_unique<ConsistencyController>(*config, std::move(workers),
                                                 std::move(cb), &clock_);
  }

  // A request of worker `sender`, its `ts`-th, made at iteration `clock`;
  // a push carries one zero float per key and is committed (bsp: it counts
  // on arrival; a test of commits clears `committed`).
  static RawRequest Req(int sender, int ts, int64_t clock, bool push, bool pull,
                        const std::vector<Key>& keys) {
    RawRequest r;
    r.sender = sender;
    r.timestamp = ts;
    r.clock = clock;
    r.push = push;
    r.pull = pull;
    r.kvs.keys = SArray<Key>(keys);
    if (push) r.kvs.vals = SArray<char>(keys.size() * 4, 0);
    r.committed = push;
    return r;
  }
  void Push(int w, int ts, int64_t clock, const std::vector<Key>& keys) {
    c_->OnRequest(Req(w, ts, clock, true, false, keys));
  }
  void Pull(int w, int ts, int64_t clock, const std::vector<Key>& keys) {
    c_->OnRequest(Req(w, ts, clock, false, true, keys));
  }
  // Records a push applied to each of its keys.
  void Apply(const RawRequest& r) {
    for (Key k : r.kvs.keys) applied_[k].push_back(r.sender);
  }

  FakeClock clock_;
  std::unique_ptr<ConsistencyController> c_;
  std::map<Key, std::vector<int>> applied_;  // key -> senders, in order
};

}  // namespace ps

#endif  // PS_TESTUTIL_CONTROLLER_FIXTURE_H_
