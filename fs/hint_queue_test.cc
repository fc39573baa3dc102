#include "fs/hint_queue.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

namespace pcrfs::fs {
namespace {

using Clock = std::chrono::steady_clock;

// Whether the queue's room event is readable now (it is only read, never waited for).
bool RoomSignalled(const HintQueue& q) {
  pollfd p{q.room_event(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

void ResetRoom(const HintQueue& q) {
  uint64_t n;
  ASSERT_EQ(::read(q.room_event(), &n, sizeof n), static_cast<ssize_t>(sizeof n));
}

std::vector<uint64_t> PopAll(HintQueue& q) {
  std::vector<uint64_t> out;
  while (auto ino = q.TryPop()) out.push_back(*ino);
  return out;
}

TEST(HintQueueTest, FirstInFirstOutWithDuplicatesIgnored) {
  HintQueue q;
  EXPECT_EQ(q.Add(33, 1), HintQueue::Push::kQueued);
  EXPECT_EQ(q.Add(17, 2), HintQueue::Push::kQueued);
  EXPECT_EQ(q.Add(33, 2), HintQueue::Push::kDuplicate);  // from another connection too
  EXPECT_EQ(q.Add(49, 1), HintQueue::Push::kQueued);
  EXPECT_EQ(PopAll(q), (std::vector<uint64_t>{33, 17, 49}));
  EXPECT_EQ(q.Add(33, 1), HintQueue::Push::kQueued);  // taken: a later hint of it is new
  const HintQueue::Stats s = q.stats();
  EXPECT_EQ(s.count(HintFate::kQueued), 4u);
  EXPECT_EQ(s.count(HintFate::kDuplicate), 1u);
  EXPECT_EQ(s.taken, 3u);
  EXPECT_EQ(s.queued_now, 1u);
}

TEST(HintQueueTest, AFullQueueRefusesAndSaysWhenThereIsRoom) {
  HintQueue q(3);
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(q.Add(i, 1), HintQueue::Push::kQueued);
  EXPECT_TRUE(q.full());
  EXPECT_EQ(q.Add(4, 1), HintQueue::Push::kFull);
  EXPECT_EQ(q.Add(2, 1), HintQueue::Push::kDuplicate);  // a duplicate is still a duplicate
  EXPECT_FALSE(RoomSignalled(q));
  EXPECT_EQ(q.TryPop(), 1u);
  EXPECT_TRUE(RoomSignalled(q));
  ResetRoom(q);
  EXPECT_FALSE(RoomSignalled(q));
  EXPECT_EQ(q.TryPop(), 2u);  // not full before: no signal
  EXPECT_FALSE(RoomSignalled(q));
  EXPECT_EQ(q.stats().count(HintFate::kQueued), 3u);  // the refused one is not counted
  // A clear and a read before its turn make room too.
  EXPECT_EQ(q.Add(5, 1), HintQueue::Push::kQueued);
  EXPECT_EQ(q.Add(6, 2), HintQueue::Push::kQueued);
  EXPECT_TRUE(q.full());
  EXPECT_EQ(q.Clear(2), 1u);
  EXPECT_TRUE(RoomSignalled(q));
  ResetRoom(q);
  EXPECT_EQ(q.Add(7, 1), HintQueue::Push::kQueued);
  EXPECT_TRUE(q.NoteRead(5));
  EXPECT_TRUE(RoomSignalled(q));
}

TEST(HintQueueTest, ClearDropsOneSourcesHintsOrAll) {
  HintQueue q;
  for (uint64_t i = 1; i <= 6; ++i) q.Add(i, i % 2);
  EXPECT_EQ(q.Clear(1), 3u);
  EXPECT_EQ(PopAll(q), (std::vector<uint64_t>{2, 4, 6}));
  for (uint64_t i = 1; i <= 4; ++i) q.Add(i, 7);
  EXPECT_EQ(q.Clear(), 4u);
  EXPECT_TRUE(PopAll(q).empty());
  EXPECT_EQ(q.stats().count(HintFate::kReset), 7u);
  EXPECT_EQ(q.Add(1, 7), HintQueue::Push::kQueued);  // dropped: no longer a duplicate
}

TEST(HintQueueTest, AFileReadBeforeItsTurnIsDroppedAndHintedFilesAreKnown) {
  HintQueue q(4);
  EXPECT_FALSE(q.NoteRead(10));  // nothing hinted: false, no lock
  for (uint64_t i = 10; i < 14; ++i) q.Add(i, 1);
  EXPECT_TRUE(q.NoteRead(12));   // queued: dropped
  EXPECT_FALSE(q.NoteRead(99));  // never hinted
  EXPECT_EQ(q.TryPop(), 10u);
  EXPECT_TRUE(q.NoteRead(10));  // taken lately: hinted, nothing to drop
  EXPECT_EQ(PopAll(q), (std::vector<uint64_t>{11, 13}));
  const HintQueue::Stats s = q.stats();
  EXPECT_EQ(s.count(HintFate::kReadBefore), 1u);
  EXPECT_EQ(s.taken, 3u);
  // Only the last `capacity` files taken are remembered.
  for (uint64_t i = 20; i < 24; ++i) q.Add(i, 1);
  PopAll(q);
  EXPECT_FALSE(q.NoteRead(10));
  EXPECT_TRUE(q.NoteRead(20));
}

TEST(HintQueueTest, ReadsBeforeTheirTurnNeverGrowTheQueuePastItsBound) {
  // A hint read before its turn leaves a dead item behind until it is popped or swept: readers
  // ahead of a consumer that takes nothing must not grow the queue without bound.
  HintQueue q(8);
  ASSERT_EQ(q.Add(1000000, 1), HintQueue::Push::kQueued);  // at the front, never read
  for (uint64_t i = 1; i <= 10000; ++i) {
    ASSERT_EQ(q.Add(i, 1), HintQueue::Push::kQueued);
    ASSERT_TRUE(q.NoteRead(i));
  }
  EXPECT_LE(q.items_held(), 16u);
  EXPECT_EQ(q.size(), 1u);
  std::vector<uint64_t> want = {1000000};
  for (uint64_t i = 1; i <= 7; ++i) {
    ASSERT_EQ(q.Add(20000 + i, 1), HintQueue::Push::kQueued);
    want.push_back(20000 + i);
  }
  EXPECT_EQ(q.Add(3, 1), HintQueue::Push::kFull);
  EXPECT_EQ(PopAll(q), want);
}

TEST(HintQueueTest, WaitPopWakesForAHintOrCloseAndGivesUpAtItsDeadline) {
  HintQueue q;
  EXPECT_EQ(q.WaitPop(Clock::now() + std::chrono::milliseconds(1)), std::nullopt);
  std::thread adder([&] { q.Add(42, 1); });
  EXPECT_EQ(q.WaitPop(Clock::now() + std::chrono::seconds(30)), 42u);
  adder.join();
  std::thread closer([&] { q.Close(); });
  EXPECT_FALSE(q.WaitNonEmpty());
  closer.join();
  q.Add(43, 1);
  EXPECT_EQ(q.WaitPop(Clock::now() + std::chrono::seconds(30)), std::nullopt);  // closed
  EXPECT_EQ(q.TryPop(), std::nullopt);
}

TEST(HintQueueTest, StatsAreJson) {
  HintQueue q;
  q.Add(1, 1);
  q.Count(HintFate::kNotFound);
  q.CountLine();
  EXPECT_EQ(q.stats().ToJson(),
            "{\"lines\":1,\"queued_now\":1,\"taken\":0,\"connections\":0,\"refused\":0,"
            "\"resets\":0,\"queued\":1,\"duplicate\":0,\"not_found\":1,\"folder\":0,"
            "\"too_long\":0,\"malformed\":0,\"read_before\":0,\"reset\":0}");
}

}  // namespace
}  // namespace pcrfs::fs
