// Messages of a long-running process (the daemon's damage reports, its warnings, SIGHUP): each
// is written once to each place it goes to:
//  - the sink: stderr while the process runs in the foreground, syslog once it has daemonized
//    (its stderr is /dev/null then; on systemd hosts the journal gets syslog), or none;
//  - and, once SetLogFile() has opened one, a log file (-o log_file), which also serves hosts
//    and containers that have no syslog.
// Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace pcrfs {

// kNone: the log file only (SetLogFile), or nowhere.
enum class LogSink { kStderr, kSyslog, kNone };
enum class LogLevel { kError, kWarning, kInfo };

// Where messages go from now on; kStderr until called. kSyslog opens syslog as `ident`
// (LOG_DAEMON, with the pid), which must outlive every later message (a string literal).
void SetLogSink(LogSink sink, const char* ident = "pcrfs");
LogSink CurrentLogSink();

// Appends every later message to the file at `path` as well as to the sink: one line each,
// "2026-11-27T12:19:44.123Z warning pcrfs[1234]: MESSAGE" (UTC; error, warning or info; line
// breaks inside MESSAGE written as \n), one write(2) per line on an O_APPEND descriptor, so the
// lines of several processes sharing the file stay whole. The file is created (0640) if missing;
// its folder is not. The descriptor is close-on-exec and survives fork(), so a file opened
// before daemonizing keeps being written after. Replaces an earlier log file.
// Errors: IOError "log file PATH: REASON" (nothing changed).
Status SetLogFile(const std::string& path);

// Opens the log file's path again (after logrotate has moved the file away: the next lines go
// to a new file at the path). On failure the old descriptor is kept and the reason logged.
// Nothing to do without a log file.
void ReopenLogFile();

// Stops writing to the log file (closes it).
void CloseLogFile();

// One line. On stderr it is prefixed with "pcrfs: " (the ident); syslog adds the ident itself.
void Log(LogLevel level, std::string_view message);

}  // namespace pcrfs
