#include "common/single_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pcrfs {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until `flights` has `n` loads running and `waiting` calls waiting for them.
void WaitForFlights(const SingleFlight<int, std::string>& flights, size_t n, size_t waiting = 0) {
  for (int i = 0; i < 10000 && (flights.in_flight() != n || flights.waiting() != waiting); ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(flights.in_flight(), n);
  ASSERT_EQ(flights.waiting(), waiting);
}

TEST(SingleFlightTest, ConcurrentCallsForOneKeyLoadOnce) {
  SingleFlight<int, std::string> flights;
  std::atomic<int> loads{0}, leaders{0};
  std::atomic<bool> release{false};
  constexpr int kThreads = 8;
  std::vector<std::string> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bool ran = false;
      got[t] = flights.Do(
          7,
          [&] {
            ++loads;
            while (!release) std::this_thread::sleep_for(1ms);
            return std::string("seven");
          },
          &ran);
      if (ran) ++leaders;
    });
  }
  WaitForFlights(flights, 1, kThreads - 1);  // one loads, the others wait for it
  release = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(leaders, 1);
  for (const auto& s : got) EXPECT_EQ(s, "seven");
  EXPECT_EQ(flights.in_flight(), 0u);
}

TEST(SingleFlightTest, OtherKeysLoadAtTheSameTime) {
  SingleFlight<int, std::string> flights;
  std::atomic<int> running{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      EXPECT_EQ(flights.Do(k,
                           [&] {
                             ++running;
                             while (!release) std::this_thread::sleep_for(1ms);
                             return std::to_string(k);
                           }),
                std::to_string(k));
    });
  }
  WaitForFlights(flights, 3);  // all three run at once: none waits for another key's load
  EXPECT_EQ(running, 3);
  release = true;
  for (auto& th : threads) th.join();
}

TEST(SingleFlightTest, AFinishedLoadRunsAgain) {
  SingleFlight<int, std::string> flights;
  int loads = 0;
  bool ran = false;
  EXPECT_EQ(flights.Do(
                1, [&] { return std::to_string(++loads); }, &ran),
            "1");
  EXPECT_TRUE(ran);
  EXPECT_EQ(flights.Do(
                1, [&] { return std::to_string(++loads); }, &ran),
            "2");
  EXPECT_TRUE(ran);
}

TEST(SingleFlightTest, AnExceptionReachesTheLeaderAndEveryWaiter) {
  SingleFlight<int, std::string> flights;
  std::atomic<bool> release{false};
  std::atomic<int> thrown{0}, loads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        flights.Do(3, [&]() -> std::string {
          ++loads;
          while (!release) std::this_thread::sleep_for(1ms);
          throw std::runtime_error("no memory");
        });
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "no memory");
        ++thrown;
      }
    });
  }
  WaitForFlights(flights, 1, 3);
  release = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(thrown, 4);
  EXPECT_EQ(flights.in_flight(), 0u);
  // The key is free again.
  EXPECT_EQ(flights.Do(3, [] { return std::string("ok"); }), "ok");
}

}  // namespace
}  // namespace pcrfs
