#include "codec/scan_splitter.h"

#include <array>
#include <string>

namespace pcrfs::codec {
namespace {

constexpr uint8_t kSoi = 0xD8;
constexpr uint8_t kEoi = 0xD9;
constexpr uint8_t kSos = 0xDA;
constexpr uint8_t kTem = 0x01;

bool IsRst(uint8_t marker) { return marker >= 0xD0 && marker <= 0xD7; }

Status Bad(const std::string& what, size_t offset) {
  return Status::Corruption("scan splitter: " + what + " at offset " + std::to_string(offset));
}

// Returns the offset one past the entropy-coded data starting at `pos`.
Result<size_t> EndOfEntropyData(std::span<const uint8_t> jpeg, size_t pos) {
  const size_t n = jpeg.size();
  while (pos < n) {
    if (jpeg[pos] != 0xFF) {
      pos++;
      continue;
    }
    if (pos + 1 >= n) return Err(Bad("entropy data runs to the end", pos));
    uint8_t next = jpeg[pos + 1];
    if (next == 0x00 || IsRst(next)) {
      pos += 2;
      continue;
    }
    return pos;
  }
  return Err(Bad("entropy data runs to the end", pos));
}

}  // namespace

Result<std::vector<ScanExtent>> FindScans(std::span<const uint8_t> jpeg) {
  const size_t n = jpeg.size();
  if (n < 4 || jpeg[0] != 0xFF || jpeg[1] != kSoi) return Err(Bad("no SOI", 0));
  std::vector<ScanExtent> scans;
  size_t pos = 2;
  while (true) {
    if (pos >= n || jpeg[pos] != 0xFF) return Err(Bad("expected a marker", pos));
    size_t marker_offset = pos;
    // Fill bytes (FF FF ...) may precede a marker.
    while (pos < n && jpeg[pos] == 0xFF) pos++;
    if (pos >= n) return Err(Bad("marker runs to the end", marker_offset));
    uint8_t marker = jpeg[pos++];
    if (marker == kEoi) {
      if (pos != n) return Err(Bad("bytes after EOI", pos));
      return scans;
    }
    if (marker == 0x00 || marker == kSoi || marker == kTem || IsRst(marker)) {
      return Err(Bad("unexpected marker", marker_offset));
    }
    if (pos + 2 > n) return Err(Bad("segment length runs to the end", pos));
    size_t length = (size_t{jpeg[pos]} << 8) | jpeg[pos + 1];
    if (length < 2 || length > n - pos) return Err(Bad("bad segment length", pos));
    pos += length;
    if (marker == kSos) {
      auto end = EndOfEntropyData(jpeg, pos);
      if (!end) return Err(end.error());
      scans.push_back(ScanExtent{marker_offset, pos, *end});
      pos = *end;
    }
  }
}

Result<ProgressiveJpeg> SplitIntoGroups(std::span<const uint8_t> jpeg,
                                        std::span<const uint8_t> scan_groups) {
  auto scans = FindScans(jpeg);
  if (!scans) return Err(scans.error());
  if (scans->size() != scan_groups.size()) {
    return Err(Status::Corruption("scan splitter: the JPEG has " + std::to_string(scans->size()) +
                                  " scans, the script " + std::to_string(scan_groups.size())));
  }
  // ends[g - 1] = offset one past piece g.
  std::array<size_t, kNumGroups> ends{};
  size_t end = 0;
  int previous_group = 1;
  for (size_t i = 0; i < scans->size(); i++) {
    int group = scan_groups[i];
    if (group < previous_group || group > kNumGroups) {
      return Err(
          Status::InvalidArgument("scan splitter: scan groups must be non-decreasing 1..10"));
    }
    for (int g = previous_group; g < group; g++) ends[g - 1] = end;
    end = (*scans)[i].data_end;
    previous_group = group;
  }
  if (scans->empty()) return Err(Bad("no scans", 0));
  for (int g = previous_group; g <= kNumGroups; g++) ends[g - 1] = end;
  // Everything after the last scan must be the EOI that FindScans checked.
  if (end + 2 != jpeg.size()) return Err(Bad("data between the last scan and EOI", end));

  ProgressiveJpeg out;
  out.bytes.assign(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(end));
  size_t begin = 0;
  for (int g = 0; g < kNumGroups; g++) {
    out.piece_lengths[g] = ends[g] - begin;
    begin = ends[g];
  }
  return out;
}

}  // namespace pcrfs::codec
