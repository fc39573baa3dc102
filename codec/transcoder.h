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

namespace pcrfs::codec {

inline constexpr int kNumGroups = 10;

struct TranscodeOptions {
  // Drop APPn and COM markers (EXIF, ICC, XMP, comments). The pixels do not change, but colour
  // management may, once the ICC profile is gone.
  bool strip_metadata = false;
  // Sources with more scans than this are refused (the "scan bomb").
  int max_input_scans = 1000;
  // libjpeg's max_memory_to_use for each of the decompressor and the compressor.
  uint64_t max_memory_bytes = uint64_t{1} << 30;
};

// Why a file is stored byte for byte instead of transcoded. Values are stored in the index:
// append only, never renumber.
enum class PassthroughReason : uint8_t {
  kNone = 0,          // transcoded
  kNotJpeg = 1,       // does not start with a JPEG SOI marker
  kEmpty = 2,         // zero bytes
  kCorrupt = 3,       // libjpeg reported an error or a warning (corrupt data, bad marker, ...)
  kTruncated = 4,     // premature end of the JPEG data
  kTooManyScans = 5,  // more than max_input_scans scans
  kTooLarge = 6,      // needs more memory than max_memory_bytes (declared size too large)
  kUnsupported = 7,   // a JPEG libjpeg-turbo cannot transcode (12-bit, lossless, ...)
  kTrailingData = 8,  // bytes after EOI, which a transcoded file would lose
  kUnreadable = 9,    // the builder could not read the file (set by the builder, not the codec)
  kTooBig = 10,       // the file is larger than the builder's JPEG input cap (set by the builder)
  // A progressive JPEG without all of its scans (some coefficient bits never sent). libjpeg
  // smooths such images when decoding them, and would not smooth a transcoded copy that has
  // every scan, so the pixels would differ.
  kIncomplete = 11,
};
inline constexpr int kNumPassthroughReasons = 12;

// A stable, short, kebab-case name ("not-jpeg", "corrupt", ...), used in reports and JSON.
const char* PassthroughReasonName(PassthroughReason reason);

struct ProgressiveJpeg {
  // The pieces of groups 1..10, concatenated, without the final EOI.
  std::vector<uint8_t> bytes;
  std::array<uint64_t, kNumGroups> piece_lengths{};  // sums to bytes.size()

  std::span<const uint8_t> piece(int group) const;  // group in 1..10
  // Pieces 1..k followed by FF D9.
  std::vector<uint8_t> Level(int k) const;
};

struct TranscodeResult {
  PassthroughReason reason = PassthroughReason::kNone;
  std::string detail;     // libjpeg's message (or ours) when reason != kNone
  ProgressiveJpeg image;  // valid only when reason == kNone

  bool transcoded() const { return reason == PassthroughReason::kNone; }
};

// True if data starts like a JPEG (FF D8 FF). Only such files are worth transcoding.
bool LooksLikeJpeg(std::span<const uint8_t> data);

// Thread-safe; allocates only per call. Never throws except std::bad_alloc.
TranscodeResult Transcode(std::span<const uint8_t> jpeg, const TranscodeOptions& options);

}  // namespace pcrfs::codec
