#include "common/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/mutex.h"
#include "common/unique_fd.h"

namespace pcrfs {
namespace {

Mutex mu;
LogSink sink GUARDED_BY(mu) = LogSink::kStderr;
const char* ident GUARDED_BY(mu) = "pcrfs";
UniqueFd log_fd GUARDED_BY(mu);
std::string log_path GUARDED_BY(mu);

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

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
  }
  return "error";
}

Result<UniqueFd> OpenLogFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
  if (fd < 0) {
    return Err(Status::IOError("log file " + path + ": " + std::strerror(errno), errno));
  }
  UniqueFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    // A FIFO or a terminal would block or interleave; only a plain file is appended to.
    return Err(Status::IOError("log file " + path + ": not a regular file"));
  }
  return owned;
}

// "2026-11-27T12:19:44.123Z LEVEL IDENT[PID]: MESSAGE\n", line breaks in MESSAGE escaped.
std::string FileLine(LogLevel level, const char* id, std::string_view message) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  tm utc{};
  ::gmtime_r(&now.tv_sec, &utc);
  char stamp[64];
  const size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", now.tv_nsec / 1000000);
  std::string line = std::string(stamp) + " " + LevelName(level) + " " + id + "[" +
                     std::to_string(::getpid()) + "]: ";
  line.reserve(line.size() + message.size() + 1);
  for (char c : message) {
    if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else {
      line += c;
    }
  }
  line += '\n';
  return line;
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

Status SetLogFile(const std::string& path) {
  auto fd = OpenLogFile(path);
  if (!fd) return fd.error();
  MutexLock l(&mu);
  log_fd = std::move(*fd);
  log_path = path;
  return Status::OK();
}

void ReopenLogFile() {
  std::string path;
  {
    MutexLock l(&mu);
    if (!log_fd.valid()) return;
    path = log_path;
  }
  auto fd = OpenLogFile(path);
  if (!fd) {
    Log(LogLevel::kWarning, fd.error().message() + "; still writing to the file opened before");
    return;
  }
  MutexLock l(&mu);
  log_fd = std::move(*fd);
}

void CloseLogFile() {
  MutexLock l(&mu);
  log_fd.Reset();
  log_path.clear();
}

void Log(LogLevel level, std::string_view message) {
  const int saved_errno = errno;
  MutexLock l(&mu);
  const int len = static_cast<int>(message.size());
  if (sink == LogSink::kSyslog) {
    ::syslog(SyslogPriority(level), "%.*s", len, message.data());
  } else if (sink == LogSink::kStderr) {
    // One fprintf per line: stderr is unbuffered, and whole lines keep concurrent messages apart.
    std::fprintf(stderr, "%s: %.*s\n", ident, len, message.data());
  }
  if (log_fd.valid()) {
    // A full disk or an I/O error loses the line; there is nowhere left to say so.
    const std::string line = FileLine(level, ident, message);
    [[maybe_unused]] const ssize_t n = ::write(log_fd.get(), line.data(), line.size());
  }
  errno = saved_errno;
}

}  // namespace pcrfs
