#include "ctr/metrics.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "ctr/png.h"

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

// --------------------------------------------------------------- plot --

const Rgb kWhite{255, 255, 255};
const Rgb kBlack{0, 0, 0};
const Rgb kText{40, 40, 40};
const Rgb kGrid{228, 228, 228};
const Rgb kFrame{150, 150, 150};
const Rgb kBlue{31, 119, 180};
const Rgb kOrange{255, 127, 14};
const Rgb kRed{214, 39, 40};

// An axis range and its ticks at multiples of 1, 2 or 5 x 10^k.
struct Axis {
  double low = 0;
  double high = 1;
  double step = 0.2;
};

double TickStep(double span, int target_ticks) {
  const double raw = span / target_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

// The nice axis around [low, high]: padded by `pad` of the span, widened
// when empty, ends rounded out to ticks.
Axis MakeAxis(double low, double high, double pad, int target_ticks) {
  if (!(low <= high)) {  // no finite values.
    low = 0;
    high = 1;
  }
  double span = high - low;
  if (span <= 1e-12 * std::max(std::abs(low), 1.0)) {
    span = std::max(std::abs(low) * 0.02, 0.01);
    low -= span / 2;
    high += span / 2;
  }
  low -= pad * span;
  high += pad * span;
  Axis axis;
  axis.step = TickStep(high - low, target_ticks);
  axis.low = std::floor(low / axis.step + 1e-9) * axis.step;
  axis.high = std::ceil(high / axis.step - 1e-9) * axis.step;
  return axis;
}

// Tick label with as many decimals as the step needs.
std::string DecimalLabel(double v, double step) {
  const int decimals =
      std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals,
                std::abs(v) < step * 1e-6 ? 0.0 : v);
  return buffer;
}

// Example counts as 0, 500K, 1.5M, 2B.
std::string CountLabel(double v, double step) {
  struct Unit {
    double size;
    const char* suffix;
  };
  for (const Unit& unit : {Unit{1e9, "B"}, Unit{1e6, "M"}, Unit{1e3, "K"}}) {
    if (step >= unit.size / 10 && std::abs(v) >= unit.size) {
      return DecimalLabel(v / unit.size, step / unit.size) + unit.suffix;
    }
  }
  return DecimalLabel(v, std::max(step, 1.0));
}

// A plot panel: a rectangle of the canvas mapped to data coordinates.
class Panel {
 public:
  Panel(Canvas* canvas, int left, int top, int right, int bottom, Axis x,
        Axis y)
      : canvas_(canvas),
        left_(left),
        top_(top),
        right_(right),
        bottom_(bottom),
        x_(x),
        y_(y) {}

  int X(double v) const {
    return left_ + static_cast<int>(std::lround(
                       (v - x_.low) / (x_.high - x_.low) * (right_ - left_)));
  }
  int Y(double v) const {
    return bottom_ - static_cast<int>(std::lround(
                         (v - y_.low) / (y_.high - y_.low) * (bottom_ - top_)));
  }

  // Grid, frame, ticks and tick labels; `name` above the top left corner.
  void DrawAxes(const std::string& name, bool count_labels_x) const {
    constexpr int kScale = 2;
    constexpr int kTick = 6;
    const int text_height = Canvas::kGlyphHeight * kScale;
    for (int i = 0;; ++i) {
      const double v = x_.low + i * x_.step;
      if (v > x_.high + x_.step * 1e-6) break;
      const int x = X(v);
      canvas_->DrawLine(x, top_, x, bottom_, kGrid);
      canvas_->DrawLine(x, bottom_, x, bottom_ + kTick, kBlack);
      const std::string label =
          count_labels_x ? CountLabel(v, x_.step) : DecimalLabel(v, x_.step);
      canvas_->DrawText(x - Canvas::TextWidth(label, kScale) / 2,
                        bottom_ + kTick + 4, label, kText, kScale);
    }
    for (int i = 0;; ++i) {
      const double v = y_.low + i * y_.step;
      if (v > y_.high + y_.step * 1e-6) break;
      const int y = Y(v);
      canvas_->DrawLine(left_, y, right_, y, kGrid);
      canvas_->DrawLine(left_ - kTick, y, left_, y, kBlack);
      const std::string label = DecimalLabel(v, y_.step);
      canvas_->DrawText(left_ - kTick - 4 - Canvas::TextWidth(label, kScale),
                        y - text_height / 2, label, kText, kScale);
    }
    canvas_->DrawLine(left_, top_, right_, top_, kFrame);
    canvas_->DrawLine(right_, top_, right_, bottom_, kFrame);
    canvas_->DrawLine(left_, top_, left_, bottom_, kBlack);
    canvas_->DrawLine(left_, bottom_, right_, bottom_, kBlack);
    canvas_->DrawText(left_, top_ - text_height - 6, name, kBlack, kScale);
  }

  // A polyline through the finite (x, y) points, broken at NaNs, with a
  // square marker at each point.
  void DrawSeries(const std::vector<std::pair<double, double>>& points,
                  Rgb colour) const {
    bool have_previous = false;
    int px = 0;
    int py = 0;
    for (const auto& [vx, vy] : points) {
      if (!std::isfinite(vx) || !std::isfinite(vy)) {
        have_previous = false;
        continue;
      }
      const int x = X(vx);
      const int y = Y(vy);
      if (have_previous) canvas_->DrawLine(px, py, x, y, colour, 2);
      canvas_->FillRect(x - 2, y - 2, x + 3, y + 3, colour);
      px = x;
      py = y;
      have_previous = true;
    }
  }

  void DrawHorizontal(double v, Rgb colour) const {
    canvas_->DrawDashedLine(left_, Y(v), right_, Y(v), colour, 10, 6, 2);
  }

  // A boxed legend in a corner of the panel (top right if `top`, else
  // bottom right): a line sample and a label per entry.
  struct Entry {
    std::string label;
    Rgb colour;
    bool dashed;
  };
  void DrawLegend(const std::vector<Entry>& entries, bool top) const {
    constexpr int kScale = 2;
    constexpr int kSample = 28;
    constexpr int kPad = 8;
    const int row = Canvas::kGlyphHeight * kScale + 8;
    int text_width = 0;
    for (const Entry& e : entries) {
      text_width = std::max(text_width, Canvas::TextWidth(e.label, kScale));
    }
    const int width = kPad + kSample + kPad + text_width + kPad;
    const int height = kPad + row * static_cast<int>(entries.size()) - 8 + kPad;
    const int x0 = right_ - 10 - width;
    const int y0 = top ? top_ + 10 : bottom_ - 10 - height;
    canvas_->FillRect(x0, y0, x0 + width, y0 + height, kWhite);
    canvas_->DrawLine(x0, y0, x0 + width, y0, kFrame);
    canvas_->DrawLine(x0, y0 + height, x0 + width, y0 + height, kFrame);
    canvas_->DrawLine(x0, y0, x0, y0 + height, kFrame);
    canvas_->DrawLine(x0 + width, y0, x0 + width, y0 + height, kFrame);
    int y = y0 + kPad;
    for (const Entry& e : entries) {
      const int mid = y + Canvas::kGlyphHeight * kScale / 2;
      if (e.dashed) {
        canvas_->DrawDashedLine(x0 + kPad, mid, x0 + kPad + kSample, mid,
                                e.colour, 10, 6, 2);
      } else {
        canvas_->DrawLine(x0 + kPad, mid, x0 + kPad + kSample, mid, e.colour,
                          2);
      }
      canvas_->DrawText(x0 + kPad + kSample + kPad, y, e.label, kText, kScale);
      y += row;
    }
  }

 private:
  Canvas* const canvas_;  // borrowed for the panel's lifetime.
  const int left_, top_, right_, bottom_;
  const Axis x_, y_;
};

// The range of the finite values among `series`; low > high if none.
std::pair<double, double> FiniteRange(
    const std::vector<const std::vector<double>*>& series) {
  double low = std::numeric_limits<double>::infinity();
  double high = -low;
  for (const auto* values : series) {
    for (double v : *values) {
      if (!std::isfinite(v)) continue;
      low = std::min(low, v);
      high = std::max(high, v);
    }
  }
  return {low, high};
}

// 3 significant digits and a unit: 950, 12.5K, 4M.
std::string ShortCount(double v) {
  struct Unit {
    double size;
    const char* suffix;
  };
  for (const Unit& unit : {Unit{1e9, "B"}, Unit{1e6, "M"}, Unit{1e3, "K"}}) {
    if (std::abs(v) >= unit.size) {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%.3g%s", v / unit.size,
                    unit.suffix);
      return buffer;
    }
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.0f", v);
  return buffer;
}

std::string Fixed(double v, int decimals) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, v);
  return buffer;
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

LearningCurve::LearningCurve(std::string title) : title_(std::move(title)) {}

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

Canvas LearningCurve::Plot(int width, int height) const {
  CHECK(width >= 320 && height >= 240 && width <= 4096 && height <= 4096)
      << width << "x" << height;
  Canvas canvas(width, height, kWhite);

  std::vector<double> examples, train_loss, test_loss, test_auc, truth_auc;
  for (const CurvePoint& p : points_) {
    examples.push_back(static_cast<double>(p.examples));
    train_loss.push_back(p.train_loss);
    test_loss.push_back(p.test_loss);
    test_auc.push_back(p.test_auc);
    truth_auc.push_back(p.truth_auc);
  }
  const auto zip = [&examples](const std::vector<double>& y) {
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < y.size(); ++i)
      points.emplace_back(examples[i], y[i]);
    return points;
  };

  // Title, and a summary of the latest point.
  canvas.DrawText(16, 12, title_, kBlack, 2);
  std::string summary = "NO POINTS YET";
  if (!points_.empty()) {
    const CurvePoint& last = points_.back();
    summary = ShortCount(static_cast<double>(last.examples)) + " EXAMPLES IN " +
              Fixed(last.seconds, 1) + " S";
    if (std::isfinite(last.test_auc)) {
      summary += "   TEST AUC " + Fixed(last.test_auc, 4);
    }
    if (std::isfinite(last.truth_auc)) {
      summary += "   TRUTH AUC " + Fixed(last.truth_auc, 4);
    }
    if (std::isfinite(last.test_loss)) {
      summary += "   TEST LOSS " + Fixed(last.test_loss, 4);
    }
  }
  canvas.DrawText(16, 36, summary, kText, 1);

  const int left = 96;
  const int right = width - 24;
  const int top = 84;
  const int bottom = height - 64;
  const int gap = 72;
  const int panel_height = (bottom - top - gap) / 2;

  const auto [x_low, x_high] = FiniteRange({&examples});
  const Axis x_axis =
      MakeAxis(0, x_low <= x_high ? std::max(x_high, 1.0) : 1.0, 0, 6);

  // AUC.
  const auto [auc_low, auc_high] = FiniteRange({&test_auc, &truth_auc});
  const Panel auc(&canvas, left, top, right, top + panel_height, x_axis,
                  MakeAxis(auc_low, auc_high, 0.08, 5));
  auc.DrawAxes("AUC", true);
  double truth_low = std::numeric_limits<double>::infinity();
  double truth_high = -truth_low;
  for (double v : truth_auc) {
    if (!std::isfinite(v)) continue;
    truth_low = std::min(truth_low, v);
    truth_high = std::max(truth_high, v);
  }
  std::vector<Panel::Entry> auc_legend = {{"TEST AUC", kBlue, false}};
  if (truth_low <= truth_high) {
    if (truth_low == truth_high) {
      auc.DrawHorizontal(truth_low, kRed);
    } else {
      auc.DrawSeries(zip(truth_auc), kRed);
    }
    auc_legend.push_back({"TRUTH AUC", kRed, true});
  }
  auc.DrawSeries(zip(test_auc), kBlue);
  auc.DrawLegend(auc_legend, false);

  // Loss.
  const auto [loss_low, loss_high] = FiniteRange({&train_loss, &test_loss});
  const Panel loss(&canvas, left, bottom - panel_height, right, bottom, x_axis,
                   MakeAxis(loss_low, loss_high, 0.08, 5));
  loss.DrawAxes("LOG LOSS", true);
  loss.DrawSeries(zip(train_loss), kOrange);
  loss.DrawSeries(zip(test_loss), kBlue);
  loss.DrawLegend({{"TRAIN LOSS", kOrange, false}, {"TEST LOSS", kBlue, false}},
                  true);

  const std::string x_name = "TRAINING EXAMPLES";
  canvas.DrawText((left + right - Canvas::TextWidth(x_name, 2)) / 2,
                  height - 22, x_name, kBlack, 2);
  return canvas;
}

ps::Status LearningCurve::WriteCsv(const std::string& path) const {
  return WriteFileAtomically(path, Csv());
}

ps::Status LearningCurve::WritePng(const std::string& path, int width,
                                   int height) const {
  const Canvas canvas = Plot(width, height);
  return WriteFileAtomically(
      path, EncodePng(canvas.width(), canvas.height(), canvas.rgb()));
}

}  // namespace ctr
