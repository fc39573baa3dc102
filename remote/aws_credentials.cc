#include "remote/aws_credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "common/file_util.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "remote/aws_chain.h"
#include "remote/url.h"
#include "remote/xml.h"

namespace pcrfs {
namespace {

using Section = std::map<std::string, std::string>;
using Http = std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)>;

constexpr std::chrono::milliseconds kStsTimeout{10000};
constexpr std::chrono::milliseconds kProcessTimeout{60000};  // credential_process
constexpr size_t kMaxXml = size_t{64} << 10;
constexpr size_t kMaxField = 8192;
constexpr size_t kMaxTokenFile = size_t{64} << 10;

using aws_chain::ValidCredentialField;

Status CheckCredentials(const FetchedCredentials& f, std::string_view what) {
  if (!ValidCredentialField(f.credentials.access_key_id()) ||
      !ValidCredentialField(f.credentials.secret_access_key()) ||
      (!f.credentials.session_token().empty() &&
       !ValidCredentialField(f.credentials.session_token()))) {
    return Status::Corruption(std::string(what) +
                              ": a key, secret or token is empty, too long or not printable");
  }
  return Status::OK();
}

std::string FormUrlEncode(const HeaderList& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += UriEncode(k, false) + "=" + UriEncode(v, false);
  }
  return out;
}

// ---- XML: the few elements of an STS answer ---------------------------------------------------

// The STS <Error> of an answer that is not a success: "Code: Message", or "" if there is none.
std::string StsError(std::string_view xml) {
  if (xml.size() > kMaxXml) return "";
  auto doc = ParseXml(xml);
  const XmlNode* error = doc ? doc->Find("Error") : nullptr;
  const XmlNode* code = error != nullptr ? error->Child("Code") : nullptr;
  if (code == nullptr) return "";
  const XmlNode* message = error->Child("Message");
  return OneLine(code->text, 80) + (message != nullptr ? ": " + OneLine(message->text) : "");
}

Result<FetchedCredentials> CredentialsFromJson(const nlohmann::json& j, const char* token_field,
                                               std::string_view what) {
  auto field = [&](const char* name) -> std::optional<std::string> {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto id = field("AccessKeyId"), secret = field("SecretAccessKey");
  if (!id || !secret) {
    return Err(Status::Corruption(std::string(what) +
                                  ": AccessKeyId or SecretAccessKey missing or not a string"));
  }
  FetchedCredentials f;
  f.credentials = Credentials(*id, *secret, field(token_field).value_or(""));
  if (j.contains("Expiration")) {
    auto text = field("Expiration");
    if (!text) return Err(Status::Corruption(std::string(what) + ": Expiration is not a string"));
    auto t = ParseIso8601(*text);
    if (!t) return Err(Status::Corruption(std::string(what) + ": " + t.error().message()));
    f.expiration = *t;
  }
  PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, what));
  return f;
}

}  // namespace

// ---- Parsers ----------------------------------------------------------------------------------

Result<Clock::time_point> ParseIso8601(std::string_view s) {
  const std::optional<IsoTime> t = ParseIsoTimeUtc(s);
  if (!t) return Err(Status::Corruption("Expiration is not an ISO 8601 UTC time"));
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::seconds(t->sec) + std::chrono::nanoseconds(t->nsec)));
}

std::string FormatIso8601(Clock::time_point t) {
  const std::time_t tt = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<FetchedCredentials> ParseStsCredentials(std::string_view xml) {
  if (xml.size() > kMaxXml) return Err(Status::Corruption("STS answer larger than 64 KiB"));
  if (const std::string error = StsError(xml); !error.empty()) {
    return Err(Status::InvalidArgument(error));
  }
  auto doc = ParseXml(xml);
  if (!doc) return Err(Status::Corruption("STS answer: " + doc.error().message()));
  const XmlNode* block = doc->Find("Credentials");
  if (block == nullptr) return Err(Status::Corruption("STS answer without <Credentials>"));
  auto text = [&](const char* name) -> std::optional<std::string> {
    const XmlNode* n = block->Child(name);
    return n != nullptr ? std::optional<std::string>(n->text) : std::nullopt;
  };
  const auto id = text("AccessKeyId");
  const auto secret = text("SecretAccessKey");
  const auto token = text("SessionToken");
  const auto expiration = text("Expiration");
  if (!id || !secret || !token || !expiration) {
    return Err(Status::Corruption(
        "STS answer without AccessKeyId, SecretAccessKey, SessionToken or Expiration"));
  }
  FetchedCredentials f;
  f.credentials = Credentials(*id, *secret, *token);
  auto t = ParseIso8601(*expiration);
  if (!t) return Err(Status::Corruption("STS answer: " + t.error().message()));
  f.expiration = *t;
  if (token->empty()) return Err(Status::Corruption("STS answer: empty SessionToken"));
  PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, "STS answer"));
  return f;
}

Result<FetchedCredentials> ParseProcessCredentials(std::string_view text) {
  // Never quote the text or the parser's message: it would hold the secret.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(Status::Corruption("output is not a JSON object"));
  }
  auto version = j.find("Version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return Err(Status::Corruption("output lacks \"Version\": 1"));
  }
  return CredentialsFromJson(j, "SessionToken", "output");
}

Result<FetchedCredentials> ParseMetadataCredentials(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(Status::Corruption("answer is not a JSON object"));
  }
  auto code = j.find("Code");
  if (code != j.end() && (!code->is_string() || code->get<std::string>() != "Success")) {
    std::string c = code->is_string() ? OneLine(code->get<std::string>(), 80) : "?";
    auto message = j.find("Message");
    if (message != j.end() && message->is_string())
      c += ": " + OneLine(message->get<std::string>());
    return Err(Status::InvalidArgument("answer Code " + c));
  }
  return CredentialsFromJson(j, "Token", "answer");
}

// ---- Schedule ---------------------------------------------------------------------------------

Clock::duration RenewalMargin(Clock::duration lifetime) {
  return std::max(Clock::duration::zero(),
                  std::min<Clock::duration>(std::chrono::minutes(10), lifetime / 4));
}

Clock::duration RenewalBackoff(int failures) {
  if (failures <= 1) return std::chrono::seconds(1);
  if (failures >= 7) return std::chrono::seconds(60);  // 1 << 6 = 64 > 60
  return std::min<Clock::duration>(std::chrono::seconds(int64_t{1} << (failures - 1)),
                                   std::chrono::seconds(60));
}

std::optional<Clock::time_point> NextRenewal(const RenewalTimes& t, double jitter) {
  if (!t.expiration) return std::nullopt;
  const Clock::time_point expiration = *t.expiration;
  if (t.failures > 0) {
    Clock::time_point next = t.last_failure + RenewalBackoff(t.failures);
    // While the credentials still work, the last try is at their expiration; after that, the
    // backoff alone (min with a past expiration would retry in a tight loop).
    if (expiration > t.last_failure) next = std::min(next, expiration);
    return next;
  }
  const Clock::duration margin = RenewalMargin(expiration - t.obtained);
  jitter = std::clamp(jitter, 0.0, 1.0);
  const auto spread = std::chrono::duration_cast<Clock::duration>(margin * (jitter / 10));
  return expiration - margin - spread;
}

// ---- Shared with remote/aws_metadata_credentials.cc (remote/aws_chain.h) ------------------------

namespace aws_chain {

// A key, secret or token that will go into an HTTP header: printable ASCII without spaces (a
// hostile answer must not smuggle CR LF into a request), bounded.
bool ValidCredentialField(std::string_view s) {
  if (s.empty() || s.size() > kMaxField) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// A small file holding a token (web identity, container authorization): read whole, trimmed.
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

}  // namespace aws_chain

namespace {

// ---- The chain --------------------------------------------------------------------------------

using aws_chain::ChainInputs;
using aws_chain::Container;
using aws_chain::InstanceMetadata;
using aws_chain::ReadTokenFile;

// The profiles as the files say now (read again at each fetch).
struct Profiles {
  bool credentials_exists = false, config_exists = false;
  IniFile credentials, config;

  const Section* InCredentials(const std::string& name) const {
    auto it = credentials.find(name);
    return it == credentials.end() ? nullptr : &it->second;
  }
  const Section* InConfig(const std::string& name) const {
    auto it = config.find(name == "default" ? "default" : "profile " + name);
    if (it == config.end() && name == "default") it = config.find("profile default");
    return it == config.end() ? nullptr : &it->second;
  }
  bool Exists(const std::string& name) const {
    return InCredentials(name) != nullptr || InConfig(name) != nullptr;
  }
  // botocore's view: the config file's section, overridden by the credentials file's.
  Section Merged(const std::string& name) const {
    Section s;
    if (const Section* c = InConfig(name)) s = *c;
    if (const Section* c = InCredentials(name)) {
      for (const auto& [k, v] : *c) s[k] = v;
    }
    return s;
  }
};

std::string Find(const Section& s, const char* key) {
  auto it = s.find(key);
  return it == s.end() ? "" : it->second;
}

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

std::string StsEndpoint(const ChainInputs& in, const std::string& region) {
  for (const char* var : {"AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"}) {
    std::string v = in.Env(var);
    if (!v.empty()) return v;
  }
  if (in.Env("AWS_STS_REGIONAL_ENDPOINTS") == "regional") {
    return "https://sts." + region + ".amazonaws.com";
  }
  return "https://sts.amazonaws.com";
}

std::string StsRegion(const ChainInputs& in, const Profiles& profiles) {
  if (!in.options.region.empty()) return in.options.region;
  for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    std::string v = in.Env(var);
    if (!v.empty()) return v;
  }
  std::string r = Find(profiles.Merged(in.profile), "region");
  return r.empty() ? "us-east-1" : r;
}

std::string SessionName(const ChainInputs& in, const std::string& configured) {
  if (!configured.empty()) return configured;
  return "pcrfs-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                       in.deps.now().time_since_epoch())
                                       .count());
}

// One STS call; `signer` null for AssumeRoleWithWebIdentity. Errors name the role, never the
// token or a key.
Result<FetchedCredentials> CallSts(const ChainInputs& in, const Profiles& profiles,
                                   const HeaderList& params, const Credentials* signer,
                                   const std::string& role_arn, std::string source) {
  const std::string region = StsRegion(in, profiles);
  const std::string endpoint = StsEndpoint(in, region);
  auto url = ParseUrl(endpoint);
  if (!url || url->is_s3()) {
    return Err(Status::InvalidArgument(role_arn + ": STS endpoint " + RedactUrl(endpoint) +
                                       " is not an http(s) URL"));
  }
  SimpleHttpRequest req;
  req.method = "POST";
  req.url = (url->scheme == Url::Scheme::kHttps ? "https://" : "http://") + url->Authority() +
            url->path + "/";
  req.body = FormUrlEncode(params);
  req.timeout = kStsTimeout;
  req.connect_timeout = std::chrono::milliseconds(3000);
  const std::string content_type = "application/x-www-form-urlencoded; charset=utf-8";
  req.headers = {{"Content-Type", content_type}, {"Accept", "application/xml"}};
  if (signer != nullptr) {
    SigV4Signer sigv4(*signer, region, "sts");
    SigV4Request r;
    r.method = "POST";
    r.path = url->path + "/";
    r.headers = {{"host", url->Authority()}, {"content-type", content_type}};
    r.payload_hash = Sha256Hex(req.body);
    for (auto& h : sigv4.Sign(r, in.deps.now())) req.headers.push_back(std::move(h));
  }
  auto resp = in.deps.http(req);
  if (!resp) return Err(Status::IOError(role_arn + ": STS: " + resp.error().message()));
  if (resp->status != 200) {
    std::string error = StsError(resp->body);
    return Err(Status::InvalidArgument(role_arn + ": STS answered HTTP " +
                                       std::to_string(resp->status) +
                                       (error.empty() ? "" : " " + error)));
  }
  auto f = ParseStsCredentials(resp->body);
  if (!f) return Err(Status::Corruption(role_arn + ": " + f.error().message()));
  f->source = std::move(source);
  return f;
}

Result<FetchedCredentials> WebIdentity(const ChainInputs& in, const Profiles& profiles,
                                       const std::string& token_file, const std::string& role_arn,
                                       const std::string& session_name, std::string source) {
  auto token = ReadTokenFile(token_file, "web identity token file");
  if (!token) return Err(token.error());
  HeaderList params = {{"Action", "AssumeRoleWithWebIdentity"},
                       {"Version", "2011-06-15"},
                       {"RoleArn", role_arn},
                       {"RoleSessionName", SessionName(in, session_name)},
                       {"WebIdentityToken", *token}};
  return CallSts(in, profiles, params, nullptr, role_arn, std::move(source));
}

// Step 1.
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
      return WebIdentity(in, profiles, Find(merged, "web_identity_token_file"), role,
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
    return CallSts(in, profiles, params, &source->credentials, role,
                   "profile " + name + " (assume role " + role + ")");
  }
};

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
    auto f = WebIdentity(in, *profiles, env_token_file, role, session, "web identity");
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

}  // namespace

// ---- RenewingCredentials ----------------------------------------------------------------------

RenewingCredentials::RenewingCredentials(CredentialProvider provider, FetchedCredentials first,
                                         Options options)
    : provider_(std::move(provider)),
      clock_(options.clock != nullptr ? options.clock : timing::Clock::Real()),
      now_(options.now ? std::move(options.now) : [clock = clock_] { return clock->WallNow(); }),
      jitter_(options.jitter ? std::move(options.jitter) : [] {
        thread_local std::mt19937_64 rng(std::random_device{}());
        return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      }) {
  MutexLock l(&mu_);
  stamps_ = StampFiles();
  Install(std::move(first), /*count_renewal=*/false);
}

RenewingCredentials::~RenewingCredentials() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (!thread_.joinable()) return;
  if (thread_pid_ == ::getpid()) {
    thread_.join();
  } else {
    // Started before a fork: the thread does not exist in this process; joining would wait
    // forever. Its handle is left alone (std::thread's destructor would terminate).
    new std::thread(std::move(thread_));
  }
}

Status RenewingCredentials::StartRenewal() {
  if (thread_.joinable()) {
    if (thread_pid_ == ::getpid()) return Status::OK();
    return Status::InvalidArgument(
        "credential renewal was started before fork(): start it in the process that signs");
  }
  thread_pid_ = ::getpid();
  thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

std::shared_ptr<const AwsCredentialsSnapshot> RenewingCredentials::Current() const {
  MutexLock l(&mu_);
  return snapshot_;
}

RenewalTimes RenewingCredentials::times() const {
  MutexLock l(&mu_);
  return times_;
}

std::optional<Clock::time_point> RenewingCredentials::next_renewal() const {
  MutexLock l(&mu_);
  return NextRenewal(times_, schedule_jitter_);
}

std::vector<RenewingCredentials::FileStamp> RenewingCredentials::StampFiles() const {
  std::vector<FileStamp> stamps;
  for (const auto& path : provider_.watched_files) {
    FileStamp s;
    struct stat st;
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
      s.exists = true;
      s.dev = st.st_dev;
      s.ino = st.st_ino;
      s.size = static_cast<uint64_t>(st.st_size);
      s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    }
    stamps.push_back(s);
  }
  return stamps;
}

bool RenewingCredentials::Install(FetchedCredentials fetched, bool count_renewal) {
  const uint64_t generation = snapshot_ ? snapshot_->generation : 0;
  if (snapshot_ && provider_.kind == CredentialProvider::Kind::kFile &&
      snapshot_->credentials.access_key_id() == fetched.credentials.access_key_id() &&
      snapshot_->credentials.secret_access_key() == fetched.credentials.secret_access_key() &&
      snapshot_->credentials.session_token() == fetched.credentials.session_token()) {
    return false;  // the file was rewritten with the same keys
  }
  auto next = std::make_shared<AwsCredentialsSnapshot>();
  next->credentials = std::move(fetched.credentials);
  next->expiration = fetched.expiration;
  next->generation = generation + 1;
  next->source = std::move(fetched.source);
  snapshot_ = std::move(next);
  times_ = RenewalTimes{now_(), fetched.expiration, 0, {}};
  schedule_jitter_ = jitter_();
  if (count_renewal) ++renewals_;
  return true;
}

void RenewingCredentials::RecordFailure(const Status& s) {
  ++renewal_failures_;
  ++times_.failures;
  times_.last_failure = now_();
  const std::string& m = s.message();
  Log(LogLevel::kWarning, "credential renewal failed: " + OneLine(m, 400));
  const size_t said = m.find(kCredentialProcessSaid);
  last_error_ =
      OneLine(said == std::string::npos ? m : m.substr(0, said) + " (more in the log)", 400);
}

Status RenewingCredentials::RenewNow() {
  MutexLock fetch(&fetch_mu_);
  {
    MutexLock l(&mu_);
    renewing_ = true;
    renew_requested_ = false;
  }
  std::vector<FileStamp> stamps = StampFiles();  // before reading: a later write is noticed
  auto fetched = provider_.fetch(/*files_only=*/false);
  MutexLock l(&mu_);
  renewing_ = false;
  if (!fetched) {
    RecordFailure(fetched.error());
    return fetched.error();
  }
  stamps_ = std::move(stamps);
  if (!Install(std::move(*fetched), /*count_renewal=*/true)) {
    // Same keys again: still a renewal done; the schedule restarts.
    ++renewals_;
    times_.failures = 0;
  }
  last_error_.clear();
  return Status::OK();
}

bool RenewingCredentials::FileKeysChanged() const {
  std::vector<FileStamp> stamps = StampFiles();
  {
    MutexLock l(&mu_);
    if (stamps == stamps_) return false;
  }
  auto* self = const_cast<RenewingCredentials*>(this);
  MutexLock fetch(&self->fetch_mu_);
  auto fetched = provider_.fetch(/*files_only=*/true);
  MutexLock l(&self->mu_);
  if (!fetched) {
    if (fetched.error().code() == Status::Code::kNotSupported) {
      // The profile now needs a process or STS: that is the thread's work.
      self->renew_requested_ = true;
      cv_.SignalAll();
      return true;
    }
    self->RecordFailure(fetched.error());
    self->stamps_ = std::move(stamps);  // the same broken file is not read again and again
    return false;
  }
  self->stamps_ = std::move(stamps);
  self->last_error_.clear();
  return self->Install(std::move(*fetched), /*count_renewal=*/true);
}

bool RenewingCredentials::RequestRenewal(uint64_t generation) const {
  switch (provider_.kind) {
    case CredentialProvider::Kind::kFixed:
      return false;
    case CredentialProvider::Kind::kFile:
      return FileKeysChanged();
    case CredentialProvider::Kind::kFetched:
      break;
  }
  MutexLock l(&mu_);
  if (generation != snapshot_->generation || renewing_ || renew_requested_) return true;
  // Credentials a renewal got moments ago, refused still (a wrong key, a clock the server
  // disagrees with): another renewal would not help, and each refusal would start one.
  if (snapshot_->generation > 1 && now_() - times_.obtained < kRefusedAfterRenewal) return false;
  renew_requested_ = true;
  cv_.SignalAll();
  return true;
}

void RenewingCredentials::Reload() const {
  switch (provider_.kind) {
    case CredentialProvider::Kind::kFixed:
      return;
    case CredentialProvider::Kind::kFile:
      FileKeysChanged();
      return;
    case CredentialProvider::Kind::kFetched: {
      MutexLock l(&mu_);
      renew_requested_ = true;
      cv_.SignalAll();
      return;
    }
  }
}

std::string RenewingCredentials::DescribeJson() const {
  MutexLock l(&mu_);
  nlohmann::json j;
  j["source"] = snapshot_->source;
  j["access_key_id"] = MaskedKeyId(snapshot_->credentials.access_key_id());
  if (snapshot_->expiration) j["expires"] = FormatIso8601(*snapshot_->expiration);
  j["generation"] = snapshot_->generation;
  j["renewals"] = renewals_;
  j["renewal_failures"] = renewal_failures_;
  if (!last_error_.empty()) j["last_error"] = last_error_;
  if (auto next = NextRenewal(times_, schedule_jitter_)) j["next_renewal"] = FormatIso8601(*next);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RenewingCredentials::Run() {
  NameThisThread("pcrfs-creds");
  MutexLock l(&mu_);
  while (!stop_) {
    auto next = NextRenewal(times_, schedule_jitter_);
    const auto now = now_();
    if (renew_requested_) {
      // A refused request asks for a renewal now, but after failures not before their backoff
      // (refusals must not turn failing fetches into a storm).
      const auto allowed =
          times_.failures > 0 ? times_.last_failure + RenewalBackoff(times_.failures) : now;
      next = next ? std::min(*next, allowed) : allowed;
    }
    const bool due = next && *next <= now;
    if (!due) {
      // Wait on the steady clock for the wall clock's distance, at most a minute: a suspended
      // machine or a clock step is noticed within a minute.
      Clock::duration wait = std::chrono::minutes(1);
      if (next) wait = std::min(wait, *next - now);
      clock_->WaitFor(&cv_, &mu_, wait);
      continue;
    }
    l.Unlock();
    Status s = RenewNow();
    (void)s;  // counted and kept for DescribeJson by RenewNow
    l.Lock();
  }
}

// ---- The resolution ---------------------------------------------------------------------------

Result<std::shared_ptr<RenewingCredentials>> ResolveAwsCredentials(
    const AwsCredentialOptions& options, AwsCredentialDeps deps) {
  if (options.no_sign) return std::shared_ptr<RenewingCredentials>();
  auto in = std::make_shared<ChainInputs>();
  in->options = options;
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
  in->deps = std::move(deps);
  in->profile = options.profile.empty() ? in->Env("AWS_PROFILE") : options.profile;
  in->profile_named = !in->profile.empty();
  if (in->profile.empty()) in->profile = "default";
  const std::string home = in->deps.home();
  auto file = [&](const std::string& option, const char* var, const char* rel) {
    if (!option.empty()) return option;
    std::string v = in->Env(var);
    if (!v.empty()) return v;
    return home.empty() ? std::string() : home + "/" + rel;
  };
  in->credentials_path =
      file(options.credentials_file, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  in->config_path = file(options.config_file, "AWS_CONFIG_FILE", ".aws/config");

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
