#include "codec/markers.h"

#include <cstring>

namespace pcrfs::codec {
namespace {

bool IsMarkerWithId(const jpeg_saved_marker_ptr marker, int code, const char* id, size_t n) {
  return marker->marker == code && marker->data_length >= n &&
         std::memcmp(marker->data, id, n) == 0;
}

}  // namespace

void SaveAllMarkers(j_decompress_ptr src_info) {
  jpeg_save_markers(src_info, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; m++) jpeg_save_markers(src_info, JPEG_APP0 + m, 0xFFFF);
}

void CopySavedMarkers(j_decompress_ptr src_info, j_compress_ptr dst_info) {
  for (jpeg_saved_marker_ptr m = src_info->marker_list; m != nullptr; m = m->next) {
    if (dst_info->write_JFIF_header && IsMarkerWithId(m, JPEG_APP0, "JFIF", 5)) continue;
    if (dst_info->write_Adobe_marker && IsMarkerWithId(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
    jpeg_write_marker(dst_info, m->marker, m->data, m->data_length);
  }
}

}  // namespace pcrfs::codec
