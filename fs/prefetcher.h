// Runs large readahead requests on a thread of its own, so the FUSE thread that noticed the
// pattern is not held up while the kernel queues tens of megabytes of reads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "common/random_access_file.h"

namespace pcrfs::fs {

class Prefetcher {
 public:
  Prefetcher();
  ~Prefetcher();  // drops pending requests and joins the thread
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Queues RandomAccessFile::Prefetch(offset, n) on `file`. Never blocks on I/O.
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
  std::thread thread_;
};

}  // namespace pcrfs::fs
