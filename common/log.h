// Messages of a long-running process (the daemon's damage reports): each is written once, to
// stderr while the process runs in the foreground, to syslog once it has daemonized (its stderr
// is /dev/null then). Thread-safe.
#pragma once

#include <string_view>

namespace pcrfs {

enum class LogSink { kStderr, kSyslog };
enum class LogLevel { kError, kWarning, kInfo };

// Where messages go from now on; kStderr until called. kSyslog opens syslog as `ident`
// (LOG_DAEMON, with the pid), which must outlive every later message (a string literal).
void SetLogSink(LogSink sink, const char* ident = "pcrfs");
LogSink CurrentLogSink();

// One line. On stderr it is prefixed with "pcrfs: " (the ident); syslog adds the ident itself.
void Log(LogLevel level, std::string_view message);

}  // namespace pcrfs
