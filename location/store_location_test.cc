#include "location/store_location.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

#include "common/secret.h"

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

TEST(StoreLocationTest, PlainHttpCredentialsAreWarnedAbout) {
  auto at = [](const std::string& url) {
    StoreLocation loc;
    loc.remote = true;
    loc.url = *ParseUrl(url);
    loc.name = loc.url.ToString();
    return loc;
  };
  // A signed URL's query over plain http to another machine.
  EXPECT_EQ(PlainHttpCredentialsWarning(at("http://10.1.2.3:8080/store?sig=abc")),
            "http://10.1.2.3:8080/store: credentials go over plain http to 10.1.2.3:8080 (not "
            "this machine): anyone on the way can read or replay them; use https");
  // A header file (a bearer token), and an S3 endpoint a store's signer talks to.
  StoreLocation headers = at("http://data.lan/store");
  headers.options.headers_file = "/etc/pcrfs/token";
  EXPECT_NE(PlainHttpCredentialsWarning(headers), "");
  StoreLocation s3 = at("http://unused.example/x");
  s3.s3.emplace();
  s3.s3->endpoint = *ParseUrl("http://minio.lan:9000");
  s3.options.headers_file = "/etc/pcrfs/token";
  EXPECT_NE(PlainHttpCredentialsWarning(s3).find("minio.lan:9000"), std::string::npos);
  // Nothing to warn about: https, loopback, no credentials, a local store.
  EXPECT_EQ(PlainHttpCredentialsWarning(at("https://10.1.2.3/store?sig=abc")), "");
  EXPECT_EQ(PlainHttpCredentialsWarning(at("http://127.0.0.1:8080/store?sig=abc")), "");
  EXPECT_EQ(PlainHttpCredentialsWarning(at("http://[::1]:8080/store?sig=abc")), "");
  EXPECT_EQ(PlainHttpCredentialsWarning(at("http://localhost/store?sig=abc")), "");
  EXPECT_EQ(PlainHttpCredentialsWarning(at("http://10.1.2.3/store")), "");
  EXPECT_EQ(PlainHttpCredentialsWarning(StoreLocation{}), "");
}

TEST(StoreLocationTest, LoopbackHostsAndArgvBlanking) {
  for (const char* yes : {"localhost", "127.0.0.1", "127.255.0.9", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(yes)) << yes;
  }
  for (const char* no : {"127.attacker.example", "128.0.0.1", "::2", "10.0.0.1", "", "127.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(no)) << no;
  }
  std::string a0 = "pcr", a1 = "inspect", a2 = "https://h/store?sig=SECRET&sv=1", a3 = "/local?x";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  BlankUrlQueriesInArgv(4, argv);
  EXPECT_EQ(std::string(argv[2]),
            "https://h/store?" + std::string(std::strlen("sig=SECRET&sv=1"), '*'));
  EXPECT_STREQ(argv[3], "/local?x");  // not a URL
}

TEST(StoreLocationTest, SecretsAreHeldOnceInTheSigner) {
  // An Azure account key: in the signer, not in the configuration every copy of the location
  // carries (the record opener captures one).
  std::map<std::string, std::string> vars = {{"AZURE_STORAGE_ACCOUNT", "pcrfsacct"},
                                             {"AZURE_STORAGE_KEY", "c2VjcmV0LWtleS1ieXRlcw=="}};
  auto env = [&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  RemoteOptions options;
  auto loc = ResolveLocation("az://container/prefix", options, env);
  ASSERT_TRUE(loc.has_value()) << loc.error().ToString();
  ASSERT_TRUE(loc->azure.has_value());
  EXPECT_EQ(loc->azure->auth, AzureConfig::Auth::kSharedKey);
  EXPECT_EQ(loc->azure->key, "");
  EXPECT_NE(loc->signer, nullptr);
  // A SAS too.
  vars.erase("AZURE_STORAGE_KEY");
  vars["AZURE_STORAGE_SAS_TOKEN"] = "sv=2022-11-02&ss=b&sig=c2lnbmF0dXJl";
  loc = ResolveLocation("az://container/prefix", options, env);
  ASSERT_TRUE(loc.has_value()) << loc.error().ToString();
  EXPECT_EQ(loc->azure->auth, AzureConfig::Auth::kSas);
  EXPECT_EQ(loc->azure->sas, "");
}

// PR_GET_DUMPABLE in a child after KeepSecretsOutOfCoreDumps as `program`, with
// PCRFS_CORE_DUMPS set to `keep` (nullptr: unset).
int DumpableAfter(const char* keep, const char* program = "pcrfs") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (keep != nullptr) {
      ::setenv("PCRFS_CORE_DUMPS", keep, 1);
    } else {
      ::unsetenv("PCRFS_CORE_DUMPS");
    }
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);  // as a fresh process is (this one may hold secrets)
    KeepSecretsOutOfCoreDumps(program);
    ::_exit(::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(StoreLocationTest, NoCoreDumpsWhileSecretsAreHeldUnlessAskedFor) {
  EXPECT_EQ(DumpableAfter(nullptr), 0);
  EXPECT_EQ(DumpableAfter("0"), 0);
  EXPECT_EQ(DumpableAfter("1"), 1);  // for debugging a crash with a core dump
  EXPECT_EQ(DumpableAfter(nullptr, "pcr"), 0);
  // A program that embeds the library (Python with the pcrfs module) is left alone.
  EXPECT_EQ(DumpableAfter(nullptr, "python3"), 1);
}

}  // namespace
}  // namespace pcrfs
