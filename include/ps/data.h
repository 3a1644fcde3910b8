// Ember's training data for CTR-style models: the Example record, a synthetic
// source with a known ground-truth model, and streaming readers for
// libsvm/libfm text and for Criteo's TSV logs (files of any size: a reader
// holds one line at a time). The examples (examples/ctr) and the Python
// package (ember.data) use them.
//
// Every example is a list of hashed 64-bit feature ids (one per field for the
// synthetic and Criteo data) and a 0/1 label. A field's ids live in their own
// hashed space: FeatureId(field, value) is a bijection of `value` for a fixed
// field, and ids of different fields collide only with probability ~2^-64.
//
// Threading: SyntheticSource is immutable after construction, so any number
// of threads may call its const methods at once. An ExampleReader is
// thread-compatible: one thread at a time. The free functions are pure.
#ifndef PS_DATA_H_
#define PS_DATA_H_

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ps/status.h"

namespace ps {
namespace data {

// One labelled example. `values` is empty when every feature is binary
// (value 1), which is the case for the synthetic and Criteo data; otherwise it
// holds one value per id (libsvm lines with non-unit values).
struct Example {
  std::vector<uint64_t> ids;
  std::vector<float> values;
  float label = 0;  // 0 or 1.

  // The value of feature i: values[i], or 1 when `values` is empty.
  float value(size_t i) const { return values.empty() ? 1.0f : values[i]; }
};

// ------------------------------------------------------------- hashing --

// splitmix64's finalizer: a bijection on 64-bit values.
uint64_t Mix64(uint64_t x);
// The inverse of Mix64: Unmix64(Mix64(x)) == x.
uint64_t Unmix64(uint64_t x);

// The id of `value` in `field`'s hashed space: a bijection of `value` for a
// fixed field; ids of distinct fields collide with probability ~2^-64.
uint64_t FeatureId(uint32_t field, uint64_t value);

// The value that FeatureId(field, value) was made from.
uint64_t FeatureValue(uint32_t field, uint64_t id);

// ----------------------------------------------------------- synthetic --

// The synthetic data's ground truth, a logistic regression plus a
// factorisation machine over `fields` categorical fields:
//
//   logit = bias + sum_i w[id_i] + sum_{i<j} <v[id_i], v[id_j]>
//
// and label ~ Bernoulli(sigmoid(logit)). Field f's values are ranks
// 0..ids_per_field-1, drawn with Zipf frequency P(rank r) ~ (r + 1)^-zipf;
// value r of field f has id FeatureId(f, r). The true parameters of an id
// are N(0, 1) draws made by hashing (seed, id), times
//
//   w_std * (1 + r / head)^-decay     for w,
//   v_std * (1 + r / fm_head)^-decay  for each of v's fm_dim entries,
//
// so rare values, which no model sees often enough to learn, carry little of
// the signal, and the interactions live among each field's most popular
// values (decay = 0 gives every value the same scale).
//
// The defaults (calibrated in README.md): truth AUC 0.80 on held-out data,
// 29% positives, the truth logit's standard deviation 1.2 from w and 0.7
// from the interactions; 2.5 million distinct ids in 2 million examples,
// 3.7 million in 8 million. An Adagrad LR+FM with 4 factors, single process,
// one pass, comes within 0.01 of the truth AUC after about 4 million
// examples.
struct SyntheticConfig {
  uint64_t seed = 1;
  int fields = 20;
  uint64_t ids_per_field = 200000;
  double zipf = 1.1;
  int fm_dim = 4;
  double w_std = 0.42;
  double v_std = 0.3;
  double bias = -1.0;
  double head = 100;
  double fm_head = 10;
  double decay = 1.0;

  // InvalidArgument naming the first bad field, or OK.
  Status Validate() const;
};

// Examples drawn from SyntheticConfig's ground truth. Example (stream, index)
// is a pure function of (config, stream, index), so any process can generate
// any part of the data without talking to the others: worker r trains on
// stream TrainStream(r), and every process agrees on the test stream.
//
// Cost: about 3 us per example with the defaults (Zipf draws by
// rejection-inversion, O(1) expected time and no tables; the truth is hashed,
// never stored, except for a cache of each field's most popular values).
class SyntheticSource {
 public:
  static constexpr uint64_t kTestStream = 0;
  static uint64_t TrainStream(int worker) {
    return 1 + static_cast<uint64_t>(worker);
  }

  // Fails with InvalidArgument if `config` does not Validate().
  static StatusOr<std::unique_ptr<SyntheticSource>> Create(
      const SyntheticConfig& config);

  SyntheticSource(const SyntheticSource&) = delete;
  SyntheticSource& operator=(const SyntheticSource&) = delete;

  // Example `index` of `stream`: ids[f] is field f's id, `values` empty.
  // Reuses *example's buffers.
  void Get(uint64_t stream, uint64_t index, Example* example) const;
  Example Get(uint64_t stream, uint64_t index) const;

  // Examples first .. first + count - 1 of `stream`.
  std::vector<Example> Generate(uint64_t stream, uint64_t first,
                                size_t count) const;

  // The ground-truth logit of an example of this source (values, if any,
  // multiply their features as in a factorisation machine). The example
  // must have come from this source: ids[f] from field f (CHECKed).
  double TruthLogit(const Example& example) const;

  // The true parameters of value `rank` of `field`: *w, and v[0..fm_dim).
  void TruthParameters(int field, uint64_t rank, double* w, double* v) const;

  // A Zipf rank in [0, ids_per_field) from the uniform `u` in [0, 1): one
  // step of rejection-inversion; false means rejected, draw again (0.2% of
  // draws with the defaults).
  bool ZipfRank(double u, uint64_t* rank) const;
  // P(rank r) under the Zipf law, for tests: exact, O(ids_per_field).
  double ZipfProbability(uint64_t rank) const;

  const SyntheticConfig& config() const { return config_; }

 private:
  explicit SyntheticSource(const SyntheticConfig& config);

  // Ranks below this have their truth precomputed: with the default Zipf
  // law that is ~80% of the draws, for 3.3 MB.
  static constexpr uint64_t kCachedRanks = 4096;
  // At most this many (field, rank) pairs are cached, however many fields.
  static constexpr uint64_t kCachedParameters = uint64_t{1} << 17;

  double H(double x) const;
  double HInverse(double y) const;
  // The truth of (field, rank): w then v, from the cache or computed into
  // `buffer` (1 + fm_dim doubles).
  const double* Truth(int field, uint64_t rank, double* buffer) const;

  // Immutable after construction.
  const SyntheticConfig config_;
  const uint64_t data_salt_;
  const uint64_t truth_salt_;
  // Rejection-inversion's constants: the hat's integral at the ends, and
  // the squeeze.
  double h_low_ = 0;
  double h_high_ = 0;
  double squeeze_ = 0;
  uint64_t cached_ranks_ = 0;
  std::vector<double> head_truth_;  // [field][rank][1 + fm_dim].
};

// ------------------------------------------------------------- readers --

enum class Format {
  // "label id[:value] id[:value] ...": label 0/1 or -1/+1 (also as 0.0,
  // 1.0); id a decimal uint64, kept as is (libsvm ids are already ids);
  // value a finite float, 1 if omitted. Whitespace separated.
  kLibsvm,
  // Criteo's Kaggle / 1TB day logs: 40 tab-separated columns, label 0/1,
  // 13 integer columns (fields 0..12) and 26 categorical columns of up to
  // 16 hex digits (fields 13..38); any feature column may be empty. Each
  // column gives one id: FeatureId(field, code) with code CriteoIntegerCode
  // (bucketed by log2) or the hex value; empty columns get the field's
  // kMissingValue.
  kCriteo,
};

inline constexpr int kCriteoIntegerFields = 13;
inline constexpr int kCriteoCategoricalFields = 26;
inline constexpr uint64_t kMissingValue = ~uint64_t{0};

// The bucket of a Criteo integer feature: v for -64 <= v <= 0 (smaller ones
// share -64's), 1 + floor(log2(v)) for v > 0; as a uint64 code.
uint64_t CriteoIntegerCode(int64_t v);

// Which lines of a file a reader keeps. Lines are numbered from 0, counting
// every physical line (blank and malformed ones too), so the split and the
// shards do not depend on what parses.
struct ReadOptions {
  enum class Split { kAll, kTrain, kTest };
  Split split = Split::kAll;
  // Line n is held out (in kTest, not in kTrain) iff
  // n % test_every == test_every - 1; 0 holds out nothing.
  uint64_t test_every = 10;
  // The i-th line of the split (counting from 0) belongs to shard
  // i % num_shards. With test_every = 0 that is line_no % num_shards; the
  // shards of the training lines are equal even when num_shards shares a
  // factor with test_every.
  int shard = 0;
  int num_shards = 1;
  // How many malformed lines are logged (LOG(WARNING)) and kept in
  // ReadStats::first_errors; the rest are only counted.
  int max_logged_errors = 5;

  Status Validate() const;
};

struct ReadStats {
  uint64_t lines = 0;      // physical lines read, of every shard.
  uint64_t examples = 0;   // examples returned.
  uint64_t blank = 0;      // blank lines of this shard, skipped.
  uint64_t malformed = 0;  // malformed lines of this shard, skipped.
  std::vector<std::string> first_errors;  // "name:line: reason".
};

// Parse one line (without its newline; a trailing '\r' is ignored) into
// *example. On error returns InvalidArgument saying what is wrong, with
// *example unspecified. An empty line is an error here (the reader skips
// blank lines before parsing).
Status ParseLibsvmLine(std::string_view line, Example* example);
Status ParseCriteoLine(std::string_view line, Example* example);

// Streams the examples of one shard and split of a text file. Malformed lines
// are counted, the first few logged, and skipped; only failures to open or to
// read the input stop it.
class ExampleReader {
 public:
  // Opens `path`. Errors: InvalidArgument for bad options, NotFound or
  // Unavailable when the file cannot be opened.
  static StatusOr<std::unique_ptr<ExampleReader>> Open(
      const std::string& path, Format format, const ReadOptions& options);
  // Reads from `in` (owned), called `name` in messages.
  static StatusOr<std::unique_ptr<ExampleReader>> FromStream(
      std::unique_ptr<std::istream> in, std::string name, Format format,
      const ReadOptions& options);

  ExampleReader(const ExampleReader&) = delete;
  ExampleReader& operator=(const ExampleReader&) = delete;

  // The next example of this shard and split into *example: true, or false
  // at the end of the input or after a read error (see status()). Blocks on
  // file I/O.
  bool Next(Example* example);

  // Appends up to `max` examples to *out; returns how many.
  size_t ReadBatch(size_t max, std::vector<Example>* out);

  // OK, or Unavailable after a read error.
  const Status& status() const { return status_; }
  const ReadStats& stats() const { return stats_; }

 private:
  ExampleReader(std::unique_ptr<std::istream> in, std::string name,
                Format format, const ReadOptions& options);

  // Whether line `line_no` belongs to this reader's split and shard.
  bool Keep(uint64_t line_no);
  void RecordError(uint64_t line_no, const Status& error);

  // Immutable after construction.
  const std::unique_ptr<std::istream> in_;
  const std::string name_;
  const Format format_;
  const ReadOptions options_;

  uint64_t split_ordinal_ = 0;  // lines of the split seen so far.
  std::string line_;
  Status status_;
  ReadStats stats_;
};

// Reads all of one shard and split of `path` into *examples (appended).
// *stats, if not null, receives the reader's counts. Errors as
// ExampleReader::Open and ExampleReader::status().
[[nodiscard]] Status ReadExamples(const std::string& path, Format format,
                                  const ReadOptions& options,
                                  std::vector<Example>* examples,
                                  ReadStats* stats = nullptr);

}  // namespace data
}  // namespace ps

#endif  // PS_DATA_H_
