// ps-lite's multi-worker mode: one worker process hosts several logical
// workers, one per customer id, each calling Start and Finalize on its own
// thread. Run with DMLC_NUM_WORKER=N and EMBER_WORKER_PROCS=1.

#include <thread>

#include "ps/ps.h"

namespace {

void Worker(int customer_id, int* result) {
  ps::Start(customer_id);
  ps::KVWorker<float> kv(0, customer_id);
  std::vector<ps::Key> keys(1000);
  std::vector<float> vals(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = ps::kMaxKey / keys.size() * i + customer_id;
    vals[i] = static_cast<float>(i % 13 + customer_id);
  }
  for (int r = 0; r < 10; ++r) kv.Wait(kv.Push(keys, vals));
  std::vector<float> out;
  kv.Wait(kv.Pull(keys, &out));
  *result = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i] != 10 * vals[i]) *result = 1;
  }
  LOG(INFO) << "cluster_multi: customer " << customer_id
            << (*result ? " FAILED" : " ok");
  ps::Finalize(customer_id, true);
}

}  // namespace

int main(int argc, char* argv[]) {
  (void)argc;
  if (!ps::IsWorker()) {
    ps::Start(0, argv[0]);
    std::unique_ptr<ps::KVServer<float>> server;
    if (ps::IsServer()) {
      server = std::make_unique<ps::KVServer<float>>(0);
      server->set_request_handle(ps::KVServerDefaultHandle<float>());
    }
    ps::Finalize(0, true);
    return 0;
  }
  int n = ps::NumWorkers();
  std::vector<int> results(n, 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < n; ++c) threads.emplace_back(Worker, c, &results[c]);
  for (auto& t : threads) t.join();
  for (int r : results) {
    if (r != 0) return 1;
  }
  return 0;
}
