#include <gtest/gtest.h>

#include "metrics/metrics.h"
#include "metrics/progress_log.h"

namespace ps {
namespace metrics {
namespace {

TEST(MetricsTest, CountersRenderWithHelpTypeAndConstantLabels) {
  Registry r;
  r.GetCounter("ember_x_total", "Xs", Label("op", "push"))->Add(3);
  EXPECT_EQ(r.GetCounter("ember_x_total", "Xs", Label("op", "push")),
            r.GetCounter("ember_x_total", "Xs", Label("op", "push")));
  r.set_const_labels([] { return Label("role", "server"); });
  const std::string text = r.Text();
  EXPECT_NE(text.find("# HELP ember_x_total Xs\n# TYPE ember_x_total counter\n"
                      "ember_x_total{role=\"server\",op=\"push\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ember_resident_memory_bytes{role=\"server\"} "),
            std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeInSeconds) {
  Registry r;
  Histogram* h = r.GetHistogram("ember_h_seconds", "H");
  h->ObserveUs(10);        // <= 50 us
  h->ObserveUs(700);       // <= 1 ms
  h->ObserveUs(2000000);   // <= 2.5 s
  h->ObserveUs(99000000);  // +Inf
  const std::string text = r.Text();
  EXPECT_NE(text.find("# TYPE ember_h_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("ember_h_seconds_bucket{le=\"5e-05\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ember_h_seconds_bucket{le=\"0.001\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("ember_h_seconds_bucket{le=\"2.5\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("ember_h_seconds_bucket{le=\"+Inf\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("ember_h_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(text.find("ember_h_seconds_sum 101.00071\n"), std::string::npos)
      << text;
}

TEST(MetricsTest, CollectorsRunAtEachScrapeUntilRemoved) {
  Registry r;
  int calls = 0;
  int id = r.AddCollector([&calls](Writer* w) {
    ++calls;
    w->Gauge("ember_g", "G", Label("t", "a\"b\\c"), calls);
  });
  EXPECT_NE(r.Text().find("ember_g{t=\"a\\\"b\\\\c\"} 1\n"), std::string::npos);
  EXPECT_EQ(Registry::Sum(r.Collect(), "ember_g"), 2);
  r.RemoveCollector(id);
  EXPECT_EQ(r.Text().find("ember_g"), std::string::npos);
  EXPECT_EQ(calls, 2);
}

TEST(MetricsTest, OneFamilyKeepsItsSamplesTogether) {
  Writer w;
  w.Counter("ember_a_total", "A", Label("k", "1"), 1);
  w.Counter("ember_b_total", "B", "", 2);
  w.Counter("ember_a_total", "A", Label("k", "2"), 3);
  EXPECT_EQ(w.Text(""),
            "# HELP ember_a_total A\n# TYPE ember_a_total counter\n"
            "ember_a_total{k=\"1\"} 1\nember_a_total{k=\"2\"} 3\n"
            "# HELP ember_b_total B\n# TYPE ember_b_total counter\n"
            "ember_b_total 2\n");
}

TEST(ProgressLogTest, LineHasTotalsAndRates) {
  ProgressLog::Totals before, now;
  now.requests = 300;
  now.keys = 3000;
  before.requests = 100;
  const std::string line = ProgressLog::Line("server 0 (id 8)", now, before, 2);
  EXPECT_NE(line.find("progress server 0 (id 8): 300 requests (100.0/s), "
                      "3000 keys (1500.0/s)"),
            std::string::npos)
      << line;
}

TEST(MetricsTest, ResidentMemoryIsRead) { EXPECT_GT(ResidentBytes(), 0); }

}  // namespace
}  // namespace metrics
}  // namespace ps
