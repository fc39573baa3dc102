// Every byte the daemon reads from a record goes through one RecordScheduler, in one of two
// classes:
//
// - Demand reads: a FUSE READ waits for them. The calling thread issues them at once; they
//   never queue behind speculative work inside the daemon.
// - Speculative reads: byte ranges the access pattern predicts (ReadPredictor). A small pool
//   issues them one chunk at a time, when the source's model allows (fs/source_model.h: only
//   in gaps between demand reads on a source with one queue, unless starved or measured to
//   overlap for free; paused after a demand read found the source congested; several at once
//   on a source that orders its own requests, a remote store; chunks sized from the source's
//   measured rate and latency).
//
// The scheduler is three parts: SourceModel (fs/source_model.h) decides from timings;
// SpeculationQueue (fs/speculation_queue.h) holds the ranges to read; this class is the shell
// that times reads (its clock, and the thread's waits for a CPU, /proc/thread-self/schedstat),
// feeds the model, and runs its decisions on a pool of threads. Its clock is injected
// (common/clock.h): on a timing::FakeClock its timed waits (a pause, starvation) end only when the
// test advances the clock, so its tests follow an exact timeline (record_scheduler_test.cc).
//
// Speculation only pays if the source keeps what it read (the page cache for a local file, a
// block cache for a remote one), since the later demand read must find the bytes there: the
// scheduler reads speculatively only from a file with speculation hooks
// (SourceFile::speculation(), common/speculation_source.h), through them. It never reads a
// range speculatively twice. A remote source (SpeculationSource::ConcurrentSpeculativeReads >
// 0) reads ahead only what it can keep until read (SpeculationSource::AheadRoom; Warm:
// ResourceExhausted when it has no room), so nothing fetched ahead is evicted unread.
//
// Thread-safe. No lock is held during I/O.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/random_access_file.h"
#include "common/speculation_source.h"
#include "common/status.h"
#include "fs/source_model.h"
#include "fs/speculation_queue.h"

namespace pcrfs::fs {

class RecordScheduler {
 public:
  static constexpr uint64_t kMinChunk = SourceModel::kMinChunk;
  static constexpr uint64_t kFirstChunk = SourceModel::kFirstChunk;
  static constexpr uint64_t kMinConcurrentChunk = SourceModel::kMinConcurrentChunk;
  static constexpr int kWorkers = SourceModel::kWorkers;
  // WillRead promotes queued ranges only while at least this many other demand reads run.
  static constexpr int kPromoteAtDemandReads = 3;

  using Range = SpeculationQueue::Range;
  using Stats = SchedulerStats;

  // Called on a pool thread, with no lock held, after each speculative read that succeeded:
  // bytes [offset, end) of the file are in the source's cache now (PagePusher::Arrived).
  using OnArrived = std::function<void(const SpeculationSource&, uint64_t offset, uint64_t end)>;

  // forget_after: SpeculationQueue's. `clock` times reads and ends timed waits (must outlive
  // the scheduler); with another than Clock::Real() the threads' waits for a CPU are not read
  // (no thread waits for a CPU in a fake clock's time).
  explicit RecordScheduler(OnArrived on_arrived = nullptr,
                           uint64_t forget_after = SpeculationQueue::kForgetAfter,
                           const timing::Clock* clock = timing::Clock::Real());
  ~RecordScheduler();  // drops queued speculative work and joins the pool
  RecordScheduler(const RecordScheduler&) = delete;
  RecordScheduler& operator=(const RecordScheduler&) = delete;

  // A demand read: exactly n bytes at offset, on the calling thread, now.
  Status Read(const SourceFile& file, uint64_t offset, size_t n, uint8_t* dst);
  // A demand read of n bytes of `file` that `read` does itself (e.g. index::Store::ReadBlock,
  // which reads and checks one checksum block), timed and counted as one.
  Status Demand(const SourceFile& file, uint64_t n, const std::function<Status()>& read)
      EXCLUDES(mu_);
  // A read of n bytes that the source served from memory without waiting (a page-cache hit,
  // SpeculationSource::ReadCached): counted, but it neither was nor holds back device work.
  void NoteCacheHit(uint64_t n) {
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    cache_hit_bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  // A demand read of these ranges is about to happen (the k pieces of one file): lets the
  // source start them all at once (SpeculationSource::Prefetch), so the read waits for the
  // slowest range instead of the sum. On a source that takes concurrent speculative reads (a
  // remote store), a piece inside a range queued for speculation is fetched with one
  // speculative read's worth of that range (from the piece on; SourceModel::Start: at least
  // kMinConcurrentChunk, whatever the model's per-read rate), taken out of the queue
  // (SpeculationQueue::Promote): those bytes were predicted to be read soon anyway, one request of
  // a chunk costs about one round trip like the piece alone, and leaving it queued would cut the
  // later speculative read into one request per gap between pieces already fetched. Only while at
  // least kPromoteAtDemandReads other demand reads are in progress: readers that outrun
  // single-piece fetches; a reader or two would only wait longer for its own file. The window
  // is speculation (SpeculationSource::PrefetchAhead: unread until read, kept until read): at
  // most the room the source has for such bytes (AheadRoom), shared by the read's pieces, and
  // none without room (the pieces alone are fetched). windows == false: no window at all (the
  // pieces alone, each taken out of the queue), for a read whose windows would not pay
  // (FsOptions::windows_for_several_pieces).
  void WillRead(const SourceFile& file, const std::vector<Range>& ranges, bool windows = true)
      EXCLUDES(mu_);
  // Queues speculative reads of these ranges (in this order), minus every byte already read
  // or queued for `file`; nothing if the file has no speculation hooks. Never blocks on I/O.
  void Speculate(const SourceFile& file, const std::vector<Range>& ranges) EXCLUDES(mu_);

  // While yielding, no speculative read starts and no window is promoted (what is queued stays
  // queued): the hint consumer fetches the readers' named files ahead, and the cache's room for
  // bytes fetched ahead is theirs (a few reads before the hints arrived planned whole folders,
  // whose speculation then held the room and stalled the hinted files behind it).
  void Yield(bool yield) EXCLUDES(mu_);

  Stats stats() const EXCLUDES(mu_);
  // What user.pcrfs.prefetch on the mount's root shows.
  std::string Describe() const;

 private:
  void Worker() EXCLUDES(mu_);
  // Whether the front of the queue may start at `now`.
  bool CanStartLocked(timing::Clock::TimePoint now) const REQUIRES(mu_);
  // Seconds since `start` on clock_.
  double SecondsSince(timing::Clock::TimePoint start) const;

  const OnArrived on_arrived_;
  const timing::Clock* const clock_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::atomic<bool> yield_{false};  // Yield()
  SpeculationQueue queue_ GUARDED_BY(mu_);
  SourceModel model_ GUARDED_BY(mu_);
  int idle_workers_ GUARDED_BY(mu_) = 0;  // workers waiting in Worker()
  // Demand reads in progress; speculative reads of a one-queue source start only while it is
  // 0, unless the model says otherwise (starved, or overlap measured free).
  std::atomic<int> demand_active_{0};
  // Speculative reads started (under mu_) and finished (as the read returns), ever: their
  // difference is those in flight, readable without mu_; a demand read that finds fewer
  // finished at its end than had started at its start overtook one.
  std::atomic<uint64_t> speculative_started_{0}, speculative_finished_{0};
  std::atomic<uint64_t> cache_hits_{0}, cache_hit_bytes_{0};
  std::vector<std::thread> pool_;
};

}  // namespace pcrfs::fs
