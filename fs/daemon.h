// pcrfs STORE MOUNTPOINT [options]: option parsing, checks before mounting, the session loop.
//
// Signals: SIGTERM and SIGINT end the session and unmount (exit 0). SIGHUP never unmounts: it
// reopens -o log_file (logrotate), logs "SIGHUP: reloading credentials and header files" and
// calls DaemonHooks::reload, while the session keeps serving.
#pragma once

#include <functional>

namespace pcrfs::fs {

// What the daemon does on events from outside the FUSE session.
struct DaemonHooks {
  // On SIGHUP: re-read credentials and header files (a remote store's client's Reload()). Runs
  // on the daemon's reload thread, never in a signal handler, one call at a time, while FUSE
  // requests are being served; SIGHUPs that arrive during a call give one more call. Must not
  // block for long and must be thread-safe against the client's requests. An exception is
  // logged. Empty: nothing beyond the log line and the log file's reopening.
  std::function<void()> reload;
};

// Exit codes: 0 unmounted cleanly, 1 bad arguments, store, mount point or log file (nothing
// mounted), 2 the FUSE session failed.
int RunDaemon(int argc, char** argv);

}  // namespace pcrfs::fs
