// Reads large ranges into the page cache on a thread of its own, so the FUSE thread that
// noticed the pattern is not held up. The range is read with plain reads of 1 MiB, one at a
// time, not handed to the kernel as one WILLNEED: on bandwidth-limited storage an async
// request for a whole record prefix (tens of MB) queues ahead of every demand read, and
// readers then wait until nearly all of it has arrived (bandwidth-capped benchmark:
// 4 of 12 targets met that way). One 1 MiB read in flight lets demand reads through between
// chunks while the prefix still streams in sequentially.
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
  Prefetcher();
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

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;          // GUARDED_BY(mu_)
  std::vector<uint8_t> buffer_;  // the thread's scratch space
  std::thread thread_;
};

}  // namespace pcrfs::fs
