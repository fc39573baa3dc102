#include "common/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace pcrfs {
namespace {

// Runs fn with stderr redirected to a pipe; returns what it wrote.
template <typename F>
std::string CaptureStderr(F fn) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  const int saved = ::dup(2);
  ::dup2(p[1], 2);
  ::close(p[1]);
  fn();
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  return out;
}

TEST(LogTest, ForegroundWritesEachMessageOnceToStderr) {
  SetLogSink(LogSink::kStderr);
  const std::string out = CaptureStderr([] {
    Log(LogLevel::kError, "damaged data: r.pcr: \"a.jpg\" (level 3): checksum");
    Log(LogLevel::kWarning, "second");
  });
  EXPECT_EQ(out, "pcrfs: damaged data: r.pcr: \"a.jpg\" (level 3): checksum\npcrfs: second\n");
}

TEST(LogTest, DaemonWritesNothingToStderr) {
  SetLogSink(LogSink::kSyslog);
  EXPECT_EQ(CurrentLogSink(), LogSink::kSyslog);
  const std::string out = CaptureStderr([] { Log(LogLevel::kInfo, "pcrfs log_test: ignore"); });
  SetLogSink(LogSink::kStderr);
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace pcrfs
