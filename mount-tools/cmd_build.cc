// pcr build SRC STORE
#include <sys/stat.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>

#include "builder/builder.h"
#include "builder/object_target.h"
#include "builder/quality_window.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"
#include "mount-tools/progress_line.h"
#include "remote/url.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

namespace {

void PrintShardReport(const BuildReport& r, const std::string& part, const ShardSpec& shard) {
  const std::string records =
      r.record_end > r.record_begin
          ? "records " + std::to_string(r.record_begin) + ".." + std::to_string(r.record_end - 1)
          : std::string("no records");
  std::printf("pcr build: %s: shard %u/%u: %s of %u (%" PRIu64 " of %" PRIu64 " files) in %.1f s",
              part.c_str(), shard.index, shard.count, records.c_str(), r.num_records, r.shard_files,
              r.files_total, r.seconds);
  if (r.records_reused) std::printf(", %" PRIu64 " records kept", r.records_reused);
  std::printf("\n  merge all %u parts with: pcr merge PART... STORE\n", shard.count);
  for (const auto& n : r.passthrough_notes) {
    std::printf("    %s: %s%s%s\n", n.rel_path.c_str(), n.reason.c_str(),
                n.detail.empty() ? "" : ": ", n.detail.c_str());
  }
  for (const auto& c : r.changed) {
    std::printf("    %s: %s: %s\n", c.rel_path.c_str(), c.reason.c_str(), c.detail.c_str());
  }
  for (const auto& p : r.problems) {
    std::printf("    NOT STORED %s: %s%s%s\n", p.rel_path.c_str(), p.reason.c_str(),
                p.detail.empty() ? "" : ": ", p.detail.c_str());
  }
}

}  // namespace

void PrintReport(const BuildReport& r, const std::string& store, const char* command) {
  const index::Manifest& m = r.manifest;
  std::printf("pcr %s: %s: %" PRIu64 " files, %" PRIu64 " directories in %.1f s (%.1f files/s)\n",
              command, store.c_str(), m.num_jpeg + m.num_passthrough, m.num_directories, r.seconds,
              r.seconds > 0 ? static_cast<double>(r.files_total) / r.seconds : 0.0);
  std::printf("  JPEGs transcoded     %" PRIu64 "\n", m.num_jpeg);
  std::printf("  passthrough files    %" PRIu64 "\n", m.num_passthrough);
  for (const auto& [reason, count] : m.passthrough_by_reason) {
    std::printf("    %-18s %" PRIu64 "\n", reason.c_str(), count);
  }
  std::printf("  records              %u", m.num_records);
  if (r.records_reused)
    std::printf(" (%" PRIu64 " kept from the interrupted build)", r.records_reused);
  std::printf("\n  source bytes         %" PRIu64 " (%s)\n", m.source_bytes,
              HumanBytes(m.source_bytes).c_str());
  std::printf("\n  level        bytes   %% of source   JPEGs: %% of source JPEG bytes\n");
  for (int k = 1; k <= 10; ++k) {
    const double all = m.source_bytes ? 100.0 * m.level_bytes[k - 1] / m.source_bytes : 0;
    const double jpg =
        m.source_jpeg_bytes ? 100.0 * m.jpeg_level_bytes[k - 1] / m.source_jpeg_bytes : 0;
    std::printf("  %5d %12s   %9.1f%%   %9.1f%%\n", k, HumanBytes(m.level_bytes[k - 1]).c_str(),
                all, jpg);
  }
  if (m.quality.measured > 0) {
    std::printf(
        "\n  fidelity against level 10 over %u sampled JPEGs (pcr inspect shows more;\n"
        "  a JPEG larger than %dx%d is measured on its centred %dx%d window):\n",
        m.quality.measured, kQualityWindowSide, kQualityWindowSide, kQualityWindowSide,
        kQualityWindowSide);
    std::printf("  level   mean PSNR   5th pct MS-SSIM\n");
    for (int k = 1; k < 10; ++k) {
      const index::LevelQuality& q = m.quality.levels[k - 1];
      std::printf("  %5d %9.2f dB %14.4f\n", k, q.mean_psnr, q.p5_msssim);
    }
  }
  if (!r.passthrough_notes.empty()) {
    std::printf("\n  JPEG-like files stored byte for byte (served unchanged at every level):\n");
    for (const auto& n : r.passthrough_notes) {
      std::printf("    %s: %s%s%s\n", n.rel_path.c_str(), n.reason.c_str(),
                  n.detail.empty() ? "" : ": ", n.detail.c_str());
    }
  }
  if (!r.changed.empty()) {
    std::printf("\n  changed while the build ran (stored as read):\n");
    for (const auto& c : r.changed) {
      std::printf("    %s: %s: %s\n", c.rel_path.c_str(), c.reason.c_str(), c.detail.c_str());
    }
  }
  if (!r.problems.empty()) {
    std::printf("\n  NOT STORED (%zu source entries could not be read):\n", r.problems.size());
    for (const auto& p : r.problems) {
      std::printf("    %s: %s%s%s\n", p.rel_path.c_str(), p.reason.c_str(),
                  p.detail.empty() ? "" : ": ", p.detail.c_str());
    }
  }
}

namespace {

// The options of pcr build, stored into *config.
po::options_description BuildOptions(BuildConfig* config) {
  po::options_description opts(
      "usage: pcr build SRC STORE [options]\n\n"
      "Turns the image folder or archive SRC into the pcrfs store STORE. Every JPEG is losslessly\n"
      "re-encoded as a progressive JPEG in 10 scan groups; every other file is kept byte for\n"
      "byte. SRC is never modified. SRC may be a URL: s3://BUCKET/PREFIX (the objects under it),\n"
      "or an archive at an http(s):// or s3:// URL, reached as pcr cat reaches a remote store\n"
      "(AWS_* for S3, PCRFS_HEADER_FILE, PCRFS_CA_FILE, PCRFS_REMOTE_TIMEOUT).\n\noptions");
  opts.add_options()("help,h", "show this help")(
      "threads,j", po::value<unsigned>(&config->threads)->default_value(0),
      "transcoding threads (0: all cores)")(
      "images-per-record", po::value<uint32_t>(&config->images_per_record)->default_value(1024),
      "files per record")("force", po::bool_switch(&config->force),
                          "replace STORE if it is an existing store")(
      "resume", po::bool_switch(&config->resume),
      "continue an interrupted build (STORE.partial), keeping its complete records")(
      "strip-metadata", po::bool_switch(&config->strip_metadata),
      "drop APPn and COM markers (EXIF, ICC, XMP, comments) from transcoded JPEGs")(
      "max-scans", po::value<int>(&config->max_input_scans)->default_value(1000),
      "store JPEGs with more scans than this byte for byte")(
      "max-image-memory", po::value<uint64_t>(&config->max_image_memory)->default_value(1ull << 30),
      "libjpeg memory cap per image, bytes")(
      "max-jpeg-bytes", po::value<uint64_t>(&config->max_jpeg_bytes)->default_value(256ull << 20),
      "store JPEG files larger than this byte for byte")(
      "quality-sample", po::value<uint32_t>(&config->quality_sample)->default_value(100),
      "JPEGs whose PSNR and MS-SSIM at every level go into the manifest (0: none)")(
      "quality-seed", po::value<uint64_t>(&config->quality_seed)->default_value(0),
      "seed that chooses the quality sample")(
      "no-nested", "SRC is an archive: keep archives inside it as files, not folders")(
      "shard", po::value<std::string>(),
      "I/N: write only shard I (0..N-1) of N into the part folder STORE; join the N parts with "
      "pcr merge")("progress",
                   "print progress to stderr even when it is not a terminal (a line a second)")(
      "quiet,q", "no progress (by default it is shown when stderr is a terminal)");
  return opts;
}

// The remote access options of a URL source and the shard from --shard; an exit code for a bad
// one.
std::optional<int> ConfigureSource(const po::variables_map& vm, BuildConfig* config) {
  if (IsRemoteUrl(config->source)) {
    auto remote = RemoteOptionsFromEnv();
    if (!remote) {
      std::fprintf(stderr, "pcr build: %s\n", remote.error().message().c_str());
      return kExitUsage;
    }
    config->remote = std::move(*remote);
  }
  if (vm.count("shard")) {
    auto shard = ParseShardSpec(vm["shard"].as<std::string>());
    if (!shard) {
      std::fprintf(stderr, "pcr build: %s\n", shard.error().message().c_str());
      return kExitUsage;
    }
    config->shard = *shard;
  }
  return std::nullopt;
}

// The exit code of a build that failed with `e`.
int FailedBuildExit(const Status& e, const std::string& store) {
  std::fprintf(stderr, "pcr build: %s\n", e.message().c_str());
  struct stat st;
  if (::stat((store + ".partial").c_str(), &st) != 0) {
    // Stopped before anything was written: the source could not be read or listed (a URL
    // that is not there, refused credentials). A missing source is a bad argument.
    return e.IsNotFound() || e.code() == Status::Code::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  std::fprintf(stderr,
               "pcr build: no store was written; rerun with --resume to continue where it "
               "stopped\n");
  return kExitFailed;
}

}  // namespace

int RunBuild(const std::vector<std::string>& args) {
  BuildConfig config;
  po::options_description opts = BuildOptions(&config);
  std::string src, store;
  po::variables_map vm;
  if (auto exit = ParseCommandLine(
          "build", args, opts, {{"src", &src}, {"store", &store}},
          "0 done, 1 failed (no store written), 2 bad arguments,\n"
          "            3 store written but some source entries could not be read,\n"
          "            4 another pcr build is writing STORE (its pid is named)",
          &vm)) {
    return *exit;
  }
  if (src.empty() || store.empty()) {
    std::fprintf(stderr, "pcr build: SRC and STORE are required (see pcr build --help)\n");
    return kExitUsage;
  }
  config.source = src;
  config.store = store;
  config.nested_archives = !vm.count("no-nested");
  if (auto exit = ConfigureSource(vm, &config)) return *exit;
  // STORE in object storage (builder/object_target.h): the draft is local, in its cache folder.
  std::unique_ptr<ObjectTarget> target;
  if (IsOutputUrl(store)) {
    auto remote = RemoteOptionsFromEnv();
    Result<std::unique_ptr<ObjectTarget>> opened =
        remote ? ObjectTarget::Open(store, *remote) : Err(remote.error());
    if (!opened) {
      std::fprintf(stderr, "pcr build: %s\n", opened.error().message().c_str());
      return kExitUsage;
    }
    target = std::move(*opened);
    config.store = target->local_store();
    config.sink = target.get();
  }
  if (Status s = CheckBuildArguments(config); !s.ok()) {
    std::fprintf(stderr, "pcr build: %s\n", s.message().c_str());
    return kExitUsage;
  }
  // One writer per store, from here until STORE.partial has become STORE (store_lock.h).
  auto lock = StoreWriterLock::Acquire(config.store);
  if (!lock) {
    std::fprintf(stderr, "pcr build: %s\n", lock.error().message().c_str());
    return lock.error().code() == Status::Code::kAlreadyExists ? kExitBusy : kExitFailed;
  }
  // STORE may have been published by the writer that held the lock a moment ago.
  if (Status s = CheckBuildArguments(config); !s.ok()) {
    std::fprintf(stderr, "pcr build: %s\n", s.message().c_str());
    return kExitUsage;
  }
  if (target != nullptr) {
    // The bucket's state, not the local draft's, says what exists and what is resumed.
    Status s = target->CheckAndClear(config.force, config.resume);
    if (!s.ok()) {
      std::fprintf(stderr, "pcr build: %s\n", s.message().c_str());
      return s.code() == Status::Code::kAlreadyExists || s.code() == Status::Code::kInvalidArgument
                 ? kExitUsage
                 : kExitFailed;
    }
    if (config.resume) s = target->PrepareResume();
    if (!s.ok()) {
      std::fprintf(stderr, "pcr build: %s\n", s.message().c_str());
      return kExitFailed;
    }
  } else if (Status s = CheckInterruptedBuild(config); !s.ok()) {
    std::fprintf(stderr, "pcr build: %s\n", s.message().c_str());
    return kExitUsage;
  }
  std::optional<ProgressLine> progress;
  StartProgressLine("build", ShownStore(src), vm.count("quiet") > 0, vm.count("progress") > 0,
                    &progress, &config.progress);
  auto report = BuildLocked(config, *lock);
  if (progress) progress->Finish();
  if (!report) return FailedBuildExit(report.error(), config.store);
  if (config.shard.enabled()) {
    PrintShardReport(*report, store, config.shard);
  } else {
    PrintReport(*report, store, "build");
  }
  if (!report->problems.empty()) {
    std::fprintf(stderr, "pcr build: %zu source entries could not be stored (listed above)\n",
                 report->problems.size());
    return kExitProblems;
  }
  return kExitOk;
}

}  // namespace pcrfs::tools
