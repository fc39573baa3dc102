// Counters and histograms cheap enough for every FUSE request, and the Prometheus text
// exposition format (version 0.0.4) that shows them and any other value read at scrape time.
//
// Hot path: Counter::Add and Histogram::Observe are relaxed atomic adds, no lock and no
// allocation; a Histogram's bucket is found by a scan of its (few) bounds. Snapshots read the
// atomics one by one, so a scrape during updates may see a count and a sum from slightly
// different moments (Prometheus tolerates that: the next scrape is consistent again).
//
// Exposition (https://prometheus.io/docs/instrumenting/exposition_formats/): every family is
// "# HELP", "# TYPE", then its samples, contiguous; label values escape \, " and line feed;
// a histogram's buckets are cumulative, end with le="+Inf", and are followed by _sum and _count.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pcrfs::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(std::string_view name);
// A label value as it stands between the quotes: \ -> \\, " -> \", line feed -> \n.
std::string EscapeLabelValue(std::string_view value);
// A sample value: integers without exponent or fraction ("1234"), "+Inf", "-Inf", "NaN",
// others with enough digits to round-trip.
std::string FormatValue(double v);

class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// A histogram with fixed upper bounds (increasing; +Inf is implicit).
class Histogram {
 public:
  // REQUIRES: bounds increasing, at most kMaxBounds of them; the span outlives the histogram.
  explicit Histogram(std::span<const double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket, NOT cumulative; one more than bounds (+Inf)
    double sum = 0;
  };
  Snapshot snapshot() const;

  static constexpr size_t kMaxBounds = 32;

 private:
  const std::span<const double> bounds_;
  std::atomic<uint64_t> counts_[kMaxBounds + 1] = {};
  std::atomic<double> sum_{0};
};

// Request latencies, in seconds: 50 us to 30 s.
inline constexpr double kLatencyBounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                            0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                            0.5,     1,      2.5,     5,      10,    30};

// Builds the text of one scrape. Every sample gets the common labels first, then its own.
class Exposition {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  explicit Exposition(Labels common = {});

  // Starts a family: its # HELP and # TYPE lines. A counter's name ends in "_total". Each name
  // once per exposition (a second Family of one name is ignored, and so are its samples).
  void Family(std::string_view name, Type type, std::string_view help);
  // A sample of the current family (a counter or gauge): `name` is the family's name.
  void Sample(const Labels& labels, double value);
  // The current family's histogram samples: _bucket (cumulative, le="+Inf" last), _sum, _count.
  void HistogramSample(const Labels& labels, const Histogram::Snapshot& h);

  // Shorthands: a family with one sample.
  void Counter(std::string_view name, std::string_view help, double value) {
    Family(name, Type::kCounter, help);
    Sample({}, value);
  }
  void Gauge(std::string_view name, std::string_view help, double value) {
    Family(name, Type::kGauge, help);
    Sample({}, value);
  }

  const std::string& text() const { return out_; }

 private:
  void Line(std::string_view name, const Labels& labels, std::string_view extra_name,
            std::string_view extra_value, double value);

  std::string common_;  // the common labels, formatted: `a="x",b="y"`
  std::string family_;  // the current family's name; empty: its samples are dropped
  std::set<std::string, std::less<>> seen_;
  std::string out_;
};

}  // namespace pcrfs::metrics
