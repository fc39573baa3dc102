// The protocols of remote/object_client.h that speak plain HTTP and S3. Azure's is
// remote/azure.h.
#pragma once

#include <memory>
#include <string>

#include "remote/object_client.h"
#include "remote/s3_config.h"
#include "remote/url.h"

namespace pcrfs {

// A folder on a web server (nginx, a CDN): object URLs are the root URL joined with the key,
// each with the root's query (a signed URL's token); no listing.
class HttpProtocol final : public ObjectProtocol {
 public:
  explicit HttpProtocol(Url root) : root_(std::move(root)) {}
  std::string ObjectUrl(std::string_view key) const override;
  std::string Name(std::string_view key) const override;
  Result<std::string> ListUrl(std::string_view, uint32_t) const override;
  Result<ObjectListing> ParseListing(std::string_view body) const override;
  // nginx, Apache and most static servers answer "Range: bytes=a-b,c-d"; one that does not is
  // found out by its first answer (ObjectClient::GetRanges).
  bool MultiRange() const override { return true; }

 private:
  Url root_;
};

// Keys under s3://BUCKET/PREFIX (or gs://): S3Config::ObjectUrl, ListObjectsV2 pages.
class S3Protocol final : public ObjectProtocol {
 public:
  explicit S3Protocol(S3Config config) : config_(std::move(config)) {}
  std::string ObjectUrl(std::string_view key) const override;
  std::string Name(std::string_view key) const override;
  Result<std::string> ListUrl(std::string_view continuation_token,
                              uint32_t max_keys) const override;
  // A ListBucketResult: Contents (Key, Size, LastModified) below the prefix, keys made
  // relative to it; NextContinuationToken when IsTruncated. Corruption for anything else, a
  // key outside the prefix, or a truncated page without a new token.
  Result<ObjectListing> ParseListing(std::string_view body) const override;
  const S3Config& config() const { return config_; }

 private:
  S3Config config_;
};

}  // namespace pcrfs
