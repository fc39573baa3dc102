#include "fs/piece_cache.h"

namespace pcrfs::fs {

PieceBytes PieceCache::Get(const PieceKey& key) {
  MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->bytes;
}

void PieceCache::Put(const PieceKey& key, PieceBytes bytes) {
  const uint64_t size = bytes->size();
  if (size > capacity_ / 4) return;
  MutexLock l(&mu_);
  if (map_.count(key)) return;
  lru_.push_front(Item{key, std::move(bytes)});
  map_.emplace(key, lru_.begin());
  used_ += size;
  while (used_ > capacity_ && !lru_.empty()) {
    Item& victim = lru_.back();
    used_ -= victim.bytes->size();
    map_.erase(victim.key);
    lru_.pop_back();
    ++stats_.evictions;
  }
}

Result<PieceBytes> PieceCache::GetOrLoad(const PieceKey& key, bool keep, const Loader& load) {
  auto lookup = [&]() -> PieceBytes {
    MutexLock l(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->bytes;
  };
  if (PieceBytes hit = lookup()) return hit;
  return flights_.Do(key, [&]() -> Result<PieceBytes> {
    // Kept by a load that finished between the lookup above and this one's start.
    if (PieceBytes hit = lookup()) return hit;
    {
      MutexLock l(&mu_);
      ++stats_.misses;
    }
    Result<PieceBytes> result = load();
    if (result && keep) Put(key, *result);  // before the flight ends: see SingleFlight
    return result;
  });
}

bool PieceCache::Contains(const PieceKey& key) const {
  MutexLock l(&mu_);
  return map_.count(key) != 0;
}

uint64_t PieceCache::used() const {
  MutexLock l(&mu_);
  return used_;
}

PieceCache::Stats PieceCache::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

}  // namespace pcrfs::fs
