// Image-quality metrics between two decodings of the same picture (a lower level against level
// 10): PSNR over every component, and MS-SSIM on luma. docs/quality.md has the definitions, the
// choices made where the literature leaves room, and how they are checked against scikit-image.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "codec/decoder.h"
#include "common/status.h"

namespace pcrfs::codec {

// PSNR in dB over all components of 8-bit pixels (peak 255): 10 log10(255^2 / MSE), where MSE is
// the mean squared difference over width * height * components samples. +infinity when the
// pixels are identical. REQUIRES: equal width, height and components; otherwise returns NaN.
double Psnr(const DecodedImage& a, const DecodedImage& b);

// MS-SSIM (Wang, Simoncelli and Bovik 2003) of the luma planes (see ImageLuma), in [0, 1]:
//   prod_{j<M} cs_j^w_j * ssim_M^w_M
// with an 11x11 Gaussian window (sigma 1.5) evaluated only where it fits inside the image,
// K1 = 0.01, K2 = 0.03, L = 255, the weights of kMsSsimWeights, and a 2x2 block average
// (odd last row/column dropped) between scales. M = 5 when the smaller side is at least
// 11 * 16 = 176 px; smaller images use the largest M whose scale M still holds an 11x11 window,
// with the first M weights renormalized to sum to 1. A negative cs_j or ssim_M (anti-correlated
// detail) is clamped to 0, so the result is 0 rather than NaN.
// Errors: InvalidArgument for different sizes or component counts, for a component count other
// than 1, 3 or 4, and for images smaller than 11x11.
// Equals MsSsimReference::Make(b)->Compare(a), bit for bit.
Result<double> MsSsim(const DecodedImage& a, const DecodedImage& b);

// MS-SSIM of many images against one reference (levels 1..9 against level 10): the reference's
// luma pyramid and its local means and second moments are computed once, at Make, instead of
// once per comparison. Compare(a) returns exactly (bit for bit) what MsSsim(a, reference) did
// before this class existed: every sum is taken in the same order. Memory: about 3 doubles per
// reference pixel (for 1024x1024, 32 MB; the build's sample measures at most 512x512), and Compare
// takes the image's luma pyramid plus 33 rows of the image's width. Compare is const and may run on
// several threads at once.
class MsSsimReference {
 public:
  // Errors: as MsSsim's, for the reference alone (component count, smaller than 11x11).
  static Result<MsSsimReference> Make(const DecodedImage& reference);

  // Errors: InvalidArgument when `image` differs from the reference in size or components.
  Result<double> Compare(const DecodedImage& image) const;

 private:
  // One scale of the reference: its luma (width x height, row-major) and, at each position where
  // the 11x11 window fits ((width - 10) x (height - 10)), the window's Gaussian-weighted mean of
  // the luma and of its square.
  struct Scale {
    int width = 0;
    int height = 0;
    std::vector<double> luma;
    std::vector<double> mean;
    std::vector<double> mean_sq;
  };

  int width_ = 0;
  int height_ = 0;
  int components_ = 0;
  std::vector<Scale> scales_;
};

inline constexpr std::array<double, 5> kMsSsimWeights = {0.0448, 0.2856, 0.3001, 0.2363, 0.1333};
inline constexpr int kSsimWindow = 11;

// How many scales MsSsim uses for an image of this size: 0 (too small) .. 5.
int MsSsimScales(int width, int height);

// The luma plane MsSsim works on, width * height doubles, not rounded:
//   grey: the sample itself;
//   RGB:  Y = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601, as JPEG's YCbCr);
//   CMYK: the same Y of the RGB that ToRgb gives.
std::vector<double> ImageLuma(const DecodedImage& image);

// 8-bit RGB for display. Grey is replicated. CMYK is taken as libjpeg-turbo returns it from
// Adobe-style files (Photoshop, Pillow, libjpeg's own cjpeg all write them): each sample is
// 255 - ink, so R = C * K / 255 (and G from M, B from Y), rounded; this is Pillow's CMYK->RGB.
DecodedImage ToRgb(const DecodedImage& image);

}  // namespace pcrfs::codec
