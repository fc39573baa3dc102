// pcr merge PART... STORE
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>

#include "builder/builder.h"
#include "builder/object_target.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"
#include "mount-tools/progress_line.h"
#include "remote/azure.h"
#include "remote/url.h"

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
  const std::string shown_store = config.store;
  // Into object storage (builder/object_target.h): parts there too, their records copied on
  // the server; the draft (index, manifest) is local, in the store URL's cache folder.
  std::unique_ptr<ObjectTarget> target;
  const bool remote_parts = std::any_of(config.parts.begin(), config.parts.end(),
                                        [](const std::string& p) { return IsOutputUrl(p); });
  if (IsOutputUrl(config.store) || remote_parts) {
    Status s;
    auto remote = RemoteOptionsFromEnv();
    if (!remote) s = remote.error();
    if (s.ok() && !IsOutputUrl(config.store)) {
      s = Status::InvalidArgument(config.store +
                                  ": parts in object storage merge into object storage only "
                                  "(give an s3:// STORE)");
    }
    for (const std::string& p : config.parts) {
      if (s.ok() && !IsOutputUrl(p)) {
        s = Status::InvalidArgument(p + ": a local part cannot be merged into " +
                                    RedactUrl(config.store) + " (upload it, or merge locally)");
      } else if (s.ok() && IsAzureUrl(p) != IsAzureUrl(config.store)) {
        s = Status::InvalidArgument(RedactUrl(p) + ": cannot be merged into " +
                                    RedactUrl(config.store) +
                                    " (another service: records are copied on the server)");
      }
    }
    if (s.ok()) {
      auto opened = ObjectTarget::Open(config.store, *remote);
      if (opened) {
        target = std::move(*opened);
      } else {
        s = opened.error();
      }
    }
    if (s.ok()) {
      s = FetchRemoteParts(config.parts, *remote, target->local_store() + ".parts", &config);
    }
    if (!s.ok()) {
      std::fprintf(stderr, "pcr merge: %s\n", s.message().c_str());
      return kExitUsage;
    }
    config.store = target->local_store();
    config.target = target.get();
  }
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
  if (target != nullptr) {
    if (Status s = target->CheckAndClear(config.force, /*resume=*/false); !s.ok()) {
      std::fprintf(stderr, "pcr merge: %s\n", s.message().c_str());
      return s.code() == Status::Code::kAlreadyExists || s.code() == Status::Code::kInvalidArgument
                 ? kExitUsage
                 : kExitFailed;
    }
  }
  std::optional<ProgressLine> progress;
  StartProgressLine("merge", shown_store, vm.count("quiet") > 0, vm.count("progress") > 0,
                    &progress, &config.progress);
  auto report = MergeLocked(config, *lock);
  if (progress) progress->Finish();
  if (!report) {
    std::fprintf(stderr, "pcr merge: %s\n", report.error().message().c_str());
    std::fprintf(stderr, "pcr merge: no store was written\n");
    return kExitFailed;
  }
  PrintReport(*report, shown_store, "merge");
  if (!report->problems.empty()) {
    std::fprintf(stderr, "pcr merge: %zu source entries could not be stored (listed above)\n",
                 report->problems.size());
    return kExitProblems;
  }
  return kExitOk;
}

}  // namespace pcrfs::tools
