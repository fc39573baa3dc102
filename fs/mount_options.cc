// The -o options as one table, and the loops over it: apply (ApplyMountOptions), help
// (MountOptionsHelp), environment (RemoteOptionsFromEnv). No libfuse here, so that `pcr` links
// it; the fuse_opt glue of ParseMountOptions is mount_options_fuse.cc.
#include "fs/mount_options.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <set>
#include <utility>

#include "remote/azure.h"
#include "remote/url.h"

namespace pcrfs::fs {
namespace {

enum class Kind {
  kFlag,      // no value: -o no_sign
  kInt,       // decimal digits only (no sign, no blanks) in lo..hi
  kSize,      // ParseSize in lo..hi; or, with `values`, one of those words (v.n 0, v.text it)
  kFraction,  // a decimal number in (0, 1]
  kEnum,      // one of `values` ("yes|no|auto"), given to the setter as its index
  kText,      // non-empty; with hi: lo..hi characters, all from `values`
  kPath,      // a non-empty file or folder name
  kListen,    // PORT, HOST:PORT or [IPV6]:PORT; HOST an IP address or localhost
  kLabel,     // NAME=VALUE, NAME a Prometheus label name; repeatable
  kRetired,   // any value, ignored with a note (old fstab lines still mount); not documented
  kLibfuse,   // left to libfuse: here for --help and the README check only
};

// The stores an option is for. Any other than kAny is refused with a local STORE, where it would
// be ignored silently, and listed under "remote stores" in --help.
enum class Stores {
  kAny,
  kRemote,
  kBucket /* s3://, gs://, Azure */,
  kS3 /* and gs:// */,
  kAzure,
  kHttp /* http(s):// but Azure's */,
  kRemoteOrBaseline /* any remote store, or a local one with -o form=baseline */
};

struct Value {
  uint64_t n = 0;  // kInt, kSize; kEnum: the index in `values`
  double x = 0;    // kFraction
  std::string_view text;
};

struct Option {
  std::string_view name;
  Kind kind;
  std::string_view meta = "";  // the value in --help ("N" in "-o threads=N"); kEnum: `values`
  uint64_t lo = 0, hi = 0;
  std::string_view values = "";
  // What the errors say: kInt, the unit ("a percentage, an integer in 0..100"); kSize and
  // kFraction, an example; kText, what a value of the wrong form should be; kPath, what to give
  // (default "a file name").
  std::string_view what = "";
  std::string_view zero = "";  // what 0 means, for errors and --help
  std::string_view def = "";   // the default, for --help
  Stores stores = Stores::kAny;
  const char* env = nullptr;  // pcr's environment variable (RemoteOptionsFromEnv)
  // Only a mount uses it (its FUSE session, kernel, sockets, log, owner): refused by
  // ParseStoreOptions, for a store read without a mount (the Python binding).
  bool mount_only = false;
  void (*set)(MountConfig&, const Value&) = nullptr;
  std::string_view help = "";
};

constexpr uint64_t kMiB = uint64_t{1} << 20, kTiB = uint64_t{1} << 40;
// uid_t and gid_t are 32 bits; (uid_t)-1 means "no change" to chown and is no owner.
constexpr uint64_t kMaxId = 4294967294u;

// In --help's order, kAny options first; --help appends the range and the default to `help`.
// clang-format off
constexpr Option kOptions[] = {
    {.name = "scans", .kind = Kind::kInt, .meta = "K", .lo = 1, .hi = index::kNumGroups,
     .set = [](MountConfig& c, const Value& v) { c.fs.fixed_level = static_cast<int>(v.n); },
     .help = "serve the dataset at level K at the root"},
    {.name = "form", .kind = Kind::kEnum, .meta = "FORM", .values = "progressive|baseline",
     .set = [](MountConfig& c, const Value& v) {
       c.fs.form = std::array{ServedForm::kProgressive, ServedForm::kBaseline}[v.n];
     },
     .help = "progressive (default): JPEGs as stored, fewest bytes; baseline: each JPEG "
             "re-encoded at its first lookup as a sequential JPEG with the same coefficients: "
             "larger, faster to decode (files read more than once, GPU decoders), the re-encode "
             "costing the daemon about one progressive decode"},
    {.name = "msssim", .kind = Kind::kFraction, .meta = "X", .what = "0.95",
     .set = [](MountConfig& c, const Value& v) { c.msssim = v.x; },
     .help = "serve, at the root, the lowest level whose 5th-percentile MS-SSIM (measured by pcr "
             "build) is at least X, in (0, 1]"},
    {.name = "threads", .kind = Kind::kInt, .meta = "N", .lo = 1, .hi = 256,
     .def = "2 x cores, at least 4; a remote store: at least 64",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.threads = static_cast<unsigned>(v.n); },
     .help = "FUSE worker threads"},
    {.name = "cache_size", .kind = Kind::kSize, .meta = "SIZE", .lo = kMiB, .hi = kTiB,
     .what = "256M", .def = "256M; a remote store: 32M",
     .set =
         [](MountConfig& c, const Value& v) {
           c.fs.cache_bytes = v.n;
           c.cache_size_given = true;
         },
     .help = "piece cache memory cap"},
    {.name = "readahead", .kind = Kind::kInt, .meta = "N", .hi = 1024, .zero = "off", .def = "64",
     .set = [](MountConfig& c, const Value& v) {
       c.fs.readahead_slots = static_cast<uint32_t>(v.n);
     },
     .help = "when a folder is read in order, fetch its next N files while the device is idle"},
    {.name = "prefetch", .kind = Kind::kInt, .meta = "P", .hi = 100, .what = "a percentage",
     .zero = "off", .def = "3",
     .set = [](MountConfig& c, const Value& v) {
       c.fs.prefetch_percent = static_cast<uint32_t>(v.n);
     },
     .help = "once P% of a folder's files have been read, fetch the rest of the folder while the "
             "device is idle"},
    {.name = "readdirplus", .kind = Kind::kEnum, .meta = "MODE", .values = "yes|no|auto",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) {
       using enum ReaddirPlus;
       c.fs.readdirplus = std::array{kAlways, kNever, kAuto}[v.n];
     },
     .help = "yes (default): listings carry every entry's attributes, so the kernel knows each "
             "listed file (no lookup at its open; its bytes can be pushed) and builds an inode "
             "per entry (~1 KiB); no: plain listings, cheapest for find or a walk that opens "
             "nothing; auto: the kernel decides"},
    {.name = "push", .kind = Kind::kSize, .meta = "SIZE", .hi = kTiB, .what = "4G", .zero = "off",
     .def = "a quarter of memory",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.fs.push_bytes = v.n; },
     .help = "with readdirplus: put up to SIZE bytes of the files the readers are predicted to "
             "read into the page cache before they ask (no request per file)"},
    {.name = "hints", .kind = Kind::kEnum, .values = "yes|no",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.hints = v.n == 0; },
     .help = "yes (default): listen on a socket (named by the root's user.pcrfs.hint_socket) "
             "for the paths a reader will read next, and fetch them ahead in that order; no: "
             "no socket"},
    {.name = "index_rss", .kind = Kind::kSize, .meta = "SIZE", .hi = kTiB, .what = "16M",
     .zero = "never unmap", .def = "16M",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.index_rss = v.n; },
     .help = "no effect since index format 4, which the daemon holds in its own memory (it "
             "unmapped an LMDB index's pages past SIZE); accepted so older mount lines work"},
    {.name = "kernel_readahead", .kind = Kind::kSize, .meta = "SIZE", .hi = 16 * kMiB,
     .what = "1M", .zero = "the kernel's default", .def = "1M",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.kernel_readahead = v.n; },
     .help = "the kernel's readahead window for files read in order (root only; the kernel's "
             "own: 128K)"},
    {.name = "uid", .kind = Kind::kInt, .meta = "N", .hi = kMaxId, .def = "the mounting user",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.uid = static_cast<uid_t>(v.n); },
     .help = "owner of every file"},
    {.name = "gid", .kind = Kind::kInt, .meta = "N", .hi = kMaxId,
     .def = "the mounting user's group",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.gid = static_cast<gid_t>(v.n); },
     .help = "group of every file"},
    {.name = "allow_other", .kind = Kind::kLibfuse,
     .mount_only = true,
     .help = "let other users read (implies default_permissions)"},
    {.name = "ro", .kind = Kind::kLibfuse,
     .mount_only = true,
     .help = "accepted (pcrfs always mounts read-only; rw is refused)"},
    {.name = "log_file", .kind = Kind::kPath, .meta = "PATH", .def = "stderr with -f, else syslog",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.log_file = v.text; },
     .help = "append the daemon's messages to PATH (its folder must exist), one line each with "
             "its UTC time and level; SIGHUP reopens it"},
    {.name = "metrics", .kind = Kind::kListen, .meta = "[ADDR:]PORT",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.metrics_address = v.text; },
     .help = "serve Prometheus metrics at http://ADDR:PORT/metrics (ADDR: 127.0.0.1 if only a "
             "port is given; 0.0.0.0 or [::] for every interface)"},
    {.name = "metrics_file", .kind = Kind::kPath, .meta = "PATH",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) { c.metrics_file = v.text; },
     .help = "rewrite PATH (atomically) with the Prometheus metrics every metrics_interval "
             "seconds, for node_exporter's textfile collector (a name ending in .prom)"},
    {.name = "metrics_interval", .kind = Kind::kInt, .meta = "S", .lo = 1, .hi = 3600,
     .what = "seconds", .def = "15",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) {
       c.metrics_interval = static_cast<unsigned>(v.n);
     },
     .help = "seconds between rewrites of metrics_file"},
    {.name = "metrics_label", .kind = Kind::kLabel, .meta = "NAME=VALUE",
     .mount_only = true,
     .set = [](MountConfig& c, const Value& v) {
       const size_t eq = v.text.find('=');
       c.metrics_labels.emplace_back(v.text.substr(0, eq), v.text.substr(eq + 1));
     },
     .help = "add the label NAME=\"VALUE\" to every metric (repeat the option for more; the "
             "mount label, the mount point, is always there)"},
    {.name = "prefetch_probe", .kind = Kind::kRetired,
     .set = [](MountConfig& c, const Value&) { c.retired_options = true; }},
    {.name = "prefetch_chunk", .kind = Kind::kRetired,
     .set = [](MountConfig& c, const Value&) { c.retired_options = true; }},

    {.name = "region", .kind = Kind::kText, .meta = "R",
     .def = "AWS_REGION, ~/.aws/config, us-east-1", .stores = Stores::kS3,
     .set = [](MountConfig& c, const Value& v) { c.remote.s3.region = v.text; },
     .help = "S3 region"},
    {.name = "endpoint", .kind = Kind::kText, .meta = "URL",
     .def = "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS's", .stores = Stores::kBucket,
     .set = [](MountConfig& c, const Value& v) { c.remote.s3.endpoint = v.text; },
     .help = "S3 endpoint for MinIO, RGW, ..., or Azure's for Azurite or a sovereign cloud"},
    {.name = "profile", .kind = Kind::kText, .meta = "P", .def = "AWS_PROFILE, else \"default\"",
     .stores = Stores::kS3,
     .set = [](MountConfig& c, const Value& v) { c.remote.s3.profile = v.text; },
     .help = "profile of ~/.aws/credentials and ~/.aws/config"},
    {.name = "credentials_file", .kind = Kind::kPath, .meta = "F",
     .def = "AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials", .stores = Stores::kS3,
     .set = [](MountConfig& c, const Value& v) { c.remote.s3.credentials_file = v.text; },
     .help = "the AWS credentials file; for fstab and systemd, where HOME may be unset"},
    {.name = "config_file", .kind = Kind::kPath, .meta = "F",
     .def = "AWS_CONFIG_FILE, ~/.aws/config", .stores = Stores::kS3,
     .set = [](MountConfig& c, const Value& v) { c.remote.s3.config_file = v.text; },
     .help = "the AWS config file"},
    // It becomes the host name ACCOUNT.blob.core.windows.net.
    {.name = "account", .kind = Kind::kText, .meta = "NAME", .lo = 3, .hi = 24,
     .values = "abcdefghijklmnopqrstuvwxyz0123456789",
     .what = "an Azure storage account name (3..24 lowercase letters and digits)",
     .def = "AZURE_STORAGE_ACCOUNT", .stores = Stores::kAzure,
     .set = [](MountConfig& c, const Value& v) { c.remote.azure_account = v.text; },
     .help = "Azure storage account of an az:// store, 3..24 lowercase letters and digits"},
    {.name = "sas_file", .kind = Kind::kPath, .meta = "F", .stores = Stores::kAzure,
     .set = [](MountConfig& c, const Value& v) { c.remote.sas_file = v.text; },
     .help = "an Azure SAS token in a file, read again when it changes"},
    {.name = "query_file", .kind = Kind::kPath, .meta = "F", .stores = Stores::kHttp,
     .env = "PCRFS_QUERY_FILE",
     .set = [](MountConfig& c, const Value& v) { c.remote.query_file = v.text; },
     .help = "a signed URL's query (a CDN token) in a file, added to every request and read "
             "again when it changes"},
    {.name = "no_sign", .kind = Kind::kFlag, .stores = Stores::kBucket,
     .set = [](MountConfig& c, const Value&) { c.remote.s3.no_sign = true; },
     .help = "anonymous requests (a public bucket or container)"},
    {.name = "addressing", .kind = Kind::kEnum, .values = "path|virtual",
     .def = "path for -o endpoint", .stores = Stores::kS3,
     .set = [](MountConfig& c, const Value& v) {
       c.remote.s3.addressing = v.n == 0 ? S3Options::Addressing::kPath
                                         : S3Options::Addressing::kVirtualHost;
     },
     .help = "S3 addressing"},
    {.name = "header_file", .kind = Kind::kPath, .meta = "F", .stores = Stores::kRemote,
     .env = "PCRFS_HEADER_FILE",
     .set = [](MountConfig& c, const Value& v) { c.remote.headers_file = v.text; },
     .help = "\"Name: value\" lines sent with every request (a token)"},
    {.name = "ca_file", .kind = Kind::kPath, .meta = "F", .stores = Stores::kRemote,
     .env = "PCRFS_CA_FILE",
     .set = [](MountConfig& c, const Value& v) { c.remote.ca_file = v.text; },
     .help = "PEM CA bundle instead of the system's"},
    {.name = "cache_dir", .kind = Kind::kPath, .meta = "D", .what = "a folder name",
     .def = "/var/cache/pcrfs/HASH for root, else ~/.cache/pcrfs/HASH",
     .stores = Stores::kRemoteOrBaseline, .env = "PCRFS_CACHE_DIR",
     .set = [](MountConfig& c, const Value& v) { c.remote.cache_dir = v.text; },
     .help = "where manifest.json and index.lmdb are kept (and the disk cache)"},
    {.name = "remote_timeout", .kind = Kind::kInt, .meta = "S", .lo = 1, .hi = 3600,
     .what = "seconds", .def = "30", .stores = Stores::kRemote, .env = "PCRFS_REMOTE_TIMEOUT",
     .set = [](MountConfig& c, const Value& v) { c.remote.timeout = std::chrono::seconds(v.n); },
     .help = "a read fails with EIO after S seconds of retries"},
    {.name = "remote_connections", .kind = Kind::kInt, .meta = "N", .lo = 1, .hi = 1024,
     .def = "192", .stores = Stores::kRemote,
     .set = [](MountConfig& c, const Value& v) { c.remote.connections = static_cast<int>(v.n); },
     .help = "connections per host (reads waited for go first, fetches ahead keep 4)"},
    {.name = "remote_cache", .kind = Kind::kSize, .meta = "SIZE", .lo = kMiB, .hi = kTiB,
     .what = "256M", .def = "256M", .stores = Stores::kRemote,
     .set = [](MountConfig& c, const Value& v) { c.remote.memory_cache = v.n; },
     .help = "memory for fetched record bytes"},
    {.name = "disk_cache", .kind = Kind::kSize, .meta = "SIZE|auto", .hi = 64 * kTiB,
     .values = "auto", .what = "20G", .zero = "none", .def = "0",
     .stores = Stores::kRemoteOrBaseline,
     .set =
         [](MountConfig& c, const Value& v) {
           c.remote.disk_cache = v.n;
           c.disk_cache_auto = v.text == "auto";
         },
     .help = "keep fetched record bytes (and form=baseline's files) on disk under cache_dir "
             "(auto: room for the mounted level, at most half the free space there)"},
    {.name = "fetch_align", .kind = Kind::kSize, .meta = "SIZE", .hi = 64 * kMiB,
     .what = "256K", .zero = "exact ranges", .def = "0", .stores = Stores::kRemote,
     .set = [](MountConfig& c, const Value& v) { c.remote.fetch_align = v.n; },
     .help = "widen every ranged GET of a record to multiples of SIZE: a cache tier's slice "
             "(pcr-cache-tier prints it), so no two GETs wait on one slice"},
    {.name = "disk_cache_fill", .kind = Kind::kFlag, .stores = Stores::kRemote,
     .set = [](MountConfig& c, const Value&) { c.remote.disk_cache_fill = true; },
     .help = "fetch the mounted level of every record into the disk cache in the background at "
             "mount"},
};
// clang-format on

// "1M", "64T", "0": the largest unit that divides v.
std::string FormatSize(uint64_t v) {
  static constexpr std::pair<int, const char*> kUnits[] = {
      {40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}};
  for (const auto& [shift, unit] : kUnits) {
    if (v != 0 && v % (uint64_t{1} << shift) == 0) return std::to_string(v >> shift) + unit;
  }
  return std::to_string(v);
}

std::string Range(const Option& o) {
  return o.kind == Kind::kSize ? FormatSize(o.lo) + ".." + FormatSize(o.hi)
                               : std::to_string(o.lo) + ".." + std::to_string(o.hi);
}

// "yes|no|auto" -> {"yes", "no", "auto"}.
std::vector<std::string_view> Choices(std::string_view values) {
  std::vector<std::string_view> choices;
  for (size_t start = 0, end; start <= values.size(); start = end + 1) {
    end = std::min(values.find('|', start), values.size());
    choices.push_back(values.substr(start, end - start));
  }
  return choices;
}

// What a value of `o` must be, after "expected " in an error about `text`.
std::string Expected(const Option& o, std::string_view text) {
  const std::string what(o.what);
  switch (o.kind) {
    case Kind::kInt:
      return (what.empty() ? "" : what + ", ") + "an integer in " + Range(o);
    case Kind::kSize:
      return "a size in " + Range(o) + ", e.g. " + what +
             (o.zero.empty() ? "" : " (0: " + std::string(o.zero) + ")") +
             (o.values.empty() ? "" : ", or " + std::string(o.values));
    case Kind::kFraction:
      return "a number in (0, 1], e.g. " + what;
    case Kind::kEnum: {
      const std::vector<std::string_view> choices = Choices(o.values);
      std::string list;
      for (size_t i = 0; i < choices.size(); ++i) {
        (list += i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") += choices[i];
      }
      return list;
    }
    case Kind::kText:
      return text.empty() ? "a value" : what;
    case Kind::kListen:
      return "PORT or ADDR:PORT, ADDR an IP address or localhost ([::1]:PORT for IPv6), PORT "
             "in 0..65535";
    case Kind::kLabel:
      return "NAME=VALUE, NAME of letters, digits and _ (not first a digit, not __...), not "
             "mount";
    default:
      return what.empty() ? "a file name" : what;
  }
}

std::optional<uint64_t> ParseDecimal(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return {};
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno != 0) return {};
  return v;
}

std::optional<double> ParseFraction(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  const bool starts_as_number =
      !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.');
  if (!starts_as_number || errno != 0 || *end != '\0' || !(x > 0 && x <= 1)) return {};
  return x;
}

// -o metrics's value as "HOST:PORT" (IPv6 as "[ADDR]:PORT"), 127.0.0.1 for a port alone;
// nullopt if it is not of that form.
std::optional<std::string> ListenAddress(const std::string& text) {
  std::string host = "127.0.0.1", port = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      in6_addr a6;
      if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) != 1) return {};
    } else {
      in_addr a4;
      if (host != "localhost" && inet_pton(AF_INET, host.c_str(), &a4) != 1) return {};
    }
  }
  auto n = ParseDecimal(port);
  if (!n || *n > 65535 || port.size() > 5) return {};
  return host + ":" + std::to_string(*n);
}

// -o metrics_label's NAME=VALUE: a label name Prometheus accepts, other than the one pcrfs sets.
bool IsLabelAssignment(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  const std::string_view name = text.substr(0, eq);
  if (name == "mount" || name.substr(0, 2) == "__" ||
      std::isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Checks `text` as a value of `o` and sets it in *c; `label` is "-o NAME" or the variable.
Status ApplyValue(const Option& o, std::string_view label, const std::string& text,
                  MountConfig* c) {
  Value v{.text = text};
  bool ok = true;
  switch (o.kind) {
    case Kind::kInt:
    case Kind::kSize: {
      if (o.kind == Kind::kSize && !o.values.empty()) {
        const std::vector<std::string_view> words = Choices(o.values);
        // A word (disk_cache=auto): v.n 0, the setter reads v.text.
        if (std::find(words.begin(), words.end(), text) != words.end()) break;
      }
      auto n = o.kind == Kind::kInt ? ParseDecimal(text) : ParseSize(text);
      ok = n && *n >= o.lo && *n <= o.hi;
      v.n = n.value_or(0);
      break;
    }
    case Kind::kFraction: {
      auto x = ParseFraction(text);
      ok = x.has_value();
      v.x = x.value_or(0);
      break;
    }
    case Kind::kEnum: {
      const std::vector<std::string_view> choices = Choices(o.values);
      v.n = std::find(choices.begin(), choices.end(), text) - choices.begin();
      ok = v.n < choices.size();
      break;
    }
    case Kind::kText:
    case Kind::kPath:
      ok = !text.empty() && (o.hi == 0 || (text.size() >= o.lo && text.size() <= o.hi &&
                                           text.find_first_not_of(o.values) == std::string::npos));
      break;
    case Kind::kListen: {
      auto address = ListenAddress(text);
      ok = address.has_value();
      if (ok) {
        Value normalized{.text = *address};
        o.set(*c, normalized);
        return Status::OK();
      }
      break;
    }
    case Kind::kLabel:
      ok = IsLabelAssignment(text);
      break;
    default:
      break;
  }
  if (!ok) {
    return Status::InvalidArgument(std::string(label) + "=" + text + ": expected " +
                                   Expected(o, text));
  }
  o.set(*c, v);
  return Status::OK();
}

// A quarter of the machine's memory.
uint64_t DefaultPushBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4;
}

// Whether an option for `stores` fits STORE; else what it is for, for the error.
std::optional<std::string_view> NotFor(Stores stores, const std::string& store) {
  const bool azure = IsAzureUrl(store);
  const bool s3 =
      !azure && ParseUrl(store).map([](const Url& u) { return u.is_s3(); }).value_or(false);
  switch (stores) {
    case Stores::kBucket:
      if (!s3 && !azure) return "s3://, gs:// and Azure stores";
      break;
    case Stores::kS3:
      if (!s3) return "s3:// and gs:// stores";
      break;
    case Stores::kAzure:
      if (!azure) return "Azure stores";
      break;
    case Stores::kHttp:
      if (s3 || azure) return "http:// and https:// stores";
      break;
    default:
      break;
  }
  return std::nullopt;
}

// Wraps "    -o name=META" and its help into lines of at most 80 characters, the help from
// column 27.
void AppendHelp(const std::string& head, std::string_view text, std::string* out) {
  constexpr size_t kColumn = 27, kWidth = 80;
  std::string line = head + std::string(head.size() + 2 > kColumn ? 2 : kColumn - head.size(), ' ');
  bool empty = true;  // no word on this line yet
  while (!text.empty()) {
    const std::string_view word = text.substr(0, text.find(' '));
    text.remove_prefix(std::min(text.size(), word.size() + 1));
    if (!empty && line.size() + 1 + word.size() > kWidth) {
      *out += line + "\n";
      line.assign(kColumn, ' ');
      empty = true;
    }
    line += empty ? "" : " ";
    line += word;
    empty = false;
  }
  *out += line + "\n";
}

}  // namespace

std::optional<uint64_t> ParseSize(std::string_view text) {
  const size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || text.empty()) return std::nullopt;
  auto v = ParseDecimal(std::string(text.substr(0, digits)));
  if (!v) return std::nullopt;
  const std::string_view suffix = digits == std::string_view::npos ? "" : text.substr(digits);
  int shift = 0;
  if (!suffix.empty()) {
    const size_t unit = std::string_view("KMGT").find(
        static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
    if (unit == std::string_view::npos) return std::nullopt;
    shift = 10 * static_cast<int>(unit + 1);
    const std::string_view rest = suffix.substr(1);
    if (!rest.empty() && rest != "B" && rest != "iB") return std::nullopt;
  }
  if (*v > (UINT64_MAX >> shift)) return std::nullopt;
  return *v << shift;
}

std::vector<std::string> MountOptionTemplates() {
  std::vector<std::string> templates;
  for (const Option& o : kOptions) {
    templates.push_back(o.kind == Kind::kLibfuse ? ""
                        : o.kind == Kind::kFlag  ? std::string(o.name)
                                                 : std::string(o.name) + "=%s");
  }
  return templates;
}

uint64_t PieceCacheBytes(const MountConfig& config, bool remote) {
  if (remote && !config.cache_size_given && config.fs.form == ServedForm::kProgressive) {
    return MountConfig::kRemotePieceCacheBytes;
  }
  return config.fs.cache_bytes;
}

Status ApplyMountOptions(const std::map<size_t, std::string>& given, MountConfig* c) {
  c->fs.push_bytes = DefaultPushBytes();
  const bool remote = IsRemoteUrl(c->store);
  for (const auto& [i, text] : given) {
    const Option& o = kOptions[i];
    const std::string label = "-o " + std::string(o.name);
    if (!remote && o.stores != Stores::kAny && o.stores != Stores::kRemoteOrBaseline) {
      return Status::InvalidArgument(label +
                                     ": only for a remote store (an http://, https:// or s3:// "
                                     "URL), and " +
                                     c->store + " is a local path");
    }
    if (o.kind == Kind::kLabel) {  // repeatable: the values joined with '\0'
      for (size_t start = 0, end; start <= text.size(); start = end + 1) {
        end = std::min(text.find('\0', start), text.size());
        PCRFS_RETURN_IF_ERROR(ApplyValue(o, label, text.substr(start, end - start), c));
      }
    } else {
      PCRFS_RETURN_IF_ERROR(ApplyValue(o, label, text, c));
    }
    if (auto wanted = NotFor(o.stores, c->store)) {
      return Status::InvalidArgument(label + ": only for " + std::string(*wanted));
    }
  }
  if (c->msssim && c->fs.fixed_level != 0) {
    return Status::InvalidArgument("-o msssim and -o scans both choose the level; give one");
  }
  std::set<std::string_view> label_names;
  for (const auto& [name, value] : c->metrics_labels) {
    if (!label_names.insert(name).second) {
      return Status::InvalidArgument("-o metrics_label=" + name + "=" + value + ": label " + name +
                                     " given twice");
    }
  }
  if (c->metrics_address.empty() && c->metrics_file.empty() && !c->metrics_labels.empty()) {
    return Status::InvalidArgument("-o metrics_label: needs -o metrics or -o metrics_file");
  }
  if (!remote && c->fs.form != ServedForm::kBaseline) {
    for (const auto& [i, text] : given) {
      if (kOptions[i].stores == Stores::kRemoteOrBaseline) {
        return Status::InvalidArgument(
            "-o " + std::string(kOptions[i].name) +
            ": only for a remote store, or with -o form=baseline (whose files it keeps on "
            "disk), and " +
            c->store + " is a local path");
      }
    }
  }
  if (c->remote.disk_cache_fill && c->remote.disk_cache == 0 && !c->disk_cache_auto) {
    return Status::InvalidArgument("-o disk_cache_fill: needs -o disk_cache=SIZE (or auto)");
  }
  return Status::OK();
}

Result<MountConfig> ParseStoreOptions(
    const std::string& store, const std::vector<std::pair<std::string, std::string>>& options) {
  MountConfig config;
  config.store = store;
  std::map<size_t, std::string> given;
  for (const auto& option : options) {
    const std::string& name = option.first;
    const std::string& value = option.second;
    const auto* o = std::find_if(std::begin(kOptions), std::end(kOptions),
                                 [&name](const Option& x) { return x.name == name; });
    if (o == std::end(kOptions) || o->kind == Kind::kRetired) {
      return Err(Status::InvalidArgument("-o " + name + ": no such option"));
    }
    if (o->mount_only) {
      return Err(Status::InvalidArgument("-o " + name + ": only for a mount"));
    }
    const size_t i = static_cast<size_t>(o - std::begin(kOptions));
    auto [it, first] = given.try_emplace(i, value);
    if (!first) it->second = value;
  }
  PCRFS_RETURN_ERR_IF_ERROR(ApplyMountOptions(given, &config));
  // auto sizes the disk tier for the mounted level from the daemon's view of the cache folder
  // (fs/daemon.cc's SizeCaches), which a reader without a daemon does not take.
  if (config.disk_cache_auto) {
    return Err(Status::InvalidArgument("-o disk_cache=auto: only for a mount (give a size)"));
  }
  config.fs.push_bytes = 0;  // nothing to push into: no kernel page cache of a mount
  config.hints = false;
  return config;
}

std::string MountOptionsHelp(bool remote_stores) {
  std::string out;
  for (const Option& o : kOptions) {
    if (o.kind == Kind::kRetired || (o.stores != Stores::kAny) != remote_stores) continue;
    const std::string_view meta = o.kind == Kind::kEnum && o.meta.empty() ? o.values : o.meta;
    std::string text(o.help);
    if (o.kind == Kind::kInt || o.kind == Kind::kSize) text += ", " + Range(o);
    std::string note;
    if (!o.def.empty()) {
      note = (std::isdigit(static_cast<unsigned char>(o.def[0])) ? "default " : "default: ") +
             std::string(o.def);
    }
    if (!o.zero.empty()) {
      note += (o.def == "0" ? ": " : note.empty() ? "0: " : "; 0: ") + std::string(o.zero);
    }
    if (!note.empty()) text += " (" + note + ")";
    AppendHelp("    -o " + std::string(o.name) + (meta.empty() ? "" : "=") + std::string(meta),
               text, &out);
  }
  return out;
}

bool MountOptionRepeats(size_t i) {
  return i < std::size(kOptions) && kOptions[i].kind == Kind::kLabel;
}

std::vector<std::string_view> DocumentedMountOptions() {
  std::vector<std::string_view> names;
  for (const Option& o : kOptions) {
    if (o.kind != Kind::kRetired) names.push_back(o.name);
  }
  return names;
}

Result<RemoteOptions> RemoteOptionsFromEnv(const EnvLookup& env) {
  MountConfig c;
  for (const Option& o : kOptions) {
    if (o.env == nullptr) continue;
    const char* v = env ? env(o.env) : std::getenv(o.env);
    if (v == nullptr || (*v == '\0' && (o.kind == Kind::kText || o.kind == Kind::kPath))) continue;
    PCRFS_RETURN_ERR_IF_ERROR(ApplyValue(o, o.env, v, &c));
  }
  return c.remote;
}

}  // namespace pcrfs::fs
