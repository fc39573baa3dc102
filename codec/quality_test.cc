#include "codec/quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "codec/transcoder.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::codec {
namespace {

DecodedImage Constant(int w, int h, int components, uint8_t value) {
  DecodedImage im;
  im.width = w;
  im.height = h;
  im.components = components;
  im.pixels.assign(static_cast<size_t>(w) * h * components, value);
  return im;
}

DecodedImage FromPixels(int w, int h, int components, std::vector<uint8_t> pixels) {
  DecodedImage im;
  im.width = w;
  im.height = h;
  im.components = components;
  im.pixels = std::move(pixels);
  return im;
}

// The decoded levels 1..10 (index k-1) of a transcoded factory JPEG.
std::vector<DecodedImage> DecodedLevels(const testdata::JpegSpec& spec) {
  auto jpeg = testdata::MakeTestJpeg(spec);
  EXPECT_TRUE(jpeg.has_value());
  if (!jpeg) return {};
  TranscodeResult t = Transcode(*jpeg, TranscodeOptions{});
  EXPECT_TRUE(t.transcoded()) << t.detail;
  std::vector<DecodedImage> levels;
  for (int k = 1; k <= kNumGroups; ++k) {
    auto d = DecodeJpeg(t.image.Level(k));
    EXPECT_TRUE(d.has_value()) << "level " << k << ": " << d.error().ToString();
    levels.push_back(d ? *d : DecodedImage{});
  }
  return levels;
}

TEST(PsnrTest, IdenticalIsInfinite) {
  DecodedImage a = Constant(8, 8, 3, 100);
  EXPECT_TRUE(std::isinf(Psnr(a, a)));
  EXPECT_GT(Psnr(a, a), 0);
}

TEST(PsnrTest, KnownMse) {
  DecodedImage a = Constant(4, 4, 3, 100);
  DecodedImage b = a;
  b.pixels[0] = 110;  // one sample off by 10: MSE = 100 / 48
  EXPECT_NEAR(Psnr(a, b), 10 * std::log10(255.0 * 255.0 * 48 / 100), 1e-12);
  // Every sample off by 1: MSE = 1, PSNR = 20 log10(255).
  DecodedImage c = Constant(4, 4, 3, 101);
  EXPECT_NEAR(Psnr(a, c), 20 * std::log10(255.0), 1e-12);
  EXPECT_DOUBLE_EQ(Psnr(a, c), Psnr(c, a));
}

TEST(PsnrTest, MismatchIsNan) {
  EXPECT_TRUE(std::isnan(Psnr(Constant(4, 4, 3, 0), Constant(4, 5, 3, 0))));
  EXPECT_TRUE(std::isnan(Psnr(Constant(4, 4, 3, 0), Constant(4, 4, 1, 0))));
}

TEST(MsSsimTest, Scales) {
  EXPECT_EQ(MsSsimScales(176, 176), 5);
  EXPECT_EQ(MsSsimScales(4000, 3000), 5);
  EXPECT_EQ(MsSsimScales(175, 500), 4);
  EXPECT_EQ(MsSsimScales(88, 88), 4);
  EXPECT_EQ(MsSsimScales(22, 1000), 2);
  EXPECT_EQ(MsSsimScales(11, 11), 1);
  EXPECT_EQ(MsSsimScales(10, 100), 0);
}

TEST(MsSsimTest, IdenticalIsOne) {
  for (int c : {1, 3, 4}) {
    auto pixels = testdata::MakeTestPixels(200, 180, c, 7);
    DecodedImage a = FromPixels(200, 180, c, pixels);
    auto s = MsSsim(a, a);
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    EXPECT_NEAR(*s, 1.0, 1e-12) << c << " components";
  }
}

TEST(MsSsimTest, ConstantImagesGiveTheLuminanceTerm) {
  // No variance anywhere: every cs_j is 1 and the last scale's SSIM is the luminance term
  // (2ab + C1) / (a^2 + b^2 + C1), raised to the last weight.
  const double a = 100, b = 140, c1 = (0.01 * 255) * (0.01 * 255);
  const double l = (2 * a * b + c1) / (a * a + b * b + c1);
  auto s = MsSsim(Constant(200, 200, 1, 100), Constant(200, 200, 1, 140));
  ASSERT_TRUE(s.has_value());
  EXPECT_NEAR(*s, std::pow(l, 0.1333), 1e-12);
  // With 3 scales (the image is too small for more) the weights are renormalized.
  auto s3 = MsSsim(Constant(50, 50, 1, 100), Constant(50, 50, 1, 140));
  ASSERT_TRUE(s3.has_value());
  EXPECT_EQ(MsSsimScales(50, 50), 3);
  EXPECT_NEAR(*s3, std::pow(l, 0.3001 / (0.0448 + 0.2856 + 0.3001)), 1e-12);
}

TEST(MsSsimTest, AntiCorrelatedDetailClampsToZero) {
  auto pixels = testdata::MakeTestPixels(200, 200, 1, 3);
  std::vector<uint8_t> inverted(pixels);
  for (uint8_t& p : inverted) p = static_cast<uint8_t>(255 - p);
  auto s = MsSsim(FromPixels(200, 200, 1, pixels), FromPixels(200, 200, 1, inverted));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, 0.0);
}

TEST(MsSsimTest, Errors) {
  EXPECT_FALSE(MsSsim(Constant(20, 20, 3, 0), Constant(20, 21, 3, 0)).has_value());
  EXPECT_FALSE(MsSsim(Constant(20, 20, 3, 0), Constant(20, 20, 1, 0)).has_value());
  EXPECT_FALSE(MsSsim(Constant(20, 20, 2, 0), Constant(20, 20, 2, 0)).has_value());
  auto small = MsSsim(Constant(10, 40, 1, 0), Constant(10, 40, 1, 0));
  ASSERT_FALSE(small.has_value());
  EXPECT_EQ(small.error().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(small.error().message().find("11x11"), std::string::npos);
}

TEST(LumaTest, GreyRgbCmyk) {
  EXPECT_EQ(ImageLuma(FromPixels(1, 1, 1, {77})), std::vector<double>{77});
  std::vector<double> y = ImageLuma(FromPixels(2, 1, 3, {255, 0, 0, 10, 20, 30}));
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], 0.299 * 255, 1e-12);
  EXPECT_NEAR(y[1], 0.299 * 10 + 0.587 * 20 + 0.114 * 30, 1e-12);
  // Adobe CMYK: samples are 255 - ink. No ink at all is white; K sample 0 (full black ink) is
  // black whatever the other samples say.
  DecodedImage cmyk = FromPixels(3, 1, 4, {255, 255, 255, 255, 200, 100, 50, 0, 255, 0, 128, 200});
  DecodedImage rgb = ToRgb(cmyk);
  ASSERT_EQ(rgb.components, 3);
  EXPECT_EQ(rgb.pixels, (std::vector<uint8_t>{255, 255, 255, 0, 0, 0, 200, 0, 100}));
  std::vector<double> yc = ImageLuma(cmyk);
  EXPECT_NEAR(yc[0], 255, 1e-9);
  EXPECT_NEAR(yc[2], 0.299 * 200 + 0.114 * 100, 1e-9);
  EXPECT_EQ(ToRgb(FromPixels(1, 1, 1, {9})).pixels, (std::vector<uint8_t>{9, 9, 9}));
}

TEST(QualityTest, LevelsOfARealTranscode) {
  for (auto color :
       {testdata::JpegColor::kYCbCr, testdata::JpegColor::kGray, testdata::JpegColor::kCMYK}) {
    testdata::JpegSpec spec;
    spec.width = 240;
    spec.height = 200;
    spec.color = color;
    spec.quality = 90;
    std::vector<DecodedImage> levels = DecodedLevels(spec);
    ASSERT_EQ(levels.size(), 10u);
    const DecodedImage& ref = levels[9];
    EXPECT_TRUE(std::isinf(Psnr(ref, ref)));
    double first_psnr = Psnr(levels[0], ref);
    auto first_ms = MsSsim(levels[0], ref);
    ASSERT_TRUE(first_ms.has_value());
    EXPECT_GT(first_psnr, 10);
    EXPECT_LT(first_psnr, 60);
    EXPECT_GT(*first_ms, 0.0);
    EXPECT_LT(*first_ms, 1.0);
    // More scans never make the picture much worse, and level 9 beats level 1.
    for (int k = 1; k <= 9; ++k) {
      double p = Psnr(levels[k - 1], ref);
      auto m = MsSsim(levels[k - 1], ref);
      ASSERT_TRUE(m.has_value());
      EXPECT_GE(p, first_psnr - 0.5) << "level " << k;
      EXPECT_GE(*m, *first_ms - 0.01) << "level " << k;
      EXPECT_LE(*m, 1.0);
    }
    EXPECT_GT(Psnr(levels[8], ref), first_psnr + 3);
    EXPECT_GT(*MsSsim(levels[8], ref), *first_ms);
    auto ten = MsSsim(ref, ref);
    ASSERT_TRUE(ten.has_value());
    EXPECT_NEAR(*ten, 1.0, 1e-12);
  }
}

}  // namespace
}  // namespace pcrfs::codec
