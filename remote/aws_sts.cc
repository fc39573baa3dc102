#include "remote/aws_sts.h"

#include <chrono>

#include "remote/url.h"

namespace pcrfs::aws_chain {
namespace {

constexpr std::chrono::milliseconds kStsTimeout{10000};

std::string FormUrlEncode(const HeaderList& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += UriEncode(k, false) + "=" + UriEncode(v, false);
  }
  return out;
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

}  // namespace

std::string SessionName(const ChainInputs& in, const std::string& configured) {
  if (!configured.empty()) return configured;
  return "pcrfs-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                       in.deps.now().time_since_epoch())
                                       .count());
}

Result<FetchedCredentials> CallSts(const ChainInputs& in, const std::string& region,
                                   const HeaderList& params, const Credentials* signer,
                                   const std::string& role_arn, std::string source) {
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

Result<FetchedCredentials> WebIdentity(const ChainInputs& in, const std::string& region,
                                       const std::string& token_file, const std::string& role_arn,
                                       const std::string& session_name, std::string source) {
  auto token = ReadTokenFile(token_file, "web identity token file");
  if (!token) return Err(token.error());
  HeaderList params = {{"Action", "AssumeRoleWithWebIdentity"},
                       {"Version", "2011-06-15"},
                       {"RoleArn", role_arn},
                       {"RoleSessionName", SessionName(in, session_name)},
                       {"WebIdentityToken", *token}};
  return CallSts(in, region, params, nullptr, role_arn, std::move(source));
}

}  // namespace pcrfs::aws_chain
