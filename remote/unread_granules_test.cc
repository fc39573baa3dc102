#include "remote/unread_granules.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace pcrfs {
namespace {

using Runs = std::vector<std::pair<uint64_t, uint64_t>>;

Runs RunsOf(const UnreadGranules& u, uint64_t length) {
  Runs out;
  u.ForEachRun(length, [&](uint64_t b, uint64_t e) { out.push_back({b, e}); });
  return out;
}

TEST(UnreadGranulesTest, AReadCountsTheGranulesItTouches) {
  for (uint64_t length : {uint64_t{1}, uint64_t{64}, uint64_t{1000}, uint64_t{4032}, uint64_t{4033},
                          uint64_t{131072}}) {
    SCOPED_TRACE(length);
    UnreadGranules u;
    EXPECT_TRUE(u.empty());
    u.SetAll(length);
    EXPECT_FALSE(u.empty());
    EXPECT_EQ(u.Count(length), length);
    EXPECT_EQ(RunsOf(u, length), (Runs{{0, length}}));
    // One byte: its whole granule.
    const uint64_t first = std::min<uint64_t>(64, length);
    EXPECT_EQ(u.MarkRead(length, 0, 1), first);
    EXPECT_EQ(u.Count(length), length - first);
    EXPECT_EQ(u.MarkRead(length, 5, 9), 0u);  // read already: counted once
    // Beyond the end: clipped; the rest read: nothing left, nothing held.
    EXPECT_EQ(u.MarkRead(length, 0, length + 100), length - first);
    EXPECT_TRUE(u.empty());
    EXPECT_EQ(u.Count(length), 0u);
    EXPECT_TRUE(RunsOf(u, length).empty());
  }
}

TEST(UnreadGranulesTest, PiecesFarApartLeaveTheRunsBetweenThem) {
  // A 4.7 KB extent (past the inline 63 granules) of 230-byte pieces, every third one read.
  const uint64_t length = 4700;
  UnreadGranules u;
  u.SetAll(length);
  uint64_t read = 0;
  for (uint64_t p = 0; p + 230 <= length; p += 3 * 230) read += u.MarkRead(length, p, p + 230);
  EXPECT_EQ(u.Count(length), length - read);
  // Each read counts at most a granule more than its bytes at each end, never less than them.
  const uint64_t pieces = (length - 230) / (3 * 230) + 1;
  EXPECT_GE(read, pieces * 230);
  EXPECT_LE(read, pieces * (230 + 2 * 63));
  // The unread runs are what is left, in order, granule-aligned but for the extent's end.
  uint64_t total = 0, last = 0;
  for (const auto& [b, e] : RunsOf(u, length)) {
    EXPECT_LT(b, e);
    EXPECT_GE(b, last);
    EXPECT_EQ(b % 64, 0u);
    EXPECT_TRUE(e % 64 == 0 || e == length);
    total += e - b;
    last = e;
  }
  EXPECT_EQ(total, u.Count(length));
}

TEST(UnreadGranulesTest, RandomReadsAddUpToTheLengthAndMovesKeepTheBits) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const uint64_t length = 1 + rng() % 140000;
    UnreadGranules u;
    u.SetAll(length);
    uint64_t read = 0;
    while (!u.empty()) {
      const uint64_t b = rng() % length, n = 1 + rng() % 3000;
      read += u.MarkRead(length, b, b + n);
      ASSERT_EQ(u.Count(length) + read, length);
      UnreadGranules moved(std::move(u));  // a flat_map shifts its values
      u = std::move(moved);
    }
    EXPECT_EQ(read, length);
  }
}

}  // namespace
}  // namespace pcrfs
