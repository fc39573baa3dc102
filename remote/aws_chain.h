// What the AWS credential chain's sources share: the options and the dependencies a resolution
// is given (AwsCredentialOptions, AwsCredentialDeps, public through remote/aws_credentials.h),
// the inputs of one resolution with both filled in (ChainInputs), the environment's keys (step 1)
// and token files. The sources are each a unit of their own: remote/aws_profiles.h (steps 2 to
// 4), remote/aws_sts.h, remote/aws_container_credentials.h, remote/aws_instance_metadata.h;
// remote/aws_credentials.h resolves the chain over them.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.h"
#include "remote/aws_config_files.h"
#include "remote/aws_credential_parsers.h"
#include "remote/simple_http.h"

namespace pcrfs {

struct AwsCredentialOptions {
  std::string profile;           // empty: AWS_PROFILE, else "default"
  std::string credentials_file;  // empty: AWS_SHARED_CREDENTIALS_FILE, else HOME/.aws/credentials
  std::string config_file;       // empty: AWS_CONFIG_FILE, else HOME/.aws/config
  bool no_sign = false;          // anonymous: ResolveAwsCredentials returns nullptr
  std::string region;            // STS's signing region; empty: see remote/aws_credentials.h
};

// What the chain reaches outside the process, all injectable so tests run without sockets,
// processes or the real environment. Each nullptr means the real thing.
struct AwsCredentialDeps {
  EnvLookup env;                                                             // getenv
  std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)> http;  // SimpleHttp
  // credential_process: runs `command` (split by SplitCommandLine, no shell) and returns its
  // stdout; errors name the exit status and the first line of stderr, never stdout. Real one:
  // RunCredentialProcess with a 60 s deadline.
  std::function<Result<std::string>(const std::string& command)> run_process;
  std::function<Clock::time_point()> now;  // the system clock
  std::function<std::string()> home;       // $HOME, else getpwuid(geteuid())->pw_dir
};

namespace aws_chain {

// What every fetch of one resolution shares: the options and the dependencies, filled in.
struct ChainInputs {
  AwsCredentialOptions options;
  AwsCredentialDeps deps;
  std::string profile;  // the profile's name
  bool profile_named = false;
  std::string credentials_path, config_path;

  std::string Env(const char* name) const {
    const char* v = deps.env(name);
    return v == nullptr ? "" : std::string(v);
  }
};

// The inputs of a resolution: each dependency left nullptr becomes the real one; the profile
// (options.profile, else AWS_PROFILE, else "default") and the two files' paths (the options,
// else AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else under the home folder) found.
ChainInputs MakeChainInputs(const AwsCredentialOptions& options, AwsCredentialDeps deps);

// Step 1, the environment's keys: nullopt (and *why_none) when AWS_ACCESS_KEY_ID is unset.
Result<std::optional<FetchedCredentials>> FromEnvironment(const ChainInputs& in,
                                                          std::string* why_none);

// A small file holding a token (web identity, container authorization): read whole (at most
// 64 KiB), trimmed; `what` names it in errors; a warning when others may read it.
Result<std::string> ReadTokenFile(const std::string& path, const char* what);

}  // namespace aws_chain
}  // namespace pcrfs
