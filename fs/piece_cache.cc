#include "fs/piece_cache.h"

namespace pcrfs::fs {

PieceBytes PieceCache::Get(const PieceKey& key) {
  std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
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

bool PieceCache::Contains(const PieceKey& key) const {
  std::lock_guard<std::mutex> l(mu_);
  return map_.count(key) != 0;
}

uint64_t PieceCache::used() const {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

PieceCache::Stats PieceCache::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace pcrfs::fs
