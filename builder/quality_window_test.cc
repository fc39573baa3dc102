// The quality sample's window (builder/quality_window.h): the centre of a large JPEG cut with
// exactly its coefficients, bounded whatever the image's size.
#include "builder/quality_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

#include "codec/baseline.h"
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
    EXPECT_EQ(window->width, kQualityWindowSide);
    EXPECT_EQ(window->height, kQualityWindowSide);
    // The centre rounded down to 8x8 MCUs.
    const int x0 = (2000 - kQualityWindowSide) / 2 / 8 * 8,
              y0 = (1500 - kQualityWindowSide) / 2 / 8 * 8;
    EXPECT_TRUE(window->pixels == Window(*whole, x0, y0, kQualityWindowSide, kQualityWindowSide))
        << static_cast<int>(color);
  }
}

// The cut reads the image only down to the window's bottom edge (a copy whose frame header
// says the image ends there). The window's coefficients are still exactly the image's blocks
// there, in every component, whatever the sampling: checked block by block against the whole
// image's coefficients, for images far taller than the window, where most rows are skipped.
TEST(QualityWindowTest, TheWindowsCoefficientsAreTheImagesBlocks) {
  struct Case {
    int width, height;
    JpegColor color;
    std::array<int, 4> h_samp, v_samp;
  };
  const Case cases[] = {{1500, 3000, JpegColor::kYCbCr, {2, 1, 1, 0}, {2, 1, 1, 0}},  // 4:2:0
                        {1400, 2200, JpegColor::kYCbCr, {1, 1, 1, 0}, {2, 1, 1, 0}},  // 4:4:0
                        {1100, 2500, JpegColor::kCMYK, {1, 1, 1, 1}, {1, 1, 1, 1}},
                        {3000, 1200, JpegColor::kGray, {1, 0, 0, 0}, {1, 0, 0, 0}}};
  for (const Case& c : cases) {
    JpegSpec spec{.width = c.width, .height = c.height, .color = c.color, .seed = 11};
    spec.h_samp = c.h_samp;
    spec.v_samp = c.v_samp;
    const std::vector<uint8_t> top = StoredLevel10(spec);
    auto cut = CutCentredWindow(top, kQualityWindowSide);
    ASSERT_TRUE(cut.has_value()) << cut.error().ToString();
    ASSERT_TRUE(cut->has_value());
    auto whole = codec::ReadCoefficients(top);
    auto window = codec::ReadCoefficients(**cut);
    ASSERT_TRUE(whole.has_value() && window.has_value());
    ASSERT_EQ(window->components.size(), whole->components.size());
    int max_h = 1, max_v = 1;
    for (const auto& comp : whole->components) {
      max_h = std::max(max_h, comp.h_samp);
      max_v = std::max(max_v, comp.v_samp);
    }
    const int mcu_w = 8 * max_h, mcu_h = 8 * max_v;
    const int w = c.width > kQualityWindowSide ? kQualityWindowSide / mcu_w * mcu_w : c.width;
    const int h = c.height > kQualityWindowSide ? kQualityWindowSide / mcu_h * mcu_h : c.height;
    EXPECT_EQ(window->width, static_cast<uint32_t>(w));
    EXPECT_EQ(window->height, static_cast<uint32_t>(h));
    const int mcu_x0 = (c.width - w) / 2 / mcu_w, mcu_y0 = (c.height - h) / 2 / mcu_h;
    for (size_t ci = 0; ci < whole->components.size(); ++ci) {
      const auto& from = whole->components[ci];
      const auto& to = window->components[ci];
      EXPECT_EQ(to.quant, from.quant);
      const uint32_t bx0 = static_cast<uint32_t>(mcu_x0 * from.h_samp);
      const uint32_t by0 = static_cast<uint32_t>(mcu_y0 * from.v_samp);
      ASSERT_LE(by0 + to.height_in_blocks, from.height_in_blocks);
      int differing_rows = 0;
      for (uint32_t r = 0; r < to.height_in_blocks; ++r) {
        const int16_t* a = &to.coef[static_cast<size_t>(r) * to.width_in_blocks * 64];
        const int16_t* b =
            &from.coef[(static_cast<size_t>(by0 + r) * from.width_in_blocks + bx0) * 64];
        differing_rows += !std::equal(a, a + to.width_in_blocks * 64, b);
      }
      EXPECT_EQ(differing_rows, 0) << c.width << "x" << c.height << " component " << ci;
    }
  }
}

TEST(QualityWindowTest, ASideThatFitsIsKeptWholeAndASmallImageIsNotCut) {
  JpegSpec wide{.width = 3000, .height = 200, .seed = 3};  // 4:2:0: 16x16 MCUs
  auto cut = CutCentredWindow(StoredLevel10(wide), kQualityWindowSide);
  ASSERT_TRUE(cut.has_value() && cut->has_value());
  auto window = codec::DecodeJpeg(**cut);
  ASSERT_TRUE(window.has_value());
  EXPECT_EQ(window->width, kQualityWindowSide);
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

// `jpeg` with its JFIF APP0 segment removed (none: unchanged), or with its density fields set
// to 300x300 dpi (the segment's bytes 7..11 after "JFIF\0" and the version).
std::vector<uint8_t> WithJfif(std::vector<uint8_t> jpeg, bool remove) {
  if (jpeg.size() < 20 || jpeg[2] != 0xFF || jpeg[3] != 0xE0 || jpeg[6] != 'J') return jpeg;
  const size_t length = size_t{jpeg[4]} << 8 | jpeg[5];
  if (remove) {
    jpeg.erase(jpeg.begin() + 2, jpeg.begin() + 2 + static_cast<long>(length) + 2);
  } else {
    const uint8_t density[] = {1, 0x01, 0x2C, 0x01, 0x2C};  // dots per inch, 300, 300
    std::copy(std::begin(density), std::end(density), jpeg.begin() + 13);
  }
  return jpeg;
}

// The build cuts the window of a large image while it transcodes it (its coefficients are in
// memory then); the quality sample cuts it from the stored level 10 where that window is not at
// hand (resumed and merged builds, more files than the sample takes). Both must write the same
// bytes, or the figures would depend on the path: every variety of the test JPEGs (sampling,
// colour spaces, progressive and arithmetic sources, restarts), made wider or taller than the
// window, and sources without a JFIF marker or with a density of their own.
TEST(QualityWindowTest, CutWhileTranscodingIsTheCutOfTheStoredLevel10ByteForByte) {
  int cut = 0;
  for (const testdata::NamedJpegSpec& named : testdata::StandardTestJpegs()) {
    JpegSpec spec = named.spec;
    if (spec.width < 16 || spec.height < 16) continue;  // the extreme sizes: below
    for (int shape = 0; shape < 3; ++shape) {
      // Wider, taller, and both, than the window, with sides off the MCU grid.
      spec.width = shape == 1 ? named.spec.width : 1100 + 7 * shape + 3;
      spec.height = shape == 0 ? named.spec.height : 1090 + 5 * shape + 1;
      auto source = testdata::MakeTestJpeg(spec);
      ASSERT_TRUE(source.has_value()) << named.name;
      for (int jfif = 0; jfif < 3; ++jfif) {
        const std::vector<uint8_t> jpeg = jfif == 0 ? *source : WithJfif(*source, jfif == 1);
        codec::TranscodeOptions with_window;
        with_window.window_side = kQualityWindowSide;
        codec::TranscodeResult t = codec::Transcode(jpeg, with_window);
        ASSERT_TRUE(t.transcoded()) << named.name << ": " << t.detail;
        // The window changes nothing of the transcode.
        codec::TranscodeResult plain = codec::Transcode(jpeg, {});
        EXPECT_TRUE(plain.transcoded() && plain.image.bytes == t.image.bytes) << named.name;
        EXPECT_TRUE(plain.window.empty());
        auto from_store = CutCentredWindow(t.image.Level(10), kQualityWindowSide);
        ASSERT_TRUE(from_store.has_value()) << named.name << ": " << from_store.error().ToString();
        ASSERT_TRUE(from_store->has_value()) << named.name;
        EXPECT_FALSE(t.window.empty()) << named.name;
        EXPECT_TRUE(t.window == **from_store)
            << named.name << " " << spec.width << "x" << spec.height << " jfif " << jfif << ": "
            << t.window.size() << " bytes against " << (*from_store)->size();
        ++cut;
      }
    }
  }
  EXPECT_GE(cut, 100);

  // An image that fits gets no window either way; a very long thin one is cut along its length.
  for (auto [w, h] : {std::pair{kQualityWindowSide, kQualityWindowSide}, std::pair{500, 375},
                      std::pair{1, 1}, std::pair{5000, 8}, std::pair{8, 3000}}) {
    auto jpeg = testdata::MakeTestJpeg({.width = w, .height = h, .seed = 2});
    ASSERT_TRUE(jpeg.has_value());
    codec::TranscodeOptions with_window;
    with_window.window_side = kQualityWindowSide;
    codec::TranscodeResult t = codec::Transcode(*jpeg, with_window);
    ASSERT_TRUE(t.transcoded()) << t.detail;
    auto from_store = CutCentredWindow(t.image.Level(10), kQualityWindowSide);
    ASSERT_TRUE(from_store.has_value());
    EXPECT_EQ(from_store->has_value(), !t.window.empty()) << w << "x" << h;
    if (from_store->has_value()) {
      EXPECT_TRUE(t.window == **from_store) << w << "x" << h;
    }
  }
}

TEST(QualityWindowTest, DamagedInputIsAnErrorNeverACrash) {
  JpegSpec spec{.width = 1600, .height = 1200, .seed = 5};
  std::vector<uint8_t> top = StoredLevel10(spec);
  EXPECT_FALSE(CutCentredWindow({}, kQualityWindowSide).has_value());
  std::vector<uint8_t> cut_short(top.begin(), top.begin() + static_cast<long>(top.size() / 2));
  EXPECT_FALSE(CutCentredWindow(cut_short, kQualityWindowSide).has_value());
  // Every prefix that ends inside the headers, and each byte of the frame header damaged (it
  // is read before libjpeg runs, to shorten the image to the window's bottom edge).
  size_t first_scan = 0;
  for (size_t i = 2; i + 1 < top.size(); ++i) {
    if (top[i] == 0xFF && top[i + 1] == 0xDA) {
      first_scan = i;
      break;
    }
  }
  ASSERT_GT(first_scan, 0u);
  for (size_t n = 0; n <= first_scan + 16; ++n) {
    std::vector<uint8_t> prefix(top.begin(), top.begin() + static_cast<long>(n));
    EXPECT_FALSE(CutCentredWindow(prefix, kQualityWindowSide).has_value()) << n;
  }
  size_t sof = 0;
  for (size_t i = 2; i + 1 < first_scan; ++i) {
    if (top[i] == 0xFF && top[i + 1] == 0xC2) {
      sof = i;
      break;
    }
  }
  ASSERT_GT(sof, 0u);
  for (size_t i = sof; i < sof + 2 + 17; ++i) {  // a 3-component frame header
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x11}}) {
      std::vector<uint8_t> damaged(top);
      damaged[i] = v;
      auto r = CutCentredWindow(damaged, kQualityWindowSide);  // an error or a window: no crash
      if (r && *r) {
        EXPECT_FALSE((*r)->empty());
      }
    }
  }
  std::vector<uint8_t> noise(top.begin(), top.begin() + 600);
  for (size_t i = 200; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 131);
  EXPECT_FALSE(CutCentredWindow(noise, kQualityWindowSide).has_value());
}

}  // namespace
}  // namespace pcrfs::tools
