#include "common/log.h"

#include <syslog.h>

#include <cstdio>

#include "common/mutex.h"

namespace pcrfs {
namespace {

Mutex mu;
LogSink sink GUARDED_BY(mu) = LogSink::kStderr;
const char* ident GUARDED_BY(mu) = "pcrfs";

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return LOG_ERR;
    case LogLevel::kWarning:
      return LOG_WARNING;
    case LogLevel::kInfo:
      return LOG_INFO;
  }
  return LOG_ERR;
}

}  // namespace

void SetLogSink(LogSink new_sink, const char* new_ident) {
  MutexLock l(&mu);
  sink = new_sink;
  ident = new_ident;
  if (sink == LogSink::kSyslog) ::openlog(ident, LOG_PID, LOG_DAEMON);
}

LogSink CurrentLogSink() {
  MutexLock l(&mu);
  return sink;
}

void Log(LogLevel level, std::string_view message) {
  MutexLock l(&mu);
  const int len = static_cast<int>(message.size());
  if (sink == LogSink::kSyslog) {
    ::syslog(SyslogPriority(level), "%.*s", len, message.data());
  } else {
    // One fprintf per line: stderr is unbuffered, and whole lines keep concurrent messages apart.
    std::fprintf(stderr, "%s: %.*s\n", ident, len, message.data());
  }
}

}  // namespace pcrfs
