#include "location/store_location.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace pcrfs {
namespace {

// DefaultCacheDir as a non-root user sees it, with neither HOME nor XDG_CACHE_HOME set: run in
// a child that drops to `uid` when this test runs as root.
std::string NonRootCacheDirWithoutHome(uid_t uid) {
  auto no_env = [](const char*) -> const char* { return nullptr; };
  if (::geteuid() != 0) return DefaultCacheDir("http://example.com/store", no_env);
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (::setresuid(uid, uid, uid) != 0) ::_exit(1);
    const std::string dir = DefaultCacheDir("http://example.com/store", no_env);
    const ssize_t w = ::write(fds[1], dir.data(), dir.size());
    ::_exit(w == static_cast<ssize_t>(dir.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

TEST(StoreLocationTest, DefaultCacheDirWithoutHomeUsesThePasswordDatabase) {
  const uid_t uid = ::geteuid() == 0 ? 65534 : ::geteuid();
  const struct passwd* pw = ::getpwuid(uid);
  ASSERT_NE(pw, nullptr);
  const std::string dir = NonRootCacheDirWithoutHome(uid);
  // The password database's home, never /tmp (a predictable folder another user may have made).
  EXPECT_EQ(dir.rfind(std::string(pw->pw_dir) + "/.cache/pcrfs/", 0), 0u) << dir;
  EXPECT_EQ(dir.find("/tmp/"), std::string::npos) << dir;
}

}  // namespace
}  // namespace pcrfs
