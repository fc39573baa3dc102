#include "codec/centred_window.h"

#include <algorithm>
#include <cstring>

namespace pcrfs::codec {

void CentredWindowSide(JDIMENSION size, int max_side, int unit, JDIMENSION* first,
                       JDIMENSION* length) {
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

bool WriteCentredWindow(j_decompress_ptr in, jvirt_barray_ptr* coefficients,
                        JDIMENSION source_height, int max_side, long max_memory, j_compress_ptr out,
                        MallocDestination* dest, size_t initial_capacity) {
  const auto max = static_cast<JDIMENSION>(max_side);
  if (in->image_width <= max && source_height <= max) return false;
  const int mcu_w = in->max_h_samp_factor * DCTSIZE;
  const int mcu_h = in->max_v_samp_factor * DCTSIZE;
  JDIMENSION x0, w, y0, h;
  CentredWindowSide(in->image_width, max_side, mcu_w, &x0, &w);
  CentredWindowSide(source_height, max_side, mcu_h, &y0, &h);

  jpeg_create_compress(out);
  out->mem->max_memory_to_use = max_memory;
  jvirt_barray_ptr window[MAX_COMPONENTS];
  JDIMENSION first_col[MAX_COMPONENTS], first_row[MAX_COMPONENTS];
  JDIMENSION num_cols[MAX_COMPONENTS], num_rows[MAX_COMPONENTS];
  for (int ci = 0; ci < in->num_components; ++ci) {
    const jpeg_component_info& c = in->comp_info[ci];
    const auto hs = static_cast<JDIMENSION>(c.h_samp_factor);
    const auto vs = static_cast<JDIMENSION>(c.v_samp_factor);
    // A side kept whole keeps all of the component's blocks; a cut one has whole MCUs.
    num_cols[ci] =
        w == in->image_width ? c.width_in_blocks : w / static_cast<JDIMENSION>(mcu_w) * hs;
    num_rows[ci] =
        h == source_height ? c.height_in_blocks : h / static_cast<JDIMENSION>(mcu_h) * vs;
    first_col[ci] = x0 / static_cast<JDIMENSION>(mcu_w) * hs;
    first_row[ci] = y0 / static_cast<JDIMENSION>(mcu_h) * vs;
    // Rounded up to whole MCUs, as the compressor reads them (jpegtran's workspace too).
    window[ci] = out->mem->request_virt_barray(reinterpret_cast<j_common_ptr>(out), JPOOL_IMAGE,
                                               TRUE, (num_cols[ci] + hs - 1) / hs * hs,
                                               (num_rows[ci] + vs - 1) / vs * vs, vs);
  }
  // jpeg_write_coefficients would realize them too; they are filled first. (The compressor
  // realizes only arrays not yet realized.)
  out->mem->realize_virt_arrays(reinterpret_cast<j_common_ptr>(out));
  for (int ci = 0; ci < in->num_components; ++ci) {
    for (JDIMENSION r = 0; r < num_rows[ci]; ++r) {
      JBLOCKARRAY from = in->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(in),
                                                     coefficients[ci], first_row[ci] + r, 1, FALSE);
      JBLOCKARRAY to =
          out->mem->access_virt_barray(reinterpret_cast<j_common_ptr>(out), window[ci], r, 1, TRUE);
      std::memcpy(to[0], from[0] + first_col[ci], num_cols[ci] * sizeof(JBLOCK));
    }
  }
  InstallMallocDestination(out, dest, initial_capacity);
  jpeg_copy_critical_parameters(in, out);
  out->image_width = w;
  out->image_height = h;
  jpeg_write_coefficients(out, window);
  jpeg_finish_compress(out);
  return true;
}

}  // namespace pcrfs::codec
