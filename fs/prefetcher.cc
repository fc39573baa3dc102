#include "fs/prefetcher.h"

#include <algorithm>

namespace pcrfs::fs {

Prefetcher::Prefetcher() : thread_([this] { Loop(); }) {}

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
    constexpr uint64_t kChunk = uint64_t{1} << 20;
    if (buffer_.size() < kChunk) buffer_.resize(kChunk);
    const uint64_t end = std::min(r.offset + r.n, r.file->Size());
    for (uint64_t pos = r.offset; pos < end; pos += kChunk) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) return;
      }
      const auto n = static_cast<size_t>(std::min(kChunk, end - pos));
      if (!r.file->Read(pos, n, buffer_.data()).ok()) break;
    }
  }
}

}  // namespace pcrfs::fs
