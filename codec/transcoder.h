// Lossless transcoding of any JPEG that libjpeg-turbo reads into a progressive JPEG with our own
// 10-group scan script (docs/format.md, "Scan groups"), split into one piece per group
// (codec/progressive_jpeg.h: what a piece holds, and level k).
//
// The codec never exits or aborts the process: every libjpeg error or warning while reading the
// source turns into a passthrough verdict with a reason, and the caller stores the source bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "codec/passthrough_reason.h"
#include "codec/progressive_jpeg.h"

namespace pcrfs::codec {

struct TranscodeOptions {
  // Drop APPn and COM markers (EXIF, ICC, XMP, comments). The pixels do not change, but colour
  // management may, once the ICC profile is gone.
  bool strip_metadata = false;
  // Sources with more scans than this are refused (the "scan bomb").
  int max_input_scans = 1000;
  // libjpeg's max_memory_to_use for each of the decompressor and the compressor.
  uint64_t max_memory_bytes = uint64_t{1} << 30;
  // When > 0 (at least kMinWindowSide, codec/centred_window.h) and a side of the image is longer:
  // also cut its centred window of at most window_side x window_side pixels from the
  // coefficients in memory (TranscodeResult::window), the bytes tools::CutCentredWindow cuts
  // from level 10, for the quality sample. A window that cannot be cut is left empty; the
  // transcode is the same either way.
  int window_side = 0;
};

struct TranscodeResult {
  PassthroughReason reason = PassthroughReason::kNone;
  std::string detail;     // libjpeg's message (or ours) when reason != kNone
  ProgressiveJpeg image;  // valid only when reason == kNone
  // The centred window (TranscodeOptions::window_side) when transcoded and cut; else empty.
  std::vector<uint8_t> window;

  bool transcoded() const { return reason == PassthroughReason::kNone; }
};

// True if data starts like a JPEG (FF D8 FF). Only such files are worth transcoding.
bool LooksLikeJpeg(std::span<const uint8_t> data);

// Thread-safe; allocates only per call. Never throws except std::bad_alloc.
TranscodeResult Transcode(std::span<const uint8_t> jpeg, const TranscodeOptions& options);

}  // namespace pcrfs::codec
