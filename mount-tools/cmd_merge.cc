// pcr merge PART... STORE
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>

#include "builder/builder.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"
#include "mount-tools/progress_line.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

int RunMerge(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr merge PART... STORE [options]\n\n"
      "Joins the N parts written by `pcr build SRC PART --shard I/N` (I = 0..N-1, in any order)\n"
      "into STORE, byte-identical to `pcr build SRC STORE` with the same options. The source is\n"
      "not needed. Parts of different sources, options or N, a missing or repeated shard and a\n"
      "damaged part are refused.\n\noptions");
  MergeConfig config;
  opts.add_options()("help,h", "show this help")(
      "threads,j", po::value<unsigned>(&config.threads)->default_value(0),
      "threads measuring the quality sample (0: all cores)")(
      "force", po::bool_switch(&config.force), "replace STORE if it is an existing store")(
      "progress", "print progress to stderr even when it is not a terminal (a line a second)")(
      "quiet,q", "no progress (by default it is shown when stderr is a terminal)");
  std::vector<std::string> paths;
  po::variables_map vm;
  if (auto exit = ParseCommandLine(
          "merge", args, opts, {},
          "0 done, 1 failed (no store written; a damaged record is named),\n"
          "            2 bad arguments or a wrong set of parts, 3 store written but some\n"
          "            source entries could not be stored, 4 another writer holds STORE",
          &vm, &paths)) {
    return *exit;
  }
  if (paths.size() < 2) {
    std::fprintf(stderr, "pcr merge: PART... and STORE are required (see pcr merge --help)\n");
    return kExitUsage;
  }
  config.store = paths.back();
  paths.pop_back();
  config.parts = std::move(paths);
  for (Status s : {CheckMergeParts(config), CheckStoreTarget(config.store, config.force)}) {
    if (!s.ok()) {
      std::fprintf(stderr, "pcr merge: %s\n", s.message().c_str());
      return kExitUsage;
    }
  }
  auto lock = StoreWriterLock::Acquire(config.store, "merge");
  if (!lock) {
    std::fprintf(stderr, "pcr merge: %s\n", lock.error().message().c_str());
    return lock.error().code() == Status::Code::kAlreadyExists ? kExitBusy : kExitFailed;
  }
  if (Status s = CheckStoreTarget(config.store, config.force); !s.ok()) {
    std::fprintf(stderr, "pcr merge: %s\n", s.message().c_str());
    return kExitUsage;
  }
  std::optional<ProgressLine> progress;
  StartProgressLine("merge", config.store, vm.count("quiet") > 0, vm.count("progress") > 0,
                    &progress, &config.progress);
  auto report = MergeLocked(config, *lock);
  if (progress) progress->Finish();
  if (!report) {
    std::fprintf(stderr, "pcr merge: %s\n", report.error().message().c_str());
    std::fprintf(stderr, "pcr merge: no store was written\n");
    return kExitFailed;
  }
  PrintReport(*report, config.store, "merge");
  if (!report->problems.empty()) {
    std::fprintf(stderr, "pcr merge: %zu source entries could not be stored (listed above)\n",
                 report->problems.size());
    return kExitProblems;
  }
  return kExitOk;
}

}  // namespace pcrfs::tools
