// LevelPlan: which bytes make level k of a file, and where they are. The one place that knows
// it (docs/format.md, "Levels"), as LevelDB's BlockHandle is the one place that knows a block's
// extent. Every reader of a level asks it: the FUSE read path (fs/filesystem.cc), the predictor
// and the page pusher (fs/read_predictor.cc), Store::ReadFileTo (pcr cat, pcr extract) and
// ReadLevel (record_reader.cc).
//
// The level-k file of an entry is
//   - a JPEG: piece 1, piece 2, ..., piece k, then the two bytes FF D9 (EOI, the "tail");
//   - a passthrough file: piece 1, at every level, with no tail;
//   - a directory (or a kind this code does not know): no bytes.
// Piece g lives in group region g of the entry's record file (index/record_format.h), so the
// bytes of one level are up to ten ranges of one record plus the tail, which is stored nowhere.
//
// A plan answers, for a byte range [offset, offset + length) of the level-k file:
//   - the spans to read: for each piece the range overlaps, its group, the piece (its record
//     offset, its length, its CRC), the part of it wanted and where that part lands in the file;
//   - the part of the tail that falls in the range;
//   - the file's size at level k and the number of pieces the level uses.
//
// Example: a JPEG with pieces of 100, 0 and 50 bytes, level 3, bytes [90, 160):
//   file_size 152; pieces_used 3; spans: {group 1, piece [90, 100), file 90},
//   {group 3, piece [0, 50), file 100} (the empty piece 2 has no span); tail FF D9 at file 150.
//
// Cost: a plan is a value of about 600 bytes (room for ten spans, only the used ones written);
// making one walks the pieces once and allocates nothing, so the read path makes one per
// request (as fast as the two loops it replaced).
//
// Caveats:
//   - Empty pieces have no span. A reader that checks every piece of a level (an empty piece
//     has a CRC too) walks groups 1..pieces_used() itself.
//   - Spans describe bytes, not checksum blocks: a reader that checks blocks
//     (kChecksumBlockSize) reads blocks first_block()..end_block() of each span and copies
//     [begin, end) out of them, which index/level_walk.h (WalkLevel) does for every such reader.
//   - The plan copies what it needs of the pieces; it does not refer to the entry afterwards.
//   - Piece lengths come from a decoded index entry or record table. If the lengths of a
//     level add up to more than 2^64 - 1 bytes (only a damaged entry can), the file's size is
//     capped there: every byte of the range is still in exactly one span or the tail, and no
//     span leaves its piece. Reading such a piece then fails its bounds check.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "index/record_format.h"

namespace pcrfs::index {

// A contiguous part of the level-k file that lies in one piece.
struct LevelSpan {
  int group = 0;       // 1..10: the piece's group, hence the group region of the record it is in
  PieceRef piece;      // the whole piece (CRCs and checksum blocks count from its first byte)
  uint64_t begin = 0;  // the part wanted, [begin, end) of the piece:
  uint64_t end = 0;    //   begin < end <= piece.length
  uint64_t file_offset = 0;  // where byte `begin` of the piece lands in the level-k file

  uint64_t length() const { return end - begin; }
  // Where the part wanted starts in the record file.
  uint64_t record_offset() const { return piece.offset + begin; }
  // The checksum blocks of the piece that hold the part wanted: [first_block(), end_block()).
  uint64_t first_block() const { return begin / kChecksumBlockSize; }
  uint64_t end_block() const { return (end - 1) / kChecksumBlockSize + 1; }
};

class LevelPlan {
 public:
  static constexpr uint64_t kToEnd = std::numeric_limits<uint64_t>::max();

  // Plans bytes [offset, offset + length) of level k of a file of `kind` made of `pieces`.
  //   kind    kJpeg, kPassthrough; kDirectory or an unknown value plans an empty file.
  //   pieces  the entry's ten pieces (Entry::pieces, RecordImage::pieces); only the first
  //           pieces_used() are looked at.
  //   k       the level; clamped to 1..10 (as the size of a level always was).
  //   offset, length
  //           the range wanted; clipped to the file (offset + length may exceed the file, or
  //           2^64: kToEnd asks for everything from offset). An offset at or past the end of
  //           the file gives an empty plan (no span, no tail) whose file_size() is still right.
  // Never fails and never allocates.
  LevelPlan(EntryKind kind, const PieceRefs& pieces, int k, uint64_t offset = 0,
            uint64_t length = kToEnd);

  // Size in bytes of the level-k file (sum of the used pieces, plus 2 for a JPEG).
  uint64_t file_size() const { return file_size_; }
  // The level is pieces 1..pieces_used() of the entry: k for a JPEG, 1 for a passthrough
  // file, 0 for a directory.
  int pieces_used() const { return pieces_used_; }

  // The range planned, clipped to the file: [offset(), end()), length() bytes, each in exactly
  // one span or in the tail. offset() is min(offset, file_size()).
  uint64_t offset() const { return offset_; }
  uint64_t end() const { return end_; }
  uint64_t length() const { return end_ - offset_; }
  bool empty() const { return end_ == offset_; }

  // The pieces' parts in file order: ascending group, ascending and back-to-back file
  // offsets, each non-empty. Valid as long as the plan.
  std::span<const LevelSpan> spans() const { return {spans_.at, num_spans_}; }

  // The bytes of the tail (a JPEG's FF D9) that fall in the range, in file order: 0, 1 or 2
  // bytes, pointing into kEoi (static storage, valid forever). tail()[0] lands at
  // tail_offset() in the file, after every span.
  std::span<const uint8_t> tail() const { return {kEoi + tail_begin_, tail_end_ - tail_begin_}; }
  uint64_t tail_offset() const { return tail_offset_; }

 private:
  // Only the first num_spans_ are ever constructed: zeroing all ten cost as much as planning
  // (a plan is made per FUSE read).
  union Spans {
    Spans() {}
    LevelSpan at[kNumGroups];
  } spans_;
  size_t num_spans_ = 0;
  int pieces_used_ = 0;
  uint64_t file_size_ = 0;
  uint64_t offset_ = 0, end_ = 0;
  uint64_t tail_offset_ = 0;
  size_t tail_begin_ = 0, tail_end_ = 0;  // into kEoi
};

// Size in bytes of a file of `kind` at level k: LevelPlan(kind, pieces, k).file_size(), by the
// same code, without making a plan (Entry::SizeAtLevel, getattr).
uint64_t LevelSize(EntryKind kind, const PieceRefs& pieces, int k);

}  // namespace pcrfs::index
