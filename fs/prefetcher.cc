#include "fs/prefetcher.h"

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
    r.file->Prefetch(r.offset, r.n);
  }
}

}  // namespace pcrfs::fs
