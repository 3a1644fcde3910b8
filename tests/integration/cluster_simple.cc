// SimpleApp across processes: the scheduler (this program, started as the
// scheduler) sends requests to every node, itself included; every node
// counts what it handled. Workers also ask the servers and check the
// answers.

#include <gflags/gflags.h>

#include <atomic>

#include "ps/ps.h"

DEFINE_int32(requests, 50, "requests from the scheduler to every node");

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ps::Start(0, argv[0]);
  std::atomic<int> handled{0};
  ps::SimpleApp app(0, 0);
  app.set_request_handle([&](const ps::SimpleData& req, ps::SimpleApp* a) {
    if (req.head == 1) {
      CHECK_EQ(req.body, "census");
      ++handled;
      a->Response(req, "counted");
    } else {
      a->Response(req, "echo:" + req.body);
    }
  });
  std::atomic<int> echoes{0};
  app.set_response_handle([&](const ps::SimpleData& res, ps::SimpleApp*) {
    if (res.body.rfind("echo:", 0) == 0) ++echoes;
  });
  if (ps::IsScheduler()) {
    std::vector<int> ts;
    for (int i = 0; i < FLAGS_requests; ++i) {
      ts.push_back(app.Request(
          1, "census", ps::kScheduler + ps::kServerGroup + ps::kWorkerGroup));
    }
    for (int t : ts) app.Wait(t);
  }
  if (ps::IsWorker()) {
    app.Wait(app.Request(2, "hello", ps::kServerGroup));
    CHECK_EQ(echoes.load(), ps::NumServers());
  }
  ps::Finalize(0, true);
  // Finalize drained the app: every request from the scheduler was handled.
  if (handled.load() != FLAGS_requests) {
    LOG(ERROR) << "cluster_simple: handled " << handled.load() << " of "
               << FLAGS_requests;
    return 1;
  }
  LOG(INFO) << "cluster_simple: handled " << handled.load() << " requests";
  return 0;
}
