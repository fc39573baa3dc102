// The record scheduler's model of one storage source (fs/record_scheduler.h): from the timings
// of the reads it observes, when a speculative read may start and how large it is. Pure: no
// threads, no lock, no clock or /proc reads of its own. The caller passes `now` (a
// steady_clock time point; tests pass a fake timeline) and, for each read, its wall time and
// the time its thread waited for a CPU meanwhile (run_delay in /proc/thread-self/schedstat),
// so a timeline replays exactly.
//
// Decisions:
// - Chunk: a speculative read takes max(kTargetRead, 2 x latency) at the measured rate,
//   between kMinChunk and kMaxChunk, growing at most 2x per read (kFirstChunk before any
//   measurement; at least kMinConcurrentChunk on a source that takes concurrent reads).
//   The rate: recent speculative reads' bytes / seconds over a decaying window; on a source
//   with one queue, at most the slowest recent read's rate, which may rise by at most 1.5x per
//   second (a blkio throttle lets a burst through after an idle spell), each read timed
//   without the source's latency, and a read much slower than those before it timed by its
//   bytes past the largest recent fast read (the part the burst did not cover). A read whose
//   bytes were mostly cached already (moved < n / 2) is no rate sample for the floor.
//   Latency: the shortest recent demand read issued while no speculative read was in flight.
// - Congestion: a demand read slower than max(kCongestedRead, 4 x latency) (plus one chunk's
//   time at the measured rate if a speculative read was in flight at its start), times one
//   plus the other demand reads in progress then, found a one-queue source congested:
//   speculation there pauses for kCongestedPauseBytes' time at the measured rate, clamped to
//   [kMinCongestedPause, kMaxCongestedPause].
// - Starting: on a source that orders its own requests (concurrent > 0), up to
//   min(concurrent, kWorkers) in flight, demand reads or not, except before busy_until (the
//   source said it keeps enough unread bytes: NoteBusy). On a one-queue source, one in flight
//   (two once 2 x latency > kTargetRead), and only while no demand read is in progress, or
//   with none in flight once starved (queued work and nothing in flight for kStarvedAfter),
//   or when overlap is measured free: after kOverlapSamples demand reads alone and beside a
//   speculative read, at least half of those beside one finished before it, and beside ones
//   took on average less than kOverlapShare of a chunk's time longer than alone ones.
#pragma once

#include <chrono>
#include <cstdint>

namespace pcrfs::fs {

// What the scheduler reports (user.pcrfs.prefetch, metrics).
struct SchedulerStats {
  uint64_t demand_reads = 0, demand_bytes = 0;
  uint64_t speculative_reads = 0, speculative_bytes = 0;
  uint64_t promoted_reads = 0, promoted_bytes = 0;  // queued ranges a demand read took
  uint64_t cache_hits = 0, cache_hit_bytes = 0;     // RecordScheduler::NoteCacheHit
  uint64_t queued_bytes = 0;                        // speculative bytes not read yet
  uint64_t congested = 0;        // demand reads that found the source congested (a pause each)
  double congested_seconds = 0;  // the pauses' lengths, summed
  uint64_t chunk = 0;            // the next speculative read's size
  double rate = 0;               // measured streaming rate, bytes/s (0: not yet)
  double latency_seconds = 0;    // shortest recent demand read
  // Mean demand read with a speculative read in flight minus the mean without (0: not
  // measured yet), and whether that is small enough for speculation beside demand reads.
  double beside_extra_seconds = 0;
  double overtaking = 0;  // the share of those beside one that finished before it
  bool overlap = false;
};

class SourceModel {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  static constexpr uint64_t kMinChunk = uint64_t{16} << 10;
  static constexpr uint64_t kMaxChunk = uint64_t{16} << 20;
  static constexpr uint64_t kFirstChunk = uint64_t{1} << 20;  // before anything was measured
  static constexpr auto kTargetRead = std::chrono::milliseconds(4);
  static constexpr int kMaxInFlight = 2;  // on a latency-bound one-queue source
  // A source that orders its own requests gets up to min(its concurrency, kWorkers)
  // speculative reads at once, each of at least kMinConcurrentChunk (a request costs a round
  // trip). Also the scheduler's pool size (a one-queue source uses 1-2 of them).
  static constexpr int kWorkers = 12;
  static constexpr uint64_t kMinConcurrentChunk = uint64_t{512} << 10;
  static constexpr auto kCongestedRead = std::chrono::milliseconds(1);
  static constexpr uint64_t kCongestedPauseBytes = uint64_t{1} << 20;
  static constexpr auto kMinCongestedPause = std::chrono::milliseconds(2);
  static constexpr auto kMaxCongestedPause = std::chrono::milliseconds(50);
  static constexpr auto kStarvedAfter = std::chrono::milliseconds(4);
  static constexpr double kOverlapShare = 0.25;
  static constexpr uint32_t kOverlapSamples = 16;
  static constexpr auto kBusyRetry = std::chrono::milliseconds(20);

  // The source's time for a read: its wall time without the time its thread waited for a CPU
  // meanwhile, and at least wall / 16 (a probe that overstates the wait).
  static double SourceSeconds(double wall, double run_delay);

  // One demand read, as observed.
  struct Demand {
    uint64_t n = 0;
    double wall = 0, run_delay = 0;  // seconds
    bool alone = false;              // no speculative read was in flight when it started
    bool alone_throughout = false;   // ... and none started before it ended
    bool overtook = false;  // one was in flight when it started and had not finished at its end
    int others = 0;         // the other demand reads in progress when it started
    bool one_queue = true;  // the source has one queue (concurrent == 0)
  };
  // Counts a demand read that ended at `now`; returns whether it found the source congested
  // (speculation on a one-queue source then pauses until NotBefore).
  bool NoteDemand(const Demand& d, TimePoint now);

  // One speculative read that succeeded: n bytes asked, `moved` of them really transferred
  // (0: all were cached, no timing).
  struct Speculative {
    uint64_t n = 0, moved = 0;
    double wall = 0, run_delay = 0;
    bool one_queue = true;
  };
  // Counts it (ended at `now`) and updates the rate, the latency and the next chunk.
  void NoteSpeculative(const Speculative& s, TimePoint now);

  // Work was queued at `now` into an empty queue: the starvation clock starts if nothing is
  // in flight.
  void NoteQueuedIntoEmpty(TimePoint now) {
    if (in_flight_ == 0) idle_since_ = now;
  }
  // A speculative read starts on a source of this concurrency: returns its size.
  uint64_t Start(int concurrent);
  // A speculative read (of any outcome) ended at `now`.
  void NoteFinished(TimePoint now) {
    if (--in_flight_ == 0) idle_since_ = now;
  }
  // The source said it keeps enough unread bytes (ResourceExhausted): ask again later.
  void NoteBusy(TimePoint now) { busy_until_ = now + kBusyRetry; }

  // Whether a speculative read of a source of this concurrency (the queue's front) may start
  // at `now` with `demand_active` demand reads in progress.
  bool CanStart(TimePoint now, int concurrent, int demand_active) const;
  // Before when no speculative read of a source of this concurrency may start.
  TimePoint NotBefore(int concurrent) const;
  // When queued work with nothing in flight counts as starved (kStarvedAfter).
  TimePoint StarvedAt() const { return idle_since_ + kStarvedAfter; }
  int in_flight() const { return in_flight_; }
  uint64_t chunk() const { return chunk_; }
  // Whether a demand read is measured to take about as long beside a speculative read as
  // alone (kOverlapShare).
  bool OverlapIsFree() const;
  // The model's part of the stats (not the queue's or the cache hits).
  SchedulerStats stats() const;

 private:
  int MaxInFlight() const;

  SchedulerStats stats_;
  uint64_t chunk_ = kFirstChunk;
  int in_flight_ = 0;
  TimePoint busy_until_{};  // nothing starts before (a busy source)
  // Since when speculation has had work queued and nothing in flight (kStarvedAfter).
  TimePoint idle_since_{};
  // No speculative read of a one-queue source starts before (a congested source).
  TimePoint congested_until_{};
  // Recent speculative reads: bytes and seconds, summed over a window that decays.
  double window_bytes_ = 0, window_seconds_ = 0;
  // A source with one queue (a disk): the rate of the slowest recent read, allowed to rise by
  // at most kRateRisePerSecond per second since the last read (0: none yet).
  double floor_rate_ = 0;
  // The largest recent read (decaying) that ran at about the floor or faster: about how much a
  // throttle lets through at once after an idle spell.
  double fast_bytes_ = 0;
  TimePoint floor_at_{};
  // Shortest demand read of the current and the previous 256 reads.
  double min_demand_ = 0, min_demand_prev_ = 0;
  uint32_t demand_in_window_ = 0;
  // Demand reads from the device (not a cache) of a one-queue source, alone and beside a
  // speculative read: moving means of their seconds, and how many each has seen.
  double alone_mean_ = 0, beside_mean_ = 0;
  uint32_t alone_reads_ = 0, beside_reads_ = 0;
  // Of those beside one, the moving share that finished before it did.
  double overtaking_ = 0;
};

}  // namespace pcrfs::fs
