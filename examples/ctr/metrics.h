// Evaluation for the examples/ctr model: exact AUC, clipped log-loss, and a
// learning curve written as CSV (examples/ctr/plot_curve.py draws it with
// matplotlib).
//
// The functions are pure and thread-safe. LearningCurve is thread-compatible:
// one thread at a time (typically the reporting worker's training loop).
#ifndef EXAMPLES_CTR_METRICS_H_
#define EXAMPLES_CTR_METRICS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ps/status.h"

namespace ctr {

// The area under the ROC curve of `scores` (any monotone score: logits or
// probabilities) for `labels` (positive iff > 0.5): the probability that a
// random positive scores above a random negative, ties counting one half.
// Exact: sorts, O(n log n). NaN scores rank below every number and tie with
// each other. Returns NaN when there are no positives or no negatives (AUC
// is undefined then). CHECKs that the sizes match.
double Auc(const std::vector<double>& scores, const std::vector<float>& labels);

// 1 / (1 + e^-z), without overflow.
double Sigmoid(double z);

// The mean of -[y log p + (1 - y) log(1 - p)] with each probability clipped
// to [epsilon, 1 - epsilon], so a confident mistake costs at most
// -log(epsilon). NaN for empty input. CHECKs that the sizes match.
inline constexpr double kLogLossEpsilon = 1e-7;
double LogLoss(const std::vector<double>& probabilities,
               const std::vector<float>& labels,
               double epsilon = kLogLossEpsilon);
// The same from logits, computed stably: equal to
// LogLoss(Sigmoid(logits), labels, epsilon).
double LogLossOfLogits(const std::vector<double>& logits,
                       const std::vector<float>& labels,
                       double epsilon = kLogLossEpsilon);

// One evaluation of a training run. NaN marks a value not measured (e.g.
// truth_auc on real data); it is written as an empty CSV cell and not
// plotted.
struct CurvePoint {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  int64_t step = 0;      // e.g. minibatches or pushes so far.
  int64_t examples = 0;  // training examples consumed so far (all workers).
  double seconds = 0;    // wall time since the start of training.
  double train_loss = kNone;
  double test_loss = kNone;
  double test_auc = kNone;
  double truth_auc = kNone;
};

// The points of a training run, in the order added, and their CSV. Write
// the file after every Add() so that an interrupted run leaves its curve so
// far; each write replaces the file atomically.
class LearningCurve {
 public:
  LearningCurve() = default;
  LearningCurve(const LearningCurve&) = delete;
  LearningCurve& operator=(const LearningCurve&) = delete;

  void Add(const CurvePoint& point);
  const std::vector<CurvePoint>& points() const { return points_; }

  // "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc", then
  // one line per point.
  std::string Csv() const;

  // Csv() written to `path`. Unavailable if the file cannot be written.
  // Blocks on file I/O.
  [[nodiscard]] ps::Status WriteCsv(const std::string& path) const;

 private:
  std::vector<CurvePoint> points_;
};

}  // namespace ctr

#endif  // EXAMPLES_CTR_METRICS_H_
