// pcr verify STORE [--source DIR] [--jobs N]
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cstdio>

#include "builder/verifier.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"
#include "remote/url.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

int RunVerify(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr verify STORE [--source SRC] [--jobs N]\n\n"
      "Reads every piece of every record and checks its checksum, every record header and\n"
      "table, and every index entry against its record. With --source, also checks that\n"
      "every JPEG decodes at level 10 to the source's pixels, that every other file equals\n"
      "its source byte for byte, and that no source file is missing; SRC is any source pcr\n"
      "build takes (a folder, an archive, an archive URL, an s3:// or az:// prefix, reached\n"
      "as pcr build reaches it). STORE may be a URL\n"
      "(http://, https://, s3://; configured as for pcr cat): every record is then read by\n"
      "ranged GETs, and stray files are not looked for (that would need a LIST).\n\noptions");
  VerifyConfig config;
  opts.add_options()("help,h", "show this help")("source,s", po::value<std::string>(&config.source),
                                                 "compare with this source (as pcr build's SRC)")(
      "no-nested", "SRC is an archive built with pcr build --no-nested")(
      "jobs,j", po::value<unsigned>(&config.jobs)->default_value(0), "threads (0: all cores)");
  po::variables_map vm;
  if (auto exit = ParseCommandLine("verify", args, opts, {{"store", &config.store}},
                                   "0 all good, 1 a damaged store or damaged or differing files "
                                   "(listed), 2 bad arguments or no store",
                                   &vm)) {
    return *exit;
  }
  if (config.store.empty()) {
    std::fprintf(stderr, "pcr verify: STORE is required (see pcr verify --help)\n");
    return 2;
  }
  config.nested_archives = !vm.count("no-nested");
  if (IsRemoteUrl(config.source)) {
    auto remote = RemoteOptionsFromEnv();
    if (!remote) {
      std::fprintf(stderr, "pcr verify: %s\n", remote.error().message().c_str());
      return 2;
    }
    config.remote = std::move(*remote);
  }
  Result<VerifyReport> report = Err(Status::InvalidArgument(""));
  if (IsRemoteUrl(config.store)) {
    // Every record is read through ranged GETs (nothing is kept); the store's folder cannot be
    // listed, so stray files are not looked for.
    auto store = OpenStore(config.store);
    if (!store) {
      std::fprintf(stderr, "pcr verify: %s\n", store.error().message().c_str());
      return store.error().IsCorruption() ? 1 : 2;
    }
    report = VerifyOpenStore(config, std::move(*store), /*local=*/false);
  } else {
    report = VerifyStore(config);
  }
  if (!report) {
    std::fprintf(stderr, "pcr verify: %s\n", report.error().message().c_str());
    // A store too damaged to open (its index, or a manifest that disagrees with it) is a
    // problem found, not a bad argument.
    return report.error().IsCorruption() ? 1 : 2;
  }
  for (const VerifyFinding& f : report->findings) {
    std::printf("%-8s %s: %s\n", FindingKindName(f.kind), f.path.c_str(), f.reason.c_str());
  }
  std::printf("pcr verify: %s: %" PRIu64 " records, %" PRIu64 " files, %" PRIu64
              " folders, %" PRIu64 " pieces checked",
              ShownStore(config.store).c_str(), report->records, report->files, report->directories,
              report->pieces);
  if (!config.source.empty()) {
    std::printf("; %" PRIu64 " files compared with %s", report->compared, config.source.c_str());
  }
  std::printf("\n");
  if (!report->findings.empty()) {
    std::printf("pcr verify: %zu problems\n", report->findings.size());
    return 1;
  }
  std::printf("pcr verify: OK\n");
  return 0;
}

}  // namespace pcrfs::tools
