#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include "fs/daemon.h"

#include <dirent.h>
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "index/store.h"

namespace pcrfs::fs {
namespace {

struct CliOptions {
  unsigned scans = 0;
  unsigned threads = 0;
  char* cache_size = nullptr;
  int uid = -1;
  int gid = -1;
  unsigned readahead = 64;
  unsigned prefetch = 3;
  unsigned prefetch_probe = 1;
  char* msssim = nullptr;
  char* readdirplus = nullptr;
  char* index_rss = nullptr;
  char* prefetch_chunk = nullptr;
  const char* store = nullptr;
  const char* mountpoint = nullptr;  // also left in the arguments for libfuse
  int nonopt_seen = 0;
  bool help_or_version = false;
};

#define PCRFS_OPT(t, p) \
  { t, offsetof(CliOptions, p), 1 }
const fuse_opt kOptionSpecs[] = {PCRFS_OPT("scans=%u", scans),
                                 PCRFS_OPT("threads=%u", threads),
                                 PCRFS_OPT("cache_size=%s", cache_size),
                                 PCRFS_OPT("uid=%d", uid),
                                 PCRFS_OPT("gid=%d", gid),
                                 PCRFS_OPT("readahead=%u", readahead),
                                 PCRFS_OPT("prefetch=%u", prefetch),
                                 PCRFS_OPT("prefetch_probe=%u", prefetch_probe),
                                 PCRFS_OPT("msssim=%s", msssim),
                                 PCRFS_OPT("readdirplus=%s", readdirplus),
                                 PCRFS_OPT("index_rss=%s", index_rss),
                                 PCRFS_OPT("prefetch_chunk=%s", prefetch_chunk),
                                 FUSE_OPT_END};

// Takes the first non-option argument as the store; leaves the mount point to libfuse.
int OptProc(void* data, const char* arg, int key, fuse_args*) {
  auto* o = static_cast<CliOptions*>(data);
  if (key == FUSE_OPT_KEY_NONOPT) {
    if (o->nonopt_seen++ == 0) {
      o->store = arg;
      return 0;
    }
    if (o->mountpoint == nullptr) o->mountpoint = arg;
  } else if (key == FUSE_OPT_KEY_OPT) {
    const std::string_view a(arg);
    if (a == "-h" || a == "--help" || a == "-V" || a == "--version") o->help_or_version = true;
  }
  return 1;
}

void PrintUsage(const char* prog) {
  std::printf(
      "usage: %s STORE MOUNTPOINT [options]\n"
      "\n"
      "Mounts the pcrfs store STORE read-only at MOUNTPOINT as a folder of JPEG files.\n"
      "Without -o scans, the root holds scan1 .. scan10: the whole dataset at each fidelity.\n"
      "\n"
      "pcrfs options:\n"
      "    -o scans=K             serve the dataset at level K (1..10) at the root\n"
      "    -o msssim=X            serve, at the root, the lowest level whose 5th-percentile\n"
      "                           MS-SSIM (measured by pcr build) is at least X\n"
      "    -o threads=N           FUSE worker threads (default: 2 x cores, at least 4)\n"
      "    -o cache_size=SIZE     piece cache memory cap, e.g. 256M, 1G (default 256M)\n"
      "    -o readahead=N         when a folder is read in order, fetch its next N files\n"
      "                           while the device is idle (default 64; 0 turns it off)\n"
      "    -o prefetch=P          once P%% of a folder's files have been read, fetch the\n"
      "                           rest of the folder while the device is idle (default 3;\n"
      "                           0: off)\n"
      "    -o readdirplus=MODE    no: plain listings (default), cheapest for find or a\n"
      "                           framework's walk of a huge tree; yes: listings carry every\n"
      "                           entry's attributes, so stat/open of listed files costs no\n"
      "                           lookup, but the kernel builds an inode per entry listed\n"
      "                           (~1 KiB each); auto: the kernel decides per directory\n"
      "    -o index_rss=SIZE      unmap index pages once the daemon's file-backed resident\n"
      "                           memory passes SIZE (default 16M; 0: never). They stay in\n"
      "                           the page cache.\n"
      "    -o uid=N,gid=N         owner of every file (default: the mounting user)\n"
      "    -o allow_other         let other users read (implies default_permissions)\n"
      "\n",
      prog);
}

std::optional<uint64_t> ParseSize(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text) return std::nullopt;
  uint64_t mult = 1;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      mult = 1ull << 10;
      break;
    case 'm':
    case 'M':
      mult = 1ull << 20;
      break;
    case 'g':
    case 'G':
      mult = 1ull << 30;
      break;
    default:
      return std::nullopt;
  }
  if (*end != '\0' && end[1] != '\0' && !(end[1] == 'B' || end[1] == 'i')) return std::nullopt;
  return static_cast<uint64_t>(v) * mult;
}

// Nothing is mounted over a missing, non-directory or non-empty mount point.
bool CheckMountPoint(const char* prog, const char* mnt) {
  struct stat st;
  if (::stat(mnt, &st) != 0) {
    std::fprintf(stderr, "%s: %s: mount point %s\n", prog, mnt,
                 errno == ENOENT ? "does not exist" : std::strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "%s: %s: mount point is not a directory\n", prog, mnt);
    return false;
  }
  DIR* d = ::opendir(mnt);
  if (d == nullptr) {
    std::fprintf(stderr, "%s: %s: cannot open mount point: %s\n", prog, mnt, std::strerror(errno));
    return false;
  }
  bool empty = true;
  while (struct dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  if (!empty) {
    std::fprintf(stderr, "%s: %s: mount point is not empty\n", prog, mnt);
    return false;
  }
  return true;
}

// -o msssim=X: the lowest level whose 5th-percentile MS-SSIM is at least X, from the quality
// sample pcr build stored in the manifest. Says which level it chose; 0 on error.
int ChooseLevel(const char* prog, const index::Store& store, const char* text, unsigned scans) {
  char* end = nullptr;
  const double x = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(x > 0 && x <= 1)) {
    std::fprintf(stderr, "%s: -o msssim=%s: expected a number in (0, 1], e.g. 0.95\n", prog, text);
    return 0;
  }
  if (scans != 0) {
    std::fprintf(stderr, "%s: -o msssim and -o scans choose the level both; give one\n", prog);
    return 0;
  }
  const index::QualitySample& q = store.manifest().quality;
  const int level = index::RecommendLevel(q, x);
  if (level == 0) {
    std::fprintf(stderr,
                 "%s: %s has no quality sample (built with --quality-sample 0 or without "
                 "JPEGs): use -o scans=K\n",
                 prog, store.dir().c_str());
    return 0;
  }
  const index::Manifest& m = store.manifest();
  std::fprintf(stderr,
               "%s: -o msssim=%g: serving level %d (5th-percentile MS-SSIM %.4f over %u sampled "
               "JPEGs, %.1f%% of the source bytes)\n",
               prog, x, level, q.levels[static_cast<size_t>(level - 1)].p5_msssim, q.measured,
               m.source_bytes ? 100.0 * static_cast<double>(m.level_bytes[level - 1]) /
                                    static_cast<double>(m.source_bytes)
                              : 0.0);
  return level;
}

}  // namespace

int RunDaemon(int argc, char** argv) {
  const char* prog = "pcrfs";
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  CliOptions cli;
  if (fuse_opt_parse(&args, &cli, kOptionSpecs, OptProc) != 0) {
    fuse_opt_free_args(&args);
    return 1;
  }
  // Check the store and the mount point before anything else: a bad one never leaves a mount
  // behind, and the messages are ours (libfuse's for a bad mount point is less clear).
  std::optional<index::FileIdentity> verified_index;
  if (!cli.help_or_version && cli.store != nullptr && cli.mountpoint != nullptr) {
    auto store = index::Store::Open(cli.store);
    if (!store) {
      std::fprintf(stderr, "%s: %s\n", prog, store.error().message().c_str());
      fuse_opt_free_args(&args);
      return 1;
    }
    verified_index = (*store)->index().identity();
    if (cli.msssim != nullptr) {
      const int level = ChooseLevel(prog, **store, cli.msssim, cli.scans);
      if (level == 0) {
        fuse_opt_free_args(&args);
        return 1;
      }
      cli.scans = static_cast<unsigned>(level);
    }
    if (!CheckMountPoint(prog, cli.mountpoint)) {
      fuse_opt_free_args(&args);
      return 1;
    }
  }
  fuse_cmdline_opts opts;
  std::memset(&opts, 0, sizeof opts);
  if (fuse_parse_cmdline(&args, &opts) != 0) {
    fuse_opt_free_args(&args);
    return 1;
  }
  struct Cleanup {
    fuse_args* args;
    fuse_cmdline_opts* opts;
    CliOptions* cli;
    ~Cleanup() {
      std::free(opts->mountpoint);
      std::free(cli->cache_size);
      std::free(cli->msssim);
      std::free(cli->readdirplus);
      std::free(cli->index_rss);
      std::free(cli->prefetch_chunk);
      fuse_opt_free_args(args);
    }
  } cleanup{&args, &opts, &cli};

  if (opts.show_help) {
    PrintUsage(prog);
    std::printf("FUSE options:\n");
    fuse_cmdline_help();
    fuse_lowlevel_help();
    return 0;
  }
  if (opts.show_version) {
    std::printf("pcrfs %s\n", PCRFS_VERSION);
    fuse_lowlevel_version();
    return 0;
  }
  if (cli.store == nullptr || opts.mountpoint == nullptr) {
    std::fprintf(stderr, "%s: STORE and MOUNTPOINT are required (see %s --help)\n", prog, prog);
    return 1;
  }
  if (cli.scans > 10) {
    std::fprintf(stderr, "%s: -o scans must be between 1 and 10\n", prog);
    return 1;
  }
  FsOptions fs_options;
  fs_options.fixed_level = static_cast<int>(cli.scans);
  fs_options.uid = cli.uid >= 0 ? static_cast<uid_t>(cli.uid) : ::getuid();
  fs_options.gid = cli.gid >= 0 ? static_cast<gid_t>(cli.gid) : ::getgid();
  fs_options.readahead_slots = cli.readahead;
  if (cli.prefetch > 100) {
    std::fprintf(stderr, "%s: -o prefetch must be a percentage, 0..100\n", prog);
    return 1;
  }
  fs_options.prefetch_percent = cli.prefetch;
  if (cli.prefetch_probe != 1 || cli.prefetch_chunk != nullptr) {
    std::fprintf(stderr,
                 "%s: note: -o prefetch_probe and -o prefetch_chunk are no longer used (the "
                 "daemon sizes its reads from the storage's measured speed); ignored\n",
                 prog);
  }
  if (cli.readdirplus != nullptr) {
    const std::string_view mode(cli.readdirplus);
    if (mode == "yes") {
      fs_options.readdirplus = ReaddirPlus::kAlways;
    } else if (mode == "no") {
      fs_options.readdirplus = ReaddirPlus::kNever;
    } else if (mode == "auto") {
      fs_options.readdirplus = ReaddirPlus::kAuto;
    } else {
      std::fprintf(stderr, "%s: -o readdirplus=%s: expected yes, no or auto\n", prog,
                   cli.readdirplus);
      return 1;
    }
  }
  uint64_t index_rss = uint64_t{16} << 20;
  if (cli.index_rss != nullptr) {
    auto size = std::string_view(cli.index_rss) == "0" ? std::optional<uint64_t>(0)
                                                       : ParseSize(cli.index_rss);
    if (!size) {
      std::fprintf(stderr, "%s: -o index_rss=%s: expected a size, e.g. 16M, or 0\n", prog,
                   cli.index_rss);
      return 1;
    }
    index_rss = *size;
  }
  if (cli.cache_size != nullptr) {
    auto size = ParseSize(cli.cache_size);
    if (!size || *size < (1u << 20)) {
      std::fprintf(stderr, "%s: -o cache_size=%s: expected a size of at least 1M, e.g. 256M\n",
                   prog, cli.cache_size);
      return 1;
    }
    fs_options.cache_bytes = *size;
  }

  std::error_code ec;
  const std::string store_dir = std::filesystem::absolute(cli.store, ec).string();

  // Read-only, and the kernel checks permissions (needed once other users may enter).
  std::string fsname = "-ofsname=pcrfs:" + store_dir;
  for (char& c : fsname) {
    if (c == ',') c = '_';  // a comma would split the option list
  }
  fuse_opt_add_arg(&args, "-oro,default_permissions,subtype=pcrfs");
  fuse_opt_add_arg(&args, fsname.c_str());

  Filesystem* fs_ptr = nullptr;
  fuse_session* se = fuse_session_new(&args, &FuseOperations(), sizeof(fuse_lowlevel_ops), &fs_ptr);
  if (se == nullptr) return 1;
  int rc = 2;
  if (fuse_set_signal_handlers(se) == 0) {
    if (fuse_session_mount(se, opts.mountpoint) == 0) {
      fuse_daemonize(opts.foreground);
      // The store is opened after daemonizing: LMDB environments must not cross a fork. The
      // index was verified before mounting; unchanged since, it is not read whole again.
      index::StoreOptions store_options;
      store_options.verified_index = verified_index;
      auto store = index::Store::Open(store_dir, std::move(store_options));
      if (!store) {
        std::fprintf(stderr, "%s: %s\n", prog, store.error().message().c_str());
      } else {
        Filesystem fs(std::move(*store), fs_options);
        fs_ptr = &fs;
        fs.store().index().SetMappedBudget(index_rss);
        if (opts.singlethread) {
          rc = fuse_session_loop(se);
        } else {
          fuse_loop_config* config = fuse_loop_cfg_create();
          const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
          const unsigned threads = cli.threads ? cli.threads : std::max(4u, 2 * cores);
          fuse_loop_cfg_set_max_threads(config, threads);
          fuse_loop_cfg_set_idle_threads(config, threads);
          fuse_loop_cfg_set_clone_fd(config, opts.clone_fd);
          rc = fuse_session_loop_mt(se, config);
          fuse_loop_cfg_destroy(config);
        }
        // A SIGTERM, SIGINT or SIGHUP ends the loop with that signal's number: a clean exit.
        rc = (rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP) ? 0 : 2;
      }
      fuse_session_unmount(se);
    }
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  return rc;
}

}  // namespace pcrfs::fs
