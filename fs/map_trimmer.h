// Keeps the daemon's resident set small when the index is large. The LMDB index is
// memory-mapped, and every page a lookup or readdir touched stays mapped, so it counts in the
// process's RSS (and its OOM score) although it is only page cache: a `find` over a million
// files would leave ~200 MB "resident". A thread checks the process's file-backed resident
// memory every `interval` and, above `budget`, unmaps the index's pages; the page cache keeps
// them, so the next access is a minor fault, not a disk read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace pcrfs::fs {

// The process's resident file-backed and shared memory in bytes (/proc/self/statm "shared"):
// the executable, its libraries and whatever of the index is mapped. 0 if unknown.
uint64_t ResidentFileBytes();

class MapTrimmer {
 public:
  // Calls release() whenever ResidentFileBytes() > budget, checked every interval.
  MapTrimmer(uint64_t budget, std::chrono::milliseconds interval, std::function<void()> release);
  ~MapTrimmer();  // stops and joins the thread
  MapTrimmer(const MapTrimmer&) = delete;
  MapTrimmer& operator=(const MapTrimmer&) = delete;

  uint64_t releases() const;

 private:
  void Loop();

  const uint64_t budget_;
  const std::chrono::milliseconds interval_;
  const std::function<void()> release_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;      // GUARDED_BY(mu_)
  uint64_t releases_ = 0;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace pcrfs::fs
