// embedding_bench: the server-side cost of the model layer's embedding
// tables, without any network: pull (EmbeddingTable::Lookup) and push
// (EmbeddingTable::ApplyGradients: merge duplicates, one optimizer update a
// row) in rows per second, and memory per row. Each figure is set beside a
// baseline measured in the same run, on the same key stream: a plain gather
// (pull) or scatter-add (push) over one flat float array of rows x dim.
//
//   embedding_bench [--rows=2000000] [--dims=8,64] [--optimizers=sgd,adagrad]
//                   [--batch=1000] [--ids=uniform|zipf] [--zipf_exponent=1.1]
//                   [--seconds=0.5 | --iterations=N] [--rounds=5]
//                   [--slice_batches=16]
//                   [--memory_rows=10000000]
//
// Every table is filled with --rows rows first (IDs are 64-bit hashes of row
// numbers 0..rows-1), so the measured calls find existing rows; the key
// stream (--stream_keys row numbers, cycled) is drawn once per run: uniform,
// or Zipf-like (a bounded power law of rank with --zipf_exponent, ranks
// shuffled over the rows so hot rows are not neighbours). Pushed gradients
// are small constants; their values do not change the cost.
//
// Output (one line each; GB = 1e9 bytes):
//   RESULT memory rows=10000000 dim=16 optimizer=adagrad bytes_per_row=..
//          memory_over_raw=.. resident_bytes_per_row=.. resident_over_raw=..
//   RESULT table dim=8 optimizer=sgd rows=.. bytes_per_row=..
//          raw_bytes_per_row=.. memory_over_raw=.. create_rows_s=..
//   RESULT op=pull dim=8 optimizer=sgd rows=.. batch=.. ids=uniform
//          rows_s=.. baseline=gather baseline_rows_s=.. ratio=..
//          ratio_min=.. ratio_max=.. rounds=.. ratios=..,..
//   RESULT op=push ... baseline=scatter_add baseline_rows_s=.. ratio=..
// ratio = Ember / baseline (1 would be as fast as the bare loop). Each case
// runs --rounds rounds with the table and the flat array both in memory.
// Within a round Ember and the baseline take turns of --slice_batches
// batches each (a few milliseconds) over the same keys, alternating which
// goes first, until each has run --seconds; so the machine's slow phases,
// which here last from a fraction of a second to minutes, hit both alike.
// rows_s and baseline_rows_s are medians over the rounds, ratio is the
// median of the per-round ratios, ratio_min / ratio_max their range and
// ratios the per-round ratios (scripts/bench.py reads them). The memory
// line's resident figures are the growth of the process's RSS
// (/proc/self/statm) while the table was built, measured before any other
// case runs.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model/embedding_table.h"
#include "model/initializer.h"
#include "model/optimizer.h"
#include "util/huge_pages.h"
#include "util/mix.h"

DEFINE_uint64(rows, 2000000, "rows in each measured table");
DEFINE_string(dims, "8,64", "row widths in floats, comma-separated");
DEFINE_string(optimizers, "sgd,adagrad",
              "optimizers, comma-separated: sgd, momentum, adagrad, adam, "
              "ftrl (each with a default learning rate)");
DEFINE_uint64(batch, 1000, "IDs per Lookup / ApplyGradients call");
DEFINE_string(ids, "uniform", "key distribution: uniform or zipf");
DEFINE_double(zipf_exponent, 1.1, "zipf: exponent s of P(rank) ~ rank^-s");
DEFINE_double(seconds, 0.5,
              "measured time of Ember and of the baseline in each round, in "
              "seconds");
DEFINE_uint64(iterations, 0,
              "if > 0: run exactly this many batches per figure and round "
              "instead of --seconds");
DEFINE_int32(rounds, 5,
             "rounds per case; each measures Ember and its baseline in turn, "
             "slice by slice, with the table and the flat array both in "
             "memory");
DEFINE_uint64(slice_batches, 16,
              "batches of Ember, then of the baseline, in each turn of a "
              "round: short enough that both see the same phases of the "
              "machine");
DEFINE_uint64(stream_keys, 4000000,
              "length of the key stream drawn once and cycled (long enough "
              "that its rows do not fit in cache)");
DEFINE_uint64(memory_rows, 10000000,
              "rows of the dim-16 Adagrad table of the memory line; 0 skips "
              "it");
DEFINE_uint64(seed, 1, "seed of the key stream");

namespace {

using Clock = std::chrono::steady_clock;
using ps::model::EmbeddingTable;
using ps::model::Initializer;
using ps::model::Optimizer;

constexpr char kInitializer[] = "uniform(lo=-0.01,hi=0.01)";

// Keeps the compiler from dropping stores nobody reads.
inline void Clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

// SplitMix64's output: the IDs a hashing worker would send.
uint64_t IdOfRow(uint64_t row) {
  return ps::SplitMix64(row + ps::kGoldenGamma);
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

bool SpecOf(const std::string& name, std::string* spec) {
  if (name == "sgd")
    *spec = "sgd(lr=0.01)";
  else if (name == "momentum")
    *spec = "momentum(lr=0.01)";
  else if (name == "adagrad")
    *spec = "adagrad(lr=0.01)";
  else if (name == "adam")
    *spec = "adam(lr=0.001)";
  else if (name == "ftrl")
    *spec = "ftrl(alpha=0.05)";
  else
    return false;
  return true;
}

size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (got != 2) return 0;
  return static_cast<size_t>(resident) * sysconf(_SC_PAGESIZE);
}

std::unique_ptr<EmbeddingTable> MakeTable(int dim, const std::string& spec) {
  auto init = Initializer::Parse(kInitializer);
  CHECK(init.ok()) << init.status();
  auto opt = Optimizer::Parse(spec);
  CHECK(opt.ok()) << opt.status();
  auto table = EmbeddingTable::Create("bench", 1, dim, init.value(),
                                      std::move(opt).value());
  CHECK(table.ok()) << table.status();
  return std::move(table).value();
}

// Creates rows 0..rows-1; returns the creation rate in rows/s.
double Fill(EmbeddingTable* table, size_t rows) {
  const size_t kStep = 4096;
  std::vector<uint64_t> ids(kStep);
  std::vector<float> out(kStep * table->dim());
  const Clock::time_point start = Clock::now();
  for (size_t begin = 0; begin < rows; begin += kStep) {
    const size_t n = std::min(kStep, rows - begin);
    for (size_t i = 0; i < n; ++i) ids[i] = IdOfRow(begin + i);
    CHECK(table->Lookup(ids.data(), n, out.data()).ok());
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  return rows / seconds;
}

// Row numbers in [0, rows): uniform, or a bounded power law of rank mapped
// through a random permutation.
std::vector<uint32_t> MakeKeyStream(size_t rows, size_t length) {
  std::mt19937_64 rng(FLAGS_seed);
  std::vector<uint32_t> keys(length);
  if (FLAGS_ids == "uniform") {
    std::uniform_int_distribution<uint64_t> pick(0, rows - 1);
    for (uint32_t& k : keys) k = static_cast<uint32_t>(pick(rng));
    return keys;
  }
  CHECK(FLAGS_ids == "zipf") << "--ids must be uniform or zipf";
  std::vector<uint32_t> permutation(rows);
  for (size_t i = 0; i < rows; ++i) permutation[i] = static_cast<uint32_t>(i);
  std::shuffle(permutation.begin(), permutation.end(), rng);
  // Inverse CDF of the continuous density ~ x^-s on [1, rows + 1).
  const double s = FLAGS_zipf_exponent;
  CHECK(s > 0 && s != 1) << "--zipf_exponent must be > 0 and != 1";
  const double top = std::pow(static_cast<double>(rows) + 1, 1 - s);
  std::uniform_real_distribution<double> unit(0, 1);
  for (uint32_t& k : keys) {
    const double x = std::pow(1 + (top - 1) * unit(rng), 1 / (1 - s));
    const size_t rank = std::min(rows, static_cast<size_t>(x)) - 1;
    k = permutation[rank];
  }
  return keys;
}

// Ember's and the baseline's rates in rows/s, measured side by side.
struct Rates {
  double ember;
  double baseline;
};

// Runs Ember's and the baseline's batch functions (`fn(first_key_index)`)
// in turn over consecutive batches of the stream: a slice of --slice_batches
// batches of one, then the same batches of the other, alternating which goes
// first from slice to slice, until each has run --seconds (or --iterations
// batches), after a short warm-up of each. Each side's time is summed over
// its own slices only, so the two rates see the same phases of the machine.
Rates MeasureInTurn(size_t stream_length, size_t batch,
                    const std::function<void(size_t)>& ember,
                    const std::function<void(size_t)>& baseline) {
  const size_t batches_in_stream = stream_length / batch;
  const size_t slice = FLAGS_slice_batches;
  auto run = [&](const std::function<void(size_t)>& fn, size_t first_batch,
                 size_t count) {
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      fn(((first_batch + i) % batches_in_stream) * batch);
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  run(ember, 0, 20);
  run(baseline, 0, 20);
  size_t next = 0;
  uint64_t done = 0;
  double ember_seconds = 0, baseline_seconds = 0;
  for (bool ember_first = true;; ember_first = !ember_first) {
    size_t count = slice;
    if (FLAGS_iterations > 0) {
      if (done >= FLAGS_iterations) break;
      count = std::min<uint64_t>(count, FLAGS_iterations - done);
    } else if (ember_seconds >= FLAGS_seconds &&
               baseline_seconds >= FLAGS_seconds) {
      break;
    }
    if (ember_first) {
      ember_seconds += run(ember, next, count);
      baseline_seconds += run(baseline, next, count);
    } else {
      baseline_seconds += run(baseline, next, count);
      ember_seconds += run(ember, next, count);
    }
    next = (next + count) % batches_in_stream;
    done += count;
  }
  const double rows = static_cast<double>(done) * batch;
  return {rows / ember_seconds, rows / baseline_seconds};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Joined(const std::vector<double>& v) {
  std::string out;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof(buf), "%.3f", x);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

// One operation's rounds: Ember's and the baseline's rates, and their ratio
// round by round.
class Rounds {
 public:
  void Add(const Rates& rates) {
    ember_.push_back(rates.ember);
    baseline_.push_back(rates.baseline);
    ratios_.push_back(rates.ember / rates.baseline);
  }

  // rows_s and baseline_rows_s are medians over the rounds; ratio is the
  // median of the per-round ratios, ratio_min and ratio_max their range,
  // ratios the per-round ratios themselves, comma-separated.
  void Print(const char* op, int dim, const std::string& optimizer, size_t rows,
             size_t batch, const char* dist, const char* baseline) const {
    std::printf(
        "RESULT op=%s dim=%d optimizer=%s rows=%zu batch=%zu ids=%s "
        "rows_s=%.0f baseline=%s baseline_rows_s=%.0f ratio=%.3f "
        "ratio_min=%.3f ratio_max=%.3f rounds=%zu ratios=%s\n",
        op, dim, optimizer.c_str(), rows, batch, dist, Median(ember_), baseline,
        Median(baseline_), Median(ratios_),
        *std::min_element(ratios_.begin(), ratios_.end()),
        *std::max_element(ratios_.begin(), ratios_.end()), ratios_.size(),
        Joined(ratios_).c_str());
  }

 private:
  std::vector<double> ember_, baseline_, ratios_;
};

void MemoryLine(size_t rows) {
  const int dim = 16;
  const size_t before = ResidentBytes();
  auto table = MakeTable(dim, "adagrad(lr=0.01)");
  Fill(table.get(), rows);
  const size_t after = ResidentBytes();
  const double raw = static_cast<double>(table->RawBytes());
  const double resident = static_cast<double>(after - before);
  std::printf(
      "RESULT memory rows=%zu dim=%d optimizer=adagrad bytes_per_row=%.1f "
      "memory_over_raw=%.3f resident_bytes_per_row=%.1f "
      "resident_over_raw=%.3f\n",
      rows, dim, static_cast<double>(table->MemoryBytes()) / rows,
      table->MemoryBytes() / raw, resident / rows, resident / raw);
  std::fflush(stdout);
}

void RunCase(int dim, const std::string& optimizer_name,
             const std::vector<uint32_t>& stream) {
  std::string spec;
  CHECK(SpecOf(optimizer_name, &spec))
      << "unknown optimizer " << optimizer_name;
  const size_t rows = FLAGS_rows;
  const size_t batch = FLAGS_batch;
  auto table = MakeTable(dim, spec);
  const double create_rate = Fill(table.get(), rows);
  std::printf(
      "RESULT table dim=%d optimizer=%s rows=%zu bytes_per_row=%.1f "
      "raw_bytes_per_row=%.1f memory_over_raw=%.3f create_rows_s=%.0f\n",
      dim, optimizer_name.c_str(), rows,
      static_cast<double>(table->MemoryBytes()) / rows,
      static_cast<double>(table->RawBytes()) / rows,
      static_cast<double>(table->MemoryBytes()) / table->RawBytes(),
      create_rate);

  std::vector<uint64_t> ids(stream.size());
  for (size_t i = 0; i < stream.size(); ++i) ids[i] = IdOfRow(stream[i]);
  std::vector<float> out(batch * dim);
  std::vector<float> grads(batch * dim, 1e-4f);
  const size_t row_bytes = dim * sizeof(float);

  // The baseline: the same rows as one flat array (filled, so every page is
  // real), the same key stream, in the kind of memory the table keeps its
  // rows in (HugePageMemory), so that the two differ by the table's own
  // work, not by the page size.
  const size_t flat_floats = rows * dim;
  ps::HugePageMemory flat_memory(flat_floats * sizeof(float));
  float* flat = static_cast<float*>(flat_memory.data());
  for (size_t i = 0; i < flat_floats; ++i) flat[i] = 1e-3f * (i % 101);

  auto pull = [&](size_t first) {
    CHECK(table->Lookup(&ids[first], batch, out.data()).ok());
    Clobber(out.data());
  };
  auto push = [&](size_t first) {
    const ps::Status s =
        table->ApplyGradients(&ids[first], batch, grads.data());
    CHECK(s.ok()) << s;
  };
  auto gather = [&](size_t first) {
    const uint32_t* keys = &stream[first];
    for (size_t i = 0; i < batch; ++i) {
      std::memcpy(&out[i * dim], &flat[static_cast<size_t>(keys[i]) * dim],
                  row_bytes);
    }
    Clobber(out.data());
  };
  auto scatter = [&](size_t first) {
    const uint32_t* keys = &stream[first];
    for (size_t i = 0; i < batch; ++i) {
      float* row = &flat[static_cast<size_t>(keys[i]) * dim];
      const float* g = &grads[i * dim];
      for (int j = 0; j < dim; ++j) row[j] += g[j];
    }
    Clobber(flat);
  };

  // Rounds, each measuring Ember and the baseline in turn, slice by slice;
  // each round's ratio is Ember's rate over the baseline's in that round.
  Rounds pulls, pushes;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    pulls.Add(MeasureInTurn(stream.size(), batch, pull, gather));
    pushes.Add(MeasureInTurn(stream.size(), batch, push, scatter));
  }
  CHECK_EQ(table->size(), rows) << "the measured calls created rows";

  const char* dist = FLAGS_ids.c_str();
  pulls.Print("pull", dim, optimizer_name, rows, batch, dist, "gather");
  pushes.Print("push", dim, optimizer_name, rows, batch, dist, "scatter_add");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "embedding table pull/push throughput and memory, against a flat-array "
      "baseline");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);

  std::vector<int> dims;
  for (const std::string& d : Split(FLAGS_dims)) {
    char* stop = nullptr;
    const long v = std::strtol(d.c_str(), &stop, 10);
    if (*stop != '\0' || v < 1 || v > EmbeddingTable::kMaxDim) {
      std::fprintf(stderr, "bad --dims entry '%s'\n", d.c_str());
      return 1;
    }
    dims.push_back(static_cast<int>(v));
  }
  const std::vector<std::string> optimizers = Split(FLAGS_optimizers);
  for (const std::string& name : optimizers) {
    std::string spec;
    if (!SpecOf(name, &spec)) {
      std::fprintf(stderr, "unknown optimizer '%s'\n", name.c_str());
      return 1;
    }
  }
  if (FLAGS_rounds < 1 || FLAGS_slice_batches < 1) {
    std::fprintf(stderr, "need --rounds >= 1 and --slice_batches >= 1\n");
    return 1;
  }
  if (FLAGS_rows < 1 || FLAGS_rows > 0xFFFFFFFEull || FLAGS_batch < 1 ||
      FLAGS_stream_keys < FLAGS_batch) {
    std::fprintf(stderr,
                 "need 1 <= --rows < 2^32 and 1 <= --batch <= "
                 "--stream_keys\n");
    return 1;
  }
  if (FLAGS_ids != "uniform" && FLAGS_ids != "zipf") {
    std::fprintf(stderr, "--ids must be uniform or zipf\n");
    return 1;
  }

  // First, while the process is still small, so that RSS growth is the
  // table's.
  if (FLAGS_memory_rows > 0) MemoryLine(FLAGS_memory_rows);

  const std::vector<uint32_t> stream =
      MakeKeyStream(FLAGS_rows, FLAGS_stream_keys);
  for (int dim : dims) {
    for (const std::string& name : optimizers) RunCase(dim, name, stream);
  }
  return 0;
}
