#include "fs/baseline_cache.h"

#include <bit>
#include <new>

namespace pcrfs::fs {

BaselineCache::BaselineCache(uint64_t capacity_bytes, size_t size_slots,
                             std::unique_ptr<BaselineDiskCache> disk)
    : capacity_(capacity_bytes),
      slot_mask_(std::bit_ceil(size_slots < 1 ? 1 : size_slots) - 1),
      disk_(std::move(disk)) {
  auto* slots = static_cast<SizeSlot*>(std::calloc(slot_mask_ + 1, sizeof(SizeSlot)));
  if (slots == nullptr) throw std::bad_alloc();
  MutexLock l(&mu_);
  sizes_.reset(slots);
  stats_.capacity = capacity_;
}

size_t BaselineCache::SlotOf(uint64_t ino) const {
  uint64_t h = ino;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<size_t>(h) & slot_mask_;
}

std::optional<uint64_t> BaselineCache::Size(uint64_t ino) const {
  {
    MutexLock l(&mu_);
    const SizeSlot& slot = sizes_.get()[SlotOf(ino)];
    if (slot.ino == ino) {
      ++stats_.size_hits;
      return slot.size;
    }
  }
  if (disk_ == nullptr) return std::nullopt;
  std::optional<uint64_t> size = disk_->Size(ino);
  if (size) {
    MutexLock l(&mu_);
    ++stats_.size_hits;
  }
  return size;
}

void BaselineCache::Keep(uint64_t ino, Bytes bytes) {
  sizes_.get()[SlotOf(ino)] = {ino, bytes->size()};
  if (map_.count(ino)) return;
  used_ += bytes->size();
  lru_.push_front(Item{ino, std::move(bytes)});
  map_.emplace(ino, lru_.begin());
  // The newest file stays even if it alone is over the cap: its reads follow.
  while (used_ > capacity_ && lru_.size() > 1) {
    Item& victim = lru_.back();
    used_ -= victim.bytes->size();
    map_.erase(victim.ino);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

BaselineCache::Bytes BaselineCache::Lookup(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = map_.find(ino);
  if (it == map_.end()) return nullptr;
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->bytes;
}

Result<BaselineCache::Bytes> BaselineCache::GetOrLoad(uint64_t ino, const Loader& load) {
  if (Bytes hit = Lookup(ino)) return hit;
  return flights_.Do(ino, [&]() -> Result<Bytes> {
    // Kept by a load that finished between the lookup above and this one's start.
    if (Bytes hit = Lookup(ino)) return hit;
    if (disk_ != nullptr) {
      if (Bytes kept = disk_->Get(ino)) {
        MutexLock l(&mu_);
        Keep(ino, kept);
        return kept;
      }
    }
    Result<Bytes> result = load();
    if (result && disk_ != nullptr) disk_->Put(ino, **result);
    MutexLock l(&mu_);
    ++stats_.transcoded;
    if (result) {
      stats_.transcoded_bytes += (*result)->size();
      Keep(ino, *result);  // before the flight ends: see SingleFlight
    } else {
      ++stats_.failed;
    }
    return result;
  });
}

void BaselineCache::Drop(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = map_.find(ino);
  if (it == map_.end()) return;
  used_ -= it->second->bytes->size();
  lru_.erase(it->second);
  map_.erase(it);
}

BaselineCache::Stats BaselineCache::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.used = used_;
  l.Unlock();
  if (disk_ != nullptr) {
    s.disk = true;
    s.disk_stats = disk_->stats();
  }
  return s;
}

}  // namespace pcrfs::fs
