// Lossless transcoding of any JPEG that libjpeg-turbo reads into a progressive JPEG with our own
// 10-group scan script (docs/format.md, "Scan groups"), split into one piece per group.
//
// Level k of an image is piece 1 + pieces 2..k + EOI (FF D9). Piece 1 holds SOI, every header,
// table and kept marker, and the group-1 scans. Each later piece starts at the first marker
// segment (DHT, DRI or SOS) of its first scan, so a scan's tables travel with it. Empty groups
// (for example the chroma groups of a greyscale image) have zero-length pieces.
//
// The codec never exits or aborts the process: every libjpeg error or warning while reading the
// source turns into a passthrough verdict with a reason, and the caller stores the source bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/levels.h"

namespace pcrfs::codec {

using pcrfs::kNumGroups;  // common/levels.h

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

// Why the codec did not transcode a file. The builder maps each onto the reason the store
// records (index::PassthroughReason), which also has reasons of its own (unreadable, too big).
enum class PassthroughReason : uint8_t {
  kNone,          // transcoded
  kNotJpeg,       // does not start with a JPEG SOI marker
  kEmpty,         // zero bytes
  kCorrupt,       // libjpeg reported an error or a warning (corrupt data, bad marker, ...)
  kTruncated,     // premature end of the JPEG data
  kTooManyScans,  // more than max_input_scans scans
  kTooLarge,      // needs more memory than max_memory_bytes (declared size too large)
  kUnsupported,   // a JPEG libjpeg-turbo cannot transcode (12-bit, lossless, ...)
  kTrailingData,  // bytes after EOI, which a transcoded file would lose
  // A progressive JPEG without all of its scans (some coefficient bits never sent). libjpeg
  // smooths such images when decoding them, and would not smooth a transcoded copy that has
  // every scan, so the pixels would differ.
  kIncomplete,
};

struct ProgressiveJpeg {
  // The pieces of groups 1..10, concatenated, without the final EOI.
  std::vector<uint8_t> bytes;
  std::array<uint64_t, kNumGroups> piece_lengths{};  // sums to bytes.size()

  std::span<const uint8_t> piece(int group) const;  // group in 1..10
  // Level k: pieces 1..JpegLevelPieces(k) followed by kEoi (FF D9), the rule of common/levels.h
  // that index::LevelPlan follows for the stored file.
  std::vector<uint8_t> Level(int k) const;
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
