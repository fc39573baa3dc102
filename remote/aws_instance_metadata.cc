#include "remote/aws_instance_metadata.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "remote/url.h"

namespace pcrfs::aws_chain {
namespace {

constexpr std::chrono::milliseconds kMetadataTimeout{2000};

// "true" in any case, as botocore reads these variables.
bool EqualsTrue(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "true";
}

}  // namespace

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
