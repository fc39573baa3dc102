// Why the codec did not transcode a file: what Transcode (codec/transcoder.h) answers and what
// the libjpeg glue (codec/jpeg_error.h) maps libjpeg's messages onto. Its own header so that the
// glue and the transcoder do not include each other for it.
#pragma once

#include <cstdint>

namespace pcrfs::codec {

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

}  // namespace pcrfs::codec
