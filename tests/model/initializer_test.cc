#include "model/initializer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ps {
namespace model {
namespace {

using Code = Status::Code;

Initializer MustParse(const std::string& spec) {
  StatusOr<Initializer> parsed = Initializer::Parse(spec);
  EXPECT_TRUE(parsed.ok()) << spec << ": " << parsed.status();
  return parsed.ok() ? parsed.value() : Initializer();
}

std::vector<float> FillRow(const Initializer& init, uint64_t table,
                           uint64_t row, int dim) {
  std::vector<float> out(dim, -999.0f);
  init.Fill(table, row, out.data(), dim);
  return out;
}

struct Moments {
  double mean = 0;
  double stddev = 0;
  float min = 0;
  float max = 0;
};

// The moments of rows 0..rows-1 (IDs spread over the 64-bit range) of table
// 7, dim 8.
Moments Sample(const Initializer& init, int rows) {
  constexpr int kDim = 8;
  double sum = 0, sum_sq = 0;
  float lo = INFINITY, hi = -INFINITY;
  std::vector<float> out(kDim);
  for (int r = 0; r < rows; ++r) {
    const uint64_t id = static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ULL;
    init.Fill(7, id, out.data(), kDim);
    for (float v : out) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  const double n = static_cast<double>(rows) * kDim;
  Moments m;
  m.mean = sum / n;
  m.stddev = std::sqrt(sum_sq / n - m.mean * m.mean);
  m.min = lo;
  m.max = hi;
  return m;
}

constexpr int kRows = 20000;  // 160000 samples: the mean's error is ~0.25%
                              // of a std.

TEST(InitializerTest, DefaultAndZerosFillZeros) {
  EXPECT_EQ(Initializer().ToString(), "zeros");
  for (const Initializer& init :
       {Initializer(), MustParse("zeros"), MustParse("zeros()")}) {
    EXPECT_EQ(init.kind(), Initializer::Kind::kZeros);
    for (float v : FillRow(init, 1, 2, 5)) EXPECT_EQ(v, 0.0f);
  }
}

TEST(InitializerTest, ConstantFillsTheValue) {
  for (float v : FillRow(MustParse("constant(0.25)"), 1, 2, 5)) {
    EXPECT_EQ(v, 0.25f);
  }
  for (float v : FillRow(MustParse("constant(value=-3)"), 1, 2, 5)) {
    EXPECT_EQ(v, -3.0f);
  }
}

TEST(InitializerTest, FillIsAPureFunctionOfSpecTableRowAndIndex) {
  for (const char* spec :
       {"uniform(-1,1)", "normal(0,1)", "truncated_normal(0.5,2)"}) {
    const Initializer a = MustParse(spec);
    const Initializer b = MustParse(spec);  // Another instance.
    // Rows in one order from `a`, in the reverse order from `b`, with other
    // rows filled in between: identical.
    std::vector<std::vector<float>> forward;
    for (uint64_t row = 0; row < 100; ++row) {
      forward.push_back(FillRow(a, 3, row * 1000003, 16));
    }
    for (int row = 99; row >= 0; --row) {
      FillRow(b, 4, row, 16);  // Unrelated work in between.
      EXPECT_EQ(FillRow(b, 3, static_cast<uint64_t>(row) * 1000003, 16),
                forward[row])
          << spec << " row " << row;
    }
    // Element i does not depend on dim: a shorter fill is a prefix.
    const std::vector<float> long_row = FillRow(a, 3, 42, 64);
    const std::vector<float> short_row = FillRow(a, 3, 42, 5);
    EXPECT_EQ(std::vector<float>(long_row.begin(), long_row.begin() + 5),
              short_row)
        << spec;
  }
}

TEST(InitializerTest, DifferentRowsTablesAndElementsGetDifferentValues) {
  const Initializer init = MustParse("uniform(-1,1)");
  const std::vector<float> base = FillRow(init, 1, 5, 16);
  EXPECT_NE(FillRow(init, 1, 6, 16), base);
  EXPECT_NE(FillRow(init, 2, 5, 16), base);
  EXPECT_NE(FillRow(init, 0, 0, 16), FillRow(init, 0, ~uint64_t{0}, 16));
  // Within a row the elements differ too.
  for (int i = 1; i < 16; ++i) EXPECT_NE(base[i], base[0]);
}

TEST(InitializerTest, UniformHasTheRightRangeMeanAndSpread) {
  const Moments m = Sample(MustParse("uniform(lo=-1,hi=3)"), kRows);
  EXPECT_GE(m.min, -1.0f);
  EXPECT_LT(m.max, 3.0f);
  EXPECT_LT(m.min, -0.99f);  // It covers the range.
  EXPECT_GT(m.max, 2.99f);
  EXPECT_NEAR(m.mean, 1.0, 0.02);
  EXPECT_NEAR(m.stddev, 4.0 / std::sqrt(12.0), 0.02);
}

TEST(InitializerTest, NormalHasTheRightMeanAndStd) {
  const Moments m = Sample(MustParse("normal(mean=2,std=0.5)"), kRows);
  EXPECT_NEAR(m.mean, 2.0, 0.01);
  EXPECT_NEAR(m.stddev, 0.5, 0.01);
  // Not truncated: values beyond 3 std appear (0.27% of 160000).
  EXPECT_LT(m.min, 2.0f - 3 * 0.5f);
  EXPECT_GT(m.max, 2.0f + 3 * 0.5f);
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStd) {
  const Moments m = Sample(MustParse("truncated_normal(-1, 0.1)"), kRows);
  // Rounding to float may move a value by an ulp past the bound.
  EXPECT_GE(m.min, -1.2f - 1e-6f);
  EXPECT_LE(m.max, -0.8f + 1e-6f);
  EXPECT_LT(m.min, -1.19f);  // It reaches the bounds.
  EXPECT_GT(m.max, -0.81f);
  EXPECT_NEAR(m.mean, -1.0, 0.002);
  // The std of a normal truncated at 2 std is 0.8796 std.
  EXPECT_NEAR(m.stddev, 0.08796, 0.002);
}

TEST(InitializerTest, ZeroStdGivesTheMean) {
  for (float v : FillRow(MustParse("normal(1.5, 0)"), 1, 2, 8)) {
    EXPECT_EQ(v, 1.5f);
  }
  for (float v : FillRow(MustParse("truncated_normal(1.5, 0)"), 1, 2, 8)) {
    EXPECT_EQ(v, 1.5f);
  }
  for (float v : FillRow(MustParse("uniform(2, 2)"), 1, 2, 8)) {
    EXPECT_EQ(v, 2.0f);
  }
}

TEST(InitializerTest, ParseAcceptsPositionalAndNamedAndToStringRoundTrips) {
  struct Case {
    const char* spec;
    const char* canonical;
  };
  const Case cases[] = {
      {"zeros", "zeros"},
      {" zeros ( ) ", "zeros"},
      {"constant(0.5)", "constant(value=0.5)"},
      {"constant( value = -2 )", "constant(value=-2)"},
      {"uniform(-0.1,0.1)", "uniform(lo=-0.1,hi=0.1)"},
      {"uniform(lo=-0.1, hi=+0.1)", "uniform(lo=-0.1,hi=0.1)"},
      {"uniform(hi=1, lo=0)", "uniform(lo=0,hi=1)"},
      {"uniform(-1, hi=1)", "uniform(lo=-1,hi=1)"},
      {"normal(0, 0.01)", "normal(mean=0,std=0.01)"},
      {"truncated_normal(mean=1e-3,std=2.5e2)",
       "truncated_normal(mean=0.001,std=250)"},
  };
  for (const Case& c : cases) {
    StatusOr<Initializer> parsed = Initializer::Parse(c.spec);
    ASSERT_TRUE(parsed.ok()) << c.spec << ": " << parsed.status();
    EXPECT_EQ(parsed.value().ToString(), c.canonical) << c.spec;
    StatusOr<Initializer> again = Initializer::Parse(c.canonical);
    ASSERT_TRUE(again.ok()) << c.canonical << ": " << again.status();
    EXPECT_EQ(again.value().ToString(), c.canonical);
    EXPECT_EQ(FillRow(again.value(), 9, 9, 8), FillRow(parsed.value(), 9, 9, 8))
        << c.spec;
  }
  // A value without a short decimal form survives the round trip exactly.
  const Initializer third =
      MustParse("constant(0.333333333333333314829616256247)");
  EXPECT_EQ(MustParse(third.ToString()).ToString(), third.ToString());
  EXPECT_EQ(FillRow(MustParse(third.ToString()), 0, 0, 1)[0],
            static_cast<float>(1.0 / 3.0));
}

TEST(InitializerTest, ParseRejectsMalformedSpecsWithAReason) {
  struct Case {
    const char* spec;
    const char* reason;
  };
  const Case cases[] = {
      {"", "empty spec"},
      {"   ", "empty spec"},
      {"gaussian(0,1)", "unknown initializer 'gaussian'"},
      {"ones", "unknown initializer 'ones'"},
      {"zeros(1)", "too many arguments"},
      {"constant", "missing required argument 'value'"},
      {"constant()", "missing required argument 'value'"},
      {"constant(1, 2)", "too many arguments"},
      {"uniform(0)", "missing required argument 'hi'"},
      {"uniform(0, 1, 2)", "too many arguments"},
      {"uniform(lo=0, high=1)", "unknown argument 'high'"},
      {"uniform(1, 0)", "lo (1) is greater than hi (0)"},
      {"uniform(0, lo=1)", "'lo' given twice"},
      {"normal(0, -1)", "std (-1) is negative"},
      {"truncated_normal(mean=0, std=-0.5)", "std (-0.5) is negative"},
      {"normal(zero, 1)", "'zero' is not a finite number"},
      {"normal(0, 1e5000)", "not a finite number"},
      {"constant(nan)", "not a finite number"},
      {"constant(1e39)", "would not fit in a float"},
      {"normal(0, 1e38)", "would not fit in a float"},
      {"constant(1,)", "empty argument"},
      {"constant(1", "missing ')'"},
      {"constant(1)x", "unexpected 'x' after ')'"},
      {"constant(1) (2)", "unexpected '(2)' after ')'"},
      {"uniform[0,1]", "unexpected '[0,1]' after the name 'uniform'"},
      {"3(0)", "expected a name"},
  };
  for (const Case& c : cases) {
    StatusOr<Initializer> parsed = Initializer::Parse(c.spec);
    ASSERT_FALSE(parsed.ok()) << "accepted '" << c.spec << "'";
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << c.spec;
    EXPECT_NE(parsed.status().message().find(c.reason), std::string::npos)
        << "spec '" << c.spec << "' gave: " << parsed.status().message()
        << "\nexpected it to contain: " << c.reason;
  }
}

}  // namespace
}  // namespace model
}  // namespace ps
