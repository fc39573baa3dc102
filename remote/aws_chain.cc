#include "remote/aws_chain.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "common/file_util.h"
#include "remote/credential_process.h"

namespace pcrfs::aws_chain {
namespace {

constexpr std::chrono::milliseconds kProcessTimeout{60000};  // credential_process
constexpr size_t kMaxTokenFile = size_t{64} << 10;

}  // namespace

ChainInputs MakeChainInputs(const AwsCredentialOptions& options, AwsCredentialDeps deps) {
  ChainInputs in;
  in.options = options;
  if (!deps.env) deps.env = [](const char* n) -> const char* { return std::getenv(n); };
  if (!deps.http) deps.http = SimpleHttp;
  if (!deps.run_process) {
    deps.run_process = [](const std::string& c) {
      return RunCredentialProcess(c, kProcessTimeout);
    };
  }
  if (!deps.now) deps.now = [] { return Clock::now(); };
  if (!deps.home) {
    EnvLookup env = deps.env;
    deps.home = [env] { return HomeDirectory(env); };
  }
  in.deps = std::move(deps);
  in.profile = options.profile.empty() ? in.Env("AWS_PROFILE") : options.profile;
  in.profile_named = !in.profile.empty();
  if (in.profile.empty()) in.profile = "default";
  const std::string home = in.deps.home();
  auto file = [&](const std::string& option, const char* var, const char* rel) {
    if (!option.empty()) return option;
    std::string v = in.Env(var);
    if (!v.empty()) return v;
    return home.empty() ? std::string() : home + "/" + rel;
  };
  in.credentials_path =
      file(options.credentials_file, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  in.config_path = file(options.config_file, "AWS_CONFIG_FILE", ".aws/config");
  return in;
}

Result<std::optional<FetchedCredentials>> FromEnvironment(const ChainInputs& in,
                                                          std::string* why_none) {
  const std::string id = in.Env("AWS_ACCESS_KEY_ID");
  const std::string secret = in.Env("AWS_SECRET_ACCESS_KEY");
  if (id.empty()) {
    *why_none = "AWS_ACCESS_KEY_ID unset";
    return std::nullopt;
  }
  if (secret.empty()) {
    return Err(
        Status::InvalidArgument("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));
  }
  FetchedCredentials f{Credentials(id, secret, in.Env("AWS_SESSION_TOKEN")), std::nullopt,
                       "environment"};
  PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, "environment"));
  return f;
}

Result<std::string> ReadTokenFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Err(Status::FromErrno(std::string(what) + " " + path, errno));
  WarnIfReadableByOthers(path, what);
  std::string text;
  char buf[4096];
  while (f.read(buf, sizeof(buf)) || f.gcount() > 0) {
    text.append(buf, static_cast<size_t>(f.gcount()));
    if (text.size() > kMaxTokenFile) {
      return Err(Status::InvalidArgument(std::string(what) + " " + path + ": larger than 64 KiB"));
    }
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty())
    return Err(Status::InvalidArgument(std::string(what) + " " + path + " is empty"));
  return text;
}

}  // namespace pcrfs::aws_chain
