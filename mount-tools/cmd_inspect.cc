// pcr inspect STORE [--json]
#include <array>
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "builder/provenance.h"
#include "builder/quality_sample.h"
#include "common/file_util.h"
#include "index/store.h"
#include "mount-tools/cli.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

namespace {

double Percent(uint64_t part, uint64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

nlohmann::ordered_json Num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

void PrintQuality(const index::QualitySample& q, const char* origin) {
  std::printf("\nfidelity against level 10, %u JPEGs sampled with seed %" PRIu64 " (%s)\n",
              q.measured, q.seed, origin);
  std::printf("level   PSNR mean     p5    min   MS-SSIM mean      p5     min\n");
  for (int k = 1; k <= index::kNumGroups; ++k) {
    const index::LevelQuality& l = q.levels[k - 1];
    if (k == index::kNumGroups) {
      std::printf("%5d   identical pixels (the reference)\n", k);
      continue;
    }
    std::printf("%5d   %6.2f dB %6.2f %6.2f   %12.4f %7.4f %7.4f\n", k, l.mean_psnr, l.p5_psnr,
                l.min_psnr, l.mean_msssim, l.p5_msssim, l.min_msssim);
  }
}

// The store's provenance.json: nullopt when it has none (built by an older pcr, or a remote
// store, whose provenance.json is not fetched); `*problem` says why when it is unreadable.
std::optional<Provenance> LoadProvenance(const index::Store& store, std::string* problem) {
  const std::string path = store.dir() + "/" + kProvenanceFile;
  auto bytes = ReadWholeFile(path, 1 << 20);
  if (!bytes) {
    if (!bytes.error().IsNotFound()) *problem = bytes.error().message();
    return std::nullopt;
  }
  auto p = Provenance::FromJson(std::string(bytes->begin(), bytes->end()));
  if (!p) {
    *problem = p.error().message();
    return std::nullopt;
  }
  return *p;
}

std::string DescribeSource(const Provenance& p) {
  std::string kind = p.source_kind == "s3-prefix"        ? "the objects under"
                     : p.source_kind == "remote-archive" ? "the archive at"
                                                         : "the " + p.source_kind;
  std::string s = "pcr " + p.command + " of " + kind + " " + p.source;
  if (p.shards > 0) s += " (a sharded build: " + std::to_string(p.shards) + " parts merged)";
  return s;
}

nlohmann::ordered_json ProvenanceJson(const std::optional<Provenance>& p) {
  if (!p) return nullptr;
  return nlohmann::ordered_json::parse(p->ToJson());
}

// Per level (index 0: level 1), what reading it reads of the record files: the room a remote
// store's caches need for it (index::StoreBytesAtLevel, what the daemon sizes its caches by).
Result<std::array<uint64_t, index::kNumGroups>> RecordBytesPerLevel(const index::Store& store) {
  std::array<uint64_t, index::kNumGroups> bytes{};
  for (int k = 1; k <= index::kNumGroups; ++k) {
    auto b = index::StoreBytesAtLevel(store.index(), k);
    if (!b) return Err(b.error());
    bytes[k - 1] = *b;
  }
  return bytes;
}

nlohmann::ordered_json InspectJson(const index::Store& store,
                                   const std::array<uint64_t, index::kNumGroups>& record_bytes) {
  const index::Manifest& m = store.manifest();
  nlohmann::ordered_json j;
  j["store"] = store.dir();
  j["format_version"] = m.format_version;
  j["generator"] = m.generator;
  // The build options exactly as the manifest writes them.
  j["options"] = nlohmann::ordered_json::parse(m.ToJson())["options"];
  j["entries"] = m.num_entries;
  j["directories"] = m.num_directories;
  j["files"] = m.num_jpeg + m.num_passthrough;
  j["jpeg"] = m.num_jpeg;
  j["passthrough"] = m.num_passthrough;
  j["passthrough_by_reason"] = m.passthrough_by_reason;
  j["records"] = m.num_records;
  j["source_bytes"] = m.source_bytes;
  j["source_jpeg_bytes"] = m.source_jpeg_bytes;
  nlohmann::ordered_json levels = nlohmann::ordered_json::array();
  const uint64_t files = m.num_jpeg + m.num_passthrough;
  for (int k = 1; k <= index::kNumGroups; ++k) {
    const uint64_t bytes = m.level_bytes[k - 1];
    const uint64_t jpeg = m.jpeg_level_bytes[k - 1];
    levels.push_back({{"level", k},
                      {"bytes", bytes},
                      {"percent_of_source", Percent(bytes, m.source_bytes)},
                      {"mean_bytes_per_file", files ? bytes / files : 0},
                      {"jpeg_bytes", jpeg},
                      {"jpeg_percent_of_source", Percent(jpeg, m.source_jpeg_bytes)},
                      {"mean_bytes_per_jpeg", m.num_jpeg ? jpeg / m.num_jpeg : 0},
                      {"record_bytes", record_bytes[k - 1]},
                      {"record_percent_of_source", Percent(record_bytes[k - 1], m.source_bytes)}});
  }
  j["levels"] = levels;
  std::string problem;
  j["built"] = ProvenanceJson(LoadProvenance(store, &problem));
  return j;
}

void PrintInspect(const index::Store& store,
                  const std::array<uint64_t, index::kNumGroups>& record_bytes) {
  const index::Manifest& m = store.manifest();
  std::printf("store            %s\n", store.dir().c_str());
  std::printf("format version   %u (%s)\n", m.format_version, m.generator.c_str());
  std::printf("build options    images-per-record %u, max-scans %u, strip-metadata %s\n",
              m.options.images_per_record, m.options.max_input_scans,
              m.options.strip_metadata ? "yes" : "no");
  std::printf("entries          %" PRIu64 " (%" PRIu64 " folders, %" PRIu64 " files)\n",
              m.num_entries, m.num_directories, m.num_jpeg + m.num_passthrough);
  std::printf("records          %u\n", m.num_records);
  std::printf("JPEGs            %" PRIu64 " transcoded\n", m.num_jpeg);
  std::printf("passthrough      %" PRIu64 " stored byte for byte\n", m.num_passthrough);
  for (const auto& [reason, count] : m.passthrough_by_reason) {
    std::printf("  %-14s %" PRIu64 "\n", reason.c_str(), count);
  }
  std::printf("source           %s (%" PRIu64 " bytes; JPEGs %s)\n",
              HumanBytes(m.source_bytes).c_str(), m.source_bytes,
              HumanBytes(m.source_jpeg_bytes).c_str());
  std::string problem;
  const std::optional<Provenance> p = LoadProvenance(store, &problem);
  if (!p) {
    std::printf("built by         unknown (%s)\n\n",
                problem.empty() ? "no provenance.json: built by an older pcr, or a remote store"
                                : problem.c_str());
  } else {
    std::printf("built by         %s\n", DescribeSource(*p).c_str());
    std::printf("                 %s%s%s%s, %u threads\n", p->generator.c_str(),
                p->commit.empty() ? "" : " (commit ", p->commit.c_str(),
                p->commit.empty() ? "" : ")", p->threads);
    std::printf("                 from %s to %s (%.1f s)%s%s\n", FormatUtc(p->started_ms).c_str(),
                FormatUtc(p->finished_ms).c_str(),
                static_cast<double>(p->finished_ms - p->started_ms) / 1000.0,
                p->host.empty() ? "" : " on ", p->host.c_str());
    std::printf("                 %" PRIu64 " files listed, %" PRIu64 " not stored, %" PRIu64
                " changed while read, %" PRIu64 " records kept by --resume\n\n",
                p->files_listed, p->not_stored, p->changed, p->records_kept);
  }
  std::printf(
      "level        bytes  %% of source   mean bytes/JPEG  JPEGs: %% of source   record bytes\n");
  for (int k = 1; k <= index::kNumGroups; ++k) {
    const uint64_t jpeg = m.jpeg_level_bytes[k - 1];
    std::printf("%5d %12s  %10.1f%%  %16" PRIu64 "  %17.1f%%  %13s\n", k,
                HumanBytes(m.level_bytes[k - 1]).c_str(),
                Percent(m.level_bytes[k - 1], m.source_bytes), m.num_jpeg ? jpeg / m.num_jpeg : 0,
                Percent(jpeg, m.source_jpeg_bytes), HumanBytes(record_bytes[k - 1]).c_str());
  }
}

// --recommend: the lowest level whose 5th-percentile MS-SSIM is at least min_msssim.
int PrintRecommendation(const index::Store& store, const std::string& store_dir,
                        const index::QualitySample& quality, double min_msssim, bool json) {
  const int level = index::RecommendLevel(quality, min_msssim);
  if (level == 0) {
    std::fprintf(stderr,
                 "pcr inspect: %s has no quality sample (built with --quality-sample 0, or "
                 "no JPEGs); add --quality to measure one now\n",
                 ShownStore(store_dir).c_str());
    return 1;
  }
  const index::Manifest& m = store.manifest();
  const index::LevelQuality& l = quality.levels[level - 1];
  if (json) {
    nlohmann::ordered_json j = {
        {"level", level},
        {"min_msssim", min_msssim},
        {"p5_msssim", l.p5_msssim},
        {"mean_psnr", Num(l.mean_psnr)},
        {"sampled", quality.measured},
        {"bytes", m.level_bytes[level - 1]},
        {"percent_of_source", Percent(m.level_bytes[level - 1], m.source_bytes)}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("%d\n", level);
    std::fprintf(stderr,
                 "level %d: 5th-percentile MS-SSIM %.4f >= %g over %u sampled JPEGs; "
                 "%.1f%% of the source bytes. Mount it with: pcrfs %s MNT -o scans=%d\n",
                 level, l.p5_msssim, min_msssim, quality.measured,
                 Percent(m.level_bytes[level - 1], m.source_bytes), ShownStore(store_dir).c_str(),
                 level);
  }
  return 0;
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr inspect STORE [--json] [--quality [--sample N] [--seed S]]\n"
      "                         [--recommend --min-msssim X]\n\n"
      "Describes a store: entries, records, passthrough files by reason, format version,\n"
      "build options, and for each level the total bytes, mean bytes per JPEG and % of the\n"
      "source, what reading it reads of the record files (record bytes, headers and tables\n"
      "included: the room a remote mount's caches need for it), with the fidelity (PSNR,\n"
      "MS-SSIM against level 10) that pcr build measured on a sample.\n\noptions");
  uint32_t sample = 100;
  uint64_t seed = 0;
  double min_msssim = 0;
  opts.add_options()("help,h", "show this help")("json", "machine-readable output")(
      "quality", "measure PSNR and MS-SSIM now, on a seeded sample of JPEGs")(
      "sample", po::value<uint32_t>(&sample)->default_value(100), "JPEGs to measure")(
      "seed", po::value<uint64_t>(&seed)->default_value(0), "sample seed")(
      "recommend", "print the lowest level whose 5th-percentile MS-SSIM is at least X")(
      "min-msssim", po::value<double>(&min_msssim), "X, in (0, 1], for --recommend");
  std::string store_dir;
  po::variables_map vm;
  if (auto exit = ParseCommandLine("inspect", args, opts, {{"store", &store_dir}},
                                   "0 done, 1 the quality sample could not be measured, 2 bad "
                                   "arguments or no store",
                                   &vm)) {
    return *exit;
  }
  if (store_dir.empty()) {
    std::fprintf(stderr, "pcr inspect: STORE is required (see pcr inspect --help)\n");
    return 2;
  }
  auto store = OpenStore(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr inspect: %s\n", store.error().message().c_str());
    return 2;
  }
  if (vm.count("recommend") != vm.count("min-msssim")) {
    std::fprintf(stderr, "pcr inspect: --recommend and --min-msssim go together\n");
    return 2;
  }
  if (vm.count("min-msssim") && !(min_msssim > 0 && min_msssim <= 1)) {
    std::fprintf(stderr, "pcr inspect: --min-msssim must be in (0, 1]\n");
    return 2;
  }
  index::QualitySample quality = (*store)->manifest().quality;
  const char* origin = "measured by pcr build";
  if (vm.count("quality")) {
    auto measured = MeasureStoreQuality(**store, sample, seed);
    if (!measured) {
      std::fprintf(stderr, "pcr inspect: %s\n", measured.error().message().c_str());
      return 1;
    }
    quality.measured = (*measured)[0].n;
    quality.seed = seed;
    quality.levels = *measured;
    origin = "measured now";
  }
  if (vm.count("recommend")) {
    return PrintRecommendation(**store, store_dir, quality, min_msssim, vm.count("json") > 0);
  }
  auto record_bytes = RecordBytesPerLevel(**store);
  if (!record_bytes) {
    std::fprintf(stderr, "pcr inspect: %s\n", record_bytes.error().message().c_str());
    return 2;
  }
  if (vm.count("json")) {
    nlohmann::ordered_json j = InspectJson(**store, *record_bytes);
    if (quality.measured > 0) j["quality"] = index::QualityToJson(quality);
    std::cout << j.dump(2) << "\n";
  } else {
    PrintInspect(**store, *record_bytes);
    if (quality.measured > 0) PrintQuality(quality, origin);
  }
  return 0;
}

}  // namespace pcrfs::tools
