#include "remote/s3_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace pcrfs {
namespace {

// A fake environment with a temporary HOME.
class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::temp_directory_path() /
            ("s3config-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(home_ / ".aws");
    env_["HOME"] = home_.string();
    // No probing of a metadata service from unit tests (the chain's last step).
    env_["AWS_EC2_METADATA_DISABLED"] = "true";
  }
  void TearDown() override { std::filesystem::remove_all(home_); }

  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(home_ / rel) << text;
  }
  Result<S3Config> Resolve(const std::string& url, const S3Options& o = {}) {
    auto u = ParseUrl(url);
    EXPECT_TRUE(u.has_value());
    return ResolveS3Config(*u, o, [this](const char* n) -> const char* {
      auto it = env_.find(n);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
  }

  std::filesystem::path home_;
  std::map<std::string, std::string> env_;
};

TEST_F(S3ConfigTest, DefaultsAreAnonymousUsEast1VirtualHost) {
  auto c = Resolve("s3://bucket/stores/a");
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(c->endpoint.ToString(), "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);
  EXPECT_TRUE(c->credentials().empty());
  EXPECT_EQ(c->MakeSigner(), nullptr);
  EXPECT_EQ(c->ObjectUrl("records/00000042.pcr"),
            "https://bucket.s3.us-east-1.amazonaws.com/stores/a/records/00000042.pcr");
}

// gs:// is GCS's S3-compatible XML API: Google's endpoint, region "auto", HMAC keys as AWS keys.
TEST_F(S3ConfigTest, GcsUsesGooglesEndpoint) {
  env_["AWS_ACCESS_KEY_ID"] = "GOOGHMACKEYID0000000";
  env_["AWS_SECRET_ACCESS_KEY"] = "hmac-secret";
  auto c = Resolve("gs://bucket/stores/a");
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_TRUE(c->gcs);
  EXPECT_EQ(c->region, "auto");
  EXPECT_EQ(c->endpoint.ToString(), "https://storage.googleapis.com");
  EXPECT_EQ(c->ObjectUrl("records/00000042.pcr"),
            "https://bucket.storage.googleapis.com/stores/a/records/00000042.pcr");
  EXPECT_EQ(c->credentials().access_key_id(), "GOOGHMACKEYID0000000");
  S3Options o;
  o.endpoint = "http://127.0.0.1:4443";
  EXPECT_EQ(Resolve("gs://bucket/p", o)->ObjectUrl("x"), "http://127.0.0.1:4443/bucket/p/x");
}

TEST_F(S3ConfigTest, RegionOrder) {
  Write(".aws/config", "[default]\nregion = eu-north-1\n[profile other]\nregion=ap-south-1\n");
  EXPECT_EQ(Resolve("s3://bucket")->region, "eu-north-1");
  env_["AWS_PROFILE"] = "other";
  env_["AWS_ACCESS_KEY_ID"] = "AK";  // so the absent credentials profile is no error
  env_["AWS_SECRET_ACCESS_KEY"] = "SK";
  EXPECT_EQ(Resolve("s3://bucket")->region, "ap-south-1");
  env_["AWS_DEFAULT_REGION"] = "us-west-1";
  EXPECT_EQ(Resolve("s3://bucket")->region, "us-west-1");
  env_["AWS_REGION"] = "us-west-2";
  EXPECT_EQ(Resolve("s3://bucket")->region, "us-west-2");
  S3Options o;
  o.region = "ca-central-1";
  auto c = Resolve("s3://bucket", o);
  EXPECT_EQ(c->region, "ca-central-1");
  EXPECT_EQ(c->endpoint.ToString(), "https://s3.ca-central-1.amazonaws.com");
  o.region = "bad region";
  EXPECT_FALSE(Resolve("s3://bucket", o).has_value());
}

TEST_F(S3ConfigTest, ConfigFileFromEnvironment) {
  Write("cfg",
        "[profile p]\nregion = eu-west-3\naws_access_key_id = CFGKEY\n"
        "aws_secret_access_key = CFGSECRET\n");
  env_["AWS_CONFIG_FILE"] = (home_ / "cfg").string();
  S3Options o;
  o.profile = "p";
  auto c = Resolve("s3://bucket", o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->credentials().access_key_id(), "CFGKEY");
}

TEST_F(S3ConfigTest, EndpointOrderAndPathStyle) {
  env_["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000";
  auto c = Resolve("s3://bucket/p");
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->ObjectUrl("a b/c+d.pcr"), "http://127.0.0.1:9000/bucket/p/a%20b/c%2Bd.pcr");
  EXPECT_EQ(c->ListUrl(), "http://127.0.0.1:9000/bucket/?list-type=2&prefix=p%2F");
  EXPECT_EQ(c->ListUrl("a/b=="),
            "http://127.0.0.1:9000/bucket/?list-type=2&prefix=p%2F&continuation-token=a%2Fb%3D%3D");
  env_["AWS_ENDPOINT_URL_S3"] = "http://[::1]:9001";
  EXPECT_EQ(Resolve("s3://bucket/p")->ObjectUrl("x"), "http://[::1]:9001/bucket/p/x");
  S3Options o;
  o.endpoint = "https://minio.local";
  o.addressing = S3Options::Addressing::kVirtualHost;
  EXPECT_EQ(Resolve("s3://bucket/p", o)->ObjectUrl("x"), "https://bucket.minio.local/p/x");
  o.endpoint = "ftp://nope";
  auto bad = Resolve("s3://bucket/p", o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("option endpoint"), std::string::npos);
}

TEST_F(S3ConfigTest, CredentialsFromEnvironment) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  env_["AWS_SESSION_TOKEN"] = "ENVTOKEN";
  auto c = Resolve("s3://bucket");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->credentials().access_key_id(), "ENVKEY");
  EXPECT_EQ(c->credentials().secret_access_key(), "ENVSECRET");
  EXPECT_EQ(c->credentials().session_token(), "ENVTOKEN");
  EXPECT_EQ(c->credentials_source, "environment");
  EXPECT_EQ(c->credentials().ToString().find("ENVSECRET"), std::string::npos);
  EXPECT_EQ(c->credentials().ToString().find("ENVTOKEN"), std::string::npos);
  ASSERT_NE(c->MakeSigner(), nullptr);

  // A key id without its secret is an error naming the missing variable.
  env_.erase("AWS_SECRET_ACCESS_KEY");
  auto half = Resolve("s3://bucket");
  ASSERT_FALSE(half.has_value());
  EXPECT_EQ(half.error().message().find("ENVTOKEN"), std::string::npos);
  EXPECT_NE(half.error().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  // A secret without a key id is ignored, as botocore's environment provider ignores it: the
  // chain goes on (here to nothing: anonymous).
  env_.erase("AWS_ACCESS_KEY_ID");
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  auto lone = Resolve("s3://bucket");
  ASSERT_TRUE(lone.has_value()) << lone.error().ToString();
  EXPECT_TRUE(lone->credentials().empty());
  EXPECT_EQ(lone->credentials_source.find("ENVSECRET"), std::string::npos);
  EXPECT_EQ(lone->credentials_source.rfind("none (anonymous: no AWS credentials: ", 0), 0u)
      << lone->credentials_source;
}

TEST_F(S3ConfigTest, SharedCredentialsFileAndProfiles) {
  Write(".aws/credentials",
        "# comment\n[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = DEFSECRET\n"
        "\n[train]\naws_access_key_id=TRAINKEY\naws_secret_access_key=TRAINSECRET\n"
        "aws_session_token=TRAINTOKEN\n[broken]\naws_access_key_id=X\n");
  auto c = Resolve("s3://bucket");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->credentials().access_key_id(), "DEFKEY");
  env_["AWS_PROFILE"] = "train";
  c = Resolve("s3://bucket");
  EXPECT_EQ(c->credentials().access_key_id(), "TRAINKEY");
  EXPECT_EQ(c->credentials().session_token(), "TRAINTOKEN");
  S3Options o;
  o.profile = "broken";  // the option wins over AWS_PROFILE
  auto broken = Resolve("s3://bucket", o);
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.error().message().find("'broken'"), std::string::npos);
  o.profile = "missing";
  auto missing = Resolve("s3://bucket", o);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find("'missing' not found"), std::string::npos);

  // AWS_SHARED_CREDENTIALS_FILE replaces ~/.aws/credentials.
  Write("creds2", "[train]\naws_access_key_id=OTHER\naws_secret_access_key=S\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = (home_ / "creds2").string();
  EXPECT_EQ(Resolve("s3://bucket")->credentials().access_key_id(), "OTHER");
}

TEST_F(S3ConfigTest, NoSignWinsOverEverything) {
  env_["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env_["AWS_SECRET_ACCESS_KEY"] = "ENVSECRET";
  S3Options o;
  o.no_sign = true;
  auto c = Resolve("s3://bucket", o);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->credentials().empty());
  EXPECT_EQ(c->MakeSigner(), nullptr);
}

TEST_F(S3ConfigTest, NotS3IsAnError) {
  auto u = ParseUrl("http://h/x");
  ASSERT_TRUE(u.has_value());
  EXPECT_FALSE(ResolveS3Config(*u, {}).has_value());
}

}  // namespace
}  // namespace pcrfs
