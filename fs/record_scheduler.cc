#include "fs/record_scheduler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "common/file_util.h"
#include "common/thread_name.h"

namespace pcrfs::fs {
namespace {

// Demand reads faster than this came from a cache, not the device: they say nothing about the
// source's latency.
constexpr double kCacheHitSeconds = 50e-6;
// The timing window: each read's weight decays by this factor per later read.
constexpr double kDecay = 0.75;
constexpr uint32_t kLatencyWindow = 256;
// The weight of the newest read in the alone / beside means (RecordScheduler::kOverlapShare).
constexpr double kOverlapWeight = 1.0 / 16;
// How fast the rate of a one-queue source may be believed to grow: x1.5 per second.
constexpr double kRateRisePerSecond = 1.5;

// Seconds the calling thread has waited for a CPU while runnable (the second field of
// /proc/thread-self/schedstat: run_delay, ns), from `fd` opened on that file by this thread;
// 0 if the kernel does not say. A speculative read's wall time minus this is the time the
// source took: on two cores busy decoding (a DataLoader), a worker woken by its read's
// completion waited for a core for several ms, so 16 KiB reads under a 10 MB/s cap measured
// below 1 MB/s and speculation crawled in 16 KiB chunks.
double RunDelaySeconds(const UniqueFd& fd) {
  if (fd.get() < 0) return 0;
  char buf[96];
  const ssize_t n = ::pread(fd.get(), buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char* end = nullptr;
  std::strtoull(buf, &end, 10);  // time on a CPU
  const unsigned long long delay = std::strtoull(end, nullptr, 10);
  return static_cast<double>(delay) * 1e-9;
}

}  // namespace

RecordScheduler::RecordScheduler(OnArrived on_arrived) : on_arrived_(std::move(on_arrived)) {
  for (int i = 0; i < kWorkers; ++i) pool_.emplace_back([this] { Worker(); });
}

RecordScheduler::~RecordScheduler() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
    queued_.clear();
  }
  cv_.SignalAll();
  for (auto& t : pool_) t.join();
}

void RecordScheduler::Insert(RangeSet* set, uint64_t begin, uint64_t end,
                             std::vector<Range>* added) {
  if (begin >= end) return;
  // The first range that ends at or after begin (ranges are disjoint and not adjacent).
  auto it = set->upper_bound(begin);
  if (it != set->begin() && std::prev(it)->second >= begin) --it;
  uint64_t new_begin = begin, new_end = end, pos = begin;
  while (it != set->end() && it->first <= end) {
    if (added != nullptr && it->first > pos) added->push_back({pos, it->first - pos});
    pos = std::max(pos, it->second);
    new_begin = std::min(new_begin, it->first);
    new_end = std::max(new_end, it->second);
    it = set->erase(it);
  }
  if (added != nullptr && pos < end) added->push_back({pos, end - pos});
  (*set)[new_begin] = new_end;
}

Status RecordScheduler::Read(const RandomAccessFile& file, uint64_t offset, size_t n,
                             uint8_t* dst) {
  return Demand(file, n, [&] { return file.Read(offset, n, dst); });
}

Status RecordScheduler::Demand(const RandomAccessFile& file, uint64_t n,
                               const std::function<Status()>& read) {
  // Other demand reads in progress: this one may queue behind them at the source.
  const int others = demand_active_.fetch_add(1, std::memory_order_acq_rel);
  // Speculative reads in flight at its start: those started and not finished (finished is
  // read first, so a read that finishes in between is counted in flight, not the reverse).
  DemandTiming t;
  t.others = others;
  const uint64_t finished_before = speculative_finished_.load(std::memory_order_acquire);
  const uint64_t started_before = speculative_started_.load(std::memory_order_acquire);
  t.alone = started_before == finished_before;
  // The source's time, as for speculative reads: without the time this thread waited for a
  // CPU (a FUSE thread woken by its read's completion on two busy cores; a test beside other
  // tests: four readers' reads taken for congested ones, 24 pauses of 50 ms). (Opened by the
  // thread that reads it; the daemon forks before any demand read.)
  thread_local const UniqueFd schedstat(
      ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  const double delay_before = RunDelaySeconds(schedstat);
  const auto start = Clock::now();
  Status s = read();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  t.seconds = std::max(wall - (RunDelaySeconds(schedstat) - delay_before), wall / 16);
  // One in flight at its start had not finished at its end: this read overtook it. Alone all
  // along: none in flight at its start, and none started during it.
  t.overtook = !t.alone && speculative_finished_.load(std::memory_order_acquire) < started_before;
  t.alone_throughout =
      t.alone && speculative_started_.load(std::memory_order_acquire) == started_before;
  bool wake = false;
  {
    MutexLock l(&mu_);
    const bool paused = NoteDemandLocked(n, t, file.ConcurrentSpeculativeReads() == 0);
    // Wake a worker only if one is waiting and could start now (a page-cache hit per piece
    // must not cost two thread wake-ups), or must now wait for the pause's end, not for a
    // signal.
    wake = (demand_active_.fetch_sub(1, std::memory_order_acq_rel) == 1 && idle_workers_ > 0 &&
            CanStartLocked(Clock::now())) ||
           (paused && idle_workers_ > 0);
  }
  if (wake) cv_.Signal();
  return s;
}

void RecordScheduler::WillRead(const RandomAccessFile& file, const std::vector<Range>& ranges) {
  std::vector<Range> promoted;
  if (file.ConcurrentSpeculativeReads() > 0 &&
      demand_active_.load(std::memory_order_acquire) >= kPromoteAtDemandReads) {
    MutexLock l(&mu_);
    for (const Range& r : ranges) PromoteLocked(file, r, &promoted);
  }
  // The promoted windows first: the pieces inside them then join those fetches.
  for (const Range& w : promoted) file.Prefetch(w.offset, w.length);
  for (const Range& r : ranges) file.Prefetch(r.offset, r.length);
}

void RecordScheduler::UnindexLocked(const Pending& p) {
  auto f = queued_.find(p.file.get());
  if (f == queued_.end()) return;
  f->second.erase(p.offset);
  if (f->second.empty()) queued_.erase(f);
}

void RecordScheduler::EnqueueLocked(const std::shared_ptr<RandomAccessFile>& file, uint64_t offset,
                                    uint64_t end, bool front) {
  if (offset >= end) return;
  if (queue_.empty() && in_flight_ == 0) idle_since_ = Clock::now();
  stats_.queued_bytes += end - offset;
  QueueIndex& index = queued_[file.get()];
  auto next = index.lower_bound(offset);  // the first range at or after offset
  const bool joins_next = next != index.end() && next->first == end;
  if (next != index.begin()) {
    auto prev = std::prev(next);
    if (prev->second->end == offset) {  // extends the range before it
      prev->second->end = end;
      if (joins_next) {  // and closes the gap to the one after it
        prev->second->end = next->second->end;
        queue_.erase(next->second);
        index.erase(next);
      }
      return;
    }
  }
  if (joins_next) {  // starts the range after it earlier
    auto q = next->second;
    index.erase(next);
    q->offset = offset;
    index.emplace(offset, q);
    return;
  }
  auto q = front ? queue_.insert(queue_.begin(), Pending{file, offset, end})
                 : queue_.insert(queue_.end(), Pending{file, offset, end});
  index.emplace(offset, q);
}

RecordScheduler::Pending RecordScheduler::TakeFrontLocked(uint64_t n) {
  Pending& p = queue_.front();
  Pending taken{p.file, p.offset, p.offset + std::min(n, p.end - p.offset)};
  UnindexLocked(p);
  p.offset = taken.end;
  if (p.offset >= p.end) {
    queue_.pop_front();
  } else {
    queued_[p.file.get()].emplace(p.offset, queue_.begin());
  }
  stats_.queued_bytes -= taken.end - taken.offset;
  return taken;
}

void RecordScheduler::PromoteLocked(const RandomAccessFile& file, const Range& r,
                                    std::vector<Range>* promoted) {
  auto f = queued_.find(&file);
  if (f == queued_.end()) return;
  QueueIndex& index = f->second;
  auto found = index.upper_bound(r.offset);  // the queued range holding r.offset, if any
  if (found == index.begin()) return;
  --found;
  const Queue::iterator it = found->second;
  if (r.offset >= it->end) return;
  // The window [r.offset, end): at least the piece, at most one chunk past its start, within
  // what is queued. What is left of the queued range on either side stays queued, in place.
  const uint64_t end = std::min(it->end, r.offset + std::max(r.length, chunk_));
  promoted->push_back({r.offset, end - r.offset});
  stats_.queued_bytes -= end - r.offset;
  ++stats_.promoted_reads;
  stats_.promoted_bytes += end - r.offset;
  const Pending right{it->file, end, it->end};
  if (r.offset > it->offset) {
    it->end = r.offset;
    if (right.offset < right.end) index.emplace(right.offset, queue_.insert(std::next(it), right));
    return;
  }
  index.erase(found);
  if (right.offset < right.end) {
    *it = right;
    index.emplace(right.offset, it);
  } else {
    queue_.erase(it);
    if (index.empty()) queued_.erase(f);
  }
}

void RecordScheduler::Speculate(const std::shared_ptr<RandomAccessFile>& file,
                                const std::vector<Range>& ranges) {
  if (!file || !file->KeepsReads()) return;
  const uint64_t size = file->Size();
  std::vector<Range> added;
  {
    MutexLock l(&mu_);
    if (stop_) return;
    RangeSet& seen = seen_[file.get()];
    for (const Range& r : ranges) {
      if (r.offset >= size) continue;
      Insert(&seen, r.offset, r.offset + std::min(r.length, size - r.offset), &added);
    }
    for (const Range& r : added) EnqueueLocked(file, r.offset, r.offset + r.length, false);
  }
  if (!added.empty()) cv_.Signal();
}

bool RecordScheduler::NoteDemandLocked(uint64_t n, const DemandTiming& t, bool one_queue) {
  const double seconds = t.seconds;
  const bool alone = t.alone;
  const int others = t.others;
  ++stats_.demand_reads;
  stats_.demand_bytes += n;
  bool paused = false;
  // A read that may have queued behind a speculative one says nothing about the source.
  if (alone && seconds >= kCacheHitSeconds && (min_demand_ == 0 || seconds < min_demand_)) {
    min_demand_ = seconds;
  }
  // Congested: slower than the source's latency allows (and than one speculative chunk at
  // the measured rate, if one may have been ahead of it in the source's queue), and than the
  // demand reads in progress when it started allow: each may be ahead of it in that queue
  // (readers that queue on each other are no sign that speculation holds the source: with 4
  // readers on a fast disk, pausing for those halved level 1).
  double allowed =
      std::max(std::chrono::duration<double>(kCongestedRead).count(), 4 * stats_.latency_seconds);
  if (!alone) {
    allowed = stats_.rate > 0 ? allowed + static_cast<double>(chunk_) / stats_.rate : seconds;
  }
  allowed *= 1 + others;
  if (one_queue && n > 0 && seconds > allowed) {
    ++stats_.congested;
    const double most = std::chrono::duration<double>(kMaxCongestedPause).count();
    const double pause =
        std::clamp(stats_.rate > 0 ? static_cast<double>(kCongestedPauseBytes) / stats_.rate : most,
                   std::chrono::duration<double>(kMinCongestedPause).count(), most);
    stats_.congested_seconds += pause;
    congested_until_ =
        std::max(congested_until_, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                      std::chrono::duration<double>(pause)));
    paused = true;
  }
  // A read that met a speculative one only after it started is neither sample.
  if (one_queue && seconds >= kCacheHitSeconds && (!alone || t.alone_throughout)) {
    double& mean = alone ? alone_mean_ : beside_mean_;
    uint32_t& reads = alone ? alone_reads_ : beside_reads_;
    mean = reads == 0 ? seconds : mean + (seconds - mean) * kOverlapWeight;
    if (!alone) {
      const double o = t.overtook ? 1 : 0;
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

void RecordScheduler::NoteSpeculativeLocked(uint64_t n, uint64_t moved, double seconds,
                                            bool one_queue) {
  ++stats_.speculative_reads;
  stats_.speculative_bytes += n;
  if (moved == 0) return;
  window_bytes_ = window_bytes_ * kDecay + static_cast<double>(moved);
  window_seconds_ = window_seconds_ * kDecay + seconds;
  if (window_seconds_ <= 0) return;
  double rate = window_bytes_ / window_seconds_;
  double latency = min_demand_prev_;
  if (min_demand_ > 0 && (latency == 0 || min_demand_ < latency)) latency = min_demand_;
  if (one_queue) {
    // The slowest recent read, not the mean: a read that met a throttle's burst says nothing
    // about the rate a demand read queued behind the next one will see.
    const auto now = Clock::now();
    double floor = 0;
    if (floor_rate_ > 0) {
      const double since = std::chrono::duration<double>(now - floor_at_).count();
      floor = floor_rate_ * std::pow(kRateRisePerSecond, since);
    }
    // A read that found most of its bytes cached (the readers' own reads brought them in) is
    // no sample: its time is mostly copies, or a wait for pages already in flight.
    if (2 * moved >= n && seconds > 0) {
      // The transfer's time: without the source's latency, which a small read would
      // otherwise take for a slow transfer (chunks shrinking to kMinChunk on a 1 ms source),
      // and which hides how fast a throttle's burst comes (so the chunk grows past the burst
      // quickly, and the read that does tells the rate: below).
      const double transfer = std::max(seconds - latency, seconds / 8);
      double this_read = static_cast<double>(moved) / transfer;
      if (floor > 0 && this_read < floor / 2) {
        // Much slower than the reads before it: it outgrew what a throttle lets through at
        // once. Its bytes up to the largest recent fast read most likely came at once too,
        // so only the rest tells the rate (a read of 4 MiB after fast reads of 2 MiB under a
        // 2.5 MB burst at 25 MB/s: 49 MB/s by its whole size, 25 MB/s by the rest).
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

void RecordScheduler::Worker() {
  NameThisThread("pcrfs-spec");
  std::vector<uint8_t> buffer;
  const UniqueFd schedstat(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  for (;;) {
    std::shared_ptr<RandomAccessFile> file;
    uint64_t offset = 0, n = 0;
    {
      MutexLock l(&mu_);
      // Woken by Speculate, by a finished speculative read, and by the last demand read in
      // progress ending while work is queued (Read decrements under mu_, so no wake-up is
      // lost); with work queued, also at the pause's end or once starved. No timeout with
      // nothing queued: an idle daemon does not wake up.
      ++idle_workers_;
      for (;;) {
        // One reading of the clock per pass: a deadline that passes between two readings must
        // not leave the worker in an untimed wait.
        const auto now = Clock::now();
        if (stop_ || CanStartLocked(now)) break;
        if (!queue_.empty() && NotBeforeLocked() > now) {
          cv_.WaitUntil(&mu_, NotBeforeLocked());
        } else if (!queue_.empty() && in_flight_ == 0) {
          // A gap between demand reads signals; if none comes, start once starved.
          cv_.WaitUntil(&mu_, idle_since_ + kStarvedAfter);
        } else {
          cv_.Wait(&mu_);
        }
      }
      --idle_workers_;
      if (stop_) return;
      uint64_t chunk = chunk_;
      if (queue_.front().file->ConcurrentSpeculativeReads() > 0) {
        chunk = std::max(chunk, kMinConcurrentChunk);
      }
      Pending taken = TakeFrontLocked(chunk);
      file = std::move(taken.file);
      offset = taken.offset;
      n = taken.end - taken.offset;
      ++in_flight_;
      speculative_started_.fetch_add(1, std::memory_order_acq_rel);
      // A source that takes several at once: another worker may start too.
      if (idle_workers_ > 0 && CanStartLocked(Clock::now())) cv_.Signal();
    }
    const double delay_before = RunDelaySeconds(schedstat);
    const auto start = Clock::now();
    // Errors are ignored: the demand read of these bytes will report them.
    const Result<uint64_t> moved = file->Warm(offset, n, &buffer);
    speculative_finished_.fetch_add(1, std::memory_order_acq_rel);
    const Status s = moved.has_value() ? Status::OK() : moved.error();
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    // The source's time: without the time this thread waited for a CPU.
    const double seconds = std::max(wall - (RunDelaySeconds(schedstat) - delay_before), wall / 16);
    {
      MutexLock l(&mu_);
      if (--in_flight_ == 0) idle_since_ = Clock::now();
      if (s.code() == Status::Code::kResourceExhausted) {
        // The source keeps enough unread bytes: the range goes back to the front, for later.
        if (!stop_) {
          EnqueueLocked(file, offset, offset + n, /*front=*/true);
          busy_until_ = Clock::now() + kBusyRetry;
        }
      } else {
        // Only bytes the source really moved say how fast it is: a range the readers' own
        // reads had brought in costs no transfer (and took no time).
        NoteSpeculativeLocked(n, moved.value_or(n), seconds,
                              file->ConcurrentSpeculativeReads() == 0);
      }
    }
    cv_.Signal();  // the other worker may start (the limit may have changed)
    if (s.ok() && on_arrived_) on_arrived_(*file, offset, offset + n);
  }
}

RecordScheduler::Clock::time_point RecordScheduler::NotBeforeLocked() const {
  if (queue_.front().file->ConcurrentSpeculativeReads() > 0) return busy_until_;
  return std::max(busy_until_, congested_until_);
}

bool RecordScheduler::CanStartLocked(Clock::time_point now) const {
  if (queue_.empty() || NotBeforeLocked() > now) return false;
  const int concurrent = queue_.front().file->ConcurrentSpeculativeReads();
  if (concurrent > 0) return in_flight_ < std::min(concurrent, kWorkers);
  return in_flight_ < MaxInFlightLocked() &&
         (demand_active_.load(std::memory_order_acquire) == 0 ||
          (in_flight_ == 0 && (now >= idle_since_ + kStarvedAfter || OverlapIsFreeLocked())));
}

bool RecordScheduler::OverlapIsFreeLocked() const {
  if (alone_reads_ < kOverlapSamples || beside_reads_ < kOverlapSamples || stats_.rate <= 0) {
    return false;
  }
  return overtaking_ >= 0.5 &&
         beside_mean_ - alone_mean_ < kOverlapShare * static_cast<double>(chunk_) / stats_.rate;
}

int RecordScheduler::MaxInFlightLocked() const {
  // On a source whose latency is small against a chunk's transfer (a local disk), one read in
  // flight keeps it busy, and a demand read on a FIFO device waits for at most that one. On a
  // latency-bound source a second read hides the first one's latency; there demand reads do
  // not queue behind speculative ones (requests overlap in the latency).
  return 2 * stats_.latency_seconds > std::chrono::duration<double>(kTargetRead).count()
             ? kMaxInFlight
             : 1;
}

RecordScheduler::Stats RecordScheduler::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.chunk = chunk_;
  if (alone_reads_ >= kOverlapSamples && beside_reads_ >= kOverlapSamples) {
    s.beside_extra_seconds = beside_mean_ - alone_mean_;
  }
  s.overtaking = overtaking_;
  s.overlap = OverlapIsFreeLocked();
  s.cache_hits = cache_hits_.load(std::memory_order_relaxed);
  s.cache_hit_bytes = cache_hit_bytes_.load(std::memory_order_relaxed);
  return s;
}

std::string RecordScheduler::Describe() const {
  const Stats s = stats();
  auto mib = [](double b) { return std::to_string(static_cast<uint64_t>(b / 1048576 + 0.5)); };
  std::string out = "speculative reads: " + std::to_string(s.speculative_reads) + " (" +
                    mib(static_cast<double>(s.speculative_bytes)) + " MiB), queued " +
                    mib(static_cast<double>(s.queued_bytes)) +
                    " MiB; demand reads: " + std::to_string(s.demand_reads) + " (" +
                    mib(static_cast<double>(s.demand_bytes)) + " MiB) and " +
                    std::to_string(s.cache_hits) + " page-cache hits (" +
                    mib(static_cast<double>(s.cache_hit_bytes)) +
                    " MiB); promoted to demand: " + std::to_string(s.promoted_reads) + " (" +
                    mib(static_cast<double>(s.promoted_bytes)) + " MiB); paused for congested " +
                    "demand reads: " + std::to_string(s.congested) + " (" +
                    std::to_string(static_cast<uint64_t>(s.congested_seconds * 1e3 + 0.5)) +
                    " ms); chunk " + std::to_string(s.chunk >> 10) + " KiB";
  if (s.rate > 0)
    out += ", measured " + std::to_string(static_cast<uint64_t>(s.rate / 1e6)) + " MB/s";
  if (s.latency_seconds > 0) {
    out += ", latency " + std::to_string(static_cast<uint64_t>(s.latency_seconds * 1e6)) + " us";
  }
  if (s.beside_extra_seconds != 0) {
    out += "; a demand read beside a speculative one " +
           std::string(s.beside_extra_seconds < 0 ? "-" : "+") +
           std::to_string(static_cast<uint64_t>(std::abs(s.beside_extra_seconds) * 1e6 + 0.5)) +
           " us, " + std::to_string(static_cast<int>(s.overtaking * 100 + 0.5)) +
           "% finished before it (" +
           (s.overlap ? "speculating beside demand reads" : "speculating in gaps") + ")";
  }
  return out;
}

}  // namespace pcrfs::fs
