// Why a file is stored byte for byte instead of as a progressive JPEG: the value the index and
// the records store (docs/format.md). Owned by the format, so values are append only and never
// renumbered; a reader treats a value it does not know as opaque ("unknown-N"). The codec has
// its own outcome type (codec::PassthroughReason), which the builder maps onto this one.
#pragma once

#include <cstdint>
#include <string>

namespace pcrfs::index {

enum class PassthroughReason : uint8_t {
  kNone = 0,          // transcoded (every JPEG entry)
  kNotJpeg = 1,       // does not start with a JPEG SOI marker
  kEmpty = 2,         // zero bytes
  kCorrupt = 3,       // libjpeg reported an error or a warning (corrupt data, bad marker, ...)
  kTruncated = 4,     // premature end of the JPEG data
  kTooManyScans = 5,  // more scans than the builder's cap
  kTooLarge = 6,      // needs more memory than the builder's cap (declared size too large)
  kUnsupported = 7,   // a JPEG libjpeg-turbo cannot transcode (12-bit, lossless, ...)
  kTrailingData = 8,  // bytes after EOI, which a transcoded file would lose
  kUnreadable = 9,    // the builder could not read the file (it is not stored)
  kTooBig = 10,       // larger than the builder's JPEG input cap (--max-jpeg-bytes)
  kIncomplete = 11,   // a progressive JPEG without all of its scans
};
inline constexpr int kNumPassthroughReasons = 12;

// A stable, short, kebab-case name ("not-jpeg", "corrupt", ...), used in reports, JSON and the
// user.pcrfs.passthrough_reason xattr; "unknown-N" for a value this pcrfs does not know.
std::string PassthroughReasonName(PassthroughReason reason);

}  // namespace pcrfs::index
