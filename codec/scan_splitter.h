// Cuts the transcoder's own output JPEG into one piece per scan group.
//
// The JPEG is parsed marker by marker. The entropy-coded data of a scan ends at the first 0xFF
// that is neither stuffing (FF 00) nor a restart marker (FF D0-D7). Piece 1 runs from SOI to
// the end of the data of the last group-1 scan; piece g runs from there (the DHT/DRI/SOS
// segments that start the next scan) to the end of the data of the last scan of group g; empty
// groups have zero-length pieces. The final EOI must be there and is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec/progressive_jpeg.h"
#include "common/status.h"

namespace pcrfs::codec {

struct ScanExtent {
  size_t sos_offset;  // offset of the FF DA of the scan's SOS marker
  size_t data_begin;  // first byte of entropy-coded data
  size_t data_end;    // one past the last byte of entropy-coded data
};

// Lists every scan of a complete JPEG (SOI ... EOI, EOI as its last two bytes). Corruption if
// the structure is not that.
Result<std::vector<ScanExtent>> FindScans(std::span<const uint8_t> jpeg);

// Splits `jpeg` into ProgressiveJpeg pieces; scan_groups[i] is the group (1..10, non-decreasing)
// of the i-th scan and must have one entry per scan of the file.
Result<ProgressiveJpeg> SplitIntoGroups(std::span<const uint8_t> jpeg,
                                        std::span<const uint8_t> scan_groups);

}  // namespace pcrfs::codec
