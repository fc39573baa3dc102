#include "builder/quality_window.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "codec/centred_window.h"
#include "codec/jpeg_dest.h"
#include "codec/jpeg_error.h"
#include "codec/libjpeg.h"

namespace pcrfs::tools {
namespace {

// As codec/decoder.cc: a hostile file must not take the process's memory.
constexpr long kMaxCutMemory = 1L << 30;

// Plain C data only (codec/jpeg_error.h): the libjpeg calls run between a setjmp and any
// longjmp. One error manager serves both objects (one runs at a time).
struct CutJob {
  const uint8_t* src;
  size_t src_size;
  int max_side;
  JDIMENSION source_height;  // the image's height (the SOF of `src` may say less: see below)
  codec::JpegErrorManager err;
  jpeg_decompress_struct in;
  jpeg_compress_struct out;
  bool in_created;
  bool out_created;
  bool cut;                       // false: the image fits, nothing was written
  codec::MallocDestination dest;  // ours at every moment (jpeg_mem_dest's is not, on errors)
};

struct DestroyCutJob {
  void operator()(CutJob* job) const {
    if (job->out_created) jpeg_destroy_compress(&job->out);
    if (job->in_created) jpeg_destroy_decompress(&job->in);
    std::free(job->dest.buffer);
    delete job;
  }
};

// Reads the source's coefficients and writes the window's (codec::WriteCentredWindow).
bool RunCut(CutJob* job) {
  if (setjmp(job->err.jump)) return false;
  j_decompress_ptr in = &job->in;
  jpeg_create_decompress(in);
  job->in_created = true;
  in->mem->max_memory_to_use = kMaxCutMemory;
  jpeg_mem_src(in, job->src, static_cast<unsigned long>(job->src_size));
  jpeg_read_header(in, TRUE);
  const auto max = static_cast<JDIMENSION>(job->max_side);
  if (job->source_height == 0) job->source_height = in->image_height;
  if (in->image_width <= max && job->source_height <= max) return true;
  jvirt_barray_ptr* source = jpeg_read_coefficients(in);
  job->out.err = &job->err.pub;
  job->out_created = true;  // jpeg_destroy_compress is safe on the zeroed struct too
  job->cut = codec::WriteCentredWindow(in, source, job->source_height, job->max_side, kMaxCutMemory,
                                       &job->out, &job->dest, job->src_size / 4);
  jpeg_finish_decompress(in);
  return true;
}

// The offset of the height field of the frame header (SOFn) of a JPEG whose markers before
// the first scan are well formed, else 0 (then nothing is shortened: libjpeg reports the
// damage).
size_t FrameHeightOffset(std::span<const uint8_t> jpeg) {
  if (jpeg.size() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) return 0;
  size_t i = 2;
  while (i + 4 <= jpeg.size()) {
    if (jpeg[i] != 0xFF) return 0;
    const uint8_t marker = jpeg[i + 1];
    if (marker == 0xFF) {  // a fill byte
      ++i;
      continue;
    }
    if (marker == 0xD9 || marker == 0xDA) return 0;  // EOI, or a scan before any frame
    const size_t length = size_t{jpeg[i + 2]} << 8 | jpeg[i + 3];
    const bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) return length >= 8 && i + 10 <= jpeg.size() ? i + 5 : 0;
    if (length < 2) return 0;
    i += 2 + length;
  }
  return 0;
}

// The centred window's bottom edge in pixels, from the frame header of a JPEG taller than
// max_side (as RunCut computes it), else 0.
JDIMENSION WindowBottom(std::span<const uint8_t> jpeg, size_t height_at, int max_side) {
  const JDIMENSION height = JDIMENSION{jpeg[height_at]} << 8 | jpeg[height_at + 1];
  const int components = jpeg[height_at + 4];
  if (height <= static_cast<JDIMENSION>(max_side) || components < 1 ||
      height_at + 5 + 3 * static_cast<size_t>(components) > jpeg.size()) {
    return 0;
  }
  int max_v = 1;
  for (int c = 0; c < components; ++c) max_v = std::max(max_v, jpeg[height_at + 6 + 3 * c] & 15);
  JDIMENSION y0, h;
  codec::CentredWindowSide(height, max_side, max_v * DCTSIZE, &y0, &h);
  return y0 + h;
}

}  // namespace

Result<std::optional<std::vector<uint8_t>>> CutCentredWindow(std::span<const uint8_t> jpeg,
                                                             int max_side) {
  if (jpeg.empty()) return Err(Status::Corruption("quality window: empty JPEG"));
  // Value-initialized, so the destroyer is safe whatever step failed.
  std::unique_ptr<CutJob, DestroyCutJob> job(new CutJob{});
  job->src = jpeg.data();
  job->src_size = jpeg.size();
  job->max_side = std::max(max_side, codec::kMinWindowSide);
  job->in.err = codec::InitJpegErrorManager(&job->err, /*warnings_fatal=*/true);
  // The rows below the window are never decoded: a copy whose frame header says the image
  // ends at the window's bottom edge makes libjpeg stop each scan there (the rows above it
  // keep exactly their coefficients: every scan runs in raster order from the top) and skip
  // the rest of the scan's data to the next marker, with a warning for the skipped bytes
  // (which is then the only one tolerated). For a 6000x4000 photo this saves 37% of the
  // decoding; the rows above the window must be decoded, to reach the window's own.
  std::vector<uint8_t> shortened;
  if (size_t at = FrameHeightOffset(jpeg); at != 0) {
    const JDIMENSION bottom = WindowBottom(jpeg, at, job->max_side);
    const JDIMENSION height = JDIMENSION{jpeg[at]} << 8 | jpeg[at + 1];
    if (bottom != 0 && bottom < height) {
      shortened.assign(jpeg.begin(), jpeg.end());
      shortened[at] = static_cast<uint8_t>(bottom >> 8);
      shortened[at + 1] = static_cast<uint8_t>(bottom & 0xFF);
      job->src = shortened.data();
      job->source_height = height;
      job->err.tolerated_warning = JWRN_EXTRANEOUS_DATA;
    }
  }
  if (!RunCut(job.get())) {
    return Err(Status::Corruption(std::string("quality window: ") + job->err.message));
  }
  if (!job->cut) return std::optional<std::vector<uint8_t>>();
  return std::optional<std::vector<uint8_t>>(
      std::vector<uint8_t>(job->dest.buffer, job->dest.buffer + job->dest.size));
}

}  // namespace pcrfs::tools
