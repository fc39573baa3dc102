// The quality sample's window (builder/quality_window.h): the centre of a large JPEG cut with
// exactly its coefficients, bounded whatever the image's size.
#include "builder/quality_window.h"

#include <gtest/gtest.h>

#include "codec/decoder.h"
#include "codec/transcoder.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::tools {
namespace {

using testdata::JpegColor;
using testdata::JpegSpec;

// Level 10 of a transcoded test JPEG: what the store holds.
std::vector<uint8_t> StoredLevel10(const JpegSpec& spec) {
  auto jpeg = testdata::MakeTestJpeg(spec);
  EXPECT_TRUE(jpeg.has_value());
  codec::TranscodeResult t = codec::Transcode(*jpeg, {});
  EXPECT_TRUE(t.transcoded()) << t.detail;
  return t.image.Level(10);
}

// The pixels of `image` in [x0, x0 + w) x [y0, y0 + h).
std::vector<uint8_t> Window(const codec::DecodedImage& image, int x0, int y0, int w, int h) {
  std::vector<uint8_t> out;
  const size_t c = static_cast<size_t>(image.components);
  for (int y = y0; y < y0 + h; ++y) {
    const uint8_t* row = image.pixels.data() + (static_cast<size_t>(y) * image.width + x0) * c;
    out.insert(out.end(), row, row + static_cast<size_t>(w) * c);
  }
  return out;
}

TEST(QualityWindowTest, TheCentreOnWholeMcusWithTheSourcesPixels) {
  // Grey and 4:4:4: no chroma upsampling, so at level 10 the window's pixels are the image's.
  for (JpegColor color : {JpegColor::kGray, JpegColor::kYCbCr}) {
    JpegSpec spec{.width = 2000, .height = 1500, .color = color, .seed = 7};
    spec.h_samp = {1, 1, 1, 0};
    spec.v_samp = {1, 1, 1, 0};
    const std::vector<uint8_t> top = StoredLevel10(spec);
    auto cut = CutCentredWindow(top, kQualityWindowSide);
    ASSERT_TRUE(cut.has_value()) << cut.error().ToString();
    ASSERT_TRUE(cut->has_value());
    auto window = codec::DecodeJpeg(**cut);
    auto whole = codec::DecodeJpeg(top);
    ASSERT_TRUE(window.has_value() && whole.has_value());
    EXPECT_EQ(window->width, 1024);
    EXPECT_EQ(window->height, 1024);
    // The centre rounded down to 8x8 MCUs.
    const int x0 = (2000 - 1024) / 2 / 8 * 8, y0 = (1500 - 1024) / 2 / 8 * 8;
    EXPECT_TRUE(window->pixels == Window(*whole, x0, y0, 1024, 1024)) << static_cast<int>(color);
  }
}

TEST(QualityWindowTest, ASideThatFitsIsKeptWholeAndASmallImageIsNotCut) {
  JpegSpec wide{.width = 3000, .height = 200, .seed = 3};  // 4:2:0: 16x16 MCUs
  auto cut = CutCentredWindow(StoredLevel10(wide), kQualityWindowSide);
  ASSERT_TRUE(cut.has_value() && cut->has_value());
  auto window = codec::DecodeJpeg(**cut);
  ASSERT_TRUE(window.has_value());
  EXPECT_EQ(window->width, 1024);
  EXPECT_EQ(window->height, 200);
  // The window of a large window is transcoded as the build transcodes: its levels exist.
  codec::TranscodeResult t = codec::Transcode(**cut, {});
  EXPECT_TRUE(t.transcoded()) << t.detail;

  // Every colour space the builder transcodes: the window keeps it (CMYK and YCCK with their
  // Adobe marker) and transcodes again.
  for (JpegColor color : {JpegColor::kRGB, JpegColor::kCMYK, JpegColor::kYCCK}) {
    JpegSpec spec{.width = 1300, .height = 1100, .color = color, .seed = 9};
    auto c = CutCentredWindow(StoredLevel10(spec), kQualityWindowSide);
    ASSERT_TRUE(c.has_value() && c->has_value()) << static_cast<int>(color);
    auto decoded = codec::DecodeJpeg(**c);
    ASSERT_TRUE(decoded.has_value()) << decoded.error().ToString();
    EXPECT_EQ(decoded->components, color == JpegColor::kRGB ? 3 : 4);
    EXPECT_LE(decoded->width, kQualityWindowSide);
    EXPECT_TRUE(codec::Transcode(**c, {}).transcoded()) << static_cast<int>(color);
  }

  JpegSpec small{.width = 500, .height = 375, .seed = 4};
  auto none = CutCentredWindow(StoredLevel10(small), kQualityWindowSide);
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
}

TEST(QualityWindowTest, DamagedInputIsAnErrorNeverACrash) {
  JpegSpec spec{.width = 1600, .height = 1200, .seed = 5};
  std::vector<uint8_t> top = StoredLevel10(spec);
  EXPECT_FALSE(CutCentredWindow({}, kQualityWindowSide).has_value());
  std::vector<uint8_t> cut_short(top.begin(), top.begin() + static_cast<long>(top.size() / 2));
  EXPECT_FALSE(CutCentredWindow(cut_short, kQualityWindowSide).has_value());
  std::vector<uint8_t> noise(top.begin(), top.begin() + 600);
  for (size_t i = 200; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 131);
  EXPECT_FALSE(CutCentredWindow(noise, kQualityWindowSide).has_value());
}

}  // namespace
}  // namespace pcrfs::tools
