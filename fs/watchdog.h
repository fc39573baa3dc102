// A killed daemon never wedges its mount (issue 34), and a daemon run as root keeps no
// privileges once mounted.
//
// The wedge: when the daemon dies (SIGKILL, the OOM killer, a crash) while a thread of it is
// inside FUSE_NOTIFY_STORE (PagePusher) waiting for a page that a reader's pending READ holds
// locked, that thread never leaves the kernel, so the process never finishes exiting, /dev/fuse
// is never released, readers sit in D state and the mount cannot be unmounted. Only writing to
// /sys/fs/fuse/connections/N/abort (fusectl) frees it: the kernel then ends every request with
// ENOTCONN, the pages unlock, the stuck thread returns and the process ends.
//
// The watchdog is a small process forked from the daemon once the mount is up (after
// daemonizing; with -f too). It holds none of the daemon's files (not /dev/fuse, not the mount
// point: it runs in /) but the connection's abort file, opened once it has the daemon's pid
// (while the mount is certainly the daemon's: a later mount may get the same device number and
// connection number, and an open abort file of a connection that is gone reaches nothing), runs in
// a session of its own (a signal to the daemon's process group does not reach it) and keeps the
// daemon's credentials as they were before the privilege drop. It waits on a socket to the daemon
// and, every 250 ms, reads /proc/PID/stat of the daemon: once the daemon's main thread has exited
// (zombie, exiting, or gone, or the socket reached end of file without a goodbye) while the mount
// is still there (same device, same mount point), it writes 1 to the connection's abort file, logs
// one line (syslog, or the log file, or stderr with -f: where the daemon logs) and exits. A daemon
// that ends normally says goodbye first (Finish): the watchdog then exits quietly.
//
// The daemon's own fatal-signal handler (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE) writes the
// same abort file first (InstallCrashAbort): a crash that would dump core waits for every
// thread, the stuck one included, so it must be unwedged from inside.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"

namespace pcrfs::fs {

struct WatchdogSpec {
  std::string device;      // the mount's "MAJOR:MINOR" in /proc/self/mountinfo
  std::string mountpoint;  // absolute
  std::string log_file;    // absolute; empty: none
  LogSink sink = LogSink::kSyslog;
};

// The fusectl abort file of the connection of the mount whose mountinfo device is `device`
// ("0:53" -> "/sys/fs/fuse/connections/53/abort"); empty if `device` is malformed.
std::string AbortFileOf(const std::string& device);

// How pcrfs runs as the watchdog: `pcrfs --watchdog DEVICE MOUNTPOINT LOG_FILE SINK` with the
// socket to the daemon on descriptor 3 (Watchdog::Start execs it so; argv[0] is
// "pcrfs-watchdog", so `pidof pcrfs` names the daemon alone).
inline constexpr const char* kWatchdogFlag = "--watchdog";
// Runs the watchdog; returns its exit code (2: arguments that Watchdog::Start never gives).
int WatchdogMain(int argc, char** argv);

class Watchdog {
 public:
  Watchdog() = default;
  ~Watchdog() { Finish(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Mounts fusectl at /sys/fs/fuse/connections if it is not mounted and this process may, then
  // starts the watchdog (fork, exec of /proc/self/exe) and waits up to 5 s until it runs. Call
  // before daemonizing (the watchdog is running before the mount command returns) and before
  // any thread starts. Errors: socketpair, fork or exec failed (nothing runs).
  Status Start(const WatchdogSpec& spec);
  // Tells the watchdog the daemon's pid (after daemonizing: the process that serves). It
  // watches nothing before.
  void Watch(pid_t pid);
  bool running() const { return pid_ > 0; }

  // Gives up every capability (bounding, effective, permitted, inheritable and ambient sets)
  // of the calling thread, and sets no_new_privs, when it has any capability (root): call it
  // while the process has one thread (threads started later inherit the empty sets); a process
  // without any keeps everything as it is (fusermount3, setuid root, must still work for its
  // unmount). Only with a running watchdog, which keeps root's and unmounts for the daemon
  // (Unmount). Returns whether it dropped; a failure is logged and leaves the daemon serving.
  bool DropPrivileges();
  bool dropped() const { return dropped_; }

  // Asks the watchdog to unmount the mount (lazily, as libfuse does for root) and waits up to
  // 5 s for it. For a daemon that dropped its privileges and cannot unmount itself.
  void Unmount();
  // Asks the watchdog to unmount the mount unless it is busy (umount2 without MNT_DETACH, as
  // fusermount3 -u does) and waits up to 5 s for its answer: 0 when unmounted, else the errno
  // (EBUSY: files or folders are open in it). For SIGTERM, from one thread at a time.
  int UnmountIfUnused();

  // The daemon ends normally: the watchdog exits quietly; waits for it (up to 2 s).
  void Finish();

 private:
  pid_t pid_ = -1;
  UniqueFd sock_;
  bool dropped_ = false;
};

// Installs handlers for SIGSEGV, SIGBUS, SIGABRT, SIGILL and SIGFPE that write 1 to
// `abort_file` (async-signal-safe open/write/close) and then let the signal take its course
// (the handler that was there before, a sanitizer's, or the default: a core dump). Call once,
// single-threaded. Nothing with an empty path.
void InstallCrashAbort(const std::string& abort_file);

}  // namespace pcrfs::fs
