#include "remote/aws_profiles.h"

#include <algorithm>
#include <vector>

#include "common/file_util.h"
#include "remote/aws_container_credentials.h"
#include "remote/aws_instance_metadata.h"
#include "remote/aws_sts.h"
#include "remote/credential_process.h"

namespace pcrfs::aws_chain {
namespace {

std::string Find(const Section& s, const char* key) {
  auto it = s.find(key);
  return it == s.end() ? "" : it->second;
}

// STS's signing region: the option, else AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
// us-east-1.
std::string StsRegion(const ChainInputs& in, const Profiles& profiles) {
  if (!in.options.region.empty()) return in.options.region;
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    std::string v = in.Env(var);
    if (!v.empty()) return v;
  }
  std::string r = Find(profiles.Merged(in.profile), "region");
  return r.empty() ? "us-east-1" : r;
}

struct ProfileWalk {
  const ChainInputs& in;
  const Profiles& profiles;
  bool files_only;
  std::vector<std::string> visited;
  bool used_static = false;  // the result is static keys from a file (for the top profile)

  Status NeedsMore(const std::string& what) const {
    return Status::NotSupported("profile '" + in.profile + "' now needs " + what);
  }

  // Static keys of a section; nullopt without aws_access_key_id.
  Result<std::optional<FetchedCredentials>> StaticKeys(const Section* s, const std::string& name,
                                                       const std::string& file) {
    if (s == nullptr) return std::nullopt;
    const std::string id = Find(*s, "aws_access_key_id");
    const std::string secret = Find(*s, "aws_secret_access_key");
    if (id.empty() && secret.empty()) return std::nullopt;
    if (id.empty() || secret.empty()) {
      return Err(Status::InvalidArgument(file + ": profile '" + name +
                                         "' needs aws_access_key_id and aws_secret_access_key"));
    }
    FetchedCredentials f{Credentials(id, secret, Find(*s, "aws_session_token")), std::nullopt,
                         "profile " + name + " (" + file + ")"};
    PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, file + " [" + name + "]"));
    used_static = true;
    return f;
  }

  // A profile's own providers (botocore's profile provider builder, environment variables
  // off): web identity from the profile (when with_web_identity), static keys in the
  // credentials file, credential_process, static keys in the config file.
  Result<std::optional<FetchedCredentials>> Own(const std::string& name, bool with_web_identity) {
    const Section merged = profiles.Merged(name);
    if (with_web_identity && !Find(merged, "web_identity_token_file").empty()) {
      if (files_only) return Err(NeedsMore("STS"));
      const std::string role = Find(merged, "role_arn");
      if (role.empty()) {
        return Err(Status::InvalidArgument("profile '" + name +
                                           "': web_identity_token_file needs role_arn"));
      }
      return WebIdentity(in, StsRegion(in, profiles), Find(merged, "web_identity_token_file"), role,
                         Find(merged, "role_session_name"), "profile " + name + " (web identity)");
    }
    auto keys = StaticKeys(profiles.InCredentials(name), name, in.credentials_path);
    if (!keys || *keys) return keys;
    const std::string command = Find(merged, "credential_process");
    if (!command.empty()) {
      if (files_only) return Err(NeedsMore("credential_process"));
      const std::string what = "profile '" + name + "' credential_process";
      // The file it is written in (the credentials file's values win, as merged).
      const Section* c = profiles.InCredentials(name);
      const std::string& file = c != nullptr && c->count("credential_process") != 0
                                    ? in.credentials_path
                                    : in.config_path;
      PCRFS_RETURN_ERR_IF_ERROR(CheckTrustedByRoot(file, what + " from"));
      auto out = in.deps.run_process(command);
      if (!out) {
        // The runner's message names credential_process and its exit status already.
        return Err(
            Status::IOError("profile '" + name + "': " + OneLine(out.error().message(), 300)));
      }
      auto f = ParseProcessCredentials(*out);
      if (!f) return Err(Status::Corruption(what + ": " + f.error().message()));
      f->source = "profile " + name + " (credential_process)";
      return f;
    }
    return StaticKeys(profiles.InConfig(name), name, in.config_path);
  }

  static bool HasStatic(const Section& s) {
    return s.count("aws_access_key_id") != 0 || s.count("aws_secret_access_key") != 0;
  }
  static bool HasAssumeRole(const Section& s) {
    return s.count("role_arn") != 0 && s.count("web_identity_token_file") == 0;
  }

  // The credentials that sign profile `name`'s AssumeRole.
  Result<FetchedCredentials> SourceCredentials(const std::string& name,
                                               const std::string& source_profile,
                                               const std::string& credential_source) {
    if (credential_source == "Environment") {
      std::string why;
      auto env = FromEnvironment(in, &why);
      if (!env) return Err(env.error());
      if (!*env) {
        return Err(Status::InvalidArgument("profile '" + name +
                                           "': credential_source Environment, but " + why));
      }
      return std::move(**env);
    }
    if (credential_source == "Ec2InstanceMetadata") return InstanceMetadata(in);
    if (credential_source == "EcsContainer") return Container(in);
    if (!credential_source.empty()) {
      return Err(Status::InvalidArgument("profile '" + name + "': credential_source '" +
                                         OneLine(credential_source, 40) +
                                         "' is not Environment, Ec2InstanceMetadata or "
                                         "EcsContainer"));
    }
    if (!profiles.Exists(source_profile)) {
      return Err(Status::InvalidArgument("profile '" + name + "': source_profile '" +
                                         source_profile + "' does not exist"));
    }
    // botocore: a profile may name itself to use its own static keys; any other revisit is a
    // loop.
    const bool seen = std::find(visited.begin(), visited.end(), source_profile) != visited.end();
    const Section src = profiles.Merged(source_profile);
    if (seen && (source_profile != name || !HasStatic(src))) {
      std::string chain;
      for (const auto& v : visited) chain += v + " -> ";
      return Err(Status::InvalidArgument("source_profile loop: " + chain + source_profile));
    }
    visited.push_back(source_profile);
    if (HasStatic(src) || !HasAssumeRole(src)) {
      auto own = Own(source_profile, /*with_web_identity=*/true);
      if (!own) return Err(own.error());
      if (!*own) {
        return Err(Status::InvalidArgument("source_profile '" + source_profile + "' of profile '" +
                                           name + "' has no credentials"));
      }
      return std::move(**own);
    }
    return AssumeRole(source_profile);
  }

  // Step 2 for profile `name` (REQUIRES: HasAssumeRole(Merged(name))).
  Result<FetchedCredentials> AssumeRole(const std::string& name) {
    if (files_only) return Err(NeedsMore("STS"));
    const Section s = profiles.Merged(name);
    const std::string role = Find(s, "role_arn");
    const std::string source_profile = Find(s, "source_profile");
    const std::string credential_source = Find(s, "credential_source");
    if (!source_profile.empty() && !credential_source.empty()) {
      return Err(Status::InvalidArgument("profile '" + name +
                                         "' has both source_profile and credential_source"));
    }
    if (source_profile.empty() && credential_source.empty()) {
      return Err(Status::InvalidArgument("profile '" + name +
                                         "': role_arn needs source_profile or credential_source"));
    }
    if (!Find(s, "mfa_serial").empty()) {
      return Err(Status::NotSupported("profile '" + name +
                                      "': mfa_serial needs a prompt, which a mount cannot give"));
    }
    Result<FetchedCredentials> source = SourceCredentials(name, source_profile, credential_source);
    if (!source) return Err(source.error());
    HeaderList params = {{"Action", "AssumeRole"},
                         {"Version", "2011-06-15"},
                         {"RoleArn", role},
                         {"RoleSessionName", SessionName(in, Find(s, "role_session_name"))}};
    if (!Find(s, "external_id").empty()) params.emplace_back("ExternalId", Find(s, "external_id"));
    if (!Find(s, "duration_seconds").empty()) {
      params.emplace_back("DurationSeconds", Find(s, "duration_seconds"));
    }
    used_static = false;  // whatever the source was, the result is temporary
    return CallSts(in, StsRegion(in, profiles), params, &source->credentials, role,
                   "profile " + name + " (assume role " + role + ")");
  }
};

}  // namespace

Result<Profiles> LoadProfiles(const ChainInputs& in) {
  Profiles p;
  if (!in.credentials_path.empty()) {
    auto ini = ReadIni(in.credentials_path, &p.credentials_exists);
    if (!ini) return Err(ini.error());
    p.credentials = std::move(*ini);
    if (p.credentials_exists) WarnIfReadableByOthers(in.credentials_path, "AWS credentials file");
  }
  if (!in.config_path.empty()) {
    auto ini = ReadIni(in.config_path, &p.config_exists);
    if (!ini) return Err(ini.error());
    p.config = std::move(*ini);
    if (p.config_exists) WarnIfReadableByOthers(in.config_path, "AWS config file");
  }
  return p;
}

std::string FilesNamed(const ChainInputs& in) {
  auto shown = [](const std::string& p, const char* fallback) { return p.empty() ? fallback : p; };
  return shown(in.credentials_path, "~/.aws/credentials (HOME unknown)") + " or " +
         shown(in.config_path, "~/.aws/config (HOME unknown)");
}

// Steps 2 to 4 (what depends on the profile, with the environment's web identity between
// them, as botocore orders them). nullopt with the reasons when none of them has credentials.
Result<std::optional<FetchedCredentials>> FromProfile(const ChainInputs& in, bool files_only,
                                                      bool* is_static, std::string* why_profile,
                                                      std::string* why_web_identity) {
  auto profiles = LoadProfiles(in);
  if (!profiles) return Err(profiles.error());
  ProfileWalk walk{in, *profiles, files_only, {in.profile}};
  const Section merged = profiles->Merged(in.profile);
  *is_static = false;
  if (ProfileWalk::HasAssumeRole(merged)) {
    auto f = walk.AssumeRole(in.profile);
    if (!f) return Err(f.error());
    return std::optional<FetchedCredentials>(std::move(*f));
  }
  const std::string env_token_file = in.Env("AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!env_token_file.empty()) {
    if (files_only) return Err(walk.NeedsMore("STS"));
    std::string role = in.Env("AWS_ROLE_ARN");
    if (role.empty()) role = Find(merged, "role_arn");
    if (role.empty()) {
      return Err(
          Status::InvalidArgument("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not"));
    }
    std::string session = in.Env("AWS_ROLE_SESSION_NAME");
    if (session.empty()) session = Find(merged, "role_session_name");
    auto f =
        WebIdentity(in, StsRegion(in, *profiles), env_token_file, role, session, "web identity");
    if (!f) return Err(f.error());
    return std::optional<FetchedCredentials>(std::move(*f));
  }
  *why_web_identity = "AWS_WEB_IDENTITY_TOKEN_FILE unset";
  auto own = walk.Own(in.profile, /*with_web_identity=*/true);
  if (!own) return Err(own.error());
  if (*own) {
    *is_static = walk.used_static;
    return own;
  }
  *why_profile = profiles->Exists(in.profile) ? "no keys, credential_process or role_arn in it"
                                              : "not in " + FilesNamed(in);
  return std::nullopt;
}

}  // namespace pcrfs::aws_chain
