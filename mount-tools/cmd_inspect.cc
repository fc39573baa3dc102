// pcr inspect STORE [--json]
#include <boost/program_options.hpp>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "index/store.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;

namespace {

double Percent(uint64_t part, uint64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

nlohmann::ordered_json InspectJson(const index::Store& store) {
  const index::Manifest& m = store.manifest();
  nlohmann::ordered_json j;
  j["store"] = store.dir();
  j["format_version"] = m.format_version;
  j["generator"] = m.generator;
  j["options"] = {{"strip_metadata", m.options.strip_metadata},
                  {"images_per_record", m.options.images_per_record},
                  {"max_input_scans", m.options.max_input_scans},
                  {"max_image_memory", m.options.max_image_memory},
                  {"max_jpeg_bytes", m.options.max_jpeg_bytes}};
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
                      {"mean_bytes_per_jpeg", m.num_jpeg ? jpeg / m.num_jpeg : 0}});
  }
  j["levels"] = levels;
  return j;
}

void PrintInspect(const index::Store& store) {
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
  std::printf("source           %s (%" PRIu64 " bytes; JPEGs %s)\n\n",
              HumanBytes(m.source_bytes).c_str(), m.source_bytes,
              HumanBytes(m.source_jpeg_bytes).c_str());
  std::printf("level        bytes  %% of source   mean bytes/JPEG  JPEGs: %% of source\n");
  for (int k = 1; k <= index::kNumGroups; ++k) {
    const uint64_t jpeg = m.jpeg_level_bytes[k - 1];
    std::printf("%5d %12s  %10.1f%%  %16" PRIu64 "  %17.1f%%\n", k,
                HumanBytes(m.level_bytes[k - 1]).c_str(),
                Percent(m.level_bytes[k - 1], m.source_bytes), m.num_jpeg ? jpeg / m.num_jpeg : 0,
                Percent(jpeg, m.source_jpeg_bytes));
  }
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr inspect STORE [--json]\n\n"
      "Describes a store: entries, records, passthrough files by reason, format version,\n"
      "build options, and for each level the total bytes, mean bytes per JPEG and % of the\n"
      "source.\n\noptions");
  opts.add_options()("help,h", "show this help")("json", "machine-readable output");
  std::string store_dir;
  po::options_description hidden;
  hidden.add_options()("store", po::value<std::string>(&store_dir));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("store", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "pcr inspect: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\nexit codes: 0 done, 2 bad arguments or no store\n";
    return 0;
  }
  if (store_dir.empty()) {
    std::fprintf(stderr, "pcr inspect: STORE is required (see pcr inspect --help)\n");
    return 2;
  }
  auto store = index::Store::Open(store_dir);
  if (!store) {
    std::fprintf(stderr, "pcr inspect: %s\n", store.error().message().c_str());
    return 2;
  }
  if (vm.count("json")) {
    std::cout << InspectJson(**store).dump(2) << "\n";
  } else {
    PrintInspect(**store);
  }
  return 0;
}

}  // namespace pcrfs::tools
