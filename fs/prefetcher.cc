#include "fs/prefetcher.h"

#include <algorithm>
#include <chrono>

namespace pcrfs::fs {

Prefetcher::Prefetcher(uint64_t chunk) : fixed_chunk_(chunk), thread_([this] { Loop(); }) {}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::Submit(std::shared_ptr<RandomAccessFile> file, uint64_t offset, uint64_t n) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back({std::move(file), offset, n});
  }
  cv_.notify_one();
}

void Prefetcher::Loop() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    Fetch(r);
  }
}

void Prefetcher::Fetch(const Request& r) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSlow = std::chrono::milliseconds(8);
  constexpr auto kFast = std::chrono::milliseconds(2);
  const uint64_t end = std::min(r.offset + r.n, r.file->Size());
  for (uint64_t pos = r.offset; pos < end;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    const uint64_t chunk = fixed_chunk_ > 0 ? fixed_chunk_ : chunk_;
    const auto n = static_cast<size_t>(std::min(chunk, end - pos));
    if (buffer_.size() < n) buffer_.resize(n);
    const auto start = Clock::now();
    if (!r.file->Read(pos, n, buffer_.data()).ok()) return;
    const auto took = Clock::now() - start;
    pos += n;
    if (fixed_chunk_ == 0 && n == chunk) {
      if (took > kSlow && chunk_ > kMinChunk) chunk_ /= 2;
      if (took < kFast && chunk_ < kMaxChunk) chunk_ *= 2;
    }
  }
}

}  // namespace pcrfs::fs
