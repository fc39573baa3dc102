// The centred window of a JPEG, cut with exactly its DCT coefficients (never decoded to pixels):
// what the quality sample measures of a large image (builder/quality_window.h). Written from a
// decompressor that holds the image's coefficients, so that the two ways of cutting it write the
// same bytes: while the build transcodes the image (codec::Transcode with
// TranscodeOptions::window_side) and from the stored level 10 (tools::CutCentredWindow).
#pragma once

#include <cstddef>

#include "codec/jpeg_dest.h"
#include "codec/libjpeg.h"

namespace pcrfs::codec {

// The smallest max_side a window is cut to: 4 of the largest MCU (4x4 sampling).
inline constexpr int kMinWindowSide = 4 * 4 * DCTSIZE;

// One side of the window: its first pixel and its length, the first on a multiple of `unit`
// (an MCU's side), the length too unless the side (size <= max_side) is kept whole.
void CentredWindowSide(JDIMENSION size, int max_side, int unit, JDIMENSION* first,
                       JDIMENSION* length);

// Writes into `dest` the centred window, at most max_side x max_side pixels (max_side >=
// kMinWindowSide), of the image whose coefficients `in` holds (`coefficients`, from
// jpeg_read_coefficients), as a sequential JPEG with standard Huffman tables: the image's
// quantization tables, sampling, colour space and JFIF density, no other marker.
// source_height: the image's height (in's may be less: a frame header shortened to the
// window's bottom edge). Returns false, writing nothing, when both sides fit.
// out: zeroed, with out->err set; created here and the caller's to destroy (also after an
// error). The window's coefficient arrays belong to `out` (at most max_memory bytes).
// REQUIRES: called under the setjmp of the error manager of `in` and `out` (jpeg_error.h).
bool WriteCentredWindow(j_decompress_ptr in, jvirt_barray_ptr* coefficients,
                        JDIMENSION source_height, int max_side, long max_memory, j_compress_ptr out,
                        MallocDestination* dest, size_t initial_capacity);

}  // namespace pcrfs::codec
