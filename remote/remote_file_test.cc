#include "remote/remote_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "remote/object_protocols.h"
#include "remote/test_server.h"

namespace pcrfs {
namespace {

std::string Object(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131) % 251);
  return s;
}

// Serves `*obj` with ranges and ETag `*etag`; 304 for a matching If-None-Match.
TestReply Serve(const std::string& obj, const std::string& etag, const std::string& req) {
  if (req.find("If-None-Match: " + etag + "\r\n") != std::string::npos) {
    return {"HTTP/1.1 304 Not Modified\r\nETag: " + etag + "\r\nConnection: close\r\n\r\n"};
  }
  size_t p = req.find("Range: bytes=");
  if (p == std::string::npos)
    return TestHttpServer::Reply(200, "OK", obj, "ETag: " + etag + "\r\n");
  long a = 0, b = 0;
  std::sscanf(req.c_str() + p, "Range: bytes=%ld-%ld", &a, &b);
  b = std::min<long>(b, static_cast<long>(obj.size()) - 1);
  return TestHttpServer::Reply(206, "Partial Content", obj.substr(a, b - a + 1),
                               "ETag: " + etag + "\r\nContent-Range: bytes " + std::to_string(a) +
                                   "-" + std::to_string(b) + "/" + std::to_string(obj.size()) +
                                   "\r\n");
}

std::shared_ptr<HttpClient> Client() {
  HttpClientOptions o;
  o.base_backoff = std::chrono::milliseconds(5);
  o.deadline = std::chrono::milliseconds(3000);
  auto c = HttpClient::Create(o);
  EXPECT_TRUE(c.has_value());
  return std::shared_ptr<HttpClient>(std::move(*c));
}

// The objects of `server`'s root folder; `query` is a signed URL's, sent with every request.
std::shared_ptr<ObjectClient> Objects(const TestHttpServer& server, const std::string& query = "") {
  auto root = ParseUrl(server.url("") + (query.empty() ? "" : "?" + query));
  EXPECT_TRUE(root.has_value());
  return MakeHttpObjectClient(Client(), std::make_unique<HttpProtocol>(*root));
}

TEST(RemoteFileTest, ReadsExactRanges) {
  std::string obj = Object(200000);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, "\"e\"", req); });
  RemoteFile f(Objects(server, "sig=secret"), "records/00000001.pcr", obj.size());
  EXPECT_EQ(f.Size(), obj.size());
  EXPECT_EQ(f.name(), server.url("/records/00000001.pcr"));  // redacted
  std::string buf(70000, '\0');
  ASSERT_TRUE(f.Read(12345, buf.size(), reinterpret_cast<uint8_t*>(buf.data())).ok());
  EXPECT_EQ(buf, obj.substr(12345, 70000));
  std::string tail(10, '\0');
  ASSERT_TRUE(f.Read(obj.size() - 10, 10, reinterpret_cast<uint8_t*>(tail.data())).ok());
  EXPECT_EQ(tail, obj.substr(obj.size() - 10));
  EXPECT_TRUE(f.Read(5, 0, nullptr).ok());
  int before = server.requests();
  Status past = f.Read(obj.size() - 5, 10, reinterpret_cast<uint8_t*>(tail.data()));
  EXPECT_TRUE(past.IsCorruption());
  EXPECT_EQ(server.requests(), before);  // refused without a request
}

// A read of the start of a range being fetched gets its bytes when they arrive, not when the
// whole range has: the server sends the first 64 KiB of a 1 MiB answer, then stalls until
// the read has returned.
TEST(RemoteFileTest, AReadOfAPendingRangeGetsItsBytesAsTheyArrive) {
  std::string obj = Object(2 << 20);
  TestHttpServer server([&](const std::string& req, int) {
    TestReply r = Serve(obj, "\"e\"", req);
    r.hold_after = r.bytes.size() - (1 << 20) + (64 << 10);  // headers and 64 KiB of body
    return r;
  });
  RangeCacheOptions o;
  o.memory_bytes = 8 << 20;
  auto cache = RangeCache::Open(o, nullptr);
  ASSERT_TRUE(cache.has_value());
  RemoteFile f(Objects(server), "r.pcr", obj.size(), *cache, 1);
  f.Prefetch(4096, 1 << 20);  // one GET of 1 MiB
  std::string buf(16384, '\0');
  ASSERT_TRUE(f.Read(4096 + 1000, buf.size(), reinterpret_cast<uint8_t*>(buf.data())).ok());
  EXPECT_EQ(buf, obj.substr(4096 + 1000, buf.size()));
  EXPECT_EQ(server.requests(), 1) << "the read joins the pending fetch";
  server.Release();
  // The rest of the range arrives, whole and once.
  std::string rest(1 << 20, '\0');
  ASSERT_TRUE(f.Read(4096, rest.size(), reinterpret_cast<uint8_t*>(rest.data())).ok());
  EXPECT_EQ(rest, obj.substr(4096, rest.size()));
  EXPECT_EQ(server.requests(), 1);
}

// -o fetch_align (a cache tier's slice): every GET asks for whole aligned slices, clipped at
// the object's end and by what is cached or in flight, so a read of other bytes of a slice
// already fetched sends no request of its own.
TEST(RemoteFileTest, AlignedFetchesAskForWholeSlicesAndNeverShareOne) {
  std::string obj = Object(300000);
  std::mutex mu;
  std::vector<std::string> ranges;
  TestHttpServer server([&](const std::string& req, int) {
    size_t p = req.find("Range: bytes=");
    {
      std::lock_guard<std::mutex> l(mu);
      ranges.push_back(p == std::string::npos ? ""
                                              : req.substr(p + 13, req.find('\r', p) - p - 13));
    }
    return Serve(obj, "\"e\"", req);
  });
  RangeCacheOptions o;
  o.memory_bytes = 8 << 20;
  auto cache = RangeCache::Open(o, nullptr);
  ASSERT_TRUE(cache.has_value());
  RemoteFile f(Objects(server), "r.pcr", obj.size(), *cache, 1, /*align=*/65536);
  auto read = [&](uint64_t offset, size_t n) {
    std::string buf(n, '\0');
    EXPECT_TRUE(f.Read(offset, n, reinterpret_cast<uint8_t*>(buf.data())).ok());
    EXPECT_EQ(buf, obj.substr(offset, n)) << offset;
  };
  f.Prefetch(70000, 1000);
  read(100000, 500);    // in the slice the prefetch asked for: joins it, or finds it cached
  read(130000, 10000);  // the rest of its slice is cached: only the next slice is asked for
  read(299990, 10);     // the last slice, clipped at the end
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(ranges, (std::vector<std::string>{"65536-131071", "131072-196607", "262144-299999"}));
}

TEST(RemoteFileTest, ChangedObjectIsCorruptionNeverBytes) {
  std::string obj = Object(5000);
  TestHttpServer server([&](const std::string& req, int) { return Serve(obj, "\"e\"", req); });
  RemoteFile f(Objects(server), "r.pcr", 4000);  // the index says 4000
  std::string buf(100, '\0');
  Status s = f.Read(0, 100, reinterpret_cast<uint8_t*>(buf.data()));
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(s.message(),
            server.url("/r.pcr") + ": the object changed (size 5000, index says 4000): remount");
  // The object shrank below the read: the range is clipped at the end, still Corruption.
  RemoteFile g(Objects(server), "r.pcr", 6000);
  std::string big(2000, '\0');
  Status t = g.Read(4000, 2000, reinterpret_cast<uint8_t*>(big.data()));
  EXPECT_TRUE(t.IsCorruption()) << t.ToString();
}

TEST(RemoteFileTest, MissingObjectIsNotFound) {
  TestHttpServer server(
      [](const std::string&, int) { return TestHttpServer::Reply(404, "Not Found", ""); });
  RemoteFile f(Objects(server), "gone.pcr", 10);
  uint8_t b[4];
  Status s = f.Read(0, 4, b);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_EQ(s.ToErrno(), ENOENT == s.ToErrno() ? ENOENT : s.ToErrno());
}

TEST(RemoteFileTest, DownloadIsAtomicAndConditional) {
  std::string obj = Object(300000);
  std::string etag = "\"v1\"";
  std::mutex mu;
  TestHttpServer server([&](const std::string& req, int) {
    std::lock_guard<std::mutex> lock(mu);
    return Serve(obj, etag, req);
  });
  auto dir = std::filesystem::temp_directory_path() / ("rf-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string dest = (dir / "index.lmdb").string();
  auto client = Objects(server);
  auto slurp = [&] {
    std::ifstream in(dest, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };

  auto first = Download(*client, "index.lmdb", dest);
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  EXPECT_TRUE(first->modified);
  EXPECT_EQ(first->etag, "\"v1\"");
  EXPECT_EQ(first->size, obj.size());
  EXPECT_EQ(slurp(), obj);

  auto same = Download(*client, "index.lmdb", dest, first->etag);
  ASSERT_TRUE(same.has_value());
  EXPECT_FALSE(same->modified);
  EXPECT_EQ(same->etag, "\"v1\"");
  EXPECT_EQ(slurp(), obj);

  {
    std::lock_guard<std::mutex> lock(mu);
    obj = Object(1000);
    etag = "\"v2\"";
  }
  auto changed = Download(*client, "index.lmdb", dest, "\"v1\"");
  ASSERT_TRUE(changed.has_value());
  EXPECT_TRUE(changed->modified);
  EXPECT_EQ(changed->etag, "\"v2\"");
  EXPECT_EQ(slurp(), Object(1000));

  // A failed download leaves dest and no temporary file behind.
  auto missing = Download(*client, "nope", (dir / "nope").string());
  EXPECT_TRUE(missing.has_value());  // this server answers everything; now a real failure:
  TestHttpServer denied([](const std::string&, int) {
    return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
  });
  auto refused = Download(*Objects(denied), "index.lmdb", dest, "\"v2\"");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().message(),
            denied.url("/index.lmdb") + ": 403 Forbidden (AccessDenied)");
  EXPECT_EQ(slurp(), Object(1000));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 2);  // index.lmdb and nope

  // A body longer than the cap (a hostile server's endless manifest): refused before more than
  // the cap is written; dest stays as it was and no temporary file is left.
  auto long_body = Download(*client, "index.lmdb", dest, "", 999);
  ASSERT_FALSE(long_body.has_value());
  EXPECT_EQ(long_body.error().message(),
            server.url("/index.lmdb") + ": the body is longer than 999 bytes");
  EXPECT_EQ(slurp(), Object(1000));
  auto exact = Download(*client, "index.lmdb", dest, "", 1000);
  ASSERT_TRUE(exact.has_value()) << exact.error().ToString();
  files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 2);

  auto nodir = Download(*client, "index.lmdb", (dir / "no/such/dir/x").string());
  ASSERT_FALSE(nodir.has_value());
  EXPECT_NE(nodir.error().message().find("no/such/dir"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Serves versions of one object with ranges, If-None-Match and If-Match (a 412 when the
// object no longer has the ETag), as nginx and S3 do; `before` runs first for each request
// (it may change the object or answer instead).
struct VersionedServer {
  std::mutex mu;
  std::string obj;
  std::string etag;
  std::vector<std::string> requests;
  std::function<std::optional<TestReply>(const std::string& req, size_t n)> before;
  TestHttpServer server{[this](const std::string& req, int) -> TestReply {
    std::lock_guard<std::mutex> lock(mu);
    requests.push_back(req);
    if (before) {
      if (auto reply = before(req, requests.size())) return *reply;
    }
    const size_t m = req.find("If-Match: ");
    // Strong comparison: a weak ETag never matches.
    if (m != std::string::npos &&
        (etag.starts_with("W/") || req.compare(m + 10, etag.size() + 2, etag + "\r\n") != 0)) {
      return TestHttpServer::Reply(412, "Precondition Failed", "");
    }
    return Serve(obj, etag, req);
  }};
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return requests.size();
  }
};

// DownloadRanged of "index.pcri" from a VersionedServer into a fresh folder, in parts of 64 KiB
// after a first range of 100000 bytes.
class DownloadRangedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    options_.first_bytes = 100000;
    options_.part_bytes = 65536;
  }
  void TearDown() override {
    // Whatever happened, no temporary file is left beside the destination.
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
    std::filesystem::remove_all(dir_);
  }

  Result<DownloadResult> Fetch(const std::string& etag) {
    return DownloadRanged(*client_, "index.pcri", dest_, etag, options_);
  }
  // The destination's bytes.
  std::string Slurp() const {
    std::ifstream in(dest_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The object the server has now.
  void Serve(std::string obj, std::string etag) {
    std::lock_guard<std::mutex> lock(vs_.mu);
    vs_.obj = std::move(obj);
    vs_.etag = std::move(etag);
  }

  const std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("rfr-" + std::to_string(::getpid()));
  const std::string dest_ = (dir_ / "index.pcri").string();
  RangedDownloadOptions options_;
  VersionedServer vs_;
  std::shared_ptr<ObjectClient> client_ = Objects(vs_.server);
};

TEST_F(DownloadRangedTest, StitchesPartsConditionalOnTheFirstAnswer) {
  Serve(Object(1000003), "\"v1\"");
  // A large object: the first range, then 14 ranges conditional on the first answer's ETag,
  // stitched exactly.
  auto first = Fetch("");
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  EXPECT_TRUE(first->modified);
  EXPECT_EQ(first->etag, "\"v1\"");
  EXPECT_EQ(first->size, 1000003u);
  EXPECT_EQ(Slurp(), vs_.obj);
  ASSERT_EQ(vs_.count(), 15u);
  EXPECT_NE(vs_.requests[0].find("Range: bytes=0-99999\r\n"), std::string::npos);
  EXPECT_EQ(vs_.requests[0].find("If-Match"), std::string::npos);
  for (size_t i = 1; i < vs_.requests.size(); ++i) {
    EXPECT_NE(vs_.requests[i].find("If-Match: \"v1\"\r\n"), std::string::npos) << i;
  }

  // Revalidation: one conditional request.
  auto same = Fetch(first->etag);
  ASSERT_TRUE(same.has_value());
  EXPECT_FALSE(same->modified);
  EXPECT_EQ(vs_.count(), 16u);
  EXPECT_NE(vs_.requests.back().find("If-None-Match: \"v1\"\r\n"), std::string::npos);

  // A small object: one GET.
  Serve(Object(99999), "\"small\"");
  auto small = Fetch("\"v1\"");
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(Slurp(), Object(99999));
  EXPECT_EQ(vs_.count(), 17u);
}

TEST_F(DownloadRangedTest, AReplacedObjectIsFetchedAgainAndARaceIsRefused) {
  // Replaced after the first answer: the ranges get 412s, the download starts again and
  // gets the new version whole.
  std::string v3 = Object(700001);
  std::reverse(v3.begin(), v3.end());
  {
    std::lock_guard<std::mutex> lock(vs_.mu);
    vs_.obj = Object(1000003);
    vs_.etag = "\"v2\"";
    const size_t at = vs_.requests.size() + 1;
    vs_.before = [this, &v3, at](const std::string&, size_t n) -> std::optional<TestReply> {
      if (n == at + 1) {
        vs_.obj = v3;
        vs_.etag = "\"v3\"";
      }
      return std::nullopt;
    };
  }
  auto replaced = Fetch("\"small\"");
  ASSERT_TRUE(replaced.has_value()) << replaced.error().ToString();
  EXPECT_EQ(replaced->etag, "\"v3\"");
  EXPECT_EQ(Slurp(), v3);

  // Replaced during every try: refused in one line, dest as it was.
  {
    std::lock_guard<std::mutex> lock(vs_.mu);
    vs_.before = [this](const std::string& req, size_t n) -> std::optional<TestReply> {
      if (req.find("If-Match: " + vs_.etag + "\r\n") != std::string::npos) {
        vs_.obj = Object(1000003 + n);
        vs_.etag = "\"n" + std::to_string(n) + "\"";
      }
      return std::nullopt;
    };
  }
  auto racing = Fetch("");
  ASSERT_FALSE(racing.has_value());
  EXPECT_EQ(racing.error().message(),
            vs_.server.url("/index.pcri") + ": changed during the download 2 times");
  EXPECT_EQ(Slurp(), v3);
}

TEST_F(DownloadRangedTest, AFailedRangeIsRetriedAndARefusedOneFailsTheDownload) {
  // A range that fails once (503) is retried by the client; one that is refused fails the
  // download with the server's answer.
  {
    std::lock_guard<std::mutex> lock(vs_.mu);
    vs_.obj = Object(1000003);
    vs_.etag = "\"v4\"";
    vs_.before = [fails = 1](const std::string& req, size_t) mutable -> std::optional<TestReply> {
      if (req.find("Range: bytes=165536-") != std::string::npos && fails-- > 0) {
        return TestHttpServer::Reply(503, "Service Unavailable", "");
      }
      return std::nullopt;
    };
  }
  auto retried = Fetch("");
  ASSERT_TRUE(retried.has_value()) << retried.error().ToString();
  EXPECT_EQ(Slurp(), Object(1000003));
  {
    std::lock_guard<std::mutex> lock(vs_.mu);
    vs_.etag = "\"v5\"";
    vs_.before = [](const std::string& req, size_t) -> std::optional<TestReply> {
      if (req.find("Range: bytes=231072-") != std::string::npos) {
        return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
      }
      return std::nullopt;
    };
  }
  auto refused = Fetch("\"v4\"");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().message(),
            vs_.server.url("/index.pcri") + ": 403 Forbidden (AccessDenied)");
  EXPECT_EQ(Slurp(), Object(1000003));
}

TEST_F(DownloadRangedTest, AWeakETagIsNotSentAsIfMatch) {
  // A weak ETag is not sent as If-Match (it never matches); the answers' ETags still agree.
  Serve(Object(900001), "W/\"weak\"");
  auto weak = Fetch("");
  ASSERT_TRUE(weak.has_value()) << weak.error().ToString();
  EXPECT_EQ(Slurp(), Object(900001));
  ASSERT_GT(vs_.count(), 1u);
  for (size_t i = 0; i < vs_.count(); ++i) {
    EXPECT_EQ(vs_.requests[i].find("If-Match"), std::string::npos) << i;
  }
}

// A server's claimed size decides nothing when the object states its own (an index's header):
// a claim that disagrees fails the download after the first GET, before any block is
// allocated, and leaves no file behind; an agreeing one downloads as before.
TEST(RemoteFileTest, DownloadRangedRefusesASizeTheObjectDoesNotState) {
  auto dir = std::filesystem::temp_directory_path() / ("rfd-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string dest = (dir / "index.pcri").string();
  VersionedServer vs;
  vs.obj = Object(300001);
  vs.etag = "\"v1\"";
  uint64_t claim = 1ull << 30;  // what the server says the total is
  vs.before = [&](const std::string& req, size_t) -> std::optional<TestReply> {
    long a = 0, b = 0;
    const size_t p = req.find("Range: bytes=");
    if (p == std::string::npos) return std::nullopt;
    std::sscanf(req.c_str() + p, "Range: bytes=%ld-%ld", &a, &b);
    std::string body = vs.obj.substr(static_cast<size_t>(a), static_cast<size_t>(b - a + 1));
    body.resize(static_cast<size_t>(b - a + 1), '\0');
    return TestHttpServer::Reply(206, "Partial Content", body,
                                 "ETag: \"v1\"\r\nContent-Range: bytes " + std::to_string(a) + "-" +
                                     std::to_string(b) + "/" + std::to_string(claim) + "\r\n");
  };
  auto client = Objects(vs.server);
  RangedDownloadOptions o;
  o.first_bytes = 100000;
  o.part_bytes = 65536;
  std::vector<std::string> seen;
  o.declared_size = [&](std::string_view first) -> Result<uint64_t> {
    seen.emplace_back(first);
    return uint64_t{300001};
  };
  auto huge = DownloadRanged(*client, "index.pcri", dest, "", o);
  ASSERT_FALSE(huge.has_value());
  EXPECT_TRUE(huge.error().IsCorruption());
  EXPECT_EQ(huge.error().message(), vs.server.url("/index.pcri") +
                                        ": the server says 1073741824 bytes, the file's header "
                                        "says 300001");
  EXPECT_EQ(vs.count(), 1u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], vs.obj.substr(0, 100000));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  // The declaration's own error fails the download as it is.
  o.declared_size = [](std::string_view) -> Result<uint64_t> {
    return Err(Status::Corruption("not an index"));
  };
  auto bad = DownloadRanged(*client, "index.pcri", dest, "", o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), "not an index");
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  // A claim that agrees (or none stated: 0) downloads.
  claim = 300001;
  o.declared_size = [](std::string_view) -> Result<uint64_t> { return uint64_t{300001}; };
  auto right = DownloadRanged(*client, "index.pcri", dest, "", o);
  ASSERT_TRUE(right.has_value()) << right.error().ToString();
  EXPECT_EQ(right->size, 300001u);
  o.declared_size = [](std::string_view) -> Result<uint64_t> { return uint64_t{0}; };
  auto none = DownloadRanged(*client, "index.pcri", dest, "", o);
  ASSERT_TRUE(none.has_value()) << none.error().ToString();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pcrfs
