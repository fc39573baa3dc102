// The progress of `pcr build` and `pcr merge` on stderr: done/total, percent, rates and an ETA
// where the total is known (files of the store or shard, records of a merge, the quality
// sample), files and bytes so far and their rate where it is not (listing the source). On a
// terminal one line is redrawn in place; elsewhere (--progress into a log) one line is written
// per update. Updates are printed when the stage changes (after the last update of the stage
// before, if it was not printed: so a log shows how many files the listing found), when a stage
// completes, and otherwise at most once per `interval`.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "builder/builder.h"

namespace pcrfs::tools {

class ProgressLine {
 public:
  // `command`: "build" or "merge". `what`: the source or store, named in the listing line.
  ProgressLine(const char* command, std::string what, bool terminal, std::FILE* out = stderr,
               std::chrono::milliseconds interval = std::chrono::seconds(1));
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void Update(const BuildProgress& p);
  // Clears the redrawn line (a terminal); call before the report is printed.
  void Finish();

  // The text of one update, `seconds` into its stage (for tests and for Update).
  std::string Format(const BuildProgress& p, double seconds) const;

 private:
  using Clock = std::chrono::steady_clock;
  const char* command_;
  std::string what_;
  bool terminal_;
  std::FILE* out_;
  std::chrono::milliseconds interval_;
  bool any_ = false;
  BuildProgress::Stage stage_ = BuildProgress::Stage::kListing;
  Clock::time_point stage_start_;
  Clock::time_point last_print_;
  BuildProgress last_;        // the last update
  double last_seconds_ = 0;   // its time into its stage
  bool last_printed_ = true;  // whether it was printed

  void Print(const BuildProgress& p, double seconds);
};

// The progress of `pcr <command>` on `what`, into *line (and *update pointed at it): on a
// terminal unless `quiet`, elsewhere only when `forced` (--progress).
void StartProgressLine(const char* command, const std::string& what, bool quiet, bool forced,
                       std::optional<ProgressLine>* line, ProgressFn* update);

// "1:02:03" or "2:03" for a number of seconds.
std::string FormatDuration(double seconds);

}  // namespace pcrfs::tools
