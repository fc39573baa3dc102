// Fuzz target: LevelPlan (index/level_plan.h), the one home of "which bytes make level k of a
// file", against a reference that knows nothing of it: the level-k file materialized the naive
// way (each used piece's bytes, with synthetic contents, then FF D9 for a JPEG) and sliced.
//
// Input, little-endian, missing bytes read as zero:
//   byte 0       kind: % 4 = 0 directory, 1 JPEG, 2 passthrough, 3 the byte itself as a kind
//   byte 1       level, signed (the plan clamps it to 1..10)
//   byte 2       flags: bit 0 piece lengths are raw u64 (sums may pass 2^64), else u16 % 4097;
//                bit 1 the range is raw u64 values, else offset and length are taken modulo
//                the file size + 3
//   10 lengths   u16 or u64 each (flag bit 0)
//   10 offsets   u64 each: record offsets (reduced so offset + length does not overflow, as
//                DecodeEntry guarantees)
//   offset, length of the range, u64 each
//
// Checked, beyond "no crash, no sanitizer report":
//   - file_size() equals the reference's size, LevelSize and Entry::SizeAtLevel; pieces_used()
//     is k, 1 or 0;
//   - the range is clipped to the file; spans are in ascending group order, each non-empty,
//     inside its piece (begin < end <= piece.length), a copy of the entry's piece, back to back
//     in the file from offset(), followed by the tail; spans and tail cover exactly length();
//   - a reader following the plan (copying span bytes from synthetic pieces, then the tail)
//     gets exactly the reference's slice, byte for byte;
//   - when the lengths add past 2^64 (a damaged entry), the same tiling holds under the cap.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "index/entry.h"
#include "index/level_plan.h"
#include "tests/fuzz/fuzz_check.h"

namespace pcrfs::fuzz {
namespace {

using index::EntryKind;
using index::kNumGroups;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
// Reference files are materialized only up to this size.
constexpr uint64_t kMaxMaterialized = uint64_t{1} << 20;

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t U16() { return U8() | uint64_t{U8()} << 8; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{U8()} << (8 * i);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Byte i of piece g: differs between pieces and along a piece, so a span that points at the
// wrong piece or the wrong place shows.
uint8_t PieceByte(int g, uint64_t i) {
  return static_cast<uint8_t>(g * 131 + i * 7 + (i >> 8) * 3 + (i >> 16));
}

// The reference: what level k is, from docs/format.md, not from the plan.
int ReferencePieces(EntryKind kind, int k) {
  if (kind == EntryKind::kJpeg) return std::clamp(k, 1, kNumGroups);
  if (kind == EntryKind::kPassthrough) return 1;
  return 0;
}

std::vector<uint8_t> Materialize(EntryKind kind, const index::PieceRefs& p, int k) {
  std::vector<uint8_t> out;
  for (int g = 1; g <= ReferencePieces(kind, k); ++g) {
    for (uint64_t i = 0; i < p[static_cast<size_t>(g - 1)].length; ++i) {
      out.push_back(PieceByte(g, i));
    }
  }
  if (kind == EntryKind::kJpeg) {
    out.push_back(0xFF);
    out.push_back(0xD9);
  }
  return out;
}

void Check(const uint8_t* data, size_t size) {
  Input in(data, size);
  const uint8_t kind_byte = in.U8();
  const EntryKind kinds[] = {EntryKind::kDirectory, EntryKind::kJpeg, EntryKind::kPassthrough,
                             static_cast<EntryKind>(kind_byte)};
  const EntryKind kind = kinds[kind_byte % 4];
  const int k = static_cast<int8_t>(in.U8());
  const uint8_t flags = in.U8();
  const bool raw_lengths = (flags & 1) != 0;
  const bool raw_range = (flags & 2) != 0;

  index::PieceRefs pieces;
  for (auto& p : pieces) p.length = raw_lengths ? in.U64() : in.U16() % 4097;
  for (size_t g = 0; g < pieces.size(); ++g) {
    pieces[g].offset = std::min(in.U64(), kMax - pieces[g].length);
    pieces[g].masked_crc = static_cast<uint32_t>(g * 0x01000193u);
  }
  const int used = ReferencePieces(kind, k);
  // The size without a cap, when it fits.
  bool fits = true;
  uint64_t reference_size = kind == EntryKind::kJpeg ? 2 : 0;
  for (int g = 0; g < used; ++g) {
    const uint64_t len = pieces[static_cast<size_t>(g)].length;
    if (len > kMax - reference_size) fits = false;
    reference_size += len;
  }
  const uint64_t modulus = fits && reference_size <= kMax - 3 ? reference_size + 3 : kMax;
  uint64_t offset = in.U64(), length = in.U64();
  if (!raw_range) {
    offset %= modulus;
    length %= modulus;
  }

  const index::LevelPlan plan(kind, pieces, k, offset, length);
  FUZZ_CHECK(plan.pieces_used() == used, "pieces_used %d, reference %d", plan.pieces_used(), used);
  FUZZ_CHECK(index::LevelSize(kind, pieces, k) == plan.file_size(), "LevelSize");
  if (kind != EntryKind::kDirectory) {
    index::Entry e;
    e.kind = kind;
    e.pieces = pieces;
    FUZZ_CHECK(e.SizeAtLevel(k) == plan.file_size(), "SizeAtLevel");
  }
  if (fits) {
    FUZZ_CHECK(plan.file_size() == reference_size, "size %llu, reference %llu",
               static_cast<unsigned long long>(plan.file_size()),
               static_cast<unsigned long long>(reference_size));
  } else {
    FUZZ_CHECK(plan.file_size() == kMax, "an overflowing size is capped");
  }
  // The range, clipped.
  const uint64_t from = std::min(offset, plan.file_size());
  const uint64_t to = from + std::min(length, plan.file_size() - from);
  FUZZ_CHECK(plan.offset() == from && plan.end() == to && plan.length() == to - from, "range");
  FUZZ_CHECK(plan.empty() == (from == to), "empty");

  // The spans and the tail tile [from, to) in order, each span inside its piece.
  FUZZ_CHECK(plan.spans().size() <= static_cast<size_t>(used), "%zu spans", plan.spans().size());
  uint64_t at = from;
  int last_group = 0;
  for (const index::LevelSpan& s : plan.spans()) {
    FUZZ_CHECK(s.group > last_group && s.group <= used, "group %d after %d", s.group, last_group);
    last_group = s.group;
    FUZZ_CHECK(s.piece == pieces[static_cast<size_t>(s.group - 1)], "piece of group %d", s.group);
    FUZZ_CHECK(s.begin < s.end && s.end <= s.piece.length, "span out of its piece");
    FUZZ_CHECK(s.file_offset == at, "span of group %d not back to back", s.group);
    FUZZ_CHECK(s.record_offset() == s.piece.offset + s.begin, "record offset");
    FUZZ_CHECK(s.first_block() == s.begin / index::kChecksumBlockSize, "first block");
    // The last block holds the last byte wanted (written so that nothing overflows).
    const uint64_t last_block_begin = (s.end_block() - 1) * index::kChecksumBlockSize;
    FUZZ_CHECK(s.end_block() > s.first_block() && last_block_begin <= s.end - 1 &&
                   s.end - 1 - last_block_begin < index::kChecksumBlockSize,
               "end block");
    at += s.length();
  }
  const std::span<const uint8_t> tail = plan.tail();
  FUZZ_CHECK(tail.size() <= 2, "tail of %zu bytes", tail.size());
  FUZZ_CHECK(kind == EntryKind::kJpeg || tail.empty(), "a tail without a JPEG");
  if (!tail.empty()) {
    FUZZ_CHECK(plan.tail_offset() == at, "tail not after the spans");
    FUZZ_CHECK(tail.data() >= index::kEoi && tail.data() + tail.size() <= index::kEoi + 2,
               "tail outside kEoi");
  }
  at += tail.size();
  FUZZ_CHECK(at == to, "spans and tail cover %llu bytes of %llu",
             static_cast<unsigned long long>(at - from),
             static_cast<unsigned long long>(to - from));

  // Byte for byte against the materialized file.
  if (!fits || reference_size > kMaxMaterialized) return;
  const std::vector<uint8_t> whole = Materialize(kind, pieces, k);
  FUZZ_CHECK(whole.size() == plan.file_size(), "materialized size");
  std::vector<uint8_t> got;
  for (const index::LevelSpan& s : plan.spans()) {
    for (uint64_t i = s.begin; i < s.end; ++i) got.push_back(PieceByte(s.group, i));
  }
  got.insert(got.end(), tail.begin(), tail.end());
  FUZZ_CHECK(got.size() == to - from, "read %zu bytes", got.size());
  FUZZ_CHECK(std::equal(got.begin(), got.end(), whole.begin() + static_cast<ptrdiff_t>(from)),
             "bytes differ from the materialized level %d file", k);
  // And the plan of the whole file is the whole materialized file.
  const index::LevelPlan all(kind, pieces, k);
  FUZZ_CHECK(all.offset() == 0 && all.length() == whole.size(), "whole plan");
}

}  // namespace
}  // namespace pcrfs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pcrfs::fuzz::Check(data, size);
  return 0;
}
