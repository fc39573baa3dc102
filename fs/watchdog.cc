#include "fs/watchdog.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pcrfs::fs {
namespace {

constexpr const char* kConnections = "/sys/fs/fuse/connections";
constexpr long kFusectlMagic = 0x65735543;
constexpr int kPollMs = 250;
// Task flags (/proc/PID/stat field 9) of a main thread that is on its way out: PF_EXITING (in
// do_exit), PF_POSTCOREDUMP (waiting for another thread's core dump), PF_DUMPCORE and
// PF_SIGNALED (dumping core itself). A crash that dumps core waits for every thread first, so
// a wedged daemon's main thread stays there, in D or I state, and never becomes a zombie.
constexpr unsigned kPfDying = 0x4 | 0x8 | 0x200 | 0x400;

// Messages on the socket, daemon -> watchdog: kBye (ending normally: exit quietly), kUnmount
// (unmount for me, then answer kDone), kUnmountIfUnused (unmount unless busy, then answer the
// errno as one byte, 0 when unmounted).
constexpr char kBye = 'q';
constexpr char kUnmount = 'u';
constexpr char kUnmountIfUnused = 'U';
constexpr char kDone = 'k';
constexpr char kReady = 'r';  // watchdog -> daemon, once it runs
constexpr char kPid = 'p';    // daemon -> watchdog: a pid_t follows, the process to watch

void MountFusectlIfMissing() {
  struct statfs sfs;
  if (::statfs(kConnections, &sfs) != 0) return;  // no fuse module, or no /sys
  if (static_cast<long>(sfs.f_type) == kFusectlMagic) return;
  // Only root may; a user's daemon then relies on fusectl being mounted by the system.
  if (::mount("fusectl", kConnections, "fusectl", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return;
  }
}

// A mountinfo path as it was given: the kernel writes space, tab, newline and backslash as
// octal escapes ("\040").
std::string Unescape(const char* s) {
  std::string out;
  for (; *s != '\0'; ++s) {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
        s[3] <= '7') {
      out += static_cast<char>((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
      s += 3;
    } else {
      out += *s;
    }
  }
  return out;
}

// The device field of the mountinfo line of a mount at `mountpoint` with device `device`, or
// any mount with that device when `mountpoint` is empty: whether it is still mounted.
bool MountedHere(const std::string& device, const std::string& mountpoint) {
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return false;
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    char dev[64], point[4096];
    if (std::sscanf(line, "%*s %*s %63s %*s %4095s", dev, point) != 2) continue;
    found = device == dev && (mountpoint.empty() || mountpoint == Unescape(point));
  }
  std::fclose(f);
  return found;
}

enum class DaemonState { kAlive, kDying };

// From /proc/PID/stat: state (field 3), flags (field 9) and start time (field 22), after the
// ")" that ends the name. `*start` is set on the first call (0) and compared after: another
// process that got the pid is not the daemon.
DaemonState ReadState(pid_t pid, unsigned long long* start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return DaemonState::kDying;  // gone
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return DaemonState::kDying;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return DaemonState::kAlive;
  char state = 0;
  unsigned flags = 0;
  unsigned long long started = 0;
  if (std::sscanf(close_paren + 1,
                  " %c %*s %*s %*s %*s %*s %u %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                  &state, &flags, &started) != 3) {
    return DaemonState::kAlive;
  }
  if (*start == 0) *start = started;
  if (started != *start) return DaemonState::kDying;  // the pid is another process's now
  if (state == 'Z' || state == 'X' || state == 'x' || (flags & kPfDying) != 0) {
    return DaemonState::kDying;
  }
  return DaemonState::kAlive;
}

void LogFromWatchdog(const WatchdogSpec& spec, LogLevel level, const std::string& line) {
  if (!spec.log_file.empty()) (void)SetLogFile(spec.log_file);
  SetLogSink(spec.sink);
  Log(level, line);
}

// Writes "1" to the abort file opened by `fd` (-`open_errno` when it could not be opened);
// 0 or an errno.
int WriteAbort(int fd, int open_errno) {
  if (fd < 0) return open_errno;
  return ::write(fd, "1", 1) == 1 ? 0 : errno;
}

// In the forked child: its own session, in /, stdin and stdout (and stderr but with -f) on
// /dev/null, the socket on descriptor 3, then pcrfs again as "pcrfs-watchdog" (WatchdogMain):
// every other descriptor is close-on-exec in pcrfs, /dev/fuse included, and a fresh process
// keeps nothing of the daemon's memory. Only async-signal-safe calls: the daemon may have
// threads by now in a library's hands.
[[noreturn]] void ExecWatchdog(const WatchdogSpec& spec, int sock, char* const argv[]) {
  ::setsid();
  if (::chdir("/") != 0) ::_exit(127);
  const int null = ::open("/dev/null", O_RDWR);
  if (null < 0) ::_exit(127);
  ::dup2(null, 0);
  ::dup2(null, 1);
  if (spec.sink != LogSink::kStderr) ::dup2(null, 2);
  if (sock == 3) {
    ::fcntl(3, F_SETFD, 0);
  } else if (::dup2(sock, 3) != 3) {  // dup2 clears close-on-exec
    ::_exit(127);
  }
  ::close_range(4, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execv("/proc/self/exe", argv);
  ::_exit(127);
}

// The watchdog's loop (fs/watchdog.h), on descriptor `sock`.
int RunWatchdog(const WatchdogSpec& spec, int sock) {
  ::prctl(PR_SET_NAME, "pcrfs-watchdog", 0, 0, 0);
  std::signal(SIGINT, SIG_IGN);  // a terminal's ^C goes to the daemon, which says goodbye
  std::signal(SIGHUP, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  if (::write(sock, &kReady, 1) != 1) return 1;
  // First the daemon's pid (after it has daemonized); a daemon gone before saying it leaves
  // nothing that is known to be its own.
  pid_t watched = 0;
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(sock, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return 0;
    if (c == kBye) return 0;
    if (c == kPid && ::read(sock, &watched, sizeof watched) == sizeof watched) break;
  }
  unsigned long long started = 0;  // the daemon's start time
  if (ReadState(watched, &started) != DaemonState::kAlive) return 1;
  // The abort file is opened now, while the daemon lives and the mount is certainly its own:
  // the kernel gives the next mount the lowest free device number, so after this mount is gone
  // the same connection number (and abort file name) may be another daemon's. fusectl forgets
  // the connection of an open abort file once the connection goes, so a late write to this
  // descriptor reaches no other mount. A user's watchdog may not open it (root's file, 0200):
  // the error is reported when the daemon dies.
  if (!MountedHere(spec.device, spec.mountpoint)) return 0;  // unmounted already
  const std::string abort_file = AbortFileOf(spec.device);
  const std::string conn_dir = abort_file.substr(0, abort_file.rfind('/'));
  const UniqueFd abort_fd(::open(abort_file.c_str(), O_WRONLY | O_CLOEXEC));
  const int open_errno = abort_fd.get() < 0 ? errno : 0;
  bool eof = false;
  for (;;) {
    if (!eof) {
      pollfd p{sock, POLLIN, 0};
      const int r = ::poll(&p, 1, kPollMs);
      if (r > 0) {
        char c = 0;
        const ssize_t n = ::read(sock, &c, 1);
        if (n == 1 && c == kBye) return 0;
        if (n == 1 && c == kUnmount) {
          if (MountedHere(spec.device, spec.mountpoint)) {
            ::umount2(spec.mountpoint.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
          }
          [[maybe_unused]] const ssize_t w = ::write(sock, &kDone, 1);
          continue;
        }
        if (n == 1 && c == kUnmountIfUnused) {
          int err = 0;
          if (MountedHere(spec.device, spec.mountpoint) &&
              ::umount2(spec.mountpoint.c_str(), UMOUNT_NOFOLLOW) != 0) {
            err = errno;
          }
          const char answer = static_cast<char>(std::min(err, 127));
          [[maybe_unused]] const ssize_t w = ::write(sock, &answer, 1);
          continue;
        }
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) eof = true;
        if (!eof) continue;
      } else if (r < 0 && errno != EINTR) {
        eof = true;
      }
    } else {
      ::usleep(kPollMs * 1000);
    }
    // The socket's end of file alone is not enough (every descriptor of the daemon closed means
    // every thread is exiting, which the state shows too): only a dying daemon is acted on.
    if (ReadState(watched, &started) == DaemonState::kAlive) continue;
    // The mount went with it, or another mount got its device number since (elsewhere, or
    // here: then the descriptor, opened before, no longer reaches a connection).
    if (::access(conn_dir.c_str(), F_OK) != 0 || !MountedHere(spec.device, spec.mountpoint)) {
      return 0;
    }
    const int err = WriteAbort(abort_fd.get(), open_errno);
    if (err == 0) {
      LogFromWatchdog(spec, LogLevel::kError,
                      "watchdog: the daemon (pid " + std::to_string(watched) + ") died with " +
                          spec.mountpoint +
                          " mounted; aborted its FUSE connection (readers get \"Transport "
                          "endpoint is not connected\"); unmount it: fusermount3 -u " +
                          spec.mountpoint);
    } else {
      LogFromWatchdog(spec, LogLevel::kError,
                      "watchdog: the daemon (pid " + std::to_string(watched) + ") died with " +
                          spec.mountpoint + " mounted; " + abort_file + ": " + std::strerror(err) +
                          "; as root: echo 1 > " + abort_file + "; then fusermount3 -u " +
                          spec.mountpoint);
    }
    return 0;
  }
}

// The crash handler's abort file, made before the handler is installed.
char g_abort_file[128];
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
struct sigaction g_previous[sizeof kCrashSignals / sizeof kCrashSignals[0]];

void OnCrash(int sig, siginfo_t* info, void*) {
  const int saved = errno;
  const int fd = ::open(g_abort_file, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    const bool aborted = ::write(fd, "1", 1) == 1;
    ::close(fd);
    if (aborted) {  // on stderr (with -f; /dev/null once detached): no formatting here
      char line[] = "pcrfs: fatal signal NN: aborted the FUSE connection (readers get errors)\n";
      char* nn = line + sizeof "pcrfs: fatal signal " - 1;
      nn[0] = static_cast<char>('0' + (sig / 10) % 10);
      nn[1] = static_cast<char>('0' + sig % 10);
      [[maybe_unused]] const ssize_t n = ::write(2, line, sizeof line - 1);
    }
  }
  for (size_t i = 0; i < sizeof kCrashSignals / sizeof kCrashSignals[0]; ++i) {
    if (kCrashSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  }
  errno = saved;
  // A fault (si_code > 0, from the kernel) happens again when the instruction is retried, now
  // with the previous handler; a signal sent by a process (kill, abort()) is sent again.
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace

std::string AbortFileOf(const std::string& device) {
  unsigned major = 0, minor = 0;
  char end = 0;
  if (std::sscanf(device.c_str(), "%u:%u%c", &major, &minor, &end) != 2) return "";
  // fusectl names a connection by the kernel's dev_t of its superblock: MKDEV(major, minor).
  return std::string(kConnections) + "/" + std::to_string((major << 20) | minor) + "/abort";
}

Status Watchdog::Start(const WatchdogSpec& spec) {
  if (AbortFileOf(spec.device).empty()) {
    return Status::InvalidArgument("watchdog: no device for " + spec.mountpoint);
  }
  MountFusectlIfMissing();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::FromErrno("watchdog socketpair", errno);
  }
  // The arguments are made before the fork: the child only calls async-signal-safe functions.
  const char* sink = spec.sink == LogSink::kStderr   ? "stderr"
                     : spec.sink == LogSink::kSyslog ? "syslog"
                                                     : "none";
  const char* argv[] = {"pcrfs-watchdog",
                        kWatchdogFlag,
                        spec.device.c_str(),
                        spec.mountpoint.c_str(),
                        spec.log_file.c_str(),
                        sink,
                        nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::FromErrno("watchdog fork", err);
  }
  if (pid == 0) ExecWatchdog(spec, fds[1], const_cast<char* const*>(argv));
  ::close(fds[1]);
  sock_ = UniqueFd(fds[0]);
  pid_ = pid;
  // It says it runs; a watchdog that could not start (exec failed) is reaped and none runs.
  pollfd p{sock_.get(), POLLIN, 0};
  char c = 0;
  if (::poll(&p, 1, 5000) != 1 || ::read(sock_.get(), &c, 1) != 1 || c != kReady) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    sock_.Reset();
    return Status::IOError("watchdog: did not start; a killed daemon may leave its mount hung");
  }
  return Status::OK();
}

bool Watchdog::DropPrivileges() {
  if (!running() || dropped_) return dropped_;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  bool any = false;
  for (const auto& d : data) any = any || d.effective != 0 || d.permitted != 0;
  if (!any) return false;  // an ordinary user: nothing to give up
  const auto fail = [](const char* what) {
    Log(LogLevel::kWarning, std::string("could not drop privileges (") + what + ": " +
                                std::strerror(errno) + "); serving with them");
    return false;
  };
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
  for (int cap = 0; cap <= 63; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the last capability this kernel knows
      return fail("bounding set");
    }
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
  header = {_LINUX_CAPABILITY_VERSION_3, 0};
  if (::syscall(SYS_capset, &header, none) != 0) return fail("capset");
  dropped_ = true;
  return true;
}

void Watchdog::Watch(pid_t pid) {
  if (!running()) return;
  char message[1 + sizeof pid];
  message[0] = kPid;
  std::memcpy(message + 1, &pid, sizeof pid);
  [[maybe_unused]] const ssize_t n = ::send(sock_.get(), message, sizeof message, MSG_NOSIGNAL);
}

void Watchdog::Unmount() {
  if (!running()) return;
  if (::send(sock_.get(), &kUnmount, 1, MSG_NOSIGNAL) != 1) return;
  pollfd p{sock_.get(), POLLIN, 0};
  if (::poll(&p, 1, 5000) > 0) {
    char c = 0;
    [[maybe_unused]] const ssize_t n = ::read(sock_.get(), &c, 1);
  }
}

int Watchdog::UnmountIfUnused() {
  if (!running()) return ESRCH;
  if (::send(sock_.get(), &kUnmountIfUnused, 1, MSG_NOSIGNAL) != 1) return errno;
  pollfd p{sock_.get(), POLLIN, 0};
  if (::poll(&p, 1, 5000) <= 0) return ETIMEDOUT;
  char c = 0;
  if (::read(sock_.get(), &c, 1) != 1) return EIO;
  return c;
}

void Watchdog::Finish() {
  if (!running()) return;
  [[maybe_unused]] const ssize_t n = ::send(sock_.get(), &kBye, 1, MSG_NOSIGNAL);
  sock_.Reset();
  for (int i = 0; i < 200; ++i) {  // it exits at once; 2 s at most
    const pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    ::usleep(10000);
  }
  pid_ = -1;
}

int WatchdogMain(int argc, char** argv) {
  if (argc != 6 || std::strcmp(argv[1], kWatchdogFlag) != 0) return 2;
  WatchdogSpec spec;
  spec.device = argv[2];
  spec.mountpoint = argv[3];
  spec.log_file = argv[4];
  spec.sink = std::strcmp(argv[5], "stderr") == 0   ? LogSink::kStderr
              : std::strcmp(argv[5], "syslog") == 0 ? LogSink::kSyslog
                                                    : LogSink::kNone;
  if (AbortFileOf(spec.device).empty()) return 2;
  return RunWatchdog(spec, 3);
}

void InstallCrashAbort(const std::string& abort_file) {
  if (abort_file.empty() || abort_file.size() >= sizeof g_abort_file) return;
  std::memcpy(g_abort_file, abort_file.c_str(), abort_file.size() + 1);
  for (size_t i = 0; i < sizeof kCrashSignals / sizeof kCrashSignals[0]; ++i) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &OnCrash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    ::sigaction(kCrashSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace pcrfs::fs
