// A checkpoint save while workers push: how much memory the save adds and
// how long it holds pushes up. One server and two workers in one process
// over the in-process transport (no network in the figures); the server
// holds one embedding table of --rows rows, which both workers keep pushing
// to (--batch random rows per push) before, during and after a Save.
//
//   save_bench [--rows=10000000] [--dim=16] [--optimizer=adagrad(lr=0.05)]
//
// Prints one line:
//   RESULT save rows=.. table_bytes=.. rss_before=.. peak_rss=..
//     peak_over_table=.. extra_over_table=.. save_s=.. pushes_during=..
//     longest_push_ms=.. baseline_longest_push_ms=.. stall_ratio=..
// table_bytes is the server's table memory (ModelServerStats); peak_rss the
// process's resident peak during the save (VmHWM, reset just before it);
// extra_over_table = (peak_rss - rss_before) / table_bytes. longest_push_ms
// is the longest push that overlapped the save, baseline_longest_push_ms
// the longest in as long a window just before it (the baseline, same run).
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ps/model.h"
#include "testutil/inproc_cluster.h"
#include "util/mix.h"

DEFINE_int64(rows, 10000000, "rows of the table");
DEFINE_int32(dim, 16, "floats per row");
DEFINE_string(optimizer, "adagrad(lr=0.05)", "the table's optimizer");
DEFINE_int32(batch, 1000, "rows per push");
DEFINE_string(dir, "/tmp", "where the checkpoint goes (removed after)");

namespace {

using Clock = std::chrono::steady_clock;

// A line of /proc/self/status in kB ("VmRSS", "VmHWM"), or -1.
long StatusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0)
      return std::stol(line.substr(key.size() + 1));
  }
  return -1;
}

struct Push {
  Clock::time_point start, end;
};

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  const uint64_t rows = static_cast<uint64_t>(FLAGS_rows);
  const int dim = FLAGS_dim;

  ps::InProcCluster cluster(
      1, 2, [](ps::Options* o) { o->model_timeout_ms = 3600 * 1000; });
  cluster.Start();
  auto server = std::make_unique<ps::ModelServer>(cluster.server(0));
  std::vector<std::unique_ptr<ps::ModelClient>> clients;
  for (int w = 0; w < 2; ++w) {
    clients.push_back(std::make_unique<ps::ModelClient>(cluster.worker(w)));
    ps::Status s = clients[w]->RegisterTable(
        {"emb", dim, "uniform(-0.01,0.01)", FLAGS_optimizer, "asp"});
    if (!s.ok()) {
      std::fprintf(stderr, "register: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  auto id_of = [](uint64_t row) {
    return ps::SplitMix64(row + ps::kGoldenGamma);
  };

  // Fill: pulling creates the rows.
  {
    std::vector<uint64_t> ids;
    std::vector<float> out;
    for (uint64_t begin = 0; begin < rows; begin += 100000) {
      ids.clear();
      for (uint64_t r = begin; r < std::min(rows, begin + 100000); ++r) {
        ids.push_back(id_of(r));
      }
      ps::Status s = clients[0]->PullRows("emb", ids, &out);
      if (!s.ok()) {
        std::fprintf(stderr, "fill: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const ps::ModelServerStats stats = server->stats();

  std::atomic<bool> stop{false};
  std::vector<std::vector<Push>> pushes(2);
  std::vector<std::thread> pushers;
  for (int w = 0; w < 2; ++w) {
    pushers.emplace_back([&, w] {
      uint64_t state = 1234567 + w;
      std::vector<uint64_t> ids(FLAGS_batch);
      std::vector<float> grads(static_cast<size_t>(FLAGS_batch) * dim, 0.001f);
      while (!stop.load(std::memory_order_relaxed)) {
        for (auto& id : ids) {
          state += ps::kGoldenGamma;
          id = id_of(ps::SplitMix64(state) % rows);
        }
        Push p;
        p.start = Clock::now();
        ps::Status s = clients[w]->Push({}, {{"emb", ids, grads}});
        p.end = Clock::now();
        if (!s.ok()) {
          std::fprintf(stderr, "push: %s\n", s.ToString().c_str());
          return;
        }
        pushes[w].push_back(p);
      }
    });
  }

  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm up
  const long rss_before = StatusKb("VmRSS");
  {
    // Reset the resident peak (VmHWM) to the current size (Linux >= 4.0).
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
  }
  const std::string dir =
      FLAGS_dir + "/ember_save_bench." + std::to_string(getpid());
  if (std::system(("mkdir -p " + dir).c_str()) != 0) return 1;
  const Clock::time_point save_start = Clock::now();
  ps::Status saved = clients[0]->Save(dir);
  const Clock::time_point save_end = Clock::now();
  const long peak = StatusKb("VmHWM");
  // As long again after the save, so the baseline window below has pushes
  // of a steady state on both sides.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  for (auto& t : pushers) t.join();
  if (std::system(("rm -rf " + dir).c_str()) != 0) return 1;
  if (!saved.ok()) {
    std::fprintf(stderr, "save: %s\n", saved.ToString().c_str());
    return 1;
  }

  const Clock::duration save_time = save_end - save_start;
  double longest = 0, baseline = 0;
  size_t during = 0;
  for (const auto& list : pushes) {
    for (const Push& p : list) {
      const double ms = Ms(p.end - p.start);
      if (p.end >= save_start && p.start <= save_end) {
        longest = std::max(longest, ms);
        ++during;
      } else if (p.end < save_start && p.start >= save_start - save_time) {
        baseline = std::max(baseline, ms);
      }
    }
  }
  const double table_bytes = static_cast<double>(stats.memory_bytes);
  std::printf(
      "RESULT save rows=%llu dim=%d optimizer=%s table_bytes=%.0f "
      "rss_before=%.0f peak_rss=%.0f peak_over_table=%.3f "
      "extra_over_table=%.3f save_s=%.2f pushes_during=%zu "
      "longest_push_ms=%.1f baseline_longest_push_ms=%.1f stall_ratio=%.2f\n",
      static_cast<unsigned long long>(rows), dim, FLAGS_optimizer.c_str(),
      table_bytes, rss_before * 1024.0, peak * 1024.0,
      peak * 1024.0 / table_bytes, (peak - rss_before) * 1024.0 / table_bytes,
      std::chrono::duration<double>(save_time).count(), during, longest,
      baseline, baseline > 0 ? longest / baseline : 0.0);
  clients.clear();
  cluster.Finalize();
  server.reset();
  return 0;
}
