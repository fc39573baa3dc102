// The credential chain's metadata sources: the container endpoint (ECS, EKS Pod Identity) and
// EC2 instance metadata (IMDSv2, IMDSv1 where allowed), as botocore reaches them.
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "remote/aws_chain.h"
#include "remote/url.h"

namespace pcrfs::aws_chain {
namespace {

constexpr std::chrono::milliseconds kMetadataTimeout{2000};
constexpr std::chrono::milliseconds kContainerTimeout{5000};

bool AllowedContainerHost(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (IsLoopbackHost(host)) return true;
  in_addr v4;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    const uint32_t a = ntohl(v4.s_addr);
    return a == 0xA9FEAA02 /* 169.254.170.2 */ || a == 0xA9FEAA17 /* 169.254.170.23 */;
  }
  in6_addr v6, eks;
  ::inet_pton(AF_INET6, "fd00:ec2::23", &eks);
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && std::memcmp(&v6, &eks, sizeof(v6)) == 0;
}

// "true" in any case, as botocore reads these variables.
bool EqualsTrue(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "true";
}

}  // namespace

// Container credentials: Step 5, and credential_source EcsContainer.
Result<FetchedCredentials> Container(const ChainInputs& in) {
  const std::string relative = in.Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = in.Env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  SimpleHttpRequest req;
  req.timeout = kContainerTimeout;
  req.direct = true;
  if (!relative.empty()) {
    req.url = "http://169.254.170.2" + (relative[0] == '/' ? relative : "/" + relative);
  } else if (!full.empty()) {
    auto url = ParseUrl(full);
    if (!url || url->is_s3()) {
      return Err(Status::InvalidArgument("AWS_CONTAINER_CREDENTIALS_FULL_URI " + RedactUrl(full) +
                                         " is not an http(s) URL"));
    }
    // botocore: plain http only to a loopback IP literal (127.0.0.0/8, ::1), localhost or the
    // ECS / EKS Pod Identity agents; a name that merely starts with "127." is no address.
    if (url->scheme == Url::Scheme::kHttp && !AllowedContainerHost(url->host)) {
      return Err(Status::InvalidArgument("AWS_CONTAINER_CREDENTIALS_FULL_URI " + RedactUrl(full) +
                                         ": plain http is allowed only to a loopback address "
                                         "or 169.254.170.2/23"));
    }
    req.url = full;
  } else {
    return Err(Status::NotFound(
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and AWS_CONTAINER_CREDENTIALS_FULL_URI unset"));
  }
  std::string token;
  const std::string token_file = in.Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (!token_file.empty()) {
    auto t = ReadTokenFile(token_file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (!t) return Err(t.error());
    token = std::move(*t);
  } else {
    token = in.Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  }
  if (!token.empty()) {
    if (token.find_first_of("\r\n") != std::string::npos) {
      return Err(Status::InvalidArgument("container authorization token holds a line break"));
    }
    req.headers.emplace_back("Authorization", token);
  }
  req.headers.emplace_back("Accept", "application/json");
  const std::string shown = RedactUrl(req.url.substr(0, req.url.find('?')));
  auto resp = in.deps.http(req);
  if (!resp) return Err(Status::IOError("container credentials: " + resp.error().message()));
  if (resp->status != 200) {
    return Err(Status::IOError("container credentials: " + shown + " answered HTTP " +
                               std::to_string(resp->status)));
  }
  auto f = ParseMetadataCredentials(resp->body);
  if (!f)
    return Err(Status::Corruption("container credentials " + shown + ": " + f.error().message()));
  f->source = "container";
  return f;
}

// EC2 instance metadata: Step 6, and credential_source Ec2InstanceMetadata. NotFound when there
// is no metadata service or no role (the chain's "nothing here").
Result<FetchedCredentials> InstanceMetadata(const ChainInputs& in) {
  if (EqualsTrue(in.Env("AWS_EC2_METADATA_DISABLED"))) {
    return Err(Status::NotFound("AWS_EC2_METADATA_DISABLED=true"));
  }
  std::string endpoint = in.Env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (endpoint.empty()) endpoint = "http://169.254.169.254";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const std::string shown = RedactUrl(endpoint);

  SimpleHttpRequest put;
  put.method = "PUT";
  put.url = endpoint + "/latest/api/token";
  put.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
  put.timeout = kMetadataTimeout;
  put.direct = true;
  auto token = in.deps.http(put);
  if (!token) return Err(Status::NotFound(token.error().message()));
  HeaderList headers;
  if (token->status == 200) {
    if (!ValidCredentialField(token->body)) {
      return Err(Status::Corruption(shown + ": the IMDSv2 token is not printable"));
    }
    headers.emplace_back("X-aws-ec2-metadata-token", token->body);
  } else if (token->status != 403 && token->status != 404 && token->status != 405) {
    // botocore falls back to IMDSv1 on these three only.
    return Err(
        Status::NotFound(shown + ": token PUT answered HTTP " + std::to_string(token->status)));
  } else if (EqualsTrue(in.Env("AWS_EC2_METADATA_V1_DISABLED"))) {
    return Err(Status::NotFound(shown + ": token PUT answered HTTP " +
                                std::to_string(token->status) +
                                " and AWS_EC2_METADATA_V1_DISABLED=true refuses IMDSv1"));
  }
  auto get = [&](const std::string& path) {
    SimpleHttpRequest r;
    r.url = endpoint + path;
    r.headers = headers;
    r.timeout = kMetadataTimeout;
    r.direct = true;
    return in.deps.http(r);
  };
  const std::string base = "/latest/meta-data/iam/security-credentials/";
  auto roles = get(base);
  if (!roles) return Err(Status::NotFound(roles.error().message()));
  if (roles->status == 404) return Err(Status::NotFound(shown + ": no IAM role attached"));
  if (roles->status != 200) {
    return Err(
        Status::NotFound(shown + ": role list answered HTTP " + std::to_string(roles->status)));
  }
  std::string role = roles->body.substr(0, roles->body.find('\n'));
  while (!role.empty() && (role.back() == '\r' || role.back() == ' ')) role.pop_back();
  if (role.empty()) return Err(Status::NotFound(shown + ": no IAM role attached"));
  if (role.size() > 128 || role.find_first_of("/?#% ") != std::string::npos) {
    return Err(Status::Corruption(shown + ": the role name is not a role name"));
  }
  auto creds = get(base + role);
  if (!creds)
    return Err(Status::IOError("instance metadata role " + role + ": " + creds.error().message()));
  if (creds->status != 200) {
    return Err(Status::IOError(shown + ": credentials of role " + role + " answered HTTP " +
                               std::to_string(creds->status)));
  }
  auto f = ParseMetadataCredentials(creds->body);
  if (!f) return Err(Status::Corruption(shown + " role " + role + ": " + f.error().message()));
  f->source = "instance metadata (role " + role + ")";
  return f;
}

}  // namespace pcrfs::aws_chain
