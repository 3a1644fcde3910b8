#include "ctr/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ctr/canvas.h"
#include "ctr/png.h"

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

// ------------------------------------------------------------ checksums --

const uint8_t* Bytes(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

TEST(ChecksumTest, KnownVectors) {
  // The standard check values of CRC-32/ISO-HDLC and Adler-32.
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32(Bytes(digits), digits.size()), 0xCBF43926u);
  EXPECT_EQ(Crc32(nullptr, 0), 0u);
  const std::string wikipedia = "Wikipedia";
  EXPECT_EQ(Adler32(Bytes(wikipedia), wikipedia.size()), 0x11E60398u);
  EXPECT_EQ(Adler32(nullptr, 0), 1u);
  // The IEND chunk's CRC, as in every PNG file.
  EXPECT_EQ(Crc32(Bytes("IEND"), 4), 0xAE426082u);
}

TEST(ChecksumTest, ContinuesAcrossPieces) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 7));
  const uint32_t crc = Crc32(Bytes(data), data.size());
  EXPECT_EQ(Crc32(Bytes(data) + 12345, data.size() - 12345,
                  Crc32(Bytes(data), 12345)),
            crc);
  // Adler-32 over more than its 5552-byte block, against the definition.
  uint32_t a = 1;
  uint32_t b = 0;
  for (unsigned char c : data) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(Adler32(Bytes(data), data.size()), b << 16 | a);
  EXPECT_EQ(Adler32(Bytes(data) + 7000, data.size() - 7000,
                    Adler32(Bytes(data), 7000)),
            b << 16 | a);
}

// ----------------------------------------------------------------- PNG --

uint32_t BigEndian32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 3]));
}

struct DecodedPng {
  uint32_t width = 0;
  uint32_t height = 0;
  std::string rgb;
  std::vector<std::string> chunk_types;
};

// Checks the structure of a PNG written by EncodePng (signature, chunk CRCs,
// IHDR, stored deflate blocks, Adler-32) and returns its pixels.
DecodedPng DecodeStoredPng(const std::string& png) {
  DecodedPng out;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string zlib;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t length = BigEndian32(png, at);
    EXPECT_LE(at + 12 + length, png.size());
    if (at + 12 + length > png.size()) return out;
    const std::string type = png.substr(at + 4, 4);
    EXPECT_EQ(BigEndian32(png, at + 8 + length),
              Crc32(Bytes(png) + at + 4, 4 + length))
        << "CRC of " << type;
    const std::string data = png.substr(at + 8, length);
    out.chunk_types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(length, 13u);
      out.width = BigEndian32(data, 0);
      out.height = BigEndian32(data, 4);
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      zlib += data;
    }
    at += 12 + length;
  }
  EXPECT_EQ(at, png.size());
  // zlib header: deflate, and a multiple of 31.
  EXPECT_GE(zlib.size(), 2u + 5u + 4u);
  if (zlib.size() < 11) return out;
  EXPECT_EQ(zlib[0] & 0x0f, 8);
  EXPECT_EQ(
      (static_cast<uint8_t>(zlib[0]) * 256 + static_cast<uint8_t>(zlib[1])) %
          31,
      0);
  std::string raw;
  size_t z = 2;
  bool final = false;
  while (!final && z + 5 <= zlib.size()) {
    const uint8_t header = static_cast<uint8_t>(zlib[z]);
    final = header & 1;
    EXPECT_EQ(header >> 1, 0) << "not a stored block";
    const uint32_t len = static_cast<uint8_t>(zlib[z + 1]) |
                         static_cast<uint8_t>(zlib[z + 2]) << 8;
    const uint32_t nlen = static_cast<uint8_t>(zlib[z + 3]) |
                          static_cast<uint8_t>(zlib[z + 4]) << 8;
    EXPECT_EQ(len ^ 0xffff, nlen);
    raw += zlib.substr(z + 5, len);
    z += 5 + len;
  }
  EXPECT_TRUE(final);
  EXPECT_EQ(z + 4, zlib.size());
  EXPECT_EQ(BigEndian32(zlib, z), Adler32(Bytes(raw), raw.size()));
  const size_t row = static_cast<size_t>(out.width) * 3;
  EXPECT_EQ(raw.size(), (row + 1) * out.height);
  for (uint32_t y = 0; y < out.height && (y + 1) * (row + 1) <= raw.size();
       ++y) {
    EXPECT_EQ(raw[y * (row + 1)], '\0') << "filter of row " << y;
    out.rgb += raw.substr(y * (row + 1) + 1, row);
  }
  return out;
}

TEST(PngTest, EncodesPixelsInValidChunks) {
  // Big enough for several stored blocks.
  const int width = 150;
  const int height = 200;
  std::string rgb;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      rgb.push_back(static_cast<char>(x));
      rgb.push_back(static_cast<char>(y));
      rgb.push_back(static_cast<char>(x ^ y));
    }
  }
  const std::string png = EncodePng(width, height, rgb);
  const DecodedPng decoded = DecodeStoredPng(png);
  EXPECT_EQ(decoded.chunk_types,
            (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  EXPECT_EQ(decoded.width, 150u);
  EXPECT_EQ(decoded.height, 200u);
  EXPECT_EQ(decoded.rgb, rgb);
}

TEST(PngTest, OnePixel) {
  const DecodedPng decoded = DecodeStoredPng(EncodePng(1, 1, "\x01\x02\x03"));
  EXPECT_EQ(decoded.rgb, "\x01\x02\x03");
}

TEST(PngTest, WritesAFileAtomically) {
  const std::string path = testing::TempDir() + "/metrics_test_pixel.png";
  ASSERT_TRUE(WriteFileAtomically(path, EncodePng(1, 1, "abc")).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(DecodeStoredPng(contents).rgb, "abc");
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  std::remove(path.c_str());
  EXPECT_EQ(WriteFileAtomically("/nonexistent/dir/x.png", "").code(),
            ps::Status::Code::kUnavailable);
}

// -------------------------------------------------------------- canvas --

TEST(CanvasTest, DrawsClippedLinesRectsAndText) {
  const Rgb white{255, 255, 255};
  const Rgb red{255, 0, 0};
  Canvas canvas(40, 20, white);
  canvas.DrawLine(0, 0, 39, 19, red);
  EXPECT_EQ(canvas.Pixel(0, 0), red);
  EXPECT_EQ(canvas.Pixel(39, 19), red);
  EXPECT_EQ(canvas.Pixel(39, 0), white);
  // Off-canvas drawing is clipped, not a crash.
  canvas.DrawLine(-100, -100, 200, 300, red, 3);
  canvas.FillRect(-5, -5, 3, 3, red);
  EXPECT_EQ(canvas.Pixel(2, 2), red);
  canvas.DrawText(-3, 15, "CLIPPED 0.5", red, 2);

  Canvas text(20, 9, white);
  text.DrawText(1, 1, "1", red);
  // '1' is ..#.. in its first row and .###. in its last.
  EXPECT_EQ(text.Pixel(3, 1), red);
  EXPECT_EQ(text.Pixel(2, 1), white);
  EXPECT_EQ(text.Pixel(2, 7), red);
  EXPECT_EQ(text.Pixel(4, 7), red);
  EXPECT_EQ(text.Pixel(5, 7), white);
  EXPECT_EQ(Canvas::TextWidth("", 2), 0);
  EXPECT_EQ(Canvas::TextWidth("AB", 1), 11);
  EXPECT_EQ(Canvas::TextWidth("AB", 2), 22);
}

TEST(CanvasTest, DashedLinesHaveGaps) {
  const Rgb white{255, 255, 255};
  const Rgb blue{0, 0, 255};
  Canvas canvas(40, 3, white);
  canvas.DrawDashedLine(0, 1, 39, 1, blue, 4, 3);
  for (int x = 0; x < 40; ++x) {
    EXPECT_EQ(canvas.Pixel(x, 1) == blue, x % 7 < 4) << x;
  }
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

size_t CountPixels(const Canvas& canvas, Rgb colour) {
  size_t n = 0;
  for (int y = 0; y < canvas.height(); ++y) {
    for (int x = 0; x < canvas.width(); ++x) n += canvas.Pixel(x, y) == colour;
  }
  return n;
}

TEST(LearningCurveTest, CsvHasTheHeaderAndEmptyCellsForMissingValues) {
  LearningCurve curve("t");
  curve.Add(Point(1));
  CurvePoint real_data = Point(2);
  real_data.truth_auc = CurvePoint::kNone;
  curve.Add(real_data);
  EXPECT_EQ(curve.Csv(),
            "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc\n"
            "1,1000,0.5,0.49,0.5,0.71,0.8\n"
            "2,2000,1,0.48,0.49,0.72,\n");
}

TEST(LearningCurveTest, PlotsTheSeriesInTheirColours) {
  const Rgb blue{31, 119, 180};
  const Rgb orange{255, 127, 14};
  const Rgb red{214, 39, 40};
  LearningCurve curve("CTR");
  // No points, and a single point, still plot.
  EXPECT_GT(CountPixels(curve.Plot(320, 240), Rgb{0, 0, 0}), 0u);
  curve.Add(Point(1));
  EXPECT_GT(CountPixels(curve.Plot(320, 240), blue), 0u);
  for (int64_t i = 2; i <= 10; ++i) curve.Add(Point(i));
  const Canvas canvas = curve.Plot(640, 480);
  // Lines beyond the legend's samples.
  EXPECT_GT(CountPixels(canvas, blue), 1000u);
  EXPECT_GT(CountPixels(canvas, orange), 500u);
  EXPECT_GT(CountPixels(canvas, red), 500u);

  // Without a truth AUC there is no red line.
  LearningCurve real("REAL DATA");
  for (int64_t i = 1; i <= 10; ++i) {
    CurvePoint p = Point(i);
    p.truth_auc = CurvePoint::kNone;
    if (i == 5) p.test_auc = CurvePoint::kNone;  // a gap in the line.
    real.Add(p);
  }
  EXPECT_EQ(CountPixels(real.Plot(640, 480), red), 0u);
}

TEST(LearningCurveTest, WritesCsvAndPng) {
  LearningCurve curve("CTR");
  for (int64_t i = 1; i <= 5; ++i) curve.Add(Point(i));
  const std::string dir = testing::TempDir();
  ASSERT_TRUE(curve.WriteCsv(dir + "/metrics_test_curve.csv").ok());
  ASSERT_TRUE(curve.WritePng(dir + "/metrics_test_curve.png", 400, 300).ok());
  std::ifstream csv(dir + "/metrics_test_curve.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header,
            "step,examples,seconds,train_loss,test_loss,test_auc,truth_auc");
  std::ifstream png_file(dir + "/metrics_test_curve.png", std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(png_file)),
                        std::istreambuf_iterator<char>());
  const DecodedPng decoded = DecodeStoredPng(png);
  EXPECT_EQ(decoded.width, 400u);
  EXPECT_EQ(decoded.height, 300u);
  EXPECT_EQ(decoded.rgb, curve.Plot(400, 300).rgb());
  std::remove((dir + "/metrics_test_curve.csv").c_str());
  std::remove((dir + "/metrics_test_curve.png").c_str());
}

}  // namespace
}  // namespace ctr
