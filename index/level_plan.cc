#include "index/level_plan.h"

#include <algorithm>
#include <memory>

namespace pcrfs::index {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// a + b, or 2^64 - 1 when that does not fit (see the caveat in level_plan.h).
uint64_t AddCapped(uint64_t a, uint64_t b) { return b > kMax - a ? kMax : a + b; }

// What level k of a file is made of (docs/format.md, "Levels"): its first `pieces` pieces, then
// FF D9 when `eoi`.
struct LevelShape {
  int pieces = 0;
  bool eoi = false;
};

LevelShape ShapeOf(EntryKind kind, int k) {
  switch (kind) {
    case EntryKind::kJpeg:
      return {JpegLevelPieces(k), true};
    case EntryKind::kPassthrough:
      return {1, false};
    case EntryKind::kDirectory:
      break;
  }
  return {};  // a directory, or a kind this code does not know: no bytes
}

// Where the pieces of a level end: the sum of their lengths, capped.
uint64_t PiecesEnd(const PieceRefs& pieces, LevelShape shape) {
  uint64_t end = 0;
  for (int g = 0; g < shape.pieces; ++g) {
    end = AddCapped(end, pieces[static_cast<size_t>(g)].length);
  }
  return end;
}

uint64_t SizeOf(uint64_t pieces_end, LevelShape shape) {
  return AddCapped(pieces_end, shape.eoi ? sizeof(kEoi) : 0);
}

}  // namespace

LevelPlan::LevelPlan(EntryKind kind, const PieceRefs& pieces, int k, uint64_t offset,
                     uint64_t length) {
  const LevelShape shape = ShapeOf(kind, k);
  const uint64_t pieces_end = PiecesEnd(pieces, shape);
  pieces_used_ = shape.pieces;
  file_size_ = SizeOf(pieces_end, shape);
  offset_ = std::min(offset, file_size_);
  end_ = offset_ + std::min(length, file_size_ - offset_);
  tail_offset_ = pieces_end;
  if (offset_ == end_) return;

  uint64_t pos = 0;  // where piece g starts in the file
  for (int g = 0; g < shape.pieces && pos < end_; ++g) {
    const PieceRef& p = pieces[static_cast<size_t>(g)];
    const uint64_t piece_end = AddCapped(pos, p.length);
    if (p.length > 0 && piece_end > offset_) {
      const uint64_t begin = std::max(offset_, pos) - pos;
      std::construct_at(&spans_.at[num_spans_++], LevelSpan{.group = g + 1,
                                                            .piece = p,
                                                            .begin = begin,
                                                            .end = std::min(end_, piece_end) - pos,
                                                            .file_offset = pos + begin});
    }
    pos = piece_end;
  }
  if (!shape.eoi) return;
  // Tail byte i is at pieces_end + i, if that is inside the (capped) file and the range.
  bool any = false;
  for (size_t i = 0; i < sizeof(kEoi); ++i) {
    if (pieces_end > kMax - i) break;
    const uint64_t at = pieces_end + i;
    if (at < offset_ || at >= end_) continue;
    if (!any) tail_begin_ = i;
    tail_end_ = i + 1;
    any = true;
  }
  tail_offset_ = pieces_end + tail_begin_;
}

uint64_t LevelSize(EntryKind kind, const PieceRefs& pieces, int k) {
  const LevelShape shape = ShapeOf(kind, k);
  return SizeOf(PiecesEnd(pieces, shape), shape);
}

}  // namespace pcrfs::index
