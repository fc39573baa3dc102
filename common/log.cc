#include "common/log.h"

#include <syslog.h>

#include <cstdio>
#include <mutex>

namespace pcrfs {
namespace {

std::mutex mu;
LogSink sink = LogSink::kStderr;  // GUARDED_BY(mu)
const char* ident = "pcrfs";      // GUARDED_BY(mu)

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
  std::lock_guard<std::mutex> l(mu);
  sink = new_sink;
  ident = new_ident;
  if (sink == LogSink::kSyslog) ::openlog(ident, LOG_PID, LOG_DAEMON);
}

LogSink CurrentLogSink() {
  std::lock_guard<std::mutex> l(mu);
  return sink;
}

void Log(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> l(mu);
  const int len = static_cast<int>(message.size());
  if (sink == LogSink::kSyslog) {
    ::syslog(SyslogPriority(level), "%.*s", len, message.data());
  } else {
    // One fprintf per line: stderr is unbuffered, and whole lines keep concurrent messages apart.
    std::fprintf(stderr, "%s: %.*s\n", ident, len, message.data());
  }
}

}  // namespace pcrfs
