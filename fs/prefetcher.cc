#include "fs/prefetcher.h"

#include <algorithm>
#include <cstdlib>

#include "common/file_util.h"

namespace pcrfs::fs {

uint64_t ProcessStorageReadBytes() {
  constexpr char kKey[] = "\nread_bytes: ";
  const std::string io = ReadSmallFile("/proc/self/io", 512);
  const size_t at = io.find(kKey);
  return at == std::string::npos ? 0
                                 : std::strtoull(io.c_str() + at + sizeof(kKey) - 1, nullptr, 10);
}

Prefetcher::Prefetcher(Options options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

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
  cv_.notify_all();
}

uint64_t Prefetcher::pauses() const {
  std::lock_guard<std::mutex> l(mu_);
  return pauses_;
}

uint64_t Prefetcher::resumes() const {
  std::lock_guard<std::mutex> l(mu_);
  return resumes_;
}

std::string Prefetcher::Describe() const {
  std::lock_guard<std::mutex> l(mu_);
  return std::string(paused_ ? "paused" : "prefetching") + (options_.probe ? "" : " (probe off)") +
         "; probe paused it " + std::to_string(pauses_) + " times, resumed it " +
         std::to_string(resumes_) + " times";
}

void Prefetcher::Loop() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> l(mu_);
      const auto idle_since = Clock::now();
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      // After an idle spell longer than a hold, what was measured is stale: measure afresh.
      if (Clock::now() - idle_since > kHoldWindows * options_.window) gate_started_ = false;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    Fetch(r);
  }
}

bool Prefetcher::SleepUntil(Clock::time_point t) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_until(l, t, [&] { return stop_; });
  return !stop_;
}

bool Prefetcher::Gate() {
  if (!options_.probe) return true;
  const auto now = Clock::now();
  const auto window = options_.window;
  if (!gate_started_) {
    gate_started_ = true;
    phase_ = Phase::kMeasureOn;
    phase_start_ = now;
    phase_end_ = now + window;
    phase_bytes0_ = options_.storage_read_bytes();
  }
  while (now >= phase_end_) {
    const uint64_t bytes = options_.storage_read_bytes();
    const double seconds = std::chrono::duration<double>(now - phase_start_).count();
    // (The counter cannot go back, but a failed read of it gives 0.)
    const uint64_t moved = bytes >= phase_bytes0_ ? bytes - phase_bytes0_ : 0;
    const double rate = seconds > 0 ? static_cast<double>(moved) / seconds : 0;
    switch (phase_) {
      case Phase::kMeasureOn:  // read for a window; now pause for one
        rate_on_ = rate;
        phase_ = Phase::kMeasureOff;
        phase_end_ = now + window;
        break;
      case Phase::kMeasureOff: {
        // Nearly as many bytes came from storage without the prefetcher: the readers keep
        // the device busy by themselves. (If it moved almost nothing while prefetching, the
        // prefix was already cached and prefetching costs nothing: keep going.)
        const bool paused = rate_on_ > 1e6 && rate >= 0.8 * rate_on_;
        {
          std::lock_guard<std::mutex> l(mu_);
          ++(paused ? pauses_ : resumes_);
          paused_ = paused;
        }
        phase_ = paused ? Phase::kHoldOff : Phase::kHoldOn;
        phase_end_ = now + kHoldWindows * window;
        break;
      }
      case Phase::kHoldOn:
      case Phase::kHoldOff:
        phase_ = Phase::kMeasureOn;
        phase_end_ = now + window;
        break;
    }
    phase_start_ = now;
    phase_bytes0_ = bytes;
  }
  return phase_ == Phase::kMeasureOn || phase_ == Phase::kHoldOn;
}

void Prefetcher::Fetch(const Request& r) {
  constexpr auto kSlow = std::chrono::milliseconds(8);
  constexpr auto kFast = std::chrono::milliseconds(2);
  const uint64_t end = std::min(r.offset + r.n, r.file->Size());
  for (uint64_t pos = r.offset; pos < end;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    if (!Gate()) {
      if (!SleepUntil(phase_end_)) return;
      continue;
    }
    const uint64_t chunk = options_.chunk > 0 ? options_.chunk : chunk_;
    const auto n = static_cast<size_t>(std::min(chunk, end - pos));
    if (buffer_.size() < n) buffer_.resize(n);
    const auto start = Clock::now();
    if (!r.file->Read(pos, n, buffer_.data()).ok()) return;
    const auto took = Clock::now() - start;
    pos += n;
    if (options_.chunk == 0 && n == chunk) {
      if (took > kSlow && chunk_ > kMinChunk) chunk_ /= 2;
      if (took < kFast && chunk_ < kMaxChunk) chunk_ *= 2;
    }
  }
}

}  // namespace pcrfs::fs
