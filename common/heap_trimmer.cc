#include "common/heap_trimmer.h"

#include <malloc.h>

#include <atomic>
#include <chrono>

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

namespace {
std::atomic<uint64_t> g_trims{0}, g_trim_ns{0};
}  // namespace

uint64_t HeapTrimmer::FreeHeapBytes() { return mallinfo2().fordblks; }

bool HeapTrimmer::TrimIfOver(uint64_t min_free_bytes) {
  if (FreeHeapBytes() <= min_free_bytes) return false;
  const auto start = std::chrono::steady_clock::now();
  malloc_trim(0);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  g_trims.fetch_add(1, std::memory_order_relaxed);
  g_trim_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  return true;
}

uint64_t HeapTrimmer::ProcessTrims() { return g_trims.load(std::memory_order_relaxed); }

double HeapTrimmer::ProcessTrimSeconds() {
  return static_cast<double>(g_trim_ns.load(std::memory_order_relaxed)) / 1e9;
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
