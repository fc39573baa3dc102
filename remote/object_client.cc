#include "remote/object_client.h"

#include <future>
#include <utility>

namespace pcrfs {
namespace {

// An ObjectClient over the curl client: the protocol makes URLs and reads listings.
class HttpObjectClient final : public ObjectClient {
 public:
  HttpObjectClient(std::shared_ptr<HttpClient> http, std::unique_ptr<ObjectProtocol> protocol)
      : http_(std::move(http)), protocol_(std::move(protocol)) {}

  Result<ObjectListing> List(std::string_view continuation_token, uint32_t max_keys) override {
    auto url = protocol_->ListUrl(continuation_token, max_keys);
    if (!url) return Err(url.error());
    HttpRequest req;
    req.url = std::move(*url);
    req.max_body_bytes = kMaxListingBytes;  // a page of 1000 keys is ~0.5 MB
    auto r = http_->FetchBlocking(std::move(req));
    if (!r) return Err(r.error());
    return protocol_->ParseListing(r->body);
  }

  std::string Name(std::string_view key) const override { return protocol_->Name(key); }
  HttpStats stats() const override { return http_->stats(); }
  std::string DescribeAuthJson() const override {
    const auto& o = http_->options();
    if (o.signer != nullptr) return o.signer->DescribeJson();
    if (!o.headers_file.empty()) return R"({"source":"header file"})";
    return R"({"source":"none"})";
  }
  void Reload() override { http_->Reload(); }

 protected:
  void DoGet(ObjectGet request, GetCallback done) override {
    HttpRequest req;
    req.url = protocol_->ObjectUrl(request.key);
    req.range = request.range;
    req.dst = request.dst;
    req.dst_size = request.dst_size;
    req.body_file = request.body_file;
    req.max_body_bytes = request.max_body_bytes;
    req.if_none_match = request.if_none_match;
    req.if_match = request.if_match;
    req.background = request.background;
    if (request.on_progress) {
      // Bytes of another version of the object are never handed out.
      req.on_progress = [progress = std::move(request.on_progress),
                         expected = request.expected_size](uint64_t written, uint64_t total) {
        if (!expected || total == *expected) progress(written);
      };
    }
    http_->Fetch(std::move(req), [done = std::move(done)](Result<HttpResponse> r) {
      if (!r) {
        done(Err(r.error()));
        return;
      }
      ObjectData d;
      d.not_modified = r->status == 304;
      d.etag = std::move(r->etag);
      d.size = r->content_range ? r->content_range->total : r->body_bytes;
      d.body_bytes = r->body_bytes;
      d.body = std::move(r->body);
      d.attempts = r->attempts;
      done(std::move(d));
    });
  }

 private:
  std::shared_ptr<HttpClient> http_;
  std::unique_ptr<ObjectProtocol> protocol_;
};

}  // namespace

Status ObjectClient::CheckGet(const std::string& name, const ObjectGet& request,
                              const ObjectData& data) {
  if (data.not_modified) return Status::OK();
  if (request.expected_size && data.size != *request.expected_size) {
    return Status::Corruption(name + ": the object changed (size " + std::to_string(data.size) +
                              ", " + request.size_label + " " +
                              std::to_string(*request.expected_size) + ")" +
                              request.changed_advice);
  }
  if (request.range) {
    const uint64_t offset = request.range->offset;
    const uint64_t want = std::min(request.range->length, data.size - std::min(data.size, offset));
    if (data.body_bytes != want) {
      return Status::Corruption(name + ": got " + std::to_string(data.body_bytes) + " of " +
                                std::to_string(want) + " bytes at " + std::to_string(offset));
    }
  }
  return Status::OK();
}

void ObjectClient::Get(ObjectGet request, GetCallback done) {
  if (request.range && request.expected_size &&
      (request.range->offset > *request.expected_size ||
       request.range->length > *request.expected_size - request.range->offset)) {
    done(Err(Status::Corruption(Name(request.key) + ": read of " +
                                std::to_string(request.range->length) + " bytes at " +
                                std::to_string(request.range->offset) + " is past the end (size " +
                                std::to_string(*request.expected_size) + ")")));
    return;
  }
  // The checks need the request after it is sent: keep what they read.
  ObjectGet checked;
  checked.key = request.key;
  checked.range = request.range;
  checked.expected_size = request.expected_size;
  checked.size_label = request.size_label;
  checked.changed_advice = request.changed_advice;
  // Named now: the callback may run after this client is gone (the transport is shared).
  DoGet(std::move(request), [name = Name(checked.key), checked = std::move(checked),
                             done = std::move(done)](Result<ObjectData> r) {
    if (!r) {
      done(std::move(r));
      return;
    }
    Status s = CheckGet(name, checked, *r);
    if (!s.ok()) {
      done(Err(std::move(s)));
      return;
    }
    done(std::move(r));
  });
}

Result<ObjectData> ObjectClient::GetBlocking(ObjectGet request) {
  std::promise<Result<ObjectData>> promise;
  auto future = promise.get_future();
  Get(std::move(request), [&promise](Result<ObjectData> r) { promise.set_value(std::move(r)); });
  return future.get();
}

std::unique_ptr<ObjectClient> MakeHttpObjectClient(std::shared_ptr<HttpClient> http,
                                                   std::unique_ptr<ObjectProtocol> protocol) {
  return std::make_unique<HttpObjectClient>(std::move(http), std::move(protocol));
}

}  // namespace pcrfs
