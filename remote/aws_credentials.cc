#include "remote/aws_credentials.h"

#include <functional>
#include <string>
#include <vector>

#include "remote/aws_container_credentials.h"
#include "remote/aws_instance_metadata.h"
#include "remote/aws_profiles.h"

namespace pcrfs {

using aws_chain::ChainInputs;
using aws_chain::Container;
using aws_chain::FilesNamed;
using aws_chain::FromEnvironment;
using aws_chain::FromProfile;
using aws_chain::InstanceMetadata;
using aws_chain::LoadProfiles;
using aws_chain::MakeChainInputs;

Result<std::shared_ptr<RenewingCredentials>> ResolveAwsCredentials(
    const AwsCredentialOptions& options, AwsCredentialDeps deps) {
  if (options.no_sign) return std::shared_ptr<RenewingCredentials>();
  auto in = std::make_shared<ChainInputs>(MakeChainInputs(options, std::move(deps)));

  RenewingCredentials::Options renewing;
  renewing.now = in->deps.now;
  auto make = [&](CredentialProvider::Kind kind, FetchedCredentials first,
                  std::function<Result<FetchedCredentials>(bool)> fetch,
                  std::vector<std::string> watched = {}) {
    CredentialProvider p{kind, std::move(fetch), std::move(watched)};
    return std::make_shared<RenewingCredentials>(std::move(p), std::move(first), renewing);
  };

  // botocore refuses a profile named explicitly that exists nowhere, before any provider.
  if (in->profile_named) {
    auto profiles = LoadProfiles(*in);
    if (!profiles) return Err(profiles.error());
    if (!profiles->Exists(in->profile)) {
      return Err(
          Status::InvalidArgument("profile '" + in->profile + "' not found in " + FilesNamed(*in)));
    }
  }

  std::string why_env, why_profile, why_web = "not tried", why_container, why_imds;
  // A profile named by the option is botocore's Session(profile=...) (the CLI's --profile): it
  // takes the environment's keys out of the chain, so that the profile's own credentials (or
  // its role, with credential_source Environment) are used. AWS_PROFILE does not: with it the
  // environment's keys still come first, as in botocore.
  Result<std::optional<FetchedCredentials>> env = std::optional<FetchedCredentials>();
  if (options.profile.empty()) {
    env = FromEnvironment(*in, &why_env);
  } else {
    why_env = "not used with -o profile";
  }
  if (!env) return Err(env.error());
  if (*env) {
    FetchedCredentials f = **env;
    return make(CredentialProvider::Kind::kFixed, std::move(f),
                [f](bool) -> Result<FetchedCredentials> { return f; });
  }

  bool is_static = false;
  auto profile = FromProfile(*in, false, &is_static, &why_profile, &why_web);
  if (!profile) return Err(profile.error());
  if (*profile) {
    auto fetch = [in](bool files_only) -> Result<FetchedCredentials> {
      bool unused_static;
      std::string unused1, unused2;
      auto f = FromProfile(*in, files_only, &unused_static, &unused1, &unused2);
      if (!f) return Err(f.error());
      if (!*f) {
        return Err(Status::NotFound("profile '" + in->profile + "' has no credentials any more"));
      }
      return std::move(**f);
    };
    if (is_static) {
      return make(CredentialProvider::Kind::kFile, std::move(**profile), fetch,
                  {in->credentials_path, in->config_path});
    }
    return make(CredentialProvider::Kind::kFetched, std::move(**profile), fetch);
  }

  auto container = Container(*in);
  if (container) {
    return make(CredentialProvider::Kind::kFetched, std::move(*container),
                [in](bool) { return Container(*in); });
  }
  if (!container.error().IsNotFound()) return Err(container.error());
  why_container = container.error().message();

  auto imds = InstanceMetadata(*in);
  if (imds) {
    return make(CredentialProvider::Kind::kFetched, std::move(*imds),
                [in](bool) { return InstanceMetadata(*in); });
  }
  if (!imds.error().IsNotFound()) return Err(imds.error());
  why_imds = imds.error().message();

  return Err(Status::NotFound("no AWS credentials: environment (" + why_env + "), web identity (" +
                              why_web + "), profile '" + in->profile + "' (" + why_profile +
                              "), container (" + why_container + "), instance metadata (" +
                              why_imds + ")"));
}

}  // namespace pcrfs
