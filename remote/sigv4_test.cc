#include "remote/sigv4.h"

#include <gtest/gtest.h>

#include <sstream>
#include <thread>

namespace pcrfs {
namespace {

// AWS's published examples ("Authenticating Requests: Using the Authorization Header",
// Signature Version 4 examples of the S3 API reference): credentials, date and bucket.
const char kAccessKey[] = "AKIAIOSFODNN7EXAMPLE";
const char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const char kHost[] = "examplebucket.s3.amazonaws.com";

std::chrono::system_clock::time_point May24() {
  // 2013-05-24T00:00:00Z
  return std::chrono::system_clock::time_point(std::chrono::seconds(1369353600));
}

std::string SignatureOf(const HeaderList& h) {
  for (const auto& [k, v] : h) {
    if (k == "Authorization") return v.substr(v.find("Signature=") + 10);
  }
  return "";
}

TEST(SigV4Test, Primitives) {
  EXPECT_EQ(Sha256Hex(""), kEmptyPayloadSha256);
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(AmzDate(May24()), "20130524T000000Z");
}

TEST(SigV4Test, AwsGetObjectWithRange) {
  SigV4Signer signer(Credentials(kAccessKey, kSecret), "us-east-1");
  SigV4Request r;
  r.method = "GET";
  r.path = "/test.txt";
  r.headers = {{"Host", kHost}, {"Range", "bytes=0-9"}};
  r.payload_hash = std::string(kEmptyPayloadSha256);

  // The intermediate steps exactly as AWS documents them.
  SigV4Request full = r;
  full.headers.emplace_back("x-amz-content-sha256", std::string(kEmptyPayloadSha256));
  full.headers.emplace_back("x-amz-date", "20130524T000000Z");
  std::string signed_headers;
  std::string canonical = SigV4Signer::CanonicalRequest(full, &signed_headers);
  EXPECT_EQ(canonical,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            "\nx-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(signer.StringToSign("20130524T000000Z", canonical),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");

  HeaderList h = signer.Sign(r, May24());
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], (std::pair<std::string, std::string>("x-amz-date", "20130524T000000Z")));
  EXPECT_EQ(h[1].first, "x-amz-content-sha256");
  EXPECT_EQ(h[2].second,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, AwsGetBucketLifecycle) {
  SigV4Signer signer(Credentials(kAccessKey, kSecret), "us-east-1");
  SigV4Request r;
  r.path = "/";
  r.query = {{"lifecycle", ""}};
  r.headers = {{"Host", kHost}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  EXPECT_EQ(SignatureOf(signer.Sign(r, May24())),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, AwsListObjects) {
  SigV4Signer signer(Credentials(kAccessKey, kSecret), "us-east-1");
  SigV4Request r;
  r.path = "/";
  // Given out of order: the canonical query sorts them.
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  r.headers = {{"Host", kHost}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  EXPECT_EQ(SigV4Signer::CanonicalQuery(r.query), "max-keys=2&prefix=J");
  EXPECT_EQ(SignatureOf(signer.Sign(r, May24())),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, CanonicalQueryEncodesOnce) {
  EXPECT_EQ(SigV4Signer::CanonicalQuery({{"prefix", "a b/c"}, {"list-type", "2"}}),
            "list-type=2&prefix=a%20b%2Fc");
}

TEST(SigV4Test, SessionTokenIsSignedAndSecretsNeverPrinted) {
  Credentials c(kAccessKey, kSecret, "TOKEN-SECRET-123");
  SigV4Signer signer(c, "eu-west-1");
  SigV4Request r;
  r.path = "/k";
  r.headers = {{"host", "h"}};
  HeaderList h = signer.Sign(r, May24());
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[2],
            (std::pair<std::string, std::string>("x-amz-security-token", "TOKEN-SECRET-123")));
  EXPECT_NE(h[3].second.find("x-amz-security-token"), std::string::npos);
  EXPECT_NE(h[3].second.find("/eu-west-1/s3/"), std::string::npos);

  std::ostringstream os;
  os << c;
  for (const std::string& s : {c.ToString(), os.str()}) {
    EXPECT_EQ(s.find(kSecret), std::string::npos);
    EXPECT_EQ(s.find("TOKEN-SECRET"), std::string::npos);
    EXPECT_NE(s.find(kAccessKey), std::string::npos);
  }
}

TEST(SigV4Test, HeaderValuesTrimmedAndNamesLowered) {
  SigV4Request r;
  r.headers = {{"X-Amz-Meta-A", "  a   b  "}, {"Host", "h"}};
  std::string names;
  std::string c = SigV4Signer::CanonicalRequest(r, &names);
  EXPECT_EQ(names, "host;x-amz-meta-a");
  EXPECT_NE(c.find("x-amz-meta-a:a b\n"), std::string::npos);
}

TEST(SigV4Test, ConcurrentSignersAgree) {
  SigV4Signer signer(Credentials(kAccessKey, kSecret), "us-east-1");
  SigV4Request r;
  r.path = "/test.txt";
  r.headers = {{"Host", kHost}, {"Range", "bytes=0-9"}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        // Alternate days so the cached key is replaced under contention.
        auto when = May24() + std::chrono::hours(24 * (i % 2));
        std::string sig = SignatureOf(signer.Sign(r, when));
        if (i % 2 == 0 && sig == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
          ++good;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 400);
}

}  // namespace
}  // namespace pcrfs
