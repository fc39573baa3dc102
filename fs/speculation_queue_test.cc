#include "fs/speculation_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace pcrfs::fs {
namespace {

using Q = SpeculationQueue;

// A file's speculation hooks, named for the tests' messages; never read from.
class Named final : public SpeculationSource {
 public:
  explicit Named(std::string n) : name_(std::move(n)) {}
  Result<uint64_t> Warm(uint64_t, uint64_t n, std::vector<uint8_t>*) const override { return n; }
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
};

// The queue as (file, offset, end) triples, front first.
std::vector<std::string> Ranges(const Q& q) {
  std::vector<std::string> out;
  for (const Q::Pending& p : q.Snapshot()) {
    out.push_back(static_cast<const Named&>(*p.file).name() + ":" + std::to_string(p.offset) + "-" +
                  std::to_string(p.end));
  }
  return out;
}

std::shared_ptr<const SpeculationSource> File(const std::string& name) {
  return std::make_shared<Named>(name);
}

using V = std::vector<std::string>;

TEST(SpeculationQueueTest, NothingIsQueuedTwice) {
  Q q;
  auto a = File("a");
  auto added = q.Add(a, {{0, 100}}, 1000);
  ASSERT_EQ(added.size(), 1u);
  added = q.Add(a, {{50, 100}, {0, 10}}, 1000);
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].offset, 100u);
  EXPECT_EQ(added[0].length, 50u);
  EXPECT_EQ(Ranges(q), (V{"a:0-150"}));
  EXPECT_EQ(q.queued_bytes(), 150u);
  // Taken (read) ranges stay seen: queued again, nothing.
  q.TakeFront(150);
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.Add(a, {{0, 150}}, 1000).empty());
  EXPECT_TRUE(q.empty());
  // Holes between seen ranges are queued, as pieces.
  Q r;
  r.Add(a, {{0, 10}, {20, 10}}, 1000);
  added = r.Add(a, {{0, 40}}, 1000);
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0].offset, 10u);
  EXPECT_EQ(added[1].offset, 30u);
  EXPECT_EQ(Ranges(r), (V{"a:0-40"})) << "the pieces join what they touch";
}

TEST(SpeculationQueueTest, RangesAreClippedToTheFile) {
  Q q;
  auto a = File("a");
  q.Add(a, {{900, 200}, {1000, 5}}, 1000);
  EXPECT_EQ(Ranges(q), (V{"a:900-1000"}));
  EXPECT_EQ(q.queued_bytes(), 100u);
}

TEST(SpeculationQueueTest, QueuedRangesThatTouchAreReadAsOne) {
  Q q;
  auto a = File("a"), b = File("b");
  q.Add(a, {{0, 10}}, 1000);
  q.Add(b, {{0, 10}}, 1000);
  q.Add(a, {{20, 10}}, 1000);
  q.Add(a, {{10, 10}}, 1000);  // closes the gap: one range, in the first one's place
  EXPECT_EQ(Ranges(q), (V{"a:0-30", "b:0-10"}));
  q.Add(b, {{50, 10}}, 1000);
  q.Add(b, {{40, 10}}, 1000);  // starts the range after it earlier
  EXPECT_EQ(Ranges(q), (V{"a:0-30", "b:0-10", "b:40-60"}));
  EXPECT_EQ(q.queued_bytes(), 60u);
}

TEST(SpeculationQueueTest, TakeFrontTakesChunksInOrder) {
  Q q;
  auto a = File("a"), b = File("b");
  q.Add(a, {{0, 100}}, 1000);
  q.Add(b, {{0, 30}}, 1000);
  Q::Pending p = q.TakeFront(40);
  EXPECT_EQ(p.file, a);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_EQ(p.end, 40u);
  EXPECT_EQ(Ranges(q), (V{"a:40-100", "b:0-30"}));
  p = q.TakeFront(100);
  EXPECT_EQ(p.offset, 40u);
  EXPECT_EQ(p.end, 100u);
  EXPECT_EQ(Ranges(q), (V{"b:0-30"}));
  EXPECT_EQ(q.queued_bytes(), 30u);
  // The rest of a taken range is still indexed: a range that touches it joins it.
  q.TakeFront(10);
  q.Add(b, {{30, 10}}, 1000);
  EXPECT_EQ(Ranges(q), (V{"b:10-40"}));
}

TEST(SpeculationQueueTest, ARangePutBackGoesFirst) {
  Q q;
  auto a = File("a"), b = File("b");
  q.Add(a, {{0, 100}}, 1000);
  q.Add(b, {{0, 100}}, 1000);
  Q::Pending p = q.TakeFront(200);
  EXPECT_EQ(Ranges(q), (V{"b:0-100"}));
  q.PushFront(p.file, p.offset, p.end);
  EXPECT_EQ(Ranges(q), (V{"a:0-100", "b:0-100"}));
  EXPECT_EQ(q.queued_bytes(), 200u);
}

TEST(SpeculationQueueTest, ADemandPieceInAQueuedRangeTakesAChunkOfIt) {
  Q q;
  auto a = File("a"), b = File("b");
  q.Add(a, {{0, 1000}}, 10000);
  q.Add(b, {{0, 1000}}, 10000);
  // A piece in the middle: a chunk from its start; both sides stay queued, in place.
  Q::Range w = q.Promote(a.get(), {300, 10}, 100);
  EXPECT_EQ(w.offset, 300u);
  EXPECT_EQ(w.length, 100u);
  EXPECT_EQ(Ranges(q), (V{"a:0-300", "a:400-1000", "b:0-1000"}));
  // A piece longer than the chunk: the piece.
  w = q.Promote(a.get(), {400, 250}, 100);
  EXPECT_EQ(w.length, 250u);
  EXPECT_EQ(Ranges(q), (V{"a:0-300", "a:650-1000", "b:0-1000"}));
  // At the end of a queued range: only what is queued.
  w = q.Promote(a.get(), {950, 10}, 100);
  EXPECT_EQ(w.length, 50u);
  EXPECT_EQ(Ranges(q), (V{"a:0-300", "a:650-950", "b:0-1000"}));
  // Not queued (taken before, or another file's range): nothing.
  EXPECT_EQ(q.Promote(a.get(), {300, 10}, 100).length, 0u);
  EXPECT_EQ(q.Promote(a.get(), {5000, 10}, 100).length, 0u);
  EXPECT_EQ(q.Promote(File("c").get(), {0, 10}, 100).length, 0u);
  // A whole range promoted leaves the queue.
  w = q.Promote(b.get(), {0, 1000}, 100);
  EXPECT_EQ(w.length, 1000u);
  EXPECT_EQ(Ranges(q), (V{"a:0-300", "a:650-950"}));
  EXPECT_EQ(q.promoted_reads(), 4u);
  EXPECT_EQ(q.promoted_bytes(), 100u + 250 + 50 + 1000);
  EXPECT_EQ(q.queued_bytes(), 300u + 300);
  // The index follows: promoted-out bytes are still seen, and the ranges left take chunks.
  EXPECT_TRUE(q.Add(a, {{300, 350}}, 10000).empty());
  EXPECT_EQ(q.TakeFront(1000).end, 300u);
  EXPECT_EQ(q.Promote(a.get(), {700, 10}, 100).length, 100u);
  EXPECT_EQ(Ranges(q), (V{"a:650-700", "a:800-950"}));
}

TEST(SpeculationQueueTest, ClearDropsTheQueueButRemembersWhatWasSeen) {
  Q q;
  auto a = File("a");
  q.Add(a, {{0, 100}}, 1000);
  q.Clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_bytes(), 0u);
  EXPECT_TRUE(q.Add(a, {{0, 100}}, 1000).empty());
}

// A dataset larger than the caches, read epoch after epoch: once more than forget_after bytes
// were taken since, a range taken before is queued again (the caches have let it go), but
// never one that is queued now, nor one put back.
TEST(SpeculationQueueTest, WhatWasTakenIsForgottenAfterEnoughMoreWasTaken) {
  Q q(/*forget_after=*/100);
  auto a = File("a"), b = File("b");
  q.Add(a, {{0, 100}}, 1000);
  q.TakeFront(100);
  EXPECT_TRUE(q.Add(a, {{0, 100}}, 1000).empty()) << "100 bytes taken since: still cached";
  q.Add(b, {{0, 100}}, 1000);
  q.TakeFront(100);  // 200 taken since the start
  EXPECT_TRUE(q.Add(a, {{0, 100}}, 1000).empty()) << "a was taken only 100 bytes ago";
  EXPECT_EQ(q.forgotten(), 1u);
  q.Add(b, {{200, 150}}, 1000);
  q.TakeFront(150);  // 150 more: a was taken 250 bytes ago
  auto again = q.Add(a, {{0, 100}}, 1000);
  EXPECT_EQ(q.forgotten(), 2u);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].offset, 0u);
  EXPECT_EQ(again[0].length, 100u);
  // b:200-350 was taken in the last generation: still seen; b:0-100 before it: forgotten.
  auto b_again = q.Add(b, {{0, 400}}, 1000);
  ASSERT_EQ(b_again.size(), 2u);
  EXPECT_EQ(b_again[0].offset, 0u);
  EXPECT_EQ(b_again[0].length, 200u);
  EXPECT_EQ(b_again[1].offset, 350u);
  EXPECT_EQ(b_again[1].length, 50u);
  EXPECT_EQ(q.queued_bytes(), 350u);
  EXPECT_TRUE(q.Add(b, {{0, 400}}, 1000).empty()) << "what is queued is never queued twice";
  EXPECT_TRUE(q.Add(a, {{0, 100}}, 1000).empty());
  uint64_t total = 0;
  for (const Q::Pending& p : q.Snapshot()) total += p.end - p.offset;
  EXPECT_EQ(total, q.queued_bytes());
  // Bytes read on demand push the caches too: a second pass that reads on demand what the
  // first took speculatively makes it forgettable, though nothing is taken meanwhile.
  Q p(/*forget_after=*/100);
  p.Add(a, {{0, 150}}, 1000);
  p.TakeFront(150);
  EXPECT_TRUE(p.Add(a, {{0, 150}}, 1000).empty()) << "moved to the generation before";
  EXPECT_TRUE(p.Add(a, {{0, 150}}, 1000).empty());
  p.NoteDemand(150);
  EXPECT_EQ(p.Add(a, {{0, 150}}, 1000).size(), 1u);
  EXPECT_EQ(p.forgotten(), 2u);
  // A range taken and put back (a busy source) is queued once, even across a forgetting.
  Q r(/*forget_after=*/10);
  r.Add(a, {{0, 100}}, 1000);
  auto t = r.TakeFront(50);
  r.Add(b, {{0, 20}}, 1000);
  r.TakeFront(50);  // a:50-100
  r.TakeFront(20);  // b:0-20: another forgetting is due at the next Add
  r.PushFront(t.file, t.offset, t.end);
  EXPECT_TRUE(r.Add(a, {{0, 50}}, 1000).empty()) << "queued again by PushFront";
  EXPECT_EQ(r.forgotten(), 2u);
  EXPECT_EQ(r.queued_bytes(), 50u);
}

// Many files with many ranges each: lookups go through the per-file index, so this stays
// fast (a walk of the queue per promotion would take 10^10 steps).
TEST(SpeculationQueueTest, ManyQueuedRanges) {
  Q q;
  std::vector<std::shared_ptr<const SpeculationSource>> files;
  for (int f = 0; f < 100; ++f) files.push_back(File("f" + std::to_string(f)));
  for (uint64_t i = 0; i < 1000; ++i) {
    for (auto& f : files) q.Add(f, {{i * 100, 50}}, uint64_t{1} << 40);
  }
  EXPECT_EQ(q.queued_bytes(), uint64_t{100} * 1000 * 50);
  uint64_t promoted = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    for (auto& f : files) promoted += q.Promote(f.get(), {i * 100 + 10, 10}, 20).length;
  }
  EXPECT_EQ(promoted, uint64_t{100} * 1000 * 20);
  EXPECT_EQ(q.queued_bytes(), uint64_t{100} * 1000 * 30);
  EXPECT_EQ(q.Snapshot().size(), size_t{100} * 1000 * 2);
}

// What demand reads fetched is forgotten like what was taken, also when nothing is ever
// planned (-o prefetch=0, or hints alone): the ranges a mount remembers stay bounded.
TEST(SpeculationQueueTest, DemandedRangesAreForgottenWithoutPlans) {
  SpeculationQueue q(/*forget_after=*/1000);
  auto f = File("a");
  q.NoteDemanded(f.get(), {0, 100});
  for (uint64_t i = 1; i <= 30; ++i) {
    q.NoteDemand(100);
    q.NoteDemanded(f.get(), {i * 1000, 100});
  }
  EXPECT_GE(q.forgotten(), 2u);
  // Two generations later the first piece may be queued again (a new epoch reads it again).
  EXPECT_EQ(q.Add(f, {{0, 100}}, 1 << 20).size(), 1u);
  // A piece read just now may not.
  EXPECT_TRUE(q.Add(f, {{30000, 100}}, 1 << 20).empty());
}

// The ranges remembered are bounded by count too, not only by the bytes taken: pieces of a few
// hundred bytes (1.28M tiny files at level 10) made 512 MiB of them ~2M map nodes, ~130 MiB.
TEST(SpeculationQueueTest, RangesMergedAfterAForgettingDoNotForgetAgain) {
  SpeculationQueue q(/*forget_after=*/uint64_t{1} << 40, /*forget_ranges=*/10);
  auto f = File("a");
  std::vector<SpeculationQueue::Range> twelve;
  for (uint64_t i = 0; i < 12; ++i) twelve.push_back({i * 100, 50});
  EXPECT_EQ(q.Add(f, twelve, 1 << 20).size(), 12u);
  q.NoteDemanded(f.get(), {5000, 10});  // 12 remembered > 10: forgotten; the 12 queued stay seen
  EXPECT_EQ(q.forgotten(), 1u);
  // One read over all twelve merges them into one: fewer ranges than the generation began with.
  q.NoteDemanded(f.get(), {0, 1200});
  q.NoteDemanded(f.get(), {9000, 10});
  EXPECT_EQ(q.forgotten(), 1u);  // 0c8af6e: 2 (the count of new ranges wrapped below zero)
}

TEST(SpeculationQueueTest, RangesAreForgottenAfterEnoughOfThem) {
  SpeculationQueue q(/*forget_after=*/uint64_t{1} << 40, /*forget_ranges=*/10);
  auto f = File("a");
  // 50 pieces apart: 100 ranges (seen and demanded), a new generation every ~12.
  for (uint64_t i = 0; i < 50; ++i) q.NoteDemanded(f.get(), {i * 1000, 100});
  EXPECT_GE(q.forgotten(), 7u);
  // Generations ago: the first piece may be queued again; the last one may not.
  EXPECT_EQ(q.Add(f, {{0, 100}}, 1 << 20).size(), 1u);
  EXPECT_TRUE(q.Add(f, {{49000, 100}}, 1 << 20).empty());
  // Ranges that merge count once: 30 adjacent pieces make one range, and nothing is forgotten.
  SpeculationQueue r(/*forget_after=*/uint64_t{1} << 40, /*forget_ranges=*/10);
  for (uint64_t i = 0; i < 30; ++i) r.NoteDemanded(f.get(), {i * 100, 100});
  EXPECT_TRUE(r.Add(f, {{0, 3000}}, 1 << 20).empty());
  EXPECT_EQ(r.forgotten(), 0u);
}

}  // namespace
}  // namespace pcrfs::fs
