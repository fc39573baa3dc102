#include "remote/aws_credentials.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/test_support.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

using namespace std::chrono_literals;

constexpr char kSecret[] = "SECRETwJalrXUtnFEMI/K7MDENG";
constexpr char kToken[] = "TOKENFwoGZXIvYXdzEBYaDH";

// 2026-11-27T12:00:00Z
const Clock::time_point kT0 = Clock::time_point(std::chrono::seconds(1795780800));

std::string StsAnswer(const std::string& id, const std::string& expiration) {
  return "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
         "<AssumeRoleResult><AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>"
         "</AssumedRoleUser><Credentials><AccessKeyId>" +
         id + "</AccessKeyId><SecretAccessKey>" + kSecret + "</SecretAccessKey><SessionToken>" +
         kToken + "</SessionToken><Expiration>" + expiration +
         "</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>";
}

std::string MetadataAnswer(const std::string& id, const std::string& expiration) {
  return R"({"Code":"Success","Type":"AWS-HMAC","AccessKeyId":")" + id +
         R"(","SecretAccessKey":")" + kSecret + R"(","Token":")" + kToken + R"(","Expiration":")" +
         expiration + R"("})";
}

std::string ProcessAnswer(const std::string& id, const std::string& expiration) {
  return R"({"Version":1,"AccessKeyId":")" + id + R"(","SecretAccessKey":")" + kSecret +
         R"(","SessionToken":")" + kToken + R"(","Expiration":")" + expiration + R"("})";
}

std::string Header(const HeaderList& h, const std::string& name) {
  for (const auto& [k, v] : h) {
    if (k == name) return v;
  }
  return "";
}

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// No secret and no token in any text we show.
void ExpectClean(const std::string& text) {
  EXPECT_FALSE(Has(text, kSecret)) << text;
  EXPECT_FALSE(Has(text, kToken)) << text;
}

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_["HOME"] = dir_.path();
    std::filesystem::create_directories(dir_.Join(".aws"));
    // By default the metadata service is "not there".
    routes_["PUT http://169.254.169.254/latest/api/token"] = [](const SimpleHttpRequest& r) {
      return Result<SimpleHttpResponse>(
          Err(Status::IOError(r.url + ": Couldn't connect to server")));
    };
  }

  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_.Join(rel), std::ios::trunc) << text;
  }

  using Route = std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)>;
  void Answer(const std::string& key, long status, std::string body) {
    routes_[key] = [status, body](const SimpleHttpRequest&) {
      return Result<SimpleHttpResponse>(SimpleHttpResponse{status, body});
    };
  }

  AwsCredentialDeps Deps() {
    AwsCredentialDeps d;
    d.env = [this](const char* n) -> const char* {
      auto it = env_.find(n);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    d.http = [this](const SimpleHttpRequest& r) -> Result<SimpleHttpResponse> {
      requests_.push_back(r);
      auto it = routes_.find(r.method + " " + r.url);
      if (it == routes_.end()) return Err(Status::IOError(r.url + ": no route in the test"));
      return it->second(r);
    };
    d.run_process = [this](const std::string& command) -> Result<std::string> {
      commands_.push_back(command);
      return process_(command);
    };
    d.now = [this] { return now_.load(); };
    return d;
  }

  Result<std::shared_ptr<RenewingCredentials>> Resolve(const AwsCredentialOptions& o = {}) {
    requests_.clear();
    return ResolveAwsCredentials(o, Deps());
  }

  test::TempDir dir_;
  std::map<std::string, std::string> env_;
  std::map<std::string, Route> routes_;
  std::vector<SimpleHttpRequest> requests_;
  std::vector<std::string> commands_;
  std::function<Result<std::string>(const std::string&)> process_ = [](const std::string&) {
    return Result<std::string>(Err(Status::IOError("no process in this test")));
  };
  std::atomic<Clock::time_point> now_{kT0};
};

// ---- Environment and the order of the chain ----------------------------------------------------

TEST_F(AwsCredentialsTest, EnvironmentKeysAreFixed) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  env_["AWS_SESSION_TOKEN"] = kToken;
  Write(".aws/credentials", "[default]\naws_access_key_id=FILEKEY\naws_secret_access_key=S\n");
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  auto snap = (*c)->Current();
  EXPECT_EQ(snap->source, "environment");
  EXPECT_EQ(snap->credentials.access_key_id(), "AKIAENV");
  EXPECT_EQ(snap->credentials.session_token(), kToken);
  EXPECT_EQ(snap->generation, 1u);
  EXPECT_FALSE(snap->expiration.has_value());
  EXPECT_EQ((*c)->kind(), CredentialProvider::Kind::kFixed);
  EXPECT_FALSE((*c)->RequestRenewal(1));
  EXPECT_FALSE((*c)->next_renewal().has_value());
  ExpectClean((*c)->DescribeJson());
  EXPECT_TRUE(Has((*c)->DescribeJson(), "\"access_key_id\":\"" + MaskedKeyId("AKIAENV") + "\""));
  EXPECT_TRUE(requests_.empty());
}

// botocore's Session(profile=...) and the CLI's --profile drop the environment's keys; the
// variable AWS_PROFILE does not.
TEST_F(AwsCredentialsTest, AProfileOptionOverridesEnvironmentKeysButAwsProfileDoesNot) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  Write(".aws/credentials", "[train]\naws_access_key_id=AKIATRAIN\naws_secret_access_key=S\n");
  AwsCredentialOptions o;
  o.profile = "train";
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIATRAIN");
  env_["AWS_PROFILE"] = "train";
  auto d = Resolve();
  ASSERT_TRUE(d.has_value()) << d.error().ToString();
  EXPECT_EQ((*d)->Current()->credentials.access_key_id(), "AKIAENV");
}

TEST_F(AwsCredentialsTest, EnvironmentKeyWithoutSecretNamesTheVariable) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  auto c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "AWS_SECRET_ACCESS_KEY")) << c.error().message();
}

TEST_F(AwsCredentialsTest, NoSignIsNull) {
  AwsCredentialOptions o;
  o.no_sign = true;
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, nullptr);
}

TEST_F(AwsCredentialsTest, NothingAnywhereNamesEverySource) {
  auto c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(c.error().IsNotFound());
  const std::string m = c.error().message();
  EXPECT_TRUE(Has(m, "no AWS credentials: environment (AWS_ACCESS_KEY_ID unset)")) << m;
  EXPECT_TRUE(Has(m, "web identity (AWS_WEB_IDENTITY_TOKEN_FILE unset)")) << m;
  EXPECT_TRUE(Has(m, "profile 'default' (not in " + dir_.Join(".aws/credentials"))) << m;
  EXPECT_TRUE(Has(m, "container (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) << m;
  EXPECT_TRUE(Has(m,
                  "instance metadata (http://169.254.169.254/latest/api/token: Couldn't "
                  "connect to server)"))
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);

  env_["AWS_EC2_METADATA_DISABLED"] = "true";
  c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "instance metadata (AWS_EC2_METADATA_DISABLED=true)"));
  EXPECT_TRUE(requests_.empty());
}

TEST_F(AwsCredentialsTest, ChainOrder) {
  // Instance metadata alone.
  Answer("PUT http://169.254.169.254/latest/api/token", 200, "IMDSTOKEN");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/", 200, "role1");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/role1", 200,
         MetadataAnswer("ASIAIMDS", "2026-11-27T18:00:00Z"));
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->source, "instance metadata (role role1)");
  // The container wins over instance metadata.
  env_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/abc";
  Answer("GET http://169.254.170.2/v2/credentials/abc", 200,
         MetadataAnswer("ASIACONT", "2026-11-27T18:00:00Z"));
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIACONT");
  EXPECT_EQ((*c)->Current()->source, "container");
  // The profile wins over the container.
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIAFILE\naws_secret_access_key=S\n");
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAFILE");
  // Web identity from the environment wins over the profile's static keys.
  Write("token", "JWT1");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = dir_.Join("token");
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/web";
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAWEB", "2026-11-27T13:00:00Z"));
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAWEB");
  EXPECT_EQ((*c)->Current()->source, "web identity");
  // A profile that assumes a role wins over web identity (botocore's order).
  Write(".aws/config", "[default]\nrole_arn=arn:aws:iam::1:role/r\nsource_profile=default\n");
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->source, "profile default (assume role arn:aws:iam::1:role/r)");
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_TRUE(Has(requests_[0].body, "Action=AssumeRole&"));
  // The environment wins over everything.
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "S";
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->source, "environment");
}

// ---- Profiles -----------------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, ProfileStaticKeysCredentialsFileFirst) {
  Write(".aws/credentials", "[train]\naws_access_key_id=AKIACRED\naws_secret_access_key=S1\n");
  Write(".aws/config",
        "[profile train]\naws_access_key_id=AKIACONF\naws_secret_access_key=S2\n"
        "[profile other]\naws_access_key_id=AKIAOTHER\naws_secret_access_key=S3\n"
        "aws_session_token=T3\n");
  env_["AWS_PROFILE"] = "train";
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIACRED");
  EXPECT_EQ((*c)->Current()->source, "profile train (" + dir_.Join(".aws/credentials") + ")");
  EXPECT_EQ((*c)->kind(), CredentialProvider::Kind::kFile);
  AwsCredentialOptions o;
  o.profile = "other";  // the option wins over AWS_PROFILE
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAOTHER");
  EXPECT_EQ((*c)->Current()->credentials.session_token(), "T3");
  // Keys in the environment win over AWS_PROFILE, not over the option (botocore's
  // Session(profile=...) and the CLI's --profile leave the environment out).
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAOTHER");
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAENVKEY");
  env_.erase("AWS_ACCESS_KEY_ID");
  env_.erase("AWS_SECRET_ACCESS_KEY");
  // Files from the options, then the variables.
  Write("c2", "[x]\naws_access_key_id=AKIAC2\naws_secret_access_key=S\n");
  o.profile = "x";
  o.credentials_file = dir_.Join("c2");
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAC2");
  o.credentials_file.clear();
  env_["AWS_SHARED_CREDENTIALS_FILE"] = dir_.Join("c2");
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIAC2");
}

TEST_F(AwsCredentialsTest, ExplicitProfileMissingNamesBothFiles) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";  // botocore refuses even with keys in the environment
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  AwsCredentialOptions o;
  o.profile = "nope";
  auto c = Resolve(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message(), "profile 'nope' not found in " + dir_.Join(".aws/credentials") +
                                     " or " + dir_.Join(".aws/config"));
  ExpectClean(c.error().message());
}

TEST_F(AwsCredentialsTest, PartialProfileKeysAreAnError) {
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIA\n");
  auto c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "needs aws_access_key_id and aws_secret_access_key"));
}

TEST_F(AwsCredentialsTest, HomeUnsetFallsBackToThePasswordDatabase) {
  env_.erase("HOME");
  AwsCredentialDeps d = Deps();
  d.home = nullptr;  // the real fallback, with the fake environment that has no HOME
  auto c = ResolveAwsCredentials({}, d);
  ASSERT_FALSE(c.has_value());
  struct passwd* pw = ::getpwuid(::geteuid());
  ASSERT_NE(pw, nullptr);
  EXPECT_TRUE(Has(c.error().message(), "not in " + std::string(pw->pw_dir) +
                                           "/.aws/credentials or " + std::string(pw->pw_dir) +
                                           "/.aws/config"))
      << c.error().message();
  EXPECT_EQ(HomeDirectory([](const char*) -> const char* { return nullptr; }), pw->pw_dir);
}

// ---- credential_process
// --------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, CredentialProcess) {
  Write(".aws/config", "[profile train]\ncredential_process = /opt/get-creds --role train\n");
  process_ = [](const std::string&) {
    return Result<std::string>(ProcessAnswer("ASIAPROC", "2026-11-27T12:20:00Z"));
  };
  AwsCredentialOptions o;
  o.profile = "train";
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  auto snap = (*c)->Current();
  EXPECT_EQ(snap->source, "profile train (credential_process)");
  EXPECT_EQ(snap->credentials.session_token(), kToken);
  ASSERT_TRUE(snap->expiration.has_value());
  EXPECT_EQ(*snap->expiration, kT0 + 20min);
  EXPECT_EQ((*c)->kind(), CredentialProvider::Kind::kFetched);
  ASSERT_EQ(commands_.size(), 1u);
  EXPECT_EQ(commands_[0], "/opt/get-creds --role train");
  const std::string json = (*c)->DescribeJson();
  EXPECT_TRUE(Has(json, "\"source\":\"profile train (credential_process)\"")) << json;
  EXPECT_TRUE(Has(json, "\"expires\":\"2026-11-27T12:20:00Z\"")) << json;
  ExpectClean(json);
  // Renewal runs the process again (it may have been changed in the file meanwhile).
  Write(".aws/config", "[profile train]\ncredential_process = /opt/other\n");
  process_ = [](const std::string&) {
    return Result<std::string>(ProcessAnswer("ASIAPROC2", "2026-11-27T12:40:00Z"));
  };
  now_ = kT0 + 15min;
  ASSERT_TRUE((*c)->RenewNow().ok());
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAPROC2");
  EXPECT_EQ((*c)->Current()->generation, 2u);
  EXPECT_EQ(commands_.back(), "/opt/other");
}

TEST_F(AwsCredentialsTest, CredentialProcessErrorsAreOneLineWithoutSecrets) {
  Write(".aws/config", "[default]\ncredential_process = get\n");
  struct Case {
    Result<std::string> out;
    std::string expect;
  };
  const std::string secret(kSecret);
  std::vector<Case> cases = {
      {Err(Status::IOError("credential_process exited with status 3: token expired, run login")),
       "credential_process exited with status 3: token expired, run login"},
      {std::string("{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"") + secret + "\",",
       "output is not a JSON object"},
      {std::string("not json ") + secret, "output is not a JSON object"},
      {std::string("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"") + secret + "\"}",
       "output lacks \"Version\": 1"},
      {std::string("{\"Version\":1,\"SecretAccessKey\":\"") + secret + "\"}",
       "AccessKeyId or SecretAccessKey missing"},
      {std::string("{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"") + secret +
           "\",\"Expiration\":\"tomorrow " + secret + "\"}",
       "Expiration is not an ISO 8601 UTC time"},
      {std::string("{\"Version\":1,\"AccessKeyId\":\"A\\r\\nX-Evil: 1\",\"SecretAccessKey\":\"") +
           secret + "\"}",
       "not printable"},
  };
  for (const auto& k : cases) {
    process_ = [&](const std::string&) { return k.out; };
    auto c = Resolve();
    ASSERT_FALSE(c.has_value()) << k.expect;
    const std::string m = c.error().message();
    EXPECT_TRUE(Has(m, "profile 'default'")) << m;
    EXPECT_TRUE(Has(m, k.expect)) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    ExpectClean(m);
  }
}

TEST_F(AwsCredentialsTest, RootRunsNoCredentialProcessFromAnotherUsersConfig) {
  if (::geteuid() != 0) GTEST_SKIP() << "the check is root's";
  Write(".aws/config", "[default]\ncredential_process = /opt/get-creds\n");
  process_ = [](const std::string&) {
    return Result<std::string>(ProcessAnswer("ASIAPROC", "2026-11-27T12:20:00Z"));
  };
  ASSERT_TRUE(Resolve().has_value());  // root's own file
  ASSERT_EQ(commands_.size(), 1u);
  ASSERT_EQ(::chown(dir_.Join(".aws/config").c_str(), 65534, 65534), 0);
  auto c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "credential_process from " + dir_.Join(".aws/config") +
                                           " refused: owned by uid 65534"))
      << c.error().message();
  EXPECT_EQ(commands_.size(), 1u);  // not run
  // In the credentials file, the same.
  ASSERT_EQ(::chown(dir_.Join(".aws/config").c_str(), 0, 0), 0);
  Write(".aws/credentials", "[default]\ncredential_process = /opt/get-creds\n");
  ASSERT_EQ(::chmod(dir_.Join(".aws/credentials").c_str(), 0666), 0);
  c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "writable by group or others")) << c.error().message();
  EXPECT_EQ(commands_.size(), 1u);
}

TEST(RunCredentialProcessTest, RealProcess) {
  auto ok = RunCredentialProcess(
      "/bin/sh -c \"printf '%s' '{\\\"Version\\\": 1}'; echo noise >&2\"", 10s);
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  EXPECT_EQ(*ok, "{\"Version\": 1}");
  auto failed = RunCredentialProcess(std::string("/bin/sh -c 'echo ") + kSecret +
                                         "; echo \"sso session expired\" >&2; echo more >&2; "
                                         "exit 3'",
                                     10s);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().message(),
            "credential_process exited with status 3; it said: sso session expired");
  auto slow = RunCredentialProcess("sleep 5", 200ms);
  ASSERT_FALSE(slow.has_value());
  EXPECT_TRUE(Has(slow.error().message(), "did not finish")) << slow.error().message();
  auto missing = RunCredentialProcess("/nonexistent/helper --flag", 10s);
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(Has(missing.error().message(), "cannot run /nonexistent/helper"))
      << missing.error().message();
}

TEST(RunCredentialProcessTest, SplitAsBotocoreSplitsWithShlex) {
  // Expected values: Python's shlex.split on the same text.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"a  b", {"a", "b"}},
      {"/usr/bin/helper --profile 'my prof' \"x y\"",
       {"/usr/bin/helper", "--profile", "my prof", "x y"}},
      {"a\\ b", {"a b"}},
      {"\"a\\\"b\\\\c\\d\"", {"a\"b\\c\\d"}},
      {"'' x", {"", "x"}},
      {"x'y'\"z\"", {"xyz"}},
      {"a#b #c", {"a#b", "#c"}},
      {"\"$HOME\" ~ *", {"$HOME", "~", "*"}},
      {"\t a\nb ", {"a", "b"}},
      {"'a\\b'", {"a\\b"}},
  };
  for (const auto& [text, want] : cases) {
    auto got = SplitCommandLine(text);
    ASSERT_TRUE(got.has_value()) << text << ": " << got.error().ToString();
    EXPECT_EQ(*got, want) << text;
  }
  for (const char* bad : {"it's", "a\\", "\"open", "", "  "}) {
    auto got = SplitCommandLine(bad);
    EXPECT_FALSE(got.has_value()) << bad;
    if (!got) {
      EXPECT_EQ(got.error().code(), Status::Code::kInvalidArgument) << got.error().ToString();
    }
  }
}

TEST(RunCredentialProcessTest, NoShell) {
  // botocore runs the words, not a shell: ';' and '$' are arguments like any other.
  auto out = RunCredentialProcess("echo a; echo $HOME", 10s);
  ASSERT_TRUE(out.has_value()) << out.error().ToString();
  EXPECT_EQ(*out, "a; echo $HOME\n");
}

// Pids of the lines of `path` that are still running (a zombie waiting for init is not).
std::vector<pid_t> LivePids(const std::string& path) {
  std::vector<pid_t> live;
  std::ifstream in(path);
  for (pid_t pid; in >> pid;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z') {
      live.push_back(pid);
    }
  }
  return live;
}

// LivePids(path), polled until none is left or 10 s have passed: SIGKILL is delivered
// asynchronously, and only the helper itself is reaped by the runner.
std::vector<pid_t> LivePidsAfterKill(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<pid_t> live = LivePids(path);
  while (!live.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    live = LivePids(path);
  }
  return live;
}

TEST(RunCredentialProcessTest, AStuckHelperAndItsChildrenEndAtTheDeadline) {
  test::TempDir dir;
  const std::string pids = dir.path() + "/pids";
  // Closes its output (so no EOF wait holds it) and sleeps, with a child that sleeps too.
  const auto start = std::chrono::steady_clock::now();
  auto r = RunCredentialProcess("/bin/sh -c 'sleep 60 & echo $! > " + pids + "; echo $$ >> " +
                                    pids + "; exec >&- 2>&-; sleep 60'",
                                1s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Has(r.error().message(), "did not finish within 1 s")) << r.error().message();
  EXPECT_LT(took, 20s);  // a bound on a hang (the helper sleeps 60 s), not a speed target
  std::ifstream in(pids);
  int n = 0;
  for (pid_t p; in >> p;) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(LivePidsAfterKill(pids), std::vector<pid_t>{});
}

TEST(RunCredentialProcessTest, WhatAFinishedHelperStartedDoesNotOutliveIt) {
  test::TempDir dir;
  const std::string pids = dir.path() + "/pids";
  auto r = RunCredentialProcess(
      "/bin/sh -c 'sleep 60 >/dev/null 2>&1 & echo $! > " + pids + "; printf x'", 10s);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(*r, "x");
  EXPECT_EQ(LivePidsAfterKill(pids), std::vector<pid_t>{});
}

TEST(RunCredentialProcessTest, AFailedRenewalKeepsTheHelpersWordsOutOfDescribeJson) {
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [](bool) -> Result<FetchedCredentials> {
    auto out = RunCredentialProcess("/bin/sh -c 'echo private-vault-path-7 >&2; exit 2'", 10s);
    if (!out) return Err(out.error());
    return Err(Status::IOError("unexpected success"));
  };
  FetchedCredentials first;
  first.credentials = Credentials("AKIDFIRST", kSecret, kToken);
  first.expiration = Clock::now() + 1h;
  RenewingCredentials creds(std::move(p), first, {});
  Status s = creds.RenewNow();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "private-vault-path-7")) << s.ToString();  // for the log
  const std::string json = creds.DescribeJson();
  EXPECT_FALSE(Has(json, "private-vault-path-7")) << json;
  EXPECT_TRUE(Has(json, "credential_process exited with status 2 (more in the log)")) << json;
}

// ---- STS
// -----------------------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, AssumeRoleIsSignedBySourceProfile) {
  Write(".aws/credentials",
        "[base]\naws_access_key_id=AKIABASE\naws_secret_access_key=" + std::string(kSecret) + "\n");
  Write(".aws/config",
        "[profile train]\nrole_arn = arn:aws:iam::123:role/train\nsource_profile = base\n"
        "external_id = ext-1\nduration_seconds = 900\nrole_session_name = me\n"
        "region = eu-west-1\n");
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAROLE", "2026-11-27T12:15:00Z"));
  AwsCredentialOptions o;
  o.profile = "train";
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAROLE");
  EXPECT_EQ(*(*c)->Current()->expiration, kT0 + 15min);
  ASSERT_EQ(requests_.size(), 1u);
  const SimpleHttpRequest& r = requests_[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.body,
            "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123%3Arole%2Ftrain"
            "&RoleSessionName=me&ExternalId=ext-1&DurationSeconds=900");
  EXPECT_EQ(Header(r.headers, "x-amz-content-sha256"), Sha256Hex(r.body));
  EXPECT_EQ(Header(r.headers, "x-amz-date"), "20261127T120000Z");
  const std::string auth = Header(r.headers, "Authorization");
  EXPECT_TRUE(Has(auth,
                  "AWS4-HMAC-SHA256 Credential=AKIABASE/20261127/eu-west-1/sts/aws4_request, "
                  "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date, "))
      << auth;
  // The signature is what SigV4Signer computes for that request.
  SigV4Signer signer(Credentials("AKIABASE", kSecret), "eu-west-1", "sts");
  SigV4Request sr;
  sr.method = "POST";
  sr.headers = {{"host", "sts.amazonaws.com"},
                {"content-type", "application/x-www-form-urlencoded; charset=utf-8"}};
  sr.payload_hash = Sha256Hex(r.body);
  EXPECT_EQ(Header(signer.Sign(sr, kT0), "Authorization"), auth);
  ExpectClean((*c)->DescribeJson());

  // Regional and explicit endpoints.
  env_["AWS_STS_REGIONAL_ENDPOINTS"] = "regional";
  Answer("POST https://sts.eu-west-1.amazonaws.com/", 200,
         StsAnswer("ASIAREG", "2026-11-27T12:15:00Z"));
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAREG");
  env_["AWS_ENDPOINT_URL_STS"] = "http://127.0.0.1:9000";
  Answer("POST http://127.0.0.1:9000/", 200, StsAnswer("ASIALOCAL", "2026-11-27T12:15:00Z"));
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIALOCAL");
  EXPECT_TRUE(Has(Header(requests_[0].headers, "Authorization"), "/eu-west-1/sts/"));
}

TEST_F(AwsCredentialsTest, AssumeRoleChainsAndSessionNameDefault) {
  Write(".aws/config",
        "[profile a]\nrole_arn=arn:aws:iam::1:role/a\nsource_profile=b\n"
        "[profile b]\nrole_arn=arn:aws:iam::1:role/b\nsource_profile=c\n"
        "[profile c]\naws_access_key_id=AKIAC\naws_secret_access_key=S\n");
  int calls = 0;
  routes_["POST https://sts.amazonaws.com/"] = [&](const SimpleHttpRequest& r) {
    ++calls;
    const bool for_a = Has(r.body, "role%2Fa");
    // b is assumed with c's keys, a with b's role credentials.
    EXPECT_TRUE(
        Has(Header(r.headers, "Authorization"), for_a ? "Credential=ASIAB/" : "Credential=AKIAC/"));
    if (for_a) {
      EXPECT_EQ(Header(r.headers, "x-amz-security-token"), kToken);
    }
    EXPECT_TRUE(Has(r.body, "RoleSessionName=pcrfs-1795780800")) << r.body;
    return Result<SimpleHttpResponse>(
        SimpleHttpResponse{200, StsAnswer(for_a ? "ASIAA" : "ASIAB", "2026-11-27T13:00:00Z")});
  };
  AwsCredentialOptions o;
  o.profile = "a";
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAA");
}

TEST_F(AwsCredentialsTest, SourceProfileLoopsAreDetected) {
  Write(".aws/config",
        "[profile a]\nrole_arn=arn:aws:iam::1:role/a\nsource_profile=b\n"
        "[profile b]\nrole_arn=arn:aws:iam::1:role/b\nsource_profile=a\n"
        "[profile self]\nrole_arn=arn:aws:iam::1:role/s\nsource_profile=self\n"
        "[profile selfkeys]\nrole_arn=arn:aws:iam::1:role/k\nsource_profile=selfkeys\n"
        "aws_access_key_id=AKIASELF\naws_secret_access_key=S\n"
        "[profile nosrc]\nrole_arn=arn:aws:iam::1:role/n\n"
        "[profile gone]\nrole_arn=arn:aws:iam::1:role/g\nsource_profile=missing\n"
        "[profile badsrc]\nrole_arn=arn:aws:iam::1:role/x\ncredential_source=Moon\n");
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAOK", "2026-11-27T13:00:00Z"));
  auto err = [&](const char* profile) {
    AwsCredentialOptions o;
    o.profile = profile;
    auto c = Resolve(o);
    return c.has_value() ? std::string("resolved") : c.error().message();
  };
  EXPECT_EQ(err("a"), "source_profile loop: a -> b -> a");
  EXPECT_EQ(err("self"), "source_profile loop: self -> self");
  EXPECT_EQ(err("selfkeys"), "resolved");  // a profile may source its own static keys
  EXPECT_TRUE(Has(err("nosrc"), "role_arn needs source_profile or credential_source"));
  EXPECT_TRUE(Has(err("gone"), "source_profile 'missing' does not exist"));
  EXPECT_TRUE(Has(err("badsrc"), "credential_source 'Moon' is not"));
}

TEST_F(AwsCredentialsTest, CredentialSourceEnvironmentAndInstanceMetadata) {
  Write(".aws/config",
        "[profile e]\nrole_arn=arn:aws:iam::1:role/e\ncredential_source=Environment\n"
        "[profile m]\nrole_arn=arn:aws:iam::1:role/m\ncredential_source=Ec2InstanceMetadata\n");
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAOK", "2026-11-27T13:00:00Z"));
  AwsCredentialOptions o;
  o.profile = "e";
  auto c = Resolve(o);
  ASSERT_FALSE(c.has_value());  // no keys in the environment
  EXPECT_TRUE(Has(c.error().message(), "credential_source Environment, but AWS_ACCESS_KEY_ID"));
  // With keys in the environment and the profile named by the option (botocore's
  // Session(profile=...)), the environment is the role's source, not the chain's first step.
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENVSOURCE";
  env_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAOK");
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_TRUE(Has(Header(requests_[0].headers, "Authorization"), "Credential=AKIAENVSOURCE/"));
  requests_.clear();
  env_.erase("AWS_ACCESS_KEY_ID");
  env_.erase("AWS_SECRET_ACCESS_KEY");
  o.profile = "m";
  Answer("PUT http://169.254.169.254/latest/api/token", 200, "IMDSTOKEN");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/", 200, "r\n");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/r", 200,
         MetadataAnswer("ASIAIMDS", "2026-11-27T18:00:00Z"));
  c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "ASIAOK");
  ASSERT_EQ(requests_.size(), 4u);
  EXPECT_TRUE(Has(Header(requests_[3].headers, "Authorization"), "Credential=ASIAIMDS/"));
}

TEST_F(AwsCredentialsTest, StsErrorAnswerIsOneLineNamingTheRole) {
  Write(".aws/credentials",
        "[base]\naws_access_key_id=AKIABASE\naws_secret_access_key=" + std::string(kSecret) + "\n");
  Write(".aws/config",
        "[profile train]\nrole_arn=arn:aws:iam::1:role/train\nsource_profile=base\n");
  Answer("POST https://sts.amazonaws.com/", 403,
         "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender"
         "</Type><Code>AccessDenied</Code><Message>User: arn:aws:iam::1:user/u is not\n"
         "authorized to perform: sts:AssumeRole</Message></Error><RequestId>x</RequestId>"
         "</ErrorResponse>");
  AwsCredentialOptions o;
  o.profile = "train";
  auto c = Resolve(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message(),
            "arn:aws:iam::1:role/train: STS answered HTTP 403 AccessDenied: User: "
            "arn:aws:iam::1:user/u is not");
  ExpectClean(c.error().message());
  // A 200 that is not credentials.
  Answer("POST https://sts.amazonaws.com/", 200, "<html>captive portal</html>");
  c = Resolve(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().message(), "arn:aws:iam::1:role/train: STS answer without <Credentials>");
}

TEST_F(AwsCredentialsTest, WebIdentityIsUnsignedAndRereadsItsToken) {
  Write("token", "JWT-ONE\n");
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = dir_.Join("token");
  env_["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/web";
  env_["AWS_ROLE_SESSION_NAME"] = "pod-1";
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAWEB", "2026-11-27T13:00:00Z"));
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].body,
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3A"
            "role%2Fweb&RoleSessionName=pod-1&WebIdentityToken=JWT-ONE");
  EXPECT_EQ(Header(requests_[0].headers, "Authorization"), "");
  EXPECT_EQ((*c)->kind(), CredentialProvider::Kind::kFetched);
  Write("token", "JWT-TWO");
  ASSERT_TRUE((*c)->RenewNow().ok());
  EXPECT_TRUE(Has(requests_.back().body, "WebIdentityToken=JWT-TWO"));
  EXPECT_EQ((*c)->Current()->generation, 2u);
  // STS refusing the token: the message names the role, never the token.
  Answer("POST https://sts.amazonaws.com/", 400,
         "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>Token expired"
         "</Message></Error></ErrorResponse>");
  Status s = (*c)->RenewNow();
  EXPECT_EQ(s.message(),
            "arn:aws:iam::1:role/web: STS answered HTTP 400 InvalidIdentityToken: Token expired");
  EXPECT_FALSE(Has(s.message(), "JWT"));
  EXPECT_FALSE(Has((*c)->DescribeJson(), "JWT"));
  // Missing role.
  env_.erase("AWS_ROLE_ARN");
  auto bad = Resolve();
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(Has(bad.error().message(), "AWS_ROLE_ARN"));
}

TEST_F(AwsCredentialsTest, WebIdentityFromProfile) {
  Write("tok", "JWTP");
  Write(".aws/config", "[profile w]\nweb_identity_token_file=" + dir_.Join("tok") +
                           "\nrole_arn=arn:aws:iam::1:role/w\n");
  Answer("POST https://sts.amazonaws.com/", 200, StsAnswer("ASIAW", "2026-11-27T13:00:00Z"));
  AwsCredentialOptions o;
  o.profile = "w";
  auto c = Resolve(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_TRUE(Has(requests_[0].body, "WebIdentityToken=JWTP"));
  EXPECT_TRUE(Has(requests_[0].body, "RoleSessionName=pcrfs-"));
}

// ---- Container and instance metadata
// --------------------------------------------------------------

TEST_F(AwsCredentialsTest, ContainerFullUriWithTokenFileRereadEachTime) {
  Write("auth", "Bearer one\n");
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:51679/creds";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = dir_.Join("auth");
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "ignored when the file is set";
  Answer("GET http://127.0.0.1:51679/creds", 200,
         MetadataAnswer("ASIACONT", "2026-11-27T12:30:00+00:00"));
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(Header(requests_[0].headers, "Authorization"), "Bearer one");
  EXPECT_EQ(*(*c)->Current()->expiration, kT0 + 30min);
  Write("auth", "Bearer two");
  ASSERT_TRUE((*c)->RenewNow().ok());
  EXPECT_EQ(Header(requests_.back().headers, "Authorization"), "Bearer two");
  // The token from the variable when there is no file.
  env_.erase("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "Basic abc";
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(Header(requests_[0].headers, "Authorization"), "Basic abc");
  // Plain http elsewhere is refused; an error answer is an error, not "nothing here".
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://evil.example.com/creds";
  c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "plain http is allowed only"));
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:51679/creds";
  Answer("GET http://127.0.0.1:51679/creds", 401, "{\"message\":\"bad token\"}");
  c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(Has(c.error().message(), "answered HTTP 401")) << c.error().message();
  EXPECT_FALSE(Has(c.error().message(), "Basic abc"));
}

TEST_F(AwsCredentialsTest, InstanceMetadataV2TokenFlow) {
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://[fd00:ec2::254]/";
  Answer("PUT http://[fd00:ec2::254]/latest/api/token", 200, "IMDSTOKEN==");
  Answer("GET http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/", 200, "worker");
  Answer("GET http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/worker", 200,
         MetadataAnswer("ASIAIMDS", "2026-11-27T18:00:00.123Z"));
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  ASSERT_EQ(requests_.size(), 3u);
  EXPECT_EQ(requests_[0].method, "PUT");
  EXPECT_EQ(Header(requests_[0].headers, "X-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_LE(requests_[0].timeout, 2s);
  EXPECT_LE(requests_[0].connect_timeout, 1s);
  for (int i : {1, 2}) {
    EXPECT_EQ(requests_[i].method, "GET");
    EXPECT_EQ(Header(requests_[i].headers, "X-aws-ec2-metadata-token"), "IMDSTOKEN==");
  }
  EXPECT_EQ(*(*c)->Current()->expiration, kT0 + 6h + 123ms);
  // IMDSv1 when the token PUT is refused with 405 (as botocore).
  Answer("PUT http://[fd00:ec2::254]/latest/api/token", 405, "");
  c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(Header(requests_[1].headers, "X-aws-ec2-metadata-token"), "");
  // No role attached: nothing here.
  Answer("PUT http://[fd00:ec2::254]/latest/api/token", 200, "T");
  Answer("GET http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/", 404, "");
  c = Resolve();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(c.error().IsNotFound());
  EXPECT_TRUE(Has(c.error().message(), "instance metadata (http://[fd00:ec2::254]: no IAM role"))
      << c.error().message();
}

TEST_F(AwsCredentialsTest, ContainerFullUriHostsAsBotocore) {
  // Plain http: loopback IP literals, localhost and the ECS / EKS agents only (newer botocore's
  // rule); a name that starts like a loopback address is a name like any other.
  const std::vector<std::pair<std::string, bool>> hosts = {
      {"127.0.0.1", true},
      {"127.1.2.3", true},
      {"localhost", true},
      {"[::1]", true},
      {"169.254.170.2", true},
      {"169.254.170.23", true},
      {"[fd00:ec2::23]", true},
      {"127.attacker.example", false},
      {"127.0.0.1.nip.io", false},
      {"169.254.169.254", false},
      {"[::2]", false},
      {"128.0.0.1", false},
      {"127.0.0.1x", false},
  };
  for (const auto& [host, allowed] : hosts) {
    const std::string url = "http://" + host + ":8080/creds";
    env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = url;
    Answer("GET " + url, 200, MetadataAnswer("ASIACONT", "2026-11-27T12:30:00Z"));
    auto c = Resolve();
    EXPECT_EQ(c.has_value(), allowed) << host;
    if (!allowed && !c) {
      EXPECT_TRUE(Has(c.error().message(), "plain http is allowed only")) << c.error().message();
      EXPECT_TRUE(requests_.empty()) << host;  // nothing sent there
    }
    // Credential endpoints never go through a proxy.
    if (allowed && !requests_.empty()) {
      EXPECT_TRUE(requests_[0].direct) << host;
    }
  }
  // https: any host.
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "https://creds.example.com/x";
  Answer("GET https://creds.example.com/x", 200,
         MetadataAnswer("ASIACONT", "2026-11-27T12:30:00Z"));
  EXPECT_TRUE(Resolve().has_value());
}

TEST_F(AwsCredentialsTest, ImdsV1FallbackRefusedWhenDisabled) {
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://169.254.169.254";
  Answer("PUT http://169.254.169.254/latest/api/token", 403, "");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/", 200, "worker");
  Answer("GET http://169.254.169.254/latest/meta-data/iam/security-credentials/worker", 200,
         MetadataAnswer("ASIAIMDS", "2026-11-27T18:00:00Z"));
  auto c = Resolve();  // IMDSv1 allowed: the fallback works
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  for (const auto& r : requests_) EXPECT_TRUE(r.direct) << r.url;
  for (const char* value : {"true", "TRUE", "True"}) {
    env_["AWS_EC2_METADATA_V1_DISABLED"] = value;
    c = Resolve();
    ASSERT_FALSE(c.has_value()) << value;
    EXPECT_TRUE(c.error().IsNotFound());
    EXPECT_TRUE(Has(c.error().message(), "AWS_EC2_METADATA_V1_DISABLED=true refuses IMDSv1"))
        << c.error().message();
    ASSERT_EQ(requests_.size(), 1u);  // the token PUT only: no unauthenticated GET
  }
  env_["AWS_EC2_METADATA_V1_DISABLED"] = "false";
  EXPECT_TRUE(Resolve().has_value());
}

TEST(NoProxyListTest, TheUsersListIsExtendedNotReplaced) {
  const std::string local = "localhost,127.0.0.0/8,::1,169.254.0.0/16,fe80::/10,fd00:ec2::/32";
  EXPECT_EQ(NoProxyList(""), local);
  EXPECT_EQ(NoProxyList("corp.example,.internal"), "corp.example,.internal," + local);
  EXPECT_EQ(NoProxyList(" corp.example, "), "corp.example," + local);
  EXPECT_EQ(NoProxyList("*"), "*");  // curl: every host, only when alone
}

// ---- Renewal: the schedule as pure functions
// ---------------------------------------------------------

TEST(RenewalScheduleTest, MarginAndJitter) {
  EXPECT_EQ(RenewalMargin(20s), 5s);
  EXPECT_EQ(RenewalMargin(1h), 10min);
  EXPECT_EQ(RenewalMargin(15min), 225s);
  RenewalTimes t{kT0, kT0 + 20s, 0, {}};
  EXPECT_EQ(*NextRenewal(t, 0.0), kT0 + 15s);
  EXPECT_EQ(*NextRenewal(t, 0.5), kT0 + 15s - 250ms);  // 10% of the margin at most
  t.expiration = kT0 + 1h;
  EXPECT_EQ(*NextRenewal(t, 0.0), kT0 + 50min);
  EXPECT_EQ(*NextRenewal(t, 1.0), kT0 + 50min - 60s);
  t.expiration.reset();
  EXPECT_FALSE(NextRenewal(t, 0.3).has_value());
}

TEST(RenewalScheduleTest, FailureBackoff) {
  std::vector<Clock::duration> expect = {1s, 2s, 4s, 8s, 16s, 32s, 60s, 60s, 60s};
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_EQ(RenewalBackoff(static_cast<int>(i) + 1), expect[i]) << i;
  }
  RenewalTimes t{kT0, kT0 + 1h, 3, kT0 + 50min};
  EXPECT_EQ(*NextRenewal(t, 0.9), kT0 + 50min + 4s);
  // Never later than the expiration while it is ahead.
  t.failures = 10;
  t.last_failure = kT0 + 1h - 10s;
  EXPECT_EQ(*NextRenewal(t, 0.0), kT0 + 1h);
  // Expired: the backoff alone, never a tight loop.
  t.last_failure = kT0 + 1h + 5s;
  EXPECT_EQ(*NextRenewal(t, 0.0), kT0 + 1h + 65s);
}

// ---- Renewal: the object
// ---------------------------------------------------------------------------

FetchedCredentials Temp(const std::string& id, Clock::time_point expiration) {
  return FetchedCredentials{Credentials(id, kSecret, kToken), expiration, "test"};
}

TEST(RenewingCredentialsTest, FailureKeepsOldCredentialsCountsAndBacksOff) {
  timing::FakeClock clock(kT0);
  int calls = 0;
  Status next_error = Status::IOError(std::string("STS unreachable"));
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [&](bool) -> Result<FetchedCredentials> {
    ++calls;
    if (!next_error.ok()) return Err(next_error);
    return Temp("ASIA2", clock.WallNow() + 1h);
  };
  RenewingCredentials::Options o;
  o.clock = &clock;
  o.jitter = [] { return 0.0; };
  RenewingCredentials r(p, Temp("ASIA1", kT0 + 1h), o);
  EXPECT_EQ(*r.next_renewal(), kT0 + 50min);
  clock.Advance(50min);
  EXPECT_FALSE(r.RenewNow().ok());
  EXPECT_EQ(r.Current()->credentials.access_key_id(), "ASIA1");
  EXPECT_EQ(r.Current()->generation, 1u);
  EXPECT_EQ(*r.next_renewal(), kT0 + 50min + 1s);
  clock.Advance(1s);
  EXPECT_FALSE(r.RenewNow().ok());
  EXPECT_EQ(*r.next_renewal(), clock.WallNow() + 2s);
  std::string json = r.DescribeJson();
  EXPECT_TRUE(Has(json, "\"renewal_failures\":2")) << json;
  EXPECT_TRUE(Has(json, "\"last_error\":\"STS unreachable\"")) << json;
  EXPECT_TRUE(Has(json, "\"renewals\":0")) << json;
  ExpectClean(json);
  next_error = Status::OK();
  clock.Advance(2s);
  EXPECT_TRUE(r.RenewNow().ok());
  EXPECT_EQ(r.Current()->credentials.access_key_id(), "ASIA2");
  EXPECT_EQ(r.Current()->generation, 2u);
  EXPECT_EQ(*r.next_renewal(), clock.WallNow() + 50min);
  json = r.DescribeJson();
  EXPECT_TRUE(Has(json, "\"renewals\":1")) << json;
  EXPECT_FALSE(Has(json, "last_error")) << json;
  EXPECT_EQ(calls, 3);
}

// The thread on a FakeClock: it renews exactly when the clock passes the schedule, waiting in
// between (a thread waiting on the clock has done all it had to do until then).
TEST(RenewingCredentialsTest, ThreadRenewsShortLivedCredentialsBeforeExpiry) {
  timing::FakeClock clock(kT0);
  std::atomic<int> calls{0};
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [&](bool) -> Result<FetchedCredentials> {
    ++calls;
    return Temp("ASIA" + std::to_string(calls.load() + 1), clock.WallNow() + 2s);
  };
  RenewingCredentials::Options o;
  o.clock = &clock;
  o.jitter = [] { return 0.0; };
  RenewingCredentials r(p, Temp("ASIA1", kT0 + 2s), o);
  // Nothing renews before StartRenewal (the daemon forks in between), even once due.
  clock.Advance(1800ms);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(r.Current()->generation, 1u);
  ASSERT_TRUE(r.StartRenewal().ok());
  ASSERT_TRUE(r.StartRenewal().ok());  // idempotent
  // 2 s credentials: a margin of 0.5 s. Already due: renewed at once, then the thread waits
  // 1.5 s of the clock for the next renewal, and renews when the clock gets there.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.Current()->generation, 2u);
  EXPECT_EQ(clock.NextDeadline(), clock.Now() + 1500ms);
  clock.Advance(1499ms);
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(r.Current()->generation, 2u) << "not before its time";
  clock.Advance(1ms);
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.Current()->generation, 3u);
  EXPECT_LT(clock.WallNow(), *r.Current()->expiration);
}

TEST(RenewingCredentialsTest, RequestRenewalIsSingleFlight) {
  timing::FakeClock clock(kT0);
  Mutex mu;
  CondVar cv;
  int calls = 0;
  bool release = false;
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [&](bool) -> Result<FetchedCredentials> {
    MutexLock l(&mu);
    ++calls;
    cv.SignalAll();
    cv.Wait(&mu, [&]() REQUIRES(mu) { return release; });
    return Temp("ASIANEW", clock.WallNow() + 1h);
  };
  RenewingCredentials::Options o;
  o.clock = &clock;
  RenewingCredentials r(p, Temp("ASIA1", kT0 + 1h), o);
  ASSERT_TRUE(r.StartRenewal().ok());
  EXPECT_TRUE(r.RequestRenewal(1));
  {
    MutexLock l(&mu);
    ASSERT_TRUE(cv.WaitFor(&mu, 30s, [&]() REQUIRES(mu) { return calls == 1; }));
  }
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(r.RequestRenewal(1));  // running: nothing queued
  {
    MutexLock l(&mu);
    release = true;
  }
  cv.SignalAll();
  // The thread waits for the next renewal (in about 50 minutes) once it has nothing to do: a
  // renewal queued by the requests above would have run before.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(r.Current()->generation, 2u);
  {
    MutexLock l(&mu);
    EXPECT_EQ(calls, 1);
  }
  EXPECT_TRUE(r.RequestRenewal(1));  // stale generation: the newer one is there already
}

// Every refused request asks for a renewal; while fetches fail, the thread still waits for
// RenewalBackoff between them (99 refusals in 5 s made 99 fetches).
TEST(RenewingCredentialsTest, RefusalsDoNotHurryAFailingRenewal) {
  timing::FakeClock clock(kT0);
  Mutex mu;
  CondVar cv;
  int calls = 0;
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [&](bool) -> Result<FetchedCredentials> {
    MutexLock l(&mu);
    ++calls;
    cv.SignalAll();
    return Err(Status::IOError(std::string("STS unreachable")));
  };
  auto fetches = [&] {
    MutexLock l(&mu);
    return calls;
  };
  RenewingCredentials::Options o;
  o.clock = &clock;
  RenewingCredentials r(p, Temp("ASIA1", kT0 + 1h), o);
  ASSERT_TRUE(r.StartRenewal().ok());
  // The first refusal: a fetch at once, which fails; the next not before 1 s, the third not
  // before 3 s.
  EXPECT_TRUE(r.RequestRenewal(1));
  {
    MutexLock l(&mu);
    ASSERT_TRUE(cv.WaitFor(&mu, 30s, [&]() REQUIRES(mu) { return calls == 1; }));
  }
  ASSERT_TRUE(clock.AwaitWaiters(1));  // after the failure, for its backoff
  // A refusal every 10 ms of the clock for 1.5 s.
  for (int i = 0; i < 150; ++i) {
    EXPECT_TRUE(r.RequestRenewal(1));
    clock.Advance(10ms);
  }
  // Waiting again, for a deadline after now: the fetch at 1 s has failed, the next is at 3 s.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(fetches(), 2);
  EXPECT_EQ(*r.next_renewal(), r.times().last_failure + 2s);
  EXPECT_GE(r.times().last_failure, kT0 + 1s);  // (when the thread ran: this test moved on)
}

// Credentials a renewal got seconds ago, refused again: the request fails (false) instead of
// starting one renewal per refusal; after kRefusedAfterRenewal a refusal renews again.
TEST(RenewingCredentialsTest, RefusedFreshCredentialsFailTheRequest) {
  timing::FakeClock clock(kT0);
  int calls = 0;
  CredentialProvider p;
  p.kind = CredentialProvider::Kind::kFetched;
  p.fetch = [&](bool) -> Result<FetchedCredentials> {
    ++calls;
    return Temp("ASIA" + std::to_string(calls + 1), clock.WallNow() + 1h);
  };
  RenewingCredentials::Options o;
  o.clock = &clock;
  o.jitter = [] { return 0.0; };
  RenewingCredentials r(p, Temp("ASIA1", kT0 + 1h), o);
  clock.Advance(1s);
  EXPECT_TRUE(r.RequestRenewal(1));  // the first credentials: renew
  ASSERT_TRUE(r.RenewNow().ok());
  ASSERT_EQ(r.Current()->generation, 2u);
  EXPECT_TRUE(r.RequestRenewal(1));  // refused with the old ones: retry with the new
  clock.Advance(3s);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(r.RequestRenewal(2));  // fresh and refused: fail
  EXPECT_EQ(calls, 1);
  clock.Advance(RenewingCredentials::kRefusedAfterRenewal);
  EXPECT_TRUE(r.RequestRenewal(2));
  ASSERT_TRUE(r.RenewNow().ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.Current()->generation, 3u);
}

TEST_F(AwsCredentialsTest, FileKeysAreReadAgainWhenTheFileChanges) {
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIAONE\naws_secret_access_key=S1\n");
  auto c = Resolve();
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  ASSERT_EQ((*c)->kind(), CredentialProvider::Kind::kFile);
  EXPECT_FALSE((*c)->RequestRenewal(1));  // unchanged: renewing cannot help
  // Rewritten with the same keys: changed file, same keys.
  Write(".aws/credentials",
        "# rotated\n[default]\naws_access_key_id=AKIAONE\naws_secret_access_key=S1\n");
  EXPECT_FALSE((*c)->RequestRenewal(1));
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIATWO\naws_secret_access_key=S2\n\n\n");
  EXPECT_TRUE((*c)->RequestRenewal(1));
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIATWO");
  EXPECT_EQ((*c)->Current()->generation, 2u);
  // SIGHUP notices the same way.
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIATHREE\naws_secret_access_key=S3\n");
  (*c)->Reload();
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIATHREE");
  // A broken rewrite keeps the keys and says why.
  Write(".aws/credentials", "[default]\naws_access_key_id=AKIAFOUR\n");
  EXPECT_FALSE((*c)->RequestRenewal(3));
  EXPECT_EQ((*c)->Current()->credentials.access_key_id(), "AKIATHREE");
  EXPECT_TRUE(Has((*c)->DescribeJson(), "needs aws_access_key_id and aws_secret_access_key"));
}

// ---- Parsers
// -------------------------------------------------------------------------------------

TEST(AwsParsersTest, Iso8601) {
  EXPECT_EQ(*ParseIso8601("2026-11-27T12:00:00Z"), kT0);
  EXPECT_EQ(*ParseIso8601("2026-11-27T12:00:00.5Z"), kT0 + 500ms);
  EXPECT_EQ(*ParseIso8601("2026-11-27T12:00:00+00:00"), kT0);
  EXPECT_EQ(*ParseIso8601("2026-11-27T13:30:00+01:30"), kT0);
  EXPECT_EQ(*ParseIso8601("2026-11-27T07:00:00-0500"), kT0);
  EXPECT_EQ(*ParseIso8601("1970-01-01T00:00:00Z"), Clock::time_point());
  EXPECT_EQ(FormatIso8601(kT0), "2026-11-27T12:00:00Z");
  for (const char* bad :
       {"", "2026-11-27", "2026-11-27T12:00:00", "2026-13-27T12:00:00Z", "2026-11-27T12:00:00Zjunk",
        "2026-11-27T12:00:00.Z", "26-11-27T1:0:0Z", "2026-11-27T12:00:00+5",
        "4050-11-27T12:00:00Z" /* past the clock's int64 nanoseconds (2262): found by fuzzing */}) {
    EXPECT_FALSE(ParseIso8601(bad).has_value()) << bad;
  }
}

// The one ISO 8601 parser (remote/url.h) as S3 listings use it: LastModified with milliseconds.
TEST(AwsParsersTest, IsoTimeOfAListing) {
  auto t = ParseIsoTimeUtc("2026-11-23T14:46:21.123Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->sec, 1795445181);
  EXPECT_EQ(t->nsec, 123000000u);
  EXPECT_FALSE(ParseIsoTimeUtc("2026-11-23T14:46:21.123").has_value());
}

TEST(AwsParsersTest, StsXml) {
  auto f = ParseStsCredentials(
      "<R><Credentials><AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>a&amp;b</SecretAccessKey>"
      "<SessionToken>t&lt;</SessionToken><Expiration>2026-11-27T12:00:00Z</Expiration>"
      "</Credentials></R>");
  ASSERT_TRUE(f.has_value()) << f.error().ToString();
  EXPECT_EQ(f->credentials.secret_access_key(), "a&b");
  EXPECT_EQ(f->credentials.session_token(), "t<");
  auto e = ParseStsCredentials(
      "<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded</Message></Error>"
      "</ErrorResponse>");
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().message(), "Throttling: Rate exceeded");
  for (const char* bad : {"", "<Credentials>", "<Credentials></Credentials>",
                          "<Credentials><AccessKeyId>A</AccessKeyId></Credentials>",
                          "<AccessKeyId>A</AccessKeyId><Credentials>"}) {
    EXPECT_FALSE(ParseStsCredentials(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ParseStsCredentials(std::string(100000, '<')).has_value());
}

TEST(AwsParsersTest, MetadataJson) {
  EXPECT_TRUE(ParseMetadataCredentials(MetadataAnswer("A", "2026-11-27T12:00:00Z")).has_value());
  auto e = ParseMetadataCredentials(R"({"Code":"AssumeRoleUnauthorizedAccess","Message":"no"})");
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().message(), "answer Code AssumeRoleUnauthorizedAccess: no");
  EXPECT_FALSE(ParseMetadataCredentials("[1]").has_value());
  EXPECT_FALSE(ParseMetadataCredentials(R"({"AccessKeyId":1,"SecretAccessKey":"s"})").has_value());
}

TEST(StaticCredentialSourceTest, DescribeJsonHasNoSecret) {
  StaticCredentialSource s(Credentials("AKIA", kSecret, kToken), "test keys");
  const std::string json = s.DescribeJson();
  EXPECT_TRUE(Has(json, "\"source\":\"test keys\"")) << json;
  ExpectClean(json);
}

}  // namespace
}  // namespace pcrfs
