#include "remote/http_client.h"

#include <curl/curl.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/thread_name.h"
#include "remote/multipart.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kErrorBodyCap = 64 * 1024;
constexpr size_t kIdleEasyHandles = 64;

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

std::string TrimWs(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

// scheme://authority/path?query of a URL the client is asked to fetch.
struct UrlParts {
  std::string host_header;  // authority without a default port
  std::string path;         // "/..." as sent
  HeaderList query;         // decoded key/value pairs
};

std::optional<UrlParts> SplitUrl(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return std::nullopt;
  std::string scheme = url.substr(0, scheme_end);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (scheme != "http" && scheme != "https") return std::nullopt;
  size_t auth_start = scheme_end + 3;
  size_t path_start = url.find_first_of("/?#", auth_start);
  UrlParts p;
  std::string authority = url.substr(auth_start, path_start - auth_start);
  if (authority.empty() || authority.find('@') != std::string::npos) return std::nullopt;
  // Host as curl would send it: without the scheme's default port.
  const std::string default_port = scheme == "http" ? ":80" : ":443";
  if (authority.size() > default_port.size() &&
      authority.compare(authority.size() - default_port.size(), default_port.size(),
                        default_port) == 0) {
    authority.resize(authority.size() - default_port.size());
  }
  p.host_header = authority;
  std::string rest = path_start == std::string::npos ? "/" : url.substr(path_start);
  rest = rest.substr(0, rest.find('#'));
  size_t q = rest.find('?');
  p.path = rest.substr(0, q);
  if (p.path.empty()) p.path = "/";
  if (q != std::string::npos) {
    std::string_view query = std::string_view(rest).substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view kv = query.substr(0, amp);
      size_t eq = kv.find('=');
      // A malformed escape is signed as it stands (the server sees the same bytes).
      auto decode = [](std::string_view v) { return PercentDecode(v).value_or(std::string(v)); };
      p.query.emplace_back(decode(kv.substr(0, eq)),
                           eq == std::string_view::npos ? "" : decode(kv.substr(eq + 1)));
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }
  return p;
}

const char* ReasonPhrase(long status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 412:
      return "Precondition Failed";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 307:
      return "Temporary Redirect";
    default:
      return "";
  }
}

Result<HeaderList> ReadHeadersFile(const std::string& path) {
  HeaderList out;
  std::ifstream in(path);
  if (!in) return Err(Status::FromErrno("headers file " + path, errno));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string t = TrimWs(line);
    if (t.empty() || t[0] == '#') continue;
    size_t colon = t.find(':');
    std::string name = colon == std::string::npos ? "" : TrimWs(t.substr(0, colon));
    if (name.empty() || name.find_first_of(" \t") != std::string::npos) {
      return Err(Status::InvalidArgument("headers file " + path + ": line " + std::to_string(n) +
                                         ": not a 'Name: value' header"));
    }
    out.emplace_back(name, TrimWs(t.substr(colon + 1)));
  }
  return out;
}

// The headers file, read again when it changes: its identity (device, inode, size, mtime) is
// looked at no more than once a second, or at once after Recheck() (a 401, SIGHUP). A version
// that cannot be read or parsed keeps the last good headers (a writer that truncates and then
// writes is seen half-way at worst for a second).
class HeaderFile {
 public:
  static Result<std::unique_ptr<HeaderFile>> Open(const std::string& path) {
    auto f = std::unique_ptr<HeaderFile>(new HeaderFile(path));
    if (path.empty()) return f;
    auto headers = ReadHeadersFile(path);
    if (!headers) return Err(headers.error());
    f->headers_ = std::make_shared<const HeaderList>(std::move(*headers));
    f->id_ = Identity(path);
    f->checked_ = Clock::now();
    return f;
  }

  std::shared_ptr<const HeaderList> Current() {
    if (path_.empty()) return headers_;
    const auto now = Clock::now();
    if (recheck_.exchange(false) || now - checked_ >= std::chrono::seconds(1)) {
      checked_ = now;
      std::string id = Identity(path_);
      if (!id.empty() && id != id_) {
        auto headers = ReadHeadersFile(path_);
        if (headers) {
          headers_ = std::make_shared<const HeaderList>(std::move(*headers));
          id_ = std::move(id);
          ++generation_;
        }
      }
    }
    return headers_;
  }
  // The next Current() looks at the file. Any thread.
  void Recheck() { recheck_.store(true); }
  bool empty() const { return path_.empty(); }
  uint64_t generation() const { return generation_; }

 private:
  explicit HeaderFile(std::string path)
      : path_(std::move(path)), headers_(std::make_shared<const HeaderList>()) {}

  static std::string Identity(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return "";
    return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
           std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
  }

  const std::string path_;
  // I/O thread only, but for recheck_.
  std::shared_ptr<const HeaderList> headers_;
  std::string id_;
  Clock::time_point checked_;
  uint64_t generation_ = 0;
  std::atomic<bool> recheck_{false};
};

}  // namespace

const char* RetryReasonName(RetryReason r) {
  switch (r) {
    case RetryReason::kServerError:
      return "server_error";
    case RetryReason::kThrottled:
      return "throttled";
    case RetryReason::kSlowDown:
      return "slow_down";
    case RetryReason::kReset:
      return "reset";
    case RetryReason::kTimeout:
      return "timeout";
    case RetryReason::kShortBody:
      return "short_body";
    case RetryReason::kFullBody:
      return "full_body";
    case RetryReason::kConnect:
      return "connect";
    case RetryReason::kAuth:
      return "auth";
    case RetryReason::kCount:
      break;
  }
  return "?";
}

std::optional<milliseconds> ParseRetryAfter(std::string_view value,
                                            std::chrono::system_clock::time_point now) {
  std::string s = TrimWs(value);
  if (s.empty()) return std::nullopt;
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    if (s.size() > 9) return std::nullopt;
    return milliseconds(std::stoll(s) * 1000);
  }
  time_t t = curl_getdate(s.c_str(), nullptr);
  if (t < 0) return std::nullopt;
  auto when = std::chrono::system_clock::from_time_t(t);
  if (when <= now) return milliseconds(0);
  return std::chrono::duration_cast<milliseconds>(when - now);
}

std::string S3ErrorCode(std::string_view body) {
  size_t a = body.find("<Code>");
  if (a == std::string_view::npos) return "";
  size_t b = body.find("</Code>", a);
  if (b == std::string_view::npos || b - a > 128) return "";
  return std::string(body.substr(a + 6, b - a - 6));
}

std::string ServerText(std::string_view text, size_t max) {
  std::string out;
  for (char c : text.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > max) out += "...";
  return out;
}

std::string FailureCode(std::string_view code) {
  if (code.empty()) return "";
  const bool plain =
      code.size() <= kMaxFailureCodeBytes && std::all_of(code.begin(), code.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '.';
      });
  return plain ? std::string(code) : "other";
}

uint64_t MultiRangeBodyCap(const std::vector<ByteRange>& ranges) {
  // Per part: the boundary line, its Content-Type and Content-Range (nginx: ~110 bytes).
  uint64_t cap = 1024;
  for (const ByteRange& r : ranges) cap += r.length + 512;
  return cap;
}

uint64_t HttpStats::LatencyPercentileMs(double q) const {
  uint64_t total = 0;
  for (uint64_t c : latency) total += c;
  if (total == 0) return 0;
  uint64_t want = static_cast<uint64_t>(q * static_cast<double>(total));
  if (want == 0) want = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < latency.size(); ++i) {
    seen += latency[i];
    if (seen >= want) return i < kLatencyBoundsMs.size() ? kLatencyBoundsMs[i] : UINT64_MAX;
  }
  return UINT64_MAX;
}

std::string HttpStats::ToJson() const {
  nlohmann::json j;
  j["requests"] = requests;
  j["attempts"] = attempts;
  j["succeeded"] = succeeded;
  j["failed"] = failed;
  j["bytes_received"] = bytes_received;
  j["in_flight"] = in_flight;
  j["background_requests"] = background_requests;
  j["background_bytes"] = background_bytes;
  nlohmann::json r = nlohmann::json::object();
  for (size_t i = 0; i < retries.size(); ++i) {
    r[RetryReasonName(static_cast<RetryReason>(i))] = retries[i];
  }
  j["retries"] = r;
  j["failed_by_reason"] = failed_by_reason;
  j["latency_ms"] = {{"p50", LatencyPercentileMs(0.5)},
                     {"p90", LatencyPercentileMs(0.9)},
                     {"p99", LatencyPercentileMs(0.99)}};
  return j.dump();
}

// One request and the state of its current try. Owned by the I/O thread once queued.
struct Transfer {
  HttpRequest req;
  HttpClient::Callback done;
  UrlParts url;
  std::string shown_url;  // redacted, for messages
  Clock::time_point start, deadline, next_try;
  int attempts = 0;
  int auth_retries = 0;
  std::string last_reason;
  std::string fail_reason;  // for HttpStats::failed_by_reason

  // Per try.
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  FILE* file = nullptr;
  long status = 0;
  std::string etag, content_range, retry_after, error_code;  // error_code: x-ms-error-code
  std::string content_type;                                  // of a multi-range GET's answer
  std::string copy_status;                                   // x-ms-copy-status
  uint64_t signed_generation = 0;                            // SignedParts::generation of this try
  uint64_t header_generation = 0;                            // HeaderFile::generation() of this try
  uint64_t written = 0;
  bool overflow = false;
  int progress = 0;        // on_progress for this try: 0 not decided yet, 1 yes, -1 no
  uint64_t total = 0;      // the object's size per this try's Content-Range
  uint64_t reported = 0;   // over all tries: bytes of dst handed to on_progress
  std::string body;        // the body when no dst or file
  std::string error_body;  // the body of a non-2xx answer (capped)
  char errbuf[CURL_ERROR_SIZE] = {};
};

class HttpClient::Impl {
 public:
  explicit Impl(HttpClientOptions options, std::unique_ptr<HeaderFile> header_file)
      : options_(std::move(options)),
        header_file_(std::move(header_file)),
        rng_(std::random_device{}()) {}

  void Reload() {
    header_file_->Recheck();
    if (options_.signer != nullptr) options_.signer->Reload();
  }

  ~Impl() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (multi_ != nullptr) curl_multi_wakeup(multi_);
    if (thread_.joinable()) thread_.join();
    for (CURL* e : idle_) curl_easy_cleanup(e);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
  }

  Status Start() {
    static std::once_flag once;
    static CURLcode global = CURLE_OK;
    std::call_once(once, [] { global = curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (global != CURLE_OK) return Status::IOError("curl_global_init failed");
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return Status::IOError("curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options_.max_connections_per_host));
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      static_cast<long>(options_.max_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_connections));
    curl_multi_setopt(multi_, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    thread_ = std::thread([this] { Loop(); });
    return Status::OK();
  }

  void Submit(std::unique_ptr<Transfer> t) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (t->req.background) background_requests_.fetch_add(1, std::memory_order_relaxed);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    bool stopped;
    {
      MutexLock lock(&mu_);
      stopped = stop_;
      if (!stopped) queue_.push_back(std::move(t));
    }
    if (stopped) {
      Status s = Status::IOError(t->shown_url + ": the client is shutting down");
      t->fail_reason = "shutting down";
      Complete(std::move(t), Err(std::move(s)));
      return;
    }
    curl_multi_wakeup(multi_);
  }

  bool OnIoThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  HttpStats Stats() const {
    HttpStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.attempts = attempts_.load(std::memory_order_relaxed);
    s.succeeded = succeeded_.load(std::memory_order_relaxed);
    s.failed = failed_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    s.background_requests = background_requests_.load(std::memory_order_relaxed);
    s.background_bytes = background_bytes_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < s.retries.size(); ++i) {
      s.retries[i] = retries_[i].load(std::memory_order_relaxed);
    }
    for (size_t i = 0; i < s.latency.size(); ++i) {
      s.latency[i] = latency_[i].load(std::memory_order_relaxed);
      s.first_byte_latency[i] = first_byte_[i].load(std::memory_order_relaxed);
    }
    s.latency_sum_us = latency_sum_us_.load(std::memory_order_relaxed);
    s.first_byte_sum_us = first_byte_sum_us_.load(std::memory_order_relaxed);
    MutexLock lock(&failed_mu_);
    s.failed_by_reason = failed_by_reason_;
    return s;
  }

  const HttpClientOptions& options() const { return options_; }

 private:
  static size_t OnHeader(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(data, size * n);
    if (StartsWithNoCase(line, "HTTP/")) {  // a new response (after a 100 Continue, say)
      t->etag.clear();
      t->content_range.clear();
      t->retry_after.clear();
      t->error_code.clear();
      t->content_type.clear();
      t->copy_status.clear();
    } else if (StartsWithNoCase(line, "x-ms-copy-status:")) {
      t->copy_status = TrimWs(line.substr(17)).substr(0, 64);
    } else if (StartsWithNoCase(line, "content-type:")) {
      t->content_type = TrimWs(line.substr(13)).substr(0, 256);
    } else if (StartsWithNoCase(line, "x-ms-error-code:")) {
      t->error_code = TrimWs(line.substr(16)).substr(0, 128);
    } else if (StartsWithNoCase(line, "etag:")) {
      t->etag = TrimWs(line.substr(5));
    } else if (StartsWithNoCase(line, "content-range:")) {
      t->content_range = TrimWs(line.substr(14));
    } else if (StartsWithNoCase(line, "retry-after:")) {
      t->retry_after = TrimWs(line.substr(12));
    }
    return size * n;
  }

  static size_t OnBody(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t len = size * n;
    if (t->status == 0) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    if (!IsSuccess(t)) {
      size_t room = kErrorBodyCap - std::min(kErrorBodyCap, t->error_body.size());
      t->error_body.append(data, std::min(room, len));
      return len;
    }
    if (t->req.dst != nullptr) {
      if (t->written + len > t->req.dst_size) {
        t->overflow = true;
        return 0;  // aborts the transfer: CURLE_WRITE_ERROR
      }
      // Bytes already reported may be being read: never written again.
      const uint64_t skip =
          std::min<uint64_t>(len, t->reported - std::min(t->reported, t->written));
      std::memcpy(t->req.dst + t->written + skip, data + skip, len - skip);
      if (t->req.on_progress) {
        if (t->progress == 0) t->progress = ProgressiveTry(t) ? 1 : -1;
        if (t->progress > 0 && t->written + len > t->reported) {
          t->reported = t->written + len;
          t->req.on_progress(t->reported, t->total);
        }
      }
    } else {
      const uint64_t cap = t->req.max_body_bytes != 0 ? t->req.max_body_bytes
                           : t->req.range             ? t->req.range->length
                                                      : UINT64_MAX;
      if (len > cap - std::min<uint64_t>(cap, t->written)) {
        t->overflow = true;
        return 0;  // aborts the transfer: CURLE_WRITE_ERROR
      }
      if (t->file != nullptr) {
        if (std::fwrite(data, 1, len, t->file) != len) return 0;
      } else {
        t->body.append(data, len);
      }
    }
    t->written += len;
    return len;
  }

  static bool IsWrite(const HttpRequest& req) {
    return req.method == HttpRequest::Method::kPut || req.method == HttpRequest::Method::kPost ||
           req.method == HttpRequest::Method::kDelete;
  }
  static const char* MethodName(HttpRequest::Method m) {
    switch (m) {
      case HttpRequest::Method::kHead:
        return "HEAD";
      case HttpRequest::Method::kPut:
        return "PUT";
      case HttpRequest::Method::kPost:
        return "POST";
      case HttpRequest::Method::kDelete:
        return "DELETE";
      case HttpRequest::Method::kGet:
        break;
    }
    return "GET";
  }
  // A status whose body is the answer's (not an error's): 200 and 206; a write's 201, 202, 204.
  static bool IsSuccess(const Transfer* t) {
    if (t->status == 200 || t->status == 206) return true;
    return IsWrite(t->req) && (t->status == 201 || t->status == 202 || t->status == 204);
  }

  // Whether this try's body may be handed out as it arrives: a 206 for exactly the asked range.
  static bool ProgressiveTry(Transfer* t) {
    if (t->status != 206 || !t->req.range) return false;
    auto cr = ParseContentRange(t->content_range);
    if (!cr || cr->start != t->req.range->offset) return false;
    const uint64_t want_end = t->req.range->offset + t->req.range->length - 1;
    if (cr->end != want_end && !(cr->end + 1 == cr->total && cr->end < want_end)) return false;
    t->total = cr->total;
    return true;
  }

  // Starts try t->attempts + 1 of `t`: its state reset, an easy handle set up, its headers
  // signed, added to the multi handle.
  Status StartTry(Transfer* t) {
    PCRFS_RETURN_IF_ERROR(ResetForTry(t));
    CURL* e;
    if (!idle_.empty()) {
      e = idle_.back();
      idle_.pop_back();
      curl_easy_reset(e);
    } else {
      e = curl_easy_init();
      if (e == nullptr) return Status::IOError(t->shown_url + ": curl_easy_init failed");
    }
    t->easy = e;
    SetTransferOptions(t, e);
    PCRFS_RETURN_IF_ERROR(SetHeadersAndUrl(t, e));
    if (curl_multi_add_handle(multi_, e) != CURLM_OK) {
      return Status::IOError(t->shown_url + ": curl_multi_add_handle failed");
    }
    return Status::OK();
  }

  // What a try starts from: nothing heard yet, the body file (if any) opened anew.
  Status ResetForTry(Transfer* t) {
    t->attempts++;
    attempts_.fetch_add(1, std::memory_order_relaxed);
    t->status = 0;
    t->etag.clear();
    t->content_range.clear();
    t->retry_after.clear();
    t->error_code.clear();
    t->content_type.clear();
    t->copy_status.clear();
    t->written = 0;
    t->overflow = false;
    t->progress = 0;
    t->body.clear();
    t->error_body.clear();
    t->errbuf[0] = 0;
    if (!t->req.body_file.empty()) {
      if (t->file != nullptr) std::fclose(t->file);
      t->file = std::fopen(t->req.body_file.c_str(), "wbe");
      if (t->file == nullptr) return Status::FromErrno(t->req.body_file, errno);
    }
    return Status::OK();
  }

  // The easy handle's options for `t`: connection, TLS, timeouts, callbacks and method.
  void SetTransferOptions(Transfer* t, CURL* e) {
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
    if (!options_.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, static_cast<long>(options_.low_speed_time.count() / 1000)));
    auto remaining = std::chrono::duration_cast<milliseconds>(t->deadline - Clock::now());
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, std::max(1L, static_cast<long>(remaining.count())));
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Impl::OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Impl::OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    if (t->req.method == HttpRequest::Method::kHead) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (IsWrite(t->req)) {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, MethodName(t->req.method));
      if (t->req.method != HttpRequest::Method::kDelete) {
        // Not copied: t->req.upload lives until the transfer is done.
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         static_cast<curl_off_t>(t->req.upload.size()));
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->req.upload.data());
      }
    }
  }

  // The request's headers (signed, then the headers file's) and its URL (with a signer's query)
  // on the easy handle. IOError when the signer has no credentials.
  Status SetHeadersAndUrl(Transfer* t, CURL* e) {
    // The headers that are signed are sent exactly as signed: Host and Range set here, not by
    // curl. Accept-Encoding stays off: ranges are of the stored bytes.
    HeaderList signed_headers = {{"Host", t->url.host_header}};
    if (t->req.range) {
      signed_headers.emplace_back(
          "Range", "bytes=" + std::to_string(t->req.range->offset) + "-" +
                       std::to_string(t->req.range->offset + t->req.range->length - 1));
    } else if (!t->req.ranges.empty()) {
      signed_headers.emplace_back("Range", RangeHeaderValue(t->req.ranges));
    }
    if (!t->req.if_none_match.empty()) {
      signed_headers.emplace_back("If-None-Match", t->req.if_none_match);
    }
    if (!t->req.if_match.empty()) signed_headers.emplace_back("If-Match", t->req.if_match);
    bool has_content_type = false;
    for (const auto& [k, v] : t->req.headers) {
      signed_headers.emplace_back(k, v);
      has_content_type = has_content_type || strcasecmp(k.c_str(), "Content-Type") == 0;
    }
    HeaderList all = signed_headers;
    // curl's own for a body is a form's: none unless asked.
    if (IsWrite(t->req) && !has_content_type) all.emplace_back("Content-Type", "");
    std::string url = t->req.url;
    if (options_.signer != nullptr) {
      SignableRequest sr;
      sr.method = MethodName(t->req.method);
      sr.content_length = t->req.upload.size();
      sr.payload_sha256 = t->req.upload_sha256;
      sr.host = t->url.host_header;
      sr.path = t->url.path;
      sr.query = t->url.query;
      sr.headers = signed_headers;
      auto signed_parts = options_.signer->Sign(sr, std::chrono::system_clock::now());
      if (!signed_parts) {
        t->fail_reason = "no credentials";
        return Status::IOError(t->shown_url + ": " + signed_parts.error().message(),
                               signed_parts.error().sys_errno());
      }
      all.insert(all.end(), signed_parts->headers.begin(), signed_parts->headers.end());
      t->signed_generation = signed_parts->generation;
      if (!signed_parts->query.empty()) {
        url += (t->url.query.empty() && url.find('?') == std::string::npos ? "?" : "&") +
               signed_parts->query;
      }
    }
    auto extra = header_file_->Current();
    t->header_generation = header_file_->generation();
    all.insert(all.end(), extra->begin(), extra->end());
    all.emplace_back("Expect", "");
    if (t->headers != nullptr) curl_slist_free_all(t->headers);
    t->headers = nullptr;
    for (const auto& [k, v] : all) {
      std::string h = v.empty() ? k + ":" : k + ": " + v;
      t->headers = curl_slist_append(t->headers, h.c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());  // curl copies it
    return Status::OK();
  }

  // The latency bucket of `ms` milliseconds (HttpStats::kLatencyBoundsMs).
  static size_t LatencyBucket(uint64_t ms) {
    size_t bucket = 0;
    while (bucket < HttpStats::kLatencyBoundsMs.size() &&
           ms > HttpStats::kLatencyBoundsMs[bucket]) {
      ++bucket;
    }
    return bucket;
  }

  void ReleaseEasy(Transfer* t) {
    if (t->easy != nullptr) {
      curl_multi_remove_handle(multi_, t->easy);
      if (idle_.size() < kIdleEasyHandles) {
        idle_.push_back(t->easy);
      } else {
        curl_easy_cleanup(t->easy);
      }
      t->easy = nullptr;
    }
    if (t->headers != nullptr) {
      curl_slist_free_all(t->headers);
      t->headers = nullptr;
    }
  }

  void Complete(std::unique_ptr<Transfer> t, Result<HttpResponse> r) {
    if (t->file != nullptr) {
      if (std::fclose(t->file) != 0 && r.has_value()) {
        r = Err(Status::FromErrno(t->req.body_file, errno));
      }
      t->file = nullptr;
    }
    const auto us = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t->start).count());
    latency_[LatencyBucket(static_cast<uint64_t>(us) / 1000)].fetch_add(1,
                                                                        std::memory_order_relaxed);
    latency_sum_us_.fetch_add(static_cast<uint64_t>(us), std::memory_order_relaxed);
    (r.has_value() ? succeeded_ : failed_).fetch_add(1, std::memory_order_relaxed);
    if (!r.has_value()) {
      MutexLock lock(&failed_mu_);
      std::string reason = t->fail_reason.empty() ? "error" : t->fail_reason;
      // A server chooses the codes: their number is bounded (each is a metrics series).
      if (failed_by_reason_.size() >= HttpStats::kMaxFailureReasons - 1 &&
          !failed_by_reason_.contains(reason)) {
        reason = "other";
      }
      ++failed_by_reason_[reason];
    }
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    HttpClient::Callback done = std::move(t->done);
    t.reset();
    done(std::move(r));
  }

  // What to do with a finished try.
  struct Verdict {
    std::optional<Result<HttpResponse>> result;  // set: complete with it
    RetryReason reason = RetryReason::kServerError;
    std::string detail;
  };

  // A 206's Content-Range, or nullopt with *v failed ("206 with a bad Content-Range").
  static std::optional<ContentRange> ContentRangeOf(const Transfer& t, Verdict* v) {
    auto cr = ParseContentRange(t.content_range);
    if (!cr) {
      v->result = Err(Status::IOError(t.shown_url + ": 206 with a bad Content-Range '" +
                                      ServerText(t.content_range) + "'"));
    }
    return cr;
  }
  // Whether the body is shorter than its Content-Range says (*v set to retry it).
  static bool ShortBody(const Transfer& t, const ContentRange& cr, Verdict* v) {
    if (t.written == cr.end - cr.start + 1) return false;
    v->reason = RetryReason::kShortBody;
    v->detail = "short body: " + std::to_string(t.written) + " of " +
                std::to_string(cr.end - cr.start + 1) + " bytes";
    return true;
  }

  Verdict Judge(Transfer* t, CURLcode rc) {
    Verdict v;
    auto fail = [&](Status s) {
      v.result = Err(std::move(s));
      return v;
    };
    auto retry = [&](RetryReason r, std::string detail) {
      v.reason = r;
      v.detail = std::move(detail);
      return v;
    };
    const std::string& u = t->shown_url;
    const auto& range = t->req.range;
    long answer = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &answer);
    if (answer > 0) answered_ = true;
    if (rc == CURLE_WRITE_ERROR && t->overflow) {
      if (range && t->status == 200)
        return retry(RetryReason::kFullBody, "200 with the whole object for a range");
      if (!t->req.ranges.empty() && t->status == 200) {
        // A whole object too large to take: nothing delivered, each range is asked alone.
        HttpResponse r;
        r.status = 200;
        r.attempts = t->attempts;
        r.range_bytes.assign(t->req.ranges.size(), 0);
        v.result = std::move(r);
        return v;
      }
      const uint64_t cap = t->req.dst != nullptr        ? t->req.dst_size
                           : t->req.max_body_bytes != 0 ? t->req.max_body_bytes
                                                        : range->length;
      return fail(
          Status::IOError(u + ": the body is longer than " + std::to_string(cap) + " bytes"));
    }
    if (rc != CURLE_OK) {
      std::string what = t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc);
      switch (rc) {
        case CURLE_OPERATION_TIMEDOUT:
          return retry(RetryReason::kTimeout, "timeout: " + what);
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
          return retry(RetryReason::kReset, "connection reset: " + what);
        case CURLE_PARTIAL_FILE:
          return retry(RetryReason::kShortBody, "short body: " + what);
        case CURLE_COULDNT_CONNECT:
          return retry(RetryReason::kConnect, "cannot connect: " + what);
        default:
          t->fail_reason = curl_easy_strerror(rc);
          return fail(Status::IOError(u + ": " + what));
      }
    }
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    t->status = status;
    if (status == 200 || status == 206 || status == 304 || IsSuccess(t)) {
      return Accept(t, status);
    }
    std::string code = S3ErrorCode(t->error_body);
    if (code.empty()) code = t->error_code;
    std::string msg = u + ": " + std::to_string(status) +
                      (*ReasonPhrase(status) ? std::string(" ") + ReasonPhrase(status) : "") +
                      (code.empty() ? "" : " (" + ServerText(code) + ")");
    if (status == 429 || status == 408) return retry(RetryReason::kThrottled, msg);
    if (status == 503 && (code == "SlowDown" || code == "ServerBusy")) {
      return retry(RetryReason::kSlowDown, msg);
    }
    if (status >= 500) return retry(RetryReason::kServerError, msg);
    if ((status == 400 || status == 401 || status == 403) && MayRenewAuthority(t, status, code)) {
      return retry(RetryReason::kAuth, msg);
    }
    t->fail_reason = std::to_string(status) + (code.empty() ? "" : " " + FailureCode(code));
    if (status == 404) return fail(Status::NotFound(msg));
    if (status == 412 && !t->req.if_match.empty()) {
      return fail(Status::Corruption(msg + " (the object changed)"));
    }
    if (status == 403 || status == 401) return fail(Status::IOError(msg, EACCES));
    return fail(Status::IOError(msg));
  }

  // A refused authority: retry (re-signed) when the header file may have a new token (a 401)
  // or the signer is renewing, at most kAuthRetries times per request.
  bool MayRenewAuthority(Transfer* t, long status, const std::string& code) {
    if (t->auth_retries >= HttpClient::kAuthRetries) return false;
    bool may = false;
    if (!header_file_->empty() && status == 401) {
      header_file_->Recheck();
      may = true;
    }
    if (options_.signer != nullptr &&
        options_.signer->OnRefused(t->signed_generation, status, code)) {
      may = true;
    }
    if (may) ++t->auth_retries;
    return may;
  }

  Verdict Accept(Transfer* t, long status) {
    Verdict v;
    // The accepted try's time to its first response byte (from the try's start).
    curl_off_t first_us = 0;
    if (curl_easy_getinfo(t->easy, CURLINFO_STARTTRANSFER_TIME_T, &first_us) == CURLE_OK &&
        first_us >= 0) {
      first_byte_[LatencyBucket(static_cast<uint64_t>(first_us) / 1000)].fetch_add(
          1, std::memory_order_relaxed);
      first_byte_sum_us_.fetch_add(static_cast<uint64_t>(first_us), std::memory_order_relaxed);
    }
    const std::string& u = t->shown_url;
    const auto& range = t->req.range;
    HttpResponse r;
    r.status = status;
    r.etag = t->etag;
    r.attempts = t->attempts;
    r.body_bytes = t->written;
    if (status == 304) {
      if (t->req.if_none_match.empty()) {
        v.result = Err(Status::IOError(u + ": 304 Not Modified to an unconditional request"));
        return v;
      }
      v.result = std::move(r);
      return v;
    }
    if (!t->req.ranges.empty()) return AcceptRanges(t, status, std::move(r));
    r.copy_status = t->copy_status;
    if (IsWrite(t->req)) {
      r.body = std::move(t->body);
      v.result = std::move(r);
      return v;
    }
    if (t->req.method == HttpRequest::Method::kHead) {
      curl_off_t len = -1;
      curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      if (len >= 0) {
        r.content_range = ContentRange{0, len > 0 ? static_cast<uint64_t>(len) - 1 : 0,
                                       static_cast<uint64_t>(len)};
      }
      v.result = std::move(r);
      return v;
    }
    if (status == 206) {
      auto cr = ContentRangeOf(*t, &v);
      if (!cr) return v;
      uint64_t want_start = range ? range->offset : 0;
      uint64_t want_end = range ? range->offset + range->length - 1 : cr->end;
      // A server may end a range early at the end of the object: the caller sees the total.
      bool clipped = cr->end + 1 == cr->total && cr->end < want_end;
      if (cr->start != want_start || (cr->end != want_end && !clipped)) {
        v.result = Err(Status::IOError(u + ": asked bytes " + std::to_string(want_start) + "-" +
                                       std::to_string(want_end) + ", got " +
                                       ServerText(t->content_range)));
        return v;
      }
      if (ShortBody(*t, *cr, &v)) return v;
      r.content_range = cr;
      ignores_range_ = false;
    } else {  // 200: the whole object
      if (range && (range->offset != 0 || t->written > range->length)) {
        v.reason = RetryReason::kFullBody;
        v.detail = "200 with the whole object for a range";
        return v;
      }
      curl_off_t len = -1;
      curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      if (len >= 0 && static_cast<uint64_t>(len) != t->written) {
        v.reason = RetryReason::kShortBody;
        v.detail = "short body";
        return v;
      }
      if (t->written > 0) r.content_range = ContentRange{0, t->written - 1, t->written};
    }
    bytes_received_.fetch_add(t->written, std::memory_order_relaxed);
    if (t->req.background) background_bytes_.fetch_add(t->written, std::memory_order_relaxed);
    r.body = std::move(t->body);
    v.result = std::move(r);
    return v;
  }

  // A multi-range GET's answer: a 206 multipart/byteranges, a 206 of one range (a server that
  // coalesced the ranges, or sent the first only), or a 200 with the whole object. Each asked
  // range whose bytes all came is copied to its buffer; the others get 0 in range_bytes.
  Verdict AcceptRanges(Transfer* t, long status, HttpResponse r) {
    Verdict v;
    std::vector<BytePart> parts;
    uint64_t total = 0;
    r.range_bytes.assign(t->req.ranges.size(), 0);
    if (status == 206) {
      if (auto boundary = ByteRangesBoundary(t->content_type)) {
        // A body that does not parse delivers nothing: each range is asked alone.
        auto parsed = ParseByteRanges(t->body, *boundary);
        if (parsed) {
          parts = std::move(*parsed);
          r.multipart = true;
        }
      } else {
        auto cr = ContentRangeOf(*t, &v);
        if (!cr || ShortBody(*t, *cr, &v)) return v;
        parts.push_back({*cr, t->body});
      }
      if (!parts.empty()) total = parts.front().range.total;
      ignores_range_ = false;
    } else {  // 200: the whole object, within the cap
      curl_off_t len = -1;
      curl_easy_getinfo(t->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      if (len >= 0 && static_cast<uint64_t>(len) != t->written) {
        v.reason = RetryReason::kShortBody;
        v.detail = "short body";
        return v;
      }
      total = t->written;
      if (total > 0) parts.push_back({ContentRange{0, total - 1, total}, t->body});
    }
    r.range_bytes = DeliverParts(parts, total, t->req.ranges, t->req.range_dsts);
    r.body_bytes = 0;
    for (uint64_t b : r.range_bytes) r.body_bytes += b;
    if (total > 0) r.content_range = ContentRange{0, total - 1, total};
    bytes_received_.fetch_add(t->written, std::memory_order_relaxed);
    if (t->req.background) background_bytes_.fetch_add(t->written, std::memory_order_relaxed);
    v.result = std::move(r);
    return v;
  }

  void OnDone(Transfer* raw, CURLcode rc) {
    active_.erase(raw);
    if (raw->req.background) --background_active_;
    std::unique_ptr<Transfer> t(raw);
    Verdict v = Judge(t.get(), rc);
    ReleaseEasy(t.get());
    if (v.result) {
      Complete(std::move(t), std::move(*v.result));
      return;
    }
    t->last_reason = v.detail;
    auto now = Clock::now();
    milliseconds wait{0};
    auto server_wait = t->retry_after.empty()
                           ? std::nullopt
                           : ParseRetryAfter(t->retry_after, std::chrono::system_clock::now());
    if (v.reason == RetryReason::kAuth) {
      // A renewal takes a round trip to STS or a metadata service: 200 ms, then doubling.
      const int64_t base = int64_t{200} << std::min(t->auth_retries - 1, 4);
      wait = milliseconds(base + std::uniform_int_distribution<int64_t>(0, base / 2)(rng_));
    } else {
      int shift = std::min(t->attempts - 1, 20);
      auto cap =
          std::min(options_.max_backoff, milliseconds(options_.base_backoff.count() << shift));
      if (server_wait) {
        // A server that says when to come back is busy: at least the whole backoff step (the
        // jitter above it), so "Retry-After: 0" on every answer makes no storm (it made 10
        // tries in 12 ms), and the requests of one read retry a few times a second at most.
        wait = cap + milliseconds(std::uniform_int_distribution<int64_t>(0, cap.count() / 2)(rng_));
      } else {
        wait = milliseconds(std::uniform_int_distribution<int64_t>(0, cap.count())(rng_));
      }
    }
    // The server may ask for a longer wait, never a shorter one.
    if (server_wait) wait = std::max(wait, *server_wait);
    if (v.reason == RetryReason::kFullBody &&
        (ignores_range_ || t->attempts >= HttpClient::kFullBodyTries)) {
      // Not worth the deadline: the next answers are most likely whole objects too.
      ignores_range_ = true;
      t->fail_reason = "ignores Range";
      std::string msg = t->shown_url + ": the server ignores Range (" + v.detail + ", " +
                        std::to_string(t->attempts) + (t->attempts == 1 ? " try)" : " tries)");
      Complete(std::move(t), Err(Status::IOError(msg)));
      return;
    }
    const bool unreached = v.reason == RetryReason::kConnect && !answered_ &&
                           t->attempts >= HttpClient::kUnreachedTries;
    if (unreached || t->attempts >= options_.max_attempts || now + wait >= t->deadline) {
      auto spent = std::chrono::duration_cast<milliseconds>(now - t->start).count();
      std::string msg = t->shown_url + ": gave up after " + std::to_string(t->attempts) +
                        (t->attempts == 1 ? " try" : " tries") + " in " + std::to_string(spent) +
                        " ms (last: " + v.detail + ")";
      t->fail_reason = std::string("gave up: ") + RetryReasonName(v.reason);
      Complete(std::move(t), Err(Status::IOError(msg, ETIMEDOUT)));
      return;
    }
    retries_[static_cast<size_t>(v.reason)].fetch_add(1, std::memory_order_relaxed);
    t->next_try = now + wait;
    waiting_.emplace(t->next_try, std::move(t));
  }

  // Transfers wait in demand_ or background_ until the client hands them to curl (Dispatch),
  // so the client, not curl's connection queue, decides who gets the next free connection.
  void Launch(std::unique_ptr<Transfer> t) {
    if (t->req.background) {
      background_.push_back(std::move(t));
    } else {
      demand_.push_back(std::move(t));
    }
  }

  // At most max_connections_per_host transfers run (a client talks to one store's host).
  // Demand requests come first, with two limits that keep speculation alive under a steady
  // demand load (8 readers at level 10 keep 80 piece requests queued; before, speculation then
  // never got a connection, so every piece stayed a latency-bound demand request):
  // - background requests use at most max - kReservedForDemand connections, so demand always
  //   has kReservedForDemand of its own;
  // - while background requests wait and fewer than kGuaranteedBackground run, demand takes at
  //   most max - kGuaranteedBackground: the speculative reads that turn later demand reads into
  //   cache hits keep a share of the link.
  void Dispatch() {
    ExpireQueued(Clock::now());
    const int max = std::max(1, options_.max_connections_per_host);
    const int background_max = std::max(1, max - HttpClient::kReservedForDemand);
    const int guaranteed = std::min(HttpClient::kGuaranteedBackground, background_max);
    for (;;) {
      const int active = static_cast<int>(active_.size());
      if (active >= max) return;
      const bool background_may = !background_.empty() && background_active_ < background_max;
      const bool background_owed = background_may && background_active_ < guaranteed;
      const int demand_max = background_owed ? max - (guaranteed - background_active_) : max;
      std::unique_ptr<Transfer> t;
      if (!demand_.empty() && active < demand_max) {
        t = std::move(demand_.front());
        demand_.pop_front();
      } else if (background_may) {
        t = std::move(background_.front());
        background_.pop_front();
        if (t->attempts == 0) {  // the deadline counts from the first try, not the wait
          t->start = Clock::now();
          t->deadline = t->start + options_.deadline;
        }
      } else {
        return;
      }
      LaunchNow(std::move(t));
    }
  }

  // A transfer still waiting for a connection when its deadline (counted from its submission)
  // passes fails then, a background one too (its tries get a deadline of their own when they
  // start): a stalled origin that holds every connection cannot hold a read that waits for a
  // queued fetch past the deadline.
  // Sets next_queued_deadline_ (the loop wakes then).
  void ExpireQueued(Clock::time_point now) {
    std::vector<std::unique_ptr<Transfer>> expired;
    next_queued_deadline_ = Clock::time_point::max();
    for (auto* queue : {&demand_, &background_}) {
      for (auto it = queue->begin(); it != queue->end();) {
        Transfer* t = it->get();
        if (t->deadline <= now) {
          expired.push_back(std::move(*it));
          it = queue->erase(it);
        } else {
          next_queued_deadline_ = std::min(next_queued_deadline_, t->deadline);
          ++it;
        }
      }
    }
    for (auto& t : expired) {
      auto spent = std::chrono::duration_cast<milliseconds>(now - t->start).count();
      std::string msg = t->shown_url + ": gave up after " + std::to_string(t->attempts) +
                        (t->attempts == 1 ? " try" : " tries") + " in " + std::to_string(spent) +
                        " ms (waited for a connection past the deadline" +
                        (t->last_reason.empty() ? "" : "; last: " + t->last_reason) + ")";
      t->fail_reason = "gave up: no connection";
      Complete(std::move(t), Err(Status::IOError(msg, ETIMEDOUT)));
    }
  }

  void LaunchNow(std::unique_ptr<Transfer> t) {
    Status s = StartTry(t.get());
    if (!s.ok()) {
      ReleaseEasy(t.get());
      Complete(std::move(t), Err(s));
      return;
    }
    active_.insert(t.get());
    if (t->req.background) ++background_active_;
    t.release();  // owned by its easy handle (CURLOPT_PRIVATE) until OnDone
  }

  void Loop() {
    NameThisThread("pcrfs-http");
    for (;;) {
      std::deque<std::unique_ptr<Transfer>> fresh;
      bool stop;
      {
        MutexLock lock(&mu_);
        fresh.swap(queue_);
        stop = stop_;
      }
      if (stop) {
        Shutdown(std::move(fresh));
        return;
      }
      for (auto& t : fresh) Launch(std::move(t));
      auto now = Clock::now();
      while (!waiting_.empty() && waiting_.begin()->first <= now) {
        auto node = waiting_.extract(waiting_.begin());
        Launch(std::move(node.mapped()));
      }
      Dispatch();
      int running = 0;
      curl_multi_perform(multi_, &running);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
        OnDone(t, m->data.result);
      }
      Dispatch();  // connections the finished transfers freed (a new handle makes the poll short)
      int timeout_ms = 1000;
      for (Clock::time_point when :
           {waiting_.empty() ? Clock::time_point::max() : waiting_.begin()->first,
            next_queued_deadline_}) {
        if (when == Clock::time_point::max()) continue;
        auto until = std::chrono::duration_cast<milliseconds>(when - Clock::now());
        timeout_ms =
            std::min(timeout_ms, static_cast<int>(std::clamp<int64_t>(until.count(), 0, 1000)));
      }
      long curl_timeout = -1;
      curl_multi_timeout(multi_, &curl_timeout);
      if (curl_timeout >= 0) timeout_ms = std::min<int>(timeout_ms, static_cast<int>(curl_timeout));
      curl_multi_poll(multi_, nullptr, 0, timeout_ms, nullptr);
    }
  }

  void Shutdown(std::deque<std::unique_ptr<Transfer>> fresh) {
    std::vector<std::unique_ptr<Transfer>> all;
    for (auto& t : fresh) all.push_back(std::move(t));
    for (auto& [when, t] : waiting_) all.push_back(std::move(t));
    waiting_.clear();
    for (auto& t : demand_) all.push_back(std::move(t));
    demand_.clear();
    for (auto& t : background_) all.push_back(std::move(t));
    background_.clear();
    for (Transfer* t : active_) all.emplace_back(t);
    active_.clear();
    background_active_ = 0;
    for (auto& t : all) {
      ReleaseEasy(t.get());
      Status s = Status::IOError(t->shown_url + ": the client is shutting down");
      t->fail_reason = "shutting down";
      Complete(std::move(t), Err(std::move(s)));
    }
    // Requests submitted while shutting down are failed by Submit().
  }

  HttpClientOptions options_;
  std::unique_ptr<HeaderFile> header_file_;  // I/O thread only, but for Recheck()
  CURLM* multi_ = nullptr;
  std::thread thread_;
  std::vector<CURL*> idle_;     // I/O thread only
  std::set<Transfer*> active_;  // in curl, owned through CURLOPT_PRIVATE; I/O thread only
  std::multimap<Clock::time_point, std::unique_ptr<Transfer>> waiting_;  // I/O thread only
  std::deque<std::unique_ptr<Transfer>> demand_;      // I/O thread only; not yet in curl
  std::deque<std::unique_ptr<Transfer>> background_;  // I/O thread only; not yet in curl
  int background_active_ = 0;                         // I/O thread only; of active_
  // A try of this client got an answer from a server (any status); I/O thread only.
  bool answered_ = false;
  // A request gave up on whole objects answered for a range, and no range was answered
  // since (HttpClient::kFullBodyTries); I/O thread only.
  bool ignores_range_ = false;
  // The earliest deadline of a transfer in demand_ or background_ (ExpireQueued); I/O thread.
  Clock::time_point next_queued_deadline_ = Clock::time_point::max();
  std::mt19937_64 rng_;  // I/O thread only

  Mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> requests_{0}, attempts_{0}, succeeded_{0}, failed_{0}, bytes_received_{0},
      in_flight_{0}, background_requests_{0}, background_bytes_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(RetryReason::kCount)> retries_{};
  std::array<std::atomic<uint64_t>, HttpStats::kLatencyBoundsMs.size() + 1> latency_{};
  std::array<std::atomic<uint64_t>, HttpStats::kLatencyBoundsMs.size() + 1> first_byte_{};
  std::atomic<uint64_t> latency_sum_us_{0}, first_byte_sum_us_{0};
  mutable Mutex failed_mu_;
  std::map<std::string, uint64_t> failed_by_reason_ GUARDED_BY(failed_mu_);
};

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::Create(HttpClientOptions options) {
  auto header_file = HeaderFile::Open(options.headers_file);
  if (!header_file.has_value()) return Err(header_file.error());
  auto impl = std::make_unique<Impl>(std::move(options), std::move(*header_file));
  PCRFS_RETURN_ERR_IF_ERROR(impl->Start());
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

void HttpClient::Fetch(HttpRequest request, Callback done) {
  auto t = std::make_unique<Transfer>();
  t->shown_url = RedactUrl(request.url);
  t->start = Clock::now();
  t->deadline = t->start + impl_->options().deadline;
  t->done = std::move(done);
  auto parts = SplitUrl(request.url);
  Status bad;
  if (!parts) {
    bad = Status::InvalidArgument(t->shown_url + ": not an http(s) URL");
  } else if (request.range && request.range->length == 0) {
    bad = Status::InvalidArgument(t->shown_url + ": an empty byte range");
  } else if (request.range && request.dst != nullptr && request.dst_size < request.range->length) {
    bad = Status::InvalidArgument(t->shown_url + ": the buffer is smaller than the range");
  } else if (!request.ranges.empty()) {
    bool ok = request.ranges.size() >= 2 && request.range_dsts.size() == request.ranges.size() &&
              !request.range && request.dst == nullptr && request.body_file.empty() &&
              !request.on_progress && request.method == HttpRequest::Method::kGet;
    for (size_t i = 0; ok && i < request.ranges.size(); ++i) {
      const ByteRange& r = request.ranges[i];
      ok = r.length > 0 && request.range_dsts[i] != nullptr && r.offset + r.length > r.offset &&
           (i == 0 || request.ranges[i - 1].offset + request.ranges[i - 1].length <= r.offset);
    }
    if (!ok) bad = Status::InvalidArgument(t->shown_url + ": a bad multi-range request");
    if (request.max_body_bytes == 0) request.max_body_bytes = MultiRangeBodyCap(request.ranges);
  }
  if (!bad.ok()) {
    t->done(Err(bad));
    return;
  }
  t->url = std::move(*parts);
  t->req = std::move(request);
  impl_->Submit(std::move(t));
}

Result<HttpResponse> HttpClient::FetchBlocking(HttpRequest request) {
  if (impl_->OnIoThread()) {
    return Err(Status::InvalidArgument("FetchBlocking called from an HttpClient callback"));
  }
  std::promise<Result<HttpResponse>> promise;
  auto future = promise.get_future();
  Fetch(std::move(request),
        [&promise](Result<HttpResponse> r) { promise.set_value(std::move(r)); });
  return future.get();
}

HttpStats HttpClient::stats() const { return impl_->Stats(); }
void HttpClient::Reload() { impl_->Reload(); }
const HttpClientOptions& HttpClient::options() const { return impl_->options(); }

}  // namespace pcrfs
