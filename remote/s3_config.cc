#include "remote/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace pcrfs {
namespace {

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The INI dialect of the AWS CLI: [section], key = value, '#' and ';' comments. Nested values
// (indented lines under "s3 =") are read as keys of their own, which is harmless here.
Result<IniFile> ReadIni(const std::string& path, bool* exists) {
  IniFile ini;
  std::ifstream in(path);
  *exists = false;
  if (!in) {
    if (errno == ENOENT || errno == ENOTDIR) return ini;
    return Err(Status::FromErrno(path, errno));
  }
  *exists = true;
  std::string line, section;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = Trim(line.substr(1, line.size() - 2));
      ini[section];
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    ini[section][Trim(line.substr(0, eq))] = Trim(line.substr(eq + 1));
  }
  if (in.bad()) return Err(Status::IOError(path + ": read error"));
  return ini;
}

std::string Get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v == nullptr ? "" : std::string(v);
}

std::string HomeFile(const EnvLookup& env, const char* var, const char* rel) {
  std::string v = Get(env, var);
  if (!v.empty()) return v;
  std::string home = Get(env, "HOME");
  return home.empty() ? "" : home + "/" + rel;
}

}  // namespace

Result<S3Config> ResolveS3Config(const Url& store, const S3Options& options,
                                 const EnvLookup& env_in) {
  EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return std::getenv(n); });
  if (!store.is_s3()) {
    return Err(Status::InvalidArgument(store.ToString() + ": not an s3:// URL"));
  }
  S3Config c;
  c.bucket = store.host;
  c.prefix = store.path;

  bool profile_explicit = !options.profile.empty() || !Get(env, "AWS_PROFILE").empty();
  std::string profile = !options.profile.empty() ? options.profile : Get(env, "AWS_PROFILE");
  if (profile.empty()) profile = "default";

  // Region.
  std::string config_path = HomeFile(env, "AWS_CONFIG_FILE", ".aws/config");
  bool config_exists = false;
  IniFile config;
  if (!config_path.empty()) {
    auto ini = ReadIni(config_path, &config_exists);
    if (!ini.has_value()) return Err(ini.error());
    config = std::move(*ini);
  }
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;
  if (!options.region.empty()) {
    c.region = options.region;
    c.region_source = "option region";
  } else if (!Get(env, "AWS_REGION").empty()) {
    c.region = Get(env, "AWS_REGION");
    c.region_source = "AWS_REGION";
  } else if (!Get(env, "AWS_DEFAULT_REGION").empty()) {
    c.region = Get(env, "AWS_DEFAULT_REGION");
    c.region_source = "AWS_DEFAULT_REGION";
  } else if (config.count(config_section) && config[config_section].count("region")) {
    c.region = config[config_section]["region"];
    c.region_source = config_path;
  } else {
    c.region = "us-east-1";
    c.region_source = "default";
  }
  if (c.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return Err(Status::InvalidArgument("region '" + c.region + "' (from " + c.region_source +
                                       ") is not a valid AWS region name"));
  }

  // Endpoint.
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
  if (!custom) endpoint = "https://s3." + c.region + ".amazonaws.com";
  auto ep = ParseUrl(endpoint);
  if (!ep.has_value() || ep->is_s3()) {
    return Err(Status::InvalidArgument(endpoint_source + ": " + RedactUrl(endpoint) +
                                       " is not a valid http(s) endpoint" +
                                       (ep.has_value() ? "" : " (" + ep.error().message() + ")")));
  }
  c.endpoint = *ep;
  switch (options.addressing) {
    case S3Options::Addressing::kPath:
      c.path_style = true;
      break;
    case S3Options::Addressing::kVirtualHost:
      c.path_style = false;
      break;
    case S3Options::Addressing::kAuto:
      // Virtual-host names need DNS for BUCKET.HOST and a bucket name without dots for TLS.
      c.path_style = custom || c.bucket.find('.') != std::string::npos;
      break;
  }

  // Credentials.
  if (options.no_sign) {
    c.credentials_source = "none (no_sign)";
    return c;
  }
  std::string ak = Get(env, "AWS_ACCESS_KEY_ID");
  std::string sk = Get(env, "AWS_SECRET_ACCESS_KEY");
  if (!ak.empty() || !sk.empty()) {
    if (ak.empty() || sk.empty()) {
      return Err(Status::InvalidArgument(
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (only " +
          std::string(ak.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") + " is set)"));
    }
    c.credentials = Credentials(ak, sk, Get(env, "AWS_SESSION_TOKEN"));
    c.credentials_source = "environment";
    return c;
  }
  std::string cred_path = HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  bool cred_exists = false;
  IniFile creds;
  if (!cred_path.empty()) {
    auto ini = ReadIni(cred_path, &cred_exists);
    if (!ini.has_value()) return Err(ini.error());
    creds = std::move(*ini);
  }
  // The credentials file names sections by the bare profile; the config file may hold keys too.
  const std::map<std::string, std::string>* section = nullptr;
  std::string section_file;
  if (creds.count(profile)) {
    section = &creds[profile];
    section_file = cred_path;
  } else if (config.count(config_section) && config[config_section].count("aws_access_key_id")) {
    section = &config[config_section];
    section_file = config_path;
  }
  if (section == nullptr) {
    if (profile_explicit) {
      return Err(Status::InvalidArgument("profile '" + profile + "' not found in " +
                                         (cred_path.empty() ? "~/.aws/credentials" : cred_path) +
                                         (config_exists ? " or " + config_path : "")));
    }
    c.credentials_source = "none (anonymous)";
    return c;
  }
  auto find = [&](const char* k) {
    auto it = section->find(k);
    return it == section->end() ? std::string() : it->second;
  };
  std::string fak = find("aws_access_key_id"), fsk = find("aws_secret_access_key");
  if (fak.empty() || fsk.empty()) {
    return Err(Status::InvalidArgument(section_file + ": profile '" + profile +
                                       "' needs aws_access_key_id and aws_secret_access_key"));
  }
  c.credentials = Credentials(fak, fsk, find("aws_session_token"));
  c.credentials_source = section_file + " [" + profile + "]";
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

std::shared_ptr<SigV4Signer> S3Config::MakeSigner() const {
  if (credentials.empty()) return nullptr;
  return std::make_shared<SigV4Signer>(credentials, region);
}

}  // namespace pcrfs
