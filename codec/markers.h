// Copying the saved APPn and COM markers of a decompressor to a compressor (jpegtran -copy all).
#pragma once

#include "codec/libjpeg.h"

namespace pcrfs::codec {

// Saves every APPn and COM marker of src_info (call before jpeg_read_header).
void SaveAllMarkers(j_decompress_ptr src_info);

// Writes src_info's saved markers to dst_info, in order, after jpeg_write_coefficients. Like
// jcopy_markers_execute in transupp.c: libjpeg writes its own JFIF APP0 and Adobe APP14 when
// the colour space calls for them, so the source's copies would be duplicates and are skipped.
void CopySavedMarkers(j_decompress_ptr src_info, j_compress_ptr dst_info);

}  // namespace pcrfs::codec
