#include "remote/aws_container_credentials.h"

#include <arpa/inet.h>

#include <chrono>
#include <cstring>

#include "remote/url.h"

namespace pcrfs::aws_chain {
namespace {

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

}  // namespace

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

}  // namespace pcrfs::aws_chain
