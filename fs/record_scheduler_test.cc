#include "fs/record_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

// The scheduler's thread shell with real threads and a simulated device: what it does in
// which order, never how long it takes. Its decisions (chunk size, pauses, overlap) are
// SourceModel's, tested exactly on synthetic timelines in source_model_test.cc; the queue's
// in speculation_queue_test.cc.
namespace pcrfs::fs {
namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// A source with a latency (requests overlap in it, as on a network) and a bandwidth (one
// transfer at a time, first come first served, as in a blkio throttle or on one link), with
// a cache like the page cache: bytes transferred once are served again at no cost. It logs
// every transfer from the device.
class SimulatedSource final : public RandomAccessFile, public SpeculationSource {
 public:
  struct Transfer {
    uint64_t offset, n;           // the read asked for
    std::vector<uint64_t> pages;  // the pages moved from the device (uncached)
    std::thread::id thread;
    uint64_t ticket;  // the place in the device's queue
    Clock::time_point start, end;
  };
  // burst_seconds > 0: a blkio throttle's token bucket, which after an idle spell lets that
  // many seconds of bandwidth through at once, as cgroup v1's throttle does with its 100 ms
  // slices (docs/notebook/2026-11-23-to-27-record-scheduler.md).
  SimulatedSource(uint64_t size, double bandwidth, double latency, bool keeps = true,
                  double burst_seconds = 0)
      : size_(size),
        bandwidth_(bandwidth),
        latency_(latency),
        keeps_(keeps),
        burst_bytes_(burst_seconds * bandwidth),
        tokens_(burst_bytes_) {}

  // Transfers side by side, each at the full bandwidth (an SSD with requests in flight at
  // once), not one at a time. Call before the first read.
  void ServeSideBySide() { side_by_side_ = true; }

  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset > size_ || n > size_ - offset) return Status::Corruption("read past the end");
    if (latency_ > 0) std::this_thread::sleep_for(Seconds(latency_));
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t ticket = next_ticket_++;
    if (!side_by_side_) cv_.wait(l, [&] { return serving_ == ticket; });
    std::vector<uint64_t> pages;
    for (uint64_t b = offset / kPage; b <= (offset + n - 1) / kPage && n > 0; ++b) {
      if (!keeps_ || cached_.insert(b).second) pages.push_back(b);
    }
    const auto start = Clock::now();
    double wait = static_cast<double>(pages.size() * kPage) / bandwidth_;
    if (burst_bytes_ > 0) {
      tokens_ = std::min(burst_bytes_, tokens_ + Seconds(start - tokens_at_).count() * bandwidth_);
      const double bytes = static_cast<double>(pages.size() * kPage);
      const double used = std::min(tokens_, bytes);
      tokens_ -= used;
      wait = (bytes - used) / bandwidth_;
      tokens_at_ = start + std::chrono::duration_cast<Clock::duration>(Seconds(wait));
    }
    l.unlock();
    if (wait > 0) std::this_thread::sleep_for(Seconds(wait));
    l.lock();
    transfers_.push_back(
        {offset, n, std::move(pages), std::this_thread::get_id(), ticket, start, Clock::now()});
    ++serving_;
    cv_.notify_all();
    // One memset, not a loop: under ThreadSanitizer a byte loop over MBs would take longer
    // than the simulated transfer.
    std::memset(dst, static_cast<int>(offset % 251), n);
    return Status::OK();
  }
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return name_; }
  // As a file in the page cache: only the pages not cached yet are moved (and reported).
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override {
    uint64_t uncached = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (uint64_t b = offset / kPage; n > 0 && b <= (offset + n - 1) / kPage; ++b) {
        if (!keeps_ || cached_.count(b) == 0) uncached += kPage;
      }
    }
    scratch->resize(static_cast<size_t>(n));
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, static_cast<size_t>(n), scratch->data()));
    return std::min(uncached, n);
  }

  std::vector<Transfer> transfers() const {
    std::lock_guard<std::mutex> l(mu_);
    return transfers_;
  }
  static constexpr uint64_t kPage = 4096;

 private:
  const uint64_t size_;
  const double bandwidth_, latency_;
  const bool keeps_;
  bool side_by_side_ = false;
  const double burst_bytes_;
  const std::string name_ = "simulated";
  mutable std::mutex mu_;
  mutable double tokens_;  // the throttle's burst budget left (burst_bytes_ > 0)
  mutable Clock::time_point tokens_at_ = Clock::now();
  mutable std::condition_variable cv_;
  mutable uint64_t next_ticket_ = 0, serving_ = 0;
  mutable std::set<uint64_t> cached_;  // pages
  mutable std::vector<Transfer> transfers_;
};

// Waits until the scheduler has nothing queued or in flight (at most 30 s).
void WaitIdle(const RecordScheduler& s, uint64_t expect_bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline && s.stats().speculative_bytes < expect_bytes) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(RecordSchedulerTest, DemandReadQueuesBehindAtMostOneSpeculativeRead) {
  constexpr double kBandwidth = 50e6;  // a throttled volume: one transfer at a time
  auto src = std::make_shared<SimulatedSource>(uint64_t{256} << 20, kBandwidth, 0);
  const SourceFile file = SourceFile::Speculative(src);
  RecordScheduler s;
  s.Speculate(file, {{0, uint64_t{128} << 20}});
  // Let the chunk size settle on the measured rate (4 ms at 50 MB/s is ~200 KB).
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::vector<uint8_t> buf(16384);
  std::vector<Clock::time_point> issued;
  for (int i = 0; i < 20; ++i) {
    // The time is taken inside the scheduler's demand read (Demand, which Read uses), i.e.
    // once the scheduler counts the read as in progress.
    const uint64_t off = (uint64_t{200} << 20) + i * buf.size();
    ASSERT_TRUE(s.Demand(file, buf.size(), [&] {
                   issued.push_back(Clock::now());
                   return src->Read(off, buf.size(), buf.data());
                 }).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  EXPECT_GT(s.stats().speculative_reads, 10u);
  EXPECT_LE(s.stats().chunk, uint64_t{512} << 10) << "a chunk should take a few ms";
  // Ahead of each demand read in the device's queue there is at most one speculative read
  // that had not finished when the demand read was issued: the one in flight. (By order of
  // events, not by durations, so a slow machine cannot fail it.)
  const auto log = src->transfers();
  size_t demand = 0;
  for (const auto& d : log) {
    if (d.thread != std::this_thread::get_id()) continue;
    ASSERT_LT(demand, issued.size());
    int ahead = 0;
    for (const auto& x : log) {
      if (x.thread != d.thread && x.ticket < d.ticket && x.end > issued[demand]) ++ahead;
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
  auto src = std::make_shared<SimulatedSource>(kBytes, kBandwidth, 0);
  const SourceFile file = SourceFile::Speculative(src);
  RecordScheduler s;
  s.Speculate(file, {{0, kBytes}});
  WaitIdle(s, kBytes);
  EXPECT_EQ(s.stats().speculative_bytes, kBytes);
  EXPECT_EQ(s.stats().queued_bytes, 0u);
  uint64_t moved = 0;
  for (const auto& t : src->transfers()) moved += t.pages.size() * SimulatedSource::kPage;
  EXPECT_EQ(moved, kBytes);
}

TEST(RecordSchedulerTest, NothingIsReadTwice) {
  constexpr uint64_t kSize = uint64_t{16} << 20;
  auto src = std::make_shared<SimulatedSource>(kSize, 400e6, 0);
  const SourceFile file = SourceFile::Speculative(src);
  RecordScheduler s;
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
  WaitIdle(s, kSize - (4 << 20));
  EXPECT_EQ(s.stats().speculative_bytes, kSize - (4 << 20));  // [0, 8M) and [12M, 16M)
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
  EXPECT_EQ(asked.size() * 512, kSize - (4 << 20));
}

TEST(RecordSchedulerTest, NoSpeculationFromASourceThatKeepsNothing) {
  auto src = std::make_shared<SimulatedSource>(1 << 20, 400e6, 0, /*keeps=*/false);
  RecordScheduler s;
  // A file without speculation hooks (SourceFile::speculation() null): what a store hands out
  // for a source that keeps nothing.
  s.Speculate(SourceFile(std::shared_ptr<const RandomAccessFile>(src)), {{0, 1 << 20}});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(s.stats().speculative_reads, 0u);
  EXPECT_TRUE(src->transfers().empty());
}

// A remote store's file as the scheduler sees it: it orders its own requests
// (SpeculationSource::ConcurrentSpeculativeReads), each speculative read takes a latency, and it
// refuses speculation while `busy` is set (its cache holds enough unread bytes).
class ConcurrentSource final : public RandomAccessFile, public SpeculationSource {
 public:
  explicit ConcurrentSource(uint64_t size) : size_(size) {}
  Status Read(uint64_t, size_t n, uint8_t* dst) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::memset(dst, 0, n);
    return Status::OK();
  }
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>*) const override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (busy_) {
        ++refused_;
        return Err(Status::ResourceExhausted("enough unread"));
      }
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> l(mu_);
    --in_flight_;
    warmed_.push_back({offset, n});
    return n;
  }
  void Prefetch(uint64_t offset, uint64_t n) const override {
    std::lock_guard<std::mutex> l(mu_);
    prefetched_.push_back({offset, n});
  }
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int ConcurrentSpeculativeReads() const override { return 4; }
  uint64_t AheadRoom() const override {
    std::lock_guard<std::mutex> l(mu_);
    return room_;
  }
  void set_room(uint64_t room) {
    std::lock_guard<std::mutex> l(mu_);
    room_ = room;
  }
  std::vector<std::pair<uint64_t, uint64_t>> prefetched() const {
    std::lock_guard<std::mutex> l(mu_);
    return prefetched_;
  }

  void set_busy(bool b) {
    std::lock_guard<std::mutex> l(mu_);
    busy_ = b;
  }
  int max_in_flight() const {
    std::lock_guard<std::mutex> l(mu_);
    return max_in_flight_;
  }
  int refused() const {
    std::lock_guard<std::mutex> l(mu_);
    return refused_;
  }
  std::vector<std::pair<uint64_t, uint64_t>> warmed() const {
    std::lock_guard<std::mutex> l(mu_);
    return warmed_;
  }

 private:
  const uint64_t size_;
  const std::string name_ = "concurrent";
  mutable std::mutex mu_;
  mutable bool busy_ = false;
  uint64_t room_ = UINT64_MAX;  // AheadRoom
  mutable int in_flight_ = 0, max_in_flight_ = 0, refused_ = 0;
  mutable std::vector<std::pair<uint64_t, uint64_t>> warmed_, prefetched_;
};

TEST(RecordSchedulerTest, ConcurrentSourceSpeculatesWhileDemandReadsRun) {
  auto src = std::make_shared<ConcurrentSource>(uint64_t{64} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  RecordScheduler s;
  std::atomic<bool> stop{false};
  // Demand reads back to back from two threads: a local disk's policy would never speculate.
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::vector<uint8_t> buf(4096);
      while (!stop.load()) (void)s.Read(file, 0, buf.size(), buf.data());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  s.Speculate(file, {{0, uint64_t{16} << 20}});
  WaitIdle(s, uint64_t{16} << 20);
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(s.stats().speculative_bytes, uint64_t{16} << 20) << s.Describe();
  EXPECT_GE(src->max_in_flight(), 2);
  EXPECT_LE(src->max_in_flight(), 4);
  for (const auto& [offset, n] : src->warmed()) {
    if (offset + n == (uint64_t{16} << 20)) continue;    // the rest of the range
    EXPECT_GE(n, RecordScheduler::kMinConcurrentChunk);  // requests worth a round trip
  }
}

TEST(RecordSchedulerTest, ABusySourceIsAskedAgainAndLosesNothing) {
  auto src = std::make_shared<ConcurrentSource>(uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);
  RecordScheduler s;
  s.Speculate(file, {{0, uint64_t{4} << 20}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GT(src->refused(), 0);
  EXPECT_TRUE(src->warmed().empty());
  src->set_busy(false);
  WaitIdle(s, uint64_t{4} << 20);
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
  std::atomic<int> reading{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < RecordScheduler::kPromoteAtDemandReads; ++i) {
    readers.emplace_back([&] {
      (void)s.Demand(file, 1, [&] {
        ++reading;
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return Status::OK();
      });
    });
  }
  while (reading.load() < RecordScheduler::kPromoteAtDemandReads) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  body();
  release = true;
  for (auto& t : readers) t.join();
}

TEST(RecordSchedulerTest, ADemandPieceInAQueuedRangeTakesAChunkOfIt) {
  auto src = std::make_shared<ConcurrentSource>(uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);  // keep the range queued
  RecordScheduler s;
  const uint64_t mib = uint64_t{1} << 20;
  s.Speculate(file, {{0, 4 * mib}});
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
  WaitIdle(s, 4 * mib - 5000 - window);
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
  auto src = std::make_shared<ConcurrentSource>(uint64_t{64} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  RecordScheduler s;
  const uint64_t mib = uint64_t{1} << 20;
  s.Speculate(file, {{0, 8 * mib}});  // reads of 512 KiB, 20 ms each: ~26 MB/s per read
  WaitIdle(s, 8 * mib);
  ASSERT_LT(s.stats().chunk, RecordScheduler::kMinConcurrentChunk);
  src->set_busy(true);  // keep the next range queued
  s.Speculate(file, {{16 * mib, 4 * mib}});
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
  auto src = std::make_shared<ConcurrentSource>(uint64_t{8} << 20);
  const SourceFile file = SourceFile::Speculative(src);
  src->set_busy(true);  // keep everything queued until all is planned
  RecordScheduler s;
  const uint64_t kib = 1024;
  s.Speculate(file, {{0, 64 * kib}});
  s.Speculate(file, {{256 * kib, 64 * kib}, {128 * kib, 64 * kib}});
  s.Speculate(file, {{64 * kib, 64 * kib}});    // joins [0, 64K) and [128K, 192K)
  s.Speculate(file, {{192 * kib, 64 * kib}});   // joins [0, 192K) and [256K, 320K)
  s.Speculate(file, {{1024 * kib, 64 * kib}});  // apart
  s.Speculate(file, {{960 * kib, 64 * kib}});   // ends where the one before starts
  // A worker may be handing a range back (the source is busy) just now: not queued for that
  // instant.
  for (int i = 0; i < 1000 && s.stats().queued_bytes != 448 * kib; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(s.stats().queued_bytes, 448 * kib);
  src->set_busy(false);
  WaitIdle(s, 448 * kib);
  auto warmed = src->warmed();
  std::sort(warmed.begin(), warmed.end());
  ASSERT_EQ(warmed.size(), 2u) << s.Describe();
  EXPECT_EQ(warmed[0], (std::pair<uint64_t, uint64_t>{0, 320 * kib}));
  EXPECT_EQ(warmed[1], (std::pair<uint64_t, uint64_t>{960 * kib, 128 * kib}));
  EXPECT_EQ(s.stats().queued_bytes, 0u);
}

}  // namespace
}  // namespace pcrfs::fs
