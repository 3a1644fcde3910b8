// ring_balance: how evenly the key ring and the model layer's keys spread
// over the servers, how much of the key space a membership change moves,
// and what slicing a sorted batch costs per key. Prints one machine-readable
// "RESULT ..." line per figure.
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "model/model_protocol.h"
#include "partition/key_ring.h"
#include "partition/slicer.h"

DEFINE_int32(servers, 8, "number of servers");
DEFINE_int32(keys, 1000000, "number of keys");
DEFINE_uint64(seed, 1, "seed of the uniformly random keys");

namespace {

using u128 = unsigned __int128;

std::vector<int> ServerIds(int num_servers) {
  std::vector<int> ids;
  for (int r = 0; r < num_servers; ++r) ids.push_back(8 + 2 * r);
  return ids;
}

double MaxOverMean(const ps::KeyRing& ring, const std::vector<uint64_t>& keys) {
  std::vector<size_t> counts(ring.num_servers(), 0);
  for (uint64_t k : keys) ++counts[ring.OwnerIndex(k)];
  const double mean = static_cast<double>(keys.size()) / ring.num_servers();
  return *std::max_element(counts.begin(), counts.end()) / mean;
}

// The fraction of the key space whose owner differs between two rings.
double MovedFraction(const ps::KeyRing& a, const ps::KeyRing& b) {
  std::vector<uint64_t> cuts = a.begins();
  cuts.insert(cuts.end(), b.begins().begin(), b.begins().end());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  u128 moved = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const u128 end = i + 1 < cuts.size() ? u128{cuts[i + 1]} : u128{1} << 64;
    if (a.Owner(cuts[i]) != b.Owner(cuts[i])) moved += end - cuts[i];
  }
  return static_cast<double>(moved) / 18446744073709551616.0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_servers < 1 || FLAGS_servers > 4096 || FLAGS_keys < 1) {
    std::fprintf(stderr, "need 1 <= --servers <= 4096 and --keys >= 1\n");
    return 1;
  }
  const int n = FLAGS_servers;
  const ps::KeyRing ring = ps::KeyRing::EvenSplit(ServerIds(n), 1).value();
  std::mt19937_64 rng(FLAGS_seed);
  std::vector<uint64_t> uniform(FLAGS_keys), rows(FLAGS_keys);
  for (auto& k : uniform) k = rng();
  const uint32_t table = ps::model::TableId("embedding");
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = ps::model::RowKey(table, i);
  }
  std::printf(
      "RESULT figure=balance keys=uniform servers=%d max_over_mean=%.4f\n", n,
      MaxOverMean(ring, uniform));
  std::printf(
      "RESULT figure=balance keys=model_rows_0..N servers=%d "
      "max_over_mean=%.4f\n",
      n, MaxOverMean(ring, rows));
  const ps::KeyRing spread =
      ps::KeyRing::EvenSplit(ServerIds(n), 1, ps::Placement::kSpread).value();
  std::vector<uint64_t> small(FLAGS_keys);
  for (size_t i = 0; i < small.size(); ++i) small[i] = i;
  std::printf(
      "RESULT figure=balance keys=0..N_spread servers=%d "
      "max_over_mean=%.4f\n",
      n, MaxOverMean(spread, small));

  const ps::KeyRing added = ring.AddServer(9999, 2).value();
  std::printf(
      "RESULT figure=add servers=%d moved=%.4f minimal=%.4f "
      "max_over_mean=%.4f\n",
      n, MovedFraction(ring, added), 1.0 / (n + 1),
      MaxOverMean(added, uniform));
  if (n > 1) {
    const ps::KeyRing removed = ring.RemoveServer(8, 2).value();
    std::printf(
        "RESULT figure=remove servers=%d moved=%.4f minimal=%.4f "
        "max_over_mean=%.4f\n",
        n, MovedFraction(ring, removed), 1.0 / n,
        MaxOverMean(removed, uniform));
  }

  std::vector<uint64_t> sorted = uniform;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (ps::Placement p : {ps::Placement::kRange, ps::Placement::kSpread}) {
    const ps::KeyRing r = ps::KeyRing::EvenSplit(ServerIds(n), 1, p).value();
    ps::SlicePlan plan;
    const int reps = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      if (!ps::SliceKeys(r, sorted.data(), sorted.size(), &plan).ok()) return 1;
    }
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    std::printf(
        "RESULT figure=slice placement=%s servers=%d keys=%zu "
        "ns_per_key=%.3f\n",
        ps::PlacementName(p), n, sorted.size(), ns / reps / sorted.size());
  }
  return 0;
}
