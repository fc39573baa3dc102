// An 8-bit RGB raster for the pictures `pcr ladder` draws: rectangles, copies, an area-average
// downscale, and PNG output (libpng's simplified API, which needs no setjmp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace pcrfs::tools {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // row-major, 3 bytes a pixel

  RgbImage() = default;
  RgbImage(int w, int h, Rgb fill);
  uint8_t* at(int x, int y) { return &pixels[(static_cast<size_t>(y) * width + x) * 3]; }
  const uint8_t* at(int x, int y) const {
    return &pixels[(static_cast<size_t>(y) * width + x) * 3];
  }
};

// Fills the part of the rectangle that lies inside the image.
void FillRect(RgbImage* image, int x, int y, int w, int h, Rgb color);

// Copies src with its top-left corner at (x, y), clipped to dst.
void Blit(const RgbImage& src, RgbImage* dst, int x, int y);

// Each output pixel is the mean of the source area it covers (fractional coverage at the
// edges weighted by the covered fraction), rounded. REQUIRES: 1 <= w <= src.width and
// 1 <= h <= src.height (only shrinks).
RgbImage AreaDownscale(const RgbImage& src, int w, int h);

// Writes an 8-bit RGB PNG. Errors name the path.
Status WritePng(const std::string& path, const RgbImage& image);

}  // namespace pcrfs::tools
