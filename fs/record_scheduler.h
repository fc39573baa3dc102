// Every byte the daemon reads from a record goes through one RecordScheduler, in one of two
// classes:
//
// - Demand reads: a FUSE READ waits for them. The calling thread issues them at once; they
//   never queue behind speculative work inside the daemon.
// - Speculative reads: byte ranges the access pattern predicts (ReadPredictor). A small pool
//   issues them one chunk at a time, only while no demand read is in progress (a read the
//   page cache answered whole, NoteCacheHit, is not one) or once starved of such a moment
//   for kStarvedAfter, one chunk in flight (two on a latency-bound source), so a demand read
//   that arrives waits at most for the chunk already at the device (on a FIFO device such as
//   a blkio throttle) and never for the queue. On a device measured to serve demand reads
//   beside a speculative one about as fast as alone (kOverlapShare), the one chunk runs
//   beside demand reads without waiting.
//
// A demand read that took longer than kCongestedRead and 4x the source's latency (plus one
// speculative chunk's time at the measured rate if one was in flight when it started), times
// one plus the other demand reads in progress then (each may be ahead of it in the source's
// queue), found the source congested: the debt a throttle keeps for the speculative reads
// before it holds the source (a blkio throttle at 10 MB/s with a decoding DataLoader: a
// speculative read started in every gap between two files' reads spent the budget that the
// next demand read then waited for, 4 ms ticks at a time). Speculation on a one-queue source
// then pauses (for about 1 MiB's time at the measured rate, 2-50 ms), so it uses only what
// demand leaves idle over time, not only at the instant it starts. On a fast disk a demand
// read takes about the latency, and readers that queue on each other are allowed their turns,
// so it rarely pauses, and briefly.
//
// A chunk is sized from the source's own timings, so no option depends on the storage: the
// scheduler keeps the recent speculative reads' bytes/second (the device's streaming rate: on a
// source with one queue the slowest recent read's, rising by at most 1.5x per second, since a
// blkio throttle lets a burst through after an idle spell; each read timed without the
// source's latency and without the time its thread waited for a CPU (run_delay in
// /proc/thread-self/schedstat), and a read much slower than those before it timed by its bytes past
// the largest recent fast read, the part the burst did not cover) and the shortest recent demand
// read issued while no speculative read was in flight (also timed without its thread's waits
// for a CPU, as every demand read is; about the source's latency: a local disk
// ~0.1 ms, a remote object store ~20 ms), and makes a chunk take max(kTargetRead, 2 x latency) at
// that rate, between kMinChunk and kMaxChunk. On a local disk that is a few milliseconds of
// transfer (about 1 MiB at 250 MB/s, 40 KiB at 10 MB/s); on a source with 20 ms latency the chunk
// grows until transfer time matches the latency (8 MiB at 400 MB/s), as object stores want.
//
// A remote source (RandomAccessFile::ConcurrentSpeculativeReads > 0) gives demand reads
// priority itself (its HTTP client lends speculative requests only spare connections), so
// there speculative reads run alongside demand reads, several at once, and pause while the
// source says it keeps enough unread bytes (RandomAccessFile::Warm: ResourceExhausted).
//
// Speculation only pays if the source keeps what it read (RandomAccessFile::KeepsReads: the
// page cache for a local file, a block cache for a remote one), since the later demand read
// must find the bytes there; the scheduler reads nothing speculatively from a source that
// does not. It never reads a range speculatively twice: per file it keeps the set of byte
// ranges it has read or queued. (A range a demand read already fetched is in the source's
// cache, so reading it again speculatively costs no device read; the scheduler does not track
// demand ranges, which keeps the demand path to one short lock for its timing.)
//
// Thread-safe. No lock is held during I/O.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/random_access_file.h"
#include "common/status.h"

namespace pcrfs::fs {

class RecordScheduler {
 public:
  // Small enough that a chunk at 10 MB/s takes 4 ms, not the 6.5 ms of 64 KiB (a demand read
  // waits behind one in a blkio throttle's FIFO; loader_bench at 10 MB/s, issue 12).
  static constexpr uint64_t kMinChunk = uint64_t{16} << 10;
  static constexpr uint64_t kMaxChunk = uint64_t{16} << 20;
  static constexpr uint64_t kFirstChunk = uint64_t{1} << 20;  // before anything was measured
  static constexpr auto kTargetRead = std::chrono::milliseconds(4);
  static constexpr int kMaxInFlight = 2;
  // A source that orders its own requests (RandomAccessFile::ConcurrentSpeculativeReads > 0, a
  // remote store) gets up to that many speculative reads at once, demand reads or not, each of
  // at least kMinConcurrentChunk (a request costs a round trip), from this many workers.
  static constexpr int kWorkers = 4;
  static constexpr uint64_t kMinConcurrentChunk = uint64_t{512} << 10;
  static constexpr int kPromoteAtDemandReads = 3;
  // A demand read this slow (and 4x the latency; times one plus the other demand reads in
  // progress, see above) finds the source congested; speculation on a one-queue source then
  // pauses for the time the source takes to move kCongestedPauseBytes at the measured rate,
  // between the two bounds: 50 ms behind a 10 MB/s throttle, 2 ms on a disk that reads 500 MB/s
  // (where a 50 ms pause cost a third of a level-1 epoch: bwcap uncapped L1 62-75k files/s
  // against 76-85k).
  static constexpr auto kCongestedRead = std::chrono::milliseconds(1);
  static constexpr uint64_t kCongestedPauseBytes = uint64_t{1} << 20;
  static constexpr auto kMinCongestedPause = std::chrono::milliseconds(2);
  static constexpr auto kMaxCongestedPause = std::chrono::milliseconds(50);
  // Speculation that has waited this long for a moment without a demand read, with work
  // queued and nothing in flight, starts one chunk anyway: readers that always have a demand
  // read in progress (four raw readers on a fast disk) left no such moment, and an uncapped
  // level-1 epoch read no speculative byte for its first 50 ms. Long against a throttled
  // DataLoader's reads (their gaps come every few ms), so there speculation keeps to the gaps.
  static constexpr auto kStarvedAfter = std::chrono::milliseconds(4);
  // A device that serves a demand read beside a speculative one about as fast as alone (an
  // SSD with several requests in flight) lets speculation run beside demand reads, one chunk
  // at a time: a demand read there waits for no chunk. Measured, not assumed, over the recent
  // demand reads that reached the device (at least kOverlapSamples alone and beside one):
  // at least half of those beside a speculative read finish before it does (on a FIFO device,
  // such as a blkio throttle, none: each waits for the chunk ahead of it), and on average they
  // take less than kOverlapShare of a chunk's time (at the measured rate) longer than those
  // alone. (A speculative read counts as finished when its worker thread runs again: on a
  // CPU-starved machine a demand read may seem to overtake one it waited for; the time test
  // still holds.)
  static constexpr double kOverlapShare = 0.25;
  static constexpr uint32_t kOverlapSamples = 16;
  // A source with enough unread bytes already (Warm says ResourceExhausted) is asked again
  // after this.
  static constexpr auto kBusyRetry = std::chrono::milliseconds(20);

  struct Range {
    uint64_t offset;
    uint64_t length;
  };

  struct Stats {
    uint64_t demand_reads = 0, demand_bytes = 0;
    uint64_t speculative_reads = 0, speculative_bytes = 0;
    uint64_t promoted_reads = 0, promoted_bytes = 0;  // queued ranges a demand read took
    uint64_t cache_hits = 0, cache_hit_bytes = 0;     // NoteCacheHit
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

  // Called on a pool thread, with no lock held, after each speculative read that succeeded:
  // bytes [offset, end) of the file are in the source's cache now (PagePusher::Arrived).
  using OnArrived = std::function<void(const RandomAccessFile&, uint64_t offset, uint64_t end)>;

  explicit RecordScheduler(OnArrived on_arrived = nullptr);
  ~RecordScheduler();  // drops queued speculative work and joins the pool
  RecordScheduler(const RecordScheduler&) = delete;
  RecordScheduler& operator=(const RecordScheduler&) = delete;

  // A demand read: exactly n bytes at offset, on the calling thread, now.
  Status Read(const RandomAccessFile& file, uint64_t offset, size_t n, uint8_t* dst);
  // A demand read of n bytes of `file` that `read` does itself (e.g. index::Store::ReadBlock,
  // which reads and checks one checksum block), timed and counted as one.
  Status Demand(const RandomAccessFile& file, uint64_t n, const std::function<Status()>& read)
      EXCLUDES(mu_);
  // A read of n bytes that the source served from memory without waiting (a page-cache hit,
  // RandomAccessFile::ReadCached): counted, but it neither was nor holds back device work.
  void NoteCacheHit(uint64_t n) {
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    cache_hit_bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  // A demand read of these ranges is about to happen (the k pieces of one file): lets the
  // source start them all at once (RandomAccessFile::Prefetch), so the read waits for the
  // slowest range instead of the sum. On a source that takes concurrent speculative reads (a
  // remote store), a piece inside a range queued for speculation is fetched with one chunk of
  // that range (from the piece on), taken out of the queue: those bytes were predicted to be
  // read soon anyway, and one request of a chunk costs about one round trip like the piece
  // alone, where leaving it queued would cut the later speculative read into one request per
  // gap between pieces already fetched (8 readers at level 5 and 20 ms: 12 KiB per
  // speculative request, every piece a round trip). Only while at least kPromoteAtDemandReads
  // other demand reads are in progress: readers that outrun single-piece fetches; a reader or
  // two (a decoding DataLoader) would only wait longer for its own file.
  void WillRead(const RandomAccessFile& file, const std::vector<Range>& ranges) EXCLUDES(mu_);
  // Queues speculative reads of these ranges (in this order), minus every byte already read
  // or queued for `file`. Never blocks on I/O.
  void Speculate(const std::shared_ptr<RandomAccessFile>& file, const std::vector<Range>& ranges)
      EXCLUDES(mu_);

  Stats stats() const EXCLUDES(mu_);
  // What user.pcrfs.prefetch on the mount's root shows.
  std::string Describe() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::shared_ptr<RandomAccessFile> file;
    uint64_t offset;
    uint64_t end;
  };
  using Queue = std::list<Pending>;
  // The queued ranges of one file by offset (disjoint: a byte is queued at most once).
  using QueueIndex = std::map<uint64_t, Queue::iterator>;
  // Byte ranges of one file, merged: begin -> end.
  using RangeSet = std::map<uint64_t, uint64_t>;
  // Adds [begin, end) to `set`; appends to `added` (if not null) the parts that were new.
  static void Insert(RangeSet* set, uint64_t begin, uint64_t end, std::vector<Range>* added);

  void Worker() EXCLUDES(mu_);
  // Counts a speculative read of n bytes, of which the source moved `moved` in `seconds`, and
  // updates the timings and the next chunk's size from those (none moved: no timing).
  void NoteSpeculativeLocked(uint64_t n, uint64_t moved, double seconds, bool one_queue)
      REQUIRES(mu_);
  // How one demand read went.
  struct DemandTiming {
    double seconds = 0;             // without its thread's waits for a CPU
    bool alone = false;             // no speculative read was in flight when it started
    bool alone_throughout = false;  // ... and none started before it ended
    bool overtook = false;  // one was in flight when it started and had not finished at its end
    int others = 0;         // the other demand reads in progress when it started
  };
  // `one_queue`: a source with one queue (ConcurrentSpeculativeReads() == 0). Returns whether
  // it found the source congested (speculation pauses).
  bool NoteDemandLocked(uint64_t n, const DemandTiming& t, bool one_queue) REQUIRES(mu_);
  int MaxInFlightLocked() const REQUIRES(mu_);
  // Whether a demand read is measured to take about as long beside a speculative read as
  // alone (kOverlapShare).
  bool OverlapIsFreeLocked() const REQUIRES(mu_);
  // If r starts inside a range queued for `file`, takes a chunk from r's start out of the
  // queue and appends it to *promoted. REQUIRES: mu_ held.
  void PromoteLocked(const RandomAccessFile& file, const Range& r, std::vector<Range>* promoted)
      REQUIRES(mu_);
  // Whether the front of the queue may start at `now`. REQUIRES: mu_ held.
  bool CanStartLocked(Clock::time_point now) const REQUIRES(mu_);
  // Before when the front of the queue (not empty) may not start: a busy or congested source.
  Clock::time_point NotBeforeLocked() const REQUIRES(mu_);
  // Queues [offset, end) of `file` (no byte of it queued yet): merged into a queued range it
  // touches, else at the back (at the front if `front`). A range planned folder by folder
  // thus becomes one long range where the folders lie side by side in the record, and a
  // speculative read is a chunk, not one folder's region.
  void EnqueueLocked(const std::shared_ptr<RandomAccessFile>& file, uint64_t offset, uint64_t end,
                     bool front) REQUIRES(mu_);
  // Takes up to n bytes from the front of the queue (not empty).
  Pending TakeFrontLocked(uint64_t n) REQUIRES(mu_);
  void UnindexLocked(const Pending& p) REQUIRES(mu_);

  const OnArrived on_arrived_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  Queue queue_ GUARDED_BY(mu_);
  std::unordered_map<const RandomAccessFile*, QueueIndex> queued_ GUARDED_BY(mu_);
  std::unordered_map<const RandomAccessFile*, RangeSet> seen_ GUARDED_BY(mu_);
  uint64_t chunk_ GUARDED_BY(mu_) = kFirstChunk;
  int in_flight_ GUARDED_BY(mu_) = 0;
  int idle_workers_ GUARDED_BY(mu_) = 0;            // workers waiting in Worker()
  Clock::time_point busy_until_ GUARDED_BY(mu_){};  // nothing starts before (a busy source)
  // Since when speculation has had work queued and nothing in flight (kStarvedAfter).
  Clock::time_point idle_since_ GUARDED_BY(mu_){};
  // No speculative read of a one-queue source starts before (a congested source).
  Clock::time_point congested_until_ GUARDED_BY(mu_){};
  Stats stats_ GUARDED_BY(mu_);
  // Recent speculative reads: bytes and seconds, summed over a window that decays.
  double window_bytes_ GUARDED_BY(mu_) = 0, window_seconds_ GUARDED_BY(mu_) = 0;
  // A source with one queue (a disk): the rate of the slowest recent read, allowed to rise by
  // at most kRateRisePerSecond per second since the last read (0: none yet). A blkio
  // throttle lets about 100 ms of its budget through at once after an idle spell, so a read
  // that meets such a burst moves at the disk's speed: the mean of recent reads measured 26-599
  // MB/s under 25-100 MB/s caps, and chunks of MiBs made demand reads wait behind them.
  double floor_rate_ GUARDED_BY(mu_) = 0;
  // The largest recent read (decaying) that ran at about the floor or faster: about how much a
  // throttle lets through at once after an idle spell.
  double fast_bytes_ GUARDED_BY(mu_) = 0;
  Clock::time_point floor_at_ GUARDED_BY(mu_){};
  // Shortest demand read of the current and the previous 256 reads.
  double min_demand_ GUARDED_BY(mu_) = 0, min_demand_prev_ GUARDED_BY(mu_) = 0;
  uint32_t demand_in_window_ GUARDED_BY(mu_) = 0;
  // Demand reads from the device (not a cache) of a one-queue source, alone and beside a
  // speculative read: moving means of their seconds, and how many each has seen.
  double alone_mean_ GUARDED_BY(mu_) = 0, beside_mean_ GUARDED_BY(mu_) = 0;
  uint32_t alone_reads_ GUARDED_BY(mu_) = 0, beside_reads_ GUARDED_BY(mu_) = 0;
  // Of those beside one, the moving share that finished before it did.
  double overtaking_ GUARDED_BY(mu_) = 0;
  // Demand reads in progress; speculative reads of a one-queue source start only while it is
  // 0, unless starved (kStarvedAfter) or beside them on a device that overlaps (kOverlapShare).
  std::atomic<int> demand_active_{0};
  // Speculative reads started (under mu_) and finished (as the read returns), ever: their
  // difference is those in flight, readable without mu_; a demand read that finds fewer
  // finished at its end than had started at its start overtook one.
  std::atomic<uint64_t> speculative_started_{0}, speculative_finished_{0};
  std::atomic<uint64_t> cache_hits_{0}, cache_hit_bytes_{0};
  std::vector<std::thread> pool_;
};

}  // namespace pcrfs::fs
