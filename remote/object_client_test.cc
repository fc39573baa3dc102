// The object-client seam without sockets (MemoryObjectClient, FaultyObjectClient), the
// protocols' URLs and listings, and the HTTP client's handling of a refused authority (a
// renewed credential, a rotated token file) against a scripted loopback server.
#include "remote/object_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "remote/aws_credential_source.h"
#include "remote/azure.h"
#include "remote/fake_object_client.h"
#include "remote/object_protocols.h"
#include "remote/range_cache.h"
#include "remote/remote_file.h"
#include "remote/test_server.h"

namespace pcrfs {
namespace {

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131) % 251);
  return s;
}

Result<ObjectData> ReadRange(ObjectClient& c, const std::string& key, uint64_t offset, uint64_t n,
                             std::string* out, std::optional<uint64_t> size) {
  out->assign(n, '\0');
  ObjectGet g;
  g.key = key;
  g.range = ByteRange{offset, n};
  g.expected_size = size;
  g.dst = reinterpret_cast<uint8_t*>(out->data());
  g.dst_size = n;
  return c.GetBlocking(std::move(g));
}

TEST(ObjectClientTest, MemoryClientServesRangesAndChecksSizes) {
  MemoryObjectClient m;
  const std::string obj = Bytes(10000);
  m.Put("records/1.pcr", obj);
  std::string got;
  ASSERT_TRUE(ReadRange(m, "records/1.pcr", 100, 500, &got, obj.size()).has_value());
  EXPECT_EQ(got, obj.substr(100, 500));
  // Another size than expected: the object changed, named, never its bytes.
  auto changed = ReadRange(m, "records/1.pcr", 0, 10, &got, 9000);
  ASSERT_FALSE(changed.has_value());
  EXPECT_EQ(changed.error().message(),
            "mem://store/records/1.pcr: the object changed (size 10000, expected 9000)");
  // Past the expected end: refused before any request.
  const uint64_t before = m.gets();
  auto past = ReadRange(m, "records/1.pcr", 9990, 20, &got, obj.size());
  ASSERT_FALSE(past.has_value());
  EXPECT_TRUE(past.error().IsCorruption());
  EXPECT_EQ(m.gets(), before);
  auto missing = ReadRange(m, "nope", 0, 1, &got, std::nullopt);
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(missing.error().IsNotFound());
}

TEST(ObjectClientTest, FaultsAreCheckedTheSameWayWhoeverServes) {
  auto mem = std::make_shared<MemoryObjectClient>();
  mem->Put("a", Bytes(4096));
  FaultyObjectClient f(mem);
  f.Arm(FaultyObjectClient::Fault::kShortBody, 1, "a");
  f.Arm(FaultyObjectClient::Fault::kOtherSize, 1, "a");
  f.Arm(FaultyObjectClient::Fault::kError, 1, "a", Status::IOError("mem://store/a: 503", EIO));
  std::string got;
  auto shortened = ReadRange(f, "a", 0, 1000, &got, 4096);
  ASSERT_FALSE(shortened.has_value());
  EXPECT_EQ(shortened.error().message(), "mem://store/a: got 999 of 1000 bytes at 0");
  auto other = ReadRange(f, "a", 0, 1000, &got, 4096);
  ASSERT_FALSE(other.has_value());
  EXPECT_NE(other.error().message().find("the object changed (size 4097"), std::string::npos);
  auto failed = ReadRange(f, "a", 0, 1000, &got, 4096);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().message(), "mem://store/a: 503");
  EXPECT_EQ(f.fired(), 3u);
  ASSERT_TRUE(ReadRange(f, "a", 0, 1000, &got, 4096).has_value());  // all spent
}

// A range cache of `memory_bytes` in memory, no disk tier.
std::shared_ptr<RangeCache> MemoryCache(uint64_t memory_bytes) {
  RangeCacheOptions o;
  o.memory_bytes = memory_bytes;
  auto cache = RangeCache::Open(o, nullptr);
  EXPECT_TRUE(cache.has_value());
  return cache ? *cache : nullptr;
}

TEST(ObjectClientTest, RemoteFileOverAFakeStoreWithACache) {
  auto mem = std::make_shared<MemoryObjectClient>();
  const std::string obj = Bytes(1 << 20);
  mem->Put("records/00000007.pcr", obj);
  auto faulty = std::make_shared<FaultyObjectClient>(mem);
  auto cache = MemoryCache(8 << 20);
  ASSERT_NE(cache, nullptr);
  RemoteFile f(faulty, "records/00000007.pcr", obj.size(), cache, 7);
  EXPECT_EQ(f.name(), "mem://store/records/00000007.pcr");
  std::string buf(70000, '\0');
  ASSERT_TRUE(f.Read(1000, buf.size(), reinterpret_cast<uint8_t*>(buf.data())).ok());
  EXPECT_EQ(buf, obj.substr(1000, buf.size()));
  const uint64_t gets = mem->gets();
  ASSERT_TRUE(f.Read(1000, buf.size(), reinterpret_cast<uint8_t*>(buf.data())).ok());
  EXPECT_EQ(mem->gets(), gets);  // the cache had it
  // A failing origin: the read fails with the origin's error, the file stays usable.
  faulty->Arm(FaultyObjectClient::Fault::kError, 1, "", Status::IOError("down", EIO));
  Status s = f.Read(500000, 100, reinterpret_cast<uint8_t*>(buf.data()));
  EXPECT_EQ(s.message(), "down");
  ASSERT_TRUE(f.Read(500000, 100, reinterpret_cast<uint8_t*>(buf.data())).ok());
  EXPECT_EQ(buf.substr(0, 100), obj.substr(500000, 100));
  // A changed object is the index's business: Corruption naming both sizes.
  faulty->Arm(FaultyObjectClient::Fault::kOtherSize, 1);
  s = f.Read(800000, 100, reinterpret_cast<uint8_t*>(buf.data()));
  EXPECT_EQ(s.message(),
            "mem://store/records/00000007.pcr: the object changed (size 1048577, index says "
            "1048576): remount");
}

// A file's pieces asked together (RecordScheduler::WillRead -> PrefetchAll): over plain HTTP one
// multi-range GET, whose parts land where each piece's own GET would have put them; a server
// that answers one range is remembered, and the client asks one range per GET from then on.
TEST(ObjectClientTest, AFilesPiecesAreOneMultiRangeGet) {
  const std::string obj = Bytes(200000);
  std::atomic<int> mode{static_cast<int>(TestHttpServer::Ranges::kMultipart)};
  TestHttpServer server([&](const std::string& req, int) {
    return TestHttpServer::ServeRanges(obj, req, static_cast<TestHttpServer::Ranges>(mode.load()));
  });
  auto http = HttpClient::Create(HttpClientOptions{});
  ASSERT_TRUE(http.has_value());
  std::shared_ptr<ObjectClient> client =
      MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)),
                           std::make_unique<HttpProtocol>(*ParseUrl(server.url(""))));
  auto cache = MemoryCache(8 << 20);
  const std::vector<SpeculationSource::Span> pieces = {
      {100, 1000}, {20000, 500}, {90000, 7000}, {199000, 1000}};
  auto read_all = [&](const RemoteFile& f) {
    f.PrefetchAll(pieces);
    for (const auto& p : pieces) {
      std::string buf(p.length, '\0');
      ASSERT_TRUE(f.Read(p.offset, p.length, reinterpret_cast<uint8_t*>(buf.data())).ok());
      EXPECT_EQ(buf, obj.substr(p.offset, p.length)) << p.offset;
    }
  };
  RemoteFile a(client, "a.pcr", obj.size(), cache, 1);
  read_all(a);
  ASSERT_EQ(server.requests(), 1);
  EXPECT_NE(server.received()[0].find("Range: bytes=100-1099,20000-20499,90000-96999,"
                                      "199000-199999\r\n"),
            std::string::npos);
  // A server that answers the first range only: the others asked alone, then every range.
  mode = static_cast<int>(TestHttpServer::Ranges::kFirst);
  RemoteFile b(client, "b.pcr", obj.size(), cache, 2);
  read_all(b);
  EXPECT_EQ(server.requests(), 1 + 1 + 3);
  RemoteFile c(client, "c.pcr", obj.size(), cache, 3);
  read_all(c);
  ASSERT_EQ(server.requests(), 5 + 4);
  const auto received = server.received();
  for (size_t i = 5; i < received.size(); ++i) {
    const size_t at = received[i].find("Range: bytes=");
    ASSERT_NE(at, std::string::npos);
    const std::string line = received[i].substr(at, received[i].find("\r\n", at) - at);
    EXPECT_EQ(line.find(','), std::string::npos) << line;
  }
}

// A fetch longer than RemoteFile::kMultiRangePart (a window fetched ahead) keeps a GET of its
// own, whose bytes a reader gets as they arrive; the short ones still go together.
TEST(ObjectClientTest, ALongFetchKeepsItsOwnGet) {
  const std::string obj = Bytes(400000);
  TestHttpServer server(
      [&](const std::string& req, int) { return TestHttpServer::ServeRanges(obj, req); });
  auto http = HttpClient::Create(HttpClientOptions{});
  ASSERT_TRUE(http.has_value());
  std::shared_ptr<ObjectClient> client =
      MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)),
                           std::make_unique<HttpProtocol>(*ParseUrl(server.url(""))));
  RemoteFile f(client, "w.pcr", obj.size(), MemoryCache(8 << 20), 1);
  const uint64_t longer = RemoteFile::kMultiRangePart + 1;
  const std::vector<SpeculationSource::Span> spans = {{0, longer}, {300000, 100}, {350000, 100}};
  f.PrefetchAll(spans);
  for (const auto& p : spans) {
    std::string buf(p.length, '\0');
    ASSERT_TRUE(f.Read(p.offset, p.length, reinterpret_cast<uint8_t*>(buf.data())).ok());
    EXPECT_EQ(buf, obj.substr(p.offset, p.length)) << p.offset;
  }
  ASSERT_EQ(server.requests(), 2);
  int multi = 0;
  for (const std::string& req : server.received()) {
    if (req.find("Range: bytes=0-" + std::to_string(longer - 1) + "\r\n") != std::string::npos) {
      continue;
    }
    EXPECT_NE(req.find("Range: bytes=300000-300099,350000-350099\r\n"), std::string::npos) << req;
    ++multi;
  }
  EXPECT_EQ(multi, 1);
}

// Where the store answers one range per GET (S3, Azure, GCS; here the fakes), GetRanges sends
// one GET per range, all at once, and checks each answer as Get does.
TEST(ObjectClientTest, GetRangesOverTheFakesIsOneCheckedGetPerRange) {
  auto mem = std::make_shared<MemoryObjectClient>();
  const std::string obj = Bytes(100000);
  mem->Put("k", obj);
  auto faulty = std::make_shared<FaultyObjectClient>(mem);
  std::vector<std::string> bufs(4, std::string(100, '\0'));
  std::vector<ObjectGet> gets;
  for (size_t i = 0; i < bufs.size(); ++i) {
    ObjectGet g;
    g.key = "k";
    g.range = ByteRange{i * 1000, 100};
    g.expected_size = obj.size();
    g.dst = reinterpret_cast<uint8_t*>(bufs[i].data());
    g.dst_size = 100;
    gets.push_back(std::move(g));
  }
  gets[3].range = ByteRange{obj.size() - 10, 100};  // past the end: refused before sending
  faulty->Arm(FaultyObjectClient::Fault::kOtherSize, 1, "", Status::OK());
  std::vector<std::promise<Result<ObjectData>>> done(gets.size());
  faulty->GetRanges(std::move(gets),
                    [&done](size_t i, Result<ObjectData> r) { done[i].set_value(std::move(r)); });
  std::vector<Result<ObjectData>> results;
  for (auto& d : done) results.push_back(d.get_future().get());
  EXPECT_EQ(mem->gets(), 3u);  // the 4th was not sent
  int changed = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (!results[i].has_value()) {
      ++changed;
      EXPECT_NE(results[i].error().message().find("the object changed (size 100001"),
                std::string::npos)
          << results[i].error().ToString();
      continue;
    }
    EXPECT_EQ(bufs[i], obj.substr(i * 1000, 100));
  }
  EXPECT_EQ(changed, 1);
  ASSERT_FALSE(results[3].has_value());
  EXPECT_NE(results[3].error().message().find("is past the end"), std::string::npos);
}

// A window fetched ahead at a reader's request (a promotion) is speculation: fetched only with
// room for it in the cache (half of it, less what is unread), its bytes unread until read; a
// demand prefetch's do not count.
TEST(ObjectClientTest, AWindowFetchedAheadCountsAsUnreadUntilRead) {
  auto mem = std::make_shared<MemoryObjectClient>();
  const std::string obj = Bytes(4 << 20);
  mem->Put("records/00000001.pcr", obj);
  auto cache = MemoryCache(1 << 20);  // room for 512 KiB fetched ahead
  ASSERT_NE(cache, nullptr);
  RemoteFile f(mem, "records/00000001.pcr", obj.size(), cache, 1);
  EXPECT_EQ(f.AheadRoom(), 512u << 10);
  std::string buf(4096, '\0');
  auto* dst = reinterpret_cast<uint8_t*>(buf.data());
  f.Prefetch(2 << 20, 512 << 10);
  ASSERT_TRUE(f.Read(2 << 20, buf.size(), dst).ok());  // waits for the fetch
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 0u);
  EXPECT_FALSE(f.PrefetchAhead(0, 900 << 10));  // no room for it: nothing is fetched
  EXPECT_EQ(mem->gets(), 1u);
  ASSERT_TRUE(f.PrefetchAhead(0, 400 << 10));
  ASSERT_TRUE(f.Read(0, buf.size(), dst).ok());
  EXPECT_EQ(buf, obj.substr(0, buf.size()));
  EXPECT_EQ(cache->stats().unread_speculative_bytes, (400u << 10) - buf.size());
  EXPECT_EQ(f.AheadRoom(), (112u << 10) + buf.size());
  std::string rest((400 << 10) - buf.size(), '\0');
  ASSERT_TRUE(f.Read(buf.size(), rest.size(), reinterpret_cast<uint8_t*>(rest.data())).ok());
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 0u);
  EXPECT_EQ(f.AheadRoom(), 512u << 10);
}

// A reader that takes its bytes straight from a fetch ahead still in flight (it waits for its
// part, not for the cache) marks them read once they are in the cache: nothing stays unread.
TEST(ObjectClientTest, BytesTakenFromAFetchAheadInFlightAreRead) {
  auto mem = std::make_shared<MemoryObjectClient>();
  const std::string obj = Bytes(1 << 20);
  mem->Put("records/00000001.pcr", obj);
  auto held = std::make_shared<HeldObjectClient>(mem);
  auto cache = MemoryCache(1 << 20);
  ASSERT_NE(cache, nullptr);
  RemoteFile f(held, "records/00000001.pcr", obj.size(), cache, 1);
  held->set_holding(true);
  ASSERT_TRUE(f.PrefetchAhead(0, 256 << 10));
  EXPECT_EQ(cache->stats().reserved_ahead_bytes, 256u << 10);
  std::string buf(256 << 10, '\0');
  Status read;
  std::thread reader([&] { read = f.Read(0, buf.size(), reinterpret_cast<uint8_t*>(buf.data())); });
  ASSERT_EQ(held->WaitHeld(1, std::chrono::seconds(10)).size(), 1u);  // one GET, the window
  held->ReleaseAll();
  reader.join();
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(buf, obj.substr(0, buf.size()));
  EXPECT_EQ(cache->stats().reserved_ahead_bytes, 0u);
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 0u);
  EXPECT_EQ(mem->gets(), 1u);
}

TEST(ObjectClientTest, DownloadIsConditionalOnTheEtag) {
  MemoryObjectClient m;
  m.Put("index.lmdb", "v1 bytes");
  auto dir = std::filesystem::temp_directory_path() / ("oc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string dest = (dir / "index.lmdb").string();
  auto first = Download(m, "index.lmdb", dest);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->modified);
  auto same = Download(m, "index.lmdb", dest, first->etag);
  ASSERT_TRUE(same.has_value());
  EXPECT_FALSE(same->modified);
  m.Put("index.lmdb", "v2 bytes, longer");
  auto changed = Download(m, "index.lmdb", dest, first->etag);
  ASSERT_TRUE(changed.has_value());
  EXPECT_TRUE(changed->modified);
  std::ifstream in(dest);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "v2 bytes, longer");
  std::filesystem::remove_all(dir);
}

TEST(ObjectClientTest, MemoryListingPages) {
  MemoryObjectClient m;
  for (const char* k : {"b/2.jpg", "a/1.jpg", "c.txt"}) m.Put(k, k);
  auto p1 = m.List("", 2);
  ASSERT_TRUE(p1.has_value());
  ASSERT_EQ(p1->entries.size(), 2u);
  EXPECT_EQ(p1->entries[0].key, "a/1.jpg");
  auto p2 = m.List(p1->next_token, 2);
  ASSERT_TRUE(p2.has_value());
  ASSERT_EQ(p2->entries.size(), 1u);
  EXPECT_EQ(p2->entries[0].key, "c.txt");
  EXPECT_TRUE(p2->next_token.empty());
}

TEST(ObjectProtocolTest, HttpKeepsASignedQueryButNeverShowsIt) {
  auto root = ParseUrl("https://cdn.example.com/stores/one?sv=2024&sig=SECRET%2Bx");
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->ToString(), "https://cdn.example.com/stores/one");
  HttpProtocol p(*root);
  EXPECT_EQ(p.ObjectUrl("records/a b.pcr"),
            "https://cdn.example.com/stores/one/records/a%20b.pcr?sv=2024&sig=SECRET%2Bx");
  EXPECT_EQ(p.Name("records/a b.pcr"), "https://cdn.example.com/stores/one/records/a%20b.pcr");
  EXPECT_FALSE(p.ListUrl("", 10).has_value());
  EXPECT_FALSE(ParseUrl("s3://bucket/p?x=1").has_value());
  EXPECT_FALSE(ParseUrl("http://h/p#frag").has_value());
}

TEST(ObjectProtocolTest, S3ListingIsParsedRelativeToThePrefix) {
  S3Config c;
  c.bucket = "b";
  c.prefix = "train";
  c.endpoint = *ParseUrl("http://127.0.0.1:9000");
  S3Protocol p(c);
  EXPECT_EQ(p.Name("cats/a.jpg"), "s3://b/train/cats/a.jpg");
  EXPECT_EQ(p.ObjectUrl(""), "http://127.0.0.1:9000/b/train");
  const std::string page =
      "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
      "<Contents><Key>train/</Key><Size>0</Size><LastModified>2026-01-02T03:04:05.678Z"
      "</LastModified></Contents>"
      "<Contents><Key>train/cats/a&amp;b.jpg</Key><Size>12</Size><LastModified>"
      "2026-01-02T03:04:05Z</LastModified></Contents>"
      "<NextContinuationToken>tok&lt;1</NextContinuationToken></ListBucketResult>";
  auto l = p.ParseListing(page);
  ASSERT_TRUE(l.has_value()) << l.error().ToString();
  ASSERT_EQ(l->entries.size(), 1u);
  EXPECT_EQ(l->entries[0].key, "cats/a&b.jpg");
  EXPECT_EQ(l->entries[0].size, 12u);
  EXPECT_EQ(l->next_token, "tok<1");
  auto outside = p.ParseListing(
      "<ListBucketResult><Contents><Key>other/x</Key><Size>1</Size><LastModified>"
      "2026-01-02T03:04:05Z</LastModified></Contents></ListBucketResult>");
  ASSERT_FALSE(outside.has_value());
  EXPECT_NE(outside.error().message().find("outside the prefix"), std::string::npos);
  EXPECT_FALSE(p.ParseListing("<ListBucketResult><IsTruncated>true</IsTruncated>"
                              "</ListBucketResult>")
                   .has_value());
  EXPECT_FALSE(p.ParseListing("<html>").has_value());
}

TEST(RequestSignerTest, WhatCountsAsARefusedAuthority) {
  EXPECT_TRUE(RefusalIsAuth(400, "ExpiredToken"));
  EXPECT_TRUE(RefusalIsAuth(403, "InvalidAccessKeyId"));
  EXPECT_TRUE(RefusalIsAuth(403, "SignatureDoesNotMatch"));
  EXPECT_TRUE(RefusalIsAuth(403, "AuthenticationFailed"));
  EXPECT_TRUE(RefusalIsAuth(401, ""));
  EXPECT_FALSE(RefusalIsAuth(403, "AccessDenied"));
  EXPECT_FALSE(RefusalIsAuth(404, "ExpiredToken"));
  EXPECT_FALSE(RefusalIsAuth(400, "InvalidRequest"));
}

// Credentials that a test rotates: generation n has access key "AK<n>".
class RotatingSource final : public AwsCredentialSource {
 public:
  std::shared_ptr<const AwsCredentialsSnapshot> Current() const override {
    MutexLock lock(&mu_);
    return current_;
  }
  bool RequestRenewal(uint64_t generation) const override {
    renewals_asked_++;
    MutexLock lock(&mu_);
    if (generation == current_->generation) Rotate();
    return true;
  }
  std::string DescribeJson() const override { return R"({"source":"test"})"; }
  void Rotate() const REQUIRES(mu_) {
    const uint64_t g = current_->generation + 1;
    current_ = std::make_shared<AwsCredentialsSnapshot>(AwsCredentialsSnapshot{
        Credentials("AK" + std::to_string(g), "SK" + std::to_string(g)), std::nullopt, g, "test"});
  }
  mutable std::atomic<int> renewals_asked_{0};

 private:
  mutable Mutex mu_;
  mutable std::shared_ptr<const AwsCredentialsSnapshot> current_ GUARDED_BY(mu_) =
      std::make_shared<AwsCredentialsSnapshot>(AwsCredentialsSnapshot{Credentials("AK1", "SK1"),
                                                                      std::nullopt, 1, "test"});
};

// The server accepts only the newest key (AK2): AK1 gets 400 ExpiredToken, as S3 answers.
TEST(HttpAuthTest, AnExpiredCredentialIsRenewedAndTheReadRetried) {
  const std::string obj = Bytes(100);
  TestHttpServer server([&](const std::string& req, int) {
    if (req.find("Credential=AK2/") == std::string::npos) {
      return TestHttpServer::Reply(400, "Bad Request",
                                   "<Error><Code>ExpiredToken</Code><Message>x</Message></Error>");
    }
    return TestHttpServer::Reply(206, "Partial Content", obj.substr(0, 10),
                                 "Content-Range: bytes 0-9/100\r\n");
  });
  auto source = std::make_shared<RotatingSource>();
  HttpClientOptions o;
  o.signer = std::make_shared<SigV4RequestSigner>(source, "us-east-1");
  auto http = HttpClient::Create(o);
  ASSERT_TRUE(http.has_value());
  auto client = MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)),
                                     std::make_unique<HttpProtocol>(*ParseUrl(server.url(""))));
  std::string got;
  auto r = ReadRange(*client, "k", 0, 10, &got, 100);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(got, obj.substr(0, 10));
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(source->renewals_asked_.load(), 1);
  EXPECT_EQ(client->stats().retries[static_cast<size_t>(RetryReason::kAuth)], 1u);
}

// A refusal the signer cannot help (AccessDenied; or static keys) fails at once, counted by
// reason.
TEST(HttpAuthTest, AccessDeniedIsNotRetriedAndIsCountedByReason) {
  TestHttpServer server([&](const std::string&, int) {
    return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
  });
  auto source = std::make_shared<RotatingSource>();
  HttpClientOptions o;
  o.signer = std::make_shared<SigV4RequestSigner>(source, "us-east-1");
  auto http = HttpClient::Create(o);
  ASSERT_TRUE(http.has_value());
  std::shared_ptr<HttpClient> shared(std::move(*http));
  auto client =
      MakeHttpObjectClient(shared, std::make_unique<HttpProtocol>(*ParseUrl(server.url(""))));
  std::string got;
  auto r = ReadRange(*client, "k", 0, 10, &got, 100);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(source->renewals_asked_.load(), 0);
  EXPECT_EQ(shared->stats().failed_by_reason.at("403 AccessDenied"), 1u);
}

// A bearer token in a header file that is rewritten: the 401 makes the client look at the file
// again, and the retry carries the new token.
TEST(HttpAuthTest, ARotatedHeaderFileIsReadAgainAfterA401) {
  auto dir = std::filesystem::temp_directory_path() / ("hf-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "headers").string();
  std::ofstream(file) << "Authorization: Bearer token-1\n";
  TestHttpServer server([&](const std::string& req, int) {
    if (req.find("Authorization: Bearer token-22\r\n") == std::string::npos) {
      return TestHttpServer::Reply(401, "Unauthorized", "");
    }
    return TestHttpServer::Reply(200, "OK", "0123456789");
  });
  HttpClientOptions o;
  o.headers_file = file;
  auto http = HttpClient::Create(o);
  ASSERT_TRUE(http.has_value());
  auto client = MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)),
                                     std::make_unique<HttpProtocol>(*ParseUrl(server.url(""))));
  ObjectGet g;
  g.key = "k";
  auto refused = client->GetBlocking(g);
  ASSERT_FALSE(refused.has_value());  // token-1, and the file did not change
  EXPECT_NE(refused.error().message().find("401"), std::string::npos);
  std::ofstream(file) << "Authorization: Bearer token-22\n";  // rotated
  auto r = client->GetBlocking(g);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->body, "0123456789");
  std::filesystem::remove_all(dir);
}

// A signed URL's token in a file (-o query_file) that rotates: the refused request makes the
// signer look at the file at once, and the retry carries the new token after the URL's own
// query. No header is added.
TEST(HttpAuthTest, ARotatedQueryFileIsReadAgainAfterARefusal) {
  auto dir = std::filesystem::temp_directory_path() / ("qf-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "query").string();
  std::ofstream(file) << "?Expires=1&Signature=old\n";
  std::atomic<int> refused{0};
  TestHttpServer server([&](const std::string& req, int) {
    if (req.find("GET /store/k?v=1&Expires=22&Signature=new HTTP/1.1") == std::string::npos) {
      ++refused;
      return TestHttpServer::Reply(403, "Forbidden", "");
    }
    EXPECT_EQ(req.find("x-ms-"), std::string::npos);
    return TestHttpServer::Reply(200, "OK", "0123456789");
  });
  auto signer = QueryTokenSigner::FromFile(file, QueryTokenSigner::Flavor::kHttpQuery);
  ASSERT_TRUE(signer.has_value()) << signer.error().ToString();
  HttpClientOptions o;
  o.signer = *signer;
  auto http = HttpClient::Create(o);
  ASSERT_TRUE(http.has_value());
  auto client =
      MakeHttpObjectClient(std::shared_ptr<HttpClient>(std::move(*http)),
                           std::make_unique<HttpProtocol>(*ParseUrl(server.url("/store?v=1"))));
  ObjectGet g;
  g.key = "k";
  auto first = client->GetBlocking(g);
  ASSERT_FALSE(first.has_value());  // the old token, and the file did not change: not retried
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(first.error().message().find("Signature"), std::string::npos);
  std::ofstream(file) << "Expires=22&Signature=new\n";  // rotated
  auto r = client->GetBlocking(g);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ(r->body, "0123456789");
  EXPECT_EQ(client->DescribeAuthJson().find("Signature"), std::string::npos);
  std::ofstream(file) << "not a token\n";  // a bad rewrite keeps the last good token
  EXPECT_TRUE(client->GetBlocking(g).has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pcrfs
