// The daemon's command line (`pcrfs STORE MOUNTPOINT [options]`) parsed into a value, apart
// from mounting: nothing here touches the store, the mount point or the kernel, so the parser is
// unit-tested without a mount (fs/mount_options_test.cc).
//
// Every -o option is one entry of a table (mount_options.cc): its name, kind, range or values,
// the stores it is for, pcr's environment variable and its help. Parsing, the errors, --help and
// RemoteOptionsFromEnv are loops over that table; a test checks the README's tables against it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "fs/filesystem.h"
#include "location/store_location.h"
#include "remote/s3_config.h"

namespace pcrfs::fs {

struct MountConfig {
  std::string store;       // the first argument that is not an option
  std::string mountpoint;  // the second; also left in fuse_args for libfuse
  bool show_help = false;
  bool show_version = false;
  // fixed_level, cache and read tuning. uid and gid stay 0 here: see below.
  FsOptions fs;
  std::optional<uid_t> uid;  // unset: the mounting user's
  std::optional<gid_t> gid;
  unsigned threads = 0;  // FUSE workers; 0: 2 x cores, at least 4
  // -o cache_size was given. Else a remote store in progressive form gets a piece cache of
  // kRemotePieceCacheBytes: its range cache already holds the fetched bytes.
  bool cache_size_given = false;
  static constexpr uint64_t kRemotePieceCacheBytes = uint64_t{32} << 20;
  uint64_t index_rss = uint64_t{16} << 20;
  // The kernel's readahead window for this mount (the bdi's read_ahead_kb, which caps what
  // FUSE's max_readahead asks for: 128 KiB by default, so a large file was read in 128 KiB
  // requests, one FUSE round trip each). 0: leave the kernel's default.
  uint64_t kernel_readahead = uint64_t{1} << 20;
  std::optional<double> msssim;  // choose the level from the store's quality sample
  // -o prefetch_probe or -o prefetch_chunk was given: retired (the record scheduler sizes its
  // reads itself), accepted with any value so old fstab lines still mount, and noted.
  bool retired_options = false;
  // -o log_file: the daemon appends its messages to this file (common/log.h), opened before it
  // detaches; empty: syslog once detached.
  std::string log_file;
  // -o metrics: where the daemon serves GET /metrics, "HOST:PORT" (127.0.0.1 when only a port
  // was given; port 0: any free one); empty: not served. -o metrics_file: the file rewritten
  // every metrics_interval seconds for node_exporter's textfile collector. -o metrics_label:
  // NAME=VALUE labels of every series, in the order given (fs/metrics_server.h).
  std::string metrics_address;
  std::string metrics_file;
  unsigned metrics_interval = 15;
  std::vector<std::pair<std::string, std::string>> metrics_labels;
  // -o hints: the hint socket (fs/hint_server.h) and the filesystem's hint consumer.
  bool hints = true;
  // -o allow_other was given (libfuse's option): the hint socket is then for every user.
  bool allow_other = false;
  // A remote STORE's options (-o region, endpoint, cache_dir, ...); refused for a local STORE.
  // A mount's requests per host: a file at level k not cached is k ranged GETs sent at once
  // (one round trip), so 16 readers at level 10 keep 160 in flight (HTTP/1.1: a connection
  // each), beside the fetches ahead (RemoteFile::kSpeculativeRequests). Connections open as
  // needed. pcr's own remote reads keep RemoteOptions' default.
  static constexpr int kRemoteConnections = 192;
  RemoteOptions remote = [] {
    RemoteOptions o;
    o.connections = kRemoteConnections;
    return o;
  }();
  // -o disk_cache=auto: remote.disk_cache is 0 here, and the daemon sizes it at mount for the
  // mounted level, within the cache folder's free space (fs/cache_sizing.h).
  bool disk_cache_auto = false;
  // What libfuse parses itself (fuse_parse_cmdline, fuse_session_new): the program name, the
  // mount point, -f, -d, -s, and every -o option pcrfs does not define (allow_other, ro, ...).
  std::vector<std::string> fuse_args;
};

// Parses argv. An error is one line naming the option and what it accepts, e.g.
// "-o threads=100000: expected an integer in 1..256". Numbers are decimal digits only (no sign,
// no blanks, no trailing text) and range-checked; sizes are digits with an optional K, M, G or
// T suffix (KB, KiB: the same). `-o rw` is refused: the store is read-only. STORE and
// MOUNTPOINT are required unless --help or --version is given. Options libfuse knows are left
// to it, and an option neither knows is refused by libfuse when the session is created.
Result<MountConfig> ParseMountOptions(int argc, const char* const argv[]);

// The options of STORE read without a mount (the Python binding, python/pcrfs): NAME=VALUE
// pairs of the same table, checked by ApplyMountOptions with its errors ("-o scans=11: expected
// an integer in 1..10"; a flag's value is ignored). Refused with InvalidArgument: a name that is
// no option ("-o NAME: no such option"), an option only a mount uses ("-o threads: only for a
// mount": the FUSE session's, the kernel's, the sockets', the log's, the owner's), and
// disk_cache=auto. The config has no push and no hint socket; its mountpoint is empty.
Result<MountConfig> ParseStoreOptions(
    const std::string& store, const std::vector<std::pair<std::string, std::string>>& options);

// "256M", "1G", "4096", "64KiB" -> bytes; nullopt for anything else or an overflow.
std::optional<uint64_t> ParseSize(std::string_view text);

// --help's lines for the options of every store (remote_stores false) or of remote stores.
std::string MountOptionsHelp(bool remote_stores);

// The name of every option --help and the README describe (also allow_other and ro, which
// libfuse takes; not the retired prefetch_probe and prefetch_chunk).
std::vector<std::string_view> DocumentedMountOptions();

// A remote store's options from the environment, for `pcr` (the options that have a PCRFS_*
// variable: PCRFS_CACHE_DIR, PCRFS_HEADER_FILE, PCRFS_CA_FILE, PCRFS_REMOTE_TIMEOUT), checked
// as -o checks them; an empty string variable counts as unset. InvalidArgument naming the
// variable for a bad value. `env`: std::getenv if null.
Result<RemoteOptions> RemoteOptionsFromEnv(const EnvLookup& env = nullptr);

// For ParseMountOptions' fuse_opt glue (mount_options_fuse.cc): each option's fuse_opt template
// ("threads=%s", "no_sign"; empty for one left to libfuse), and the options given (index in
// that list -> the text after '=') checked and applied to *config, whose store is set.
std::vector<std::string> MountOptionTemplates();
// Whether option i may be given more than once (-o metrics_label): its values are then joined
// with '\0' in `given`, in the order given. Otherwise the last one counts.
bool MountOptionRepeats(size_t i);
Status ApplyMountOptions(const std::map<size_t, std::string>& given, MountConfig* config);

// The piece cache's budget: -o cache_size if given; else for a remote store in progressive form
// MountConfig::kRemotePieceCacheBytes (its range cache holds the fetched bytes already: at level
// 5 of 100k ImageNet-sized crops 291 -> 111 MiB beyond the range cache, files/s within 3%);
// else config.fs.cache_bytes (256 MiB).
uint64_t PieceCacheBytes(const MountConfig& config, bool remote);

}  // namespace pcrfs::fs
