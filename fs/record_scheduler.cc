#include "fs/record_scheduler.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <utility>

#include "common/file_util.h"
#include "common/thread_name.h"

namespace pcrfs::fs {
namespace {

// Seconds the calling thread has waited for a CPU while runnable (the second field of
// /proc/thread-self/schedstat: run_delay, ns), from `fd` opened on that file by this thread;
// 0 if the kernel does not say. The model takes a read's wall time minus this as the time
// the source took (a worker woken by its read's completion on busy cores may wait for a core
// for several ms).
double ThreadRunDelaySeconds(const UniqueFd& fd) {
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

// ThreadRunDelaySeconds on the real clock; 0 on another, whose time no thread waits a CPU in.
double RunDelaySeconds(const timing::Clock* clock, const UniqueFd& fd) {
  return clock == timing::Clock::Real() ? ThreadRunDelaySeconds(fd) : 0;
}

// Speculative reads the source takes at once beside demand reads (0: one queue, a disk).
int ConcurrentSpeculativeReads(const SourceFile& file) {
  return file.speculation() != nullptr ? file.speculation()->ConcurrentSpeculativeReads() : 0;
}

}  // namespace

RecordScheduler::RecordScheduler(OnArrived on_arrived, uint64_t forget_after,
                                 const timing::Clock* clock)
    : on_arrived_(std::move(on_arrived)), clock_(clock), queue_(forget_after) {
  for (int i = 0; i < kWorkers; ++i) pool_.emplace_back([this] { Worker(); });
}

RecordScheduler::~RecordScheduler() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    queue_.Clear();
  }
  cv_.SignalAll();
  for (auto& t : pool_) t.join();
}

Status RecordScheduler::Read(const SourceFile& file, uint64_t offset, size_t n, uint8_t* dst) {
  return Demand(file, n, [&] { return file.file().Read(offset, n, dst); });
}

Status RecordScheduler::Demand(const SourceFile& file, uint64_t n,
                               const std::function<Status()>& read) {
  SourceModel::Demand d;
  d.n = n;
  d.one_queue = ConcurrentSpeculativeReads(file) == 0;
  // Other demand reads in progress: this one may queue behind them at the source.
  d.others = demand_active_.fetch_add(1, std::memory_order_acq_rel);
  // Speculative reads in flight at its start: those started and not finished (finished is
  // read first, so a read that finishes in between is counted in flight, not the reverse).
  const uint64_t finished_before = speculative_finished_.load(std::memory_order_acquire);
  const uint64_t started_before = speculative_started_.load(std::memory_order_acquire);
  d.alone = started_before == finished_before;
  // (Opened by the thread that reads it; the daemon forks before any demand read.)
  thread_local const UniqueFd schedstat(
      ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  const double delay_before = RunDelaySeconds(clock_, schedstat);
  const auto start = clock_->Now();
  Status s = read();
  d.wall = SecondsSince(start);
  d.run_delay = RunDelaySeconds(clock_, schedstat) - delay_before;
  // One in flight at its start had not finished at its end: this read overtook it. Alone all
  // along: none in flight at its start, and none started during it.
  d.overtook = !d.alone && speculative_finished_.load(std::memory_order_acquire) < started_before;
  d.alone_throughout =
      d.alone && speculative_started_.load(std::memory_order_acquire) == started_before;
  bool wake = false;
  {
    MutexLock l(&mu_);
    const bool paused = model_.NoteDemand(d, clock_->Now());
    queue_.NoteDemand(n);
    // Wake a worker only if one is waiting and could start now (a page-cache hit per piece
    // must not cost two thread wake-ups), or must now wait for the pause's end, not for a
    // signal.
    wake = (demand_active_.fetch_sub(1, std::memory_order_acq_rel) == 1 && idle_workers_ > 0 &&
            CanStartLocked(clock_->Now())) ||
           (paused && idle_workers_ > 0);
  }
  if (wake) cv_.Signal();
  return s;
}

void RecordScheduler::WillRead(const SourceFile& file, const std::vector<Range>& ranges,
                               bool windows) {
  const SpeculationSource* source = file.speculation();
  if (source == nullptr) return;
  std::vector<Range> promoted;
  if (source->ConcurrentSpeculativeReads() > 0 && !ranges.empty() &&
      !yield_.load(std::memory_order_acquire)) {
    // A window of what a speculative read of this source takes (SourceModel::Start): on a
    // remote store at least kMinConcurrentChunk, one request like the piece's own. But a
    // promoted window is speculation too: only as much as the source can keep until it is read
    // (AheadRoom, shared by the pieces), and none without room: a level many times the cache,
    // read in a shuffled order, would evict the window before its other files are read, and a
    // window of a few pieces fetched 1.5-2x the bytes of the pieces alone. Only while at least
    // kPromoteAtDemandReads other demand reads run. A piece not promoted leaves the queue all
    // the same: it is being fetched now.
    const bool busy = demand_active_.load(std::memory_order_acquire) >= kPromoteAtDemandReads;
    const uint64_t room = busy && windows ? source->AheadRoom() / ranges.size() : 0;
    MutexLock l(&mu_);
    const uint64_t window = std::min(std::max(model_.chunk(), kMinConcurrentChunk), room);
    for (const Range& r : ranges) {
      if (window <= r.length) {  // no room beyond the piece itself
        queue_.Discard(source, r);
        continue;
      }
      const Range w = queue_.Promote(source, r, window);
      queue_.NoteDemanded(source, r);
      if (w.length > 0) promoted.push_back(w);
    }
  }
  // The promoted windows first: the pieces inside them then join those fetches. A window the
  // source found no room for after all (other fetches took it meanwhile) goes back to the queue.
  for (const Range& w : promoted) {
    if (source->PrefetchAhead(w.offset, w.length)) continue;
    std::shared_ptr<const SpeculationSource> shared = file.shared_speculation();
    MutexLock l(&mu_);
    if (shared && !stop_) queue_.PushFront(shared, w.offset, w.offset + w.length);
  }
  std::vector<SpeculationSource::Span> spans;
  spans.reserve(ranges.size());
  for (const Range& r : ranges) spans.push_back({r.offset, r.length});
  source->PrefetchAll(spans);
}

void RecordScheduler::Speculate(const SourceFile& file, const std::vector<Range>& ranges) {
  std::shared_ptr<const SpeculationSource> source = file.shared_speculation();
  if (!source) return;
  const uint64_t size = file.file().Size();
  bool added = false;
  {
    MutexLock l(&mu_);
    if (stop_) return;
    const bool was_empty = queue_.empty();
    added = !queue_.Add(source, ranges, size).empty();
    if (added && was_empty) model_.NoteQueuedIntoEmpty(clock_->Now());
  }
  if (added) cv_.Signal();
}

void RecordScheduler::Worker() {
  NameThisThread("pcrfs-spec");
  std::vector<uint8_t> buffer;
  const UniqueFd schedstat(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  for (;;) {
    SpeculationQueue::Pending taken;
    int concurrent = 0;
    {
      MutexLock l(&mu_);
      // Woken by Speculate, by a finished speculative read, and by the last demand read in
      // progress ending while work is queued (Demand decrements under mu_, so no wake-up is
      // lost); with work queued, also at the pause's end or once starved. No timeout with
      // nothing queued: an idle daemon does not wake up.
      ++idle_workers_;
      for (;;) {
        // One reading of the clock per pass: a deadline that passes between two readings must
        // not leave the worker in an untimed wait.
        const auto now = clock_->Now();
        if (stop_ || CanStartLocked(now)) break;
        if (queue_.empty() || yield_.load(std::memory_order_acquire)) {  // Yield(false) signals
          cv_.Wait(&mu_);
          continue;
        }
        const auto not_before = model_.NotBefore(queue_.front().file->ConcurrentSpeculativeReads());
        if (not_before > now) {
          clock_->WaitUntil(&cv_, &mu_, not_before);
        } else if (model_.in_flight() == 0) {
          // A gap between demand reads signals; if none comes, start once starved.
          clock_->WaitUntil(&cv_, &mu_, model_.StarvedAt());
        } else {
          cv_.Wait(&mu_);
        }
      }
      --idle_workers_;
      if (stop_) return;
      concurrent = queue_.front().file->ConcurrentSpeculativeReads();
      uint64_t n = model_.Start(concurrent);
      // No more than the source can keep until read (with no room at all, Warm refuses and the
      // range comes back).
      if (concurrent > 0) {
        const uint64_t room = queue_.front().file->AheadRoom();
        if (room > 0) n = std::min(n, room);
      }
      taken = queue_.TakeFront(n);
      speculative_started_.fetch_add(1, std::memory_order_acq_rel);
      // A source that takes several at once: another worker may start too.
      if (idle_workers_ > 0 && CanStartLocked(clock_->Now())) cv_.Signal();
    }
    const uint64_t n = taken.end - taken.offset;
    const double delay_before = RunDelaySeconds(clock_, schedstat);
    const auto start = clock_->Now();
    // Errors are ignored: the demand read of these bytes will report them.
    const Result<uint64_t> moved = taken.file->Warm(taken.offset, n, &buffer);
    speculative_finished_.fetch_add(1, std::memory_order_acq_rel);
    const Status s = moved.has_value() ? Status::OK() : moved.error();
    SourceModel::Speculative sp;
    sp.n = n;
    // Only bytes the source really moved say how fast it is: a range the readers' own reads
    // had brought in costs no transfer (and took no time).
    sp.moved = moved.value_or(n);
    sp.wall = SecondsSince(start);
    sp.run_delay = RunDelaySeconds(clock_, schedstat) - delay_before;
    sp.one_queue = concurrent == 0;
    {
      MutexLock l(&mu_);
      const auto now = clock_->Now();
      model_.NoteFinished(now);
      if (s.code() == Status::Code::kResourceExhausted) {
        // The source keeps enough unread bytes: the range goes back to the front, for later.
        if (!stop_) {
          const bool was_empty = queue_.empty();
          queue_.PushFront(taken.file, taken.offset, taken.end);
          if (was_empty) model_.NoteQueuedIntoEmpty(now);
          model_.NoteBusy(now);
        }
      } else {
        model_.NoteSpeculative(sp, now);
      }
    }
    cv_.Signal();  // the other worker may start (the limit may have changed)
    if (s.ok() && on_arrived_) on_arrived_(*taken.file, taken.offset, taken.end);
  }
}

void RecordScheduler::Yield(bool yield) {
  if (yield_.exchange(yield, std::memory_order_acq_rel) == yield || yield) return;
  {
    MutexLock l(&mu_);  // a worker between its check and its wait sees the change
  }
  cv_.SignalAll();
}

double RecordScheduler::SecondsSince(timing::Clock::TimePoint start) const {
  return std::chrono::duration<double>(clock_->Now() - start).count();
}

bool RecordScheduler::CanStartLocked(timing::Clock::TimePoint now) const {
  return !queue_.empty() && !yield_.load(std::memory_order_acquire) &&
         model_.CanStart(now, queue_.front().file->ConcurrentSpeculativeReads(),
                         demand_active_.load(std::memory_order_acquire));
}

RecordScheduler::Stats RecordScheduler::stats() const {
  MutexLock l(&mu_);
  Stats s = model_.stats();
  s.queued_bytes = queue_.queued_bytes();
  s.promoted_reads = queue_.promoted_reads();
  s.promoted_bytes = queue_.promoted_bytes();
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
