#include "common/mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace pcrfs {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The state the tests share, annotated as production code is (the clang build checks it too).
struct Shared {
  Mutex mu;
  CondVar cv;
  uint64_t count GUARDED_BY(mu) = 0;
  bool ready GUARDED_BY(mu) = false;
  int tokens GUARDED_BY(mu) = 0;
  int woken GUARDED_BY(mu) = 0;
};

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Shared s;
  constexpr int kThreads = 4, kIncrements = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        MutexLock l(&s.mu);
        const uint64_t c = s.count;  // a lost update if two threads were in here at once
        std::this_thread::yield();
        s.count = c + 1;
        if (i % 1000 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock l(&s.mu);
  EXPECT_EQ(s.count, uint64_t{kThreads} * kIncrements);
}

TEST(MutexTest, MutexLockUnlockLetsAnotherThreadIn) {
  Shared s;
  MutexLock l(&s.mu);
  std::thread other([&] {
    MutexLock l2(&s.mu);
    s.count = 7;
  });
  l.Unlock();
  other.join();  // would deadlock if Unlock kept the mutex
  l.Lock();
  EXPECT_EQ(s.count, 7u);
}

TEST(MutexTest, ExplicitLockAndUnlock) {
  Shared s;
  s.mu.Lock();
  s.count = 1;
  s.mu.AssertHeld();
  s.mu.Unlock();
  std::thread other([&] {
    MutexLock l(&s.mu);  // would block forever if Unlock had not released it
    s.count = 2;
  });
  other.join();
  MutexLock l(&s.mu);
  EXPECT_EQ(s.count, 2u);
}

TEST(CondVarTest, SignalWakesAWaiter) {
  Shared s;
  std::atomic<bool> waiting{false};
  std::thread waiter([&] {
    MutexLock l(&s.mu);
    waiting = true;
    while (!s.ready) s.cv.Wait(&s.mu);
    s.count = 1;
  });
  while (!waiting) std::this_thread::yield();
  {
    MutexLock l(&s.mu);  // the waiter holds mu until it waits, so it is waiting (or done) now
    s.ready = true;
    s.cv.Signal();
  }
  waiter.join();
  MutexLock l(&s.mu);
  EXPECT_EQ(s.count, 1u);
}

TEST(CondVarTest, PredicateWaitReturnsOncePredicateHolds) {
  Shared s;
  std::thread producer([&] {
    for (int i = 0; i < 5; ++i) {
      MutexLock l(&s.mu);
      ++s.count;  // wake-ups while the predicate is still false: the waiter must go on waiting
      s.cv.SignalAll();
    }
    MutexLock l(&s.mu);
    s.ready = true;
    s.cv.SignalAll();
  });
  {
    MutexLock l(&s.mu);
    s.cv.Wait(&s.mu, [&]() REQUIRES(s.mu) { return s.ready; });
    EXPECT_TRUE(s.ready);
    EXPECT_EQ(s.count, 5u);  // ready is set after the five increments
  }
  producer.join();
}

TEST(CondVarTest, SignalAllWakesEveryWaiter) {
  Shared s;
  constexpr int kWaiters = 4;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      MutexLock l(&s.mu);
      while (!s.ready) s.cv.Wait(&s.mu);
      ++s.woken;
    });
  }
  {
    MutexLock l(&s.mu);
    s.ready = true;
    s.cv.SignalAll();  // one call: a waiter that has not waited yet sees ready and never waits
  }
  for (auto& t : waiters) t.join();
  MutexLock l(&s.mu);
  EXPECT_EQ(s.woken, kWaiters);
}

TEST(CondVarTest, EachSignalHandsOneTokenToOneOfTwoWaiters) {
  Shared s;
  CondVar consumed;  // the waiters tell the main thread that they took a token
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&] {
      MutexLock l(&s.mu);
      while (s.tokens == 0) s.cv.Wait(&s.mu);
      --s.tokens;
      ++s.woken;
      consumed.SignalAll();
    });
  }
  for (int round = 1; round <= 2; ++round) {
    MutexLock l(&s.mu);
    ++s.tokens;
    s.cv.Signal();
    while (s.woken < round) consumed.Wait(&s.mu);
    EXPECT_EQ(s.woken, round);
    EXPECT_EQ(s.tokens, 0);
  }
  for (auto& t : waiters) t.join();
}

TEST(CondVarTest, WaitForTimesOutWithoutSignal) {
  Shared s;
  MutexLock l(&s.mu);
  const auto start = steady_clock::now();
  EXPECT_FALSE(s.cv.WaitFor(&s.mu, milliseconds(30), [&]() REQUIRES(s.mu) { return s.ready; }));
  EXPECT_GE(steady_clock::now() - start, milliseconds(30));
  // The plain form reports the timeout too (a spurious wake-up would report no_timeout, so
  // loop until the deadline has passed).
  const auto deadline = steady_clock::now() + milliseconds(10);
  std::cv_status status = std::cv_status::no_timeout;
  while (status == std::cv_status::no_timeout) status = s.cv.WaitUntil(&s.mu, deadline);
  EXPECT_GE(steady_clock::now(), deadline);
  // The mutex is held again after a timeout: another thread cannot take it until we let go.
  std::atomic<bool> entered{false};
  std::thread other([&] {
    MutexLock l2(&s.mu);
    entered = true;
  });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(entered);
  l.Unlock();
  other.join();
  EXPECT_TRUE(entered);
}

TEST(CondVarTest, WaitForReturnsTrueWhenSignalledBeforeTheTimeout) {
  Shared s;
  std::thread signaller([&] {
    MutexLock l(&s.mu);
    s.ready = true;
    s.cv.SignalAll();
  });
  {
    MutexLock l(&s.mu);
    // A long timeout that is never reached: the signal (or ready already set) ends the wait.
    EXPECT_TRUE(
        s.cv.WaitFor(&s.mu, std::chrono::minutes(10), [&]() REQUIRES(s.mu) { return s.ready; }));
  }
  signaller.join();
}

}  // namespace
}  // namespace pcrfs
