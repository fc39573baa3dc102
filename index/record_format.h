// Record format v1: the on-disk layout is specified byte by byte in docs/format.md.
//
// A record holds the pieces of many files, group-major: the group-1 pieces of every file in slot
// order, then the group-2 pieces, and so on. Levels 1..k of the whole record are therefore the
// single byte range [data_offset, group_end(k)).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/levels.h"
#include "common/status.h"
#include "index/passthrough_reason.h"

namespace pcrfs::index {

using pcrfs::kNumGroups;  // common/levels.h
inline constexpr uint32_t kRecordFormatVersion = 1;

enum class EntryKind : uint8_t {
  kDirectory = 1,
  kJpeg = 2,         // a progressive JPEG in 10 pieces; its levels: index/level_plan.h
  kPassthrough = 3,  // the source bytes, whole, in piece 1; the same at every level
};

// One stored piece: where it is in its record file and its masked CRC32C.
struct PieceRef {
  uint64_t offset = 0;  // absolute offset in the record file
  uint64_t length = 0;
  uint32_t masked_crc = 0;  // crc32c::Mask(crc32c of the piece bytes); of zero bytes for empty

  bool operator==(const PieceRef&) const = default;
};

using PieceRefs = std::array<PieceRef, kNumGroups>;

// Pieces are checked in blocks of this size, so a read of a few KiB of a large file checks about
// one block instead of the whole piece. A piece of at most one block is checked by its own
// masked_crc; a longer piece has a masked CRC32C per block in the index (index format 3,
// docs/format.md "Block checksums"). The last block of a piece may be shorter.
inline constexpr uint64_t kChecksumBlockSize = uint64_t{1} << 20;

// Number of checksum blocks of a piece of `length` bytes (1 for an empty piece).
inline constexpr uint64_t NumChecksumBlocks(uint64_t length) {
  return length <= kChecksumBlockSize ? 1 : (length + kChecksumBlockSize - 1) / kChecksumBlockSize;
}
// Length of block b (0-based) of a piece of `length` bytes.
inline constexpr uint64_t ChecksumBlockLength(uint64_t length, uint64_t b) {
  const uint64_t begin = b * kChecksumBlockSize;
  return begin >= length ? 0 : std::min(kChecksumBlockSize, length - begin);
}
// True when a piece carries per-block CRCs in the index.
inline constexpr bool HasBlockCrcs(uint64_t length) { return length > kChecksumBlockSize; }

// The block CRCs of one piece longer than a checksum block: what the index stores for it.
struct PieceBlockCrcs {
  uint32_t slot = 0;
  int group = 0;                 // 1..10
  std::vector<uint32_t> masked;  // masked CRC32C of block 0, 1, ...

  bool operator==(const PieceBlockCrcs&) const = default;
};

using pcrfs::kEoi;  // common/levels.h: the end-of-image marker that ends every level of a JPEG

struct RecordImage {
  std::string path;  // path relative to the dataset root, '/'-separated, exactly as in the source
  EntryKind kind = EntryKind::kPassthrough;
  PassthroughReason passthrough_reason = PassthroughReason::kNone;  // kNone for kJpeg
  PieceRefs pieces;

  bool operator==(const RecordImage&) const = default;
};

// A record's header and tables, parsed and verified.
struct RecordLayout {
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  // Region of group g (1..10) is [group_offset[g-1], group_offset[g]).
  std::array<uint64_t, kNumGroups + 1> group_offset{};
  std::vector<RecordImage> images;

  // End of levels 1..k: [data_offset, GroupEnd(k)) holds every piece of groups 1..k.
  uint64_t GroupEnd(int k) const { return group_offset[static_cast<size_t>(k)]; }

  bool operator==(const RecordLayout&) const = default;
};

// Fixed sizes of the v1 record format (docs/format.md, "Record files").
inline constexpr char kRecordMagic[8] = {'P', 'C', 'R', 'F', 'S', 'R', 'E', 'C'};
inline constexpr char kRecordEndMagic[8] = {'P', 'C', 'R', 'F', 'S', 'E', 'N', 'D'};
inline constexpr uint64_t kRecordHeaderSize = 64;
inline constexpr uint64_t kRecordGroupTableSize = 16 * kNumGroups;       // 160
inline constexpr uint64_t kRecordImageEntrySize = 16 + 12 * kNumGroups;  // 136
inline constexpr uint64_t kRecordFooterSize = 16;
inline constexpr uint32_t kMaxRecordImages = 1u << 24;

// Each on-disk structure of a record with its encoder beside its decoder, as LevelDB keeps
// Footer::EncodeTo/DecodeFrom together. A decoder checks what the bytes alone can tell (magic,
// CRC, reserved bytes); its error is a Corruption with a short reason that the caller prefixes
// with the file's name. How the fields agree with each other and with the file is the reader's
// business (record_reader.cc).

// The header: magic, version, group count, counts and sizes, masked CRC of the first 60 bytes.
struct RecordHeader {
  static constexpr size_t kEncodedLength = kRecordHeaderSize;
  uint32_t version = kRecordFormatVersion;
  uint32_t num_images = 0;
  uint32_t names_size = 0;
  uint64_t data_offset = 0;
  uint64_t file_size = 0;
  uint64_t table_size = 0;  // group table + image table + names + table CRC

  void EncodeTo(uint8_t* dst) const;  // kEncodedLength bytes
  // Checks magic, CRC, the group count and the reserved bytes; any version is returned.
  static Result<RecordHeader> DecodeFrom(const uint8_t* src);
};

// The footer: end magic and the file size again.
struct RecordFooter {
  static constexpr size_t kEncodedLength = kRecordFooterSize;
  uint64_t file_size = 0;

  void EncodeTo(uint8_t* dst) const;
  static Result<RecordFooter> DecodeFrom(const uint8_t* src);
};

// One image's entry in the image table: kind, reason, its name in the names blob, and each
// piece's length and masked CRC (offsets follow from the lengths: pieces are packed in slot
// order inside their group's region).
struct RecordImageEntry {
  static constexpr size_t kEncodedLength = kRecordImageEntrySize;
  uint8_t kind = 0;
  PassthroughReason passthrough_reason = PassthroughReason::kNone;
  uint32_t name_offset = 0;
  uint32_t name_length = 0;
  std::array<uint64_t, kNumGroups> length{};
  std::array<uint32_t, kNumGroups> masked_crc{};

  void EncodeTo(std::string* dst) const;  // appends kEncodedLength bytes
  // Checks the reserved bytes; kind and sizes are checked by the reader.
  static Result<RecordImageEntry> DecodeFrom(const uint8_t* src);
};

// The group table: each region's (offset, length).
struct RecordGroupTable {
  static constexpr size_t kEncodedLength = kRecordGroupTableSize;
  std::array<uint64_t, kNumGroups> offset{};
  std::array<uint64_t, kNumGroups> length{};

  void EncodeTo(std::string* dst) const;
  static RecordGroupTable DecodeFrom(const uint8_t* src);
};

// Size of the tables section (group table, image table, names, table CRC) for n images and a
// names blob of names_size bytes.
inline constexpr uint64_t RecordTableSize(uint64_t n, uint64_t names_size) {
  return kRecordGroupTableSize + kRecordImageEntrySize * n + names_size + 4;
}
// data_offset: the end of the tables section rounded up to a multiple of 8.
inline constexpr uint64_t RecordDataOffset(uint64_t table_size) {
  return (kRecordHeaderSize + table_size + 7) & ~uint64_t{7};
}

}  // namespace pcrfs::index
