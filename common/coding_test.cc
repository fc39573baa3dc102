#include "common/coding.h"

#include <gtest/gtest.h>

namespace pcrfs {
namespace {

TEST(CodingTest, FixedRoundTrip) {
  std::string s;
  PutFixed32(&s, 0xdeadbeef);
  PutFixed64(&s, 0x0123456789abcdefull);
  ASSERT_EQ(s.size(), 12u);
  EXPECT_EQ(static_cast<uint8_t>(s[0]), 0xef);  // little-endian
  Decoder d(s);
  uint32_t a;
  uint64_t b;
  ASSERT_TRUE(d.GetFixed32(&a));
  ASSERT_TRUE(d.GetFixed64(&b));
  EXPECT_EQ(a, 0xdeadbeefu);
  EXPECT_EQ(b, 0x0123456789abcdefull);
  EXPECT_TRUE(d.done());
}

TEST(CodingTest, VarintRoundTrip) {
  std::string s;
  const uint64_t values[] = {0, 1, 127, 128, 300, 1ull << 32, UINT64_MAX};
  for (uint64_t v : values) PutVarint64(&s, v);
  Decoder d(s);
  for (uint64_t v : values) {
    uint64_t got;
    ASSERT_TRUE(d.GetVarint64(&got));
    EXPECT_EQ(got, v);
  }
  EXPECT_TRUE(d.done());
}

TEST(CodingTest, ShortestVarintsOnly) {
  for (uint64_t v : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{1} << 35, UINT64_MAX}) {
    std::string s;
    PutVarint64(&s, v);
    EXPECT_EQ(VarintLength(v), s.size()) << v;
    Decoder d(s);
    uint64_t got = 0;
    EXPECT_TRUE(d.GetShortestVarint64(&got));
    EXPECT_EQ(got, v);
    EXPECT_TRUE(d.done());
  }
  // 1 written in two bytes: a varint, but not the shortest form.
  const std::string padded("\x81\x00", 2);
  uint64_t got = 0;
  EXPECT_TRUE(Decoder(padded).GetVarint64(&got));
  EXPECT_EQ(got, 1u);
  Decoder d(padded);
  EXPECT_FALSE(d.GetShortestVarint64(&got));
  EXPECT_FALSE(d.ok());
}

TEST(CodingTest, DecoderRefusesTruncatedAndOverlongInput) {
  std::string s;
  PutVarint64(&s, 1ull << 40);
  s.pop_back();
  uint64_t v;
  Decoder d(s);
  EXPECT_FALSE(d.GetVarint64(&v));
  EXPECT_FALSE(d.ok());

  std::string overlong(11, '\xff');
  Decoder d2(overlong);
  EXPECT_FALSE(d2.GetVarint64(&v));

  std::string lp;
  PutVarint64(&lp, 100);  // claims 100 bytes, has none
  Decoder d3(lp);
  std::string_view sv;
  EXPECT_FALSE(d3.GetLengthPrefixed(&sv));
}

TEST(CodingTest, BigEndianSortsNumerically) {
  uint8_t a[8], b[8];
  EncodeBigEndian64(a, 255);
  EncodeBigEndian64(b, 256);
  EXPECT_LT(std::memcmp(a, b, 8), 0);
  EXPECT_EQ(DecodeBigEndian64(b), 256u);
}

}  // namespace
}  // namespace pcrfs
