// One interface for reading objects from a store or a build source, whatever serves them: a web
// server (http/https, with a signed URL's query kept), S3 (and GCS's S3 API), Azure Blob
// Storage; an in-memory fake and a fault-injecting wrapper for tests without sockets.
//
// A client is rooted at a location (the store's URL, a bucket prefix, an archive's URL): keys
// are relative to it ("records/00000042.pcr", "cats/a.jpg"); the empty key is the root object
// itself (an archive at s3://BUCKET/data.tar).
//
// Get() checks every answer the same way, whoever serves it (CheckGet):
//  - with expected_size, the object's size must be it: else Corruption "NAME: the object
//    changed (size X, LABEL Y)ADVICE" (never the bytes of another version);
//  - a ranged read must stay inside expected_size (Corruption "past the end", nothing sent) and
//    gets exactly the asked bytes (or up to the object's end), else Corruption "got N of M".
//
// GetRanges() asks for several ranges of one object at once (a file's k pieces): over plain
// HTTP in one multi-range GET (HttpRequest::ranges), whose answer's parts go where each range's
// own GET would have put them; a server that answers one range or a whole object is remembered
// (the client asks one range per GET from then on) and the ranges it did not send are asked
// alone. S3, Azure and GCS answer one range per GET: there, and with the fakes, one GET per
// range, all in flight together. Each range is checked as Get checks it.
//
// Threads: Get() may be called from any thread; `done` runs exactly once, on the client's own
// thread (or at once on the caller's for an error found before sending) and must be short.
// GetBlocking() must not be called from a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/http_client.h"

namespace pcrfs {

struct ObjectGet {
  std::string key;                 // relative to the client's root; "" is the root object
  std::optional<ByteRange> range;  // nullopt: the whole object
  // The object's size as the caller knows it (the index, a listing), and how the message on
  // a mismatch names it: "the object changed (size X, <label> Y)<advice>".
  std::optional<uint64_t> expected_size;
  std::string size_label = "expected";
  std::string changed_advice;
  // Where the body goes: into dst (must hold range->length), else body_file (created or
  // truncated), else ObjectData::body.
  uint8_t* dst = nullptr;
  size_t dst_size = 0;
  std::string body_file;
  // The longest body taken into body_file or ObjectData::body (HttpRequest::max_body_bytes):
  // 0 is a ranged request's length, else no limit.
  uint64_t max_body_bytes = 0;
  std::string if_none_match;  // an ETag: ObjectData::not_modified when it still holds
  // An ETag the object must still have (HttpRequest::if_match): else Corruption "NAME: 412
  // Precondition Failed (the object changed)".
  std::string if_match;
  bool background = false;  // speculative: demand requests go first (HttpRequest::background)
  // As a ranged body into dst arrives, when its size is expected_size (or none is expected):
  // `written` bytes from dst's start are final (HttpRequest::on_progress).
  std::function<void(uint64_t written)> on_progress;
};

struct ObjectData {
  bool not_modified = false;  // the if_none_match ETag still holds; nothing written
  std::string etag;
  uint64_t size = 0;        // the object's size
  uint64_t body_bytes = 0;  // bytes written to dst, body_file or body
  std::string body;
  int attempts = 0;
};

struct ObjectListing {
  struct Entry {
    std::string key;  // relative to the root; a folder marker ends with '/'
    uint64_t size = 0;
    int64_t mtime_sec = 0;
    uint32_t mtime_nsec = 0;
  };
  std::vector<Entry> entries;
  std::string next_token;  // empty: the last page
};

class ObjectClient {
 public:
  using GetCallback = std::function<void(Result<ObjectData>)>;
  // The answer for requests[i] of GetRanges.
  using RangeCallback = std::function<void(size_t i, Result<ObjectData>)>;

  virtual ~ObjectClient() = default;

  // Reads (part of) an object. Errors: the transport's (NotFound for a missing object,
  // IOError with EACCES for a refusal, IOError after retries or the deadline), InvalidArgument
  // for a bad request, and CheckGet's Corruption.
  void Get(ObjectGet request, GetCallback done);
  Result<ObjectData> GetBlocking(ObjectGet request);
  // Ranges of one object at once (see above): requests of one key, each with a range into its
  // dst, none with body_file or if_none_match (else each is sent alone, as Get; on_progress
  // is called where a range is fetched alone, not for a multi-range GET's parts);
  // the same expected_size, if_match and background for all. `done` runs once per request, as
  // Get's does, with Get's errors (an error of the shared GET is every range's).
  void GetRanges(std::vector<ObjectGet> requests, RangeCallback done);

  // One page of the keys under the root (in key order), from `continuation_token` ("" for the
  // first page), at most max_keys. NotSupported where the protocol cannot list (plain http).
  virtual Result<ObjectListing> List(std::string_view continuation_token, uint32_t max_keys) = 0;
  // The longest listing page taken (a longer one fails the List: IOError "URL: the body is
  // longer than N bytes"), so a server cannot fill the memory with one page.
  static constexpr uint64_t kMaxListingBytes = uint64_t{64} << 20;

  // What messages call object `key`: its URL without credentials or query.
  virtual std::string Name(std::string_view key) const = 0;
  // The transport's counters (zero for fakes that have none).
  virtual HttpStats stats() const { return {}; }
  // The authority in use, as a JSON object ({"source": "none"} for anonymous requests).
  virtual std::string DescribeAuthJson() const { return R"({"source":"none"})"; }
  // Re-reads credentials, tokens and header files (SIGHUP).
  virtual void Reload() {}

  // Get without the checks, for a client that wraps another (FaultyObjectClient): its own
  // Get checks what it passes on.
  void GetUnchecked(ObjectGet request, GetCallback done) {
    DoGet(std::move(request), std::move(done));
  }

  // The checks of every answer (see above), public for the fakes' tests.
  static Status CheckGet(const std::string& name, const ObjectGet& request, const ObjectData& data);

 protected:
  // Sends the request; called by Get() after the checks that need no answer.
  virtual void DoGet(ObjectGet request, GetCallback done) = 0;
  // Sends GetRanges' requests (already checked to be eligible); by default one DoGet each.
  virtual void DoGetRanges(std::vector<ObjectGet> requests, RangeCallback done);
};

// An ObjectClient over an HttpClient, for one of the protocols below. Owns how keys become
// URLs, how listings are asked for and parsed, and which error codes say what.
class ObjectProtocol {
 public:
  virtual ~ObjectProtocol() = default;
  // The URL of `key` (http(s), encoded, without the signer's query).
  virtual std::string ObjectUrl(std::string_view key) const = 0;
  // The redacted URL shown for `key` (s3://BUCKET/KEY, az://CONTAINER/KEY, http://HOST/PATH).
  virtual std::string Name(std::string_view key) const = 0;
  // The URL of one listing page; NotSupported where there is none.
  virtual Result<std::string> ListUrl(std::string_view continuation_token,
                                      uint32_t max_keys) const = 0;
  // Parses one listing page (keys relative to the root). Corruption for an unreadable answer.
  virtual Result<ObjectListing> ParseListing(std::string_view body) const = 0;
  // Whether its servers may answer a multi-range GET (plain web servers; not S3, Azure, GCS).
  virtual bool MultiRange() const { return false; }
};

// Makes an ObjectClient of a protocol over a shared HTTP client (which carries the signer).
std::unique_ptr<ObjectClient> MakeHttpObjectClient(std::shared_ptr<HttpClient> http,
                                                   std::unique_ptr<ObjectProtocol> protocol);

}  // namespace pcrfs
