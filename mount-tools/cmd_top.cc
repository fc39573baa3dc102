// pcr top MNT [--interval S] [--count N] [--json]: a mount's activity per second, from the
// counters its daemon serves as -o metrics (the same text, read from the root's extended
// attribute user.pcrfs.metrics, so no -o metrics is needed).
#include <sys/xattr.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "mount-tools/cli.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {
namespace po = boost::program_options;
namespace {

// "name{labels}" -> value, from the exposition text (samples only; comments skipped).
using Samples = std::map<std::string, double>;

Samples ParseSamples(const std::string& text) {
  Samples out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return out;
}

// The mount's metrics text, or an error line.
Result<std::string> ReadMetrics(const std::string& mnt) {
  std::string buf(1 << 18, '\0');
  const ssize_t n = ::getxattr(mnt.c_str(), "user.pcrfs.metrics", buf.data(), buf.size());
  if (n < 0) {
    const int err = errno;
    if (err == ENODATA || err == ENOTSUP) {
      return Err(Status::InvalidArgument(mnt + ": not the root of a pcrfs mount"));
    }
    return Err(Status::FromErrno(mnt, err));
  }
  buf.resize(static_cast<size_t>(n));
  return buf;
}

double Get(const Samples& s, const std::string& series) {
  auto it = s.find(series);
  return it == s.end() ? 0 : it->second;
}

// The sum of every series of `name` (any labels).
double Sum(const Samples& s, const std::string& name) {
  double total = 0;
  for (auto it = s.lower_bound(name); it != s.end() && it->first.compare(0, name.size(), name) == 0;
       ++it) {
    if (it->first.size() == name.size() || it->first[name.size()] == '{') total += it->second;
  }
  return total;
}

double Ratio(double part, double whole) { return whole > 0 ? part / whole : 0; }

// One interval's view: rates per second between `a` and `b`, `seconds` apart.
nlohmann::json View(const Samples& a, const Samples& b, double seconds) {
  auto delta = [&](const std::string& series) { return Get(b, series) - Get(a, series); };
  auto delta_sum = [&](const std::string& name) { return Sum(b, name) - Sum(a, name); };
  nlohmann::json v;
  v["seconds"] = seconds;
  nlohmann::json levels = nlohmann::json::object();
  for (int k = 1; k <= 10; ++k) {
    const std::string l = "{level=\"" + std::to_string(k) + "\"}";
    const double bytes = delta("pcrfs_bytes_served_total" + l);
    const double files = delta("pcrfs_files_served_total" + l);
    if (bytes == 0 && files == 0) continue;
    levels[std::to_string(k)] = {{"bytes", bytes},
                                 {"files", files},
                                 {"bytes_per_second", bytes / seconds},
                                 {"files_per_second", files / seconds}};
  }
  v["levels"] = levels;
  v["bytes_served_total"] = Sum(b, "pcrfs_bytes_served_total");
  v["files_served_total"] = Sum(b, "pcrfs_files_served_total");
  v["saved_ratio"] =
      Ratio(delta_sum("pcrfs_bytes_saved_total"), delta_sum("pcrfs_source_bytes_total"));
  const bool remote = b.count("pcrfs_remote_attempts_total") != 0;
  v["origin"] = remote ? "remote" : "store";
  v["origin_bytes_per_second"] = (remote ? delta_sum("pcrfs_remote_received_bytes_total")
                                         : delta_sum("pcrfs_store_read_bytes_total")) /
                                 seconds;
  v["device_bytes_per_second"] = delta("pcrfs_process_storage_read_bytes_total") / seconds;
  const double hits = delta_sum("pcrfs_piece_cache_hits_total");
  v["piece_cache_hit_ratio"] = Ratio(hits, hits + delta_sum("pcrfs_piece_cache_misses_total"));
  if (remote) {
    const double hit = delta_sum("pcrfs_range_cache_hit_bytes_total");
    v["range_cache_hit_ratio"] = Ratio(hit, hit + delta_sum("pcrfs_range_cache_miss_bytes_total"));
    v["retries_per_second"] = delta_sum("pcrfs_remote_retries_total") / seconds;
    v["failures_per_second"] = delta_sum("pcrfs_remote_request_failures_total") / seconds;
  }
  v["speculative_bytes_per_second"] =
      delta("pcrfs_store_read_bytes_total{kind=\"speculative\"}") / seconds;
  v["pushed_bytes_per_second"] = delta_sum("pcrfs_pushed_bytes_total") / seconds;
  const std::string read = "{op=\"read\"}";
  const double reads = delta("pcrfs_fuse_request_duration_seconds_count" + read);
  v["fuse_reads_per_second"] = reads / seconds;
  v["fuse_read_mean_seconds"] =
      Ratio(delta("pcrfs_fuse_request_duration_seconds_sum" + read), reads);
  v["resident_memory_bytes"] = Get(b, "pcrfs_resident_memory_bytes");
  return v;
}

std::string Rate(double bytes_per_second) {
  return HumanBytes(static_cast<uint64_t>(std::llround(std::max(0.0, bytes_per_second)))) + "/s";
}

void PrintScreen(const std::string& mnt, const nlohmann::json& v) {
  std::printf("\033[H\033[2Jpcr top %s  (every %.1f s; Ctrl-C ends)\n\n", mnt.c_str(),
              v["seconds"].get<double>());
  std::printf("level      files/s         served\n");
  for (const auto& [k, l] : v["levels"].items()) {
    std::printf("%5s %12.1f %14s\n", k.c_str(), l["files_per_second"].get<double>(),
                Rate(l["bytes_per_second"].get<double>()).c_str());
  }
  if (v["levels"].empty()) std::printf("  (no reads)\n");
  std::printf("\nsaved against the source  %5.1f%%\n", 100 * v["saved_ratio"].get<double>());
  std::printf("%-25s %s\n", (v["origin"].get<std::string>() + " reads").c_str(),
              Rate(v["origin_bytes_per_second"].get<double>()).c_str());
  std::printf("%-25s %s\n", "device reads",
              Rate(v["device_bytes_per_second"].get<double>()).c_str());
  std::printf("%-25s %s\n", "speculative reads",
              Rate(v["speculative_bytes_per_second"].get<double>()).c_str());
  std::printf("%-25s %s\n", "pushed to page cache",
              Rate(v["pushed_bytes_per_second"].get<double>()).c_str());
  std::printf("piece cache hit ratio     %5.1f%%\n",
              100 * v["piece_cache_hit_ratio"].get<double>());
  if (v.contains("range_cache_hit_ratio")) {
    std::printf("range cache hit ratio     %5.1f%%\n",
                100 * v["range_cache_hit_ratio"].get<double>());
    std::printf("retries/s %.1f   failures/s %.1f\n", v["retries_per_second"].get<double>(),
                v["failures_per_second"].get<double>());
  }
  std::printf("FUSE reads/s %.1f, mean %.0f us\n", v["fuse_reads_per_second"].get<double>(),
              1e6 * v["fuse_read_mean_seconds"].get<double>());
  std::printf("daemon memory             %s\n",
              HumanBytes(static_cast<uint64_t>(v["resident_memory_bytes"].get<double>())).c_str());
  std::fflush(stdout);
}

}  // namespace

int RunTop(const std::vector<std::string>& args) {
  po::options_description opts(
      "usage: pcr top MNT [--interval S] [--count N] [--json]\n\n"
      "Shows what the pcrfs mount at MNT serves each interval: files and bytes per second by\n"
      "level, the share saved against the source, the store's or origin's read rate, cache hit\n"
      "ratios, speculation, pushes, retries. The counters are the daemon's own (the text of\n"
      "-o metrics, read from MNT's extended attribute user.pcrfs.metrics).\n\noptions");
  double interval = 1;
  uint64_t count = 0;
  opts.add_options()("help,h", "show this help")(
      "interval,i", po::value<double>(&interval)->default_value(1), "seconds between views")(
      "count,n", po::value<uint64_t>(&count)->default_value(0), "stop after N views (0: never)")(
      "json", "one JSON object per interval on stdout instead of the screen");
  std::string mnt;
  po::variables_map vm;
  if (auto exit = ParseCommandLine("top", args, opts, {{"mnt", &mnt}},
                                   "0 done, 1 the mount cannot be read, 2 bad arguments", &vm)) {
    return *exit;
  }
  if (mnt.empty()) {
    std::fprintf(stderr, "pcr top: MNT is required (see pcr top --help)\n");
    return 2;
  }
  if (!(interval >= 0.1 && interval <= 3600)) {
    std::fprintf(stderr, "pcr top: --interval must be between 0.1 and 3600 seconds\n");
    return 2;
  }
  const bool json = vm.count("json") != 0 || !::isatty(STDOUT_FILENO);
  auto first = ReadMetrics(mnt);
  if (!first) {
    std::fprintf(stderr, "pcr top: %s\n", first.error().message().c_str());
    return 1;
  }
  Samples before = ParseSamples(*first);
  auto at = std::chrono::steady_clock::now();
  for (uint64_t shown = 0; count == 0 || shown < count; ++shown) {
    std::this_thread::sleep_until(at + std::chrono::duration<double>(interval));
    auto text = ReadMetrics(mnt);
    if (!text) {
      std::fprintf(stderr, "pcr top: %s\n", text.error().message().c_str());
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    Samples after = ParseSamples(*text);
    const nlohmann::json v = View(before, after, std::chrono::duration<double>(now - at).count());
    if (json) {
      std::printf("%s\n", v.dump().c_str());
      std::fflush(stdout);
    } else {
      PrintScreen(mnt, v);
    }
    before = std::move(after);
    at = now;
  }
  return 0;
}

}  // namespace pcrfs::tools
