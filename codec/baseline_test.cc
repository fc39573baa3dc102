#include "codec/baseline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codec/decoder.h"
#include "codec/transcoder.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::testdata {
void PrintTo(const NamedJpegSpec& spec, std::ostream* os);  // transcoder_test.cc
}  // namespace pcrfs::testdata

namespace pcrfs::codec {
namespace {

struct Segment {
  uint8_t marker;
  std::vector<uint8_t> payload;
  bool operator==(const Segment&) const = default;
};

// The marker segments before the first SOS, and the markers of the whole file (every FF xx
// with xx not 00 or FF, RSTn included), found by a plain scan.
struct Layout {
  std::vector<Segment> header;
  std::vector<uint8_t> markers;
};

Layout Parse(const std::vector<uint8_t>& jpeg) {
  Layout out;
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA) {
    const size_t length = (size_t{jpeg[i + 2]} << 8) | jpeg[i + 3];
    if (length < 2 || i + 2 + length > jpeg.size()) break;
    out.header.push_back(
        {jpeg[i + 1], std::vector<uint8_t>(jpeg.begin() + i + 4, jpeg.begin() + i + 2 + length)});
    i += 2 + length;
  }
  for (size_t j = 0; j + 1 < jpeg.size(); j++) {
    if (jpeg[j] == 0xFF && jpeg[j + 1] != 0x00 && jpeg[j + 1] != 0xFF) {
      out.markers.push_back(jpeg[j + 1]);
    }
  }
  return out;
}

// The APPn and COM segments, in order.
std::vector<Segment> Metadata(const Layout& layout) {
  std::vector<Segment> out;
  for (const Segment& s : layout.header) {
    if ((s.marker >= 0xE0 && s.marker <= 0xEF) || s.marker == 0xFE) out.push_back(s);
  }
  return out;
}

size_t Count(const std::vector<uint8_t>& markers, uint8_t m) {
  return static_cast<size_t>(std::count(markers.begin(), markers.end(), m));
}

class BaselineVarietyTest : public ::testing::TestWithParam<testdata::NamedJpegSpec> {};

// Every level of every variety of the factory (grey, RGB, CMYK, YCCK, 4:4:4, 4:2:0, 4:2:2,
// odd sizes, arithmetic or restart-marker sources, ICC/EXIF/COM) turns into a sequential JPEG
// with the level's coefficients and markers.
TEST_P(BaselineVarietyTest, EveryLevelKeepsItsCoefficientsAndMarkers) {
  auto source = testdata::MakeTestJpeg(GetParam().spec);
  ASSERT_TRUE(source) << source.error().ToString();
  TranscodeResult result = Transcode(*source, TranscodeOptions{});
  ASSERT_TRUE(result.transcoded()) << result.detail;
  for (int k = 1; k <= kNumGroups; k++) {
    SCOPED_TRACE("level " + std::to_string(k));
    const std::vector<uint8_t> level = result.image.Level(k);
    auto baseline = ToBaseline(level);
    ASSERT_TRUE(baseline) << baseline.error().ToString();

    auto want = ReadCoefficients(level);
    auto got = ReadCoefficients(*baseline);
    ASSERT_TRUE(want) << want.error().ToString();
    ASSERT_TRUE(got) << got.error().ToString();
    ASSERT_EQ(want->components.size(), got->components.size());
    for (size_t c = 0; c < want->components.size(); c++) {
      EXPECT_TRUE(want->components[c] == got->components[c]) << "component " << c;
    }
    EXPECT_TRUE(*want == *got);
    // Low levels lack bits: their coefficients are not the source's (level 10's are).
    if (k == kNumGroups) {
      auto original = ReadCoefficients(*source);
      ASSERT_TRUE(original);
      for (size_t c = 0; c < original->components.size(); c++) {
        EXPECT_TRUE(original->components[c].coef == got->components[c].coef);
      }
    }

    const Layout lp = Parse(level), lb = Parse(*baseline);
    EXPECT_TRUE(Metadata(lp) == Metadata(lb));
    // Sequential Huffman (SOF0, or SOF1 for 16-bit tables), never progressive or arithmetic,
    // one scan for up to 4 components, no restart markers.
    EXPECT_EQ(Count(lb.markers, 0xC0) + Count(lb.markers, 0xC1), 1u);
    EXPECT_EQ(Count(lb.markers, 0xC2), 0u);
    EXPECT_EQ(Count(lb.markers, 0xC9) + Count(lb.markers, 0xCA), 0u);
    EXPECT_EQ(Count(lb.markers, 0xDA), 1u);
    for (uint8_t rst = 0xD0; rst <= 0xD7; rst++) EXPECT_EQ(Count(lb.markers, rst), 0u);
    EXPECT_EQ(Count(lb.markers, 0xD8), 1u);
    EXPECT_EQ(baseline->end()[-2], 0xFF);
    EXPECT_EQ(baseline->end()[-1], 0xD9);

    auto decoded = DecodeJpeg(*baseline);
    ASSERT_TRUE(decoded) << decoded.error().ToString();
    EXPECT_EQ(decoded->width, GetParam().spec.width);
    EXPECT_EQ(decoded->height, GetParam().spec.height);
    if (k == kNumGroups) {
      // A complete progressive file gets no block smoothing: the same pixels.
      auto progressive = DecodeJpeg(level);
      ASSERT_TRUE(progressive);
      EXPECT_TRUE(progressive->pixels == decoded->pixels);
    }
    // Deterministic: a size told to stat(2) is the size read later.
    auto again = ToBaseline(level);
    ASSERT_TRUE(again);
    EXPECT_TRUE(*again == *baseline);
    // Our Huffman statistics are libjpeg's: the same tables, the same bytes.
    auto reference = ToBaseline(level, /*libjpeg_statistics=*/true);
    ASSERT_TRUE(reference) << reference.error().ToString();
    EXPECT_TRUE(*reference == *baseline) << reference->size() << " vs " << baseline->size();
  }
}

INSTANTIATE_TEST_SUITE_P(Factory, BaselineVarietyTest,
                         ::testing::ValuesIn(testdata::StandardTestJpegs()),
                         [](const ::testing::TestParamInfo<testdata::NamedJpegSpec>& info) {
                           return info.param.TestName();
                         });

std::vector<uint8_t> PhotoLevel(int k) {
  testdata::JpegSpec spec;
  spec.width = 320;
  spec.height = 240;
  spec.exif = true;
  spec.icc = true;
  auto source = testdata::MakeTestJpeg(spec);
  EXPECT_TRUE(source);
  if (!source) return {};
  TranscodeResult result = Transcode(*source, TranscodeOptions{});
  EXPECT_TRUE(result.transcoded());
  return result.image.Level(k);
}

TEST(BaselineTest, KeepsExifAndIccOnce) {
  const std::vector<uint8_t> level = PhotoLevel(3);
  auto baseline = ToBaseline(level);
  ASSERT_TRUE(baseline) << baseline.error().ToString();
  for (const std::vector<uint8_t>& payload :
       {testdata::TestIccPayload(), testdata::TestExifPayload()}) {
    size_t count = 0;
    for (auto it = baseline->begin();
         (it = std::search(it, baseline->end(), payload.begin(), payload.end())) != baseline->end();
         ++it) {
      count++;
    }
    EXPECT_EQ(count, 1u);
  }
}

TEST(BaselineTest, DamagedInputIsAnErrorNeverACrash) {
  const std::vector<uint8_t> level = PhotoLevel(5);
  ASSERT_TRUE(ToBaseline(level));
  EXPECT_FALSE(ToBaseline({}));
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  auto not_jpeg = ToBaseline(text);
  ASSERT_FALSE(not_jpeg);
  EXPECT_EQ(not_jpeg.error().code(), Status::Code::kCorruption);
  EXPECT_NE(not_jpeg.error().message().find("baseline: "), std::string::npos);
  // Truncated anywhere: libjpeg's premature-end warning is an error here.
  for (size_t keep : {level.size() - 2, level.size() * 3 / 4, level.size() / 2, size_t{20}}) {
    std::vector<uint8_t> cut(level.begin(), level.begin() + static_cast<ptrdiff_t>(keep));
    EXPECT_FALSE(ToBaseline(cut)) << keep;
  }
  // Flipped bytes: an error, or a file that still decodes.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; i++) {
    std::vector<uint8_t> bad = level;
    for (int f = 0; f < 3; f++) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto out = ToBaseline(bad);
    if (out) {
      EXPECT_TRUE(DecodeJpeg(*out)) << i;
    }
  }
  // Random bytes behind a JPEG start.
  for (int i = 0; i < 200; i++) {
    std::vector<uint8_t> data(3 + rng() % 2000);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    data[0] = 0xFF;
    data[1] = 0xD8;
    data[2] = 0xFF;
    EXPECT_FALSE(ToBaseline(data));
    EXPECT_FALSE(ReadCoefficients(data));
  }
}

}  // namespace
}  // namespace pcrfs::codec
