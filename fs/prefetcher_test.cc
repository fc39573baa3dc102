#include "fs/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace pcrfs::fs {
namespace {

// A device that serves `rate` bytes per second, one read at a time, and records every read.
class SimulatedDevice final : public RandomAccessFile {
 public:
  SimulatedDevice(uint64_t size, double rate) : size_(size), rate_(rate) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset + n > size_) return Status::Corruption("read past the end");
    bytes_read_ += n;
    if (rate_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(static_cast<double>(n) / rate_));
    }
    std::memset(dst, static_cast<int>(offset & 0xff), n);
    std::lock_guard<std::mutex> l(mu_);
    reads_.push_back({offset, n});
    cv_.notify_all();
    return Status::OK();
  }
  uint64_t Size() const override { return size_; }
  uint64_t bytes_read() const { return bytes_read_; }
  size_t num_reads() const {
    std::lock_guard<std::mutex> l(mu_);
    return reads_.size();
  }
  const std::string& name() const override { return name_; }

  // Waits until [begin, end) has been read, then returns the reads.
  std::vector<std::pair<uint64_t, size_t>> WaitFor(uint64_t begin, uint64_t end) const {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(30), [&] {
      return !reads_.empty() && reads_.back().first + reads_.back().second >= end;
    });
    (void)begin;
    return reads_;
  }

 private:
  const uint64_t size_;
  const double rate_;
  const std::string name_ = "simulated";
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::vector<std::pair<uint64_t, size_t>> reads_;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

Prefetcher::Options Fixed(uint64_t chunk) {
  Prefetcher::Options o;
  o.chunk = chunk;
  o.probe = false;
  return o;
}

// The reads cover [begin, end) exactly once, in order.
void ExpectCovers(const std::vector<std::pair<uint64_t, size_t>>& reads, uint64_t begin,
                  uint64_t end) {
  uint64_t pos = begin;
  for (auto [off, n] : reads) {
    EXPECT_EQ(off, pos);
    pos += n;
  }
  EXPECT_EQ(pos, end);
}

TEST(PrefetcherTest, FastDeviceKeepsLargeReads) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{64} << 20, 0);
  Prefetcher p(Fixed(0));
  p.Submit(dev, 4096, (uint64_t{16} << 20) - 4096);
  auto reads = dev->WaitFor(4096, uint64_t{16} << 20);
  ExpectCovers(reads, 4096, uint64_t{16} << 20);
  // 16 reads of 1 MiB (the last one short). A read that took long (the thread was preempted
  // on a loaded machine) halves the next, and the one after grows back: allow a few.
  size_t full = 0;
  for (auto [off, n] : reads) full += n == Prefetcher::kMaxChunk;
  EXPECT_GE(full, 12u);
  EXPECT_LE(reads.size(), 20u);
}

TEST(PrefetcherTest, SlowDeviceGetsSmallReads) {
  // 10 MB/s: a 1 MiB read takes 105 ms, so a demand read queued behind it would wait that
  // long. The chunk halves until a read takes under 8 ms: 64 KiB (6.6 ms).
  const uint64_t end = uint64_t{3} << 20;
  auto dev = std::make_shared<SimulatedDevice>(end, 10e6);
  Prefetcher p(Fixed(0));
  p.Submit(dev, 0, end);
  auto reads = dev->WaitFor(0, end);
  ExpectCovers(reads, 0, end);
  ASSERT_GE(reads.size(), 6u);
  EXPECT_EQ(reads[0].second, Prefetcher::kMaxChunk);
  EXPECT_EQ(reads[1].second, Prefetcher::kMaxChunk / 2);
  EXPECT_EQ(reads.back().second, Prefetcher::kMinChunk);
  for (size_t i = 1; i < reads.size(); ++i) EXPECT_LE(reads[i].second, reads[i - 1].second);
}

TEST(PrefetcherTest, DefaultIsOneMebibyteReads) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{3} << 20, 10e6);
  Prefetcher p(Fixed(Prefetcher::Options{}.chunk));
  p.Submit(dev, 0, uint64_t{3} << 20);
  auto reads = dev->WaitFor(0, uint64_t{3} << 20);
  ExpectCovers(reads, 0, uint64_t{3} << 20);
  ASSERT_EQ(reads.size(), 3u);
  for (auto [off, n] : reads) EXPECT_EQ(n, Prefetcher::kMaxChunk);
}

TEST(PrefetcherTest, FixedChunk) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{1} << 20, 10e6);
  Prefetcher p(Fixed(256 << 10));
  p.Submit(dev, 0, uint64_t{1} << 20);
  auto reads = dev->WaitFor(0, uint64_t{1} << 20);
  ExpectCovers(reads, 0, uint64_t{1} << 20);
  ASSERT_EQ(reads.size(), 4u);
  for (auto [off, n] : reads) EXPECT_EQ(n, size_t{256} << 10);
}

TEST(PrefetcherTest, DestructorDropsPendingWork) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{1} << 30, 10e6);
  const auto start = std::chrono::steady_clock::now();
  {
    Prefetcher p;
    p.Submit(dev, 0, uint64_t{1} << 30);  // 107 s at 10 MB/s
    p.Submit(dev, 0, uint64_t{1} << 30);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Bandwidth-bound storage: the device moves 100 MB/s whether the prefetcher reads or not (the
// readers' own reads fill it). The probe sees as many bytes without the prefetcher as with it
// and pauses it for 20 windows.
TEST(PrefetcherTest, ProbePausesWhereTheReadersFillTheDevice) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{256} << 20, 100e6);
  const auto t0 = std::chrono::steady_clock::now();
  Prefetcher::Options o;
  o.window = std::chrono::milliseconds(20);
  o.storage_read_bytes = [t0] {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<uint64_t>(s * 100e6);
  };
  Prefetcher p(o);
  p.Submit(dev, 0, uint64_t{256} << 20);  // 2.7 s of reads if it never paused
  // Measuring takes two windows (40 ms); allow a loaded machine much longer.
  for (int i = 0; i < 400 && p.pauses() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(p.pauses(), 1u);
  EXPECT_EQ(p.resumes(), 0u);
  // One measuring window of reads (about 2 MiB at 100 MB/s), then nothing while paused.
  const size_t reads = dev->num_reads();
  EXPECT_LE(reads, 6u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the pause holds 400 ms
  EXPECT_EQ(dev->num_reads(), reads);
}

// Latency-bound storage: without the prefetcher the device moves almost nothing (the readers'
// small random reads are slow), so the probe resumes it and the whole range is read.
TEST(PrefetcherTest, ProbeKeepsPrefetchingWhereItRaisesThroughput) {
  auto dev = std::make_shared<SimulatedDevice>(uint64_t{32} << 20, 100e6);
  Prefetcher::Options o;
  o.window = std::chrono::milliseconds(20);
  o.storage_read_bytes = [dev] { return dev->bytes_read(); };
  Prefetcher p(o);
  p.Submit(dev, 0, uint64_t{32} << 20);
  auto reads = dev->WaitFor(0, uint64_t{32} << 20);
  ExpectCovers(reads, 0, uint64_t{32} << 20);
  EXPECT_EQ(p.pauses(), 0u);
  EXPECT_GE(p.resumes(), 1u);
}

}  // namespace
}  // namespace pcrfs::fs
