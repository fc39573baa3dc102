// Record files and metadata over HTTP(S): RemoteFile reads an object by ranged GETs, Download
// fetches a whole object (manifest.json, index.lmdb) into a local file, conditionally.
#pragma once

#include <memory>
#include <string>

#include "common/random_access_file.h"
#include "remote/http_client.h"

namespace pcrfs {

// A RandomAccessFile over one object whose size is known in advance (the store's index knows
// every record's size, so opening one costs no request). Read() is one ranged GET into the
// caller's buffer through the shared client. Thread-safe; the client must outlive the file (it
// is shared).
class RemoteFile final : public RandomAccessFile {
 public:
  // `url`: the object's http(s) URL (S3Config::ObjectUrl for s3://). `size`: what the index says.
  RemoteFile(std::shared_ptr<HttpClient> client, std::string url, uint64_t size);

  // Reads exactly n bytes at offset. Errors:
  //  - Corruption "URL: read of N bytes at O is past the end (size S)" (no request is sent);
  //  - Corruption "URL: the object changed (size X, index says Y): remount" when the server's
  //    Content-Range total differs from the expected size (never the bytes);
  //  - the client's errors: NotFound (404), IOError (403, and after the deadline or the last
  //    retry: EIO upstream). On an error dst's contents are undefined.
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return size_; }
  // The redacted URL.
  const std::string& name() const override { return name_; }

 private:
  std::shared_ptr<HttpClient> client_;
  std::string url_;
  std::string name_;
  uint64_t size_;
};

struct DownloadResult {
  bool modified = false;  // false: the server said 304 (the known ETag still holds); dest untouched
  std::string etag;       // the object's ETag (the known one when not modified)
  uint64_t size = 0;      // bytes written to dest (0 when not modified)
};

// GETs `url` into `dest`: the body goes to a temporary file beside dest ("dest.tmp-PID-N"),
// which is renamed over dest only when complete, so dest is never half-written. With a
// non-empty known_etag the request is conditional (If-None-Match): a 304 leaves dest as it is.
// Errors: the client's (NotFound for 404, ...), and IOError for the local file, naming it. The
// temporary file is removed on error. Thread-safe for different dest paths.
Result<DownloadResult> Download(HttpClient& client, const std::string& url, const std::string& dest,
                                const std::string& known_etag = "");

}  // namespace pcrfs
