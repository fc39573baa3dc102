// Deterministic synthetic test JPEGs, written with the libjpeg compress API from seeded
// photo-like pixels (smooth gradients, texture, noise and hard edges).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace pcrfs::testdata {

enum class JpegColor { kGray, kYCbCr, kRGB, kCMYK, kYCCK };

struct JpegSpec {
  int width = 64;
  int height = 48;
  JpegColor color = JpegColor::kYCbCr;
  // Sampling factors per component; 0 means libjpeg's default for the colour space
  // (2x2 for Y of YCbCr and YCCK, 1x1 for everything else).
  std::array<int, 4> h_samp{};
  std::array<int, 4> v_samp{};
  int quality = 85;
  bool progressive = false;  // libjpeg's jpeg_simple_progression
  bool arithmetic = false;
  int restart_interval = 0;  // in MCUs; 0 = none
  bool icc = false;          // an APP2 ICC_PROFILE marker (fake profile bytes)
  bool exif = false;         // an APP1 Exif marker (minimal TIFF)
  bool comment = false;      // a COM marker
  uint32_t seed = 1;
};

// Input components for the libjpeg compressor: 1 (grey), 3 (RGB) or 4 (CMYK).
int InputComponents(JpegColor color);

// width * height * InputComponents(color) bytes, row-major, interleaved.
std::vector<uint8_t> MakeTestPixels(int width, int height, int components, uint32_t seed);

// Compresses MakeTestPixels(...) as `spec` says.
Result<std::vector<uint8_t>> MakeTestJpeg(const JpegSpec& spec);

// The marker payloads that MakeTestJpeg writes (without the "ICC_PROFILE\0" etc. prefixes
// being separate: these are the full APPn payloads).
std::vector<uint8_t> TestIccPayload();
std::vector<uint8_t> TestExifPayload();

struct NamedJpegSpec {
  std::string name;  // file name, e.g. "ycc420_baseline.jpg"
  JpegSpec spec;
  // The name without its extension, every other character than [A-Za-z0-9] as '_': a
  // parameterized test's name ("ycc420_baseline").
  std::string TestName() const;
};

// Every variety: sampling, colour spaces, progressive, arithmetic, restarts, extreme sizes and
// metadata.
std::vector<NamedJpegSpec> StandardTestJpegs();

}  // namespace pcrfs::testdata
