#include "remote/multipart.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pcrfs {
namespace {

constexpr char kB[] = "00000000000000000001";

// A part as nginx sends it.
std::string Part(uint64_t start, const std::string& bytes, uint64_t total,
                 const std::string& boundary = kB) {
  return "\r\n--" + boundary + "\r\nContent-Type: image/jpeg\r\nContent-Range: bytes " +
         std::to_string(start) + "-" + std::to_string(start + bytes.size() - 1) + "/" +
         std::to_string(total) + "\r\n\r\n" + bytes;
}
std::string Close(const std::string& boundary = kB) { return "\r\n--" + boundary + "--\r\n"; }

TEST(MultipartTest, RangeHeaderAndBoundary) {
  EXPECT_EQ(RangeHeaderValue({{0, 10}, {100, 1}, {200, 50}}), "bytes=0-9,100-100,200-249");
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges; boundary=00000000000000000001"),
            "00000000000000000001");
  EXPECT_EQ(ByteRangesBoundary("Multipart/ByteRanges;charset=x; Boundary=\"a b:c\""), "a b:c");
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges"), std::nullopt);
  EXPECT_EQ(ByteRangesBoundary("multipart/mixed; boundary=x"), std::nullopt);
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges; boundary="), std::nullopt);
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges; boundary=\"x"), std::nullopt);
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges; boundary=" + std::string(71, 'x')),
            std::nullopt);
  EXPECT_EQ(ByteRangesBoundary("multipart/byteranges; boundary=a\x01z"), std::nullopt);
}

TEST(MultipartTest, ParsesNginxBodyWithTheBoundaryInsideAPart) {
  // A part's bytes that hold the boundary itself are taken by their length, not cut there.
  const std::string tricky = "ab\r\n--" + std::string(kB) + "--\r\ncd";
  const std::string body = Part(0, "hello", 1000) + Part(500, tricky, 1000) + Close();
  auto parts = ParseByteRanges(body, kB);
  ASSERT_TRUE(parts.has_value()) << parts.error().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].range.start, 0u);
  EXPECT_EQ((*parts)[0].data, "hello");
  EXPECT_EQ((*parts)[1].range.start, 500u);
  EXPECT_EQ((*parts)[1].data, tricky);
  EXPECT_EQ((*parts)[1].range.total, 1000u);
  // Bare line feeds, no preamble, an epilogue: accepted too.
  auto lf = ParseByteRanges(
      "--x\nContent-Range: bytes 1-2/3\n\nbc\n--x\ncontent-range:bytes 0-0/3\n\na\n--x--junk", "x");
  ASSERT_TRUE(lf.has_value()) << lf.error().ToString();
  ASSERT_EQ(lf->size(), 2u);
  EXPECT_EQ((*lf)[1].data, "a");
}

TEST(MultipartTest, RefusesMalformedBodiesWithOneLine) {
  struct Case {
    std::string body, what;
  };
  const std::string big = Part(0, "hello", 1000);
  std::vector<Case> cases = {
      {"", "no boundary"},
      {"hello", "no boundary"},
      {"--" + std::string(kB) + "x\r\n", "no line break after a boundary"},
      {Part(0, "hello", 1000), "not followed by the boundary"},  // truncated: no close
      {Part(0, "hello", 1000).substr(0, 60), "do not end"},
      {"\r\n--" + std::string(kB) + "\r\nContent-Type: x\r\n\r\nhello" + Close(),
       "without a Content-Range"},
      {"\r\n--" + std::string(kB) + "\r\nContent-Range: bytes 5-1/10\r\n\r\nhello" + Close(),
       "not 'bytes A-B/TOTAL'"},
      {"\r\n--" + std::string(kB) + "\r\nContent-Range: bytes 0-4/*\r\n\r\nhello" + Close(),
       "not 'bytes A-B/TOTAL'"},
      {"\r\n--" + std::string(kB) +
           "\r\nContent-Range: bytes 0-4/10\r\nContent-Range: bytes 0-4/10\r\n\r\nhello" + Close(),
       "two Content-Range"},
      {Part(0, "hello", 1000) + Part(5, "world", 2000) + Close(), "objects of 1000 and 2000"},
      {"\r\n--" + std::string(kB) + "\r\nContent-Range: bytes 0-999999999/1000000000\r\n\r\nhi" +
           Close(),
       "a part of 1000000000 bytes with"},
      {"\r\n--" + std::string(kB) + "\r\nX: " + std::string(5000, 'y') +
           "\r\nContent-Range: bytes 0-4/10\r\n\r\nhello" + Close(),
       "longer than 4096"},
      {"\r\n--" + std::string(kB) + "--\r\n", "no parts"},
  };
  for (const Case& c : cases) {
    auto r = ParseByteRanges(c.body, kB);
    ASSERT_FALSE(r.has_value()) << c.what;
    EXPECT_EQ(r.error().code(), Status::Code::kIOError);
    EXPECT_NE(r.error().message().find(c.what), std::string::npos)
        << c.what << " / " << r.error().message();
    EXPECT_EQ(r.error().message().find('\n'), std::string::npos);
  }
  // At most max_parts parts.
  std::string many;
  for (int i = 0; i < 5; ++i) many += Part(i * 10, "x", 100);
  EXPECT_TRUE(ParseByteRanges(many + Close(), kB, 5).has_value());
  auto too_many = ParseByteRanges(many + Close(), kB, 4);
  ASSERT_FALSE(too_many.has_value());
  EXPECT_NE(too_many.error().message().find("more than 4 parts"), std::string::npos);
}

TEST(MultipartTest, DeliversWhatCoversEachRange) {
  std::string obj(100, 0);
  for (size_t i = 0; i < obj.size(); ++i) obj[i] = static_cast<char>('A' + i % 26);
  const std::string body = Part(0, obj.substr(0, 10), 100) +
                           // one part that covers two asked ranges (a server coalesced them)
                           Part(20, obj.substr(20, 30), 100) +
                           // two parts that together cover one range
                           Part(60, obj.substr(60, 5), 100) + Part(65, obj.substr(65, 5), 100) +
                           // a range at the end, clipped to the object
                           Part(95, obj.substr(95, 5), 100) + Close();
  auto parts = ParseByteRanges(body, kB);
  ASSERT_TRUE(parts.has_value()) << parts.error().ToString();
  std::vector<ByteRange> asked = {{0, 10}, {20, 5}, {40, 10}, {60, 10}, {75, 5}, {95, 10}};
  std::vector<std::string> bufs;
  for (const auto& a : asked) bufs.emplace_back(a.length, '.');
  std::vector<uint8_t*> dsts;
  for (auto& b : bufs) dsts.push_back(reinterpret_cast<uint8_t*>(b.data()));
  auto got = DeliverParts(*parts, 100, asked, dsts);
  EXPECT_EQ(got, (std::vector<uint64_t>{10, 5, 10, 10, 0, 5}));
  EXPECT_EQ(bufs[0], obj.substr(0, 10));
  EXPECT_EQ(bufs[1], obj.substr(20, 5));
  EXPECT_EQ(bufs[2], obj.substr(40, 10));
  EXPECT_EQ(bufs[3], obj.substr(60, 10));
  EXPECT_EQ(bufs[5].substr(0, 5), obj.substr(95, 5));
  // A part that covers half a range delivers nothing for it.
  const std::string half_body = Part(0, obj.substr(0, 5), 100) + Close();  // the parts view it
  auto half = ParseByteRanges(half_body, kB);
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(DeliverParts(*half, 100, {{0, 10}}, {dsts[0]}), std::vector<uint64_t>{0});
  // Parts of another total than the one the caller knows count for nothing.
  EXPECT_EQ(DeliverParts(*half, 200, {{0, 5}}, {dsts[0]}), std::vector<uint64_t>{0});
}

}  // namespace
}  // namespace pcrfs
