#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pcrfs::metrics {
namespace {

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("plain /mnt/a b"), "plain /mnt/a b");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  Exposition e(Labels{{"mount", "/mnt/x\"y"}});
  e.Family("pcrfs_things_total", Exposition::Type::kCounter, "Things.\nWith a \\ line");
  e.Sample({{"op", "a\nb"}}, 3);
  EXPECT_EQ(e.text(),
            "# HELP pcrfs_things_total Things.\\nWith a \\\\ line\n"
            "# TYPE pcrfs_things_total counter\n"
            "pcrfs_things_total{mount=\"/mnt/x\\\"y\",op=\"a\\nb\"} 3\n");
}

TEST(MetricsTest, Names) {
  EXPECT_TRUE(IsValidMetricName("pcrfs_bytes_total"));
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(IsValidMetricName("9a"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("job"));
  EXPECT_TRUE(IsValidLabelName("_x1"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1a"));
  EXPECT_FALSE(IsValidLabelName(""));
}

TEST(MetricsTest, Values) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(12345678901234.0), "12345678901234");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(0.0 / 0.0), "NaN");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInf) {
  static constexpr double kBounds[] = {0.1, 1, 10};
  Histogram h(kBounds);
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0, 500.0}) h.Observe(v);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{2, 1, 1, 2}));
  EXPECT_DOUBLE_EQ(s.sum, 555.65);
  Exposition e(Labels{{"mount", "/m"}});
  e.Family("pcrfs_read_seconds", Exposition::Type::kHistogram, "Read time.");
  e.HistogramSample({{"op", "read"}}, s);
  EXPECT_EQ(e.text(),
            "# HELP pcrfs_read_seconds Read time.\n"
            "# TYPE pcrfs_read_seconds histogram\n"
            "pcrfs_read_seconds_bucket{mount=\"/m\",op=\"read\",le=\"0.1\"} 2\n"
            "pcrfs_read_seconds_bucket{mount=\"/m\",op=\"read\",le=\"1\"} 3\n"
            "pcrfs_read_seconds_bucket{mount=\"/m\",op=\"read\",le=\"10\"} 4\n"
            "pcrfs_read_seconds_bucket{mount=\"/m\",op=\"read\",le=\"+Inf\"} 6\n"
            "pcrfs_read_seconds_sum{mount=\"/m\",op=\"read\"} 555.65\n"
            "pcrfs_read_seconds_count{mount=\"/m\",op=\"read\"} 6\n");
}

TEST(MetricsTest, EachFamilyOnceAndNoLabelsWithoutBraces) {
  Exposition e;
  e.Gauge("pcrfs_g", "A gauge.", 1.5);
  e.Gauge("pcrfs_g", "Again.", 2);  // ignored: a family appears once
  e.Family("bad-name", Exposition::Type::kGauge, "Invalid.");
  e.Sample({}, 1);  // dropped with its family
  EXPECT_EQ(e.text(), "# HELP pcrfs_g A gauge.\n# TYPE pcrfs_g gauge\npcrfs_g 1.5\n");
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  Counter c;
  Histogram h(kLatencyBounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Add(2);
        h.Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 80000u);
  uint64_t n = 0;
  for (uint64_t k : h.snapshot().counts) n += k;
  EXPECT_EQ(n, 40000u);
  EXPECT_NEAR(h.snapshot().sum, 40.0, 1e-6);
}

}  // namespace
}  // namespace pcrfs::metrics
