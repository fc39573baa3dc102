#include "common/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A fresh folder, removed with what it holds.
class LogFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pcrfs-log-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    CloseLogFile();
    SetLogSink(LogSink::kStderr);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(LogFileTest, EachMessageIsOneLineWithTimeLevelAndPid) {
  const std::string path = dir_ + "/pcrfs.log";
  ASSERT_TRUE(SetLogFile(path).ok());
  SetLogSink(LogSink::kNone);
  const std::string out = CaptureStderr([] {
    Log(LogLevel::kWarning, "the disk cache is in use");
    Log(LogLevel::kInfo, "two\nlines");
    Log(LogLevel::kError, "last");
  });
  EXPECT_EQ(out, "");  // kNone: the file only
  const std::string pid = std::to_string(::getpid());
  const std::string got = ReadFile(path);
  // Three lines "TIME LEVEL pcrfs[PID]: MESSAGE", TIME as 2026-11-27T12:19:44.123Z. (No
  // std::regex: GCC 12 warns inside it under ASan, and warnings are errors.)
  std::vector<std::string> lines;
  for (size_t at = 0; at < got.size();) {
    const size_t nl = got.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << got;
    lines.push_back(got.substr(at, nl - at));
    at = nl + 1;
  }
  ASSERT_EQ(lines.size(), 3u) << got;
  const std::string tail[] = {" warning pcrfs[" + pid + "]: the disk cache is in use",
                              " info pcrfs[" + pid + "]: two\\nlines",
                              " error pcrfs[" + pid + "]: last"};
  for (size_t i = 0; i < 3; ++i) {
    const std::string& l = lines[i];
    ASSERT_EQ(l.size(), 24 + tail[i].size()) << l;
    EXPECT_EQ(l.substr(24), tail[i]);
    for (size_t k = 0; k < 24; ++k) {
      const char c = l[k];
      const char want = "0000-00-00T00:00:00.000Z"[k];
      if (want == '0') {
        EXPECT_TRUE(c >= '0' && c <= '9') << l;
      } else {
        EXPECT_EQ(c, want) << l;
      }
    }
  }
}

TEST_F(LogFileTest, AppendsBesideStderrAndNeverTruncates) {
  const std::string path = dir_ + "/pcrfs.log";
  { std::ofstream(path) << "earlier line\n"; }
  ASSERT_TRUE(SetLogFile(path).ok());
  SetLogSink(LogSink::kStderr);
  const std::string out = CaptureStderr([] { Log(LogLevel::kWarning, "both"); });
  EXPECT_EQ(out, "pcrfs: both\n");
  const std::string got = ReadFile(path);
  EXPECT_EQ(got.rfind("earlier line\n", 0), 0u) << got;
  EXPECT_NE(got.find(" warning pcrfs["), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 7), ": both\n") << got;
}

TEST_F(LogFileTest, AMissingFolderIsOneLineNamingThePath) {
  const std::string path = dir_ + "/missing/pcrfs.log";
  const Status s = SetLogFile(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "log file " + path + ": No such file or directory");
  EXPECT_FALSE(std::filesystem::exists(path));
  const Status d = SetLogFile(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("log file " + dir_ + ": "), std::string::npos) << d.message();
}

TEST_F(LogFileTest, ReopenFollowsThePathAfterARotation) {
  const std::string path = dir_ + "/pcrfs.log";
  ASSERT_TRUE(SetLogFile(path).ok());
  SetLogSink(LogSink::kNone);
  Log(LogLevel::kInfo, "before");
  std::filesystem::rename(path, path + ".1");
  Log(LogLevel::kInfo, "still the old file");
  ReopenLogFile();
  Log(LogLevel::kInfo, "after");
  const std::string old = ReadFile(path + ".1");
  EXPECT_NE(old.find("before"), std::string::npos);
  EXPECT_NE(old.find("still the old file"), std::string::npos);
  const std::string now = ReadFile(path);
  EXPECT_EQ(now.find("before"), std::string::npos) << now;
  EXPECT_NE(now.find("after"), std::string::npos) << now;
  CloseLogFile();
  Log(LogLevel::kInfo, "nowhere");
  EXPECT_EQ(ReadFile(path).find("nowhere"), std::string::npos);
}

}  // namespace
}  // namespace pcrfs
