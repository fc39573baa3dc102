#include "codec/quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace pcrfs::codec {
namespace {

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

Plane LumaPlane(const DecodedImage& image) {
  return Plane{image.width, image.height, ImageLuma(image)};
}

bool SameShape(const DecodedImage& a, const DecodedImage& b) {
  return a.width == b.width && a.height == b.height && a.components == b.components &&
         a.pixels.size() == b.pixels.size() &&
         a.pixels.size() == static_cast<size_t>(a.width) * a.height * a.components;
}

uint8_t MulDiv255(int a, int b) { return static_cast<uint8_t>((a * b + 127) / 255); }

}  // namespace

double Psnr(const DecodedImage& a, const DecodedImage& b) {
  if (!SameShape(a, b)) return std::numeric_limits<double>::quiet_NaN();
  if (a.pixels.empty()) return std::numeric_limits<double>::infinity();
  uint64_t sse = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    int d = int{a.pixels[i]} - int{b.pixels[i]};
    sse += static_cast<uint64_t>(d * d);
  }
  if (sse == 0) return std::numeric_limits<double>::infinity();
  double mse = static_cast<double>(sse) / static_cast<double>(a.pixels.size());
  return 10.0 * std::log10(kL * kL / mse);
}

int MsSsimScales(int width, int height) {
  int scales = 0;
  while (scales < static_cast<int>(kMsSsimWeights.size()) && width >= kSsimWindow &&
         height >= kSsimWindow) {
    ++scales;
    width /= 2;
    height /= 2;
  }
  return scales;
}

Result<double> MsSsim(const DecodedImage& a, const DecodedImage& b) {
  if (!SameShape(a, b)) {
    return Err(Status::InvalidArgument(
        "ms-ssim: images differ in size or components: " + std::to_string(a.width) + "x" +
        std::to_string(a.height) + "x" + std::to_string(a.components) + " vs " +
        std::to_string(b.width) + "x" + std::to_string(b.height) + "x" +
        std::to_string(b.components)));
  }
  if (a.components != 1 && a.components != 3 && a.components != 4) {
    return Err(Status::InvalidArgument("ms-ssim: unsupported component count " +
                                       std::to_string(a.components)));
  }
  const int scales = MsSsimScales(a.width, a.height);
  if (scales == 0) {
    return Err(Status::InvalidArgument("ms-ssim: image " + std::to_string(a.width) + "x" +
                                       std::to_string(a.height) +
                                       " is smaller than the 11x11 window"));
  }
  // The published weights sum to 1.0001; they are used as they are with all 5 scales, and
  // renormalized to sum to 1 only when fewer scales fit.
  double weight_sum = 1.0;
  if (scales < static_cast<int>(kMsSsimWeights.size())) {
    weight_sum = 0;
    for (int j = 0; j < scales; ++j) weight_sum += kMsSsimWeights[j];
  }

  Plane x = LumaPlane(a), y = LumaPlane(b);
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

std::vector<double> ImageLuma(const DecodedImage& image) {
  const size_t n = static_cast<size_t>(image.width) * image.height;
  std::vector<double> luma(n);
  const uint8_t* p = image.pixels.data();
  if (image.components == 1) {
    for (size_t i = 0; i < n; ++i) luma[i] = p[i];
  } else if (image.components == 3 || image.components == 4) {
    const DecodedImage rgb_storage = image.components == 4 ? ToRgb(image) : DecodedImage{};
    const uint8_t* rgb = image.components == 4 ? rgb_storage.pixels.data() : p;
    for (size_t i = 0; i < n; ++i) {
      luma[i] = 0.299 * rgb[3 * i] + 0.587 * rgb[3 * i + 1] + 0.114 * rgb[3 * i + 2];
    }
  }
  return luma;
}

DecodedImage ToRgb(const DecodedImage& image) {
  if (image.components == 3) return image;
  DecodedImage out;
  out.width = image.width;
  out.height = image.height;
  out.components = 3;
  const size_t n = static_cast<size_t>(image.width) * image.height;
  out.pixels.resize(n * 3);
  const uint8_t* p = image.pixels.data();
  uint8_t* o = out.pixels.data();
  if (image.components == 1) {
    for (size_t i = 0; i < n; ++i) o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = p[i];
  } else if (image.components == 4) {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* s = p + 4 * i;
      o[3 * i] = MulDiv255(s[0], s[3]);
      o[3 * i + 1] = MulDiv255(s[1], s[3]);
      o[3 * i + 2] = MulDiv255(s[2], s[3]);
    }
  }
  return out;
}

}  // namespace pcrfs::codec
