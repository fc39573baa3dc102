// Decoding JPEG bytes to pixels with libjpeg-turbo, for tests, verification and quality metrics.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace pcrfs::codec {

struct DecodedImage {
  int width = 0;
  int height = 0;
  int components = 0;           // output components: 1 (grey), 3 (RGB) or 4 (CMYK)
  std::vector<uint8_t> pixels;  // row-major, interleaved, width * height * components
};

// Decodes with libjpeg-turbo's defaults (the same output colour space choice as PIL makes:
// greyscale stays grey, YCbCr/RGB become RGB, CMYK/YCCK become CMYK). Any libjpeg warning is an
// error, so a successful decode is a clean one.
Result<DecodedImage> DecodeJpeg(std::span<const uint8_t> jpeg);

}  // namespace pcrfs::codec
