#include "remote/s3_config.h"

#include <vector>

#include "remote/aws_credentials.h"

namespace pcrfs {
namespace {

std::string Get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? "" : std::string(v);
}

std::string HomeFile(const EnvLookup& env, const std::string& option, const char* var,
                     const char* rel) {
  if (!option.empty()) return option;
  std::string v = Get(env, var);
  if (!v.empty()) return v;
  std::string home = HomeDirectory(env);
  return home.empty() ? "" : home + "/" + rel;
}

// The profile in use and the AWS config file that may give its region. (Its credentials are
// the credential chain's business: remote/aws_credentials.cc.)
struct Profile {
  std::string name;
  std::string config_path;
  bool config_exists = false;
  IniFile config;
  std::string config_section;  // its section in the config file

  const std::map<std::string, std::string>* ConfigSection() const {
    auto it = config.find(config_section);
    return it == config.end() ? nullptr : &it->second;
  }
};

Result<Profile> LoadProfile(const S3Options& options, const EnvLookup& env) {
  Profile p;
  p.name = !options.profile.empty() ? options.profile : Get(env, "AWS_PROFILE");
  if (p.name.empty()) p.name = "default";
  p.config_path = HomeFile(env, options.config_file, "AWS_CONFIG_FILE", ".aws/config");
  if (!p.config_path.empty()) {
    auto ini = ReadIni(p.config_path, &p.config_exists);
    if (!ini.has_value()) return Err(ini.error());
    p.config = std::move(*ini);
  }
  p.config_section = p.name == "default" ? "default" : "profile " + p.name;
  return p;
}

Status ResolveRegion(const S3Options& options, const EnvLookup& env, const Profile& profile,
                     S3Config* c) {
  const auto* section = profile.ConfigSection();
  if (!options.region.empty()) {
    c->region = options.region;
    c->region_source = "option region";
  } else if (!Get(env, "AWS_REGION").empty()) {
    c->region = Get(env, "AWS_REGION");
    c->region_source = "AWS_REGION";
  } else if (!Get(env, "AWS_DEFAULT_REGION").empty()) {
    c->region = Get(env, "AWS_DEFAULT_REGION");
    c->region_source = "AWS_DEFAULT_REGION";
  } else if (section != nullptr && section->count("region")) {
    c->region = section->at("region");
    c->region_source = profile.config_path;
  } else {
    c->region = c->gcs ? "auto" : "us-east-1";  // GCS's XML API takes any region; "auto" is its own
    c->region_source = "default";
  }
  if (c->region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return Status::InvalidArgument("region '" + c->region + "' (from " + c->region_source +
                                   ") is not a valid AWS region name");
  }
  return Status::OK();
}

// REQUIRES: c->region and c->bucket set.
Status ResolveEndpoint(const S3Options& options, const EnvLookup& env, S3Config* c) {
  std::string endpoint, endpoint_source;
  for (auto [value, source] : {std::pair{options.endpoint, std::string("option endpoint")},
                               {Get(env, "AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                               {Get(env, "AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"}}) {
    if (!value.empty()) {
      endpoint = value;
      endpoint_source = source;
      break;
    }
  }
  bool custom = !endpoint.empty();
  if (!custom) {
    endpoint =
        c->gcs ? "https://storage.googleapis.com" : "https://s3." + c->region + ".amazonaws.com";
  }
  auto ep = ParseUrl(endpoint);
  if (!ep.has_value() || ep->is_s3()) {
    return Status::InvalidArgument(endpoint_source + ": " + RedactUrl(endpoint) +
                                   " is not a valid http(s) endpoint" +
                                   (ep.has_value() ? "" : " (" + ep.error().message() + ")"));
  }
  c->endpoint = *ep;
  switch (options.addressing) {
    case S3Options::Addressing::kPath:
      c->path_style = true;
      break;
    case S3Options::Addressing::kVirtualHost:
      c->path_style = false;
      break;
    case S3Options::Addressing::kAuto:
      // Virtual-host names need DNS for BUCKET.HOST and a bucket name without dots for TLS.
      c->path_style = custom || c->bucket.find('.') != std::string::npos;
      break;
  }
  return Status::OK();
}

// The credential chain for this store's region. Nothing found anywhere is anonymous access (a
// public bucket), as it was before the chain; anything configured that fails is an error.
Status ResolveCredentials(const S3Options& options, const EnvLookup& env,
                          std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)> http,
                          S3Config* c) {
  if (options.no_sign) {
    c->credentials_source = "none (no_sign)";
    return Status::OK();
  }
  AwsCredentialOptions o;
  o.profile = options.profile;
  o.credentials_file = options.credentials_file;
  o.config_file = options.config_file;
  o.region = c->region;
  AwsCredentialDeps deps;
  deps.env = env;
  deps.http = std::move(http);
  auto resolved = ResolveAwsCredentials(o, std::move(deps));
  if (!resolved.has_value()) {
    if (!resolved.error().IsNotFound()) return resolved.error();
    c->credentials_source = "none (anonymous: " + resolved.error().message() + ")";
    c->no_credentials = resolved.error().message();
    return Status::OK();
  }
  c->aws_credentials = *resolved;
  auto snapshot = c->aws_credentials->Current();
  c->credentials_source = snapshot->source;
  return Status::OK();
}

}  // namespace

Result<S3Config> ResolveS3Config(
    const Url& store, const S3Options& options, const EnvLookup& env_in,
    std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)> http) {
  EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return std::getenv(n); });
  if (!store.is_s3()) {
    return Err(Status::InvalidArgument(store.ToString() + ": not an s3:// URL"));
  }
  S3Config c;
  c.gcs = store.scheme == Url::Scheme::kGs;
  c.bucket = store.host;
  c.prefix = store.path;
  auto profile = LoadProfile(options, env);
  if (!profile.has_value()) return Err(profile.error());
  PCRFS_RETURN_ERR_IF_ERROR(ResolveRegion(options, env, *profile, &c));
  PCRFS_RETURN_ERR_IF_ERROR(ResolveEndpoint(options, env, &c));
  PCRFS_RETURN_ERR_IF_ERROR(ResolveCredentials(options, env, std::move(http), &c));
  return c;
}

std::string S3Config::ObjectUrl(std::string_view name) const {
  std::string key = prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
  std::string scheme = endpoint.scheme == Url::Scheme::kHttps ? "https://" : "http://";
  std::string encoded = UriEncode(key, /*keep_slash=*/true);
  if (path_style) {
    return scheme + endpoint.Authority() + endpoint.path + "/" + bucket + "/" + encoded;
  }
  return scheme + bucket + "." + endpoint.Authority() + endpoint.path + "/" + encoded;
}

std::string S3Config::ListUrl(std::string_view continuation_token) const {
  std::string scheme = endpoint.scheme == Url::Scheme::kHttps ? "https://" : "http://";
  std::string base = path_style
                         ? scheme + endpoint.Authority() + endpoint.path + "/" + bucket + "/"
                         : scheme + bucket + "." + endpoint.Authority() + endpoint.path + "/";
  std::string query = "?list-type=2&prefix=" + UriEncode(prefix.empty() ? "" : prefix + "/", false);
  if (!continuation_token.empty()) {
    query += "&continuation-token=" + UriEncode(continuation_token, false);
  }
  return base + query;
}

Credentials S3Config::credentials() const {
  if (aws_credentials == nullptr) return Credentials();
  return aws_credentials->Current()->credentials;
}

std::shared_ptr<SigV4Signer> S3Config::MakeSigner() const {
  Credentials current = credentials();
  if (current.empty()) return nullptr;
  return std::make_shared<SigV4Signer>(std::move(current), region);
}

}  // namespace pcrfs
