// memcpy_baseline: what this machine's memory does without any network, the
// second limit bench/kv_bench is compared with.
//
//   memcpy_baseline [--sizes=4096,...,4194304] [--dims=8,64]
//                   [--table_rows=10000000] [--seconds=1]
//
// memcpy: copies of `size` bytes, repeated for --seconds. "hot" copies one
// source buffer to one destination (both stay in cache when they fit);
// "cold" walks through --cold_bytes of source and of destination, larger
// than the last-level cache, so every copy comes from memory.
//
// gather / scatter_add: over a table of --table_rows rows of `dim` floats
// (filled first, so every page is real), batches of --batch random rows are
// copied out to a dense buffer (gather, what a server does for a pull) or
// added into from one (scatter_add, a push). This is the yardstick of the
// model layer's embedding benchmark.
//
// Output, one line per case (GB = 1e9 bytes; payload bytes only):
//   RESULT baseline=memcpy size=4096 cache=hot GB_s=.. copies_s=..
//   RESULT baseline=gather dim=64 table_rows=10000000 batch=1000 rows_s=..
//          GB_s=..                                     (one line)
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

DEFINE_string(sizes, "4096,16384,65536,262144,1048576,4194304",
              "memcpy sizes in bytes, comma-separated");
DEFINE_uint64(cold_bytes, uint64_t{64} << 20,
              "cold memcpy: bytes of source and of destination walked");
DEFINE_string(dims, "8,64", "gather/scatter-add row widths in floats");
DEFINE_uint64(table_rows, 10000000, "gather/scatter-add table rows");
DEFINE_int32(batch, 1000, "rows per gather/scatter-add batch");
DEFINE_double(seconds, 1, "measured duration per case, in seconds");
DEFINE_uint64(seed, 1, "seed of the random row ids");

namespace {

using Clock = std::chrono::steady_clock;

// Keeps the compiler from dropping stores nobody reads.
inline void Clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

bool ParseNumbers(const std::string& text, std::vector<size_t>* out) {
  out->clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    char* stop = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v == 0) return false;
    out->push_back(static_cast<size_t>(v));
    begin = end + 1;
  }
  return !out->empty();
}

// The row kernels, for `batch` rows of `kDim` floats (`dim` when kDim is 0).
// A width known at compile time lets the compiler inline the copies and
// vectorise the adds at -O2, as hand-written embedding code for a fixed
// width would be.
template <size_t kDim>
struct RowKernels {
  // dense[i] = table[ids[i]].
  static void Gather(const float* __restrict table, float* __restrict dense,
                     const uint32_t* ids, size_t batch, size_t dim) {
    const size_t n = kDim > 0 ? kDim : dim;
    for (size_t i = 0; i < batch; ++i) {
      std::memcpy(dense + i * n, table + static_cast<size_t>(ids[i]) * n,
                  n * sizeof(float));
    }
  }
  // table[ids[i]] += dense[i].
  static void ScatterAdd(float* __restrict table, const float* __restrict dense,
                         const uint32_t* ids, size_t batch, size_t dim) {
    const size_t n = kDim > 0 ? kDim : dim;
    for (size_t i = 0; i < batch; ++i) {
      float* __restrict row = table + static_cast<size_t>(ids[i]) * n;
      const float* __restrict add = dense + i * n;
      for (size_t j = 0; j < n; ++j) row[j] += add[j];
    }
  }
};

struct Kernels {
  void (*gather)(const float*, float*, const uint32_t*, size_t, size_t);
  void (*scatter_add)(float*, const float*, const uint32_t*, size_t, size_t);
};

template <size_t kDim>
Kernels KernelsOf() {
  return {RowKernels<kDim>::Gather, RowKernels<kDim>::ScatterAdd};
}

Kernels KernelsFor(size_t dim) {
  switch (dim) {
    case 8:
      return KernelsOf<8>();
    case 16:
      return KernelsOf<16>();
    case 32:
      return KernelsOf<32>();
    case 64:
      return KernelsOf<64>();
    case 128:
      return KernelsOf<128>();
    default:
      return KernelsOf<0>();
  }
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Calls `op` (one unit of work) until --seconds have passed, checking the
// clock every `stride` calls; returns the calls per second.
template <typename Op>
double Rate(Op op, uint64_t stride) {
  // A short unmeasured run first: page faults, frequency, caches.
  Clock::time_point start = Clock::now();
  while (SecondsSince(start) < std::min(0.2, FLAGS_seconds)) {
    for (uint64_t i = 0; i < stride; ++i) op();
  }
  uint64_t calls = 0;
  start = Clock::now();
  double elapsed = 0;
  do {
    for (uint64_t i = 0; i < stride; ++i) op();
    calls += stride;
    elapsed = SecondsSince(start);
  } while (elapsed < FLAGS_seconds);
  return static_cast<double>(calls) / elapsed;
}

void RunMemcpy(const std::vector<size_t>& sizes) {
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
  const size_t cold = std::max<size_t>(FLAGS_cold_bytes, max_size);
  std::vector<char> src(cold, 'x');
  std::vector<char> dst(cold, 'y');
  for (size_t size : sizes) {
    const uint64_t stride = std::max<uint64_t>(1, (uint64_t{1} << 24) / size);
    double hot = Rate(
        [&] {
          std::memcpy(dst.data(), src.data(), size);
          Clobber(dst.data());
        },
        stride);
    size_t offset = 0;
    const size_t slots = cold / size;
    double walked = Rate(
        [&] {
          std::memcpy(dst.data() + offset, src.data() + offset, size);
          Clobber(dst.data());
          offset = offset + size < slots * size ? offset + size : 0;
        },
        stride);
    for (const auto& [name, rate] :
         {std::make_pair("hot", hot), std::make_pair("cold", walked)}) {
      std::printf(
          "RESULT baseline=memcpy size=%zu cache=%s GB_s=%.3f copies_s=%.1f\n",
          size, name, rate * static_cast<double>(size) / 1e9, rate);
    }
    std::fflush(stdout);
  }
}

void RunTable(size_t dim) {
  const size_t rows = FLAGS_table_rows;
  const size_t batch = static_cast<size_t>(FLAGS_batch);
  // Every element written: no page is left to the kernel's shared zero page.
  std::vector<float> table(rows * dim, 0.5f);
  std::vector<float> dense(batch * dim, 0.25f);
  // A pool of random row ids, cycled; large enough that the ids themselves
  // are not what the cache holds.
  std::mt19937_64 rng(FLAGS_seed);
  std::uniform_int_distribution<uint64_t> pick(0, rows - 1);
  const size_t num_ids = std::max<size_t>(batch, size_t{1} << 20);
  std::vector<uint32_t> ids(num_ids);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(pick(rng));
  const size_t batches = num_ids / batch;

  const Kernels kernels = KernelsFor(dim);
  size_t b = 0;
  const double gathers = Rate(
      [&] {
        kernels.gather(table.data(), dense.data(), ids.data() + b * batch,
                       batch, dim);
        Clobber(dense.data());
        if (++b == batches) b = 0;
      },
      1);
  b = 0;
  const double scatters = Rate(
      [&] {
        kernels.scatter_add(table.data(), dense.data(), ids.data() + b * batch,
                            batch, dim);
        Clobber(table.data());
        if (++b == batches) b = 0;
      },
      1);
  for (const auto& [name, rate] : {std::make_pair("gather", gathers),
                                   std::make_pair("scatter_add", scatters)}) {
    const double rows_s = rate * static_cast<double>(batch);
    std::printf(
        "RESULT baseline=%s dim=%zu table_rows=%zu batch=%zu rows_s=%.0f "
        "GB_s=%.3f\n",
        name, dim, rows, batch, rows_s,
        rows_s * static_cast<double>(dim * sizeof(float)) / 1e9);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char* argv[]) {
  gflags::SetUsageMessage("memcpy and random row gather/scatter-add rates");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  std::vector<size_t> sizes, dims;
  if (!ParseNumbers(FLAGS_sizes, &sizes) || !ParseNumbers(FLAGS_dims, &dims)) {
    std::fprintf(stderr, "memcpy_baseline: bad --sizes or --dims\n");
    return 2;
  }
  if (!(FLAGS_seconds > 0) || FLAGS_batch < 1 || FLAGS_table_rows == 0 ||
      FLAGS_table_rows > UINT32_MAX) {
    std::fprintf(stderr,
                 "memcpy_baseline: bad --seconds, --batch or "
                 "--table_rows\n");
    return 2;
  }
  RunMemcpy(sizes);
  for (size_t dim : dims) RunTable(dim);
  return 0;
}
