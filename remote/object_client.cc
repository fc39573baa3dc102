#include "remote/object_client.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <numeric>
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
    std::string url = protocol_->ObjectUrl(request.key);  // before request is moved from
    FetchOne(*http_, std::move(url), std::move(request), std::move(done));
  }

  void DoGetRanges(std::vector<ObjectGet> requests, RangeCallback done) override {
    if (requests.size() < 2 || !protocol_->MultiRange() || no_multi_range_->load()) {
      ObjectClient::DoGetRanges(std::move(requests), std::move(done));
      return;
    }
    // In the order of their offsets, at most kMaxRangesPerGet a GET (a Range header of a few
    // hundred bytes: servers take 4-8 KiB of headers).
    std::vector<size_t> order(requests.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&requests](size_t a, size_t b) {
      return requests[a].range->offset < requests[b].range->offset;
    });
    const std::string url = protocol_->ObjectUrl(requests.front().key);
    auto shared_done = std::make_shared<RangeCallback>(std::move(done));
    for (size_t first = 0; first < order.size(); first += kMaxRangesPerGet) {
      const size_t n = std::min(kMaxRangesPerGet, order.size() - first);
      std::vector<size_t> index(order.begin() + first, order.begin() + first + n);
      std::vector<ObjectGet> group;
      for (size_t i : index) group.push_back(std::move(requests[i]));
      if (n == 1) {
        FetchOne(*http_, url, std::move(group.front()),
                 [shared_done, i = index.front()](Result<ObjectData> r) {
                   (*shared_done)(i, std::move(r));
                 });
        continue;
      }
      HttpRequest req;
      req.url = url;
      req.if_match = group.front().if_match;
      req.background = group.front().background;
      for (const ObjectGet& g : group) {
        req.ranges.push_back(*g.range);
        req.range_dsts.push_back(g.dst);
      }
      // Runs on the transport's thread, maybe after this client is gone: only shared state,
      // and the transport by a plain pointer (its callbacks run before its destructor returns;
      // a callback that held the last reference would destroy it on its own thread).
      http_->Fetch(std::move(req),
                   [http = http_.get(), url, no_multi = no_multi_range_, group = std::move(group),
                    index = std::move(index), shared_done](Result<HttpResponse> r) mutable {
                     if (!r) {
                       for (size_t i : index) (*shared_done)(i, Err(r.error()));
                       return;
                     }
                     for (size_t j = 0; j < group.size(); ++j) {
                       if (r->range_bytes[j] > 0) {
                         ObjectData d;
                         d.etag = r->etag;
                         d.size = r->content_range ? r->content_range->total : 0;
                         d.body_bytes = r->range_bytes[j];
                         d.attempts = r->attempts;
                         (*shared_done)(index[j], std::move(d));
                         continue;
                       }
                       // Not in the answer: asked alone, and from now on every range is.
                       if (!r->multipart) no_multi->store(true);
                       FetchOne(*http, url, std::move(group[j]),
                                [shared_done, i = index[j]](Result<ObjectData> d) {
                                  (*shared_done)(i, std::move(d));
                                });
                     }
                   });
    }
  }

 private:
  static constexpr size_t kMaxRangesPerGet = 32;

  // One GET of `url` for `request`.
  static void FetchOne(HttpClient& http, std::string url, ObjectGet request, GetCallback done) {
    HttpRequest req;
    req.url = std::move(url);
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
    http.Fetch(std::move(req), [done = std::move(done)](Result<HttpResponse> r) {
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

  std::shared_ptr<HttpClient> http_;
  std::unique_ptr<ObjectProtocol> protocol_;
  // The server answered a multi-range GET with one range or a whole object: one range per GET.
  std::shared_ptr<std::atomic<bool>> no_multi_range_ = std::make_shared<std::atomic<bool>>(false);
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

namespace {

// The checks that need no answer: a range past the index's size is sent nowhere.
Status CheckBeforeSending(const ObjectClient& client, const ObjectGet& request) {
  if (request.range && request.expected_size &&
      (request.range->offset > *request.expected_size ||
       request.range->length > *request.expected_size - request.range->offset)) {
    return Status::Corruption(client.Name(request.key) + ": read of " +
                              std::to_string(request.range->length) + " bytes at " +
                              std::to_string(request.range->offset) + " is past the end (size " +
                              std::to_string(*request.expected_size) + ")");
  }
  return Status::OK();
}

// What CheckGet reads of a request, kept while it is sent.
ObjectGet CheckedPart(const ObjectGet& request) {
  ObjectGet checked;
  checked.key = request.key;
  checked.range = request.range;
  checked.expected_size = request.expected_size;
  checked.size_label = request.size_label;
  checked.changed_advice = request.changed_advice;
  return checked;
}

}  // namespace

void ObjectClient::Get(ObjectGet request, GetCallback done) {
  if (Status s = CheckBeforeSending(*this, request); !s.ok()) {
    done(Err(std::move(s)));
    return;
  }
  // The checks need the request after it is sent: keep what they read.
  ObjectGet checked = CheckedPart(request);
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

void ObjectClient::GetRanges(std::vector<ObjectGet> requests, RangeCallback done) {
  auto shared_done = std::make_shared<RangeCallback>(std::move(done));
  if (requests.empty()) return;
  // Sent together: the requests like the first, of a range into a buffer.
  const std::string key = requests.front().key, if_match = requests.front().if_match;
  const std::optional<uint64_t> expected_size = requests.front().expected_size;
  const bool background = requests.front().background;
  const auto eligible = [&](const ObjectGet& r) {
    return r.range && r.dst != nullptr && r.dst_size >= r.range->length && r.body_file.empty() &&
           r.if_none_match.empty() && r.key == key && r.expected_size == expected_size &&
           r.if_match == if_match && r.background == background;
  };
  std::vector<ObjectGet> sent, checked;
  std::vector<size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    ObjectGet& r = requests[i];
    if (!eligible(r)) {
      Get(std::move(r),
          [shared_done, i](Result<ObjectData> d) { (*shared_done)(i, std::move(d)); });
      continue;
    }
    if (Status s = CheckBeforeSending(*this, r); !s.ok()) {
      (*shared_done)(i, Err(std::move(s)));
      continue;
    }
    checked.push_back(CheckedPart(r));
    sent.push_back(std::move(r));
    index.push_back(i);
  }
  if (sent.empty()) return;
  const std::string name = Name(sent.front().key);
  DoGetRanges(std::move(sent), [name, checked = std::move(checked), index = std::move(index),
                                shared_done](size_t j, Result<ObjectData> r) {
    if (r) {
      if (Status s = CheckGet(name, checked[j], *r); !s.ok()) r = Err(std::move(s));
    }
    (*shared_done)(index[j], std::move(r));
  });
}

void ObjectClient::DoGetRanges(std::vector<ObjectGet> requests, RangeCallback done) {
  auto shared_done = std::make_shared<RangeCallback>(std::move(done));
  for (size_t i = 0; i < requests.size(); ++i) {
    DoGet(std::move(requests[i]),
          [shared_done, i](Result<ObjectData> d) { (*shared_done)(i, std::move(d)); });
  }
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
