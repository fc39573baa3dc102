// A transcoded JPEG cut into one piece per scan group (docs/format.md, "Scan groups"): what
// Transcode (codec/transcoder.h) returns and the scan splitter (codec/scan_splitter.h) makes.
//
// Level k of an image is piece 1 + pieces 2..k + EOI (FF D9). Piece 1 holds SOI, every header,
// table and kept marker, and the group-1 scans. Each later piece starts at the first marker
// segment (DHT, DRI or SOS) of its first scan, so a scan's tables travel with it. Empty groups
// (for example the chroma groups of a greyscale image) have zero-length pieces.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/levels.h"

namespace pcrfs::codec {

using pcrfs::kNumGroups;  // common/levels.h

struct ProgressiveJpeg {
  // The pieces of groups 1..10, concatenated, without the final EOI.
  std::vector<uint8_t> bytes;
  std::array<uint64_t, kNumGroups> piece_lengths{};  // sums to bytes.size()

  std::span<const uint8_t> piece(int group) const;  // group in 1..10
  // Level k: pieces 1..JpegLevelPieces(k) followed by kEoi (FF D9), the rule of common/levels.h
  // that index::LevelPlan follows for the stored file.
  std::vector<uint8_t> Level(int k) const;
};

}  // namespace pcrfs::codec
