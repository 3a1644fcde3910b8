// The hashing of feature ids and the synthetic CTR source (ps/data.h).
#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "ps/data.h"

namespace ps {
namespace data {
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

// The logistic function, stable for large |z|.
double Sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z))
                : std::exp(z) / (1.0 + std::exp(z));
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

Status SyntheticConfig::Validate() const {
  if (fields < 1 || fields > (1 << 20)) {
    return Status::InvalidArgument("fields must be in [1, 2^20]");
  }
  if (ids_per_field < 1 || ids_per_field > (uint64_t{1} << 52)) {
    return Status::InvalidArgument("ids_per_field must be in [1, 2^52]");
  }
  if (!(zipf >= 0 && zipf <= 10)) {
    return Status::InvalidArgument("zipf must be in [0, 10]");
  }
  if (fm_dim < 0 || fm_dim > 1024) {
    return Status::InvalidArgument("fm_dim must be in [0, 1024]");
  }
  if (!(w_std >= 0 && std::isfinite(w_std)) ||
      !(v_std >= 0 && std::isfinite(v_std))) {
    return Status::InvalidArgument("w_std and v_std must be finite, >= 0");
  }
  if (!std::isfinite(bias)) {
    return Status::InvalidArgument("bias must be finite");
  }
  if (!(head > 0 && std::isfinite(head)) ||
      !(fm_head > 0 && std::isfinite(fm_head)) ||
      !(decay >= 0 && std::isfinite(decay))) {
    return Status::InvalidArgument("need head > 0, fm_head > 0 and decay >= 0");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<SyntheticSource>> SyntheticSource::Create(
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

}  // namespace data
}  // namespace ps
