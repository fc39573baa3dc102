#include "remote/object_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "remote/test_server.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

TEST(ObjectWriterTest, PlansParts) {
  EXPECT_TRUE(PlanParts(0, 8).empty());
  auto p = PlanParts(20, 8);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[2].offset, 16u);
  EXPECT_EQ(p[2].length, 4u);
  // More than max_parts: the parts grow.
  p = PlanParts(100, 1, 10);
  ASSERT_EQ(p.size(), 10u);
  EXPECT_EQ(p[9].offset + p[9].length, 100u);
  p = PlanParts(101, 1, 10);
  EXPECT_LE(p.size(), 10u);
  EXPECT_EQ(p.back().offset + p.back().length, 101u);
}

TEST(ObjectWriterTest, ParsesAnswers) {
  auto id = ParseUploadId("s3://b/k", R"(<?xml version="1.0"?>
<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc.d</UploadId>
</InitiateMultipartUploadResult>)");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*id, "abc.d");
  auto bad = ParseUploadId("s3://b/k", "<Error><Code>X</Code></Error>");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), "s3://b/k: CreateMultipartUpload answered without an UploadId");

  EXPECT_EQ(CompleteMultipartBody({"\"a1\"", "b2"}),
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;a1&quot;</ETag>"
            "</Part><Part><PartNumber>2</PartNumber><ETag>&quot;b2&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");

  auto ok = CheckS3WriteAnswer(
      "s3://b/k", "<CopyObjectResult><ETag>\"e\"</ETag></CopyObjectResult>", "CopyObjectResult");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, "\"e\"");
  // A 200 whose body is an error: the copy failed after the answer began.
  auto late = CheckS3WriteAnswer("s3://b/k",
                                 "<Error><Code>InternalError</Code><Message>x</Message></Error>",
                                 "CopyObjectResult");
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().message(), "s3://b/k: InternalError (after 200)");
  EXPECT_TRUE(CheckS3WriteAnswer("s3://b/k", "garbage", "CopyObjectResult").error().IsCorruption());
}

// The request line, and the body after the header block.
std::string RequestLine(const std::string& req) { return req.substr(0, req.find("\r\n")); }
std::string Body(const std::string& req) {
  const size_t p = req.find("\r\n\r\n");
  return p == std::string::npos ? "" : req.substr(p + 4);
}

class ObjectWriterServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<S3ObjectWriter> Writer(TestHttpServer& server, uint64_t part_size,
                                         uint64_t max_copy = S3ObjectWriter::kMaxCopyObject) {
    HttpClientOptions o;
    o.base_backoff = std::chrono::milliseconds(1);
    o.max_backoff = std::chrono::milliseconds(2);
    auto http = HttpClient::Create(o);
    EXPECT_TRUE(http.has_value());
    S3Config c;
    c.bucket = "bkt";
    c.prefix = "store";
    c.endpoint = *ParseUrl(server.url(""));
    return std::make_unique<S3ObjectWriter>(std::shared_ptr<HttpClient>(std::move(*http)), c,
                                            part_size, max_copy);
  }
  std::string TempFile(const std::string& bytes) {
    char path[] = "/tmp/pcrfs-objwriter-XXXXXX";
    const int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
    files_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& f : files_) std::remove(f.c_str());
  }
  std::vector<std::string> files_;
};

TEST_F(ObjectWriterServerTest, SmallFileIsOnePutWithItsBytesAndHash) {
  TestHttpServer server(
      [](const std::string&, int) { return TestHttpServer::Reply(200, "OK", ""); });
  auto w = Writer(server, S3ObjectWriter::kMinPartSize);
  const std::string bytes = "hello record";
  ASSERT_TRUE(w->PutFile("records/00000000.pcr", TempFile(bytes)).ok());
  auto got = server.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(RequestLine(got[0]), "PUT /bkt/store/records/00000000.pcr HTTP/1.1");
  EXPECT_EQ(Body(got[0]), bytes);
  // No form Content-Type from curl.
  EXPECT_EQ(got[0].find("x-www-form-urlencoded"), std::string::npos);
}

TEST_F(ObjectWriterServerTest, LargeFileIsAMultipartUploadInOrder) {
  const uint64_t part = S3ObjectWriter::kMinPartSize;
  std::string bytes(2 * part + 1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + i / 4096);
  TestHttpServer server([](const std::string& req, int) {
    const std::string line = RequestLine(req);
    if (line.starts_with("POST") && line.find("?uploads") != std::string::npos) {
      return TestHttpServer::Reply(
          200, "OK",
          "<InitiateMultipartUploadResult><UploadId>U1</UploadId></InitiateMultipartUploadResult>");
    }
    if (line.starts_with("PUT")) {
      const size_t n = line.find("partNumber=");
      return TestHttpServer::Reply(200, "OK", "", "ETag: \"p" + line.substr(n + 11, 1) + "\"\r\n");
    }
    return TestHttpServer::Reply(
        200, "OK", "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>");
  });
  auto w = Writer(server, part);
  ASSERT_TRUE(w->PutFile("records/00000001.pcr", TempFile(bytes)).ok());
  auto got = server.received();
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(RequestLine(got[0]), "POST /bkt/store/records/00000001.pcr?uploads HTTP/1.1");
  std::string joined;
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(RequestLine(got[i]), "PUT /bkt/store/records/00000001.pcr?partNumber=" +
                                       std::to_string(i) + "&uploadId=U1 HTTP/1.1");
    joined += Body(got[i]);
  }
  EXPECT_EQ(joined, bytes);
  EXPECT_EQ(RequestLine(got[4]), "POST /bkt/store/records/00000001.pcr?uploadId=U1 HTTP/1.1");
  EXPECT_EQ(Body(got[4]), CompleteMultipartBody({"\"p1\"", "\"p2\"", "\"p3\""}));
}

TEST_F(ObjectWriterServerTest, FailedCompletionAbortsTheUpload) {
  const uint64_t part = S3ObjectWriter::kMinPartSize;
  TestHttpServer server([](const std::string& req, int) {
    const std::string line = RequestLine(req);
    if (line.find("?uploads") != std::string::npos) {
      return TestHttpServer::Reply(
          200, "OK",
          "<InitiateMultipartUploadResult><UploadId>U2</UploadId></InitiateMultipartUploadResult>");
    }
    if (line.starts_with("PUT")) return TestHttpServer::Reply(200, "OK", "", "ETag: \"e\"\r\n");
    if (line.starts_with("POST")) {  // the completion: a 200 that failed after all
      return TestHttpServer::Reply(200, "OK", "<Error><Code>InternalError</Code></Error>");
    }
    return TestHttpServer::Reply(204, "No Content", "");
  });
  auto w = Writer(server, part);
  Status s = w->PutFile("big", TempFile(std::string(part + 1, 'x')));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "s3://bkt/store/big: InternalError (after 200)");
  auto got = server.received();
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(RequestLine(got[4]), "DELETE /bkt/store/big?uploadId=U2 HTTP/1.1");
}

TEST_F(ObjectWriterServerTest, CopyNamesItsSourceAndRefusedPartsAreOneLine) {
  TestHttpServer server([](const std::string& req, int) {
    if (req.find("x-amz-copy-source: /bkt/parts/part-0/records/00000002.pcr") !=
        std::string::npos) {
      return TestHttpServer::Reply(200, "OK",
                                   "<CopyObjectResult><ETag>\"c\"</ETag></CopyObjectResult>");
    }
    return TestHttpServer::Reply(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
  });
  auto w = Writer(server, S3ObjectWriter::kMinPartSize);
  S3Config src = w->config();
  src.prefix = "parts/part-0";
  S3ObjectWriter from(nullptr, src);
  ASSERT_TRUE(w->Copy(from, "records/00000002.pcr", 100, "records/00000002.pcr").ok());
  Status s = w->Copy(from, "records/00000003.pcr", 100, "records/00000003.pcr");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("403 Forbidden (AccessDenied)"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

TEST_F(ObjectWriterServerTest, CopyAboveFiveGibIsUploadPartCopyOfRanges) {
  TestHttpServer server([](const std::string& req, int) {
    const std::string line = RequestLine(req);
    if (line.find("?uploads") != std::string::npos) {
      return TestHttpServer::Reply(
          200, "OK",
          "<InitiateMultipartUploadResult><UploadId>U3</UploadId></InitiateMultipartUploadResult>");
    }
    if (line.starts_with("PUT")) {
      return TestHttpServer::Reply(200, "OK",
                                   "<CopyPartResult><ETag>\"cp\"</ETag></CopyPartResult>");
    }
    return TestHttpServer::Reply(
        200, "OK", "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>");
  });
  auto w = Writer(server, S3ObjectWriter::kMinPartSize);
  const uint64_t size = S3ObjectWriter::kMaxCopyObject + 1;
  ASSERT_TRUE(w->Copy(*w, "records/big.pcr", size, "records/big2.pcr").ok());
  auto got = server.received();
  const uint64_t parts = (size + S3ObjectWriter::kCopyPartSize - 1) / S3ObjectWriter::kCopyPartSize;
  ASSERT_EQ(got.size(), parts + 2);
  for (uint64_t i = 0; i < parts; ++i) {
    const std::string& req = got[1 + i];
    EXPECT_NE(req.find("x-amz-copy-source: /bkt/store/records/big.pcr"), std::string::npos);
    const uint64_t a = i * S3ObjectWriter::kCopyPartSize;
    const uint64_t b = std::min(size, a + S3ObjectWriter::kCopyPartSize) - 1;
    EXPECT_NE(
        req.find("x-amz-copy-source-range: bytes=" + std::to_string(a) + "-" + std::to_string(b)),
        std::string::npos)
        << req;
  }
  EXPECT_EQ(Body(got.back()), CompleteMultipartBody(std::vector<std::string>(parts, "\"cp\"")));
}

// A lowered single-copy limit (PCRFS_TEST_S3_COPY_LIMIT in tests): an object of exactly the
// limit is one CopyObject, one byte more is UploadPartCopy parts of the limit's size; a limit
// under S3's 5 MiB part minimum is raised to it.
TEST_F(ObjectWriterServerTest, LoweredCopyLimitSplitsAtTheLimit) {
  TestHttpServer server([](const std::string& req, int) {
    const std::string line = RequestLine(req);
    if (line.find("?uploads") != std::string::npos) {
      return TestHttpServer::Reply(
          200, "OK",
          "<InitiateMultipartUploadResult><UploadId>U4</UploadId></InitiateMultipartUploadResult>");
    }
    if (line.find("partNumber=") != std::string::npos) {
      return TestHttpServer::Reply(200, "OK",
                                   "<CopyPartResult><ETag>\"cp\"</ETag></CopyPartResult>");
    }
    if (line.starts_with("PUT")) {
      return TestHttpServer::Reply(200, "OK",
                                   "<CopyObjectResult><ETag>\"c\"</ETag></CopyObjectResult>");
    }
    return TestHttpServer::Reply(
        200, "OK", "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>");
  });
  const uint64_t limit = S3ObjectWriter::kMinPartSize;
  auto w = Writer(server, S3ObjectWriter::kMinPartSize, /*max_copy=*/1000);
  ASSERT_TRUE(w->Copy(*w, "records/a.pcr", limit, "records/a2.pcr").ok());
  auto got = server.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(RequestLine(got[0]).find("?"), std::string::npos) << RequestLine(got[0]);
  const uint64_t size = 2 * limit + 7;
  ASSERT_TRUE(w->Copy(*w, "records/b.pcr", size, "records/b2.pcr").ok());
  got = server.received();
  ASSERT_EQ(got.size(), 1u + 1 + 3 + 1);  // the CopyObject; create, 3 parts, complete
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t a = i * limit;
    const uint64_t b = std::min(size, a + limit) - 1;
    EXPECT_NE(RequestLine(got[2 + i]).find("partNumber=" + std::to_string(i + 1)),
              std::string::npos);
    EXPECT_NE(got[2 + i].find("x-amz-copy-source-range: bytes=" + std::to_string(a) + "-" +
                              std::to_string(b)),
              std::string::npos)
        << got[2 + i];
  }
  EXPECT_EQ(Body(got.back()), CompleteMultipartBody(std::vector<std::string>(3, "\"cp\"")));
}

TEST(AzureObjectWriterTest, BlockIdsAndList) {
  EXPECT_EQ(AzureBlockId(1), "MDAwMDAx");  // base64("000001")
  EXPECT_EQ(AzureBlockId(42).size(), AzureBlockId(49999).size());
  EXPECT_EQ(AzureBlockListBody({"MDAwMDAx", "MDAwMDAy"}),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Latest>MDAwMDAx</Latest>"
            "<Latest>MDAwMDAy</Latest></BlockList>");
}

}  // namespace
}  // namespace pcrfs
