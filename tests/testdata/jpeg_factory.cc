#include "tests/testdata/jpeg_factory.h"

#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "codec/jpeg_dest.h"
#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"

namespace pcrfs::testdata {
namespace {

uint32_t Hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Integer-only, so the pixels (and the golden digests built on them) are the same everywhere.
uint8_t PixelValue(int x, int y, int c, int width, int height, uint32_t seed) {
  int w = width > 1 ? width - 1 : 1;
  int h = height > 1 ? height - 1 : 1;
  int v;
  switch (c % 4) {
    case 0:
      v = 30 + x * 160 / w + y * 50 / h;
      break;
    case 1:
      v = 220 - y * 150 / h + x * 20 / w;
      break;
    case 2:
      v = 60 + (x + y) * 120 / (w + h);
      break;
    default:
      v = 200 - x * 90 / w - y * 60 / h;
      break;
  }
  // A soft "blob": a radial bump in the upper left third.
  int dx = x - width / 3, dy = y - height / 3;
  int r2 = dx * dx + dy * dy;
  int radius = (width < height ? width : height) / 4 + 1;
  if (r2 < radius * radius) v += 40 - 40 * r2 / (radius * radius);
  // Texture and noise.
  v += static_cast<int>((static_cast<unsigned>(x * 7 + y * 13 + c * 29) % 23)) - 11;
  v += static_cast<int>(Hash(seed * 0x9E3779B9U ^ (static_cast<uint32_t>(y) << 16) ^
                             static_cast<uint32_t>(x) ^ (static_cast<uint32_t>(c) << 28)) %
                        17) -
       8;
  // Hard edges: a dark bar and a bright diagonal.
  if (x > width / 2 && x < width / 2 + width / 8 + 1) v -= 70;
  if (std::abs(x * height - y * width) < (width + height) * 2) v += 80 - 30 * c;
  if (v < 0) v = 0;
  if (v > 255) v = 255;
  return static_cast<uint8_t>(v);
}

struct CompressJob {
  const JpegSpec* spec;
  const uint8_t* pixels;
  const uint8_t* icc;
  size_t icc_size;
  const uint8_t* exif;
  size_t exif_size;
  codec::JpegErrorManager err;
  jpeg_compress_struct info;
  codec::MallocDestination dest;  // dest.buffer is the caller's to free
};

// Plain C data only between setjmp and the libjpeg calls (see codec/jpeg_error.h).
bool RunCompress(CompressJob* job) {
  const JpegSpec& spec = *job->spec;
  j_compress_ptr info = &job->info;
  std::memset(info, 0, sizeof(*info));
  info->err = codec::InitJpegErrorManager(&job->err, /*warnings_fatal=*/true);
  if (setjmp(job->err.jump)) {
    jpeg_destroy_compress(info);
    return false;
  }
  jpeg_create_compress(info);
  int components = InputComponents(spec.color);
  info->image_width = static_cast<JDIMENSION>(spec.width);
  info->image_height = static_cast<JDIMENSION>(spec.height);
  info->input_components = components;
  info->in_color_space = components == 1 ? JCS_GRAYSCALE : (components == 3 ? JCS_RGB : JCS_CMYK);
  jpeg_set_defaults(info);
  switch (spec.color) {
    case JpegColor::kGray:
      jpeg_set_colorspace(info, JCS_GRAYSCALE);
      break;
    case JpegColor::kYCbCr:
      jpeg_set_colorspace(info, JCS_YCbCr);
      break;
    case JpegColor::kRGB:
      jpeg_set_colorspace(info, JCS_RGB);
      break;
    case JpegColor::kCMYK:
      jpeg_set_colorspace(info, JCS_CMYK);
      break;
    case JpegColor::kYCCK:
      jpeg_set_colorspace(info, JCS_YCCK);
      break;
  }
  for (int ci = 0; ci < info->num_components && ci < 4; ci++) {
    if (spec.h_samp[ci] != 0) info->comp_info[ci].h_samp_factor = spec.h_samp[ci];
    if (spec.v_samp[ci] != 0) info->comp_info[ci].v_samp_factor = spec.v_samp[ci];
  }
  jpeg_set_quality(info, spec.quality, TRUE);
  if (spec.progressive) jpeg_simple_progression(info);
  info->arith_code = spec.arithmetic ? TRUE : FALSE;
  info->restart_interval = static_cast<unsigned>(spec.restart_interval);
  codec::InstallMallocDestination(info, &job->dest, 16384);
  jpeg_start_compress(info, TRUE);
  if (spec.comment) {
    static const char kComment[] = "pcrfs test image";
    jpeg_write_marker(info, JPEG_COM, reinterpret_cast<const JOCTET*>(kComment),
                      sizeof(kComment) - 1);
  }
  if (job->exif != nullptr) {
    jpeg_write_marker(info, JPEG_APP0 + 1, job->exif, static_cast<unsigned>(job->exif_size));
  }
  if (job->icc != nullptr) {
    jpeg_write_marker(info, JPEG_APP0 + 2, job->icc, static_cast<unsigned>(job->icc_size));
  }
  size_t row_bytes = static_cast<size_t>(spec.width) * static_cast<size_t>(components);
  while (info->next_scanline < info->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(job->pixels + row_bytes * info->next_scanline);
    jpeg_write_scanlines(info, &row, 1);
  }
  jpeg_finish_compress(info);
  jpeg_destroy_compress(info);
  return true;
}

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

}  // namespace

int InputComponents(JpegColor color) {
  switch (color) {
    case JpegColor::kGray:
      return 1;
    case JpegColor::kYCbCr:
    case JpegColor::kRGB:
      return 3;
    case JpegColor::kCMYK:
    case JpegColor::kYCCK:
      return 4;
  }
  return 3;
}

std::vector<uint8_t> MakeTestPixels(int width, int height, int components, uint32_t seed) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * static_cast<size_t>(height) *
                              static_cast<size_t>(components));
  size_t i = 0;
  for (int y = 0; y < height; y++) {
    for (int x = 0; x < width; x++) {
      for (int c = 0; c < components; c++) pixels[i++] = PixelValue(x, y, c, width, height, seed);
    }
  }
  return pixels;
}

std::vector<uint8_t> TestIccPayload() {
  static const char kId[] = "ICC_PROFILE";
  std::vector<uint8_t> payload(kId, kId + sizeof(kId));  // with the NUL
  payload.push_back(1);                                  // chunk 1
  payload.push_back(1);                                  // of 1
  // A fake 600-byte profile: a size field and a recognisable pattern. Nothing parses it.
  const uint32_t size = 600;
  payload.push_back(0);
  payload.push_back(0);
  payload.push_back(static_cast<uint8_t>(size >> 8));
  payload.push_back(static_cast<uint8_t>(size & 0xFF));
  for (uint32_t i = 4; i < size; i++) payload.push_back(static_cast<uint8_t>(Hash(i) & 0xFF));
  return payload;
}

std::vector<uint8_t> TestExifPayload() {
  // "Exif\0\0" + a little-endian TIFF header + an IFD with one entry (Orientation = 1).
  return {'E',  'x',  'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0,  // header, IFD at 8
          1,    0,                                                  // 1 entry
          0x12, 0x01, 3,   0,   1, 0, 0,   0,   1,  0, 0, 0,        // Orientation, SHORT, 1, 1
          0,    0,    0,   0};                                      // no next IFD
}

Result<std::vector<uint8_t>> MakeTestJpeg(const JpegSpec& spec) {
  if (spec.width < 1 || spec.height < 1 || spec.width > 65500 || spec.height > 65500) {
    return Err(Status::InvalidArgument("test jpeg: bad size"));
  }
  std::vector<uint8_t> pixels =
      MakeTestPixels(spec.width, spec.height, InputComponents(spec.color), spec.seed);
  std::vector<uint8_t> icc = spec.icc ? TestIccPayload() : std::vector<uint8_t>{};
  std::vector<uint8_t> exif = spec.exif ? TestExifPayload() : std::vector<uint8_t>{};
  auto job = std::make_unique<CompressJob>();
  job->spec = &spec;
  job->pixels = pixels.data();
  job->icc = spec.icc ? icc.data() : nullptr;
  job->icc_size = icc.size();
  job->exif = spec.exif ? exif.data() : nullptr;
  job->exif_size = exif.size();
  bool ok = RunCompress(job.get());
  std::unique_ptr<unsigned char, FreeDeleter> buffer(job->dest.buffer);
  if (!ok) return Err(Status::InvalidArgument(std::string("test jpeg: ") + job->err.message));
  return std::vector<uint8_t>(buffer.get(), buffer.get() + job->dest.size);
}

std::string NamedJpegSpec::TestName() const {
  std::string out = name.substr(0, name.find('.'));
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

std::vector<NamedJpegSpec> StandardTestJpegs() {
  std::vector<NamedJpegSpec> specs;
  auto add = [&](std::string name, JpegSpec spec) {
    specs.push_back(NamedJpegSpec{std::move(name), spec});
  };
  auto ycc = [](int w, int h, int yh, int yv) {
    JpegSpec s;
    s.width = w;
    s.height = h;
    s.h_samp = {yh, 1, 1, 0};
    s.v_samp = {yv, 1, 1, 0};
    return s;
  };
  add("ycc420_baseline.jpg", ycc(333, 250, 2, 2));
  add("ycc422.jpg", ycc(320, 241, 2, 1));
  add("ycc440.jpg", ycc(251, 200, 1, 2));
  add("ycc411.jpg", ycc(300, 200, 4, 1));
  add("ycc444.jpg", ycc(200, 150, 1, 1));
  {
    JpegSpec s = ycc(160, 120, 2, 2);
    s.h_samp = {2, 1, 2, 0};  // Cr sampled more finely than Cb
    s.v_samp = {2, 1, 1, 0};
    add("ycc_mixed.jpg", s);
  }
  {
    JpegSpec s = ycc(257, 131, 1, 1);
    s.color = JpegColor::kGray;
    add("gray.jpg", s);
  }
  {
    JpegSpec s = ycc(200, 160, 1, 1);
    s.color = JpegColor::kRGB;
    add("rgb.jpg", s);
  }
  {
    JpegSpec s = ycc(180, 140, 1, 1);
    s.color = JpegColor::kCMYK;
    s.h_samp = {1, 1, 1, 1};
    s.v_samp = {1, 1, 1, 1};
    add("cmyk.jpg", s);
  }
  {
    JpegSpec s = ycc(180, 140, 2, 2);
    s.color = JpegColor::kYCCK;
    s.h_samp = {2, 1, 1, 2};
    s.v_samp = {2, 1, 1, 2};
    add("ycck.jpg", s);
  }
  {
    JpegSpec s = ycc(300, 220, 2, 2);
    s.progressive = true;
    add("progressive.jpg", s);
  }
  {
    JpegSpec s = ycc(300, 220, 2, 2);
    s.arithmetic = true;
    add("arith.jpg", s);
  }
  {
    JpegSpec s = ycc(300, 220, 2, 2);
    s.arithmetic = true;
    s.progressive = true;
    add("arith_progressive.jpg", s);
  }
  {
    JpegSpec s = ycc(300, 220, 2, 2);
    s.restart_interval = 3;
    add("restart.jpg", s);
  }
  {
    JpegSpec s = ycc(300, 220, 2, 2);
    s.restart_interval = 2;
    s.progressive = true;
    add("restart_progressive.jpg", s);
  }
  add("tiny_1x1.jpg", ycc(1, 1, 2, 2));
  {
    JpegSpec s = ycc(1, 1, 1, 1);
    s.color = JpegColor::kGray;
    add("tiny_gray_1x1.jpg", s);
  }
  add("odd_17x9.jpg", ycc(17, 9, 2, 2));
  add("wide_16384x8.jpg", ycc(16384, 8, 2, 2));
  add("tall_8x16384.jpg", ycc(8, 16384, 2, 2));
  {
    JpegSpec s = ycc(400, 300, 2, 2);
    s.quality = 98;
    add("quality98.jpg", s);
  }
  {
    JpegSpec s = ycc(400, 300, 2, 2);
    s.quality = 20;
    add("quality20.jpg", s);
  }
  {
    JpegSpec s = ycc(240, 180, 2, 2);
    s.icc = true;
    s.exif = true;
    s.comment = true;
    add("icc_exif.jpg", s);
  }
  {
    JpegSpec s = ycc(240, 180, 1, 1);
    s.color = JpegColor::kCMYK;
    s.h_samp = {1, 1, 1, 1};
    s.v_samp = {1, 1, 1, 1};
    s.progressive = true;
    s.icc = true;
    add("cmyk_progressive_icc.jpg", s);
  }
  return specs;
}

}  // namespace pcrfs::testdata
