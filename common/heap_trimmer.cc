#include "common/heap_trimmer.h"

#include <malloc.h>

#include "common/thread_name.h"

namespace pcrfs {

HeapTrimmer::HeapTrimmer(Options options) : options_(options) {
  thread_ = std::thread([this] { Run(); });
}

HeapTrimmer::~HeapTrimmer() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t HeapTrimmer::FreeHeapBytes() { return mallinfo2().fordblks; }

bool HeapTrimmer::TrimIfOver(uint64_t min_free_bytes) {
  if (FreeHeapBytes() <= min_free_bytes) return false;
  malloc_trim(0);
  return true;
}

uint64_t HeapTrimmer::trims() const {
  MutexLock l(&mu_);
  return trims_;
}

void HeapTrimmer::Run() {
  NameThisThread("pcrfs-trim");
  MutexLock l(&mu_);
  for (;;) {
    const auto deadline = std::chrono::steady_clock::now() + options_.interval;
    if (cv_.WaitUntil(&mu_, deadline, [this]() REQUIRES(mu_) { return stop_; })) return;
    l.Unlock();
    const bool trimmed = TrimIfOver(options_.min_free_bytes);
    l.Lock();
    if (trimmed) ++trims_;
  }
}

}  // namespace pcrfs
