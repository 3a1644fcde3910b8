#include "ctr/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ctr {
namespace {

// ---------------------------------------------------------------- AUC --

// Pairwise definition, O(n^2): the reference for Auc.
double PairwiseAuc(const std::vector<double>& scores,
                   const std::vector<float>& labels) {
  double wins = 0;
  double pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] <= 0.5f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] > 0.5f) continue;
      pairs += 1;
      if (scores[i] > scores[j]) wins += 1;
      if (scores[i] == scores[j]) wins += 0.5;
    }
  }
  return wins / pairs;
}

TEST(AucTest, KnownSmallCases) {
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.2, 0.8, 0.9}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.9, 0.8, 0.2, 0.1}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}), 0.75);
  // Logits rank like probabilities.
  EXPECT_DOUBLE_EQ(Auc({-3, 1, -0.5, 2}, {0, 0, 1, 1}), 0.75);
}

TEST(AucTest, TiesCountOneHalf) {
  EXPECT_DOUBLE_EQ(Auc({0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}), 0.5);
  // (pos 1 vs neg 1) ties, (pos 2 vs neg 1) wins: (0.5 + 1) / 2.
  EXPECT_DOUBLE_EQ(Auc({1, 1, 2}, {0, 1, 1}), 0.75);
  // A tie group spanning both classes in the middle of the order.
  EXPECT_DOUBLE_EQ(Auc({0, 1, 1, 1, 2}, {0, 1, 0, 1, 1}),
                   PairwiseAuc({0, 1, 1, 1, 2}, {0, 1, 0, 1, 1}));
}

TEST(AucTest, MatchesThePairwiseDefinitionWithManyTies) {
  std::vector<double> scores;
  std::vector<float> labels;
  uint64_t state = 1;
  for (int i = 0; i < 500; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int bucket = static_cast<int>((state >> 33) % 20);  // many ties.
    scores.push_back(bucket * 0.05);
    // Positives more likely at high scores.
    labels.push_back(((state >> 13) % 20) < static_cast<uint64_t>(bucket) ? 1
                                                                          : 0);
  }
  EXPECT_NEAR(Auc(scores, labels), PairwiseAuc(scores, labels), 1e-12);
}

TEST(AucTest, OneClassOrEmptyIsNaN) {
  EXPECT_TRUE(std::isnan(Auc({0.1, 0.9}, {1, 1})));
  EXPECT_TRUE(std::isnan(Auc({0.1, 0.9}, {0, 0})));
  EXPECT_TRUE(std::isnan(Auc({}, {})));
}

TEST(AucTest, NaNScoresRankLowest) {
  const double nan = std::nan("");
  // NaN negatives lose to every positive; NaNs tie with each other.
  EXPECT_DOUBLE_EQ(Auc({nan, 0.1, 0.2}, {0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({nan, nan}, {0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({0.3, nan, 0.2}, {0, 1, 0}), 0.0);
}

// ----------------------------------------------------------- log-loss --

TEST(LogLossTest, KnownValuesAndClipping) {
  EXPECT_NEAR(LogLoss({0.5, 0.5}, {0, 1}), std::log(2.0), 1e-12);
  EXPECT_NEAR(LogLoss({0.9, 0.2}, {1, 0}), -(std::log(0.9) + std::log(0.8)) / 2,
              1e-12);
  // A confident mistake costs -log(epsilon), not infinity.
  EXPECT_NEAR(LogLoss({0.0}, {1}), -std::log(kLogLossEpsilon), 1e-6);
  EXPECT_NEAR(LogLoss({1.0}, {0}), -std::log(kLogLossEpsilon), 1e-6);
  EXPECT_NEAR(LogLoss({0.0}, {1}, 0.01), -std::log(0.01), 1e-12);
  EXPECT_TRUE(std::isnan(LogLoss({}, {})));
}

TEST(LogLossTest, LogitsAgreeWithProbabilities) {
  const std::vector<double> logits = {-40, -5, -0.3, 0, 0.7, 4, 40};
  const std::vector<float> labels = {1, 0, 1, 0, 1, 1, 0};
  std::vector<double> probabilities;
  for (double z : logits) probabilities.push_back(Sigmoid(z));
  EXPECT_NEAR(LogLossOfLogits(logits, labels), LogLoss(probabilities, labels),
              1e-6);
  EXPECT_TRUE(std::isfinite(LogLossOfLogits({1e300, -1e300}, {0, 1})));
}

TEST(SigmoidTest, StableAtExtremes) {
  EXPECT_DOUBLE_EQ(Sigmoid(0), 0.5);
  EXPECT_DOUBLE_EQ(Sigmoid(1000), 1.0);
  EXPECT_DOUBLE_EQ(Sigmoid(-1000), 0.0);
  EXPECT_NEAR(Sigmoid(2) + Sigmoid(-2), 1.0, 1e-15);
}

// ------------------------------------------------------- LearningCurve --

CurvePoint Point(int64_t i) {
  CurvePoint p;
  p.step = i;
  p.examples = i * 1000;
  p.seconds = 0.5 * static_cast<double>(i);
  p.train_loss = 0.5 - 0.01 * static_cast<double>(i);
  p.test_loss = 0.51 - 0.01 * static_cast<double>(i);
  p.test_auc = 0.7 + 0.01 * static_cast<double>(i);
  p.truth_auc = 0.8;
  return p;
}

TEST(LearningCurveTest, CsvHasTheHeaderAndEmptyCellsForMissingValues) {
  LearningCurve curve;
  curve.Add(Point(1));
  CurvePoint real_data = Point(2);
  real_data.truth_auc = CurvePoint::kNone;
  curve.Add(real_data);
  EXPECT_EQ(curve.Csv(),
            "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc\n"
            "1,1000,0.5,0.49,0.5,0.71,0.8\n"
            "2,2000,1,0.48,0.49,0.72,\n");
}

TEST(LearningCurveTest, WritesTheCsvAtomically) {
  LearningCurve curve;
  for (int64_t i = 1; i <= 5; ++i) curve.Add(Point(i));
  const std::string path = testing::TempDir() + "/metrics_test_curve.csv";
  ASSERT_TRUE(curve.WriteCsv(path).ok());
  std::ifstream file(path);
  const std::string contents((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, curve.Csv());
  // The temporary file was renamed, not left beside it.
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  std::remove(path.c_str());

  const ps::Status s = curve.WriteCsv("/nonexistent-dir/curve.csv");
  EXPECT_EQ(s.code(), ps::Status::Code::kUnavailable) << s;
}

}  // namespace
}  // namespace ctr
