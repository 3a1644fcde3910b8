// Pushes and pulls in a loop for a bounded time, for the failure tests: a
// node of this cluster gets killed while it runs. With --crash_role and
// --crash_rank, that node kills itself with SIGKILL after --crash_after_ms.
// With --stuck_rank, that server stops answering requests after
// --crash_after_ms but stays alive (its heartbeats go on): a hung handle.

#include <gflags/gflags.h>
#include <signal.h>

#include <chrono>

#include "ps/ps.h"

DEFINE_int32(seconds, 30, "how long workers keep pushing and pulling");
DEFINE_string(crash_role, "", "role of the node that kills itself");
DEFINE_int32(crash_rank, -1, "rank of the node that kills itself");
DEFINE_int32(crash_after_ms, 1000, "when it kills itself (or gets stuck)");
DEFINE_int32(stuck_rank, -1, "rank of the server that stops answering");

namespace {

void MaybeArmCrash(std::thread* t) {
  bool me = (FLAGS_crash_role == "server" && ps::IsServer()) ||
            (FLAGS_crash_role == "worker" && ps::IsWorker());
  if (!me || ps::MyRank() != FLAGS_crash_rank) return;
  *t = std::thread([] {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(FLAGS_crash_after_ms));
    LOG(INFO) << "cluster_soak: killing myself";
    raise(SIGKILL);
  });
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ps::Start(0, argv[0]);
  std::thread crash;
  MaybeArmCrash(&crash);
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    if (ps::MyRank() == FLAGS_stuck_rank) {
      const auto stuck_at = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(FLAGS_crash_after_ms);
      server->set_request_handle(
          [stuck_at, sum = ps::KVServerDefaultHandle<float>()](
              const ps::KVMeta& meta, const ps::KVPairs<float>& data,
              ps::KVServer<float>* s) mutable {
            if (std::chrono::steady_clock::now() < stuck_at) {
              sum(meta, data, s);
            } else {
              LOG_FIRST_N(WARNING, 1) << "cluster_soak: no longer answering";
            }
          });
    } else {
      server->set_request_handle(ps::KVServerDefaultHandle<float>());
    }
  }
  if (ps::IsWorker()) {
    ps::KVWorker<float> kv(0, 0);
    std::vector<ps::Key> keys(2000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003;
    std::vector<float> vals(keys.size(), 1), out;
    auto end =
        std::chrono::steady_clock::now() + std::chrono::seconds(FLAGS_seconds);
    for (int it = 0; std::chrono::steady_clock::now() < end; ++it) {
      kv.Wait(kv.Push(keys, vals));
      kv.Wait(kv.Pull(keys, &out));
      if (it % 200 == 0) LOG(INFO) << "cluster_soak: progress " << it;
    }
  }
  ps::Finalize(0, true);
  if (crash.joinable()) crash.join();
  return 0;
}
