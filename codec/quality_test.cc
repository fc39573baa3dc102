#include "codec/quality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "codec/transcoder.h"
#include "common/file_util.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::codec {
namespace {

// The MS-SSIM computation as it was before MsSsimReference (cc38a99), kept verbatim as the
// oracle: one reference pyramid per call, each scale's sums in a single pass with the tap loop
// innermost. The new code must give the same doubles, bit for bit.
namespace before {

constexpr double kL = 255.0;
constexpr double kC1 = (0.01 * kL) * (0.01 * kL);
constexpr double kC2 = (0.03 * kL) * (0.03 * kL);
constexpr double kSigma = 1.5;
constexpr int kRadius = kSsimWindow / 2;

struct Plane {
  int width = 0;
  int height = 0;
  std::vector<double> v;  // row-major
};

// The normalized 1-D Gaussian; the 2-D window is its outer product, so filtering is separable.
std::array<double, kSsimWindow> GaussianKernel() {
  std::array<double, kSsimWindow> k{};
  double sum = 0;
  for (int i = 0; i < kSsimWindow; ++i) {
    double d = i - kRadius;
    k[i] = std::exp(-d * d / (2 * kSigma * kSigma));
    sum += k[i];
  }
  for (double& x : k) x /= sum;
  return k;
}

// 2x2 block means; an odd last row or column is dropped.
Plane Downsample(const Plane& p) {
  Plane out;
  out.width = p.width / 2;
  out.height = p.height / 2;
  out.v.resize(static_cast<size_t>(out.width) * out.height);
  for (int y = 0; y < out.height; ++y) {
    const double* r0 = &p.v[static_cast<size_t>(2 * y) * p.width];
    const double* r1 = r0 + p.width;
    double* o = &out.v[static_cast<size_t>(y) * out.width];
    for (int x = 0; x < out.width; ++x) {
      o[x] = (r0[2 * x] + r0[2 * x + 1] + r1[2 * x] + r1[2 * x + 1]) * 0.25;
    }
  }
  return out;
}

struct ScaleSsim {
  double cs = 0;    // mean contrast-structure term
  double ssim = 0;  // mean of luminance * contrast-structure, per window
};

// SSIM terms over every position where the 11x11 window lies inside the image ("valid").
// REQUIRES: x and y of the same size, at least 11x11.
ScaleSsim SsimAtScale(const Plane& x, const Plane& y) {
  static const std::array<double, kSsimWindow> kKernel = GaussianKernel();
  const int w = x.width, h = x.height;
  const int ow = w - 2 * kRadius, oh = h - 2 * kRadius;
  // Horizontal pass over every row for the five moments: x, y, x^2, y^2, xy.
  const size_t hsize = static_cast<size_t>(ow) * h;
  std::vector<double> hx(hsize), hy(hsize), hxx(hsize), hyy(hsize), hxy(hsize);
  for (int r = 0; r < h; ++r) {
    const double* xr = &x.v[static_cast<size_t>(r) * w];
    const double* yr = &y.v[static_cast<size_t>(r) * w];
    size_t o = static_cast<size_t>(r) * ow;
    for (int c = 0; c < ow; ++c) {
      double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
      for (int i = 0; i < kSsimWindow; ++i) {
        double g = kKernel[i], a = xr[c + i], b = yr[c + i];
        sx += g * a;
        sy += g * b;
        sxx += g * a * a;
        syy += g * b * b;
        sxy += g * a * b;
      }
      hx[o + c] = sx;
      hy[o + c] = sy;
      hxx[o + c] = sxx;
      hyy[o + c] = syy;
      hxy[o + c] = sxy;
    }
  }
  // Vertical pass, and the SSIM terms at each output position.
  double cs_sum = 0, ssim_sum = 0;
  for (int r = 0; r < oh; ++r) {
    for (int c = 0; c < ow; ++c) {
      double mx = 0, my = 0, mxx = 0, myy = 0, mxy = 0;
      for (int i = 0; i < kSsimWindow; ++i) {
        size_t k = static_cast<size_t>(r + i) * ow + c;
        double g = kKernel[i];
        mx += g * hx[k];
        my += g * hy[k];
        mxx += g * hxx[k];
        myy += g * hyy[k];
        mxy += g * hxy[k];
      }
      double vx = mxx - mx * mx, vy = myy - my * my, vxy = mxy - mx * my;
      double cs = (2 * vxy + kC2) / (vx + vy + kC2);
      double l = (2 * mx * my + kC1) / (mx * mx + my * my + kC1);
      cs_sum += cs;
      ssim_sum += l * cs;
    }
  }
  double n = static_cast<double>(ow) * oh;
  return {cs_sum / n, ssim_sum / n};
}

double MsSsim(const DecodedImage& a, const DecodedImage& b) {
  const int scales = MsSsimScales(a.width, a.height);
  double weight_sum = 1.0;
  if (scales < static_cast<int>(kMsSsimWeights.size())) {
    weight_sum = 0;
    for (int j = 0; j < scales; ++j) weight_sum += kMsSsimWeights[j];
  }
  Plane x{a.width, a.height, ImageLuma(a)}, y{b.width, b.height, ImageLuma(b)};
  double result = 1.0;
  for (int j = 0; j < scales; ++j) {
    if (j > 0) {
      x = Downsample(x);
      y = Downsample(y);
    }
    ScaleSsim s = SsimAtScale(x, y);
    double term = j + 1 < scales ? s.cs : s.ssim;
    result *= std::pow(std::max(term, 0.0), kMsSsimWeights[j] / weight_sum);
  }
  return result;
}

}  // namespace before

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

// The reference's pyramid and statistics computed once give exactly the old per-call result,
// on real transcodes decoded by libjpeg at levels 1..9 (each colour space, 4:2:0 and 4:4:4,
// sizes with odd sides at several scales and with fewer than 5 scales), through MsSsim and
// through one MsSsimReference reused for all 9 levels, on 2 threads at once.
TEST(MsSsimReferenceTest, EqualsTheOldComputationBitForBit) {
  struct Case {
    int w, h;
    testdata::JpegColor color;
    int samp;  // 2: 4:2:0, 1: 4:4:4
  };
  const Case cases[] = {{240, 200, testdata::JpegColor::kYCbCr, 2},
                        {333, 277, testdata::JpegColor::kYCbCr, 1},
                        {181, 359, testdata::JpegColor::kGray, 1},
                        {150, 97, testdata::JpegColor::kCMYK, 1},
                        {47, 30, testdata::JpegColor::kYCbCr, 2}};
  for (const Case& c : cases) {
    testdata::JpegSpec spec;
    spec.width = c.w;
    spec.height = c.h;
    spec.color = c.color;
    spec.quality = 80;
    spec.h_samp[0] = spec.v_samp[0] = c.samp;
    std::vector<DecodedImage> levels = DecodedLevels(spec);
    ASSERT_EQ(levels.size(), 10u);
    auto ref = MsSsimReference::Make(levels[9]);
    ASSERT_TRUE(ref.has_value()) << ref.error().ToString();
    std::array<double, 10> shared{};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 1 + t; k <= 10; k += 2) {
          auto v = ref->Compare(levels[k - 1]);
          shared[k - 1] = v ? *v : -1;
        }
      });
    }
    for (auto& t : threads) t.join();
    int differing = 0;
    for (int k = 1; k <= 10; ++k) {
      const double expected = before::MsSsim(levels[k - 1], levels[9]);
      auto direct = MsSsim(levels[k - 1], levels[9]);
      ASSERT_TRUE(direct.has_value());
      EXPECT_EQ(*direct, expected) << c.w << "x" << c.h << " level " << k;
      EXPECT_EQ(shared[k - 1], expected) << c.w << "x" << c.h << " level " << k;
      differing += expected != 1.0;
    }
    EXPECT_EQ(shared[9], 1.0);
    EXPECT_GE(differing, 5) << c.w << "x" << c.h << ": the levels should differ from level 10";
  }
}

// The same on photographs: the Debian wallpapers that tests/data/make_dataset.py caches
// ($PCRFS_CACHE/photos, else /var/cache/pcrfs-wallpapers/photos), transcoded, each level
// decoded and its centre cropped to 480x360 (the old computation is slow on whole photos).
TEST(MsSsimReferenceTest, EqualsTheOldComputationOnPhotos) {
  const char* cache = std::getenv("PCRFS_CACHE");
  const std::filesystem::path dir =
      std::filesystem::path(cache ? cache : "/var/cache/pcrfs-wallpapers") / "photos";
  std::vector<std::filesystem::path> photos;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".jpg") photos.push_back(e.path());
  }
  if (photos.empty()) GTEST_SKIP() << "no photos in " << dir << " (run make_dataset.py once)";
  std::sort(photos.begin(), photos.end());
  photos.resize(std::min<size_t>(photos.size(), 4));
  for (const auto& path : photos) {
    auto bytes = ReadWholeFile(path.string(), uint64_t{1} << 26);
    ASSERT_TRUE(bytes.has_value()) << path;
    TranscodeResult t = Transcode(*bytes, TranscodeOptions{});
    ASSERT_TRUE(t.transcoded()) << path << ": " << t.detail;
    std::vector<DecodedImage> levels;
    for (int k = 1; k <= kNumGroups; ++k) {
      auto d = DecodeJpeg(t.image.Level(k));
      ASSERT_TRUE(d.has_value()) << path << " level " << k;
      const int w = std::min(d->width, 480), h = std::min(d->height, 360);
      const int x0 = (d->width - w) / 2, y0 = (d->height - h) / 2;
      const size_t c = static_cast<size_t>(d->components);
      DecodedImage crop;
      crop.width = w;
      crop.height = h;
      crop.components = d->components;
      for (int y = y0; y < y0 + h; ++y) {
        const uint8_t* row = d->pixels.data() + (static_cast<size_t>(y) * d->width + x0) * c;
        crop.pixels.insert(crop.pixels.end(), row, row + static_cast<size_t>(w) * c);
      }
      levels.push_back(std::move(crop));
    }
    auto ref = MsSsimReference::Make(levels[9]);
    ASSERT_TRUE(ref.has_value()) << path;
    int below_one = 0;
    for (int k = 1; k <= 9; ++k) {
      auto v = ref->Compare(levels[k - 1]);
      ASSERT_TRUE(v.has_value());
      EXPECT_EQ(*v, before::MsSsim(levels[k - 1], levels[9])) << path << " level " << k;
      below_one += *v < 1.0;
    }
    EXPECT_GE(below_one, 5) << path << ": the levels should differ from level 10";
  }
}

TEST(MsSsimReferenceTest, Errors) {
  auto small = MsSsimReference::Make(Constant(10, 40, 1, 0));
  ASSERT_FALSE(small.has_value());
  EXPECT_NE(small.error().message().find("11x11"), std::string::npos);
  EXPECT_FALSE(MsSsimReference::Make(Constant(20, 20, 2, 0)).has_value());
  auto ref = MsSsimReference::Make(Constant(20, 20, 3, 7));
  ASSERT_TRUE(ref.has_value());
  auto other = ref->Compare(Constant(20, 21, 3, 7));
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(ref->Compare(Constant(20, 20, 1, 7)).has_value());
  DecodedImage short_pixels = Constant(20, 20, 3, 7);
  short_pixels.pixels.pop_back();
  EXPECT_FALSE(ref->Compare(short_pixels).has_value());
  EXPECT_EQ(*ref->Compare(Constant(20, 20, 3, 7)), 1.0);
}

}  // namespace
}  // namespace pcrfs::codec
