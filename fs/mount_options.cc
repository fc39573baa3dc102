#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include "fs/mount_options.h"

#include <fuse3/fuse_opt.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <utility>

#include "remote/azure.h"
#include "remote/url.h"

namespace pcrfs::fs {
namespace {

// The -o options pcrfs defines. Each is taken as text and checked after parsing, because
// fuse_opt's own "%u" accepts "3x" and wraps "-5".
enum Key : int {
  kScans = 100,
  kThreads,
  kCacheSize,
  kUid,
  kGid,
  kReadahead,
  kPrefetch,
  kPrefetchProbe,
  kPrefetchChunk,
  kMsssim,
  kReaddirplus,
  kPush,
  kIndexRss,
  kKernelReadahead,
  kRegion,
  kEndpoint,
  kProfile,
  kCredentialsFile,
  kConfigFile,
  kAccount,
  kSasFile,
  kNoSign,
  kAddressing,
  kHeaderFile,
  kCaFile,
  kCacheDir,
  kRemoteTimeout,
  kRemoteConnections,
  kRemoteCache,
  kDiskCache,
  kDiskCacheFill,
  kLogFile,
  kReadWrite,
  kHelp,
  kVersion,
};

const fuse_opt kOptionSpecs[] = {FUSE_OPT_KEY("scans=%s", kScans),
                                 FUSE_OPT_KEY("threads=%s", kThreads),
                                 FUSE_OPT_KEY("cache_size=%s", kCacheSize),
                                 FUSE_OPT_KEY("uid=%s", kUid),
                                 FUSE_OPT_KEY("gid=%s", kGid),
                                 FUSE_OPT_KEY("readahead=%s", kReadahead),
                                 FUSE_OPT_KEY("prefetch=%s", kPrefetch),
                                 FUSE_OPT_KEY("prefetch_probe=%s", kPrefetchProbe),
                                 FUSE_OPT_KEY("prefetch_chunk=%s", kPrefetchChunk),
                                 FUSE_OPT_KEY("msssim=%s", kMsssim),
                                 FUSE_OPT_KEY("readdirplus=%s", kReaddirplus),
                                 FUSE_OPT_KEY("push=%s", kPush),
                                 FUSE_OPT_KEY("index_rss=%s", kIndexRss),
                                 FUSE_OPT_KEY("kernel_readahead=%s", kKernelReadahead),
                                 FUSE_OPT_KEY("region=%s", kRegion),
                                 FUSE_OPT_KEY("endpoint=%s", kEndpoint),
                                 FUSE_OPT_KEY("profile=%s", kProfile),
                                 FUSE_OPT_KEY("credentials_file=%s", kCredentialsFile),
                                 FUSE_OPT_KEY("config_file=%s", kConfigFile),
                                 FUSE_OPT_KEY("account=%s", kAccount),
                                 FUSE_OPT_KEY("sas_file=%s", kSasFile),
                                 FUSE_OPT_KEY("no_sign", kNoSign),
                                 FUSE_OPT_KEY("addressing=%s", kAddressing),
                                 FUSE_OPT_KEY("header_file=%s", kHeaderFile),
                                 FUSE_OPT_KEY("ca_file=%s", kCaFile),
                                 FUSE_OPT_KEY("cache_dir=%s", kCacheDir),
                                 FUSE_OPT_KEY("remote_timeout=%s", kRemoteTimeout),
                                 FUSE_OPT_KEY("remote_connections=%s", kRemoteConnections),
                                 FUSE_OPT_KEY("remote_cache=%s", kRemoteCache),
                                 FUSE_OPT_KEY("disk_cache=%s", kDiskCache),
                                 FUSE_OPT_KEY("disk_cache_fill", kDiskCacheFill),
                                 FUSE_OPT_KEY("log_file=%s", kLogFile),
                                 FUSE_OPT_KEY("rw", kReadWrite),
                                 FUSE_OPT_KEY("-h", kHelp),
                                 FUSE_OPT_KEY("--help", kHelp),
                                 FUSE_OPT_KEY("-V", kVersion),
                                 FUSE_OPT_KEY("--version", kVersion),
                                 FUSE_OPT_END};

struct ParseState {
  MountConfig* config;
  std::map<int, std::string> values;  // by key; a repeated option: the last one counts
  std::string error;                  // the first problem found while parsing
  int nonopt_seen = 0;
};

// fuse_opt's callback: 0 consumes the argument, 1 keeps it for libfuse, -1 stops.
int OptProc(void* data, const char* arg, int key, fuse_args*) {
  auto* st = static_cast<ParseState*>(data);
  const std::string_view a(arg);
  switch (key) {
    case FUSE_OPT_KEY_NONOPT:
      if (st->nonopt_seen++ == 0) {
        st->config->store = a;
        return 0;
      }
      if (st->nonopt_seen == 2) st->config->mountpoint = a;
      return 1;
    case FUSE_OPT_KEY_OPT:
      return 1;
    case kReadWrite:
      st->error = "-o rw: the store is read-only (pcrfs always mounts ro)";
      return -1;
    case kHelp:
      st->config->show_help = true;
      return 1;
    case kVersion:
      st->config->show_version = true;
      return 1;
    case kNoSign:
      st->values[key] = "";
      return 0;
    default:
      st->values[key] = std::string(a.substr(a.find('=') + 1));
      return 0;
  }
}

Status Bad(std::string_view option, std::string_view value, std::string_view expected) {
  return Status::InvalidArgument("-o " + std::string(option) + "=" + std::string(value) +
                                 ": expected " + std::string(expected));
}

// Decimal digits only, in [lo, hi].
Result<uint64_t> ParseInteger(std::string_view option, const std::string& text, uint64_t lo,
                              uint64_t hi) {
  const std::string range = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return Err(Bad(option, text, range));
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno != 0 || v < lo || v > hi) return Err(Bad(option, text, range));
  return static_cast<uint64_t>(v);
}

// A quarter of the machine's memory.
uint64_t DefaultPushBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4;
}

// A size in [lo, hi].
Result<uint64_t> ParseSizeOption(std::string_view option, const std::string& text, uint64_t lo,
                                 uint64_t hi, std::string_view expected) {
  auto size = ParseSize(text);
  if (!size || *size < lo || *size > hi) return Err(Bad(option, text, expected));
  return *size;
}

Status ApplyLevelOptions(const ParseState& st, MountConfig* c) {
  if (auto it = st.values.find(kScans); it != st.values.end()) {
    auto v = ParseInteger("scans", it->second, 1, index::kNumGroups);
    if (!v) return v.error();
    c->fs.fixed_level = static_cast<int>(*v);
  }
  if (auto it = st.values.find(kMsssim); it != st.values.end()) {
    const std::string& text = it->second;
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(text.c_str(), &end);
    const bool starts_as_number =
        !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.');
    if (!starts_as_number || errno != 0 || *end != '\0' || !(x > 0 && x <= 1)) {
      return Bad("msssim", text, "a number in (0, 1], e.g. 0.95");
    }
    if (c->fs.fixed_level != 0) {
      return Status::InvalidArgument("-o msssim and -o scans both choose the level; give one");
    }
    c->msssim = x;
  }
  return Status::OK();
}

Status ApplyNumericOptions(const ParseState& st, MountConfig* c) {
  auto find = [&st](Key k) -> const std::string* {
    auto it = st.values.find(k);
    return it == st.values.end() ? nullptr : &it->second;
  };
  if (const std::string* t = find(kThreads)) {
    auto v = ParseInteger("threads", *t, 1, kMaxThreads);
    if (!v) return v.error();
    c->threads = static_cast<unsigned>(*v);
  }
  if (const std::string* t = find(kUid)) {
    auto v = ParseInteger("uid", *t, 0, kMaxId);
    if (!v) return v.error();
    c->uid = static_cast<uid_t>(*v);
  }
  if (const std::string* t = find(kGid)) {
    auto v = ParseInteger("gid", *t, 0, kMaxId);
    if (!v) return v.error();
    c->gid = static_cast<gid_t>(*v);
  }
  if (const std::string* t = find(kReadahead)) {
    auto v = ParseInteger("readahead", *t, 0, kMaxReadaheadFiles);
    if (!v) return v.error();
    c->fs.readahead_slots = static_cast<uint32_t>(*v);
  }
  if (const std::string* t = find(kPrefetch)) {
    auto v = ParseInteger("prefetch", *t, 0, 100);
    if (!v) return Bad("prefetch", *t, "a percentage, an integer in 0..100");
    c->fs.prefetch_percent = static_cast<uint32_t>(*v);
  }
  if (find(kPrefetchProbe) != nullptr || find(kPrefetchChunk) != nullptr) {
    c->retired_options = true;
  }
  return Status::OK();
}

Status ApplySizeOptions(const ParseState& st, MountConfig* c) {
  if (auto it = st.values.find(kCacheSize); it != st.values.end()) {
    auto v = ParseSizeOption("cache_size", it->second, kMinCacheBytes, kMaxCacheBytes,
                             "a size in 1M..1T, e.g. 256M");
    if (!v) return v.error();
    c->fs.cache_bytes = *v;
  }
  if (auto it = st.values.find(kIndexRss); it != st.values.end()) {
    auto v = ParseSizeOption("index_rss", it->second, 0, kMaxIndexRss,
                             "a size in 0..1T, e.g. 16M (0: never unmap)");
    if (!v) return v.error();
    c->index_rss = *v;
  }
  if (auto it = st.values.find(kKernelReadahead); it != st.values.end()) {
    auto v = ParseSizeOption("kernel_readahead", it->second, 0, kMaxKernelReadahead,
                             "a size in 0..16M, e.g. 1M (0: the kernel's default)");
    if (!v) return v.error();
    c->kernel_readahead = *v;
  }
  if (auto it = st.values.find(kPush); it != st.values.end()) {
    auto v =
        ParseSizeOption("push", it->second, 0, kMaxPushBytes, "a size in 0..1T, e.g. 4G (0: off)");
    if (!v) return v.error();
    c->fs.push_bytes = *v;
  } else {
    c->fs.push_bytes = DefaultPushBytes();
  }
  if (auto it = st.values.find(kReaddirplus); it != st.values.end()) {
    const std::string& mode = it->second;
    if (mode == "yes") {
      c->fs.readdirplus = ReaddirPlus::kAlways;
    } else if (mode == "no") {
      c->fs.readdirplus = ReaddirPlus::kNever;
    } else if (mode == "auto") {
      c->fs.readdirplus = ReaddirPlus::kAuto;
    } else {
      return Bad("readdirplus", mode, "yes, no or auto");
    }
  }
  return Status::OK();
}

// An Azure storage account's name: 3 to 24 lowercase letters and digits (it becomes the host
// name ACCOUNT.blob.core.windows.net).
bool IsAzureAccountName(const std::string& v) {
  return v.size() >= 3 && v.size() <= 24 &&
         v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos;
}

// One remote option, `name` being key's name; REQUIRES: v non-empty unless key takes no value.
Status ApplyRemoteOption(Key key, const char* name, const std::string& v, RemoteOptions* out) {
  RemoteOptions& r = *out;
  switch (key) {
    case kRegion:
      r.s3.region = v;
      break;
    case kEndpoint:
      r.s3.endpoint = v;
      break;
    case kProfile:
      r.s3.profile = v;
      break;
    case kCredentialsFile:
      r.s3.credentials_file = v;
      break;
    case kConfigFile:
      r.s3.config_file = v;
      break;
    case kAccount:
      if (!IsAzureAccountName(v)) {
        return Bad(name, v, "an Azure storage account name (3..24 lowercase letters and digits)");
      }
      r.azure_account = v;
      break;
    case kSasFile:
      r.sas_file = v;
      break;
    case kNoSign:
      r.s3.no_sign = true;
      break;
    case kAddressing:
      if (v == "path") {
        r.s3.addressing = S3Options::Addressing::kPath;
      } else if (v == "virtual") {
        r.s3.addressing = S3Options::Addressing::kVirtualHost;
      } else {
        return Bad(name, v, "path or virtual");
      }
      break;
    case kHeaderFile:
      r.headers_file = v;
      break;
    case kCaFile:
      r.ca_file = v;
      break;
    case kCacheDir:
      r.cache_dir = v;
      break;
    case kRemoteTimeout: {
      auto secs = ParseInteger(name, v, 1, kMaxRemoteTimeoutSeconds);
      if (!secs) return secs.error();
      r.timeout = std::chrono::seconds(*secs);
      break;
    }
    case kRemoteConnections: {
      auto n = ParseInteger(name, v, 1, kMaxRemoteConnections);
      if (!n) return n.error();
      r.connections = static_cast<int>(*n);
      break;
    }
    case kRemoteCache: {
      auto n =
          ParseSizeOption(name, v, kMinCacheBytes, kMaxCacheBytes, "a size in 1M..1T, e.g. 256M");
      if (!n) return n.error();
      r.memory_cache = *n;
      break;
    }
    case kDiskCache: {
      auto n =
          ParseSizeOption(name, v, 0, kMaxDiskCacheBytes, "a size in 0..64T, e.g. 20G (0: none)");
      if (!n) return n.error();
      r.disk_cache = *n;
      break;
    }
    case kDiskCacheFill:
      r.disk_cache_fill = true;
      break;
    default:
      break;
  }
  return Status::OK();
}

// Options that only an s3:// store takes, and a disk cache fill without a disk cache.
Status CheckRemoteOptionsFit(const MountConfig& c, bool remote) {
  const RemoteOptions& r = c.remote;
  if (r.disk_cache_fill && r.disk_cache == 0) {
    return Status::InvalidArgument("-o disk_cache_fill: needs -o disk_cache=SIZE");
  }
  if (!remote) return Status::OK();  // ApplyRemoteOptions refuses them all for a local store
  const bool azure = IsAzureUrl(c.store);
  const bool bucket =
      azure || ParseUrl(c.store).map([](const Url& u) { return u.is_s3(); }).value_or(false);
  if (!bucket && (!r.s3.endpoint.empty() || r.s3.no_sign)) {
    return Status::InvalidArgument(
        "-o endpoint and no_sign are for s3://, gs:// and Azure stores only");
  }
  if (!azure && (!r.azure_account.empty() || !r.sas_file.empty())) {
    return Status::InvalidArgument("-o account and sas_file are for Azure stores only");
  }
  if ((azure || !bucket) && (!r.s3.region.empty() || !r.s3.profile.empty() ||
                             r.s3.addressing != S3Options::Addressing::kAuto ||
                             !r.s3.credentials_file.empty() || !r.s3.config_file.empty())) {
    return Status::InvalidArgument(
        "-o region, profile, addressing, credentials_file and config_file are for s3:// and "
        "gs:// stores only");
  }
  return Status::OK();
}

// The options of a remote store. Strings must be non-empty; every one of them is refused with a
// local STORE (it would be ignored silently).
Status ApplyRemoteOptions(const ParseState& st, MountConfig* c) {
  static const std::pair<Key, const char*> kNames[] = {{kRegion, "region"},
                                                       {kEndpoint, "endpoint"},
                                                       {kProfile, "profile"},
                                                       {kCredentialsFile, "credentials_file"},
                                                       {kConfigFile, "config_file"},
                                                       {kAccount, "account"},
                                                       {kSasFile, "sas_file"},
                                                       {kNoSign, "no_sign"},
                                                       {kAddressing, "addressing"},
                                                       {kHeaderFile, "header_file"},
                                                       {kCaFile, "ca_file"},
                                                       {kCacheDir, "cache_dir"},
                                                       {kRemoteTimeout, "remote_timeout"},
                                                       {kRemoteConnections, "remote_connections"},
                                                       {kRemoteCache, "remote_cache"},
                                                       {kDiskCache, "disk_cache"},
                                                       {kDiskCacheFill, "disk_cache_fill"}};
  const bool remote = IsRemoteUrl(c->store);
  RemoteOptions& r = c->remote;
  for (const auto& [key, name] : kNames) {
    auto it = st.values.find(key);
    if (it == st.values.end()) continue;
    const std::string& v = it->second;
    if (!remote) {
      return Status::InvalidArgument(std::string("-o ") + name +
                                     ": only for a remote store (an http://, https:// or s3:// "
                                     "URL), and " +
                                     c->store + " is a local path");
    }
    if (key != kNoSign && key != kDiskCacheFill && v.empty()) return Bad(name, v, "a value");
    PCRFS_RETURN_IF_ERROR(ApplyRemoteOption(key, name, v, &r));
  }
  return CheckRemoteOptionsFit(*c, remote);
}

}  // namespace

std::optional<uint64_t> ParseSize(std::string_view text) {
  const size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0 || text.empty()) return std::nullopt;
  const std::string number(text.substr(0, digits));
  const std::string_view suffix = digits == std::string_view::npos ? "" : text.substr(digits);
  errno = 0;
  const unsigned long long v = std::strtoull(number.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      default:
        return std::nullopt;
    }
    const std::string_view unit = suffix.substr(1);
    if (!unit.empty() && unit != "B" && unit != "iB") return std::nullopt;
  }
  if (v > (UINT64_MAX >> shift)) return std::nullopt;
  return static_cast<uint64_t>(v) << shift;
}

Result<MountConfig> ParseMountOptions(int argc, const char* const argv[]) {
  MountConfig config;
  ParseState st{&config, {}, {}, 0};
  fuse_args args = FUSE_ARGS_INIT(argc, const_cast<char**>(argv));
  if (fuse_opt_parse(&args, &st, kOptionSpecs, OptProc) != 0) {
    fuse_opt_free_args(&args);
    // fuse_opt has printed its own reason (e.g. "-o" without a value) unless we have one.
    return Err(Status::InvalidArgument(st.error.empty() ? "invalid arguments" : st.error));
  }
  for (int i = 0; i < args.argc; ++i) config.fuse_args.emplace_back(args.argv[i]);
  fuse_opt_free_args(&args);

  if (config.show_help || config.show_version) return config;
  if (config.store.empty() || config.mountpoint.empty()) {
    return Err(Status::InvalidArgument("STORE and MOUNTPOINT are required (see pcrfs --help)"));
  }
  PCRFS_RETURN_ERR_IF_ERROR(ApplyLevelOptions(st, &config));
  PCRFS_RETURN_ERR_IF_ERROR(ApplyNumericOptions(st, &config));
  PCRFS_RETURN_ERR_IF_ERROR(ApplySizeOptions(st, &config));
  PCRFS_RETURN_ERR_IF_ERROR(ApplyRemoteOptions(st, &config));
  if (auto it = st.values.find(kLogFile); it != st.values.end()) {
    if (it->second.empty()) return Err(Bad("log_file", it->second, "a file name"));
    config.log_file = it->second;
  }
  return config;
}

}  // namespace pcrfs::fs
