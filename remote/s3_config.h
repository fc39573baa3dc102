// Where an s3:// store lives and how to sign for it: region, endpoint, addressing style and
// credentials, resolved from options, the environment and the AWS CLI's files the way the AWS
// CLI and SDKs resolve them (the subset pcrfs needs).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "remote/aws_config_files.h"
#include "remote/sigv4.h"
#include "remote/simple_http.h"
#include "remote/url.h"

namespace pcrfs {

struct S3Options {
  std::string region;    // -o region; empty: resolved
  std::string endpoint;  // -o endpoint ("http://127.0.0.1:9000"); empty: resolved
  std::string profile;   // -o profile; empty: AWS_PROFILE, else "default"
  // -o credentials_file, -o config_file: the AWS CLI's files when HOME is not set (mount(8)
  // starts helpers without it) or not the place; empty: AWS_SHARED_CREDENTIALS_FILE /
  // AWS_CONFIG_FILE, else ~/.aws/credentials and ~/.aws/config.
  std::string credentials_file;
  std::string config_file;
  enum class Addressing { kAuto, kPath, kVirtualHost };
  // kAuto: path style for a custom endpoint (MinIO, RGW, test servers), virtual-host style for
  // AWS's own endpoint.
  Addressing addressing = Addressing::kAuto;
  bool no_sign = false;  // -o no_sign: anonymous, unsigned requests
};

class AwsCredentialSource;
class RenewingCredentials;

struct S3Config {
  // gs://: Google Cloud Storage's S3-compatible XML API (default endpoint
  // https://storage.googleapis.com, region "auto", HMAC keys as AWS keys).
  bool gcs = false;
  std::string bucket;
  std::string prefix;  // key prefix of the store, no leading or trailing '/'
  std::string region;
  Url endpoint;  // http(s)://host[:port][/path] of the S3 service
  bool path_style = true;
  // The current credentials (aws_credentials->Current()), empty for anonymous access: a copy
  // for the moment (they may expire: sign with aws_credentials). Not a field: the secret is
  // held once, by aws_credentials, not in every copy of the configuration.
  Credentials credentials() const;
  // The credential chain's result (remote/aws_credentials.h), which renews temporary
  // credentials once its StartRenewal() is called; nullptr when anonymous.
  std::shared_ptr<RenewingCredentials> aws_credentials;
  std::string region_source;  // "option", "AWS_REGION", "~/.aws/config", "default", ...
  // The snapshot's source ("environment", "profile train (credential_process)", ...), or
  // "none (no_sign)", "none (anonymous: no AWS credentials: ...)".
  std::string credentials_source;
  // Anonymous because nothing was found: "no AWS credentials: environment (...), ..." naming
  // every source tried (for the message when the bucket refuses anonymous requests).
  std::string no_credentials;

  // The http(s) URL of the object `name` under the store's prefix: the key URI-encoded once
  // (SigV4 rules, '/' kept), path style ENDPOINT/BUCKET/KEY or virtual host BUCKET.HOST/KEY.
  std::string ObjectUrl(std::string_view name) const;
  // The URL of a ListObjectsV2 request for the keys under "PREFIX/" (list-type=2, prefix, and
  // continuation-token when given), the query encoded with SigV4's rules. pcrfs itself never
  // lists a store; this is for building a store from a bucket.
  std::string ListUrl(std::string_view continuation_token = "") const;
  // The signer for these credentials and region; nullptr when anonymous.
  std::shared_ptr<SigV4Signer> MakeSigner() const;
};

// Resolves the configuration of `store` (an s3:// URL) in this order:
//  region:      options.region, AWS_REGION, AWS_DEFAULT_REGION, `region` of the profile in
//               AWS_CONFIG_FILE or ~/.aws/config ("[default]", "[profile NAME]"), else us-east-1;
//  endpoint:    options.endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
//               https://s3.REGION.amazonaws.com;
//  credentials: none with options.no_sign; else the AWS credential chain
//               (ResolveAwsCredentials in remote/aws_credentials.h: environment, profile,
//               web identity, container, instance metadata) for the resolved region; when the
//               chain finds nothing anywhere (NotFound), anonymous, as before the chain.
// Errors (one line naming the option, variable or file): not an s3 URL, a bad endpoint URL,
// the credential chain's errors (an access key without a secret, a profile named explicitly
// but absent, a failing credential_process or STS call, ...), an unreadable file. A file that
// does not exist is not an error. Never reveals a secret. Blocks while the chain runs (up to
// about 2 s probing instance metadata on a machine without it).
// `http` replaces the chain's HTTP calls (tests); nullptr: SimpleHttp.
Result<S3Config> ResolveS3Config(
    const Url& store, const S3Options& options, const EnvLookup& env = nullptr,
    std::function<Result<SimpleHttpResponse>(const SimpleHttpRequest&)> http = nullptr);

}  // namespace pcrfs
