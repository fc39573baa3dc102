// The baseline form of a level (-o form=baseline, docs/semantics.md): the coefficients of a
// progressive JPEG re-entropy-coded as a sequential (baseline, Huffman-optimized) JPEG, as
// `jpegtran -optimize -copy all` does, so that decoders get libjpeg-turbo's fast sequential path
// (SIMD Huffman decoding, no whole-image coefficient buffer) and NVIDIA's hardware decoders can
// take the file.
//
// Like the rest of codec/, nothing here exits or aborts the process: every libjpeg error or
// warning (damaged input) becomes an error Status.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace pcrfs::codec {

// Re-encodes `progressive` (any JPEG libjpeg-turbo reads; here a level of a stored image,
// ending in EOI) as a sequential JPEG holding exactly its DCT coefficients: the critical
// parameters (size, components, sampling, quantization tables) are copied, Huffman tables are
// optimized, no restart markers, and the APPn and COM markers are copied in order (libjpeg
// writes the JFIF APP0 or Adobe APP14 of the colour space itself, and the input's copy is then
// skipped, as jpegtran does). Coefficient bits that a level does not hold (low levels of a
// progressive image) are zero in the output. The frame is SOF0, or SOF1 when a quantization
// table has 16-bit entries.
//
// The Huffman statistics are gathered by our own walk of the blocks (a third of libjpeg's
// optimize_coding pass's time); libjpeg_statistics: by libjpeg's pass instead, the reference
// the tests compare with (the same bytes).
//
// Errors: Corruption (with libjpeg's message) for damaged, truncated or non-JPEG input,
// ResourceExhausted past 1 GiB of libjpeg memory or 1000 scans. Thread-safe.
Result<std::vector<uint8_t>> ToBaseline(std::span<const uint8_t> progressive,
                                        bool libjpeg_statistics = false);

// Every DCT coefficient of a JPEG, as libjpeg's jpeg_read_coefficients delivers them: for a
// check that two files (a progressive level and its baseline form) hold the same image.
struct JpegCoefficients {
  struct Component {
    int component_id = 0;
    int h_samp = 0, v_samp = 0;
    uint32_t width_in_blocks = 0, height_in_blocks = 0;
    // The component's quantization table, natural order (libjpeg's): the one its first scan
    // used, or for a component that no scan carries (its coefficients are all zero) the table
    // its slot holds at the end of the file, as a writer of the coefficients takes it
    // (jpeg_copy_critical_parameters); empty if that slot is undefined.
    std::vector<uint16_t> quant;
    std::vector<int16_t> coef;  // 64 per block, blocks in row order
    bool operator==(const Component&) const = default;
  };
  uint32_t width = 0, height = 0;
  int color_space = 0;  // libjpeg's J_COLOR_SPACE of the file
  std::vector<Component> components;
  bool operator==(const JpegCoefficients&) const = default;
};

// Reads the coefficients of `jpeg`; a libjpeg warning is an error (Corruption).
Result<JpegCoefficients> ReadCoefficients(std::span<const uint8_t> jpeg);

}  // namespace pcrfs::codec
