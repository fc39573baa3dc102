#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pcrfs::crc32c {
namespace {

TEST(Crc32cTest, StandardVectors) {
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Value(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Value(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(Value(inc.data(), inc.size()), 0x46dd794eu);
  EXPECT_EQ(Value("123456789", 9), 0xe3069283u);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string s = "hello progressive world, with an odd length!";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Extend(Value(s.data(), cut), s.data() + cut, s.size() - cut),
              Value(s.data(), s.size()));
  }
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  uint32_t crc = Value("foo", 3);
  EXPECT_NE(Mask(crc), crc);
  EXPECT_NE(Mask(Mask(crc)), crc);
  EXPECT_EQ(Unmask(Mask(crc)), crc);
}

}  // namespace
}  // namespace pcrfs::crc32c
