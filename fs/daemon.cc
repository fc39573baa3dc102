#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include "fs/daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/heap_trimmer.h"
#include "common/log.h"
#include "fs/cache_sizing.h"
#include "fs/filesystem.h"
#include "fs/fuse_ops.h"
#include "fs/hint_server.h"
#include "fs/metrics_server.h"
#include "fs/mount_options.h"
#include "fs/watchdog.h"
#include "index/store.h"
#include "location/store_location.h"
#include "remote/object_client.h"
#include "remote/url.h"

namespace pcrfs::fs {
namespace {

void PrintUsage(const char* prog) {
  std::printf(
      "usage: %s STORE MOUNTPOINT [options]\n"
      "\n"
      "Mounts the pcrfs store STORE read-only at MOUNTPOINT as a folder of JPEG files.\n"
      "STORE is a folder, or a URL: s3://BUCKET/PREFIX, http(s)://HOST/PATH.\n"
      "Without -o scans, the root holds scan1 .. scan10: the whole dataset at each fidelity.\n"
      "\n"
      "pcrfs options:\n"
      "%s\n"
      "SIGTERM or SIGINT unmounts; SIGHUP re-reads credentials and header files, reopens\n"
      "log_file and never unmounts.\n"
      "\n"
      "remote stores (credentials come from the environment or files, never options):\n"
      "%s\n",
      prog, MountOptionsHelp(false).c_str(), MountOptionsHelp(true).c_str());
}

// What /proc/self/mountinfo says of the mount visible at `mnt` (the last one on that point).
struct MountInfo {
  std::string type;    // "fuse.pcrfs"; empty if nothing is mounted there
  std::string device;  // "MAJOR:MINOR", which names its bdi in /sys/class/bdi
};

MountInfo FindMount(const std::string& mnt) {
  std::error_code ec;
  std::string want = std::filesystem::absolute(mnt, ec).lexically_normal().string();
  if (want.size() > 1 && want.back() == '/') want.pop_back();
  MountInfo found;
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return found;
  char line[4096];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    // id parent major:minor root MOUNTPOINT options [optional...] - TYPE source super
    char device[64], point[4096], fstype[256];
    const char* sep = std::strstr(line, " - ");
    if (sep == nullptr || std::sscanf(line, "%*s %*s %63s %*s %4095s", device, point) != 2 ||
        std::sscanf(sep + 3, "%255s", fstype) != 1) {
      continue;
    }
    std::string unescaped;  // mountinfo writes space, tab, newline and '\' as \ooo
    for (const char* c = point; *c != '\0'; ++c) {
      if (c[0] == '\\' && c[1] >= '0' && c[1] <= '7' && c[2] && c[3]) {
        unescaped.push_back(static_cast<char>((c[1] - '0') * 64 + (c[2] - '0') * 8 + (c[3] - '0')));
        c += 3;
      } else {
        unescaped.push_back(*c);
      }
    }
    std::string normal = std::filesystem::path(unescaped).lexically_normal().string();
    if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    if (normal == want) found = {fstype, device};  // the last mount on a point is the visible one
  }
  std::fclose(f);
  return found;
}

std::string MountedType(const std::string& mnt) { return FindMount(mnt).type; }

// Sets the kernel's readahead window of the mount at `mnt` (its bdi's read_ahead_kb), before
// the session answers FUSE_INIT: the kernel then takes the smaller of the window and INIT's
// max_readahead (FsOptions::max_readahead, the same size). The bdi's window is 128 KiB by
// default, so a file read in order arrived in 128 KiB requests, a FUSE round trip each
// (cat of a 300 MB file 0.33-0.53 s cold, 0.17 s with 1 MiB). Only root may write it; anyone
// else keeps the default, quietly. Done from /proc, never by a stat of the mount point, which
// would wait for this daemon to answer.
void SetKernelReadahead(const std::string& mnt, uint64_t bytes) {
  if (bytes == 0) return;
  const MountInfo m = FindMount(mnt);
  if (m.type != "fuse.pcrfs" || m.device.empty()) return;
  const std::string path = "/sys/class/bdi/" + m.device + "/read_ahead_kb";
  FILE* f = std::fopen(path.c_str(), "we");
  if (f == nullptr) {
    if (errno != EACCES && errno != EROFS && errno != ENOENT) {
      Log(LogLevel::kWarning, path + ": " + std::strerror(errno) + "; kernel readahead unchanged");
    }
    return;
  }
  const bool ok = std::fprintf(f, "%llu\n", static_cast<unsigned long long>(bytes >> 10)) > 0;
  if (std::fclose(f) != 0 || !ok) {
    Log(LogLevel::kWarning, path + ": " + std::strerror(errno) + "; kernel readahead unchanged");
  }
}

// Nothing is mounted over a missing, non-directory or non-empty mount point, over a live
// pcrfs mount, nor over the remains of a daemon that died (kill -9, a crash). The kernel
// answers stat and readdir of a dead pcrfs mount from its caches (pcrfs asks for long
// timeouts), which made the error "mount point is not empty"; statfs is never cached and
// fails with ENOTCONN there.
Status CheckMountPoint(const std::string& mnt) {
  struct statfs sfs;
  struct stat st;
  int err = 0;
  if (::statfs(mnt.c_str(), &sfs) != 0 || ::stat(mnt.c_str(), &st) != 0) err = errno;
  const std::string type = err == ENOENT ? "" : MountedType(mnt);
  if (err == ENOTCONN || err == ECONNABORTED) {
    const std::string what = type.empty() || type == "fuse.pcrfs" ? "pcrfs" : "FUSE (" + type + ")";
    return Status::InvalidArgument(mnt + ": a previous " + what +
                                   " mount here has died; run: fusermount3 -u " + mnt);
  }
  if (err != 0) {
    return Status::InvalidArgument(mnt + ": mount point " +
                                   (err == ENOENT ? "does not exist" : std::strerror(err)));
  }
  if (type == "fuse.pcrfs") {
    return Status::InvalidArgument(mnt + ": a pcrfs store is already mounted here (unmount it: " +
                                   "fusermount3 -u " + mnt + ")");
  }
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(mnt + ": mount point is not a directory");
  DIR* d = ::opendir(mnt.c_str());
  if (d == nullptr) {
    return Status::InvalidArgument(mnt + ": cannot open mount point: " + std::strerror(errno));
  }
  bool empty = true;
  while (struct dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  if (!empty) return Status::InvalidArgument(mnt + ": mount point is not empty");
  return Status::OK();
}

// -o msssim=X: the lowest level whose 5th-percentile MS-SSIM is at least X, from the quality
// sample pcr build stored in the manifest. Says which level it chose.
Result<int> ChooseLevel(const index::Store& store, double x) {
  const index::QualitySample& q = store.manifest().quality;
  const int level = index::RecommendLevel(q, x);
  if (level == 0) {
    return Err(Status::InvalidArgument(store.dir() +
                                       " has no quality sample (built with --quality-sample 0 "
                                       "or without JPEGs): use -o scans=K"));
  }
  const index::Manifest& m = store.manifest();
  char line[256];
  std::snprintf(line, sizeof line,
                "-o msssim=%g: serving level %d (5th-percentile MS-SSIM %.4f over %u sampled "
                "JPEGs, %.1f%% of the source bytes)",
                x, level, q.levels[static_cast<size_t>(level - 1)].p5_msssim, q.measured,
                m.source_bytes ? 100.0 * static_cast<double>(m.level_bytes[level - 1]) /
                                     static_cast<double>(m.source_bytes)
                               : 0.0);
  Log(LogLevel::kInfo, line);  // on the terminal, and in the log file
  return level;
}

// Before mounting: the store opens (its index verified whole, its manifest checked against
// the index), the level is chosen, the mount point is usable. A problem is reported here,
// in the foreground, and never leaves a mount behind. Returns the verified index, parsed: the
// daemon serves that after its fork (plain memory, which the child keeps), never parsing twice.
Result<std::shared_ptr<const index::IndexReader>> CheckBeforeMount(MountConfig* config,
                                                                   const StoreLocation& location) {
  auto store = OpenStoreAt(location, nullptr);
  if (!store) return Err(store.error());
  if (config->msssim) {
    auto level = ChooseLevel(**store, *config->msssim);
    if (!level) return Err(level.error());
    config->fs.fixed_level = *level;
  }
  PCRFS_RETURN_ERR_IF_ERROR(CheckMountPoint(config->mountpoint));
  return (*store)->shared_index();
}

// Bytes the files below `dir` take on its disk (allocated blocks: what removing them frees); 0
// if it does not exist.
uint64_t BytesOnDisk(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return bytes;
}

// Bytes an unprivileged writer may still put on the filesystem of `dir`, or of its nearest
// ancestor that exists (a local store's cache folder is made when first used); 0 if unknown.
uint64_t FreeBytes(const std::string& dir) {
  std::filesystem::path p = dir;
  struct statvfs sv;
  while (::statvfs(p.c_str(), &sv) != 0) {
    if (!p.has_relative_path()) return 0;
    p = p.parent_path();
  }
  return static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
}

// The caches against the level the mount serves (fs/cache_sizing.h), before the fork, so that
// the line it may print reaches the terminal. Resolves -o disk_cache=auto into
// config->remote.disk_cache: the level's room, within half of what `cache_dir`'s filesystem has
// free, counting what its disk tiers (chunks/, baseline/) hold already as free. Errors: a record
// the index cannot return.
Result<CacheSizing> SizeCaches(MountConfig* config, const StoreLocation& location,
                               const index::IndexReader& index, const std::string& cache_dir) {
  CacheSizing s;
  s.store = location.name;
  s.remote = location.remote;
  s.form = config->fs.form;
  s.ladder = config->fs.fixed_level == 0;
  s.level.level = s.ladder ? index::kNumGroups : config->fs.fixed_level;
  auto bytes = index::StoreBytesAtLevel(index, s.level.level);
  if (!bytes) return Err(bytes.error());
  s.level.bytes = *bytes;
  s.level.files = index.NumEntries();
  s.level.records = index.NumRecords();
  s.memory_cache = config->remote.memory_cache;
  s.cache_dir = cache_dir;
  if (config->disk_cache_auto) {
    s.automatic = ChooseAutoDiskCache(
        DiskCacheForLevel(s.level, s.form, s.remote), FreeBytes(cache_dir),
        BytesOnDisk(cache_dir + "/chunks") + BytesOnDisk(cache_dir + "/" + kBaselineCacheFolder));
    config->remote.disk_cache = s.automatic->bytes;
  }
  s.disk_cache = config->remote.disk_cache;
  return s;
}

// After libfuse failed to mount and said why in its own words ("fuse: failed to open
// /dev/fuse: Permission denied", "fuse: device not found"): when the reason is the device, one
// more line says what to do about it. Opening /dev/fuse is what libfuse tried first, with the
// same credentials.
void ExplainMountFailure() {
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return;
  }
  const int err = errno;
  const std::string what = std::string("/dev/fuse: ") + std::strerror(err);
  if (err == ENOENT || err == ENODEV) {
    Log(LogLevel::kError, what +
                              ": load the fuse module (modprobe fuse); in a container, pass "
                              "--device /dev/fuse (README: Troubleshooting)");
  } else if (err == EACCES || err == EPERM) {
    Log(LogLevel::kError, what +
                              ": this user may not use FUSE; in a container, pass --device "
                              "/dev/fuse --cap-add SYS_ADMIN (README: Troubleshooting)");
  }
}

// Owns a fuse_args built from strings.
struct FuseArgs {
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  explicit FuseArgs(const std::vector<std::string>& v) {
    for (const std::string& a : v) fuse_opt_add_arg(&args, a.c_str());
  }
  ~FuseArgs() { fuse_opt_free_args(&args); }
  FuseArgs(const FuseArgs&) = delete;
  FuseArgs& operator=(const FuseArgs&) = delete;
};

// What libfuse's own command line says: -f, -d, -s, clone_fd, the mount point's real path.
struct FuseCmdline {
  fuse_cmdline_opts opts;
  FuseCmdline() { std::memset(&opts, 0, sizeof opts); }
  ~FuseCmdline() { std::free(opts.mountpoint); }
  FuseCmdline(const FuseCmdline&) = delete;
  FuseCmdline& operator=(const FuseCmdline&) = delete;
};

// Read-only, the kernel checks permissions (needed once other users may enter), and the
// store as the source shown by mount(8): the URL, or the store folder's real path, exactly
// what an fstab line names (mount(8) resolves a path source with realpath(3) too), so that
// `mount -a` sees that the line is mounted already (the type, fuse.pcrfs, says it is pcrfs).
void AddMountOptions(const std::string& store, bool remote, fuse_args* args) {
  std::string source = store;
  if (!remote) {
    char* real = ::realpath(store.c_str(), nullptr);
    if (real != nullptr) {
      source = real;
      std::free(real);
    }
  }
  std::string fsname = "-ofsname=" + source;
  for (char& c : fsname) {
    if (c == ',') c = '_';  // a comma would split the option list
  }
  fuse_opt_add_arg(args, "-oro,default_permissions,subtype=pcrfs");
  fuse_opt_add_arg(args, fsname.c_str());
}

// SIGHUP runs DaemonHooks::reload outside the signal handler: the handler only writes a byte to
// a pipe (write(2) is async-signal-safe; the end is non-blocking, so a full pipe drops a byte
// that would only repeat a pending reload), and a thread reads the pipe and does the work.
// Installed after fuse_set_signal_handlers, whose SIGHUP handler would end the session; libfuse
// removes on unmount only the handlers that are still its own.
class SighupReload {
 public:
  SighupReload() = default;
  ~SighupReload() { Stop(); }
  SighupReload(const SighupReload&) = delete;
  SighupReload& operator=(const SighupReload&) = delete;

  // Creates the pipe and installs the handler. The pipe survives fork(): a SIGHUP that arrives
  // before Start() waits in it. Errors: the pipe or sigaction failed (errno's message).
  Status Install() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("SIGHUP pipe", errno);
    read_end_ = UniqueFd(fds[0]);
    write_end_ = UniqueFd(fds[1]);
    if (::fcntl(write_end_.get(), F_SETFL, O_NONBLOCK) != 0) {
      return Status::FromErrno("SIGHUP pipe", errno);
    }
    handler_fd = write_end_.get();
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = &OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(SIGHUP, &sa, nullptr) != 0) return Status::FromErrno("SIGHUP", errno);
    // SIGTERM too (libfuse's handler ended the session, busy or not): see Start.
    if (::sigaction(SIGTERM, &sa, nullptr) != 0) return Status::FromErrno("SIGTERM", errno);
    installed_ = true;
    return Status::OK();
  }

  // Starts the thread that runs `reload` once per SIGHUP and `terminate` once per SIGTERM
  // (after daemonizing: threads do not survive fork()). REQUIRES: Install() succeeded.
  void Start(std::function<void()> reload, std::function<void()> terminate) {
    thread_ = std::thread([this, reload = std::move(reload), terminate = std::move(terminate)] {
      Run(reload, terminate);
    });
  }

  // Ends the thread; a SIGHUP or SIGTERM from now on is ignored (the session is over: exit
  // cleanly).
  void Stop() {
    if (installed_) {
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_handler = SIG_IGN;
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGHUP, &sa, nullptr);
      ::sigaction(SIGTERM, &sa, nullptr);
      installed_ = false;
    }
    if (thread_.joinable()) {
      stop_.store(true);
      const char wake = 0;
      // EAGAIN: the pipe is full, so the thread wakes anyway.
      [[maybe_unused]] const ssize_t n = ::write(write_end_.get(), &wake, 1);
      thread_.join();
    }
    handler_fd = -1;
    write_end_.Reset();
    read_end_.Reset();
  }

 private:
  static constexpr char kHup = 1;
  static constexpr char kTerm = 2;

  static void OnSignal(int sig) {
    const int saved_errno = errno;
    const char byte = sig == SIGTERM ? kTerm : kHup;
    if (handler_fd >= 0) {
      [[maybe_unused]] const ssize_t n = ::write(handler_fd, &byte, 1);
    }
    errno = saved_errno;
  }

  void Run(const std::function<void()>& reload, const std::function<void()>& terminate) {
    char buf[64];
    for (;;) {
      // One read takes every byte waiting: signals that came during a reload make one more.
      const ssize_t n = ::read(read_end_.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || stop_.load()) return;
      const bool term = std::memchr(buf, kTerm, static_cast<size_t>(n)) != nullptr;
      const bool hup = std::memchr(buf, kHup, static_cast<size_t>(n)) != nullptr;
      if (term && terminate) terminate();
      if (!hup) continue;
      ReopenLogFile();  // first, so the line below goes to the new file after a rotation
      Log(LogLevel::kInfo, "SIGHUP: reloading credentials and header files");
      if (!reload) continue;
      try {
        reload();
      } catch (const std::exception& e) {
        Log(LogLevel::kError, std::string("SIGHUP: reload failed: ") + e.what());
      } catch (...) {
        Log(LogLevel::kError, "SIGHUP: reload failed");
      }
    }
  }

  // The handler's pipe end; -1 when none. One SighupReload per process.
  static inline volatile sig_atomic_t handler_fd = -1;
  UniqueFd read_end_;
  UniqueFd write_end_;
  bool installed_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The FUSE worker threads: a remote read waits on the network, not a core, so enough workers
// that the FUSE threads are not what limits the reads in flight (a reader's READ sends its
// file's k pieces at once, so 64 reads keep hundreds of requests busy).
unsigned ServeThreads(const MountConfig& config, bool remote) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned threads = config.threads ? config.threads : std::max(4u, 2 * cores);
  if (remote && config.threads == 0) {
    threads = std::max(threads, std::min(64u, static_cast<unsigned>(config.remote.connections)));
  }
  return threads;
}

// Serves requests until unmounted or signalled. Returns the session loop's result.
int ServeLoop(fuse_session* se, const MountConfig& config, const fuse_cmdline_opts& opts,
              bool remote) {
  if (opts.singlethread) return fuse_session_loop(se);
  fuse_loop_config* loop = fuse_loop_cfg_create();
  const unsigned threads = ServeThreads(config, remote);
  fuse_loop_cfg_set_max_threads(loop, threads);
  fuse_loop_cfg_set_idle_threads(loop, threads);
  fuse_loop_cfg_set_clone_fd(loop, opts.clone_fd);
  const int rc = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  return rc;
}

// `fusermount3 -u MNT` (not -z: it refuses a busy mount), for a daemon that is not root.
// Returns 0 when it unmounted, EBUSY when it refused (busy, as a rule), else errno.
int RunFusermountUnmount(const std::string& mnt) {
  const char* argv[] = {"fusermount3", "-u", "-q", "--", mnt.c_str(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawned =
      ::posix_spawnp(&pid, argv[0], &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return spawned;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : EBUSY;
}

// SIGTERM: unmounts as `fusermount3 -u` does, which leaves a busy mount alone (a training job's
// open files keep working); libfuse's own handler detached the mount lazily, busy or not, and
// readers got ENOENT. Once unmounted the session ends (the kernel ends the connection). SIGINT
// keeps libfuse's handler: it detaches at once, like `fusermount3 -uz`.
void UnmountUnlessBusy(fuse_session* se, const std::string& mnt, Watchdog* watchdog) {
  int err = 0;
  if (watchdog->dropped()) {  // root that gave up its capabilities: the watchdog keeps them
    err = watchdog->UnmountIfUnused();
  } else if (::geteuid() == 0) {
    if (::umount2(mnt.c_str(), UMOUNT_NOFOLLOW) != 0) err = errno;
  } else {
    err = RunFusermountUnmount(mnt);
  }
  if (err == 0) {
    Log(LogLevel::kInfo, "SIGTERM: unmounted " + mnt);
    fuse_session_exit(se);
    return;
  }
  if (err == EBUSY) {
    Log(LogLevel::kWarning,
        "SIGTERM: " + mnt + " is busy (a file or folder in it is open, or is a working folder), " +
            "so it stays mounted and served, as fusermount3 -u leaves a busy mount; close them " +
            "and send SIGTERM again, or detach it at once with SIGINT or fusermount3 -uz " + mnt);
    return;
  }
  Log(LogLevel::kError, "SIGTERM: cannot unmount " + mnt + ": " + std::strerror(err) +
                            "; it stays mounted (SIGINT or fusermount3 -uz " + mnt +
                            " detaches it at once)");
}

// The hooks of a mount whose remote client (nullptr for a local store) is `client`: SIGHUP
// makes the client read its credentials, token and header files again.
DaemonHooks HooksFor(const std::shared_ptr<ObjectClient>& client) {
  DaemonHooks hooks;
  if (client != nullptr) hooks.reload = [client] { client->Reload(); };
  return hooks;
}

// A remote store's client, made after the fork, with the credential renewal started first; the
// memory budgets and the client's counters go into *fs_options.
Result<std::shared_ptr<ObjectClient>> StartRemoteClient(const MountConfig& config,
                                                        const StoreLocation& location,
                                                        const std::shared_ptr<RangeCache>& cache,
                                                        const std::string& sizing_json,
                                                        FsOptions* fs_options) {
  fs_options->speculation_memory = config.remote.memory_cache;
  fs_options->cache_bytes = PieceCacheBytes(config, /*remote=*/true);
  if (Status s = StartCredentialRenewal(location); !s.ok()) return Err(s);
  if (location.signer != nullptr) {  // where the authority came from; never a secret
    Log(LogLevel::kInfo, location.name + ": authorized by " + location.signer->DescribeJson());
  }
  auto created = MakeObjectClient(location);
  if (!created) return Err(created.error());
  std::shared_ptr<ObjectClient> client = std::move(*created);
  // The client's counters, with the cache's as "cache", the authority as "auth" and the
  // caches against the level (fs/cache_sizing.h) as "sizing".
  fs_options->remote_stats = [c = client.get(), k = cache.get(), sizing_json] {
    std::string json = c->stats().ToJson();
    json.insert(json.size() - 1, ",\"cache\":" + k->stats().ToJson() + ",\"auth\":" +
                                     c->DescribeAuthJson() + ",\"sizing\":" + sizing_json);
    return json;
  };
  return client;
}

// How the Filesystem serves this mount: the kernel's readahead and background READs, pushes to
// the page cache through `se`, user.pcrfs.metrics, the owner.
void SetServingOptions(fuse_session* se, const MountConfig& config, bool remote,
                       ObjectClient* client, RangeCache* cache, FsOptions* fs_options) {
  if (config.kernel_readahead != 0) {
    fs_options->max_readahead = static_cast<uint32_t>(config.kernel_readahead);
  }
  // Two readahead READs in flight per worker (FsOptions::max_background).
  fs_options->max_background =
      static_cast<uint16_t>(std::clamp(2 * ServeThreads(config, remote), 64u, 1024u));
  // Pushed bytes go to the kernel's page cache of an inode it holds (FUSE_NOTIFY_STORE).
  fs_options->push = [se](uint64_t ino, const uint8_t* data, size_t n) {
    fuse_bufvec bufv = FUSE_BUFVEC_INIT(n);
    bufv.buf[0].mem = const_cast<uint8_t*>(data);
    // No splice: libfuse prints every failed splice to stderr ("fuse: splice from pipe: No
    // such file or directory" for each file the kernel has forgotten), while a plain write's
    // ENOENT is returned quietly; for bytes in memory a write is one copy either way.
    return fuse_lowlevel_notify_store(se, ino, 0, &bufv, FUSE_BUF_NO_SPLICE);
  };
  // Without labels: user.pcrfs.metrics must stay under the kernel's 64 KiB xattr limit.
  fs_options->metrics_text = [c = client, k = cache,
                              level = config.fs.fixed_level](const Filesystem& f) {
    return RenderMountMetrics({&f, c, k, level}, {});
  };
  // For tests only (tests/e2e/test_watchdog.py): every read from offset 0 pushes the bytes it
  // answers before replying, which blocks on the page its own READ holds locked: the wedge of
  // issue 34, made certain.
  if (const char* t = std::getenv("PCRFS_TEST_PUSH_UNDER_READ"); t && std::strcmp(t, "1") == 0) {
    SetPushUnderReadForTest(fs_options->push);
  }
  fs_options->uid = config.uid.value_or(::getuid());
  fs_options->gid = config.gid.value_or(::getgid());
}

// The hint socket (fs/hint_server.h), made by the daemon itself, so that it is the daemon's
// user's and goes when the daemon does; null without -o hints or when it cannot be made (a
// warning: a mount without one still serves, hints only fetch ahead).
std::unique_ptr<HintServer> OpenHintServer(const MountConfig& config, FsOptions* fs_options) {
  if (!config.hints) return nullptr;
  auto dir = HintServer::MakeSocketDir(config.allow_other);
  auto listening = dir ? HintServer::Listen(*dir, config.allow_other)
                       : Result<std::unique_ptr<HintServer>>(Err(dir.error()));
  if (!listening) {
    if (dir) ::rmdir(dir->c_str());
    Log(LogLevel::kWarning, "no hint socket: " + listening.error().message());
    return nullptr;
  }
  fs_options->hints = true;
  fs_options->hint_socket = (*listening)->path();
  return std::move(*listening);
}

// After mounting and daemonizing: opens the store (with the index parsed and verified before
// mounting: it is not read again) and serves,
// running `sighup`'s thread while it does. `cache`: a remote store's cache of record bytes,
// opened before the fork so that its note reached the terminal; `sizing_json`: the caches
// against the level (CacheSizingJson), for user.pcrfs.remote. Exit code 0 for a clean
// unmount or SIGTERM/SIGINT, 2 otherwise.
int OpenAndServe(fuse_session* se, Filesystem** fs_slot, const MountConfig& config,
                 const StoreLocation& location,
                 const std::shared_ptr<const index::IndexReader>& verified,
                 const fuse_cmdline_opts& opts, std::shared_ptr<RangeCache> cache,
                 const std::string& sizing_json, SighupReload* sighup,
                 MetricsServer* metrics_server, Watchdog* watchdog) {
  // Everything that needs root's capabilities is done (the mount; the cache folder and the
  // metrics socket opened before the fork): give them up now, while this is the only thread,
  // since a capability set is per thread and every thread started below inherits this one's.
  watchdog->DropPrivileges();
  FsOptions fs_options = config.fs;
  std::shared_ptr<ObjectClient> client;
  if (location.remote) {  // after the fork: curl's threads and handles do not survive one
    auto started = StartRemoteClient(config, location, cache, sizing_json, &fs_options);
    if (!started) {
      Log(LogLevel::kError, location.name + ": " + started.error().message());
      return 2;
    }
    client = std::move(*started);
  }
  auto store = OpenStoreAt(location, client, verified, cache);
  if (!store) {
    Log(LogLevel::kError, store.error().message());
    return 2;
  }
  if (location.remote) {  // what a remote mount downloaded, and that it was parsed once
    Log(LogLevel::kInfo, location.name + ": index of " +
                             std::to_string((*store)->index().NumEntries()) + " entries, parsed " +
                             std::to_string(index::CompactIndex::ParseCount()) +
                             " time(s) by this process");
  }
  SetServingOptions(se, config, location.remote, client.get(), cache.get(), &fs_options);
  std::unique_ptr<HintServer> hint_server = OpenHintServer(config, &fs_options);
  Filesystem fs(std::move(*store), fs_options);
  *fs_slot = &fs;
  if (hint_server != nullptr) {
    hint_server->Start(
        &fs.hint_queue(), [&fs](std::string_view path) { return fs.LookupPath(path); },
        opts.mountpoint != nullptr ? opts.mountpoint : "");
  }
  fs.store().index().SetMappedBudget(config.index_rss);
  if (location.remote && location.options.disk_cache_fill) {
    fs.FillLevel(config.fs.fixed_level != 0 ? config.fs.fixed_level : index::kNumGroups);
  }
  const std::string mountpoint = opts.mountpoint != nullptr ? opts.mountpoint : "";
  sighup->Start(HooksFor(client).reload,
                [se, mountpoint, watchdog] { UnmountUnlessBusy(se, mountpoint, watchdog); });
  // Free heap pages go back to the kernel every 2 s (common/heap_trimmer.h).
  HeapTrimmer trimmer({});
  // Metrics (fs/metrics_server.h): the mount point, then -o metrics_label's, on every series.
  metrics::Labels labels = {{"mount", opts.mountpoint != nullptr ? opts.mountpoint : ""}};
  labels.insert(labels.end(), config.metrics_labels.begin(), config.metrics_labels.end());
  auto render = [&fs, c = client.get(), k = cache.get(), labels, level = config.fs.fixed_level] {
    return RenderMountMetrics({&fs, c, k, level}, labels);
  };
  if (metrics_server != nullptr) metrics_server->Start(render);
  std::optional<MetricsFileWriter> metrics_file;
  if (!config.metrics_file.empty()) {
    metrics_file.emplace(config.metrics_file, std::chrono::seconds(config.metrics_interval),
                         render);
  }
  const int rc = ServeLoop(se, config, opts, location.remote);
  if (metrics_server != nullptr) metrics_server->Stop();  // before the filesystem goes
  if (hint_server != nullptr) hint_server->Stop();        // likewise; removes the socket
  metrics_file.reset();
  sighup->Stop();  // before the client and the store go
  // A SIGTERM or SIGINT ends the loop with that signal's number: a clean exit.
  return (rc == 0 || rc == SIGTERM || rc == SIGINT) ? 0 : 2;
}

// Mounts, daemonizes unless -f, serves, unmounts. Exit code 1 if libfuse refuses the
// arguments (an unknown option), 2 if the session fails.
int MountAndServe(const MountConfig& config, StoreLocation location,
                  const std::shared_ptr<const index::IndexReader>& verified,
                  std::shared_ptr<RangeCache> cache, MetricsServer* metrics_server,
                  const std::string& sizing_json) {
  FuseArgs args(config.fuse_args);
  FuseCmdline cmdline;
  if (fuse_parse_cmdline(&args.args, &cmdline.opts) != 0) return 1;
  std::error_code ec;
  if (!location.remote) location.dir = std::filesystem::absolute(location.dir, ec).string();
  AddMountOptions(location.remote ? location.name : location.dir, location.remote, &args.args);

  Filesystem* fs_ptr = nullptr;
  fuse_session* se =
      fuse_session_new(&args.args, &FuseOperations(), sizeof(fuse_lowlevel_ops), &fs_ptr);
  if (se == nullptr) return 1;
  int rc = 2;
  SighupReload sighup;
  if (fuse_set_signal_handlers(se) == 0) {
    const Status installed = sighup.Install();
    if (!installed.ok()) {
      Log(LogLevel::kError, installed.message());
    } else if (fuse_session_mount(se, cmdline.opts.mountpoint) == 0) {
      SetKernelReadahead(cmdline.opts.mountpoint, config.kernel_readahead);
      const LogSink sink = cmdline.opts.foreground   ? LogSink::kStderr
                           : config.log_file.empty() ? LogSink::kSyslog
                                                     : LogSink::kNone;
      // A daemon that dies never leaves its mount wedged (fs/watchdog.h). Started before
      // daemonizing, so that it runs as pcrfs-watchdog by the time the command returns.
      // PCRFS_TEST_NO_WATCHDOG=1, for tests only, shows the wedge as it was (no watchdog, no
      // crash handler); PCRFS_TEST_NO_CRASH_HANDLER=1 leaves crashes to the watchdog.
      Watchdog watchdog;
      const char* no_watchdog = std::getenv("PCRFS_TEST_NO_WATCHDOG");
      const bool watch = no_watchdog == nullptr || std::strcmp(no_watchdog, "1") != 0;
      const std::string device = FindMount(cmdline.opts.mountpoint).device;
      if (watch) {
        const Status started =
            watchdog.Start({device, cmdline.opts.mountpoint, config.log_file, sink});
        if (!started.ok()) Log(LogLevel::kWarning, started.message());
      }
      // Everything said so far went to the terminal; from here on stderr is /dev/null unless -f.
      fuse_daemonize(cmdline.opts.foreground);
      // Daemonized: -o log_file's file alone if given, else syslog (the journal on systemd).
      SetLogSink(sink);
      watchdog.Watch(::getpid());  // the daemon's pid from now on
      const char* no_handler = std::getenv("PCRFS_TEST_NO_CRASH_HANDLER");  // tests only
      if (watch && (no_handler == nullptr || std::strcmp(no_handler, "1") != 0)) {
        InstallCrashAbort(AbortFileOf(device));
      }
      rc = OpenAndServe(se, &fs_ptr, config, location, verified, cmdline.opts, std::move(cache),
                        sizing_json, &sighup, metrics_server, &watchdog);
      if (watchdog.dropped()) watchdog.Unmount();  // root's unmount, by the watchdog
      fuse_session_unmount(se);
      watchdog.Finish();
    } else {
      ExplainMountFailure();
    }
    sighup.Stop();
    fuse_remove_signal_handlers(se);
  }
  fuse_session_destroy(se);
  return rc;
}

// The files a remote store reads again after the daemon has changed to / (on SIGHUP), made
// absolute while the working folder is still the user's.
void MakeFileOptionsAbsolute(RemoteOptions* r) {
  for (std::string* path :
       {&r->s3.credentials_file, &r->s3.config_file, &r->headers_file, &r->ca_file}) {
    if (path->empty()) continue;
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(*path, ec).string();
    if (!ec) *path = std::move(absolute);
  }
}

// The log file opened (before anything else, so a bad path is one line and nothing is fetched
// or mounted), and the paths the daemon uses after it changes to / made absolute.
Status OpenLogFileAndMakePathsAbsolute(MountConfig* config) {
  // Absolute, because the daemon changes to / once it detaches (and SIGHUP reopens it).
  if (!config->log_file.empty()) {
    std::error_code ec;
    const std::string path = std::filesystem::absolute(config->log_file, ec).string();
    PCRFS_RETURN_IF_ERROR(SetLogFile(ec ? config->log_file : path));
    if (!ec) config->log_file = path;  // the watchdog opens it again from /
  }
  MakeFileOptionsAbsolute(&config->remote);
  if (!config->metrics_file.empty()) {  // absolute: the daemon changes to /; its folder must exist
    std::error_code ec;
    const std::filesystem::path path = std::filesystem::absolute(config->metrics_file, ec);
    if (!ec) config->metrics_file = path.string();
    if (!std::filesystem::is_directory(path.parent_path(), ec)) {
      return Status::InvalidArgument("-o metrics_file=" + config->metrics_file + ": folder " +
                                     path.parent_path().string() + " does not exist");
    }
  }
  return Status::OK();
}

// The caches against the mounted level (fs/cache_sizing.h) into *sizing, for a remote store or
// a baseline disk cache: -o disk_cache=auto's size, one line when the level does not fit, and
// the disk budget shared between the record bytes and the transcoded files. Errors are the
// caches' folders'.
Status BudgetCaches(MountConfig* config, StoreLocation* location,
                    const index::IndexReader& verified, std::optional<CacheSizing>* sizing) {
  // -o form=baseline with -o disk_cache: its transcoded files' folder.
  const bool baseline_disk = config->fs.form == ServedForm::kBaseline &&
                             (config->remote.disk_cache > 0 || config->disk_cache_auto);
  std::string baseline_dir;
  if (baseline_disk) {
    auto dir = BaselineCacheDir(*location, config->remote.cache_dir);
    if (!dir) return dir.error();
    baseline_dir = *dir;
  }
  // The caches against the mounted level: -o disk_cache=auto's size, and one line when the
  // level does not fit them (fs/cache_sizing.h). The cache folder: a remote store's, or the one
  // that holds a local store's baseline/ folder.
  if (location->remote || baseline_disk) {
    const std::string cache_dir =
        location->remote ? location->dir
                         : std::filesystem::path(baseline_dir).parent_path().parent_path().string();
    auto sized = SizeCaches(config, *location, verified, cache_dir);
    if (!sized) return sized.error();
    *sizing = std::move(*sized);
    location->options.disk_cache = config->remote.disk_cache;
    // auto found no room at all: nothing to fill (the line says why).
    if (config->remote.disk_cache == 0) location->options.disk_cache_fill = false;
    if (const std::string line = CacheSizingWarning(**sizing); !line.empty()) {
      Log(LogLevel::kWarning, line);  // on the terminal, and in the log file
    }
    config->fs.windows_for_several_pieces = LevelFits(**sizing);
  }
  // Its transcoded files get 3/4 of a remote store's disk budget (the record bytes are read
  // once per file, to transcode it) and all of a local one's.
  if (baseline_disk && config->remote.disk_cache > 0) {
    config->fs.baseline_disk_dir = baseline_dir;
    const uint64_t budget = config->remote.disk_cache;
    config->fs.baseline_disk_bytes = location->remote ? budget - budget / 4 : budget;
    if (location->remote) location->options.disk_cache = budget / 4;
  }
  return Status::OK();
}

}  // namespace

int RunDaemon(int argc, char** argv) {
  auto config = ParseMountOptions(argc, argv);
  if (!config) {
    std::fprintf(stderr, "pcrfs: %s\n", config.error().message().c_str());
    return 1;
  }
  BlankUrlQueriesInArgv(argc, argv);
  if (config->show_help) {
    PrintUsage("pcrfs");
    std::printf("FUSE options:\n");
    fuse_cmdline_help();
    fuse_lowlevel_help();
    return 0;
  }
  if (config->show_version) {
    // Line-buffered, because libfuse ends with a child (fusermount3 --version) writing to the
    // same stdout: fully buffered into a pipe, pcrfs's own line came out after the child's.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("pcrfs %s\n", PCRFS_VERSION);
    fuse_lowlevel_version();  // "using FUSE kernel interface version", fusermount3's version
    return 0;
  }
  if (Status s = OpenLogFileAndMakePathsAbsolute(&*config); !s.ok()) {
    std::fprintf(stderr, "pcrfs: %s\n", s.message().c_str());
    return 1;
  }
  if (config->retired_options) {
    Log(LogLevel::kWarning,
        "note: -o prefetch_probe and -o prefetch_chunk are no longer used (the daemon sizes "
        "its reads from the storage's measured speed); ignored");
  }
  // A remote store's metadata is downloaded here, before the fork, so its errors are one line
  // in the foreground; the client that did it is gone before the fork.
  auto location = FetchMetadata(config->store, config->remote);
  if (!location) {
    Log(LogLevel::kError, location.error().message());
    return 1;
  }
  auto verified = CheckBeforeMount(&*config, *location);
  if (!verified) {
    Log(LogLevel::kError, verified.error().message());
    return 1;
  }
  std::optional<CacheSizing> sizing;
  if (Status s = BudgetCaches(&*config, &*location, **verified, &sizing); !s.ok()) {
    Log(LogLevel::kError, location->name + ": " + s.message());
    return 1;
  }
  // A remote store's cache of record bytes, opened before the fork (it starts no thread; its
  // disk folder's lock is inherited), so that "the disk cache is in use by another pcrfs
  // process" reaches the terminal, and a folder that cannot be created fails the mount here.
  std::shared_ptr<RangeCache> cache;
  if (location->remote) {
    std::string note;
    auto opened = OpenRangeCache(*location, &note);
    if (!opened) {
      Log(LogLevel::kError, location->name + ": " + opened.error().message());
      return 1;
    }
    cache = std::move(*opened);
    if (!note.empty()) Log(LogLevel::kWarning, note);
  }
  // The metrics socket is bound here, before the fork, so that a port in use is one line and
  // exit 1; its thread starts once the daemon serves.
  std::unique_ptr<MetricsServer> metrics_server;
  if (!config->metrics_address.empty()) {
    auto listening = MetricsServer::Listen(config->metrics_address);
    if (!listening) {
      Log(LogLevel::kError, listening.error().message());
      return 1;
    }
    metrics_server = std::move(*listening);
    Log(LogLevel::kInfo, "metrics at http://" + metrics_server->address() + "/metrics");
  }
  return MountAndServe(*config, std::move(*location), *verified, std::move(cache),
                       metrics_server.get(), sizing ? CacheSizingJson(*sizing) : "");
}

}  // namespace pcrfs::fs
