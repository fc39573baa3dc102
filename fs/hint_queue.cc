#include "fs/hint_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

namespace pcrfs::fs {

const char* HintFateName(HintFate f) {
  switch (f) {
    case HintFate::kQueued:
      return "queued";
    case HintFate::kDuplicate:
      return "duplicate";
    case HintFate::kNotFound:
      return "not_found";
    case HintFate::kFolder:
      return "folder";
    case HintFate::kTooLong:
      return "too_long";
    case HintFate::kMalformed:
      return "malformed";
    case HintFate::kReadBefore:
      return "read_before";
    case HintFate::kReset:
      return "reset";
  }
  return "unknown";
}

std::string HintQueue::Stats::ToJson() const {
  std::string json =
      "{\"lines\":" + std::to_string(lines) + ",\"queued_now\":" + std::to_string(queued_now) +
      ",\"taken\":" + std::to_string(taken) + ",\"connections\":" + std::to_string(connections) +
      ",\"refused\":" + std::to_string(refused) + ",\"resets\":" + std::to_string(resets);
  for (size_t i = 0; i < kHintFates; ++i) {
    json += std::string(",\"") + HintFateName(static_cast<HintFate>(i)) +
            "\":" + std::to_string(fate[i]);
  }
  return json + "}";
}

HintQueue::HintQueue(size_t capacity)
    : capacity_(capacity),
      room_event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      taken_ring_(capacity, 0) {}

HintQueue::Push HintQueue::Add(uint64_t ino, uint64_t source) {
  MutexLock l(&mu_);
  if (live_.count(ino) > 0) {
    ++stats_.fate[static_cast<size_t>(HintFate::kDuplicate)];
    return Push::kDuplicate;
  }
  if (live_.size() >= capacity_) return Push::kFull;
  // Dead items (read before their turn) wait in items_ until popped; past twice the capacity
  // they are swept out, so items_ stays bounded whatever the readers do.
  if (items_.size() >= 2 * capacity_) CompactLocked([](const Item&) { return false; });
  const uint64_t seq = next_seq_++;
  items_.push_back({ino, source, seq});
  live_.emplace(ino, seq);
  known_.fetch_add(1, std::memory_order_relaxed);
  ++stats_.fate[static_cast<size_t>(HintFate::kQueued)];
  nonempty_.Signal();
  return Push::kQueued;
}

bool HintQueue::full() const {
  MutexLock l(&mu_);
  return live_.size() >= capacity_;
}

size_t HintQueue::size() const {
  MutexLock l(&mu_);
  return live_.size();
}

void HintQueue::SignalRoomIfFullLocked(size_t live_before) {
  // Only the step from full to not full: the server waits for nothing else. An eventfd write
  // never blocks (a counter; EAGAIN only past 2^64 - 2).
  if (live_before >= capacity_ && live_.size() < capacity_ && room_event_.valid()) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(room_event_.get(), &one, sizeof one);
  }
}

void HintQueue::Remember(uint64_t ino) {
  if (capacity_ == 0) return;
  uint64_t& slot = taken_ring_[taken_next_];
  if (stats_.taken >= capacity_) {  // the ring is full: the oldest taken goes
    auto it = recently_taken_.find(slot);
    if (it != recently_taken_.end() && --it->second == 0) {
      recently_taken_.erase(it);
      known_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  slot = ino;
  taken_next_ = (taken_next_ + 1) % capacity_;
  if (recently_taken_[ino]++ == 0) known_.fetch_add(1, std::memory_order_relaxed);
}

std::optional<uint64_t> HintQueue::PopLocked() {
  const size_t live_before = live_.size();
  while (!items_.empty()) {
    const Item item = items_.front();
    items_.pop_front();
    auto it = live_.find(item.ino);
    if (it == live_.end() || it->second != item.seq) continue;  // dropped by NoteRead
    live_.erase(it);
    known_.fetch_sub(1, std::memory_order_relaxed);
    Remember(item.ino);
    ++stats_.taken;
    SignalRoomIfFullLocked(live_before);
    return item.ino;
  }
  return std::nullopt;
}

std::optional<uint64_t> HintQueue::TryPop() {
  MutexLock l(&mu_);
  if (closed_) return std::nullopt;
  return PopLocked();
}

std::optional<uint64_t> HintQueue::WaitPop(std::chrono::steady_clock::time_point deadline) {
  MutexLock l(&mu_);
  nonempty_.WaitUntil(&mu_, deadline, [&]() REQUIRES(mu_) { return closed_ || !live_.empty(); });
  if (closed_) return std::nullopt;
  return PopLocked();
}

bool HintQueue::WaitNonEmpty() {
  MutexLock l(&mu_);
  nonempty_.Wait(&mu_, [&]() REQUIRES(mu_) { return closed_ || !live_.empty(); });
  return !closed_;
}

void HintQueue::Close() {
  {
    MutexLock l(&mu_);
    closed_ = true;
  }
  nonempty_.SignalAll();
}

template <class Drop>
size_t HintQueue::CompactLocked(Drop drop) {
  std::deque<Item> kept;
  size_t dropped = 0;
  for (const Item& item : items_) {
    auto it = live_.find(item.ino);
    if (it == live_.end() || it->second != item.seq) continue;
    if (drop(item)) {
      live_.erase(it);
      ++dropped;
      continue;
    }
    kept.push_back(item);
  }
  items_.swap(kept);
  known_.fetch_sub(dropped, std::memory_order_relaxed);
  return dropped;
}

size_t HintQueue::Clear(uint64_t source) {
  MutexLock l(&mu_);
  const size_t live_before = live_.size();
  const size_t n = CompactLocked([source](const Item& item) { return item.source == source; });
  stats_.fate[static_cast<size_t>(HintFate::kReset)] += n;
  SignalRoomIfFullLocked(live_before);
  return n;
}

size_t HintQueue::Clear() {
  MutexLock l(&mu_);
  const size_t live_before = live_.size();
  const size_t n = CompactLocked([](const Item&) { return true; });
  stats_.fate[static_cast<size_t>(HintFate::kReset)] += n;
  SignalRoomIfFullLocked(live_before);
  return n;
}

bool HintQueue::NoteRead(uint64_t ino) {
  if (known_.load(std::memory_order_relaxed) == 0) return false;
  MutexLock l(&mu_);
  auto it = live_.find(ino);
  if (it == live_.end()) return recently_taken_.count(ino) > 0;
  // Its item stays in items_, dead, until popped or swept.
  const size_t live_before = live_.size();
  live_.erase(it);
  known_.fetch_sub(1, std::memory_order_relaxed);
  ++stats_.fate[static_cast<size_t>(HintFate::kReadBefore)];
  SignalRoomIfFullLocked(live_before);
  return true;
}

void HintQueue::Count(HintFate f) {
  MutexLock l(&mu_);
  ++stats_.fate[static_cast<size_t>(f)];
}

void HintQueue::CountLine() {
  MutexLock l(&mu_);
  ++stats_.lines;
}

void HintQueue::CountReset() {
  MutexLock l(&mu_);
  ++stats_.resets;
}

void HintQueue::CountConnection(bool refused) {
  MutexLock l(&mu_);
  ++(refused ? stats_.refused : stats_.connections);
}

HintQueue::Stats HintQueue::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.queued_now = live_.size();
  return s;
}

}  // namespace pcrfs::fs
