// Writing objects under a root (s3://BUCKET/PREFIX): what `pcr build` and `pcr merge` need to
// write a store or a part straight into object storage (docs/sharding.md, "Object storage").
// Reading and listing stay with the ObjectClient of the same location (object_client.h).
//
// Over the HTTP client of the read path (http_client.h): the same retries, deadline, signer
// (SigV4 over the AWS credential chain) and one-line errors naming the redacted URL. A write
// is idempotent (a PUT of the same bytes, a copy, a part of an upload), so retrying one is safe;
// CreateMultipartUpload retried after a lost answer leaves an upload nobody completes (a bucket
// lifecycle rule "abort incomplete multipart uploads" removes those).
//
// Threads: every call blocks and may be made from any thread but the HTTP client's own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/azure.h"
#include "remote/http_client.h"
#include "remote/s3_config.h"

namespace pcrfs {

class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;

  // Writes `bytes` as object `key` (replacing it).
  virtual Status Put(std::string_view key, std::string bytes) = 0;
  // Uploads local file `path` as object `key`: one PUT up to part_size(), else a multipart
  // upload of part_size() parts read one at a time (memory: one part), aborted on failure.
  // IOError naming the file when it cannot be read.
  virtual Status PutFile(std::string_view key, const std::string& path) = 0;
  // Copies object `src_key` of `from` (its root may differ: another prefix or bucket of the
  // same service), `size` bytes, to `key` on the server: no byte passes through this machine.
  virtual Status Copy(const ObjectWriter& from, std::string_view src_key, uint64_t size,
                      std::string_view key) = 0;
  // Removes object `key`; a missing one is no error.
  virtual Status Delete(std::string_view key) = 0;
  // What messages call object `key` (the redacted URL).
  virtual std::string Name(std::string_view key) const = 0;
  virtual uint64_t part_size() const = 0;
};

// S3 (and S3-compatible servers): PutObject; CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload, AbortMultipartUpload; CopyObject up to kMaxCopyObject bytes, and
// above it a multipart upload of UploadPartCopy parts; DeleteObject.
class S3ObjectWriter final : public ObjectWriter {
 public:
  // S3's limits: parts of 5 MiB at least (but the last), 10000 parts, 5 GiB per CopyObject and
  // per part.
  static constexpr uint64_t kMinPartSize = uint64_t{5} << 20;
  static constexpr uint64_t kDefaultPartSize = uint64_t{8} << 20;
  static constexpr uint32_t kMaxParts = 10000;
  static constexpr uint64_t kMaxCopyObject = uint64_t{5} << 30;
  static constexpr uint64_t kCopyPartSize = uint64_t{1} << 30;

  // max_copy_object: the largest object Copy sends as one CopyObject (clamped to
  // [kMinPartSize, kMaxCopyObject]); a larger one goes as UploadPartCopy parts of
  // min(max_copy_object, kCopyPartSize). Lowered only by tests (PCRFS_TEST_S3_COPY_LIMIT, read
  // by builder/object_target.cc), so that a test server sees a multipart copy of small records.
  S3ObjectWriter(std::shared_ptr<HttpClient> http, S3Config config,
                 uint64_t part_size = kDefaultPartSize, uint64_t max_copy_object = kMaxCopyObject);

  Status Put(std::string_view key, std::string bytes) override;
  Status PutFile(std::string_view key, const std::string& path) override;
  // `from` must be an S3ObjectWriter too (InvalidArgument otherwise).
  Status Copy(const ObjectWriter& from, std::string_view src_key, uint64_t size,
              std::string_view key) override;
  Status Delete(std::string_view key) override;
  std::string Name(std::string_view key) const override;
  uint64_t part_size() const override { return part_size_; }

  // x-amz-copy-source of object `key`: "/BUCKET/KEY", the key URI-encoded ('/' kept).
  std::string CopySource(std::string_view key) const;
  const S3Config& config() const { return config_; }

 private:
  // A multipart upload of `size` bytes to `key` whose part i is sent by put_part(i, range,
  // upload_id) (returning its ETag); aborted on any failure.
  Status Multipart(
      std::string_view key, uint64_t size, uint64_t part_size,
      const std::function<Result<std::string>(uint32_t, ByteRange, const std::string&)>& put_part);
  Result<HttpResponse> Send(HttpRequest req) const;

  std::shared_ptr<HttpClient> http_;
  S3Config config_;
  uint64_t part_size_;
  uint64_t max_copy_object_;
};

// Azure Blob Storage: Put Blob; above part_size, Put Block of part_size blocks (read one at a
// time) and Put Block List; Copy Blob (the source in the same account, authorized by the
// destination's Shared Key; a "pending" copy is polled with HEAD until it is done); Delete
// Blob. A SAS-authorized copy is not supported (the source URL would need its own SAS).
class AzureObjectWriter final : public ObjectWriter {
 public:
  static constexpr uint64_t kDefaultPartSize = uint64_t{8} << 20;
  static constexpr uint32_t kMaxBlocks = 50000;

  AzureObjectWriter(std::shared_ptr<HttpClient> http, AzureConfig config,
                    uint64_t part_size = kDefaultPartSize);

  Status Put(std::string_view key, std::string bytes) override;
  Status PutFile(std::string_view key, const std::string& path) override;
  // `from` must be an AzureObjectWriter of the same account (InvalidArgument otherwise).
  Status Copy(const ObjectWriter& from, std::string_view src_key, uint64_t size,
              std::string_view key) override;
  Status Delete(std::string_view key) override;
  std::string Name(std::string_view key) const override;
  uint64_t part_size() const override { return part_size_; }
  const AzureConfig& config() const { return config_; }

 private:
  Result<HttpResponse> Send(HttpRequest req) const;

  std::shared_ptr<HttpClient> http_;
  AzureConfig config_;
  AzureProtocol protocol_;
  uint64_t part_size_;
};

// The block id of block n (1-based): the base64 of its 6 decimal digits, the same length for
// every block of a blob, as Azure requires.
std::string AzureBlockId(uint32_t n);
// The body of a Put Block List request committing `ids` in order.
std::string AzureBlockListBody(const std::vector<std::string>& ids);

// The parts of a multipart upload of `size` bytes: part_size each (the last one shorter),
// grown when part_size would make more than max_parts. Empty for size 0.
std::vector<ByteRange> PlanParts(uint64_t size, uint64_t part_size,
                                 uint32_t max_parts = S3ObjectWriter::kMaxParts);

// The UploadId of an InitiateMultipartUploadResult; Corruption naming `name` otherwise.
Result<std::string> ParseUploadId(const std::string& name, std::string_view body);
// The body of a CompleteMultipartUpload request for parts 1..etags.size().
std::string CompleteMultipartBody(const std::vector<std::string>& etags);
// CopyObject, UploadPartCopy and CompleteMultipartUpload may answer 200 with an <Error> body
// (the failure found after the answer began): IOError "NAME: CODE (after 200)", else the
// ETag of the <root> element's answer (CopyObjectResult, CopyPartResult,
// CompleteMultipartUploadResult); Corruption for anything else.
Result<std::string> CheckS3WriteAnswer(const std::string& name, std::string_view body,
                                       std::string_view root);

}  // namespace pcrfs
