#include "mount-tools/raster.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pcrfs::tools {
namespace {

// For each output index, the source indices it covers and the covered fraction of each.
struct Tap {
  int index;
  double weight;
};

std::vector<std::vector<Tap>> AreaTaps(int src, int dst) {
  std::vector<std::vector<Tap>> taps(dst);
  const double scale = static_cast<double>(src) / dst;
  for (int o = 0; o < dst; ++o) {
    const double lo = o * scale, hi = (o + 1) * scale;
    for (int i = static_cast<int>(std::floor(lo)); i < src && i < hi; ++i) {
      double covered = std::min<double>(i + 1, hi) - std::max<double>(i, lo);
      if (covered > 1e-12) taps[o].push_back({i, covered / scale});
    }
  }
  return taps;
}

}  // namespace

RgbImage::RgbImage(int w, int h, Rgb fill) : width(w), height(h) {
  pixels.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < pixels.size(); i += 3) {
    pixels[i] = fill.r;
    pixels[i + 1] = fill.g;
    pixels[i + 2] = fill.b;
  }
}

void FillRect(RgbImage* image, int x, int y, int w, int h, Rgb color) {
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = std::min(x + w, image->width), y1 = std::min(y + h, image->height);
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) {
      uint8_t* p = image->at(xx, yy);
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
    }
  }
}

void Blit(const RgbImage& src, RgbImage* dst, int x, int y) {
  const int x0 = std::max(x, 0), x1 = std::min(x + src.width, dst->width);
  if (x1 <= x0) return;
  for (int sy = 0; sy < src.height; ++sy) {
    const int dy = y + sy;
    if (dy < 0 || dy >= dst->height) continue;
    std::memcpy(dst->at(x0, dy), src.at(x0 - x, sy), static_cast<size_t>(x1 - x0) * 3);
  }
}

RgbImage AreaDownscale(const RgbImage& src, int w, int h) {
  const auto xtaps = AreaTaps(src.width, w);
  const auto ytaps = AreaTaps(src.height, h);
  // Horizontal pass into doubles, then vertical.
  std::vector<double> tmp(static_cast<size_t>(w) * src.height * 3);
  for (int y = 0; y < src.height; ++y) {
    for (int x = 0; x < w; ++x) {
      double acc[3] = {0, 0, 0};
      for (const Tap& t : xtaps[x]) {
        const uint8_t* p = src.at(t.index, y);
        for (int c = 0; c < 3; ++c) acc[c] += t.weight * p[c];
      }
      for (int c = 0; c < 3; ++c) tmp[(static_cast<size_t>(y) * w + x) * 3 + c] = acc[c];
    }
  }
  RgbImage out(w, h, Rgb{});
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double acc[3] = {0, 0, 0};
      for (const Tap& t : ytaps[y]) {
        const double* p = &tmp[(static_cast<size_t>(t.index) * w + x) * 3];
        for (int c = 0; c < 3; ++c) acc[c] += t.weight * p[c];
      }
      uint8_t* o = out.at(x, y);
      for (int c = 0; c < 3; ++c) {
        o[c] = static_cast<uint8_t>(std::clamp(std::lround(acc[c]), 0L, 255L));
      }
    }
  }
  return out;
}

Status WritePng(const std::string& path, const RgbImage& image) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&png, path.c_str(), /*convert_to_8bit=*/0, image.pixels.data(),
                               /*row_stride=*/image.width * 3, /*colormap=*/nullptr)) {
    std::string msg = path + ": cannot write PNG: " + png.message;
    png_image_free(&png);  // libpng removes the partial file itself
    return Status::IOError(msg);
  }
  return Status::OK();
}

}  // namespace pcrfs::tools
