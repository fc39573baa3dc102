#include "fs/source_model.h"

#include <algorithm>
#include <cmath>

namespace pcrfs::fs {
namespace {

// Demand reads faster than this came from a cache, not the device: they say nothing about the
// source's latency.
constexpr double kCacheHitSeconds = 50e-6;
// The timing window: each read's weight decays by this factor per later read.
constexpr double kDecay = 0.75;
constexpr uint32_t kLatencyWindow = 256;
// The weight of the newest read in the alone / beside means (kOverlapShare).
constexpr double kOverlapWeight = 1.0 / 16;
// How fast the rate of a one-queue source may be believed to grow: x1.5 per second.
constexpr double kRateRisePerSecond = 1.5;

double ToSeconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

double SourceModel::SourceSeconds(double wall, double run_delay) {
  return std::max(wall - run_delay, wall / 16);
}

bool SourceModel::NoteDemand(const Demand& d, TimePoint now) {
  const double seconds = SourceSeconds(d.wall, d.run_delay);
  ++stats_.demand_reads;
  stats_.demand_bytes += d.n;
  bool paused = false;
  // A read that may have queued behind a speculative one says nothing about the source.
  if (d.alone && seconds >= kCacheHitSeconds && (min_demand_ == 0 || seconds < min_demand_)) {
    min_demand_ = seconds;
  }
  // Congested: slower than the source's latency allows (and than one speculative chunk at
  // the measured rate, if one may have been ahead of it in the source's queue), and than the
  // demand reads in progress when it started allow: each may be ahead of it in that queue.
  double allowed =
      std::max(std::chrono::duration<double>(kCongestedRead).count(), 4 * stats_.latency_seconds);
  if (!d.alone) {
    allowed = stats_.rate > 0 ? allowed + static_cast<double>(chunk_) / stats_.rate : seconds;
  }
  allowed *= 1 + d.others;
  if (d.one_queue && d.n > 0 && seconds > allowed) {
    ++stats_.congested;
    const double most = std::chrono::duration<double>(kMaxCongestedPause).count();
    const double pause =
        std::clamp(stats_.rate > 0 ? static_cast<double>(kCongestedPauseBytes) / stats_.rate : most,
                   std::chrono::duration<double>(kMinCongestedPause).count(), most);
    stats_.congested_seconds += pause;
    congested_until_ = std::max(
        congested_until_, now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(pause)));
    paused = true;
  }
  // A read that met a speculative one only after it started is neither sample.
  if (d.one_queue && seconds >= kCacheHitSeconds && (!d.alone || d.alone_throughout)) {
    double& mean = d.alone ? alone_mean_ : beside_mean_;
    uint32_t& reads = d.alone ? alone_reads_ : beside_reads_;
    mean = reads == 0 ? seconds : mean + (seconds - mean) * kOverlapWeight;
    if (!d.alone) {
      const double o = d.overtook ? 1 : 0;
      overtaking_ = reads == 0 ? o : overtaking_ + (o - overtaking_) * kOverlapWeight;
    }
    if (reads < kOverlapSamples) ++reads;
  }
  if (++demand_in_window_ >= kLatencyWindow) {
    min_demand_prev_ = min_demand_;
    min_demand_ = 0;
    demand_in_window_ = 0;
  }
  return paused;
}

void SourceModel::NoteSpeculative(const Speculative& s, TimePoint now) {
  const uint64_t n = s.n, moved = s.moved;
  const double seconds = SourceSeconds(s.wall, s.run_delay);
  ++stats_.speculative_reads;
  stats_.speculative_bytes += n;
  if (moved == 0) return;
  window_bytes_ = window_bytes_ * kDecay + static_cast<double>(moved);
  window_seconds_ = window_seconds_ * kDecay + seconds;
  if (window_seconds_ <= 0) return;
  double rate = window_bytes_ / window_seconds_;
  double latency = min_demand_prev_;
  if (min_demand_ > 0 && (latency == 0 || min_demand_ < latency)) latency = min_demand_;
  if (s.one_queue) {
    // The slowest recent read, not the mean: a read that met a throttle's burst says nothing
    // about the rate a demand read queued behind the next one will see.
    double floor = 0;
    if (floor_rate_ > 0)
      floor = floor_rate_ * std::pow(kRateRisePerSecond, ToSeconds(now - floor_at_));
    // A read that found most of its bytes cached (the readers' own reads brought them in) is
    // no sample: its time is mostly copies, or a wait for pages already in flight.
    if (2 * moved >= n && seconds > 0) {
      // The transfer's time: without the source's latency, which a small read would
      // otherwise take for a slow transfer (chunks shrinking to kMinChunk on a 1 ms source),
      // and which hides how fast a throttle's burst comes.
      const double transfer = std::max(seconds - latency, seconds / 8);
      double this_read = static_cast<double>(moved) / transfer;
      if (floor > 0 && this_read < floor / 2) {
        // Much slower than the reads before it: it outgrew what a throttle lets through at
        // once. Its bytes up to the largest recent fast read most likely came at once too,
        // so only the rest tells the rate.
        if (static_cast<double>(moved) >= 2 * fast_bytes_) {  // clearly outgrew it
          this_read = std::min(this_read, (static_cast<double>(moved) - fast_bytes_) / transfer);
        }
      } else {
        fast_bytes_ = std::max(fast_bytes_ * kDecay, static_cast<double>(moved));
      }
      floor = floor > 0 ? std::min(floor, this_read) : this_read;
      floor_rate_ = floor;
      floor_at_ = now;
    }
    if (floor > 0) rate = std::min(rate, floor);
  }
  const double target = std::max(std::chrono::duration<double>(kTargetRead).count(), 2 * latency);
  const double want =
      std::clamp(rate * target, static_cast<double>(kMinChunk), static_cast<double>(kMaxChunk));
  // Shrink at once, grow at most 2x per read: one read that came from a cache must not make
  // the next one take a second on the device.
  chunk_ = std::min(static_cast<uint64_t>(want), 2 * chunk_);
  chunk_ = std::max(chunk_ & ~uint64_t{4095}, kMinChunk);
  stats_.rate = rate;
  stats_.latency_seconds = latency;
}

uint64_t SourceModel::Start(int concurrent) {
  ++in_flight_;
  return concurrent > 0 ? std::max(chunk_, kMinConcurrentChunk) : chunk_;
}

SourceModel::TimePoint SourceModel::NotBefore(int concurrent) const {
  if (concurrent > 0) return busy_until_;
  return std::max(busy_until_, congested_until_);
}

bool SourceModel::CanStart(TimePoint now, int concurrent, int demand_active) const {
  if (NotBefore(concurrent) > now) return false;
  if (concurrent > 0) return in_flight_ < std::min(concurrent, kWorkers);
  return in_flight_ < MaxInFlight() &&
         (demand_active == 0 ||
          (in_flight_ == 0 && (now >= idle_since_ + kStarvedAfter || OverlapIsFree())));
}

bool SourceModel::OverlapIsFree() const {
  if (alone_reads_ < kOverlapSamples || beside_reads_ < kOverlapSamples || stats_.rate <= 0) {
    return false;
  }
  return overtaking_ >= 0.5 &&
         beside_mean_ - alone_mean_ < kOverlapShare * static_cast<double>(chunk_) / stats_.rate;
}

int SourceModel::MaxInFlight() const {
  // On a source whose latency is small against a chunk's transfer (a local disk), one read in
  // flight keeps it busy, and a demand read on a FIFO device waits for at most that one. On a
  // latency-bound source a second read hides the first one's latency; there demand reads do
  // not queue behind speculative ones (requests overlap in the latency).
  return 2 * stats_.latency_seconds > std::chrono::duration<double>(kTargetRead).count()
             ? kMaxInFlight
             : 1;
}

SchedulerStats SourceModel::stats() const {
  SchedulerStats s = stats_;
  s.chunk = chunk_;
  if (alone_reads_ >= kOverlapSamples && beside_reads_ >= kOverlapSamples) {
    s.beside_extra_seconds = beside_mean_ - alone_mean_;
  }
  s.overtaking = overtaking_;
  s.overlap = OverlapIsFree();
  return s;
}

}  // namespace pcrfs::fs
