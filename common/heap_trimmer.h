// Gives the heap's free pages back to the kernel now and then, so that the daemon's resident
// memory follows what it holds, not what it once held.
//
// Why: pcrfs sets glibc's trim threshold high (fs/pcrfs_main.cc: 1 MiB checksum blocks are
// allocated and freed all the time and must reuse warm pages), and a long-lived daemon with
// many threads spreads its allocations over several arenas. Freed memory then stays resident:
// in a heap profile of a 1.28M-file epoch the daemon's heap peaked ~80 MiB below its RSS. Every
// `interval`, when the heap holds more than `min_free_bytes` free, malloc_trim(0) returns the
// free pages of every arena (a few milliseconds; a page reused later faults in once). Trimmed
// bytes stay free in malloc's books, so a heap that keeps much free is trimmed every interval:
// pages already returned cost little to return again. Every 2 s, not 10: at level 10 of 1.28M
// files a 10 s interval left 15 MiB more resident between trims
// (docs/notebook/2026-11-29-memory.md); the trims' time is a metric
// (pcrfs_heap_trim_seconds_total).
//
// Thread-safe; the trimming runs on a thread of its own ("pcrfs-trim").
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "common/mutex.h"

namespace pcrfs {

class HeapTrimmer {
 public:
  struct Options {
    std::chrono::milliseconds interval{2000};
    uint64_t min_free_bytes = uint64_t{16} << 20;
  };
  explicit HeapTrimmer(Options options);
  ~HeapTrimmer();  // stops and joins the thread
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  // Bytes the heap holds free now (all arenas, mallinfo2's fordblks).
  static uint64_t FreeHeapBytes();
  // Trims now if more than `min_free_bytes` are free; true if it trimmed.
  static bool TrimIfOver(uint64_t min_free_bytes);
  // Times the thread trimmed (tests, metrics).
  uint64_t trims() const EXCLUDES(mu_);
  // Trims done by TrimIfOver in this process, and the time they took (metrics).
  static uint64_t ProcessTrims();
  static double ProcessTrimSeconds();

 private:
  void Run() EXCLUDES(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t trims_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace pcrfs
