#include "builder/quality_window.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

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
  codec::JpegErrorManager err;
  jpeg_decompress_struct in;
  jpeg_compress_struct out;
  bool in_created;
  bool out_created;
  bool cut;                       // false: the image fits, nothing was written
  codec::MallocDestination dest;  // ours at every moment (jpeg_mem_dest's is not, on errors)
  jvirt_barray_ptr window[MAX_COMPONENTS];
};

struct DestroyCutJob {
  void operator()(CutJob* job) const {
    if (job->out_created) jpeg_destroy_compress(&job->out);
    if (job->in_created) jpeg_destroy_decompress(&job->in);
    std::free(job->dest.buffer);
    delete job;
  }
};

// One side: the window's first pixel and its length, the first on a multiple of `unit` (an
// MCU's side), the length too unless the side is kept whole.
void WindowSide(JDIMENSION size, int max_side, int unit, JDIMENSION* first, JDIMENSION* length) {
  const auto max = static_cast<JDIMENSION>(max_side);
  if (size <= max) {
    *first = 0;
    *length = size;
    return;
  }
  const auto u = static_cast<JDIMENSION>(unit);
  *length = std::max(u, max - max % u);
  *first = (size - *length) / 2 / u * u;
}

// Reads the source's coefficients, copies the window's blocks into arrays of its own, and
// writes them as a JPEG of the window's size (the order of calls of jpegtran -crop: the
// window's arrays are requested before jpeg_read_coefficients realizes every array at once).
bool RunCut(CutJob* job) {
  if (setjmp(job->err.jump)) return false;
  j_decompress_ptr in = &job->in;
  jpeg_create_decompress(in);
  job->in_created = true;
  in->mem->max_memory_to_use = kMaxCutMemory;
  jpeg_mem_src(in, job->src, static_cast<unsigned long>(job->src_size));
  jpeg_read_header(in, TRUE);
  const auto max = static_cast<JDIMENSION>(job->max_side);
  if (in->image_width <= max && in->image_height <= max) return true;
  const int mcu_w = in->max_h_samp_factor * DCTSIZE;
  const int mcu_h = in->max_v_samp_factor * DCTSIZE;
  JDIMENSION x0, w, y0, h;
  WindowSide(in->image_width, job->max_side, mcu_w, &x0, &w);
  WindowSide(in->image_height, job->max_side, mcu_h, &y0, &h);
  JDIMENSION first_col[MAX_COMPONENTS], first_row[MAX_COMPONENTS];
  JDIMENSION num_cols[MAX_COMPONENTS], num_rows[MAX_COMPONENTS];
  for (int ci = 0; ci < in->num_components; ++ci) {
    const jpeg_component_info& c = in->comp_info[ci];
    const auto hs = static_cast<JDIMENSION>(c.h_samp_factor);
    const auto vs = static_cast<JDIMENSION>(c.v_samp_factor);
    // A side kept whole keeps all of the component's blocks; a cut one has whole MCUs.
    const JDIMENSION cols =
        w == in->image_width ? c.width_in_blocks : w / static_cast<JDIMENSION>(mcu_w) * hs;
    const JDIMENSION rows =
        h == in->image_height ? c.height_in_blocks : h / static_cast<JDIMENSION>(mcu_h) * vs;
    num_cols[ci] = cols;
    num_rows[ci] = rows;
    first_col[ci] = x0 / static_cast<JDIMENSION>(mcu_w) * hs;
    first_row[ci] = y0 / static_cast<JDIMENSION>(mcu_h) * vs;
    // Rounded up to whole MCUs, as the compressor reads them (jpegtran's workspace too).
    job->window[ci] =
        in->mem->request_virt_barray(reinterpret_cast<j_common_ptr>(in), JPOOL_IMAGE, TRUE,
                                     (cols + hs - 1) / hs * hs, (rows + vs - 1) / vs * vs, vs);
  }
  jvirt_barray_ptr* source = jpeg_read_coefficients(in);
  for (int ci = 0; ci < in->num_components; ++ci) {
    for (JDIMENSION r = 0; r < num_rows[ci]; ++r) {
      JBLOCKARRAY from = in->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(in), source[ci],
                                                     first_row[ci] + r, 1, FALSE);
      JBLOCKARRAY to = in->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(in),
                                                   job->window[ci], r, 1, TRUE);
      std::memcpy(to[0], from[0] + first_col[ci], num_cols[ci] * sizeof(JBLOCK));
    }
  }
  j_compress_ptr out = &job->out;
  out->err = &job->err.pub;
  jpeg_create_compress(out);
  job->out_created = true;
  out->mem->max_memory_to_use = kMaxCutMemory;
  codec::InstallMallocDestination(out, &job->dest, job->src_size / 4);
  jpeg_copy_critical_parameters(in, out);
  out->image_width = w;
  out->image_height = h;
  jpeg_write_coefficients(out, job->window);
  jpeg_finish_compress(out);
  jpeg_finish_decompress(in);
  job->cut = true;
  return true;
}

}  // namespace

Result<std::optional<std::vector<uint8_t>>> CutCentredWindow(std::span<const uint8_t> jpeg,
                                                             int max_side) {
  if (jpeg.empty()) return Err(Status::Corruption("quality window: empty JPEG"));
  // Value-initialized, so the destroyer is safe whatever step failed.
  std::unique_ptr<CutJob, DestroyCutJob> job(new CutJob{});
  job->src = jpeg.data();
  job->src_size = jpeg.size();
  job->max_side = std::max(max_side, 2 * DCTSIZE * 4);
  job->in.err = codec::InitJpegErrorManager(&job->err, /*warnings_fatal=*/true);
  if (!RunCut(job.get())) {
    return Err(Status::Corruption(std::string("quality window: ") + job->err.message));
  }
  if (!job->cut) return std::optional<std::vector<uint8_t>>();
  return std::optional<std::vector<uint8_t>>(
      std::vector<uint8_t>(job->dest.buffer, job->dest.buffer + job->dest.size));
}

}  // namespace pcrfs::tools
