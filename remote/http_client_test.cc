#include "remote/http_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/aws_credential_source.h"
#include "remote/sigv4.h"
#include "remote/test_server.h"

namespace pcrfs {
namespace {

std::string Object(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7) % 26);
  return s;
}

// The "Range: bytes=A-B" of a request, or {-1, -1}.
std::pair<long, long> RangeOf(const std::string& req) {
  size_t p = req.find("Range: bytes=");
  if (p == std::string::npos) return {-1, -1};
  long a = -1, b = -1;
  std::sscanf(req.c_str() + p, "Range: bytes=%ld-%ld", &a, &b);
  return {a, b};
}

// A correct server for `obj`: 206 for a range, 200 for the whole object, ETag "v1".
TestReply Serve(const std::string& obj, const std::string& req) {
  auto [a, b] = RangeOf(req);
  if (req.find("If-None-Match: \"v1\"") != std::string::npos) {
    return {"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n"};
  }
  if (a < 0) return TestHttpServer::Reply(200, "OK", obj, "ETag: \"v1\"\r\n");
  b = std::min<long>(b, static_cast<long>(obj.size()) - 1);
  return TestHttpServer::Reply(206, "Partial Content", obj.substr(a, b - a + 1),
                               "ETag: \"v1\"\r\nContent-Range: bytes " + std::to_string(a) + "-" +
                                   std::to_string(b) + "/" + std::to_string(obj.size()) + "\r\n");
}

HttpClientOptions Fast() {
  HttpClientOptions o;
  o.base_backoff = std::chrono::milliseconds(5);
  o.max_backoff = std::chrono::milliseconds(20);
  o.deadline = std::chrono::milliseconds(5000);
  return o;
}

std::unique_ptr<HttpClient> MakeClient(HttpClientOptions o = Fast()) {
  auto c = HttpClient::Create(std::move(o));
  EXPECT_TRUE(c.has_value()) << c.error().ToString();
  return std::move(*c);
}

Result<HttpResponse> GetRange(HttpClient& c, const std::string& url, uint64_t off, uint64_t n,
                              std::string* out) {
  out->assign(n, '\0');
  HttpRequest r;
  r.url = url;
  r.range = ByteRange{off, n};
  r.dst = reinterpret_cast<uint8_t*>(out->data());
  r.dst_size = n;
  return c.FetchBlocking(std::move(r));
}

TEST(HttpClientTest, ParsersOfHeadersAndBodies) {
  auto cr = ParseContentRange("bytes 10-19/100");
  ASSERT_TRUE(cr);
  EXPECT_EQ(cr->start, 10u);
  EXPECT_EQ(cr->end, 19u);
  EXPECT_EQ(cr->total, 100u);
  EXPECT_FALSE(ParseContentRange("bytes 10-19/*"));
  EXPECT_FALSE(ParseContentRange("bytes 19-10/100"));
  EXPECT_FALSE(ParseContentRange("bytes 10-100/100"));
  EXPECT_FALSE(ParseContentRange("bytes 1-2/3x"));
  auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37
  EXPECT_EQ(ParseRetryAfter("3", now), std::chrono::milliseconds(3000));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:39 GMT", now), std::chrono::milliseconds(2000));
  EXPECT_FALSE(ParseRetryAfter("soon", now));
  EXPECT_EQ(S3ErrorCode("<Error><Code>AccessDenied</Code><Message>x</Message></Error>"),
            "AccessDenied");
  EXPECT_EQ(S3ErrorCode("nothing"), "");
}

TEST(HttpClientTest, RangedGetIntoBufferAndWholeObject) {
  const std::string obj = Object(100000);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, req); });
  auto client = MakeClient();
  std::string got;
  auto r = GetRange(*client, server.url("/o"), 1000, 5000, &got);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(got, obj.substr(1000, 5000));
  EXPECT_EQ(r->etag, "\"v1\"");
  ASSERT_TRUE(r->content_range);
  EXPECT_EQ(r->content_range->total, obj.size());
  EXPECT_EQ(RangeOf(server.received().back()), (std::pair<long, long>(1000, 5999)));

  HttpRequest whole;
  whole.url = server.url("/o");
  auto w = client->FetchBlocking(whole);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->status, 200);
  EXPECT_EQ(w->body, obj);
  EXPECT_EQ(w->content_range->total, obj.size());

  HttpRequest cond;
  cond.url = server.url("/o");
  cond.if_none_match = "\"v1\"";
  auto c = client->FetchBlocking(cond);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status, 304);

  HttpStats s = client->stats();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.succeeded, 3u);
  EXPECT_EQ(s.bytes_received, 5000u + obj.size());
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_GT(s.LatencyPercentileMs(0.5), 0u);
  EXPECT_NE(s.ToJson().find("\"requests\":3"), std::string::npos);
}

TEST(HttpClientTest, Ipv6Literal) {
  const std::string obj = Object(1000);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, req); },
                        /*ipv6=*/true);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback";
  auto client = MakeClient();
  std::string got;
  auto r = GetRange(*client, server.url("/o"), 3, 30, &got);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(got, obj.substr(3, 30));
  EXPECT_NE(server.received().back().find("Host: [::1]:"), std::string::npos);
}

TEST(HttpClientTest, ManyConcurrentAsyncFetches) {
  const std::string obj = Object(1 << 20);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, req); });
  auto client = MakeClient();
  const int kN = 64;
  std::vector<std::string> bufs(kN, std::string(4096, '\0'));
  std::atomic<int> ok{0}, done{0};
  std::promise<void> all;
  for (int i = 0; i < kN; ++i) {
    HttpRequest r;
    r.url = server.url("/o");
    r.range = ByteRange{static_cast<uint64_t>(i) * 10000, 4096};
    r.dst = reinterpret_cast<uint8_t*>(bufs[i].data());
    r.dst_size = 4096;
    client->Fetch(r, [&, i](Result<HttpResponse> res) {
      if (res.has_value() && bufs[i] == obj.substr(i * 10000, 4096)) ++ok;
      if (++done == kN) all.set_value();
    });
  }
  all.get_future().wait();
  EXPECT_EQ(ok.load(), kN);
}

// Demand requests go first, yet speculation keeps a share of the connections: with demand
// requests queued, background ones still run (kGuaranteedBackground of them), never more than
// max - kReservedForDemand, and never more than max of both. Each request is held 100 ms at the
// server, which counts how many of each kind it serves at once.
class ConcurrencyServer {
 public:
  explicit ConcurrencyServer(std::string obj)
      : obj_(std::move(obj)), server_([this](const std::string& req, int) { return Hold(req); }) {}
  std::string url(const std::string& path) const { return server_.url(path); }
  struct Seen {
    int demand_max = 0, background_max = 0, total_max = 0;
    std::vector<char> order;  // 'd' or 'b' as the requests arrived
  };
  Seen seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  TestReply Hold(const std::string& req) {
    const bool bg = req.rfind("GET /b", 0) == 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      ++(bg ? background_ : demand_);
      seen_.demand_max = std::max(seen_.demand_max, demand_);
      seen_.background_max = std::max(seen_.background_max, background_);
      seen_.total_max = std::max(seen_.total_max, demand_ + background_);
      seen_.order.push_back(bg ? 'b' : 'd');
    }
    // Long enough that every connection the client may open is open before the first
    // answer, even under a sanitizer on a busy machine (30 ms was not, once, under TSan).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    {
      std::lock_guard<std::mutex> l(mu_);
      --(bg ? background_ : demand_);
    }
    return Serve(obj_, req);
  }
  const std::string obj_;
  std::mutex mu_;
  int demand_ = 0, background_ = 0;
  Seen seen_;
  TestHttpServer server_;
};

// Sends `demand` requests for /d and `background` ones for /b at once; all must succeed.
void FetchMany(HttpClient& client, const ConcurrencyServer& server, const std::string& obj,
               int demand, int background) {
  const int n = demand + background;
  std::vector<std::string> bufs(static_cast<size_t>(n), std::string(1024, '\0'));
  std::atomic<int> ok{0}, done{0};
  std::promise<void> all;
  for (int i = 0; i < n; ++i) {
    HttpRequest r;
    r.background = i >= demand;
    r.url = server.url(r.background ? "/b" : "/d");
    r.range = ByteRange{static_cast<uint64_t>(i) * 1024, 1024};
    r.dst = reinterpret_cast<uint8_t*>(bufs[i].data());
    r.dst_size = 1024;
    client.Fetch(r, [&, i](Result<HttpResponse> res) {
      if (res.has_value() && bufs[i] == obj.substr(static_cast<size_t>(i) * 1024, 1024)) ++ok;
      if (++done == n) all.set_value();
    });
  }
  all.get_future().wait();
  EXPECT_EQ(ok.load(), n);
}

TEST(HttpClientTest, DemandFirstButSpeculationKeepsItsShare) {
  const std::string obj = Object(1 << 17);
  HttpClientOptions o = Fast();
  o.max_connections_per_host = 12;
  const int background_max = 12 - HttpClient::kReservedForDemand;
  {
    ConcurrencyServer server(obj);
    auto client = MakeClient(o);
    FetchMany(*client, server, obj, 48, 16);
    const auto seen = server.seen();
    EXPECT_LE(seen.total_max, 12);
    EXPECT_LE(seen.background_max, background_max);
    // Background requests ran while demand ones were still queued: the guaranteed share
    // arrived before the last few demand requests did (before: only once demand drained).
    EXPECT_GE(seen.background_max, HttpClient::kGuaranteedBackground);
    const auto first_bg = std::find(seen.order.begin(), seen.order.end(), 'b');
    const auto demand_after = std::count(first_bg, seen.order.end(), 'd');
    EXPECT_GE(demand_after, 24) << "speculation waited until demand drained";
    // And demand still had most of the connections.
    EXPECT_GE(seen.demand_max, 12 - HttpClient::kGuaranteedBackground);
  }
  {  // Demand alone uses every connection; background alone all but the reserved ones.
    ConcurrencyServer server(obj);
    auto client = MakeClient(o);
    FetchMany(*client, server, obj, 36, 0);
    EXPECT_EQ(server.seen().demand_max, 12);
  }
  {
    ConcurrencyServer server(obj);
    auto client = MakeClient(o);
    FetchMany(*client, server, obj, 0, 24);
    EXPECT_EQ(server.seen().background_max, background_max);
  }
}

TEST(HttpClientTest, RetriesServerErrorsHonouringRetryAfter) {
  const std::string obj = Object(1000);
  TestHttpServer server([&](const std::string& req, int n) {
    if (n == 1) {
      return TestHttpServer::Reply(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>",
                                   "Retry-After: 1\r\n");
    }
    if (n == 2) return TestHttpServer::Reply(429, "Too Many Requests", "");
    if (n == 3) return TestHttpServer::Reply(500, "Internal Server Error", "");
    return Serve(obj, req);
  });
  auto client = MakeClient();
  std::string got;
  auto start = std::chrono::steady_clock::now();
  auto r = GetRange(*client, server.url("/o"), 10, 20, &got);
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(got, obj.substr(10, 20));
  EXPECT_EQ(r->attempts, 4);
  EXPECT_GE(waited, std::chrono::milliseconds(1000));  // the Retry-After, not the 5 ms backoff
  HttpStats s = client->stats();
  EXPECT_EQ(s.retries[static_cast<size_t>(RetryReason::kSlowDown)], 1u);
  EXPECT_EQ(s.retries[static_cast<size_t>(RetryReason::kThrottled)], 1u);
  EXPECT_EQ(s.retries[static_cast<size_t>(RetryReason::kServerError)], 1u);
}

// "Retry-After: 0" on every answer asks for no wait: the whole backoff step still applies
// (it made 10 tries in 12 ms), and a longer Retry-After still wins (the test above).
TEST(HttpClientTest, RetryAfterZeroKeepsTheBackoff) {
  const std::string obj = Object(100);
  TestHttpServer server([&](const std::string& req, int n) {
    if (n <= 4) return TestHttpServer::Reply(503, "Service Unavailable", "", "Retry-After: 0\r\n");
    return Serve(obj, req);
  });
  HttpClientOptions o = Fast();
  o.base_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(2000);
  auto client = MakeClient(o);
  std::string got;
  auto start = std::chrono::steady_clock::now();
  auto r = GetRange(*client, server.url("/o"), 0, 10, &got);
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->attempts, 5);
  // Waits of at least 100 + 200 + 400 + 800 ms, at most 1.5 times that.
  EXPECT_GE(waited, std::chrono::milliseconds(1500));
  EXPECT_LT(waited, std::chrono::milliseconds(4000));
}

TEST(HttpClientTest, ServerTextIsOneShortPrintableLine) {
  EXPECT_EQ(ServerText("NoSuchKey"), "NoSuchKey");
  EXPECT_EQ(ServerText("a\r\nb\x01\xff"), "a??b??");
  EXPECT_EQ(ServerText(std::string(100000, 'x')), std::string(64, 'x') + "...");
  EXPECT_EQ(ServerText("abcdef", 3), "abc...");
}

// A Content-Range of 90 KB (leading zeros parse) is not repeated in the message: one short
// line.
TEST(HttpClientTest, AWrongContentRangeIsShownShort) {
  TestHttpServer server([&](const std::string&, int) {
    return TestHttpServer::Reply(
        206, "Partial Content", "0123456789",
        "Content-Range: bytes " + std::string(90000, '0') + "5-14/100\r\n");
  });
  auto client = MakeClient();
  std::string got;
  auto r = GetRange(*client, server.url("/o"), 0, 10, &got);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("asked bytes 0-9, got bytes 0000"), std::string::npos)
      << r.error().message().substr(0, 300);
  EXPECT_LT(r.error().message().size(), 300u) << r.error().message().substr(0, 300);
}

TEST(HttpClientTest, RetriesResetsAndShortBodies) {
  const std::string obj = Object(10000);
  TestHttpServer server([&](const std::string& req, int n) {
    TestReply r = Serve(obj, req);
    if (n == 1) return TestReply{"", /*reset=*/true};
    if (n == 2) r.bytes.resize(r.bytes.size() - 100);  // a short body, then FIN
    if (n == 3) {
      r.bytes.resize(r.bytes.size() - 100);
      r.reset = true;
    }
    return r;
  });
  auto client = MakeClient();
  std::string got;
  auto r = GetRange(*client, server.url("/o"), 0, 5000, &got);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(got, obj.substr(0, 5000));
  EXPECT_EQ(r->attempts, 4);
  HttpStats s = client->stats();
  EXPECT_EQ(s.retries[static_cast<size_t>(RetryReason::kReset)] +
                s.retries[static_cast<size_t>(RetryReason::kShortBody)],
            3u);
  EXPECT_GE(s.retries[static_cast<size_t>(RetryReason::kShortBody)], 1u);
}

TEST(HttpClientTest, FullBodyForARange) {
  const std::string obj = Object(10000);
  std::atomic<bool> honour_range{false};
  TestHttpServer server([&](const std::string& req, int) {
    if (!honour_range) return TestHttpServer::Reply(200, "OK", obj);
    return Serve(obj, req);
  });
  auto client = MakeClient();
  std::string got;
  // A 200 with the whole object when the range is the whole object: accepted.
  auto whole = GetRange(*client, server.url("/o"), 0, obj.size(), &got);
  ASSERT_TRUE(whole.has_value()) << whole.error().ToString();
  EXPECT_EQ(got, obj);
  EXPECT_EQ(whole->content_range->total, obj.size());
  // Any other range: retried, then an error, never the wrong bytes.
  auto part = GetRange(*client, server.url("/o"), 100, 50, &got);
  ASSERT_FALSE(part.has_value());
  EXPECT_NE(part.error().message().find("200 with the whole object"), std::string::npos)
      << part.error().ToString();
  EXPECT_EQ(part.error().code(), Status::Code::kIOError);
  auto prefix = GetRange(*client, server.url("/o"), 0, 50, &got);
  ASSERT_FALSE(prefix.has_value());
  EXPECT_GT(client->stats().retries[static_cast<size_t>(RetryReason::kFullBody)], 0u);
  // Into memory (no buffer given), a range's answer is held to the range's length too: a server
  // that ignores ranges cannot make the client take a whole large object into memory.
  HttpRequest in_memory;
  in_memory.url = server.url("/o");
  in_memory.range = ByteRange{0, 50};
  auto held = client->FetchBlocking(in_memory);
  ASSERT_FALSE(held.has_value());
  EXPECT_NE(held.error().message().find("200 with the whole object"), std::string::npos)
      << held.error().ToString();
  HttpRequest capped;
  capped.url = server.url("/o");
  capped.max_body_bytes = obj.size() - 1;
  auto over = client->FetchBlocking(capped);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().message(), server.url("/o") + ": the body is longer than " +
                                        std::to_string(obj.size() - 1) + " bytes");
  capped.max_body_bytes = obj.size();
  auto fits = client->FetchBlocking(capped);
  ASSERT_TRUE(fits.has_value()) << fits.error().ToString();
  EXPECT_EQ(fits->body, obj);
  // The server starts honouring ranges: fine again.
  honour_range = true;
  auto again = GetRange(*client, server.url("/o"), 100, 50, &got);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(got, obj.substr(100, 50));
}

TEST(HttpClientTest, ForbiddenAndNotFoundAreNeverRetried) {
  TestHttpServer server([&](const std::string& req, int) {
    if (req.find("GET /missing") == 0) {
      return TestHttpServer::Reply(404, "Not Found", "<Error><Code>NoSuchKey</Code></Error>");
    }
    return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
  });
  auto client = MakeClient();
  std::string got;
  auto denied = GetRange(*client, server.url("/secret?X-Token=abc"), 0, 10, &got);
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().message(), server.url("/secret") + ": 403 Forbidden (AccessDenied)");
  EXPECT_EQ(denied.error().sys_errno(), EACCES);
  auto missing = GetRange(*client, server.url("/missing"), 0, 10, &got);
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(missing.error().IsNotFound());
  EXPECT_EQ(missing.error().message(), server.url("/missing") + ": 404 Not Found (NoSuchKey)");
  EXPECT_EQ(server.requests(), 2);
}

TEST(HttpClientTest, FailureCodesArePlainAndBoundedInNumber) {
  EXPECT_EQ(FailureCode("AccessDenied"), "AccessDenied");
  EXPECT_EQ(FailureCode("Auth.Failed2"), "Auth.Failed2");
  EXPECT_EQ(FailureCode(""), "");
  EXPECT_EQ(FailureCode(std::string(64, 'a')), std::string(64, 'a'));
  EXPECT_EQ(FailureCode(std::string(65, 'a')), "other");
  EXPECT_EQ(FailureCode("Access Denied"), "other");
  EXPECT_EQ(FailureCode("a\"b"), "other");
  EXPECT_EQ(FailureCode("\xff\xfe"), "other");
  // The server names the code in the path: GET /CODE.
  TestHttpServer server([&](const std::string& req, int) {
    std::string code = req.substr(5, req.find(' ', 5) - 5);
    if (code == "bad") code = "\xff\xfeUtf8";  // not UTF-8: nlohmann's dump() throws on it
    return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>" + code + "</Code></Error>");
  });
  auto client = MakeClient();
  std::string got;
  std::vector<std::string> codes = {"bad", "Quote%22d", std::string(100, 'x')};
  for (int i = 0; i < 40; ++i) codes.push_back("Code" + std::to_string(i));
  for (const std::string& code : codes) {
    auto r = GetRange(*client, server.url("/" + code), 0, 10, &got);
    ASSERT_FALSE(r.has_value());
  }
  const HttpStats s = client->stats();
  EXPECT_EQ(s.failed, codes.size());
  EXPECT_EQ(s.failed_by_reason.size(), HttpStats::kMaxFailureReasons);
  uint64_t total = 0;
  for (const auto& [reason, n] : s.failed_by_reason) {
    total += n;
    EXPECT_TRUE(reason == "other" || FailureCode(reason.substr(4)) == reason.substr(4)) << reason;
  }
  EXPECT_EQ(total, codes.size());
  EXPECT_EQ(s.failed_by_reason.at("403 other"), 3u);  // the three codes that are not plain
  EXPECT_EQ(s.failed_by_reason.at("403 Code0"), 1u);
  // Beyond the cap: the codes not yet seen (403 other, 30 codes, other: 32 keys).
  EXPECT_EQ(s.failed_by_reason.at("other"), 40u - 30u);
  EXPECT_NO_THROW((void)s.ToJson());
}

TEST(HttpClientTest, DeadlineBoundsAStalledServer) {
  TestHttpServer server([&](const std::string&, int) {
    TestReply r = TestHttpServer::Reply(200, "OK", "late");
    r.delay_ms = 3000;
    return r;
  });
  HttpClientOptions o = Fast();
  o.deadline = std::chrono::milliseconds(700);
  auto client = MakeClient(o);
  HttpRequest r;
  r.url = server.url("/slow");
  auto start = std::chrono::steady_clock::now();
  auto res = client->FetchBlocking(r);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(res.has_value());
  EXPECT_EQ(res.error().code(), Status::Code::kIOError);
  EXPECT_NE(res.error().message().find("gave up after"), std::string::npos)
      << res.error().ToString();
  EXPECT_NE(res.error().message().find("timeout"), std::string::npos);
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  EXPECT_GE(took, std::chrono::milliseconds(600));
}

// A request waiting for a connection fails at its deadline (counted from its submission),
// even while the connection is held longer by a background try (whose deadline starts when it
// starts): before, it waited for that try to end, then had a whole deadline of its own.
TEST(HttpClientTest, AQueuedRequestFailsAtItsDeadline) {
  TestHttpServer server([&](const std::string&, int) {
    TestReply r = TestHttpServer::Reply(200, "OK", "late");
    r.delay_ms = 2500;
    return r;
  });
  HttpClientOptions o = Fast();
  o.deadline = std::chrono::milliseconds(600);
  o.max_connections_per_host = 1;
  auto client = MakeClient(o);
  using SteadyTime = std::chrono::steady_clock::time_point;
  auto fetch = [&](bool background) {
    auto done = std::make_shared<std::promise<std::pair<SteadyTime, bool>>>();
    auto f = done->get_future();
    HttpRequest r;
    r.url = server.url("/x");
    r.background = background;
    client->Fetch(std::move(r), [done](Result<HttpResponse> res) {
      done->set_value({std::chrono::steady_clock::now(), res.has_value()});
    });
    return f;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto d0 = fetch(false);  // holds the connection until its deadline (600 ms)
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t1 = std::chrono::steady_clock::now();
  auto b1 = fetch(true);  // gets the connection at ~600 ms, with a deadline of its own
  auto b2 = fetch(true);  // still queued at its deadline (~700 ms)
  const auto [d0_end, d0_ok] = d0.get();
  EXPECT_FALSE(d0_ok);
  EXPECT_LT(d0_end - t0, std::chrono::milliseconds(1100));
  const auto [b2_end, b2_ok] = b2.get();
  EXPECT_FALSE(b2_ok);
  // ~600 ms; before: b1's end (~1200 ms from t0) and then a deadline of its own (~1800 ms).
  EXPECT_GE(b2_end - t1, std::chrono::milliseconds(550));
  EXPECT_LT(b2_end - t1, std::chrono::milliseconds(1050));
  EXPECT_FALSE(b1.get().second);
  EXPECT_GE(client->stats().failed_by_reason.count("gave up: no connection"), 1u);
}

TEST(HttpClientTest, ConnectionRefusedGivesUpAtTheDeadline) {
  int port;
  {
    TestHttpServer gone([](const std::string&, int) { return TestReply{}; });
    port = std::stoi(gone.url("").substr(17));
  }
  HttpClientOptions o = Fast();
  o.deadline = std::chrono::milliseconds(300);
  auto client = MakeClient(o);
  HttpRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(port) + "/x";
  auto res = client->FetchBlocking(r);
  ASSERT_FALSE(res.has_value());
  EXPECT_NE(res.error().message().find("cannot connect"), std::string::npos)
      << res.error().ToString();
  EXPECT_GT(client->stats().retries[static_cast<size_t>(RetryReason::kConnect)], 0u);
}

TEST(HttpClientTest, HeadersFileIsSentAndSignerSigns) {
  const std::string obj = Object(100);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, req); });
  auto dir = std::filesystem::temp_directory_path() / ("hc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "headers") << "# a token\n\nAuthorization: Bearer s3cr3t\nX-Extra:  v \n";
  HttpClientOptions o = Fast();
  o.headers_file = (dir / "headers").string();
  o.signer = std::make_shared<SigV4RequestSigner>(
      std::make_shared<StaticCredentialSource>(Credentials("AK", "SK"), "test"), "us-east-1");
  auto client = MakeClient(o);
  std::string got;
  ASSERT_TRUE(GetRange(*client, server.url("/b/k%20x?list-type=2"), 0, 10, &got).has_value());
  std::string req = server.received().back();
  EXPECT_NE(req.find("Authorization: Bearer s3cr3t\r\n"), std::string::npos);
  EXPECT_NE(req.find("X-Extra: v\r\n"), std::string::npos);
  EXPECT_NE(req.find("GET /b/k%20x?list-type=2 HTTP/1.1"), std::string::npos);
  EXPECT_NE(req.find("Authorization: AWS4-HMAC-SHA256 Credential=AK/"), std::string::npos);
  EXPECT_NE(req.find("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"),
            std::string::npos);
  EXPECT_NE(req.find("x-amz-content-sha256: " + std::string(kEmptyPayloadSha256)),
            std::string::npos);
  EXPECT_NE(req.find("Host: 127.0.0.1:"), std::string::npos);

  std::ofstream(dir / "bad") << "Authorization Bearer s3cr3t\n";
  o.headers_file = (dir / "bad").string();
  auto bad = HttpClient::Create(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("line 1"), std::string::npos);
  EXPECT_EQ(bad.error().message().find("s3cr3t"), std::string::npos);
  o.headers_file = (dir / "absent").string();
  EXPECT_FALSE(HttpClient::Create(o).has_value());
  std::filesystem::remove_all(dir);
}

TEST(HttpClientTest, ShutdownFailsPendingRequests) {
  TestHttpServer server([&](const std::string&, int) {
    TestReply r = TestHttpServer::Reply(200, "OK", "x");
    r.delay_ms = 1500;
    return r;
  });
  std::atomic<int> failed{0};
  {
    auto client = MakeClient();
    for (int i = 0; i < 4; ++i) {
      HttpRequest r;
      r.url = server.url("/slow");
      client->Fetch(r, [&](Result<HttpResponse> res) {
        if (!res.has_value() && res.error().message().find("shutting down") != std::string::npos)
          ++failed;
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(failed.load(), 4);
}

TEST(HttpClientTest, BadRequestsFailAtOnce) {
  auto client = MakeClient();
  HttpRequest r;
  for (const char* bad : {"not a url", "ftp://127.0.0.1/x", "http://u:p@127.0.0.1/x"}) {
    r.url = bad;
    auto res = client->FetchBlocking(r);
    ASSERT_FALSE(res.has_value()) << bad;
    EXPECT_EQ(res.error().code(), Status::Code::kInvalidArgument) << res.error().ToString();
    EXPECT_EQ(res.error().message().find("u:p"), std::string::npos);
  }
  r.url = "http://127.0.0.1:1/x";
  r.range = ByteRange{0, 0};
  EXPECT_FALSE(client->FetchBlocking(r).has_value());
}

// Ranges asked together: one GET, its multipart answer's parts where each range's own GET
// would have put them; the answers of servers without multi-range support deliver what they
// hold and leave the rest (range_bytes 0) to the caller, never an error and never wrong bytes.
TEST(HttpClientTest, MultiRangeGetDeliversEachPart) {
  const std::string obj = Object(100000);
  std::atomic<int> mode{static_cast<int>(TestHttpServer::Ranges::kMultipart)};
  TestHttpServer server([&](const std::string& req, int) {
    return TestHttpServer::ServeRanges(obj, req, static_cast<TestHttpServer::Ranges>(mode.load()));
  });
  auto client = MakeClient();
  const std::vector<ByteRange> ranges = {{10, 100}, {5000, 1}, {40000, 3000}, {99990, 10}};
  std::vector<std::string> bufs;
  auto ask = [&] {
    bufs.clear();
    HttpRequest r;
    r.url = server.url("/o");
    r.ranges = ranges;
    for (const ByteRange& range : ranges) bufs.emplace_back(range.length, '.');
    for (auto& b : bufs) r.range_dsts.push_back(reinterpret_cast<uint8_t*>(b.data()));
    return client->FetchBlocking(std::move(r));
  };
  auto multi = ask();
  ASSERT_TRUE(multi.has_value()) << multi.error().ToString();
  EXPECT_TRUE(multi->multipart);
  EXPECT_EQ(multi->range_bytes, (std::vector<uint64_t>{100, 1, 3000, 10}));
  EXPECT_EQ(multi->content_range->total, obj.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ(bufs[i], obj.substr(ranges[i].offset, ranges[i].length)) << i;
  }
  EXPECT_EQ(server.requests(), 1);
  EXPECT_NE(server.received()[0].find("Range: bytes=10-109,5000-5000,40000-42999,99990-99999"),
            std::string::npos);
  // A server that answers the first range only.
  mode = static_cast<int>(TestHttpServer::Ranges::kFirst);
  auto first = ask();
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  EXPECT_FALSE(first->multipart);
  EXPECT_EQ(first->range_bytes, (std::vector<uint64_t>{100, 0, 0, 0}));
  EXPECT_EQ(bufs[0], obj.substr(10, 100));
  // A whole object larger than the cap (the ranges' bytes and their part headers).
  mode = static_cast<int>(TestHttpServer::Ranges::kWhole);
  auto whole = ask();
  ASSERT_TRUE(whole.has_value()) << whole.error().ToString();
  // 100,000 bytes is more than the cap for 3,111 asked bytes: nothing delivered, no error.
  EXPECT_EQ(whole->range_bytes, (std::vector<uint64_t>(4, 0)));
  EXPECT_EQ(whole->status, 200);
  EXPECT_EQ(client->stats().failed, 0u);
}

TEST(HttpClientTest, MultiRangeGetOfASmallWholeObjectAndOfABrokenMultipart) {
  const std::string obj = Object(1500);  // within the cap for the ranges below (2,078 bytes)
  std::atomic<bool> broken{false};
  TestHttpServer server([&](const std::string& req, int) {
    if (!broken) return TestHttpServer::ServeRanges(obj, req, TestHttpServer::Ranges::kWhole);
    // A part that claims more bytes than the body has.
    return TestHttpServer::Reply(
        206, "Partial Content",
        "\r\n--b\r\nContent-Range: bytes 0-99999/3000000\r\n\r\nabc\r\n--b--\r\n",
        "Content-Type: multipart/byteranges; boundary=b\r\n");
  });
  auto client = MakeClient();
  std::string a(10, '.'), b(20, '.');
  HttpRequest r;
  r.url = server.url("/o");
  r.ranges = {{0, 10}, {1490, 20}};  // the second runs past the end: clipped, as a 206 is
  r.range_dsts = {reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data())};
  auto whole = client->FetchBlocking(r);
  ASSERT_TRUE(whole.has_value()) << whole.error().ToString();
  EXPECT_EQ(whole->range_bytes, (std::vector<uint64_t>{10, 10}));
  EXPECT_EQ(a, obj.substr(0, 10));
  EXPECT_EQ(b.substr(0, 10), obj.substr(1490, 10));
  broken = true;
  auto bad = client->FetchBlocking(r);
  ASSERT_TRUE(bad.has_value()) << bad.error().ToString();
  EXPECT_FALSE(bad->multipart);
  EXPECT_EQ(bad->range_bytes, (std::vector<uint64_t>{0, 0}));
  // Requests that cannot be sent: one range, unsorted or overlapping ranges, a missing buffer.
  for (auto ranges : std::vector<std::vector<ByteRange>>{
           {{0, 10}}, {{100, 10}, {0, 10}}, {{0, 10}, {5, 10}}, {{0, 10}, {20, 0}}}) {
    HttpRequest q = r;
    q.ranges = ranges;
    q.range_dsts.assign(ranges.size(), reinterpret_cast<uint8_t*>(a.data()));
    auto res = client->FetchBlocking(q);
    ASSERT_FALSE(res.has_value());
    EXPECT_EQ(res.error().code(), Status::Code::kInvalidArgument);
  }
}

// A server that answers every range with the whole object (issue 43): a few quick tries, then
// one line that says so; once found, later ranges fail at their first try. Before: 10 tries
// per request with the full backoff (a read of 4 pieces made 40 transfers in 22.8 s).
TEST(HttpClientTest, AServerThatIgnoresRangeFailsFast) {
  const std::string obj = Object(200000);
  TestHttpServer server(
      [&](const std::string&, int) { return TestHttpServer::Reply(200, "OK", obj); });
  HttpClientOptions o;  // the default tries and backoff
  auto client = MakeClient(o);
  std::vector<std::future<Result<HttpResponse>>> reads;
  std::vector<std::string> bufs(4, std::string(1000, '\0'));
  for (int i = 0; i < 4; ++i) {
    HttpRequest r;
    r.url = server.url("/o");
    r.range = ByteRange{static_cast<uint64_t>(i) * 1000, 1000};
    r.dst = reinterpret_cast<uint8_t*>(bufs[i].data());
    r.dst_size = 1000;
    reads.push_back(
        std::async(std::launch::async, [&client, r] { return client->FetchBlocking(r); }));
  }
  for (auto& f : reads) {
    auto res = f.get();
    ASSERT_FALSE(res.has_value());
    EXPECT_EQ(res.error().code(), Status::Code::kIOError);
    EXPECT_NE(res.error().message().find(server.url("/o") + ": the server ignores Range (200 "
                                                            "with the whole object for a range, "),
              std::string::npos)
        << res.error().ToString();
  }
  EXPECT_LE(client->stats().attempts, 4u * HttpClient::kFullBodyTries);
  EXPECT_EQ(client->stats().failed_by_reason.at("ignores Range"), 4u);
  std::string got;
  const uint64_t before = client->stats().attempts;
  auto later = GetRange(*client, server.url("/o"), 5000, 10, &got);
  ASSERT_FALSE(later.has_value());
  EXPECT_NE(later.error().message().find("ignores Range (200 with the whole object for a range, "
                                         "1 try)"),
            std::string::npos)
      << later.error().ToString();
  EXPECT_EQ(client->stats().attempts, before + 1);
}

// A URL on a dead port (issue 46): before any answer from the server, a refused connection
// gets kUnreachedTries tries, not the deadline's worth (8.9 s at mount before). A server that
// answered once and then refuses is restarting: its requests are retried as before.
TEST(HttpClientTest, ADeadPortFailsAtOnceARestartingServerIsRetried) {
  int port;
  {
    TestHttpServer gone([](const std::string&, int) { return TestReply{}; });
    port = std::stoi(gone.url("").substr(17));
  }
  HttpClientOptions o;  // the default tries, backoff and deadline
  auto client = MakeClient(o);
  HttpRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(port) + "/x";
  auto res = client->FetchBlocking(r);
  ASSERT_FALSE(res.has_value());
  EXPECT_NE(res.error().message().find("gave up after 2 tries"), std::string::npos)
      << res.error().ToString();
  EXPECT_NE(res.error().message().find("cannot connect"), std::string::npos);
  EXPECT_EQ(client->stats().attempts, static_cast<uint64_t>(HttpClient::kUnreachedTries));

  const std::string obj = Object(1000);
  auto server = std::make_unique<TestHttpServer>(
      [&](const std::string& req, int) { return TestHttpServer::ServeRanges(obj, req); });
  HttpClientOptions fast = Fast();
  fast.deadline = std::chrono::milliseconds(400);
  auto answered = MakeClient(fast);
  std::string got;
  ASSERT_TRUE(GetRange(*answered, server->url("/o"), 0, 10, &got).has_value());
  const std::string url = server->url("/o");
  server.reset();  // the server goes away
  HttpRequest again;
  again.url = url;
  auto gone = answered->FetchBlocking(again);
  ASSERT_FALSE(gone.has_value());
  EXPECT_GT(answered->stats().retries[static_cast<size_t>(RetryReason::kConnect)],
            static_cast<uint64_t>(HttpClient::kUnreachedTries));
}

}  // namespace
}  // namespace pcrfs
