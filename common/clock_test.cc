#include "common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace pcrfs::timing {
namespace {

using std::chrono::milliseconds;

TEST(FakeClockTest, StandsStillUntilAdvanced) {
  FakeClock clock(Clock::WallTimePoint(std::chrono::seconds(1000)));
  const auto t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(milliseconds(1500));
  EXPECT_EQ(clock.Now() - t0, milliseconds(1500));
  EXPECT_EQ(clock.WallNow(), Clock::WallTimePoint(milliseconds(1001500)));
}

// A wait ends when the clock reaches its deadline, not before, however long that takes in
// real time; a deadline already passed returns at once.
TEST(FakeClockTest, AWaitEndsWhenTheClockReachesItsDeadline) {
  FakeClock clock;
  Mutex mu;
  CondVar cv;
  std::atomic<bool> woke{false};
  std::cv_status status = std::cv_status::no_timeout;
  const auto deadline = clock.Now() + milliseconds(20);
  std::thread waiter([&] {
    MutexLock l(&mu);
    while (clock.Now() < deadline) status = clock.WaitUntil(&cv, &mu, deadline);
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(clock.NextDeadline(), deadline);
  clock.Advance(milliseconds(19));
  ASSERT_TRUE(clock.AwaitWaiters(1));  // still waiting (woken or not, it waits again)
  EXPECT_FALSE(woke.load());
  clock.Advance(milliseconds(1));
  waiter.join();
  EXPECT_EQ(status, std::cv_status::timeout);
  EXPECT_EQ(clock.waiters(), 0u);
  MutexLock l(&mu);
  EXPECT_EQ(clock.WaitUntil(&cv, &mu, deadline), std::cv_status::timeout);
}

TEST(FakeClockTest, ASignalEndsAWaitWithoutTime) {
  FakeClock clock;
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread waiter([&] {
    MutexLock l(&mu);
    while (!ready)
      EXPECT_EQ(clock.WaitFor(&cv, &mu, std::chrono::hours(1)), std::cv_status::no_timeout);
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    MutexLock l(&mu);
    ready = true;
  }
  cv.SignalAll();
  waiter.join();
  EXPECT_EQ(clock.waiters(), 0u);
}

TEST(FakeClockTest, AwaitWaitersGivesUpWhenNobodyWaits) {
  FakeClock clock;
  EXPECT_FALSE(clock.AwaitWaiters(1, milliseconds(1)));
}

}  // namespace
}  // namespace pcrfs::timing
