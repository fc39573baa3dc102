#include "common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace pcrfs {
namespace {

TEST(ParallelTest, ZeroThreadsMeansEveryCore) {
  EXPECT_EQ(ResolveThreads(3), 3u);
  EXPECT_EQ(ResolveThreads(0), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ParallelTest, EveryIndexRunsExactlyOnce) {
  for (unsigned threads : {0u, 1u, 2u, 7u}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<std::atomic<int>> calls(n);
      ParallelFor(n, threads, [&](size_t i) { calls[i]++; });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << i;
    }
  }
}

TEST(ParallelTest, UsesUpToThatManyThreadsIncludingTheCaller) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  std::atomic<int> running{0}, peak{0};
  ParallelFor(64, 4, [&](size_t) {
    const int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      std::lock_guard<std::mutex> l(mu);
      seen.insert(std::this_thread::get_id());
    }
    --running;
  });
  EXPECT_LE(seen.size(), 4u);
  EXPECT_LE(peak.load(), 4);
  EXPECT_GE(seen.size(), 2u);  // 64 sleeping items on 4 threads: more than one took part
  // Never more threads than items.
  std::set<std::thread::id> two;
  ParallelFor(2, 8, [&](size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> l(mu);
    two.insert(std::this_thread::get_id());
  });
  EXPECT_LE(two.size(), 2u);
}

}  // namespace
}  // namespace pcrfs
