#include "ps/data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ctr/metrics.h"

namespace ps {
namespace data {
namespace {

using ctr::Auc;
using ctr::Sigmoid;

std::unique_ptr<SyntheticSource> MakeSource(const SyntheticConfig& config) {
  auto source = SyntheticSource::Create(config);
  EXPECT_TRUE(source.ok()) << source.status();
  return std::move(source).value();
}

// ------------------------------------------------------------- hashing --

TEST(HashTest, UnmixInvertsMix) {
  const uint64_t values[] = {
      0, 1, 12345, ~uint64_t{0}, uint64_t{1} << 63, 0xdeadbeefcafef00dULL};
  for (uint64_t x : values) {
    EXPECT_EQ(Unmix64(Mix64(x)), x);
    EXPECT_EQ(Mix64(Unmix64(x)), x);
  }
}

TEST(HashTest, FeatureIdsAreDistinctAcrossFieldsAndInvertible) {
  std::set<uint64_t> ids;
  for (uint32_t field = 0; field < 40; ++field) {
    for (uint64_t value = 0; value < 500; ++value) {
      const uint64_t id = FeatureId(field, value);
      EXPECT_EQ(FeatureValue(field, id), value);
      ids.insert(id);
    }
  }
  EXPECT_EQ(ids.size(), 40u * 500u);
}

// ----------------------------------------------------------- synthetic --

TEST(SyntheticSourceTest, RejectsInvalidConfig) {
  SyntheticConfig config;
  config.fields = 0;
  EXPECT_EQ(SyntheticSource::Create(config).status().code(),
            Status::Code::kInvalidArgument);
  config = SyntheticConfig();
  config.ids_per_field = 0;
  EXPECT_FALSE(SyntheticSource::Create(config).ok());
  config = SyntheticConfig();
  config.zipf = -1;
  EXPECT_FALSE(SyntheticSource::Create(config).ok());
  config = SyntheticConfig();
  config.head = 0;
  EXPECT_FALSE(SyntheticSource::Create(config).ok());
  EXPECT_TRUE(SyntheticSource::Create(SyntheticConfig()).ok());
}

TEST(SyntheticSourceTest, SameStreamAndIndexGiveTheSameExample) {
  const auto a = MakeSource(SyntheticConfig());
  const auto b = MakeSource(SyntheticConfig());
  Example reused;
  for (uint64_t index :
       {uint64_t{0}, uint64_t{1}, uint64_t{999}, uint64_t{1} << 40}) {
    const Example x = a->Get(SyntheticSource::TrainStream(3), index);
    const Example y = b->Get(SyntheticSource::TrainStream(3), index);
    b->Get(SyntheticSource::TrainStream(3), index, &reused);
    EXPECT_EQ(x.ids, y.ids);
    EXPECT_EQ(x.label, y.label);
    EXPECT_EQ(x.ids, reused.ids);
    EXPECT_EQ(x.label, reused.label);
  }
  // Generate is the same as Get, index by index, in any order of calls.
  const std::vector<Example> batch = a->Generate(7, 100, 50);
  ASSERT_EQ(batch.size(), 50u);
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(batch[i].ids, b->Get(7, 100 + i).ids);
  }
}

TEST(SyntheticSourceTest, ExamplesHaveOneValidIdPerField) {
  SyntheticConfig config;
  config.fields = 7;
  config.ids_per_field = 50;
  const auto source = MakeSource(config);
  for (uint64_t i = 0; i < 200; ++i) {
    const Example e = source->Get(SyntheticSource::kTestStream, i);
    ASSERT_EQ(e.ids.size(), 7u);
    EXPECT_TRUE(e.values.empty());
    EXPECT_TRUE(e.label == 0 || e.label == 1);
    for (uint32_t f = 0; f < 7; ++f) {
      EXPECT_LT(FeatureValue(f, e.ids[f]), 50u);
    }
  }
}

TEST(SyntheticSourceTest, StreamsAndSeedsGiveDisjointData) {
  // A collision of two 20-field examples has probability ~1e-30 unless the
  // streams overlap.
  SyntheticConfig config;
  const auto source = MakeSource(config);
  config.seed = 2;
  const auto other_seed = MakeSource(config);
  std::set<std::vector<uint64_t>> seen;
  size_t total = 0;
  for (uint64_t stream :
       {SyntheticSource::kTestStream, SyntheticSource::TrainStream(0),
        SyntheticSource::TrainStream(1)}) {
    for (uint64_t i = 0; i < 2000; ++i) {
      seen.insert(source->Get(stream, i).ids);
      seen.insert(other_seed->Get(stream, i).ids);
      total += 2;
    }
  }
  EXPECT_EQ(seen.size(), total);
}

TEST(SyntheticSourceTest, SeedChangesTheTruthNotTheIdSpace) {
  SyntheticConfig config;
  const auto a = MakeSource(config);
  config.seed = 99;
  const auto b = MakeSource(config);
  double wa, wb;
  std::vector<double> va(4), vb(4);
  a->TruthParameters(3, 0, &wa, va.data());
  b->TruthParameters(3, 0, &wb, vb.data());
  EXPECT_NE(wa, wb);
  EXPECT_NE(va, vb);
}

TEST(SyntheticSourceTest, TruthLogitMatchesItsDefinition) {
  SyntheticConfig config;
  config.fields = 4;
  config.fm_dim = 3;
  const auto source = MakeSource(config);
  // Include ranks past the cached head.
  const uint64_t ranks[4] = {0, 17, 5000, 150000};
  Example e;
  double w[4];
  double v[4][3];
  for (uint32_t f = 0; f < 4; ++f) {
    e.ids.push_back(FeatureId(f, ranks[f]));
    source->TruthParameters(static_cast<int>(f), ranks[f], &w[f], v[f]);
  }
  double expected = config.bias;
  for (int i = 0; i < 4; ++i) {
    expected += w[i];
    for (int j = i + 1; j < 4; ++j) {
      for (int d = 0; d < 3; ++d) expected += v[i][d] * v[j][d];
    }
  }
  EXPECT_NEAR(source->TruthLogit(e), expected, 1e-12);
  // Values multiply their features.
  e.values = {2.0f, 1.0f, 0.5f, 0.0f};
  const double x[4] = {2, 1, 0.5, 0};
  expected = config.bias;
  for (int i = 0; i < 4; ++i) {
    expected += w[i] * x[i];
    for (int j = i + 1; j < 4; ++j) {
      for (int d = 0; d < 3; ++d) expected += v[i][d] * v[j][d] * x[i] * x[j];
    }
  }
  EXPECT_NEAR(source->TruthLogit(e), expected, 1e-12);
}

TEST(SyntheticSourceTest, TruthScaleDecaysWithRank) {
  // Many fields, to sample the parameters of one rank many times.
  SyntheticConfig config;
  config.fields = 4000;
  const auto source = MakeSource(config);
  std::vector<double> v(static_cast<size_t>(config.fm_dim));
  auto rms = [&](uint64_t rank, bool factor) {
    double sum = 0;
    for (int f = 0; f < config.fields; ++f) {
      double w;
      source->TruthParameters(f, rank, &w, v.data());
      sum += factor ? v[0] * v[0] : w * w;
    }
    return std::sqrt(sum / config.fields);
  };
  // Sample standard deviations from 4000 normals: within ~3.5% at 3 sigma.
  for (uint64_t rank : {uint64_t{0}, uint64_t{50}, uint64_t{10000}}) {
    const double w_scale = std::pow(1 + rank / config.head, -config.decay);
    const double v_scale = std::pow(1 + rank / config.fm_head, -config.decay);
    EXPECT_NEAR(rms(rank, false), config.w_std * w_scale,
                0.04 * config.w_std * w_scale)
        << rank;
    EXPECT_NEAR(rms(rank, true), config.v_std * v_scale,
                0.04 * config.v_std * v_scale)
        << rank;
  }
}

TEST(SyntheticSourceTest, LabelsFollowTheTruth) {
  const auto source = MakeSource(SyntheticConfig());
  constexpr int kExamples = 20000;
  std::vector<double> logits;
  std::vector<float> labels;
  double expected_positives = 0;
  for (uint64_t i = 0; i < kExamples; ++i) {
    const Example e = source->Get(SyntheticSource::kTestStream, i);
    logits.push_back(source->TruthLogit(e));
    labels.push_back(e.label);
    expected_positives += Sigmoid(logits.back());
  }
  double positives = 0;
  for (float y : labels) positives += y;
  // Binomial-like spread: well under 4 standard deviations.
  EXPECT_NEAR(positives, expected_positives, 4 * std::sqrt(expected_positives));
  // The defaults' calibrated range (README): truth AUC about 0.80.
  const double auc = Auc(logits, labels);
  EXPECT_GT(auc, 0.77);
  EXPECT_LT(auc, 0.83);
  const double ctr = positives / kExamples;
  EXPECT_GT(ctr, 0.15);
  EXPECT_LT(ctr, 0.35);
}

// Frequencies of n ranks drawn by the source's sampler from a fixed
// sequence of uniforms.
std::vector<double> ZipfFrequencies(const SyntheticSource& source, int draws) {
  std::vector<double> counts(source.config().ids_per_field, 0.0);
  uint64_t state = 12345;
  for (int i = 0; i < draws;) {
    state += 0x9e3779b97f4a7c15ULL;
    const double u =
        static_cast<double>(Mix64(state) >> 11) / 9007199254740992.0;
    uint64_t rank;
    if (!source.ZipfRank(u, &rank)) continue;
    if (rank >= counts.size()) {
      ADD_FAILURE() << "rank " << rank << " out of range";
      return counts;
    }
    counts[rank] += 1;
    ++i;
  }
  return counts;
}

TEST(ZipfTest, FrequenciesFollowThePowerLaw) {
  for (double s : {0.0, 0.7, 1.0, 1.1, 2.0}) {
    SCOPED_TRACE(s);
    SyntheticConfig config;
    config.zipf = s;
    config.ids_per_field = 1000;
    const auto source = MakeSource(config);
    double total_probability = 0;
    for (uint64_t r = 0; r < 1000; ++r) {
      total_probability += source->ZipfProbability(r);
    }
    EXPECT_NEAR(total_probability, 1.0, 1e-9);
    constexpr int kDraws = 200000;
    const std::vector<double> counts = ZipfFrequencies(*source, kDraws);
    // The head rank by rank, and the tail in bands, each within 5 binomial
    // standard deviations of its probability.
    auto check = [&](uint64_t first, uint64_t last) {
      double p = 0;
      double count = 0;
      for (uint64_t r = first; r < last; ++r) {
        p += source->ZipfProbability(r);
        count += counts[r];
      }
      const double mean = kDraws * p;
      EXPECT_NEAR(count, mean, 5 * std::sqrt(mean * (1 - p)) + 1)
          << "ranks [" << first << ", " << last << ")";
    };
    for (uint64_t r = 0; r < 10; ++r) check(r, r + 1);
    check(10, 100);
    check(100, 1000);
    check(900, 1000);
  }
}

TEST(ZipfTest, LogLogSlopeIsTheExponent) {
  SyntheticConfig config;
  config.ids_per_field = 100000;
  const auto source = MakeSource(config);
  const std::vector<double> counts = ZipfFrequencies(*source, 400000);
  // Mean frequency over [10, 20) and [1000, 2000) ranks: slope of log
  // frequency against log rank (rank + 1, as P ~ (r + 1)^-s).
  auto mean = [&](size_t a, size_t b) {
    double sum = 0;
    for (size_t r = a; r < b; ++r) sum += counts[r];
    return sum / static_cast<double>(b - a);
  };
  auto rank = [](double a, double b) { return std::sqrt((a + 1) * (b + 1)); };
  const double slope = (std::log(mean(1000, 2000)) - std::log(mean(10, 20))) /
                       (std::log(rank(1000, 1999)) - std::log(rank(10, 19)));
  EXPECT_NEAR(slope, -config.zipf, 0.05);
}

// An independent statement of rejection-inversion for s != 1: H(x) =
// (x^(1-s) - 1) / (1-s). ZipfRank must accept a uniform u exactly when y
// lies in the top k^-s of rank k's slice, whatever shortcut it takes.
TEST(ZipfTest, ZipfRankAcceptsExactlyTheRejectionInversionRegion) {
  for (double s : {0.5, 1.1, 2.0}) {
    SCOPED_TRACE(s);
    SyntheticConfig config;
    config.zipf = s;
    config.ids_per_field = 5000;
    const auto source = MakeSource(config);
    auto h = [s](double x) { return (std::pow(x, 1 - s) - 1) / (1 - s); };
    auto h_inverse = [s](double y) {
      return std::pow(1 + (1 - s) * y, 1 / (1 - s));
    };
    const double low = h(1.5) - 1;
    const double high = h(5000.5);
    int rejected = 0;
    for (int i = 0; i < 100000; ++i) {
      const double u = (i + 0.5) / 100000;
      const double y = low + u * (high - low);
      const double x = h_inverse(y);
      const double k = std::round(x);
      const double boundary = h(k + 0.5) - std::pow(k, -s);
      // Skip draws within rounding of a decision boundary.
      if (std::abs(x - std::floor(x) - 0.5) < 1e-9 ||
          std::abs(y - boundary) < 1e-9) {
        continue;
      }
      const bool accept = k == 1 || y >= boundary;
      uint64_t rank = 0;
      ASSERT_EQ(source->ZipfRank(u, &rank), accept) << "u=" << u;
      if (accept) {
        EXPECT_EQ(rank, static_cast<uint64_t>(k) - 1);
      } else {
        ++rejected;
      }
    }
    EXPECT_GT(rejected, 0);  // the grid reaches the rejection regions.
  }
}

// ------------------------------------------------------------- libsvm --

TEST(LibsvmTest, ParsesLabelsIdsAndValues) {
  Example e;
  ASSERT_TRUE(ParseLibsvmLine("1 3:1 10:0.5 7:1", &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_EQ(e.ids, (std::vector<uint64_t>{3, 10, 7}));
  EXPECT_EQ(e.values, (std::vector<float>{1.0f, 0.5f, 1.0f}));
  EXPECT_EQ(e.value(1), 0.5f);

  // Binary features keep no values; -1 is the negative label; a bare id
  // has value 1; tabs, repeated spaces and a trailing \r are fine.
  ASSERT_TRUE(ParseLibsvmLine("-1\t5  18446744073709551615:1 \r", &e).ok());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.ids, (std::vector<uint64_t>{5, 18446744073709551615ULL}));
  EXPECT_TRUE(e.values.empty());
  EXPECT_EQ(e.value(0), 1.0f);

  for (const char* positive : {"+1 2:1", "1.0 2:1"}) {
    ASSERT_TRUE(ParseLibsvmLine(positive, &e).ok()) << positive;
    EXPECT_EQ(e.label, 1.0f) << positive;
  }
  ASSERT_TRUE(ParseLibsvmLine("0 2:1", &e).ok());
  EXPECT_EQ(e.label, 0.0f);
  // No features: only the bias.
  ASSERT_TRUE(ParseLibsvmLine("1", &e).ok());
  EXPECT_TRUE(e.ids.empty());
}

TEST(LibsvmTest, RejectsMalformedLinesWithAReason) {
  struct Case {
    const char* line;
    const char* reason;
  };
  const Case cases[] = {
      {"", "no label"},
      {"   ", "no label"},
      {"2 1:1", "label \"2\" is not 0/1 or -1/+1"},
      {"yes 1:1", "label \"yes\""},
      {"1 x:1", "feature 1 \"x:1\": id is not"},
      {"1 1:1 -3:1", "feature 2 \"-3:1\": id is not"},
      {"1 99999999999999999999:1", "id is not"},
      {"1 3:abc", "feature 1 \"3:abc\": value is not a finite number"},
      {"1 3:inf", "value is not a finite number"},
      {"1 3:nan", "value is not a finite number"},
      {"1 3:", "value is not"},
      {"1 :1", "id is not"},
  };
  Example e;
  for (const Case& c : cases) {
    const Status status = ParseLibsvmLine(c.line, &e);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << c.line;
    EXPECT_NE(status.message().find(c.reason), std::string::npos)
        << c.line << " -> " << status;
  }
}

// ------------------------------------------------------------- criteo --

// A Criteo line: label, 13 integers, 26 categoricals ("" = missing).
std::string CriteoLine(const std::string& label,
                       const std::vector<std::string>& integers,
                       const std::vector<std::string>& categoricals) {
  std::string line = label;
  for (const std::string& v : integers) line += "\t" + v;
  for (const std::string& v : categoricals) line += "\t" + v;
  return line;
}

std::vector<std::string> Integers() {
  return {"1", "", "-2", "0", "1024", "3", "7", "8", "", "12", "5", "", "9"};
}

std::vector<std::string> Categoricals() {
  std::vector<std::string> c(kCriteoCategoricalFields, "68fd1e64");
  c[1] = "";
  c[2] = "ABCDEF01";
  c[25] = "";
  return c;
}

TEST(CriteoTest, IntegerCodesBucketByLog2) {
  EXPECT_EQ(CriteoIntegerCode(0), 0u);
  EXPECT_EQ(CriteoIntegerCode(1), 1u);
  EXPECT_EQ(CriteoIntegerCode(2), 2u);
  EXPECT_EQ(CriteoIntegerCode(3), 2u);
  EXPECT_EQ(CriteoIntegerCode(4), 3u);
  EXPECT_EQ(CriteoIntegerCode(1023), 10u);
  EXPECT_EQ(CriteoIntegerCode(1024), 11u);
  EXPECT_EQ(CriteoIntegerCode(INT64_MAX), 63u);
  EXPECT_EQ(CriteoIntegerCode(-1), static_cast<uint64_t>(int64_t{-1}));
  EXPECT_EQ(CriteoIntegerCode(-1000), static_cast<uint64_t>(int64_t{-64}));
  EXPECT_NE(CriteoIntegerCode(-3), CriteoIntegerCode(3));
}

TEST(CriteoTest, ParsesOneIdPerField) {
  Example e;
  ASSERT_TRUE(
      ParseCriteoLine(CriteoLine("1", Integers(), Categoricals()) + "\r", &e)
          .ok());
  EXPECT_EQ(e.label, 1.0f);
  ASSERT_EQ(e.ids.size(), 39u);
  EXPECT_TRUE(e.values.empty());
  EXPECT_EQ(e.ids[0], FeatureId(0, CriteoIntegerCode(1)));
  EXPECT_EQ(e.ids[1], FeatureId(1, kMissingValue));
  EXPECT_EQ(e.ids[2], FeatureId(2, CriteoIntegerCode(-2)));
  EXPECT_EQ(e.ids[4], FeatureId(4, 11));
  EXPECT_EQ(e.ids[13], FeatureId(13, 0x68fd1e64));
  EXPECT_EQ(e.ids[14], FeatureId(14, kMissingValue));
  EXPECT_EQ(e.ids[15], FeatureId(15, 0xabcdef01));
  EXPECT_EQ(e.ids[38], FeatureId(38, kMissingValue));
  // The same token in different fields gives different ids.
  EXPECT_NE(e.ids[13], e.ids[16]);

  // All features missing is a valid line.
  ASSERT_TRUE(ParseCriteoLine(CriteoLine("0", std::vector<std::string>(13),
                                         std::vector<std::string>(26)),
                              &e)
                  .ok());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.ids.size(), 39u);
}

TEST(CriteoTest, RejectsMalformedLinesWithAReason) {
  std::vector<std::string> integers = Integers();
  std::vector<std::string> categoricals = Categoricals();
  const std::string good = CriteoLine("0", integers, categoricals);
  struct Case {
    std::string line;
    std::string reason;
  };
  std::vector<Case> cases = {
      {"", "expected 40 tab-separated columns, got 1"},
      {good.substr(2), "got 39 (an unlabelled test file?)"},
      {good + "\t", "got 41"},
      {"2" + good.substr(1), "label \"2\" is not 0 or 1"},
  };
  integers[3] = "1.5";
  cases.push_back({CriteoLine("0", integers, categoricals),
                   "integer column 4 \"1.5\" is not a decimal"});
  integers[3] = "99999999999999999999";
  cases.push_back(
      {CriteoLine("0", integers, categoricals), "integer column 4"});
  integers = Integers();
  categoricals[0] = "xyz";
  cases.push_back({CriteoLine("0", integers, categoricals),
                   "categorical column 14 \"xyz\" is not 1 to 16 hex digits"});
  categoricals[0] = "0123456789abcdef0";
  cases.push_back(
      {CriteoLine("0", integers, categoricals), "categorical column 14"});
  Example e;
  for (const Case& c : cases) {
    const Status status = ParseCriteoLine(c.line, &e);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << c.line;
    EXPECT_NE(status.message().find(c.reason), std::string::npos)
        << c.line << " -> " << status;
  }
}

// ------------------------------------------------------------- reader --

std::unique_ptr<ExampleReader> ReaderOf(const std::string& text, Format format,
                                        const ReadOptions& options) {
  auto reader = ExampleReader::FromStream(
      std::make_unique<std::istringstream>(text), "mem", format, options);
  EXPECT_TRUE(reader.ok()) << reader.status();
  return std::move(reader).value();
}

// n libsvm lines; line i is "1 i:1" (0-based), so ids tell line numbers.
std::string NumberedLines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "1 " + std::to_string(i) + ":1\n";
  return text;
}

std::vector<uint64_t> LinesRead(const std::string& text,
                                const ReadOptions& options) {
  auto reader = ReaderOf(text, Format::kLibsvm, options);
  std::vector<uint64_t> lines;
  Example e;
  while (reader->Next(&e)) lines.push_back(e.ids.at(0));
  EXPECT_TRUE(reader->status().ok());
  return lines;
}

TEST(ExampleReaderTest, SkipsAndCountsMalformedAndBlankLines) {
  const std::string text =
      "1 1:1\n"
      "oops 2:1\n"
      "\n"
      "0 3:1\r\n"
      "1 4:x\n"
      "1 5:1 junk:1\n"
      "   \n"
      "-1 6:1";  // no final newline.
  ReadOptions options;
  options.max_logged_errors = 2;
  auto reader = ReaderOf(text, Format::kLibsvm, options);
  std::vector<Example> examples;
  EXPECT_EQ(reader->ReadBatch(100, &examples), 3u);
  ASSERT_EQ(examples.size(), 3u);
  EXPECT_EQ(examples[0].ids, std::vector<uint64_t>{1});
  EXPECT_EQ(examples[1].ids, std::vector<uint64_t>{3});
  EXPECT_EQ(examples[1].label, 0.0f);
  EXPECT_EQ(examples[2].ids, std::vector<uint64_t>{6});
  EXPECT_TRUE(reader->status().ok());
  const ReadStats& stats = reader->stats();
  EXPECT_EQ(stats.lines, 8u);
  EXPECT_EQ(stats.examples, 3u);
  EXPECT_EQ(stats.blank, 2u);
  EXPECT_EQ(stats.malformed, 3u);
  ASSERT_EQ(stats.first_errors.size(), 2u);
  EXPECT_EQ(stats.first_errors[0], "mem:2: label \"oops\" is not 0/1 or -1/+1");
  EXPECT_EQ(stats.first_errors[1].rfind("mem:5: feature 1 \"4:x\"", 0), 0u)
      << stats.first_errors[1];
  Example e;
  EXPECT_FALSE(reader->Next(&e));
}

TEST(ExampleReaderTest, ShardsPartitionTheLines) {
  const std::string text = NumberedLines(30);
  ReadOptions options;
  options.test_every = 0;
  options.num_shards = 3;
  std::set<uint64_t> all;
  for (int shard = 0; shard < 3; ++shard) {
    options.shard = shard;
    const std::vector<uint64_t> lines = LinesRead(text, options);
    EXPECT_EQ(lines.size(), 10u);
    for (uint64_t line : lines) {
      EXPECT_EQ(line % 3, static_cast<uint64_t>(shard));
      EXPECT_TRUE(all.insert(line).second) << "line " << line << " twice";
    }
  }
  EXPECT_EQ(all.size(), 30u);
}

TEST(ExampleReaderTest, HoldsOutEveryTenthLineAndShardsTheRest) {
  const std::string text = NumberedLines(100);
  ReadOptions options;
  options.split = ReadOptions::Split::kTest;
  const std::vector<uint64_t> test = LinesRead(text, options);
  EXPECT_EQ(test,
            (std::vector<uint64_t>{9, 19, 29, 39, 49, 59, 69, 79, 89, 99}));
  // Ten shards of the 90 training lines: ten a piece, none held out, even
  // though 10 divides test_every.
  options.split = ReadOptions::Split::kTrain;
  options.num_shards = 10;
  std::set<uint64_t> train;
  for (int shard = 0; shard < 10; ++shard) {
    options.shard = shard;
    const std::vector<uint64_t> lines = LinesRead(text, options);
    EXPECT_EQ(lines.size(), 9u) << "shard " << shard;
    for (uint64_t line : lines) {
      EXPECT_NE(line % 10, 9u);
      EXPECT_TRUE(train.insert(line).second);
    }
  }
  EXPECT_EQ(train.size(), 90u);
}

TEST(ExampleReaderTest, RejectsBadOptions) {
  ReadOptions options;
  options.num_shards = 2;
  options.shard = 2;
  EXPECT_EQ(ExampleReader::FromStream(std::make_unique<std::istringstream>(""),
                                      "mem", Format::kLibsvm, options)
                .status()
                .code(),
            Status::Code::kInvalidArgument);
  options = ReadOptions();
  options.split = ReadOptions::Split::kTrain;
  options.test_every = 0;
  EXPECT_FALSE(
      ExampleReader::Open("/nonexistent", Format::kLibsvm, options).ok());
}

TEST(ExampleReaderTest, MissingFileIsNotFound) {
  auto reader = ExampleReader::Open("/nonexistent/ctr/data.txt",
                                    Format::kCriteo, ReadOptions());
  EXPECT_EQ(reader.status().code(), Status::Code::kNotFound);
  EXPECT_NE(reader.status().message().find("/nonexistent/ctr/data.txt"),
            std::string::npos);
}

TEST(ExampleReaderTest, ReadsACriteoFile) {
  const std::string path = testing::TempDir() + "/ctr_data_test_criteo.tsv";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 20; ++i) {
      out << CriteoLine(i % 3 == 0 ? "1" : "0", Integers(), Categoricals())
          << "\n";
    }
    out << "garbage line\n";
  }
  ReadOptions options;
  options.split = ReadOptions::Split::kTrain;  // lines 9 and 19 held out.
  std::vector<Example> examples;
  ReadStats stats;
  ASSERT_TRUE(
      ReadExamples(path, Format::kCriteo, options, &examples, &stats).ok());
  EXPECT_EQ(examples.size(), 18u);
  EXPECT_EQ(stats.lines, 21u);
  EXPECT_EQ(stats.malformed, 1u);
  for (const Example& e : examples) EXPECT_EQ(e.ids.size(), 39u);
  EXPECT_EQ(examples[0].label, 1.0f);
  EXPECT_EQ(examples[1].label, 0.0f);
  std::remove(path.c_str());
}

TEST(ExampleReaderTest, SurvivesBinaryGarbage) {
  std::string text;
  uint64_t state = 7;
  for (int i = 0; i < 20000; ++i) {
    state = Mix64(state);
    text.push_back(static_cast<char>(state & 0xff));
    // Sprinkle in characters that parsers look at.
    if (state % 7 == 0)
      text.push_back(static_cast<char>("\t :\n1-"[state % 6]));
  }
  for (Format format : {Format::kLibsvm, Format::kCriteo}) {
    ReadOptions options;
    options.max_logged_errors = 0;
    auto reader = ReaderOf(text, format, options);
    Example e;
    uint64_t parsed = 0;
    while (reader->Next(&e)) ++parsed;
    EXPECT_TRUE(reader->status().ok());
    const ReadStats& stats = reader->stats();
    EXPECT_EQ(stats.examples, parsed);
    EXPECT_EQ(stats.examples + stats.blank + stats.malformed, stats.lines);
    EXPECT_GT(stats.malformed, 0u);
    EXPECT_TRUE(stats.first_errors.empty());
  }
}

}  // namespace
}  // namespace data
}  // namespace ps
