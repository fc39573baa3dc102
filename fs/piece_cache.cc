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
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    MutexLock l(&mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->bytes;
    }
    auto [f, inserted] = flights_.try_emplace(key);
    if (inserted) {
      f->second = std::make_shared<Flight>();
      ++stats_.misses;
      leader = true;
    }
    flight = f->second;
    if (!leader) {
      while (!flight->done) flight->cv.Wait(&mu_);
      return flight->result;
    }
  }
  Result<PieceBytes> result = Err(Status::IOError("piece load failed", EIO));
  try {
    result = load();
  } catch (...) {
    // Waiters must be released whatever happens; the caller's handler reports it.
    MutexLock l(&mu_);
    flight->result = Err(Status::ResourceExhausted("out of memory"));
    flight->done = true;
    flights_.erase(key);
    flight->cv.SignalAll();
    throw;
  }
  if (result && keep) Put(key, *result);
  MutexLock l(&mu_);
  flight->result = result;
  flight->done = true;
  flights_.erase(key);
  flight->cv.SignalAll();
  return result;
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
