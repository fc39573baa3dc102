#include "common/metrics.h"

#include <charconv>
#include <cmath>

namespace pcrfs::metrics {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// HELP text escapes \ and line feed (not the double quote).
std::string EscapeHelp(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void AppendLabels(const Labels& labels, std::string* out) {
  for (const auto& [name, value] : labels) {
    if (!out->empty()) out->push_back(',');
    *out += name;
    *out += "=\"";
    *out += EscapeLabelValue(value);
    out->push_back('"');
  }
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsAlpha(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c) && c != ':') return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || !IsAlpha(name[0]) || name.substr(0, 2) == "__") return false;
  for (char c : name) {
    if (!IsAlpha(c) && !IsDigit(c)) return false;
  }
  return true;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {  // 2^53: exact
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds.size() <= kMaxBounds ? bounds : bounds.first(kMaxBounds)) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds.assign(bounds_.begin(), bounds_.end());
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i < s.counts.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

Exposition::Exposition(Labels common) { AppendLabels(common, &common_); }

void Exposition::Family(std::string_view name, Type type, std::string_view help) {
  if (!IsValidMetricName(name) || !seen_.emplace(name).second) {
    family_.clear();
    return;
  }
  family_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += type == Type::kCounter ? " counter\n"
          : type == Type::kGauge ? " gauge\n"
                                 : " histogram\n";
}

void Exposition::Line(std::string_view name, const Labels& labels, std::string_view extra_name,
                      std::string_view extra_value, double value) {
  std::string l = common_;
  AppendLabels(labels, &l);
  if (!extra_name.empty()) AppendLabels({{std::string(extra_name), std::string(extra_value)}}, &l);
  out_ += family_;
  out_ += name;
  if (!l.empty()) {
    out_ += '{';
    out_ += l;
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void Exposition::Sample(const Labels& labels, double value) {
  if (family_.empty()) return;
  Line("", labels, "", "", value);
}

void Exposition::HistogramSample(const Labels& labels, const Histogram::Snapshot& h) {
  if (family_.empty()) return;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf";
    Line("_bucket", labels, "le", le, static_cast<double>(cumulative));
  }
  Line("_sum", labels, "", "", h.sum);
  Line("_count", labels, "", "", static_cast<double>(cumulative));
}

}  // namespace pcrfs::metrics
