#include "index/level_plan.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "index/entry.h"

namespace pcrfs::index {
namespace {

PieceRefs Pieces(std::vector<uint64_t> lengths) {
  PieceRefs p;
  uint64_t offset = 1000;
  for (size_t g = 0; g < lengths.size(); ++g) {
    p[g] = {offset, lengths[g], 0x1000u + static_cast<uint32_t>(g)};
    offset += lengths[g] + 5000;  // pieces lie in different regions, far apart
  }
  return p;
}

// Byte i of piece g (1..10): distinct across pieces and positions.
uint8_t PieceByte(int g, uint64_t i) { return static_cast<uint8_t>(g * 37 + i * 11 + (i >> 8)); }

// The level-k file, materialized the naive way: pieces' bytes one after the other, then FF D9.
std::vector<uint8_t> Materialize(EntryKind kind, const PieceRefs& p, int k) {
  std::vector<uint8_t> out;
  if (kind == EntryKind::kDirectory) return out;
  const int used = kind == EntryKind::kJpeg ? k : 1;
  for (int g = 1; g <= used; ++g) {
    for (uint64_t i = 0; i < p[static_cast<size_t>(g - 1)].length; ++i) {
      out.push_back(PieceByte(g, i));
    }
  }
  if (kind == EntryKind::kJpeg) out.insert(out.end(), {0xFF, 0xD9});
  return out;
}

// What a reader following the plan gets, checking on the way that every span is inside its
// piece and the range, and that spans and tail tile the range in order.
std::vector<uint8_t> Follow(const LevelPlan& plan, const PieceRefs& p) {
  std::vector<uint8_t> out;
  uint64_t at = plan.offset();
  int last_group = 0;
  for (const LevelSpan& s : plan.spans()) {
    EXPECT_GT(s.group, last_group);
    EXPECT_LE(s.group, plan.pieces_used());
    last_group = s.group;
    EXPECT_EQ(s.piece, p[static_cast<size_t>(s.group - 1)]);
    EXPECT_LT(s.begin, s.end);
    EXPECT_LE(s.end, s.piece.length);
    EXPECT_EQ(s.file_offset, at);
    EXPECT_EQ(s.record_offset(), s.piece.offset + s.begin);
    for (uint64_t i = s.begin; i < s.end; ++i) out.push_back(PieceByte(s.group, i));
    at += s.length();
  }
  if (!plan.tail().empty()) {
    EXPECT_EQ(plan.tail_offset(), at);
  }
  out.insert(out.end(), plan.tail().begin(), plan.tail().end());
  EXPECT_EQ(out.size(), plan.length());
  return out;
}

TEST(LevelPlanTest, TheHeaderExample) {
  const PieceRefs p = Pieces({100, 0, 50, 7});
  const LevelPlan plan(EntryKind::kJpeg, p, 3, 90, 70);
  EXPECT_EQ(plan.file_size(), 152u);
  EXPECT_EQ(plan.pieces_used(), 3);
  EXPECT_EQ(plan.offset(), 90u);
  EXPECT_EQ(plan.end(), 152u);
  ASSERT_EQ(plan.spans().size(), 2u);
  EXPECT_EQ(plan.spans()[0].group, 1);
  EXPECT_EQ(plan.spans()[0].begin, 90u);
  EXPECT_EQ(plan.spans()[0].end, 100u);
  EXPECT_EQ(plan.spans()[0].file_offset, 90u);
  EXPECT_EQ(plan.spans()[0].record_offset(), 1090u);
  EXPECT_EQ(plan.spans()[1].group, 3);
  EXPECT_EQ(plan.spans()[1].begin, 0u);
  EXPECT_EQ(plan.spans()[1].end, 50u);
  EXPECT_EQ(plan.spans()[1].file_offset, 100u);
  ASSERT_EQ(plan.tail().size(), 2u);
  EXPECT_EQ(plan.tail()[0], 0xFF);
  EXPECT_EQ(plan.tail()[1], 0xD9);
  EXPECT_EQ(plan.tail_offset(), 150u);
}

TEST(LevelPlanTest, WholeFileIsEveryNonEmptyPieceAndTheEoi) {
  const PieceRefs p = Pieces({10, 20, 0, 30, 40, 0, 0, 50, 60, 70});
  for (int k = 1; k <= kNumGroups; ++k) {
    const LevelPlan plan(EntryKind::kJpeg, p, k);
    EXPECT_EQ(plan.pieces_used(), k);
    EXPECT_EQ(plan.offset(), 0u);
    EXPECT_EQ(plan.end(), plan.file_size());
    uint64_t sum = 0;
    size_t non_empty = 0;
    for (int g = 0; g < k; ++g) {
      sum += p[static_cast<size_t>(g)].length;
      non_empty += p[static_cast<size_t>(g)].length > 0;
    }
    EXPECT_EQ(plan.file_size(), sum + 2);
    EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, k), sum + 2);
    ASSERT_EQ(plan.spans().size(), non_empty);
    for (const LevelSpan& s : plan.spans()) {
      EXPECT_EQ(s.begin, 0u);
      EXPECT_EQ(s.end, s.piece.length);
    }
    EXPECT_EQ(Follow(plan, p), Materialize(EntryKind::kJpeg, p, k));
    const LevelPlan copy = plan;  // a value: copies hold their own spans
    EXPECT_EQ(Follow(copy, p), Materialize(EntryKind::kJpeg, p, k));
  }
}

TEST(LevelPlanTest, PassthroughIsPieceOneAtEveryLevel) {
  const PieceRefs p = Pieces({1234});
  for (int k = 1; k <= kNumGroups; ++k) {
    const LevelPlan plan(EntryKind::kPassthrough, p, k, 1000);
    EXPECT_EQ(plan.file_size(), 1234u);
    EXPECT_EQ(plan.pieces_used(), 1);
    ASSERT_EQ(plan.spans().size(), 1u);
    EXPECT_EQ(plan.spans()[0].group, 1);
    EXPECT_EQ(plan.spans()[0].begin, 1000u);
    EXPECT_EQ(plan.spans()[0].end, 1234u);
    EXPECT_TRUE(plan.tail().empty());
  }
  const LevelPlan empty(EntryKind::kPassthrough, Pieces({0}), 5);
  EXPECT_EQ(empty.file_size(), 0u);
  EXPECT_TRUE(empty.empty());
  EXPECT_TRUE(empty.spans().empty());
}

TEST(LevelPlanTest, DirectoryAndUnknownKindsHaveNoBytes) {
  const PieceRefs p = Pieces({10, 20});
  for (EntryKind kind : {EntryKind::kDirectory, static_cast<EntryKind>(9)}) {
    const LevelPlan plan(kind, p, 3);
    EXPECT_EQ(plan.file_size(), 0u);
    EXPECT_EQ(plan.pieces_used(), 0);
    EXPECT_TRUE(plan.empty());
    EXPECT_TRUE(plan.spans().empty());
    EXPECT_TRUE(plan.tail().empty());
    EXPECT_EQ(LevelSize(kind, p, 3), 0u);
  }
  Entry dir;
  dir.kind = EntryKind::kDirectory;
  dir.pieces = p;
  EXPECT_EQ(dir.SizeAtLevel(3), 0u);
}

TEST(LevelPlanTest, LevelIsClampedToOneToTen) {
  const PieceRefs p = Pieces({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(LevelPlan(EntryKind::kJpeg, p, 0).file_size(), 3u);
  EXPECT_EQ(LevelPlan(EntryKind::kJpeg, p, -7).pieces_used(), 1);
  EXPECT_EQ(LevelPlan(EntryKind::kJpeg, p, 11).file_size(), 57u);
  EXPECT_EQ(LevelPlan(EntryKind::kJpeg, p, 1000).pieces_used(), 10);
  EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, 0), 3u);
}

TEST(LevelPlanTest, RangesAtAndPastTheEnd) {
  const PieceRefs p = Pieces({10, 20});
  const LevelPlan past(EntryKind::kJpeg, p, 2, 40, 10);
  EXPECT_EQ(past.file_size(), 32u);
  EXPECT_EQ(past.offset(), 32u);
  EXPECT_TRUE(past.empty());
  EXPECT_TRUE(past.spans().empty());
  EXPECT_TRUE(past.tail().empty());

  const LevelPlan nothing(EntryKind::kJpeg, p, 2, 5, 0);
  EXPECT_TRUE(nothing.empty());
  EXPECT_TRUE(nothing.spans().empty());

  const LevelPlan last(EntryKind::kJpeg, p, 2, 31, 1000);
  EXPECT_TRUE(last.spans().empty());
  ASSERT_EQ(last.tail().size(), 1u);
  EXPECT_EQ(last.tail()[0], 0xD9);
  EXPECT_EQ(last.tail_offset(), 31u);

  const LevelPlan first_eoi(EntryKind::kJpeg, p, 2, 29, 2);
  ASSERT_EQ(first_eoi.spans().size(), 1u);
  EXPECT_EQ(first_eoi.spans()[0].group, 2);
  EXPECT_EQ(first_eoi.spans()[0].begin, 19u);
  ASSERT_EQ(first_eoi.tail().size(), 1u);
  EXPECT_EQ(first_eoi.tail()[0], 0xFF);
  EXPECT_EQ(first_eoi.tail_offset(), 30u);

  // A length that overflows offset + length means "to the end".
  const LevelPlan all(EntryKind::kJpeg, p, 2, 3, LevelPlan::kToEnd);
  EXPECT_EQ(all.end(), 32u);
  EXPECT_EQ(all.length(), 29u);
}

TEST(LevelPlanTest, EveryRangeOfSmallFilesMatchesTheMaterializedFile) {
  const std::vector<PieceRefs> files = {Pieces({3, 0, 2, 1, 0, 0, 4, 1, 0, 2}), Pieces({5}),
                                        Pieces({0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
                                        Pieces({1, 1, 1, 1, 1, 1, 1, 1, 1, 1})};
  for (const PieceRefs& p : files) {
    for (EntryKind kind : {EntryKind::kJpeg, EntryKind::kPassthrough}) {
      for (int k = 1; k <= kNumGroups; ++k) {
        const std::vector<uint8_t> whole = Materialize(kind, p, k);
        for (uint64_t offset = 0; offset <= whole.size() + 1; ++offset) {
          for (uint64_t length = 0; length <= whole.size() + 2; ++length) {
            SCOPED_TRACE(testing::Message()
                         << "level " << k << " [" << offset << ", +" << length << ")");
            const LevelPlan plan(kind, p, k, offset, length);
            EXPECT_EQ(plan.file_size(), whole.size());
            const size_t from = std::min<size_t>(offset, whole.size());
            const size_t to = std::min<size_t>(from + length, whole.size());
            EXPECT_EQ(Follow(plan, p), std::vector<uint8_t>(whole.begin() + static_cast<long>(from),
                                                            whole.begin() + static_cast<long>(to)));
          }
        }
      }
    }
  }
}

TEST(LevelPlanTest, ChecksumBlocksOfASpan) {
  const uint64_t mib = kChecksumBlockSize;
  const PieceRefs p = Pieces({10, 3 * mib + 5});
  // From the last 4 bytes of piece 1 to 1 byte into block 2 of piece 2.
  const LevelPlan plan(EntryKind::kJpeg, p, 2, 6, 4 + 2 * mib + 1);
  ASSERT_EQ(plan.spans().size(), 2u);
  EXPECT_EQ(plan.spans()[0].first_block(), 0u);
  EXPECT_EQ(plan.spans()[0].end_block(), 1u);
  EXPECT_EQ(plan.spans()[1].first_block(), 0u);
  EXPECT_EQ(plan.spans()[1].end_block(), 3u);
  const LevelPlan inside(EntryKind::kJpeg, p, 2, 10 + mib, mib);  // exactly block 1
  ASSERT_EQ(inside.spans().size(), 1u);
  EXPECT_EQ(inside.spans()[0].first_block(), 1u);
  EXPECT_EQ(inside.spans()[0].end_block(), 2u);
  const LevelPlan tail_block(EntryKind::kJpeg, p, 2, 10 + 3 * mib, 100);
  ASSERT_EQ(tail_block.spans().size(), 1u);
  EXPECT_EQ(tail_block.spans()[0].first_block(), 3u);
  EXPECT_EQ(tail_block.spans()[0].end_block(), 4u);
  EXPECT_EQ(tail_block.tail().size(), 2u);
}

TEST(LevelPlanTest, LengthsPastTwoToTheSixtyFourAreCappedNotWrapped) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  PieceRefs p;
  p[0] = {0, kMax - 10, 0};
  p[1] = {0, 100, 0};
  const LevelPlan plan(EntryKind::kJpeg, p, 2, kMax - 20);
  EXPECT_EQ(plan.file_size(), kMax);
  EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, 2), kMax);
  EXPECT_EQ(plan.length(), 20u);
  ASSERT_EQ(plan.spans().size(), 2u);
  EXPECT_EQ(plan.spans()[0].length() + plan.spans()[1].length(), 20u);
  EXPECT_LE(plan.spans()[1].end, 100u);
  EXPECT_TRUE(plan.tail().empty());

  // The pieces end one byte short of the cap: FF fits, D9 does not.
  p[1] = {0, 9, 0};
  const LevelPlan edge(EntryKind::kJpeg, p, 2, kMax - 3);
  EXPECT_EQ(edge.file_size(), kMax);
  EXPECT_EQ(edge.length(), 3u);
  ASSERT_EQ(edge.tail().size(), 1u);
  EXPECT_EQ(edge.tail()[0], 0xFF);
  EXPECT_EQ(edge.tail_offset(), kMax - 1);
}

TEST(LevelPlanTest, EntrySizeAtLevelIsThePlansSize) {
  Entry e;
  e.kind = EntryKind::kJpeg;
  e.pieces = Pieces({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  for (int k = 1; k <= kNumGroups; ++k) {
    EXPECT_EQ(e.SizeAtLevel(k), LevelPlan(e.kind, e.pieces, k).file_size());
  }
}

}  // namespace
}  // namespace pcrfs::index
