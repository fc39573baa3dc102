// SourceModel on synthetic timelines: every read's times are given, `now` is a fake clock, so
// each decision is exact (no sleeps, no threads, no tolerances). Times and rates are powers
// of two where a value is compared, so the arithmetic is exact in binary.
#include "fs/source_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

namespace pcrfs::fs {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using TimePoint = SourceModel::TimePoint;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// The fake clock's origin: far from the epoch, as a steady clock is.
const TimePoint t0 = TimePoint{} + std::chrono::hours(1);

SourceModel::Speculative Spec(uint64_t n, double wall, bool one_queue = true,
                              uint64_t moved = UINT64_MAX, double run_delay = 0) {
  SourceModel::Speculative s;
  s.n = n;
  s.moved = moved == UINT64_MAX ? n : moved;
  s.wall = wall;
  s.run_delay = run_delay;
  s.one_queue = one_queue;
  return s;
}

SourceModel::Demand Alone(double wall, int others = 0, double run_delay = 0) {
  SourceModel::Demand d;
  d.n = 65536;
  d.wall = wall;
  d.run_delay = run_delay;
  d.alone = true;
  d.alone_throughout = true;
  d.others = others;
  return d;
}

SourceModel::Demand Beside(double wall, bool overtook) {
  SourceModel::Demand d = Alone(wall);
  d.alone = false;
  d.alone_throughout = false;
  d.overtook = overtook;
  return d;
}

// A one-queue source measured at 8 MiB/s (2^23 B/s): 1 MiB in 1/8 s.
void LearnSlowRate(SourceModel& m, TimePoint now) { m.NoteSpeculative(Spec(kMiB, 0.125), now); }

TEST(SourceModelTest, FirstChunkBeforeAnyMeasurement) {
  SourceModel m;
  EXPECT_EQ(m.chunk(), SourceModel::kFirstChunk);
  EXPECT_EQ(m.stats().rate, 0);
  // A source that takes concurrent reads gets at least kMinConcurrentChunk.
  EXPECT_EQ(m.Start(4), SourceModel::kFirstChunk);
}

TEST(SourceModelTest, ChunkTakesTheTargetTimeAtTheMeasuredRate) {
  SourceModel m;
  LearnSlowRate(m, t0);
  EXPECT_EQ(m.stats().rate, 8388608.0);
  // 4 ms at 2^23 B/s = 33554 bytes, rounded down to pages.
  EXPECT_EQ(m.chunk(), 32768u);
  EXPECT_EQ(m.Start(0), 32768u);
  EXPECT_EQ(m.Start(4), SourceModel::kMinConcurrentChunk) << "a request costs a round trip";
}

TEST(SourceModelTest, SlowSourceGetsTheSmallestChunk) {
  SourceModel m;
  m.NoteSpeculative(Spec(16384, 0.125), t0);  // 128 KiB/s: 4 ms is 524 bytes
  EXPECT_EQ(m.chunk(), SourceModel::kMinChunk);
}

TEST(SourceModelTest, ChunkGrowsAtMostTwicePerRead) {
  SourceModel m;
  // 1 GiB/s: 4 ms is 4294967 bytes.
  m.NoteSpeculative(Spec(kMiB, 1.0 / 1024), t0);
  EXPECT_EQ(m.chunk(), 2 * kMiB);
  m.NoteSpeculative(Spec(2 * kMiB, 2.0 / 1024), t0);
  EXPECT_EQ(m.chunk(), 4 * kMiB);
  m.NoteSpeculative(Spec(4 * kMiB, 4.0 / 1024), t0);
  EXPECT_EQ(m.chunk(), 4292608u);  // 4294967 rounded down to pages
  // And shrinks at once.
  m.NoteSpeculative(Spec(kMiB, 0.125), t0);
  EXPECT_EQ(m.chunk(), 32768u);
}

TEST(SourceModelTest, WaitingForACpuIsNotTheSourcesTime) {
  SourceModel m;
  // 1/4 s of wall time, of which 1/8 s the worker waited for a CPU: 8 MiB/s as above.
  m.NoteSpeculative(Spec(kMiB, 0.25, true, kMiB, 0.125), t0);
  EXPECT_EQ(m.stats().rate, 8388608.0);
  EXPECT_EQ(m.chunk(), 32768u);
  // A probe that says more than the wall time leaves wall / 16.
  EXPECT_EQ(SourceModel::SourceSeconds(0.5, 1.0), 0.5 / 16);
  // A demand read that took 10 ms, 9.5 of them waiting for a CPU, is no congestion.
  EXPECT_FALSE(m.NoteDemand(Alone(0.010, 0, 0.0095), t0));
  EXPECT_TRUE(m.NoteDemand(Alone(0.010, 0, 0.0), t0));
}

TEST(SourceModelTest, ReadsOfCachedBytesDoNotInflateTheRate) {
  SourceModel m;
  m.NoteSpeculative(Spec(kMiB, 1e-5, true, /*moved=*/0), t0);  // all cached: no sample
  EXPECT_EQ(m.stats().rate, 0);
  EXPECT_EQ(m.chunk(), SourceModel::kFirstChunk);
  EXPECT_EQ(m.stats().speculative_reads, 1u);
  EXPECT_EQ(m.stats().speculative_bytes, kMiB);
  LearnSlowRate(m, t0);
  // Mostly cached (4 KiB of 1 MiB moved, in 10 us): the window's mean rises a little, but
  // the slowest recent read's rate bounds it on a one-queue source.
  m.NoteSpeculative(Spec(kMiB, 1e-5, true, 4096), t0);
  EXPECT_EQ(m.stats().rate, 8388608.0);
  // Mostly cached and slow (it waited for pages the readers had in flight): no floor sample
  // either, so the rate is the window's mean, not 4 KiB per 1/8 s.
  SourceModel w;
  LearnSlowRate(w, t0);
  w.NoteSpeculative(Spec(kMiB, 0.125, true, 4096), t0);
  EXPECT_EQ(w.stats().rate, (0.75 * kMiB + 4096) / (0.75 * 0.125 + 0.125));
}

TEST(SourceModelTest, AThrottlesBurstDoesNotMakeChunksOfMiBs) {
  SourceModel m;
  // A throttle's burst: 2 MiB at 1 GiB/s.
  m.NoteSpeculative(Spec(2 * kMiB, 2.0 / 1024), t0);
  EXPECT_EQ(m.chunk(), 2 * kMiB);
  // The next 4 MiB outgrow it: 2 MiB come at once, 2 MiB at 16 MiB/s (1/8 s). By its whole
  // size 32 MiB/s; by the bytes past the burst 16 MiB/s, the throttle's rate.
  m.NoteSpeculative(Spec(4 * kMiB, 0.125), t0);
  EXPECT_EQ(m.stats().rate, 16777216.0);
  EXPECT_EQ(m.chunk(), 65536u);  // 4 ms at 16 MiB/s
  // One second later a fast read may raise the believed rate by 1.5x, no more.
  m.NoteSpeculative(Spec(65536, 65536.0 / (1 << 30)), t0 + std::chrono::seconds(1));
  EXPECT_EQ(m.stats().rate, 1.5 * 16777216.0);
  EXPECT_EQ(m.chunk(), 98304u);  // 100663 bytes, rounded down to pages
}

TEST(SourceModelTest, ASourceThatTakesConcurrentReadsIsRatedByItsMean) {
  SourceModel m;
  m.NoteSpeculative(Spec(2 * kMiB, 2.0 / 1024, false), t0);
  m.NoteSpeculative(Spec(4 * kMiB, 0.125, false), t0);
  // (0.75 * 2 MiB + 4 MiB) / (0.75 * 2/1024 s + 1/8 s): no floor.
  EXPECT_EQ(m.stats().rate, (0.75 * 2 * kMiB + 4 * kMiB) / (0.75 * 2.0 / 1024 + 0.125));
}

TEST(SourceModelTest, LatencyBoundSourceGetsChunksOfTwiceItsLatency) {
  SourceModel m;
  for (int i = 0; i < 3; ++i) m.NoteDemand(Alone(0.020), t0);  // 20 ms each: the latency
  // 128 MiB/s including the latency: a chunk takes 40 ms, 5368709 bytes, reached by doubling.
  const double rate = 134217728.0;
  uint64_t expect[] = {2 * kMiB, 4 * kMiB, 5365760, 5365760};
  for (uint64_t want : expect) {
    const uint64_t n = m.chunk();
    m.NoteSpeculative(Spec(n, static_cast<double>(n) / rate, false), t0);
    EXPECT_EQ(m.chunk(), want);
  }
  EXPECT_EQ(m.stats().latency_seconds, 0.020);
}

TEST(SourceModelTest, TheLatencyIsTheShortestRecentDemandRead) {
  SourceModel m;
  m.NoteDemand(Alone(20e-6), t0);          // a cache hit: no sample
  m.NoteDemand(Beside(0.001, false), t0);  // may have queued behind a speculative read
  for (int i = 0; i < 253; ++i) m.NoteDemand(Alone(0.004), t0);
  m.NoteSpeculative(Spec(kMiB, 0.125), t0);
  EXPECT_EQ(m.stats().latency_seconds, 0.004);
  // The 256th read ends the window; the previous window's minimum still counts through the
  // next one.
  for (int i = 0; i < 256; ++i) m.NoteDemand(Alone(0.008), t0);
  m.NoteSpeculative(Spec(kMiB, 0.125), t0);
  EXPECT_EQ(m.stats().latency_seconds, 0.004);
  m.NoteDemand(Alone(0.008), t0);
  m.NoteSpeculative(Spec(kMiB, 0.125), t0);
  EXPECT_EQ(m.stats().latency_seconds, 0.008);
}

TEST(SourceModelTest, ACongestedDemandReadPausesSpeculation) {
  SourceModel m;
  LearnSlowRate(m, t0);  // 8 MiB/s, chunk 32 KiB, latency 0
  // Allowed: max(1 ms, 4 x latency).
  EXPECT_FALSE(m.NoteDemand(Alone(0.0009), t0));
  EXPECT_TRUE(m.CanStart(t0, 0, 0));
  EXPECT_TRUE(m.NoteDemand(Alone(0.002), t0));
  // 1 MiB's time at 8 MiB/s is 125 ms: the longest pause, 50 ms.
  EXPECT_EQ(m.NotBefore(0), t0 + milliseconds(50));
  EXPECT_FALSE(m.CanStart(t0 + microseconds(49999), 0, 0));
  EXPECT_TRUE(m.CanStart(t0 + milliseconds(50), 0, 0));
  EXPECT_EQ(m.NotBefore(4), TimePoint{}) << "a source with its own queue is not paused";
  EXPECT_EQ(m.stats().congested, 1u);
  EXPECT_EQ(m.stats().congested_seconds, 0.05);
}

TEST(SourceModelTest, ReadersQueuedOnEachOtherDoNotPauseSpeculation) {
  SourceModel m;
  LearnSlowRate(m, t0);
  // Each of the 3 other demand reads in progress may be ahead of it: 4 x 1 ms allowed.
  EXPECT_FALSE(m.NoteDemand(Alone(0.0039, 3), t0));
  EXPECT_TRUE(m.NoteDemand(Alone(0.0041, 3), t0 + std::chrono::seconds(1)));
  EXPECT_EQ(m.stats().congested, 1u);
}

TEST(SourceModelTest, ADemandReadBesideASpeculativeOneIsAllowedOneChunk) {
  SourceModel m;
  LearnSlowRate(m, t0);
  // 1 ms + 32 KiB at 8 MiB/s (3.90625 ms).
  EXPECT_FALSE(m.NoteDemand(Beside(0.0049, false), t0));
  EXPECT_TRUE(m.NoteDemand(Beside(0.0050, false), t0));
}

TEST(SourceModelTest, APauseOnAFastSourceIsShort) {
  SourceModel m;
  m.NoteSpeculative(Spec(kMiB, 1.0 / 256), t0);  // 256 MiB/s: 1 MiB in 3.90625 ms
  EXPECT_TRUE(m.NoteDemand(Alone(0.002), t0));
  EXPECT_EQ(m.NotBefore(0), t0 + microseconds(3906) + std::chrono::nanoseconds(250));
  SourceModel fast;
  fast.NoteSpeculative(Spec(kMiB, 1.0 / 1024), t0);  // 1 GiB/s: 1 ms, so the shortest pause
  EXPECT_TRUE(fast.NoteDemand(Alone(0.002), t0));
  EXPECT_EQ(fast.NotBefore(0), t0 + milliseconds(2));
}

TEST(SourceModelTest, AConcurrentSourceIsNeverCongestedAndSpeculatesBesideDemand) {
  SourceModel m;
  SourceModel::Demand d = Alone(1.0);
  d.one_queue = false;
  EXPECT_FALSE(m.NoteDemand(d, t0));
  EXPECT_TRUE(m.CanStart(t0, 4, /*demand_active=*/8));
  for (int i = 0; i < 3; ++i) m.Start(4);
  EXPECT_TRUE(m.CanStart(t0, 4, 8));
  m.Start(4);
  EXPECT_FALSE(m.CanStart(t0, 4, 8)) << "at most 4 in flight";
  m.NoteFinished(t0);
  EXPECT_FALSE(m.CanStart(t0, 3, 0)) << "at most the source's concurrency";
  EXPECT_TRUE(m.CanStart(t0, 4, 0));
  // A source that takes more than the pool: at most kWorkers in flight.
  SourceModel wide;
  for (int i = 0; i < SourceModel::kWorkers; ++i) {
    EXPECT_TRUE(wide.CanStart(t0, 4 * SourceModel::kWorkers, 8)) << i;
    wide.Start(4 * SourceModel::kWorkers);
  }
  EXPECT_FALSE(wide.CanStart(t0, 4 * SourceModel::kWorkers, 8)) << "at most kWorkers in flight";
}

TEST(SourceModelTest, ABusySourceIsAskedAgainLater) {
  SourceModel m;
  m.NoteBusy(t0);
  EXPECT_EQ(m.NotBefore(4), t0 + milliseconds(20));
  EXPECT_FALSE(m.CanStart(t0 + milliseconds(19), 4, 0));
  EXPECT_TRUE(m.CanStart(t0 + milliseconds(20), 4, 0));
}

TEST(SourceModelTest, OneQueueSourceSpeculatesOnlyInGapsUntilStarved) {
  SourceModel m;
  LearnSlowRate(m, t0);
  m.NoteQueuedIntoEmpty(t0);
  EXPECT_TRUE(m.CanStart(t0, 0, 0)) << "no demand read in progress";
  EXPECT_FALSE(m.CanStart(t0, 0, 1));
  EXPECT_FALSE(m.CanStart(t0 + microseconds(3999), 0, 1));
  EXPECT_EQ(m.StarvedAt(), t0 + milliseconds(4));
  EXPECT_TRUE(m.CanStart(t0 + milliseconds(4), 0, 4)) << "starved: one chunk anyway";
  m.Start(0);
  EXPECT_FALSE(m.CanStart(t0 + milliseconds(5), 0, 0)) << "one chunk in flight at most";
  m.NoteFinished(t0 + milliseconds(6));  // nothing in flight: the starvation clock restarts
  EXPECT_FALSE(m.CanStart(t0 + milliseconds(9), 0, 1));
  EXPECT_TRUE(m.CanStart(t0 + milliseconds(10), 0, 1));
}

TEST(SourceModelTest, ALatencyBoundOneQueueSourceGetsTwoInFlight) {
  SourceModel m;
  m.NoteDemand(Alone(0.020), t0);
  LearnSlowRate(m, t0);                                  // latency 20 ms: 2 x latency > 4 ms
  const TimePoint later = t0 + std::chrono::seconds(1);  // after the 20 ms read's pause
  m.Start(0);
  EXPECT_TRUE(m.CanStart(later, 0, 0));
  m.Start(0);
  EXPECT_FALSE(m.CanStart(later, 0, 0));
  SourceModel disk;
  disk.NoteDemand(Alone(0.0001), t0);
  LearnSlowRate(disk, t0);
  disk.Start(0);
  EXPECT_FALSE(disk.CanStart(later, 0, 0));
}

// 16 demand reads alone (0.8 ms) and 16 beside a speculative read: whether speculation may
// run beside demand reads.
SourceModel Overlap(double beside_seconds, bool overtook, int beside_reads = 16) {
  SourceModel m;
  LearnSlowRate(m, t0);  // chunk 32 KiB at 8 MiB/s: 3.90625 ms; a quarter is 0.9765625 ms
  for (int i = 0; i < 16; ++i) m.NoteDemand(Alone(0.0008), t0);
  for (int i = 0; i < beside_reads; ++i) m.NoteDemand(Beside(beside_seconds, overtook), t0);
  m.NoteQueuedIntoEmpty(t0);  // not starved
  return m;
}

TEST(SourceModelTest, ADeviceThatServesReadsSideBySideGetsSpeculationBesideDemand) {
  const SourceModel m = Overlap(0.0009, true);
  EXPECT_TRUE(m.OverlapIsFree());
  EXPECT_TRUE(m.stats().overlap);
  EXPECT_EQ(m.stats().overtaking, 1.0);
  EXPECT_TRUE(m.CanStart(t0, 0, 3)) << "beside demand reads, not starved";
  EXPECT_EQ(m.stats().congested, 0u);
}

TEST(SourceModelTest, AFifoDeviceGetsNoSpeculationBesideDemand) {
  // As fast, but no demand read overtook the speculative one it met (each waited for it).
  const SourceModel m = Overlap(0.0009, false);
  EXPECT_FALSE(m.OverlapIsFree());
  EXPECT_FALSE(m.CanStart(t0, 0, 1));
}

TEST(SourceModelTest, ADeviceSlowerBesideSpeculationGetsNoneBesideDemand) {
  // 1 ms longer beside one: over a quarter of a chunk's time (0.977 ms).
  const SourceModel m = Overlap(0.0018, true);
  EXPECT_FALSE(m.OverlapIsFree());
  EXPECT_GT(m.stats().beside_extra_seconds, 0.0009765625);
  EXPECT_FALSE(m.CanStart(t0, 0, 1));
}

TEST(SourceModelTest, OverlapNeedsEnoughSamples) {
  EXPECT_FALSE(Overlap(0.0009, true, 15).OverlapIsFree());
  EXPECT_EQ(Overlap(0.0009, true, 15).stats().beside_extra_seconds, 0);
  // Reads that met a speculative read only after they started are neither sample.
  SourceModel m;
  LearnSlowRate(m, t0);
  for (int i = 0; i < 16; ++i) {
    SourceModel::Demand d = Alone(0.0008);
    d.alone_throughout = false;
    m.NoteDemand(d, t0);
  }
  for (int i = 0; i < 16; ++i) m.NoteDemand(Beside(0.0009, true), t0);
  EXPECT_FALSE(m.OverlapIsFree());
}

}  // namespace
}  // namespace pcrfs::fs
