#include "ctr/metrics.h"

#include <glog/logging.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <utility>

namespace ctr {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// NaN below every number, so that sorting is well defined.
bool ScoreLess(double a, double b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a < b;
}

bool ScoreEqual(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// log(1 + e^x) without overflow.
double Softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// "" for NaN, else the shortest of %.6g.
std::string CsvNumber(double v) {
  if (std::isnan(v)) return "";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.6g", v);
  return buffer;
}

// Writes `contents` to `path` atomically: into path + ".tmp", then renamed
// over `path`, so a reader never sees a partial file.
ps::Status WriteFileAtomically(const std::string& path,
                               const std::string& contents) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return ps::Status::Unavailable("cannot create " + temporary + ": " +
                                   std::strerror(errno));
  }
  const bool written =
      std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    return ps::Status::Unavailable(
        "cannot write " + temporary + ": " +
        std::strerror(written ? errno : write_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    return ps::Status::Unavailable("cannot rename " + temporary + " to " +
                                   path + ": " + std::strerror(rename_errno));
  }
  return ps::Status::OK();
}

}  // namespace

double Sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z))
                : std::exp(z) / (1.0 + std::exp(z));
}

double Auc(const std::vector<double>& scores,
           const std::vector<float>& labels) {
  CHECK_EQ(scores.size(), labels.size());
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&scores](size_t a, size_t b) {
    return ScoreLess(scores[a], scores[b]);
  });
  // Mann-Whitney: the positives' rank sum, tied scores sharing the mean of
  // their ranks.
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && ScoreEqual(scores[order[j]], scores[order[i]])) ++j;
    const double rank =
        (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return kNaN;
  return (positive_rank_sum - positives * (positives + 1) / 2) /
         (positives * negatives);
}

double LogLoss(const std::vector<double>& probabilities,
               const std::vector<float>& labels, double epsilon) {
  CHECK_EQ(probabilities.size(), labels.size());
  if (probabilities.empty()) return kNaN;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::clamp(probabilities[i], epsilon, 1 - epsilon);
    const double y = labels[i];
    sum -= y * std::log(p) + (1 - y) * std::log1p(-p);
  }
  return sum / static_cast<double>(probabilities.size());
}

double LogLossOfLogits(const std::vector<double>& logits,
                       const std::vector<float>& labels, double epsilon) {
  CHECK_EQ(logits.size(), labels.size());
  if (logits.empty()) return kNaN;
  // Clipping p to [eps, 1 - eps] is clipping z to +-log((1 - eps) / eps).
  const double bound = std::log1p(-epsilon) - std::log(epsilon);
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double z = std::clamp(logits[i], -bound, bound);
    const double y = labels[i];
    // -log(sigmoid(z)) = softplus(-z); -log(1 - sigmoid(z)) = softplus(z).
    sum += y * Softplus(-z) + (1 - y) * Softplus(z);
  }
  return sum / static_cast<double>(logits.size());
}

// ------------------------------------------------------ LearningCurve --

void LearningCurve::Add(const CurvePoint& point) { points_.push_back(point); }

std::string LearningCurve::Csv() const {
  std::string csv =
      "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc\n";
  for (const CurvePoint& p : points_) {
    csv += std::to_string(p.step) + "," + std::to_string(p.examples) + "," +
           CsvNumber(p.seconds) + "," + CsvNumber(p.train_loss) + "," +
           CsvNumber(p.test_loss) + "," + CsvNumber(p.test_auc) + "," +
           CsvNumber(p.truth_auc) + "\n";
  }
  return csv;
}

ps::Status LearningCurve::WriteCsv(const std::string& path) const {
  return WriteFileAtomically(path, Csv());
}

}  // namespace ctr
