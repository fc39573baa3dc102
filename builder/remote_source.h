// Remote sources of a build (docs/design.md, "Remote sources"), read through the remote stores'
// object client (remote/object_client.h), resolved as a store's location is:
//  - BucketSource: the objects under s3://BUCKET/PREFIX, listed with ListObjectsV2 (continuation
//    tokens followed) into the SourceTree a folder holding the same files would give, each
//    object read by ranged GETs of its listed size;
//  - RemoteArchiveOpener: an archive at an http(s):// or s3:// URL as a stream of sequential
//    ranged GETs, for ArchiveSource.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "builder/archive_source.h"
#include "builder/source_tree.h"
#include "common/status.h"
#include "location/store_location.h"
#include "remote/object_client.h"

namespace pcrfs::tools {

// What a URL names as a source: an archive (an http(s) URL, or an s3 URL whose last path
// component ends in .tar, .tar.gz, .tgz or .zip, any case), else (s3) the objects under a prefix.
bool IsRemoteArchiveUrl(const std::string& url);

// The object client of a source URL (rooted at it: keys are relative to the bucket prefix; ""
// is the URL's own object), resolved from the same options and environment as a remote
// store's (location/store_location.h).
struct RemoteAccess {
  Url url;
  std::string name;        // the URL without credentials, query or fragment
  bool is_bucket = false;  // s3:// or gs://: the client can list
  std::shared_ptr<ObjectClient> client;

  // InvalidArgument for a bad URL or configuration (naming the option or variable, never a
  // secret); the client's errors otherwise.
  static Result<RemoteAccess> Create(const std::string& url, const RemoteOptions& options);
};

// Reads [offset, offset + dst.size()) of object `key` (one ranged GET; nothing for an empty
// dst). Errors name the object: the client's (404, 403 with the S3 code, retries exhausted),
// and Corruption when the object's size is no longer `size` ("the object changed (size X,
// listed Y) since it was listed") or the body is short.
Status ReadObjectRange(ObjectClient& client, const std::string& key, uint64_t size, uint64_t offset,
                       std::span<uint8_t> dst);

class BucketSource {
 public:
  // Keys listed per ListObjectsV2 request: S3's maximum, 1000; PCRFS_S3_LIST_PAGE (1..1000)
  // sets fewer, so tests meet continuation tokens with a few objects.
  static constexpr uint32_t kListPage = 1000;

  // Lists every object under the prefix. A key ending in '/' (a folder marker, as consoles make
  // for empty folders) is a folder, even if nothing is below it; keys that cannot be a path in a
  // tree (empty, "." or ".." components, a name that is both a file and a folder, a name longer
  // than 255 bytes) become SourceProblems. Files get their listed
  // size and LastModified as mtime, mode 0644; folders 0755 and the newest mtime below them (or
  // of their marker).
  // Errors: the first listing request's (403, 404 NoSuchBucket, ...), InvalidArgument for an
  // empty prefix listing ("no objects under URL"), Corruption for an unreadable listing.
  static Result<std::unique_ptr<BucketSource>> Open(RemoteAccess access,
                                                    const ListingProgress& progress = {});

  // The listing; the caller may take it and pass it back to NameOf and Read.
  SourceTree& tree() { return tree_; }
  // The redacted s3:// URL of file node `node` of `tree`.
  std::string NameOf(const SourceTree& tree, uint32_t node) const;
  // Reads [offset, offset + dst.size()) of file node `node` of `tree` (its listed size);
  // see ReadObjectRange. Thread-safe.
  Status Read(const SourceTree& tree, uint32_t node, uint64_t offset, std::span<uint8_t> dst) const;

 private:
  explicit BucketSource(RemoteAccess access) : access_(std::move(access)) {}

  RemoteAccess access_;
  SourceTree tree_;
};

// Opens streams of the archive at `access`'s URL: sequential ranged GETs of `chunk` bytes (the
// first of each stream 256 KiB, so a probe of the format costs little), one chunk in memory;
// Skip moves past bytes without fetching them when they lie beyond the chunk.
ArchiveStreamOpener RemoteArchiveOpener(std::shared_ptr<const RemoteAccess> access,
                                        uint64_t chunk = uint64_t{8} << 20);

}  // namespace pcrfs::tools
