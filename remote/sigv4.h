// AWS Signature Version 4 for S3 requests (GET, HEAD, and GET with a query such as
// ListObjectsV2), on OpenSSL's SHA-256 and HMAC. The signer is pcrfs's own, not curl's
// CURLOPT_AWS_SIGV4: docs/design.md says why.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "remote/credentials.h"
#include "remote/request_signer.h"

namespace pcrfs {

// hex(SHA-256(data)), lower case.
std::string Sha256Hex(std::string_view data);
// HMAC-SHA-256(key, data), 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

// The SHA-256 of an empty body: the x-amz-content-sha256 of a GET or HEAD that signs its payload.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

// One request to sign.
struct SigV4Request {
  std::string method = "GET";
  // The path exactly as sent, already URI-encoded once (UriEncode(key, keep_slash=true)).
  std::string path = "/";
  // Query parameters, not encoded; the signer encodes and sorts them. A key without a value
  // ("?lifecycle") has an empty value.
  HeaderList query;
  // Headers to sign, names in any case, values as sent. Must contain "host". x-amz-date,
  // x-amz-content-sha256 and x-amz-security-token are added by Sign().
  HeaderList headers;
  // kUnsignedPayload or the hex SHA-256 of the body (kEmptyPayloadSha256 for none).
  std::string payload_hash = std::string(kUnsignedPayload);
};

// Signs requests for one credential, region and service. Thread-safe: Sign() may be called from
// any thread; the daily signing key is derived once per UTC date and cached under a mutex.
class SigV4Signer {
 public:
  SigV4Signer(Credentials credentials, std::string region, std::string service = "s3");

  // The headers to add to the request: x-amz-date, x-amz-content-sha256,
  // x-amz-security-token (with a session token) and Authorization, in that order.
  HeaderList Sign(const SigV4Request& request, std::chrono::system_clock::time_point now) const;

  const Credentials& credentials() const { return credentials_; }
  const std::string& region() const { return region_; }

  // The steps, public for tests against AWS's published examples. `amz_date` is
  // "YYYYMMDDTHHMMSSZ"; headers must already hold every signed header (x-amz-* included).
  static std::string CanonicalQuery(const HeaderList& query);
  static std::string CanonicalRequest(const SigV4Request& request, std::string* signed_headers);
  std::string StringToSign(std::string_view amz_date, std::string_view canonical_request) const;
  std::string Signature(std::string_view amz_date, std::string_view string_to_sign) const;

 private:
  std::string SigningKey(std::string_view date) const;

  Credentials credentials_;
  std::string region_;
  std::string service_;
  mutable Mutex mu_;
  mutable std::string key_date_ GUARDED_BY(mu_);
  mutable std::string key_ GUARDED_BY(mu_);
};

class AwsCredentialSource;

// The RequestSigner of S3 (and any AWS service): SigV4 with the source's current credentials,
// re-derived when they change; a refusal asks the source to renew. Without credentials from
// the source (none yet), Sign fails: "no AWS credentials (SOURCE)".
class SigV4RequestSigner final : public RequestSigner {
 public:
  SigV4RequestSigner(std::shared_ptr<const AwsCredentialSource> source, std::string region,
                     std::string service = "s3");
  Result<SignedParts> Sign(const SignableRequest& request,
                           std::chrono::system_clock::time_point now) const override;
  bool OnRefused(uint64_t generation, long status, std::string_view code) const override;
  void Reload() const override;
  std::string DescribeJson() const override;
  const std::string& region() const { return region_; }

 private:
  std::shared_ptr<const AwsCredentialSource> source_;
  std::string region_;
  std::string service_;
  mutable Mutex mu_;
  // The signer of the current generation (it caches the day's signing key).
  mutable uint64_t generation_ GUARDED_BY(mu_) = 0;
  mutable std::shared_ptr<const SigV4Signer> signer_ GUARDED_BY(mu_);
};

// "YYYYMMDDTHHMMSSZ" in UTC.
std::string AmzDate(std::chrono::system_clock::time_point t);

}  // namespace pcrfs
