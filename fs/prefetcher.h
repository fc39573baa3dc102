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
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/random_access_file.h"

namespace pcrfs::fs {

class Prefetcher {
 public:
  static constexpr uint64_t kMinChunk = uint64_t{64} << 10;
  static constexpr uint64_t kMaxChunk = uint64_t{1} << 20;

  // chunk > 0: read that many bytes at a time; 0: adapt (see above).
  explicit Prefetcher(uint64_t chunk = kMaxChunk);
  ~Prefetcher();  // drops pending requests and joins the thread
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues a read of [offset, offset + n) of `file` (errors are ignored: a demand read will
  // report them). Never blocks on I/O.
  void Submit(std::shared_ptr<RandomAccessFile> file, uint64_t offset, uint64_t n);

 private:
  struct Request {
    std::shared_ptr<RandomAccessFile> file;
    uint64_t offset;
    uint64_t n;
  };
  void Loop();
  void Fetch(const Request& r);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;          // GUARDED_BY(mu_)
  const uint64_t fixed_chunk_;
  uint64_t chunk_ = kMaxChunk;   // the thread's; the next read's size
  std::vector<uint8_t> buffer_;  // the thread's scratch space
  std::thread thread_;
};

}  // namespace pcrfs::fs
