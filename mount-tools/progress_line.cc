#include "mount-tools/progress_line.h"

#include <unistd.h>

#include <cinttypes>
#include <cmath>

#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// "12.5 files/s", or "-- files/s" before a rate can be told.
std::string Rate(double count, double seconds, const char* unit) {
  if (seconds <= 0) return std::string("-- ") + unit;
  return Fixed(count / seconds, 1) + " " + unit;
}

std::string ByteRate(uint64_t bytes, double seconds) {
  if (seconds <= 0) return "-- B/s";
  return HumanBytes(static_cast<uint64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}

}  // namespace

void StartProgressLine(const char* command, const std::string& what, bool quiet, bool forced,
                       std::optional<ProgressLine>* line, ProgressFn* update) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  if (quiet || !(tty || forced)) return;
  line->emplace(command, what, tty);
  *update = [line](const BuildProgress& p) { (*line)->Update(p); };
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<uint64_t>(seconds + 0.5);
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, s / 3600, s / 60 % 60,
                  s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 ":%02" PRIu64, s / 60, s % 60);
  }
  return buf;
}

ProgressLine::ProgressLine(const char* command, std::string what, bool terminal, std::FILE* out,
                           std::chrono::milliseconds interval)
    : command_(command),
      what_(std::move(what)),
      terminal_(terminal),
      out_(out),
      interval_(interval),
      stage_start_(Clock::now()),
      last_print_(Clock::now()) {}

std::string ProgressLine::Format(const BuildProgress& p, double secs) const {
  using Stage = BuildProgress::Stage;
  std::string line = std::string("pcr ") + command_ + ": ";
  if (p.stage == Stage::kListing) {
    // No total yet: what was found so far, and how fast.
    line += "listing " + what_ + ": " + std::to_string(p.done) + " files, " + HumanBytes(p.bytes) +
            " (" + Rate(static_cast<double>(p.done), secs, "files/s") + ", " +
            ByteRate(p.bytes, secs) + ")";
    return line;
  }
  const char* unit = p.stage == Stage::kRecords   ? "records"
                     : p.stage == Stage::kQuality ? "JPEGs"
                                                  : "files";
  if (p.stage == Stage::kQuality) line += "quality sample: ";
  line += std::to_string(p.done) + "/" + std::to_string(p.total) + " " + unit;
  if (p.total > 0) {
    line +=
        " (" + Fixed(100.0 * static_cast<double>(p.done) / static_cast<double>(p.total), 1) + "%)";
  }
  if (p.bytes_total > 0) line += ", " + HumanBytes(p.bytes) + " of " + HumanBytes(p.bytes_total);
  line += ", " + Rate(static_cast<double>(p.done), secs, (std::string(unit) + "/s").c_str());
  if (p.bytes_total > 0) line += ", " + ByteRate(p.bytes, secs);
  // The ETA by bytes where they are known (files differ in size), else by count.
  double eta = -1;
  if (p.done >= p.total && p.bytes >= p.bytes_total) {
    eta = 0;
  } else if (p.bytes_total > 0 && p.bytes > 0 && secs > 0) {
    eta = secs * static_cast<double>(p.bytes_total - std::min(p.bytes, p.bytes_total)) /
          static_cast<double>(p.bytes);
  } else if (p.done > 0 && secs > 0) {
    eta = secs * static_cast<double>(p.total - std::min(p.done, p.total)) /
          static_cast<double>(p.done);
  }
  line += ", ETA " + FormatDuration(eta);
  return line;
}

void ProgressLine::Update(const BuildProgress& p) {
  const Clock::time_point now = Clock::now();
  const bool new_stage = !any_ || p.stage != stage_;
  if (new_stage) {
    if (any_ && !last_printed_) Print(last_, last_seconds_);
    stage_ = p.stage;
    stage_start_ = now;
  }
  last_ = p;
  last_seconds_ = std::chrono::duration<double>(now - stage_start_).count();
  last_printed_ = false;
  const bool complete = p.stage != BuildProgress::Stage::kListing && p.done >= p.total;
  if (!new_stage && !complete && now - last_print_ < interval_) return;
  last_print_ = now;
  Print(p, last_seconds_);
}

void ProgressLine::Print(const BuildProgress& p, double seconds) {
  any_ = true;
  last_printed_ = true;  // p is the last update, or the one before a new stage's first
  const std::string line = Format(p, seconds);
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K", line.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressLine::Finish() {
  if (terminal_ && any_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
  }
}

}  // namespace pcrfs::tools
