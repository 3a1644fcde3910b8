#include "ctr/ctr_data.h"

#include <glog/logging.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "ctr/metrics.h"

namespace ctr {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kMul2 = 0x94d049bb133111ebULL;

// The inverse of an odd number modulo 2^64 by Newton's iteration: each step
// doubles the correct low bits, and x = a is right to 3 bits (a * a = 1
// mod 8 for odd a).
constexpr uint64_t InverseOdd(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}
constexpr uint64_t kInvMul1 = InverseOdd(kMul1);
constexpr uint64_t kInvMul2 = InverseOdd(kMul2);
static_assert(kMul1 * kInvMul1 == 1 && kMul2 * kInvMul2 == 1,
              "modular inverses");

// Undoes x ^= x >> shift (shift >= 1).
constexpr uint64_t UnshiftXor(uint64_t x, int shift) {
  uint64_t y = x;
  for (int s = shift; s < 64; s += shift) y ^= x >> s;
  return y;
}

// A uniform double in [0, 1) from the top 53 bits.
double ToUnit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// Per-field salt of FeatureId.
uint64_t FieldSalt(uint32_t field) {
  return Mix64(0x6a09e667f3bcc909ULL + field);
}

// splitmix64. Our own generator and conversions, rather than <random>'s
// distributions, keep the data identical across standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += kGolden;
    return Mix64(state_);
  }
  double Unit() { return ToUnit(Next()); }

 private:
  uint64_t state_;
};

// expm1(t) / t and log1p(t) / t, continuous at t = 0: the pieces of the
// integral of x^-s and its inverse that stay accurate as s -> 1.
double Expm1OverT(double t) {
  return std::abs(t) > 1e-8 ? std::expm1(t) / t : 1.0 + t / 2.0;
}
double Log1pOverT(double t) {
  return std::abs(t) > 1e-8 ? std::log1p(t) / t : 1.0 - t / 2.0;
}

std::string_view StripCarriageReturn(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  });
}

// Quoted and shortened, for error messages.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "\"";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "\"";
}

template <typename T>
bool ParseWhole(std::string_view s, T* out) {
  if (s.empty()) return false;
  // from_chars takes no '+': accept it as libsvm labels use it.
  if (s.front() == '+' && s.size() > 1 && s[1] != '-') s.remove_prefix(1);
  const auto [end, error] =
      std::from_chars(s.data(), s.data() + s.size(), *out);
  return error == std::errc() && end == s.data() + s.size();
}

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(digit);
  }
  *out = v;
  return true;
}

}  // namespace

uint64_t Mix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * kMul1;
  x = (x ^ (x >> 27)) * kMul2;
  return x ^ (x >> 31);
}

uint64_t Unmix64(uint64_t x) {
  x = UnshiftXor(x, 31) * kInvMul2;
  x = UnshiftXor(x, 27) * kInvMul1;
  return UnshiftXor(x, 30) - kGolden;
}

uint64_t FeatureId(uint32_t field, uint64_t value) {
  return Mix64(value ^ FieldSalt(field));
}

uint64_t FeatureValue(uint32_t field, uint64_t id) {
  return Unmix64(id) ^ FieldSalt(field);
}

// ----------------------------------------------------------- synthetic --

ps::Status SyntheticConfig::Validate() const {
  if (fields < 1 || fields > (1 << 20)) {
    return ps::Status::InvalidArgument("fields must be in [1, 2^20]");
  }
  if (ids_per_field < 1 || ids_per_field > (uint64_t{1} << 52)) {
    return ps::Status::InvalidArgument("ids_per_field must be in [1, 2^52]");
  }
  if (!(zipf >= 0 && zipf <= 10)) {
    return ps::Status::InvalidArgument("zipf must be in [0, 10]");
  }
  if (fm_dim < 0 || fm_dim > 1024) {
    return ps::Status::InvalidArgument("fm_dim must be in [0, 1024]");
  }
  if (!(w_std >= 0 && std::isfinite(w_std)) ||
      !(v_std >= 0 && std::isfinite(v_std))) {
    return ps::Status::InvalidArgument("w_std and v_std must be finite, >= 0");
  }
  if (!std::isfinite(bias)) {
    return ps::Status::InvalidArgument("bias must be finite");
  }
  if (!(head > 0 && std::isfinite(head)) ||
      !(fm_head > 0 && std::isfinite(fm_head)) ||
      !(decay >= 0 && std::isfinite(decay))) {
    return ps::Status::InvalidArgument(
        "need head > 0, fm_head > 0 and decay >= 0");
  }
  return ps::Status::OK();
}

ps::StatusOr<std::unique_ptr<SyntheticSource>> SyntheticSource::Create(
    const SyntheticConfig& config) {
  PS_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<SyntheticSource>(new SyntheticSource(config));
}

SyntheticSource::SyntheticSource(const SyntheticConfig& config)
    : config_(config),
      data_salt_(Mix64(config.seed ^ 0x243f6a8885a308d3ULL)),
      truth_salt_(Mix64(config.seed ^ 0x13198a2e03707344ULL)) {
  // Rejection-inversion (Hormann and Derflinger) for P(k) ~ k^-s on
  // k = 1..n: draw y uniformly under the hat H over [h_low_, h_high_], take
  // k = round(H^-1(y)) and accept if y falls in the top k^-s of k's slice
  // [H(k - 1/2), H(k + 1/2)]. As x^-s is convex, every slice holds at least
  // k^-s, so each k is accepted with probability proportional to k^-s. Rank
  // 1's slice starts at H(3/2) - 1, so it is always accepted.
  h_low_ = H(1.5) - 1.0;
  h_high_ = H(static_cast<double>(config_.ids_per_field) + 0.5);
  // The accepted part of k's slice, mapped back through H^-1, starts at
  // H^-1(H(k + 1/2) - k^-s); its distance below k is largest at k = 2 (for
  // the decreasing convex x^-s), so a draw with k - x <= squeeze_ is always
  // accepted. ZipfTest.ZipfRankAcceptsExactlyTheRejectionInversionRegion
  // checks this.
  squeeze_ = 2.0 - HInverse(H(2.5) - std::pow(2.0, -config_.zipf));
  // Most draws hit the head of each field: keep its truth at hand.
  cached_ranks_ = std::min<uint64_t>(
      {config_.ids_per_field, kCachedRanks,
       kCachedParameters / static_cast<uint64_t>(config_.fields)});
  const size_t stride = static_cast<size_t>(1 + config_.fm_dim);
  head_truth_.resize(static_cast<size_t>(config_.fields) * cached_ranks_ *
                     stride);
  for (int f = 0; f < config_.fields; ++f) {
    for (uint64_t r = 0; r < cached_ranks_; ++r) {
      double* p =
          &head_truth_[(static_cast<size_t>(f) * cached_ranks_ + r) * stride];
      TruthParameters(f, r, p, p + 1);
    }
  }
}

const double* SyntheticSource::Truth(int field, uint64_t rank,
                                     double* buffer) const {
  if (rank < cached_ranks_) {
    return &head_truth_[(static_cast<size_t>(field) * cached_ranks_ + rank) *
                        static_cast<size_t>(1 + config_.fm_dim)];
  }
  TruthParameters(field, rank, buffer, buffer + 1);
  return buffer;
}

// The integral of x^-s from 1 to x.
double SyntheticSource::H(double x) const {
  const double log_x = std::log(x);
  return log_x * Expm1OverT((1.0 - config_.zipf) * log_x);
}

double SyntheticSource::HInverse(double y) const {
  return std::exp(y * Log1pOverT((1.0 - config_.zipf) * y));
}

bool SyntheticSource::ZipfRank(double u, uint64_t* rank) const {
  const double y = h_low_ + u * (h_high_ - h_low_);
  const double x = HInverse(y);
  const double n = static_cast<double>(config_.ids_per_field);
  const double k = std::min(std::max(std::round(x), 1.0), n);
  // The squeeze accepts most draws without the exact test's pow and log.
  if (k - x > squeeze_ && k > 1 &&
      y < H(k + 0.5) - std::pow(k, -config_.zipf)) {
    return false;
  }
  *rank = static_cast<uint64_t>(k) - 1;
  return true;
}

double SyntheticSource::ZipfProbability(uint64_t rank) const {
  double total = 0;
  for (uint64_t k = config_.ids_per_field; k >= 1; --k) {
    total += std::pow(static_cast<double>(k), -config_.zipf);
  }
  return std::pow(static_cast<double>(rank + 1), -config_.zipf) / total;
}

void SyntheticSource::TruthParameters(int field, uint64_t rank, double* w,
                                      double* v) const {
  const uint64_t id = FeatureId(static_cast<uint32_t>(field), rank);
  const uint64_t h = Mix64(id ^ truth_salt_);
  const double r = static_cast<double>(rank);
  const double w_scale = config_.decay == 0
                             ? 1.0
                             : std::pow(1.0 + r / config_.head, -config_.decay);
  const double v_scale =
      config_.decay == 0 ? 1.0
                         : std::pow(1.0 + r / config_.fm_head, -config_.decay);
  // Box-Muller: normals in pairs from two hashes of the id each; 1 - u
  // keeps the log finite.
  const int normals = 1 + config_.fm_dim;
  for (int j = 0; j < normals; j += 2) {
    const uint64_t pair = static_cast<uint64_t>(j);
    const double u1 = 1.0 - ToUnit(Mix64(h + 2 * pair));
    const double u2 = ToUnit(Mix64(h + 2 * pair + 1));
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double z[2] = {radius * std::cos(2 * kPi * u2),
                         radius * std::sin(2 * kPi * u2)};
    for (int k = 0; k < 2 && j + k < normals; ++k) {
      if (j + k == 0) {
        *w = config_.w_std * w_scale * z[k];
      } else {
        v[j + k - 1] = config_.v_std * v_scale * z[k];
      }
    }
  }
}

double SyntheticSource::TruthLogit(const Example& example) const {
  CHECK_EQ(example.ids.size(), static_cast<size_t>(config_.fields))
      << "not an example of this source";
  const size_t dim = static_cast<size_t>(config_.fm_dim);
  // Stack space for the usual small dimensions; no allocation per example.
  constexpr size_t kStackDim = 32;
  double stack[2 * (kStackDim + 1)];
  std::vector<double> heap;
  double* sum = stack;
  if (dim > kStackDim) {
    heap.resize(2 * (dim + 1));
    sum = heap.data();
  }
  double* buffer = sum + dim;
  std::fill(sum, sum + dim, 0.0);
  double logit = config_.bias;
  double squares = 0;
  for (int f = 0; f < config_.fields; ++f) {
    const uint64_t rank = FeatureValue(static_cast<uint32_t>(f),
                                       example.ids[static_cast<size_t>(f)]);
    CHECK_LT(rank, config_.ids_per_field)
        << "id of field " << f << " not from this source";
    const double* truth = Truth(f, rank, buffer);
    const double x = example.value(static_cast<size_t>(f));
    logit += truth[0] * x;
    for (size_t d = 0; d < dim; ++d) {
      const double xv = x * truth[1 + d];
      sum[d] += xv;
      squares += xv * xv;
    }
  }
  // sum_{i<j} <x_i v_i, x_j v_j> = (|sum_i x_i v_i|^2 - sum_i |x_i v_i|^2) / 2.
  double sum_squared = 0;
  for (size_t d = 0; d < dim; ++d) sum_squared += sum[d] * sum[d];
  return logit + 0.5 * (sum_squared - squares);
}

void SyntheticSource::Get(uint64_t stream, uint64_t index,
                          Example* example) const {
  const uint64_t stream_key = Mix64(data_salt_ ^ (stream * kGolden));
  Rng rng(Mix64(stream_key + Mix64(index)));
  example->ids.resize(static_cast<size_t>(config_.fields));
  example->values.clear();
  for (int f = 0; f < config_.fields; ++f) {
    uint64_t rank;
    while (!ZipfRank(rng.Unit(), &rank)) {
    }
    example->ids[static_cast<size_t>(f)] =
        FeatureId(static_cast<uint32_t>(f), rank);
  }
  example->label = rng.Unit() < Sigmoid(TruthLogit(*example)) ? 1.0f : 0.0f;
}

Example SyntheticSource::Get(uint64_t stream, uint64_t index) const {
  Example example;
  Get(stream, index, &example);
  return example;
}

std::vector<Example> SyntheticSource::Generate(uint64_t stream, uint64_t first,
                                               size_t count) const {
  std::vector<Example> examples(count);
  for (size_t i = 0; i < count; ++i) Get(stream, first + i, &examples[i]);
  return examples;
}

// ------------------------------------------------------------- readers --

uint64_t CriteoIntegerCode(int64_t v) {
  if (v <= 0) return static_cast<uint64_t>(std::max<int64_t>(v, -64));
  int log2 = 0;
  while (v >> (log2 + 1)) ++log2;
  return static_cast<uint64_t>(1 + log2);
}

ps::Status ParseLibsvmLine(std::string_view line, Example* example) {
  line = StripCarriageReturn(line);
  example->ids.clear();
  example->values.clear();
  bool unit_values = true;
  size_t pos = 0;
  int token_index = -1;  // -1: the label.
  while (true) {
    pos = line.find_first_not_of(" \t", pos);
    if (pos == std::string_view::npos) break;
    size_t end = line.find_first_of(" \t", pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view token = line.substr(pos, end - pos);
    pos = end;
    if (token_index++ < 0) {
      double label;
      if (!ParseWhole(token, &label) ||
          !(label == 1 || label == 0 || label == -1)) {
        return ps::Status::InvalidArgument("label " + Quote(token) +
                                           " is not 0/1 or -1/+1");
      }
      example->label = label == 1 ? 1.0f : 0.0f;
      continue;
    }
    const size_t colon = token.find(':');
    const std::string_view id_text = token.substr(0, colon);
    uint64_t id;
    if (!ParseWhole(id_text, &id) || id_text.front() == '+') {
      return ps::Status::InvalidArgument(
          "feature " + std::to_string(token_index) + " " + Quote(token) +
          ": id is not a decimal unsigned 64-bit integer");
    }
    float value = 1.0f;
    if (colon != std::string_view::npos) {
      const std::string_view value_text = token.substr(colon + 1);
      if (!ParseWhole(value_text, &value) || !std::isfinite(value)) {
        return ps::Status::InvalidArgument(
            "feature " + std::to_string(token_index) + " " + Quote(token) +
            ": value is not a finite number");
      }
    }
    if (value != 1.0f && unit_values) {
      unit_values = false;
      example->values.assign(example->ids.size(), 1.0f);
    }
    example->ids.push_back(id);
    if (!unit_values) example->values.push_back(value);
  }
  if (token_index < 0) return ps::Status::InvalidArgument("no label");
  return ps::Status::OK();
}

ps::Status ParseCriteoLine(std::string_view line, Example* example) {
  line = StripCarriageReturn(line);
  constexpr int kColumns = 1 + kCriteoIntegerFields + kCriteoCategoricalFields;
  example->ids.clear();
  example->values.clear();
  const size_t columns =
      1 + static_cast<size_t>(std::count(line.begin(), line.end(), '\t'));
  if (columns != static_cast<size_t>(kColumns)) {
    return ps::Status::InvalidArgument(
        "expected " + std::to_string(kColumns) +
        " tab-separated columns, got " + std::to_string(columns) +
        (columns == static_cast<size_t>(kColumns) - 1
             ? " (an unlabelled test file?)"
             : ""));
  }
  example->ids.reserve(kColumns - 1);
  size_t start = 0;
  for (int column = 0; column < kColumns; ++column) {
    const size_t tab = std::min(line.find('\t', start), line.size());
    const std::string_view cell = line.substr(start, tab - start);
    start = tab + 1;
    if (column == 0) {
      if (cell != "0" && cell != "1") {
        return ps::Status::InvalidArgument("label " + Quote(cell) +
                                           " is not 0 or 1");
      }
      example->label = cell == "1" ? 1.0f : 0.0f;
      continue;
    }
    const uint32_t field = static_cast<uint32_t>(column - 1);
    uint64_t code = kMissingValue;
    if (!cell.empty()) {
      if (column <= kCriteoIntegerFields) {
        int64_t v;
        if (cell.front() == '+' || !ParseWhole(cell, &v)) {
          return ps::Status::InvalidArgument(
              "integer column " + std::to_string(column) + " " + Quote(cell) +
              " is not a decimal 64-bit integer");
        }
        code = CriteoIntegerCode(v);
      } else if (!ParseHex(cell, &code)) {
        return ps::Status::InvalidArgument(
            "categorical column " + std::to_string(column) + " " + Quote(cell) +
            " is not 1 to 16 hex digits");
      }
    }
    example->ids.push_back(FeatureId(field, code));
  }
  return ps::Status::OK();
}

ps::Status ReadOptions::Validate() const {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return ps::Status::InvalidArgument("shard " + std::to_string(shard) +
                                       " of " + std::to_string(num_shards) +
                                       ": need 0 <= shard < num_shards");
  }
  if (split != Split::kAll && test_every == 0) {
    return ps::Status::InvalidArgument(
        "a train or test split needs test_every > 0");
  }
  if (max_logged_errors < 0) {
    return ps::Status::InvalidArgument("max_logged_errors must be >= 0");
  }
  return ps::Status::OK();
}

ps::StatusOr<std::unique_ptr<ExampleReader>> ExampleReader::Open(
    const std::string& path, Format format, const ReadOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!in->is_open()) {
    const int error = errno;
    const std::string message =
        "cannot open " + path + ": " + std::strerror(error);
    if (error == ENOENT) return ps::Status::NotFound(message);
    return ps::Status::Unavailable(message);
  }
  return std::unique_ptr<ExampleReader>(
      new ExampleReader(std::move(in), path, format, options));
}

ps::StatusOr<std::unique_ptr<ExampleReader>> ExampleReader::FromStream(
    std::unique_ptr<std::istream> in, std::string name, Format format,
    const ReadOptions& options) {
  CHECK(in != nullptr);
  PS_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ExampleReader>(
      new ExampleReader(std::move(in), std::move(name), format, options));
}

ExampleReader::ExampleReader(std::unique_ptr<std::istream> in, std::string name,
                             Format format, const ReadOptions& options)
    : in_(std::move(in)),
      name_(std::move(name)),
      format_(format),
      options_(options) {}

bool ExampleReader::Keep(uint64_t line_no) {
  if (options_.split != ReadOptions::Split::kAll) {
    const bool held_out =
        line_no % options_.test_every == options_.test_every - 1;
    if (held_out != (options_.split == ReadOptions::Split::kTest)) {
      return false;
    }
  }
  return split_ordinal_++ % static_cast<uint64_t>(options_.num_shards) ==
         static_cast<uint64_t>(options_.shard);
}

void ExampleReader::RecordError(uint64_t line_no, const ps::Status& error) {
  ++stats_.malformed;
  if (stats_.malformed > static_cast<uint64_t>(options_.max_logged_errors)) {
    return;
  }
  // Line numbers in messages count from 1, as editors do.
  std::string message =
      name_ + ":" + std::to_string(line_no + 1) + ": " + error.message();
  LOG(WARNING) << "skipping malformed line " << message
               << (stats_.malformed ==
                           static_cast<uint64_t>(options_.max_logged_errors)
                       ? " (further malformed lines are only counted)"
                       : "");
  stats_.first_errors.push_back(std::move(message));
}

bool ExampleReader::Next(Example* example) {
  if (!status_.ok()) return false;
  while (std::getline(*in_, line_)) {
    const uint64_t line_no = stats_.lines++;
    if (!Keep(line_no)) continue;
    if (IsBlank(line_)) {
      ++stats_.blank;
      continue;
    }
    const ps::Status parsed = format_ == Format::kLibsvm
                                  ? ParseLibsvmLine(line_, example)
                                  : ParseCriteoLine(line_, example);
    if (!parsed.ok()) {
      RecordError(line_no, parsed);
      continue;
    }
    ++stats_.examples;
    return true;
  }
  if (in_->bad()) {
    status_ = ps::Status::Unavailable("read error in " + name_ + " after " +
                                      std::to_string(stats_.lines) + " lines");
  }
  return false;
}

size_t ExampleReader::ReadBatch(size_t max, std::vector<Example>* out) {
  size_t n = 0;
  Example example;
  while (n < max && Next(&example)) {
    out->push_back(std::move(example));
    ++n;
  }
  return n;
}

ps::Status ReadExamples(const std::string& path, Format format,
                        const ReadOptions& options,
                        std::vector<Example>* examples, ReadStats* stats) {
  auto reader = ExampleReader::Open(path, format, options);
  if (!reader.ok()) return reader.status();
  reader.value()->ReadBatch(std::numeric_limits<size_t>::max(), examples);
  if (stats != nullptr) *stats = reader.value()->stats();
  return reader.value()->status();
}

}  // namespace ctr
