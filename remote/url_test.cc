#include "remote/url.h"

#include <gtest/gtest.h>

namespace pcrfs {
namespace {

TEST(UrlTest, IsRemoteUrl) {
  EXPECT_TRUE(IsRemoteUrl("s3://bucket/prefix"));
  EXPECT_TRUE(IsRemoteUrl("HTTPS://host/x"));
  EXPECT_TRUE(IsRemoteUrl("http://127.0.0.1:8080"));
  EXPECT_FALSE(IsRemoteUrl("/data/store"));
  EXPECT_FALSE(IsRemoteUrl("store"));
  EXPECT_FALSE(IsRemoteUrl("s3:/bucket"));
  EXPECT_FALSE(IsRemoteUrl("ftp://host/x"));
}

TEST(UrlTest, ParsesS3) {
  auto u = ParseUrl("s3://my-bucket/stores/imagenet/");
  ASSERT_TRUE(u.has_value()) << u.error().ToString();
  EXPECT_TRUE(u->is_s3());
  EXPECT_EQ(u->host, "my-bucket");
  EXPECT_EQ(u->path, "stores/imagenet");
  EXPECT_EQ(u->ToString(), "s3://my-bucket/stores/imagenet");
  EXPECT_EQ(u->Join("records/00000042.pcr").path, "stores/imagenet/records/00000042.pcr");

  auto whole = ParseUrl("s3://bucket");
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->path, "");
  EXPECT_EQ(whole->Join("manifest.json").path, "manifest.json");
}

TEST(UrlTest, ParsesHttpPortsAndIpv6) {
  auto u = ParseUrl("http://Example.COM/a/b/");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/a/b");
  EXPECT_EQ(u->Authority(), "example.com");
  EXPECT_EQ(u->ToString(), "http://example.com/a/b");

  auto s = ParseUrl("https://h:8443");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->port, 8443);
  EXPECT_EQ(s->path, "");
  EXPECT_EQ(s->Authority(), "h:8443");
  EXPECT_EQ(s->Join("manifest.json").ToString(), "https://h:8443/manifest.json");

  auto v6 = ParseUrl("http://[::1]:9000/store");
  ASSERT_TRUE(v6.has_value()) << v6.error().ToString();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9000);
  EXPECT_EQ(v6->Authority(), "[::1]:9000");
  EXPECT_EQ(v6->ToString(), "http://[::1]:9000/store");

  auto v6default = ParseUrl("https://[2001:db8::1]/x");
  ASSERT_TRUE(v6default.has_value());
  EXPECT_EQ(v6default->port, 443);
  EXPECT_EQ(v6default->Authority(), "[2001:db8::1]");
}

TEST(UrlTest, AnHttpQueryIsKeptButNeverShown) {
  auto u = ParseUrl("https://acct.blob.core.windows.net/c/store?sv=2024-01-01&sig=abc%2Fdef");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->query, "sv=2024-01-01&sig=abc%2Fdef");
  EXPECT_EQ(u->ToString(), "https://acct.blob.core.windows.net/c/store");
  EXPECT_EQ(u->Join("records/1.pcr").ToString(),
            "https://acct.blob.core.windows.net/c/store/records/1.pcr");
  auto g = ParseUrl("gs://bucket/train");
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(g->is_s3());
  EXPECT_EQ(g->ToString(), "gs://bucket/train");
  EXPECT_TRUE(IsRemoteUrl("az://container/p"));
  EXPECT_TRUE(IsRemoteUrl("GS://b"));
}

TEST(UrlTest, RefusesBadUrls) {
  for (const char* bad :
       {"ftp://h/x", "http://", "http:///x", "http://h:0/", "http://h:65536/", "http://h:x/",
        "http://h:/", "http://::1/x", "http://[::1/x", "http://[::1]x/", "s3://bucket/x?a=1",
        "gs://bucket/x?a=1", "http://h/x#f", "http://h/a/../b", "http://h/./b", "s3://", "s3://ab",
        "s3://Bad_Bucket/x", "s3://bucket/a/../b"}) {
    auto u = ParseUrl(bad);
    EXPECT_FALSE(u.has_value()) << bad;
    if (!u.has_value()) {
      EXPECT_EQ(u.error().code(), Status::Code::kInvalidArgument);
    }
  }
}

TEST(UrlTest, UserInfoIsRefusedAndNeverEchoed) {
  auto u = ParseUrl("https://alice:hunter2@host/store");
  ASSERT_FALSE(u.has_value());
  EXPECT_EQ(u.error().message().find("hunter2"), std::string::npos) << u.error().ToString();
  EXPECT_NE(u.error().message().find("https://host/store"), std::string::npos);
}

TEST(UrlTest, RedactUrl) {
  EXPECT_EQ(RedactUrl("https://u:p@h/x?token=1#f"), "https://h/x");
  EXPECT_EQ(RedactUrl("http://h/x?X-Amz-Signature=abc"), "http://h/x");
  EXPECT_EQ(RedactUrl("s3://bucket/prefix"), "s3://bucket/prefix");
  EXPECT_EQ(RedactUrl("http://h/a@b"), "http://h/a@b");  // '@' in the path is not user info
  EXPECT_EQ(RedactUrl("/local/path"), "/local/path");
}

TEST(UrlTest, UriEncodeFollowsSigV4) {
  EXPECT_EQ(UriEncode("AZaz09-._~", false), "AZaz09-._~");
  EXPECT_EQ(UriEncode("a b+c/d", true), "a%20b%2Bc/d");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("%41", true), "%2541");  // never decoded first: encoded exactly once
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(UriEncode("=&*", false), "%3D%26%2A");
}

TEST(UrlTest, JoinEncodesHttpNamesOnce) {
  auto u = ParseUrl("http://h/my%20store");
  ASSERT_TRUE(u.has_value());
  // The base path stays as given; the joined name is encoded once.
  EXPECT_EQ(u->Join("records/a b.pcr").ToString(), "http://h/my%20store/records/a%20b.pcr");
  auto s3 = ParseUrl("s3://bucket/p q");
  ASSERT_TRUE(s3.has_value());
  EXPECT_EQ(s3->Join("x y").path, "p q/x y");  // S3 keys are raw; encoded when signed and sent
}

}  // namespace
}  // namespace pcrfs
