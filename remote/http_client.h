// An HTTP(S) client for remote stores on libcurl's multi interface: one I/O thread owns a curl
// multi handle and a pool of easy handles, keeps connections alive, limits connections per host,
// retries what is worth retrying within a deadline, and counts what it does.
//
// Lifetimes and threads:
//  - Create() makes the curl state and starts the I/O thread. A process that forks (the daemon
//    forks after opening the store) must create its clients after the fork: curl handles and the
//    thread do not survive fork(). Nothing here runs before Create().
//  - Fetch() and FetchBlocking() may be called from any thread, except that FetchBlocking() must
//    not be called from a callback (it would wait for the thread it blocks).
//  - Callbacks run on the I/O thread, exactly once per Fetch(), and must be short: a slow
//    callback delays every other transfer. The destructor fails the requests still pending with
//    IOError ("shutting down") and joins the thread; it must not run on the I/O thread.
//  - A Request's `dst` buffer (when given) must stay valid until its callback has run.
//
// Caveats: curl speaks HTTP/1.1 to S3 (which offers nothing else), so concurrency means one TCP
// connection per request in flight, up to max_connections_per_host; HTTP/2 is used where a TLS
// server offers it, multiplexing many requests on one connection.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "remote/byte_range.h"
#include "remote/request_signer.h"

namespace pcrfs {

struct HttpClientOptions {
  int max_connections_per_host = 16;  // CURLMOPT_MAX_HOST_CONNECTIONS
  int max_connections = 64;           // CURLMOPT_MAX_TOTAL_CONNECTIONS
  bool verify_tls = true;             // off only for tests; verification stays on by default
  std::string ca_file;                // PEM bundle instead of the system's (CURLOPT_CAINFO)
  // A file of "Name: value" lines (blank lines and '#' comments ignored) sent with every
  // request, e.g. "Authorization: Bearer ...". Read by Create() (errors fail it), then again
  // when it changes (checked at most once a second, at once after a 401 and on Reload()), so
  // a token that rotates keeps working; a rewrite that cannot be read keeps the last good
  // headers. Never logged.
  std::string headers_file;
  // Authorizes every try (SigV4 for S3, Shared Key or SAS for Azure; nullptr: nothing added).
  // Shared: signers are thread-safe.
  std::shared_ptr<const RequestSigner> signer;

  // Per try: connect within connect_timeout, and then fail a transfer slower than
  // low_speed_bytes per second for low_speed_time (a stalled connection).
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds low_speed_time{5000};
  long low_speed_bytes = 1024;
  // Per request, all tries and waits included: after this the request fails with IOError.
  std::chrono::milliseconds deadline{30000};
  int max_attempts = 10;
  // Backoff before try n (n >= 2): a random wait in [0, cap], cap = min(max_backoff,
  // base << (n - 2)) ("full jitter"). An answer with Retry-After waits the longer of the
  // server's wait and [cap, 1.5 cap] ("Retry-After: 0" never shortens the backoff); the
  // deadline caps both. A request still waiting for a connection at its deadline fails then.
  std::chrono::milliseconds base_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
};

struct HttpRequest {
  // kPut, kPost and kDelete write (remote/object_writer.h): their answer is 200, 201, 202 or
  // 204, its body (capped by max_body_bytes) in HttpResponse::body.
  enum class Method { kGet, kHead, kPut, kPost, kDelete };
  Method method = Method::kGet;
  std::string url;  // http(s)://..., already URI-encoded
  // The body of a PUT or POST, sent whole on every try (so a retry sends it again).
  std::string upload;
  // The hex SHA-256 of `upload`, computed by the caller off the I/O thread: S3's
  // x-amz-content-sha256 signs it. Empty: UNSIGNED-PAYLOAD for a body, the empty body's hash
  // for none.
  std::string upload_sha256;
  // Headers sent and signed with the request (x-amz-copy-source, x-ms-blob-type, Content-Type).
  HeaderList headers;
  std::optional<ByteRange> range;
  std::string if_none_match;  // an ETag: a 304 answer means "not modified"
  // An ETag: the object must still have it, else a 412, which fails the request with
  // Corruption "URL: 412 Precondition Failed (the object changed)" (no retry).
  std::string if_match;
  // Where the body goes: into dst (capacity dst_size; must hold range->length when a range is
  // asked), else into body_file (created or truncated), else into HttpResponse::body.
  uint8_t* dst = nullptr;
  size_t dst_size = 0;
  std::string body_file;
  // The longest body taken into body_file or HttpResponse::body: a longer one fails the request
  // (IOError "URL: the body is longer than N bytes"), so a server cannot fill the disk or the
  // memory. 0: a ranged request's length, else no limit.
  uint64_t max_body_bytes = 0;
  // A speculative request (a prefetch). Requests somebody waits for go first: a background
  // request gets a connection only when no demand request waits for one, and never one of the
  // last kReservedForDemand; but while fewer than kGuaranteedBackground background requests
  // run, demand requests leave that many connections to them (HttpClient::Impl::Dispatch).
  bool background = false;
  // Called on the I/O thread as the body of a ranged GET into dst arrives, once the answer is
  // known to be a 206 for exactly the asked range: `written` bytes from dst's start are the
  // object's (never decreasing over tries), `total` is the object's size per Content-Range.
  // Bytes once reported are never written again (a retry skips them), so a reader may copy
  // them while the transfer goes on: a waiter for the first piece of a long range gets it
  // after that piece, not after the whole range.
  std::function<void(uint64_t written, uint64_t total)> on_progress;
  // A multi-range GET ("Range: bytes=a-b,c-d", which nginx, Apache and most static servers
  // answer with a 206 multipart/byteranges; S3, Azure and GCS do not): two or more ranges of
  // the object, sorted by offset and disjoint, ranges[i]'s bytes into range_dsts[i] (which holds
  // ranges[i].length). Excludes range, dst, body_file and on_progress. The body is taken into
  // memory up to MultiRangeBodyCap(ranges) (a longer 200 is no error: nothing delivered, see
  // HttpResponse::range_bytes) and parsed (remote/multipart.h) when it is complete.
  std::vector<ByteRange> ranges;
  std::vector<uint8_t*> range_dsts;
};

// The longest answer to a multi-range GET taken: the ranges' bytes and each part's headers.
uint64_t MultiRangeBodyCap(const std::vector<ByteRange>& ranges);

struct HttpResponse {
  long status = 0;  // 200, 206 or 304; anything else is an error Status
  std::string etag;
  // From Content-Range on a 206; on a 200 for the whole object, {0, size - 1, size}.
  std::optional<ContentRange> content_range;
  uint64_t body_bytes = 0;  // bytes written to dst, body_file or body
  std::string body;         // when neither dst nor body_file was given
  int attempts = 0;
  // Of a multi-range GET (HttpRequest::ranges): per asked range, the bytes written to its
  // buffer (its length, or up to the object's end), or 0 when the answer did not hold all of it
  // (a server that sent one range, or a 200 with a whole object longer than the cap): the
  // caller asks for that range alone. `multipart`: the answer was multipart/byteranges.
  std::vector<uint64_t> range_bytes;
  bool multipart = false;
  std::string copy_status;  // Azure's x-ms-copy-status ("success", "pending", ...), if sent
};

// Why a try was retried. kFullBody: a 200 with more than the asked range. kAuth: the server
// refused the authority (expired credentials, a rotated token) and the signer or the header
// file has, or is getting, a newer one.
enum class RetryReason {
  kServerError,
  kThrottled,
  kSlowDown,
  kReset,
  kTimeout,
  kShortBody,
  kFullBody,
  kConnect,
  kAuth,
  kCount
};
const char* RetryReasonName(RetryReason r);

// A snapshot of the client's counters.
struct HttpStats {
  uint64_t requests = 0;  // Fetch() calls
  uint64_t attempts = 0;  // tries sent (requests + retries)
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t bytes_received = 0;  // body bytes of successful tries
  uint64_t in_flight = 0;
  uint64_t background_requests = 0;  // of `requests`: speculative (HttpRequest::background)
  uint64_t background_bytes = 0;     // of `bytes_received`
  std::array<uint64_t, static_cast<size_t>(RetryReason::kCount)> retries{};
  // Of `failed`, by reason: "403 AccessDenied", "400 ExpiredToken", "404", "gave up: timeout",
  // "shutting down", "no credentials", ... (never a URL or a secret). The server's code is
  // FailureCode's ("403 other" for a code that is not plain); at most kMaxFailureReasons
  // keys, the reasons beyond counted as "other".
  static constexpr size_t kMaxFailureReasons = 32;
  std::map<std::string, uint64_t> failed_by_reason;
  // Latency of whole requests (first try to answer), in fixed buckets.
  static constexpr std::array<uint32_t, 14> kLatencyBoundsMs = {
      1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000};
  std::array<uint64_t, kLatencyBoundsMs.size() + 1> latency{};  // last: above the last bound
  uint64_t latency_sum_us = 0;  // the requests' latencies, summed (microseconds)
  // Of each successful request's last try: the time from the try's start to the response's
  // first byte (curl's starttransfer time), in the same buckets, and summed.
  std::array<uint64_t, kLatencyBoundsMs.size() + 1> first_byte_latency{};
  uint64_t first_byte_sum_us = 0;
  // The upper bound (ms) of the bucket holding the q-quantile (0 < q <= 1); 0 with no requests,
  // UINT64_MAX when it is above the last bound.
  uint64_t LatencyPercentileMs(double q) const;
  // {"requests":..., "retries":{"server_error":...}, "latency_ms":{"p50":...,"p99":...}, ...}
  std::string ToJson() const;
};

class HttpClient {
 public:
  // Connections per host that background requests leave to the others (at least one).
  static constexpr int kReservedForDemand = 4;
  // Connections demand requests leave to waiting background ones (if max allows).
  static constexpr int kGuaranteedBackground = 4;
  // Tries after a refused authority, spaced by the backoff (a renewal takes an STS round trip).
  static constexpr int kAuthRetries = 4;
  // Tries of a request whose connection is refused while no try of this client ever got an
  // answer (a URL on a dead port). Once one did, a refusal is a restarting server: retried.
  static constexpr int kUnreachedTries = 2;
  // Tries of a range answered with a 200 and the whole object (a server that ignores Range,
  // or a proxy's hiccup); 1 once a request of this client gave up for it.
  static constexpr int kFullBodyTries = 3;
  using Callback = std::function<void(Result<HttpResponse>)>;

  // Errors: an unreadable or malformed headers_file (naming the file and line, never a value),
  // curl that cannot be initialized.
  static Result<std::unique_ptr<HttpClient>> Create(HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts the request; `done` gets the response or an error, exactly once, on the I/O thread.
  // Errors (each one line naming the redacted URL):
  //  - NotFound "URL: 404 Not Found (NoSuchKey)", IOError "URL: 403 Forbidden (AccessDenied)"
  //    (errno EACCES) and other 4xx: not retried, except a refused authority (RefusalIsAuth)
  //    that the signer is renewing or a 401 after the header file changed: up to
  //    kAuthRetries more tries; the error code comes from the XML body or x-ms-error-code;
  //  - the signer's error ("no AWS credentials yet ..."), not retried;
  //  - IOError "URL: gave up after N tries in T ms (last: REASON)" when the retries or the
  //    deadline run out (5xx, 429, SlowDown, resets, timeouts, short bodies); a refused
  //    connection gets kUnreachedTries tries while the client has never had an answer from
  //    its server (a dead port fails at once, not after the deadline), all of them after;
  //  - IOError "URL: the server ignores Range (200 with the whole object for a range, N
  //    tries)": kFullBodyTries tries of a range answered with the whole object, one once
  //    another request of this client found that (until a range is answered with a 206);
  //  - IOError for TLS failures (not retried) and for a body that does not fit dst.
  void Fetch(HttpRequest request, Callback done);
  // Fetch() and wait.
  Result<HttpResponse> FetchBlocking(HttpRequest request);
  // Reads the header file and the signer's sources again (SIGHUP). Any thread.
  void Reload();

  HttpStats stats() const;
  const HttpClientOptions& options() const;

  class Impl;

 private:
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Seconds to wait from a Retry-After value (delta-seconds or an HTTP date); nullopt if invalid.
std::optional<std::chrono::milliseconds> ParseRetryAfter(std::string_view value,
                                                         std::chrono::system_clock::time_point now);
// The <Code> of an S3 XML error body, or "".
std::string S3ErrorCode(std::string_view body);
// A server's error code as HttpStats::failed_by_reason (a metrics label, JSON) holds it: the
// code when it is only [A-Za-z0-9.] and at most kMaxFailureCodeBytes, else "other"; "" stays "".
inline constexpr size_t kMaxFailureCodeBytes = 64;
std::string FailureCode(std::string_view code);
// Text a server chose (an error code, a header) as a message shows it: one short printable
// line (other bytes as '?', at most max bytes, then "...").
std::string ServerText(std::string_view text, size_t max = 64);

}  // namespace pcrfs
