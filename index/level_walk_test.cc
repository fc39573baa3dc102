#include "index/level_walk.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace pcrfs::index {
namespace {

constexpr uint64_t kMib = kChecksumBlockSize;

PieceRefs Pieces(std::vector<uint64_t> lengths) {
  PieceRefs p;
  uint64_t offset = 4096;
  for (size_t g = 0; g < lengths.size(); ++g) {
    p[g] = {offset, lengths[g], 0x2000u + static_cast<uint32_t>(g)};
    offset += lengths[g] + 777;
  }
  return p;
}

// Byte i of piece g: distinct across pieces and positions (and blocks).
uint8_t PieceByte(int g, uint64_t i) {
  return static_cast<uint8_t>(g * 37 + i * 11 + (i >> 8) + (i >> 20) * 5);
}

// The level-k file the naive way: the pieces level k uses, back to back, then the tail.
std::vector<uint8_t> Materialize(EntryKind kind, const PieceRefs& p, int k) {
  std::vector<uint8_t> out;
  const int used = kind == EntryKind::kJpeg ? k : 1;
  for (int g = 1; g <= used; ++g) {
    for (uint64_t i = 0; i < p[static_cast<size_t>(g - 1)].length; ++i) {
      out.push_back(PieceByte(g, i));
    }
  }
  if (kind == EntryKind::kJpeg) out.insert(out.end(), {0xFF, 0xD9});
  return out;
}

// A walk over fake checksum blocks: every block read is recorded, and every part the sink gets
// is written at its file offset into a buffer of the plan's length (poisoned first), checking
// that the parts arrive in order, back to back.
struct Walked {
  Status status;
  std::vector<uint8_t> bytes;
  std::vector<std::pair<int, uint64_t>> blocks;  // (group, block) in the order read
};

// Block b of piece g as a record would hold it (made once per test binary: they are large).
const std::vector<uint8_t>& BlockOf(int g, uint64_t piece_length, uint64_t b) {
  static std::map<std::tuple<int, uint64_t, uint64_t>, std::vector<uint8_t>> blocks;
  std::vector<uint8_t>& block = blocks[{g, piece_length, b}];
  if (block.empty()) {
    for (uint64_t i = b * kMib; i < std::min(piece_length, (b + 1) * kMib); ++i) {
      block.push_back(PieceByte(g, i));
    }
  }
  return block;
}

Walked Walk(const LevelPlan& plan, const PieceRefs& p) {
  Walked w;
  w.bytes.assign(static_cast<size_t>(plan.length()), 0xEE);
  uint64_t next = plan.offset();
  w.status = WalkLevel(
      plan,
      [&](const LevelSpan& s, uint64_t b) -> Result<std::span<const uint8_t>> {
        EXPECT_EQ(s.piece, p[static_cast<size_t>(s.group - 1)]);
        w.blocks.emplace_back(s.group, b);
        return std::span<const uint8_t>(BlockOf(s.group, s.piece.length, b));
      },
      [&](uint64_t at, std::span<const uint8_t> part) {
        EXPECT_EQ(at, next);
        EXPECT_FALSE(part.empty());
        EXPECT_LE(at + part.size(), plan.end());
        if (at < plan.offset() || at + part.size() > plan.end()) return Status::OK();
        std::copy(part.begin(), part.end(),
                  w.bytes.begin() + static_cast<long>(at - plan.offset()));
        next = at + part.size();
        return Status::OK();
      });
  if (w.status.ok()) {
    EXPECT_EQ(next, plan.end());
  }
  return w;
}

// The blocks a range needs, from the naive layout: piece g's bytes in the range are
// [a, z) of the piece, held by blocks a / kMib .. (z - 1) / kMib.
std::vector<std::pair<int, uint64_t>> BlocksNeeded(EntryKind kind, const PieceRefs& p, int k,
                                                   uint64_t from, uint64_t to) {
  std::vector<std::pair<int, uint64_t>> out;
  const int used = kind == EntryKind::kJpeg ? k : 1;
  uint64_t pos = 0;
  for (int g = 1; g <= used; ++g) {
    const uint64_t length = p[static_cast<size_t>(g - 1)].length;
    const uint64_t a = std::max(from, pos), z = std::min(to, pos + length);
    if (a < z) {
      for (uint64_t b = (a - pos) / kMib; b <= (z - 1 - pos) / kMib; ++b) out.emplace_back(g, b);
    }
    pos += length;
  }
  return out;
}

void ExpectWalkMatches(EntryKind kind, const PieceRefs& p, int k) {
  const std::vector<uint8_t> whole = Materialize(kind, p, k);
  // Every boundary of interest, and one byte either side: piece ends, block ends, the tail.
  std::set<uint64_t> points = {0, 1, whole.size()};
  uint64_t pos = 0;
  for (int g = 1; g <= (kind == EntryKind::kJpeg ? k : 1); ++g) {
    const uint64_t length = p[static_cast<size_t>(g - 1)].length;
    for (uint64_t b = 0; b * kMib < length; ++b) points.insert(pos + b * kMib);
    pos += length;
    points.insert(pos);
  }
  std::set<uint64_t> offsets;
  for (uint64_t x : points) {
    for (uint64_t d : {uint64_t{0}, uint64_t{1}}) {
      if (x >= d) offsets.insert(x - d);
      offsets.insert(x + d);
    }
  }
  for (uint64_t from : offsets) {
    for (uint64_t to : offsets) {
      if (to < from || to > whole.size() + 2) continue;
      SCOPED_TRACE(testing::Message() << "level " << k << " [" << from << ", " << to << ")");
      const LevelPlan plan(kind, p, k, from, to - from);
      const Walked w = Walk(plan, p);
      ASSERT_TRUE(w.status.ok()) << w.status.ToString();
      const size_t a = std::min<size_t>(from, whole.size());
      const size_t z = std::min<size_t>(to, whole.size());
      EXPECT_TRUE(w.bytes == std::vector<uint8_t>(whole.begin() + static_cast<long>(a),
                                                  whole.begin() + static_cast<long>(z)));
      EXPECT_EQ(w.blocks, BlocksNeeded(kind, p, k, a, z));
    }
  }
}

TEST(LevelWalkTest, JpegWithBlockCrcPiecesAndATail) {
  // Piece 2 has block CRCs (three blocks, the last short); piece 3 is empty.
  const PieceRefs p = Pieces({10, 2 * kMib + 7, 0, 5, 1});
  ExpectWalkMatches(EntryKind::kJpeg, p, 4);
  ExpectWalkMatches(EntryKind::kJpeg, p, 1);
}

TEST(LevelWalkTest, PassthroughFileIsPieceOneAtEveryLevelWithoutTail) {
  const PieceRefs p = Pieces({kMib + 3, 9, 9});
  ExpectWalkMatches(EntryKind::kPassthrough, p, 7);
  const LevelPlan plan(EntryKind::kPassthrough, p, 7);
  const Walked w = Walk(plan, p);
  ASSERT_EQ(w.bytes.size(), kMib + 3);
  EXPECT_EQ(w.bytes.back(), PieceByte(1, kMib + 2));  // no FF D9
  EXPECT_EQ(w.blocks, (std::vector<std::pair<int, uint64_t>>{{1, 0}, {1, 1}}));
}

TEST(LevelWalkTest, TheHeaderExample) {
  // Piece 1 is 1.5 blocks; level 1, the whole file.
  const PieceRefs p = Pieces({kMib + kMib / 2});
  const LevelPlan plan(EntryKind::kJpeg, p, 1);
  std::vector<std::pair<uint64_t, uint64_t>> parts;  // (file offset, length)
  std::vector<uint8_t> block;
  Status s = WalkLevel(
      plan,
      [&](const LevelSpan& span, uint64_t b) -> Result<std::span<const uint8_t>> {
        block.assign(static_cast<size_t>(ChecksumBlockLength(span.piece.length, b)), 0);
        return std::span<const uint8_t>(block);
      },
      [&](uint64_t at, std::span<const uint8_t> part) {
        parts.emplace_back(at, part.size());
        return Status::OK();
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(parts, (std::vector<std::pair<uint64_t, uint64_t>>{
                       {0, kMib}, {kMib, kMib / 2}, {kMib + kMib / 2, 2}}));
}

TEST(LevelWalkTest, AnErrorStopsTheWalkAndIsReturnedAsItIs) {
  const PieceRefs p = Pieces({10, 2 * kMib});
  const LevelPlan plan(EntryKind::kJpeg, p, 2);
  std::vector<uint8_t> block;
  int reads = 0, parts = 0;
  auto read = [&](const LevelSpan& s, uint64_t b) -> Result<std::span<const uint8_t>> {
    ++reads;
    if (s.group == 2 && b == 1) return Err(Status::IOError("record 0: timeout", 5));
    block.assign(static_cast<size_t>(ChecksumBlockLength(s.piece.length, b)), 1);
    return std::span<const uint8_t>(block);
  };
  auto sink = [&](uint64_t, std::span<const uint8_t>) {
    ++parts;
    return Status::OK();
  };
  Status s = WalkLevel(plan, read, sink);
  EXPECT_EQ(s.code(), Status::Code::kIOError);
  EXPECT_EQ(s.message(), "record 0: timeout");
  EXPECT_EQ(reads, 3);  // group 1 block 0, group 2 blocks 0 and 1
  EXPECT_EQ(parts, 2);  // nothing after the failed block, no tail

  reads = parts = 0;
  s = WalkLevel(plan, read, [&](uint64_t, std::span<const uint8_t>) {
    ++parts;
    return Status::InvalidArgument("sink full");
  });
  EXPECT_EQ(s.message(), "sink full");
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(parts, 1);
}

TEST(LevelWalkTest, AShortBlockIsCorruptionNotAShortCopy) {
  const PieceRefs p = Pieces({kMib + 100});
  const LevelPlan plan(EntryKind::kJpeg, p, 1);
  std::vector<uint8_t> block(50);  // block 1 should be 100 bytes
  uint64_t copied = 0;
  Status s = WalkLevel(
      plan,
      [&](const LevelSpan& span, uint64_t b) -> Result<std::span<const uint8_t>> {
        block.assign(b == 0 ? static_cast<size_t>(span.piece.length - 100) : 50, 0);
        return std::span<const uint8_t>(block);
      },
      [&](uint64_t, std::span<const uint8_t> part) {
        copied += part.size();
        return Status::OK();
      });
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(copied, kMib);
}

}  // namespace
}  // namespace pcrfs::index
