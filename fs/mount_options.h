// The daemon's command line (`pcrfs STORE MOUNTPOINT [options]`) parsed into a value, apart
// from mounting: nothing here touches the store, the mount point or the kernel, so the parser is
// unit-tested without a mount (fs/mount_options_test.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fs/filesystem.h"
#include "location/store_location.h"

namespace pcrfs::fs {

// The valid ranges of the numeric options, named in the errors and in --help.
inline constexpr unsigned kMaxThreads = 256;
inline constexpr unsigned kMaxReadaheadFiles = 1024;
inline constexpr uint64_t kMinCacheBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxCacheBytes = uint64_t{1} << 40;
inline constexpr uint64_t kMaxIndexRss = uint64_t{1} << 40;
inline constexpr uint64_t kMaxKernelReadahead = uint64_t{16} << 20;
inline constexpr uint64_t kMaxRemoteTimeoutSeconds = 3600;
inline constexpr uint64_t kMaxRemoteConnections = 256;
inline constexpr uint64_t kMaxPushBytes = uint64_t{1} << 40;
inline constexpr uint64_t kMaxDiskCacheBytes = uint64_t{64} << 40;
// uid_t and gid_t are 32 bits; (uid_t)-1 means "no change" to chown and is no owner.
inline constexpr uint64_t kMaxId = 4294967294u;

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
  // A remote STORE's options (-o region, endpoint, profile, credentials_file, config_file,
  // account, no_sign, addressing, header_file, ca_file, cache_dir, remote_timeout,
  // remote_connections, ...); refused for a local STORE.
  RemoteOptions remote;
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

// "256M", "1G", "4096", "64KiB" -> bytes; nullopt for anything else or an overflow.
std::optional<uint64_t> ParseSize(std::string_view text);

}  // namespace pcrfs::fs
