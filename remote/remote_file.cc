#include "remote/remote_file.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "remote/url.h"

namespace pcrfs {

RemoteFile::RemoteFile(std::shared_ptr<HttpClient> client, std::string url, uint64_t size)
    : client_(std::move(client)), url_(std::move(url)), name_(RedactUrl(url_)), size_(size) {}

Status RemoteFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (n == 0) return Status::OK();
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(name_ + ": read of " + std::to_string(n) + " bytes at " +
                              std::to_string(offset) + " is past the end (size " +
                              std::to_string(size_) + ", truncated)");
  }
  HttpRequest req;
  req.url = url_;
  req.range = ByteRange{offset, n};
  req.dst = dst;
  req.dst_size = n;
  auto r = client_->FetchBlocking(std::move(req));
  if (!r.has_value()) return r.error();
  uint64_t total = r->content_range ? r->content_range->total : r->body_bytes;
  if (total != size_) {
    return Status::Corruption(name_ + ": the object changed (size " + std::to_string(total) +
                              ", index says " + std::to_string(size_) + "): remount");
  }
  if (r->body_bytes != n) {
    return Status::Corruption(name_ + ": got " + std::to_string(r->body_bytes) + " of " +
                              std::to_string(n) + " bytes at " + std::to_string(offset));
  }
  return Status::OK();
}

Result<DownloadResult> Download(HttpClient& client, const std::string& url, const std::string& dest,
                                const std::string& known_etag) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = dest + ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  HttpRequest req;
  req.url = url;
  req.if_none_match = known_etag;
  req.body_file = tmp;
  auto r = client.FetchBlocking(std::move(req));
  DownloadResult out;
  if (!r.has_value()) {
    ::unlink(tmp.c_str());
    return Err(r.error());
  }
  if (r->status == 304) {
    ::unlink(tmp.c_str());
    out.etag = known_etag;
    return out;
  }
  if (std::rename(tmp.c_str(), dest.c_str()) != 0) {
    Status s = Status::FromErrno("rename " + tmp + " to " + dest, errno);
    ::unlink(tmp.c_str());
    return Err(s);
  }
  out.modified = true;
  out.etag = r->etag;
  out.size = r->body_bytes;
  return out;
}

}  // namespace pcrfs
