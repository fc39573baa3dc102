#include "fs/record_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"

// The scheduler's thread shell with real threads, a simulated device and a FakeClock: what it
// does in which order, never how long it takes. Time passes only where a device takes it or the
// test moves the clock, so a pause, a starvation or a measured rate is the same on any machine,
// and nothing sleeps. Its decisions (chunk size, pauses, overlap) are SourceModel's, tested
// exactly on synthetic timelines in source_model_test.cc; the queue's in
// speculation_queue_test.cc.
namespace pcrfs::fs {
namespace {

using std::chrono::milliseconds;
using timing::FakeClock;
using Seconds = std::chrono::duration<double>;

// Bounds for a broken test, never timings: a wait that reaches one has failed.
constexpr auto kBound = std::chrono::seconds(30);

// What the scheduler reports through OnArrived (after each speculative read that succeeded):
// a test waits for the bytes it expects instead of polling.
class Arrivals {
 public:
  explicit Arrivals(const FakeClock* clock) : clock_(clock) {}
  RecordScheduler::OnArrived Callback() {
    return [this](const SpeculationSource&, uint64_t offset, uint64_t end) {
      {
        MutexLock l(&mu_);
        bytes_ += end - offset;
        ++reads_;
      }
      cv_.SignalAll();
      clock_->Poke();  // Drive asks again
    };
  }
  uint64_t bytes() const {
    MutexLock l(&mu_);
    return bytes_;
  }
  // Waits (at most kBound) until `bytes` have arrived; returns whether they did.
  bool AwaitBytes(uint64_t bytes) {
    MutexLock l(&mu_);
    return cv_.WaitFor(&mu_, kBound, [&]() REQUIRES(mu_) { return bytes_ >= bytes; });
  }
  bool AwaitReads(uint64_t reads) {
    MutexLock l(&mu_);
    return cv_.WaitFor(&mu_, kBound, [&]() REQUIRES(mu_) { return reads_ >= reads; });
  }

 private:
  const FakeClock* const clock_;
  mutable Mutex mu_;
  CondVar cv_;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t reads_ GUARDED_BY(mu_) = 0;
};

// Moves `clock` on by `step` whenever a thread waits on it, until done() (what a Poke or a new
// wait makes it ask again), or for a bound without either (a failure). Returns done().
bool Drive(FakeClock& clock, milliseconds step, const std::function<bool()>& done) {
  for (;;) {
    if (clock.AwaitWaiterOr(done, std::chrono::duration_cast<milliseconds>(kBound))) return true;
    if (clock.waiters() == 0) return done();  // the bound passed
    clock.Advance(step);
  }
}

// A source with a bandwidth (one transfer at a time, first come first served, as in a blkio
// throttle or on one link) whose transfers take the FakeClock's time, with a cache like the
// page cache: bytes transferred once are served again at no cost. It logs every transfer from
// the device, in the order of events (stamps), not of times.
class SimulatedSource final : public RandomAccessFile, public SpeculationSource {
 public:
  struct Transfer {
    uint64_t offset, n;           // the read asked for
    std::vector<uint64_t> pages;  // the pages moved from the device (uncached)
    std::thread::id thread;
    uint64_t ticket;     // the place in the device's queue
    uint64_t end_stamp;  // Stamp() when it ended
  };
  SimulatedSource(FakeClock* clock, uint64_t size, double bandwidth, bool keeps = true)
      : clock_(clock), size_(size), bandwidth_(bandwidth), keeps_(keeps) {}

  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset > size_ || n > size_ - offset) return Status::Corruption("read past the end");
    MutexLock l(&mu_);
    const uint64_t ticket = next_ticket_++;
    cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return serving_ == ticket; });
    std::vector<uint64_t> pages;
    for (uint64_t b = offset / kPage; b <= (offset + n - 1) / kPage && n > 0; ++b) {
      if (!keeps_ || cached_.insert(b).second) pages.push_back(b);
    }
    const double wait = static_cast<double>(pages.size() * kPage) / bandwidth_;
    l.Unlock();
    // The transfer takes its time on the clock (the device serves one at a time: ours).
    clock_->Advance(std::chrono::duration_cast<std::chrono::nanoseconds>(Seconds(wait)));
    l.Lock();
    transfers_.push_back(
        {offset, n, std::move(pages), std::this_thread::get_id(), ticket, ++stamp_});
    ++serving_;
    cv_.SignalAll();
    std::memset(dst, static_cast<int>(offset % 251), n);
    return Status::OK();
  }
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return name_; }
  // As a file in the page cache: only the pages not cached yet are moved (and reported).
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override {
    uint64_t uncached = 0;
    {
      MutexLock l(&mu_);
      for (uint64_t b = offset / kPage; n > 0 && b <= (offset + n - 1) / kPage; ++b) {
        if (!keeps_ || cached_.count(b) == 0) uncached += kPage;
      }
    }
    scratch->resize(static_cast<size_t>(n));
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, static_cast<size_t>(n), scratch->data()));
    return std::min(uncached, n);
  }

  // A point in the order of events: transfers that ended before it have smaller end stamps.
  uint64_t Stamp() const {
    MutexLock l(&mu_);
    return ++stamp_;
  }
  std::vector<Transfer> transfers() const {
    MutexLock l(&mu_);
    return transfers_;
  }
  static constexpr uint64_t kPage = 4096;

 private:
  FakeClock* const clock_;
  const uint64_t size_;
  const double bandwidth_;
  const bool keeps_;
  const std::string name_ = "simulated";
  mutable Mutex mu_;
  mutable CondVar cv_;
  mutable uint64_t next_ticket_ GUARDED_BY(mu_) = 0;
  mutable uint64_t serving_ GUARDED_BY(mu_) = 0;
  mutable uint64_t stamp_ GUARDED_BY(mu_) = 0;
  mutable std::set<uint64_t> cached_ GUARDED_BY(mu_);  // pages
  mutable std::vector<Transfer> transfers_ GUARDED_BY(mu_);
};

TEST(RecordSchedulerTest, DemandReadQueuesBehindAtMostOneSpeculativeRead) {
  constexpr double kBandwidth = 50e6;  // a throttled volume: one transfer at a time
  FakeClock clock;
  auto src = std::make_shared<SimulatedSource>(&clock, uint64_t{256} << 20, kBandwidth);
  const SourceFile file = SourceFile::Speculative(src);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  s.Speculate(file, {{0, uint64_t{128} << 20}});
  // Let the chunk size settle on the measured rate (4 ms at 50 MB/s is ~200 KB).
  ASSERT_TRUE(arrivals.AwaitReads(20));
  std::vector<uint8_t> buf(16384);
  std::vector<uint64_t> issued;
  for (int i = 0; i < 20; ++i) {
    // The stamp is taken inside the scheduler's demand read (Demand, which Read uses), i.e.
    // once the scheduler counts the read as in progress.
    const uint64_t off = (uint64_t{200} << 20) + i * buf.size();
    ASSERT_TRUE(s.Demand(file, buf.size(), [&] {
                   issued.push_back(src->Stamp());
                   return src->Read(off, buf.size(), buf.data());
                 }).ok());
    clock.Advance(milliseconds(3));  // a gap between demand reads
  }
  EXPECT_GT(s.stats().speculative_reads, 10u);
  EXPECT_LE(s.stats().chunk, uint64_t{512} << 10) << "a chunk should take a few ms";
  // Ahead of each demand read in the device's queue there is at most one speculative read
  // that had not finished when the demand read was issued: the one in flight.
  const auto log = src->transfers();
  size_t demand = 0;
  for (const auto& d : log) {
    if (d.thread != std::this_thread::get_id()) continue;
    ASSERT_LT(demand, issued.size());
    int ahead = 0;
    for (const auto& x : log) {
      if (x.thread != d.thread && x.ticket < d.ticket && x.end_stamp > issued[demand]) ++ahead;
    }
    EXPECT_LE(ahead, 1) << "demand read " << demand;
    ++demand;
  }
  EXPECT_EQ(demand, issued.size());
}

// With no demand reads, the pool hands the source one chunk after another until the queue is
// empty (no wake-up is lost between them: a lost one would leave bytes unread at the end).
TEST(RecordSchedulerTest, SpeculationKeepsAnIdleSourceBusy) {
  constexpr double kBandwidth = 100e6;
  constexpr uint64_t kBytes = uint64_t{24} << 20;
  FakeClock clock;
  auto src = std::make_shared<SimulatedSource>(&clock, kBytes, kBandwidth);
  const SourceFile file = SourceFile::Speculative(src);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  s.Speculate(file, {{0, kBytes}});
  ASSERT_TRUE(arrivals.AwaitBytes(kBytes));
  EXPECT_EQ(s.stats().speculative_bytes, kBytes);
  EXPECT_EQ(s.stats().queued_bytes, 0u);
  uint64_t moved = 0;
  for (const auto& t : src->transfers()) moved += t.pages.size() * SimulatedSource::kPage;
  EXPECT_EQ(moved, kBytes);
}

TEST(RecordSchedulerTest, NothingIsReadTwice) {
  constexpr uint64_t kSize = uint64_t{16} << 20;
  FakeClock clock;
  auto src = std::make_shared<SimulatedSource>(&clock, kSize, 400e6);
  const SourceFile file = SourceFile::Speculative(src);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  // Overlapping and repeated requests, some past the end, while demand reads run.
  s.Speculate(file, {{0, 4 << 20}, {2 << 20, 4 << 20}});
  std::thread::id reader_id;
  std::thread reader([&] {
    std::vector<uint8_t> buf(40000);
    for (uint64_t off = 1 << 20; off + buf.size() < kSize; off += 1 << 20) {
      ASSERT_TRUE(s.Read(file, off, buf.size(), buf.data()).ok());
      EXPECT_EQ(buf[5], static_cast<uint8_t>(off % 251));
    }
  });
  s.Speculate(file, {{0, 8 << 20}, {12 << 20, 8 << 20}, {kSize + 5, 100}});
  s.Speculate(file, {{3 << 20, 1}});
  reader_id = reader.get_id();
  reader.join();
  // Speculation waiting for a gap or for starvation gets it once time passes.
  const uint64_t want = kSize - (4 << 20);  // [0, 8M) and [12M, 16M)
  ASSERT_TRUE(Drive(clock, milliseconds(5), [&] { return arrivals.bytes() >= want; }))
      << s.Describe();
  ASSERT_TRUE(arrivals.AwaitBytes(want));
  EXPECT_EQ(s.stats().speculative_bytes, want);
  // The device moved each page once, and the scheduler's own reads (not from this test's
  // threads) never asked for a byte twice.
  std::map<uint64_t, int> moved, asked;
  const std::thread::id main = std::this_thread::get_id(), demand = reader_id;
  for (const auto& t : src->transfers()) {
    for (uint64_t p : t.pages) ++moved[p];
    if (t.thread == main || t.thread == demand) continue;
    for (uint64_t b = t.offset; b < t.offset + t.n; b += 512) ++asked[b];
  }
  for (const auto& [page, count] : moved) EXPECT_EQ(count, 1) << "page " << page;
  for (const auto& [at, count] : asked) EXPECT_EQ(count, 1) << "speculative read at " << at;
  EXPECT_EQ(asked.size() * 512, want);
}

TEST(RecordSchedulerTest, NoSpeculationFromASourceThatKeepsNothing) {
  FakeClock clock;
  auto src = std::make_shared<SimulatedSource>(&clock, 1 << 20, 400e6, /*keeps=*/false);
  RecordScheduler s(nullptr, SpeculationQueue::kForgetAfter, &clock);
  // A file without speculation hooks (SourceFile::speculation() null): what a store hands out
  // for a source that keeps nothing. Nothing is queued, so nothing can ever be read.
  s.Speculate(SourceFile(std::shared_ptr<const RandomAccessFile>(src)), {{0, 1 << 20}});
  EXPECT_EQ(s.stats().queued_bytes, 0u);
  EXPECT_EQ(s.stats().speculative_reads, 0u);
  EXPECT_TRUE(src->transfers().empty());
}

// A remote store's file as the scheduler sees it: it orders its own requests
// (SpeculationSource::ConcurrentSpeculativeReads), each speculative read takes 20 ms of the
// FakeClock's time (overlapping), and it refuses speculation while `busy` is set (its cache
// holds enough unread bytes).
class ConcurrentSource final : public RandomAccessFile, public SpeculationSource {
 public:
  static constexpr auto kLatency = milliseconds(20);
  ConcurrentSource(const FakeClock* clock, uint64_t size) : clock_(clock), size_(size) {}
  Status Read(uint64_t, size_t n, uint8_t* dst) const override {
    std::memset(dst, 0, n);
    return Status::OK();
  }
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>*) const override {
    MutexLock l(&mu_);
    if (busy_) {
      ++refused_;
      cv_.SignalAll();
      return Err(Status::ResourceExhausted("enough unread"));
    }
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    const auto done = clock_->Now() + kLatency;
    while (clock_->Now() < done) clock_->WaitUntil(&cv_, &mu_, done);
    --in_flight_;
    warmed_.push_back({offset, n});
    return n;
  }
  void Prefetch(uint64_t offset, uint64_t n) const override {
    MutexLock l(&mu_);
    prefetched_.push_back({offset, n});
  }
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int ConcurrentSpeculativeReads() const override { return 4; }
  uint64_t AheadRoom() const override {
    MutexLock l(&mu_);
    return room_;
  }
  void set_room(uint64_t room) {
    MutexLock l(&mu_);
    room_ = room;
  }
  std::vector<std::pair<uint64_t, uint64_t>> prefetched() const {
    MutexLock l(&mu_);
    return prefetched_;
  }
  void set_busy(bool b) {
    MutexLock l(&mu_);
    busy_ = b;
  }
  int max_in_flight() const {
    MutexLock l(&mu_);
    return max_in_flight_;
  }
  int refused() const {
    MutexLock l(&mu_);
    return refused_;
  }
  // Waits (at most kBound) until Warm has been refused n times in all.
  bool AwaitRefused(int n) const {
    MutexLock l(&mu_);
    return cv_.WaitFor(&mu_, kBound, [&]() REQUIRES(mu_) { return refused_ >= n; });
  }
  std::vector<std::pair<uint64_t, uint64_t>> warmed() const {
    MutexLock l(&mu_);
    return warmed_;
  }

 private:
  const FakeClock* const clock_;
  const uint64_t size_;
  const std::string name_ = "concurrent";
  mutable Mutex mu_;
  mutable CondVar cv_;
  bool busy_ GUARDED_BY(mu_) = false;
  uint64_t room_ GUARDED_BY(mu_) = UINT64_MAX;  // AheadRoom
  mutable int in_flight_ GUARDED_BY(mu_) = 0;
  mutable int max_in_flight_ GUARDED_BY(mu_) = 0;
  mutable int refused_ GUARDED_BY(mu_) = 0;
  mutable std::vector<std::pair<uint64_t, uint64_t>> warmed_ GUARDED_BY(mu_);
  mutable std::vector<std::pair<uint64_t, uint64_t>> prefetched_ GUARDED_BY(mu_);
};

// Keeps n demand reads of `file` in progress (readers that outrun their fetches) from its
// construction, once all n have started, until its destruction.
class DemandReadsInProgress {
 public:
  DemandReadsInProgress(RecordScheduler& s, const SourceFile& file, int n) {
    for (int i = 0; i < n; ++i) {
      readers_.emplace_back([this, &s, &file] {
        (void)s.Demand(file, 1, [this] {
          MutexLock l(&mu_);
          ++reading_;
          cv_.SignalAll();
          cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return released_; });
          return Status::OK();
        });
      });
    }
    MutexLock l(&mu_);
    EXPECT_TRUE(cv_.WaitFor(&mu_, kBound, [&]() REQUIRES(mu_) { return reading_ == n; }));
  }
  ~DemandReadsInProgress() {
    {
      MutexLock l(&mu_);
      released_ = true;
    }
    cv_.SignalAll();
    for (auto& t : readers_) t.join();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int reading_ GUARDED_BY(mu_) = 0;
  bool released_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> readers_;
};

// Waits (at most kBound) until exactly `bytes` are queued: after a busy source's refusal, every
// part a worker took is back in the queue once they are, and the pool takes nothing more until
// the clock passes the pause (SourceModel::kBusyRetry), so what is queued is what the test sees.
// The parts come back microseconds after the refusal: this polls, it does not sleep.
bool AwaitQueued(const RecordScheduler& s, uint64_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  while (s.stats().queued_bytes != bytes) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(RecordSchedulerTest, ConcurrentSourceSpeculatesWhileDemandReadsRun) {
  FakeClock clock;
  auto src = std::make_shared<ConcurrentSource>(&clock, uint64_t{64} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  {
    // Demand reads in progress all along: a local disk's policy would never speculate.
    DemandReadsInProgress reading(s, file, 2);
    s.Speculate(file, {{0, uint64_t{16} << 20}});
    // Several speculative reads at once, each waiting for its answer.
    ASSERT_TRUE(clock.AwaitWaiters(2));
    ASSERT_TRUE(Drive(clock, ConcurrentSource::kLatency,
                      [&] { return arrivals.bytes() >= (uint64_t{16} << 20); }));
  }
  EXPECT_EQ(s.stats().speculative_bytes, uint64_t{16} << 20) << s.Describe();
  EXPECT_GE(src->max_in_flight(), 2);
  EXPECT_LE(src->max_in_flight(), 4);
  for (const auto& [offset, n] : src->warmed()) {
    if (offset + n == (uint64_t{16} << 20)) continue;    // the rest of the range
    EXPECT_GE(n, RecordScheduler::kMinConcurrentChunk);  // requests worth a round trip
  }
}

TEST(RecordSchedulerTest, ABusySourceIsAskedAgainAndLosesNothing) {
  FakeClock clock;
  auto src = std::make_shared<ConcurrentSource>(&clock, uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  s.Speculate(file, {{0, uint64_t{4} << 20}});
  ASSERT_TRUE(src->AwaitRefused(1));
  ASSERT_TRUE(AwaitQueued(s, uint64_t{4} << 20));
  const int refused = src->refused();
  // Asked again once the pause (SourceModel::kBusyRetry) has passed.
  clock.Advance(SourceModel::kBusyRetry);
  ASSERT_TRUE(src->AwaitRefused(refused + 1));
  EXPECT_TRUE(src->warmed().empty());
  src->set_busy(false);
  ASSERT_TRUE(Drive(clock, ConcurrentSource::kLatency,
                    [&] { return arrivals.bytes() >= (uint64_t{4} << 20); }));
  // Every byte warmed exactly once, in order.
  uint64_t pos = 0;
  auto warmed = src->warmed();
  std::sort(warmed.begin(), warmed.end());
  for (const auto& [offset, n] : warmed) {
    EXPECT_EQ(offset, pos);
    pos = offset + n;
  }
  EXPECT_EQ(pos, uint64_t{4} << 20);
}

// A demand piece inside a range queued for speculation takes one chunk of that range with it
// (from the piece on), and the rest of the range stays queued: every byte is still fetched
// exactly once, by the promoted window or by speculation.
// Runs `body` while kPromoteAtDemandReads demand reads of `file` are in progress (readers that
// outrun single-piece fetches, the condition for promotions).
void WhileDemandReadsRun(RecordScheduler& s, const SourceFile& file,
                         const std::function<void()>& body) {
  DemandReadsInProgress reading(s, file, RecordScheduler::kPromoteAtDemandReads);
  body();
}

TEST(RecordSchedulerTest, ADemandPieceInAQueuedRangeTakesAChunkOfIt) {
  FakeClock clock;
  auto src = std::make_shared<ConcurrentSource>(&clock, uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);  // keep the range queued
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  const uint64_t mib = uint64_t{1} << 20;
  s.Speculate(file, {{0, 4 * mib}});
  // The source refused the range and it is queued again, whole: no worker holds a part of it.
  ASSERT_TRUE(src->AwaitRefused(1));
  ASSERT_TRUE(AwaitQueued(s, 4 * mib));
  // A lone reader (a decoding DataLoader's worker): only its pieces, which leave the queue (a
  // speculative read would fetch them again once the cache let them go).
  s.WillRead(file, {{2 * mib, 5000}});
  EXPECT_EQ(src->prefetched().size(), 1u);
  EXPECT_EQ(s.stats().promoted_bytes, 0u);
  EXPECT_EQ(s.stats().queued_bytes, 4 * mib - 5000);
  // Readers that outrun single-piece fetches: demand reads in progress. The window ends where
  // the queued range does (at the lone reader's piece).
  WhileDemandReadsRun(s, file, [&] {
    s.WillRead(file, {{mib + 100, 5000}, {6 * mib, 5000}});  // inside, and not queued
  });
  auto prefetched = src->prefetched();
  ASSERT_EQ(prefetched.size(), 4u);
  const auto lone = prefetched[0];
  prefetched.erase(prefetched.begin());
  const uint64_t window = 2 * mib - (mib + 100);
  EXPECT_EQ(prefetched[0], (std::pair<uint64_t, uint64_t>{mib + 100, window}));
  EXPECT_EQ(prefetched[1], (std::pair<uint64_t, uint64_t>{mib + 100, 5000}));  // joins it
  EXPECT_EQ(prefetched[2], (std::pair<uint64_t, uint64_t>{6 * mib, 5000}));
  EXPECT_EQ(s.stats().promoted_bytes, window);
  EXPECT_EQ(s.stats().queued_bytes, 4 * mib - 5000 - window);
  src->set_busy(false);
  const uint64_t rest = 4 * mib - 5000 - window;
  ASSERT_TRUE(Drive(clock, ConcurrentSource::kLatency, [&] { return arrivals.bytes() >= rest; }));
  auto covered = src->warmed();
  covered.push_back(prefetched[0]);
  covered.push_back(lone);
  std::sort(covered.begin(), covered.end());
  uint64_t pos = 0;
  for (const auto& [offset, n] : covered) {
    EXPECT_EQ(offset, pos);
    pos = offset + n;
  }
  EXPECT_EQ(pos, 4 * mib);
}

// A remote source's speculative reads are bound by round trips, not bytes: the model's rate per
// read is low and its chunk falls towards kMinChunk, but a promoted window is what one
// speculative read of such a source takes (kMinConcurrentChunk), or demand reads would cut the
// queued ranges into one small request each (ImageNet-sized crops at level 5: 6,676 requests of
// ~20 KB for an epoch that takes 1,069 with these windows).
TEST(RecordSchedulerTest, APromotedWindowOfARemoteSourceIsAtLeastOneSpeculativeRead) {
  FakeClock clock;
  auto src = std::make_shared<ConcurrentSource>(&clock, uint64_t{64} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  const uint64_t mib = uint64_t{1} << 20;
  s.Speculate(file, {{0, 8 * mib}});  // reads of 512 KiB, 20 ms each: ~26 MB/s per read
  ASSERT_TRUE(
      Drive(clock, ConcurrentSource::kLatency, [&] { return arrivals.bytes() >= 8 * mib; }));
  ASSERT_LT(s.stats().chunk, RecordScheduler::kMinConcurrentChunk);
  src->set_busy(true);  // keep the next range queued
  s.Speculate(file, {{16 * mib, 4 * mib}});
  ASSERT_TRUE(src->AwaitRefused(1));
  ASSERT_TRUE(AwaitQueued(s, 4 * mib));
  WhileDemandReadsRun(s, file, [&] { s.WillRead(file, {{16 * mib + 100, 5000}}); });
  const auto prefetched = src->prefetched();
  ASSERT_EQ(prefetched.size(), 2u);
  EXPECT_EQ(prefetched[0],
            (std::pair<uint64_t, uint64_t>{16 * mib + 100, RecordScheduler::kMinConcurrentChunk}));
  EXPECT_EQ(s.stats().promoted_bytes, RecordScheduler::kMinConcurrentChunk);

  // A source with less room to keep bytes fetched ahead until read gets a window of that room,
  // shared by the pieces of the read.
  src->set_room(2 * 64 * 1024);
  WhileDemandReadsRun(s, file, [&] {
    s.WillRead(file, {{17 * mib + 100, 5000}, {18 * mib + 100, 5000}});
  });
  auto after = src->prefetched();
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(after[2], (std::pair<uint64_t, uint64_t>{17 * mib + 100, 64 * 1024}));
  EXPECT_EQ(after[3], (std::pair<uint64_t, uint64_t>{18 * mib + 100, 64 * 1024}));
  EXPECT_EQ(s.stats().promoted_bytes, RecordScheduler::kMinConcurrentChunk + 2 * 64 * 1024);

  // A source that keeps all the unread bytes it can already (a store many times its cache, read
  // in a shuffled order) gets no window at all, only the pieces: a window would be evicted
  // before its other files are read, or, smaller, fetch neighbours nobody reads.
  src->set_room(0);
  WhileDemandReadsRun(s, file, [&] { s.WillRead(file, {{19 * mib + 100, 5000}}); });
  after = src->prefetched();
  ASSERT_EQ(after.size(), 7u);
  EXPECT_EQ(after[6], (std::pair<uint64_t, uint64_t>{19 * mib + 100, 5000}));
  EXPECT_EQ(s.stats().promoted_bytes, RecordScheduler::kMinConcurrentChunk + 2 * 64 * 1024);

  // A read told to take no windows (a file of several pieces, a level larger than the caches:
  // FsOptions::windows_for_several_pieces) gets its pieces alone, with all the room there is,
  // and they leave the queue.
  src->set_room(64 * mib);
  const uint64_t queued = s.stats().queued_bytes;
  WhileDemandReadsRun(s, file, [&] {
    s.WillRead(file, {{19 * mib + 200000, 5000}, {19 * mib + 400000, 5000}}, false);
  });
  after = src->prefetched();
  ASSERT_EQ(after.size(), 9u);
  EXPECT_EQ(after[7], (std::pair<uint64_t, uint64_t>{19 * mib + 200000, 5000}));
  EXPECT_EQ(after[8], (std::pair<uint64_t, uint64_t>{19 * mib + 400000, 5000}));
  EXPECT_EQ(s.stats().promoted_bytes, RecordScheduler::kMinConcurrentChunk + 2 * 64 * 1024);
  EXPECT_EQ(s.stats().queued_bytes, queued - 2 * 5000);
}

// Ranges planned apart (folder by folder, group region by group region) that lie side by side
// in the record are one queued range, so a speculative read is a chunk, not one folder's
// region (40 class folders at level 1: ~50 KiB per request, each a round trip).
TEST(RecordSchedulerTest, QueuedRangesThatTouchAreReadAsOne) {
  FakeClock clock;
  auto src = std::make_shared<ConcurrentSource>(&clock, uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);  // keep everything queued until all is planned
  Arrivals arrivals(&clock);
  RecordScheduler s(arrivals.Callback(), SpeculationQueue::kForgetAfter, &clock);
  const uint64_t kib = 1024;
  s.Speculate(file, {{0, 64 * kib}});
  // Refused and queued again: from now on the pool waits for the clock, and takes nothing.
  ASSERT_TRUE(src->AwaitRefused(1));
  ASSERT_TRUE(AwaitQueued(s, 64 * kib));
  s.Speculate(file, {{256 * kib, 64 * kib}, {128 * kib, 64 * kib}});
  s.Speculate(file, {{64 * kib, 64 * kib}});    // joins [0, 64K) and [128K, 192K)
  s.Speculate(file, {{192 * kib, 64 * kib}});   // joins [0, 192K) and [256K, 320K)
  s.Speculate(file, {{1024 * kib, 64 * kib}});  // apart
  s.Speculate(file, {{960 * kib, 64 * kib}});   // ends where the one before starts
  EXPECT_EQ(s.stats().queued_bytes, 448 * kib);
  src->set_busy(false);
  ASSERT_TRUE(
      Drive(clock, ConcurrentSource::kLatency, [&] { return arrivals.bytes() >= 448 * kib; }));
  auto warmed = src->warmed();
  std::sort(warmed.begin(), warmed.end());
  ASSERT_EQ(warmed.size(), 2u) << s.Describe();
  EXPECT_EQ(warmed[0], (std::pair<uint64_t, uint64_t>{0, 320 * kib}));
  EXPECT_EQ(warmed[1], (std::pair<uint64_t, uint64_t>{960 * kib, 128 * kib}));
  EXPECT_EQ(s.stats().queued_bytes, 0u);
}

}  // namespace
}  // namespace pcrfs::fs
