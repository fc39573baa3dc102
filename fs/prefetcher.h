// Reads large ranges into the page cache on a thread of its own, so the FUSE thread that
// noticed the pattern is not held up. The range is read with plain reads, one at a time, not
// handed to the kernel as one WILLNEED: on bandwidth-limited storage an async request for a
// whole record prefix (tens of MB) queues ahead of every demand read, and readers then wait
// until nearly all of it has arrived (bandwidth-capped benchmark: 4 of 12 targets met that
// way). One read in flight lets demand reads through between chunks while the prefix still
// streams in sequentially.
//
// The read size is fixed (1 MiB by default), or, with chunk 0, adapts to the device: a demand
// read that arrives behind a chunk waits for it, so a chunk should take a few milliseconds
// whatever the bandwidth. A chunk that took more than 8 ms halves the next (down to 64 KiB);
// one that took under 2 ms doubles it (up to 1 MiB). Measured side by side (bandwidth-capped
// and loader benchmarks) the adaptive size was no better than 1 MiB, so it is not the default.
//
// Whether prefetching pays at all depends on the storage. Where small random reads are
// latency-bound (a local disk) the sequential sweep raises the device's throughput (1.5x
// files/s uncapped); where bandwidth is the limit (a throttled volume, a network link) the
// readers' own reads already fill it, and prefetching only puts bytes nobody wants yet ahead
// of those a reader waits for. So, with probing on, the prefetcher measures it: it counts the
// bytes the process fetched from storage (/proc/self/io read_bytes) over a window while it
// reads, then over a window while it pauses. If the device moved nearly as many bytes without
// it (>= 80%), the readers alone keep the device busy and it stays paused; otherwise it
// resumes. Either way it holds the decision for 20 windows, then measures again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/random_access_file.h"

namespace pcrfs::fs {

// Bytes this process has caused to be read from storage (/proc/self/io read_bytes); 0 if
// unknown.
uint64_t ProcessStorageReadBytes();

class Prefetcher {
 public:
  static constexpr uint64_t kMinChunk = uint64_t{64} << 10;
  static constexpr uint64_t kMaxChunk = uint64_t{1} << 20;

  struct Options {
    uint64_t chunk = kMaxChunk;  // bytes per read; 0: adapt (see above)
    bool probe = true;           // measure whether prefetching pays (see above)
    std::chrono::milliseconds window{200};
    std::function<uint64_t()> storage_read_bytes = ProcessStorageReadBytes;
  };

  Prefetcher() : Prefetcher(Options{}) {}
  explicit Prefetcher(Options options);
  ~Prefetcher();  // drops pending requests and joins the thread
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues a read of [offset, offset + n) of `file` (errors are ignored: a demand read will
  // report them). Never blocks on I/O.
  void Submit(std::shared_ptr<RandomAccessFile> file, uint64_t offset, uint64_t n);

  // How many times a measurement paused / resumed prefetching (for tests and logs).
  uint64_t pauses() const;
  uint64_t resumes() const;
  // "prefetching" or "paused" (the probe found that the readers alone fill the device), and
  // the counts: what user.pcrfs.prefetch on the mount's root shows.
  std::string Describe() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    std::shared_ptr<RandomAccessFile> file;
    uint64_t offset;
    uint64_t n;
  };
  void Loop();
  void Fetch(const Request& r);
  // Advances the measurement; returns false if the prefetcher should not read now (it then
  // waits until the current phase ends, or stop).
  bool Gate();
  // Sleeps until t or stop; returns false on stop.
  bool SleepUntil(Clock::time_point t);

  enum class Phase { kMeasureOn, kMeasureOff, kHoldOn, kHoldOff };
  static constexpr int kHoldWindows = 20;

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;          // GUARDED_BY(mu_)
  bool stop_ = false;                  // GUARDED_BY(mu_)
  uint64_t pauses_ = 0, resumes_ = 0;  // GUARDED_BY(mu_)
  bool paused_ = false;                // GUARDED_BY(mu_)

  // The thread's own state.
  uint64_t chunk_ = kMaxChunk;  // the next read's size when adapting
  Phase phase_ = Phase::kMeasureOn;
  bool gate_started_ = false;
  Clock::time_point phase_start_, phase_end_;
  uint64_t phase_bytes0_ = 0;
  double rate_on_ = 0;
  std::vector<uint8_t> buffer_;
  std::thread thread_;
};

}  // namespace pcrfs::fs
