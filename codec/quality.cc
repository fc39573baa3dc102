#include "codec/quality.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

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

// The 11x11 Gaussian window applied separably, streaming: the horizontal pass fills a ring of
// 11 rows, and each output row is the vertical pass over the ring. Every sum is accumulated
// over the 11 taps in the order i = 0..10, starting from 0, as the first implementation's tap
// loop did, so the results are the same doubles; the taps are unrolled (a fold over an index
// sequence) so that the compiler can vectorize along the row, each lane one sum (quality.cc is
// compiled with -fvect-cost-model=dynamic).
using Taps = std::make_index_sequence<kSsimWindow>;

const std::array<double, kSsimWindow>& Kernel() {
  static const std::array<double, kSsimWindow> kKernel = GaussianKernel();
  return kKernel;
}

// mean[c] = sum_i g_i in[c + i], mean_sq[c] = sum_i g_i in[c + i]^2, for c < n.
template <size_t... I>
void HorizontalMeans(const double* __restrict in, int n, double* __restrict mean,
                     double* __restrict mean_sq, std::index_sequence<I...>) {
  const std::array<double, kSsimWindow> g = Kernel();
  for (int c = 0; c < n; ++c) {
    const double* a = in + c;
    double s = 0, ss = 0;
    ((s += g[I] * a[I], ss += g[I] * a[I] * a[I]), ...);
    mean[c] = s;
    mean_sq[c] = ss;
  }
}

// The same sums of x, x^2 and x * y (x first in each product, as SSIM's moments always were).
template <size_t... I>
void HorizontalMoments(const double* __restrict x, const double* __restrict y, int n,
                       double* __restrict mx, double* __restrict mxx, double* __restrict mxy,
                       std::index_sequence<I...>) {
  const std::array<double, kSsimWindow> g = Kernel();
  for (int c = 0; c < n; ++c) {
    const double* a = x + c;
    const double* b = y + c;
    double s = 0, ss = 0, sp = 0;
    ((s += g[I] * a[I], ss += g[I] * a[I] * a[I], sp += g[I] * a[I] * b[I]), ...);
    mx[c] = s;
    mxx[c] = ss;
    mxy[c] = sp;
  }
}

// out[c] = sum_i g_i rows[(first + i) % 11][c] for c < n.
template <size_t... I>
void VerticalMean(const std::vector<std::vector<double>>& rows, int first, int n,
                  double* __restrict out, std::index_sequence<I...>) {
  const std::array<double, kSsimWindow> g = Kernel();
  const std::array<const double*, kSsimWindow> h = {
      rows[(static_cast<size_t>(first) + I) % kSsimWindow].data()...};
  for (int c = 0; c < n; ++c) {
    double s = 0;
    ((s += g[I] * h[I][c]), ...);
    out[c] = s;
  }
}

// A ring of 11 rows of `width` doubles.
std::vector<std::vector<double>> Ring(int width) {
  return std::vector<std::vector<double>>(kSsimWindow, std::vector<double>(width));
}

Plane LumaPlane(const DecodedImage& image) {
  return Plane{image.width, image.height, ImageLuma(image)};
}

bool SameShape(const DecodedImage& a, const DecodedImage& b) {
  return a.width == b.width && a.height == b.height && a.components == b.components &&
         a.pixels.size() == b.pixels.size() &&
         a.pixels.size() == static_cast<size_t>(a.width) * a.height * a.components;
}

Status ShapeError(const DecodedImage& a, const DecodedImage& b) {
  return Status::InvalidArgument(
      "ms-ssim: images differ in size or components: " + std::to_string(a.width) + "x" +
      std::to_string(a.height) + "x" + std::to_string(a.components) + " vs " +
      std::to_string(b.width) + "x" + std::to_string(b.height) + "x" +
      std::to_string(b.components));
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
  if (!SameShape(a, b)) return Err(ShapeError(a, b));
  auto reference = MsSsimReference::Make(b);
  if (!reference) return Err(reference.error());
  return reference->Compare(a);
}

Result<MsSsimReference> MsSsimReference::Make(const DecodedImage& reference) {
  if (!SameShape(reference, reference)) return Err(ShapeError(reference, reference));
  if (reference.components != 1 && reference.components != 3 && reference.components != 4) {
    return Err(Status::InvalidArgument("ms-ssim: unsupported component count " +
                                       std::to_string(reference.components)));
  }
  const int scales = MsSsimScales(reference.width, reference.height);
  if (scales == 0) {
    return Err(Status::InvalidArgument("ms-ssim: image " + std::to_string(reference.width) + "x" +
                                       std::to_string(reference.height) +
                                       " is smaller than the 11x11 window"));
  }
  MsSsimReference r;
  r.width_ = reference.width;
  r.height_ = reference.height;
  r.components_ = reference.components;
  Plane y = LumaPlane(reference);
  for (int j = 0; j < scales; ++j) {
    if (j > 0) y = Downsample(y);
    Scale s;
    s.width = y.width;
    s.height = y.height;
    const int ow = y.width - 2 * kRadius, oh = y.height - 2 * kRadius;
    s.mean.resize(static_cast<size_t>(ow) * oh);
    s.mean_sq.resize(s.mean.size());
    auto h_mean = Ring(ow), h_sq = Ring(ow);
    for (int t = 0; t < y.height; ++t) {
      HorizontalMeans(&y.v[static_cast<size_t>(t) * y.width], ow, h_mean[t % kSsimWindow].data(),
                      h_sq[t % kSsimWindow].data(), Taps());
      const int r0 = t - (kSsimWindow - 1);  // the output row whose window ends at row t
      if (r0 < 0) continue;
      const size_t o = static_cast<size_t>(r0) * ow;
      VerticalMean(h_mean, r0, ow, &s.mean[o], Taps());
      VerticalMean(h_sq, r0, ow, &s.mean_sq[o], Taps());
    }
    // The last scale's plane is never downsampled; every plane is read by Compare.
    s.luma = j + 1 < scales ? y.v : std::move(y.v);
    r.scales_.push_back(std::move(s));
  }
  return r;
}

Result<double> MsSsimReference::Compare(const DecodedImage& image) const {
  DecodedImage shape;  // the reference's shape, for SameShape and the message
  shape.width = width_;
  shape.height = height_;
  shape.components = components_;
  if (image.width != width_ || image.height != height_ || image.components != components_ ||
      image.pixels.size() != static_cast<size_t>(width_) * height_ * components_) {
    shape.pixels.resize(static_cast<size_t>(width_) * height_ * components_);
    return Err(ShapeError(image, shape));
  }
  const int scales = static_cast<int>(scales_.size());
  // The published weights sum to 1.0001; they are used as they are with all 5 scales, and
  // renormalized to sum to 1 only when fewer scales fit.
  double weight_sum = 1.0;
  if (scales < static_cast<int>(kMsSsimWeights.size())) {
    weight_sum = 0;
    for (int j = 0; j < scales; ++j) weight_sum += kMsSsimWeights[j];
  }
  Plane x = LumaPlane(image);
  double result = 1.0;
  for (int j = 0; j < scales; ++j) {
    if (j > 0) x = Downsample(x);
    const Scale& y = scales_[j];
    const int w = x.width, ow = w - 2 * kRadius, oh = x.height - 2 * kRadius;
    auto hx = Ring(ow), hxx = Ring(ow), hxy = Ring(ow);
    std::vector<double> mx(ow), mxx(ow), mxy(ow), cs(ow), lcs(ow);
    double cs_sum = 0, ssim_sum = 0;
    for (int t = 0; t < x.height; ++t) {
      const size_t row = static_cast<size_t>(t) * w;
      const int slot = t % kSsimWindow;
      HorizontalMoments(&x.v[row], &y.luma[row], ow, hx[slot].data(), hxx[slot].data(),
                        hxy[slot].data(), Taps());
      const int r0 = t - (kSsimWindow - 1);
      if (r0 < 0) continue;
      VerticalMean(hx, r0, ow, mx.data(), Taps());
      VerticalMean(hxx, r0, ow, mxx.data(), Taps());
      VerticalMean(hxy, r0, ow, mxy.data(), Taps());
      const double* __restrict my = &y.mean[static_cast<size_t>(r0) * ow];
      const double* __restrict myy = &y.mean_sq[static_cast<size_t>(r0) * ow];
      for (int c = 0; c < ow; ++c) {
        double vx = mxx[c] - mx[c] * mx[c], vy = myy[c] - my[c] * my[c],
               vxy = mxy[c] - mx[c] * my[c];
        cs[c] = (2 * vxy + kC2) / (vx + vy + kC2);
        lcs[c] = (2 * mx[c] * my[c] + kC1) / (mx[c] * mx[c] + my[c] * my[c] + kC1) * cs[c];
      }
      // In row-major order, one term at a time, as the sums always were.
      for (int c = 0; c < ow; ++c) {
        cs_sum += cs[c];
        ssim_sum += lcs[c];
      }
    }
    const double n = static_cast<double>(ow) * oh;
    const double term = j + 1 < scales ? cs_sum / n : ssim_sum / n;
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
