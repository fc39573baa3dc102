// A byte-capped LRU cache of verified pieces, shared by all reader threads.
// The lock is held for map operations only, never during I/O.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace pcrfs::fs {

struct PieceKey {
  uint32_t record;
  uint32_t slot;
  uint32_t group;  // 1..10
  bool operator==(const PieceKey&) const = default;
};

struct PieceKeyHash {
  size_t operator()(const PieceKey& k) const {
    uint64_t h = (uint64_t{k.record} << 32) ^ (uint64_t{k.slot} << 4) ^ k.group;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
};

using PieceBytes = std::shared_ptr<const std::vector<uint8_t>>;

class PieceCache {
 public:
  explicit PieceCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  PieceCache(const PieceCache&) = delete;
  PieceCache& operator=(const PieceCache&) = delete;

  PieceBytes Get(const PieceKey& key);
  bool Contains(const PieceKey& key) const;
  // Pieces larger than a quarter of the capacity are not kept.
  void Put(const PieceKey& key, PieceBytes bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0;
  };
  Stats stats() const;

 private:
  struct Item {
    PieceKey key;
    PieceBytes bytes;
  };
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::list<Item> lru_;  // GUARDED_BY(mu_); front = most recent
  std::unordered_map<PieceKey, std::list<Item>::iterator, PieceKeyHash> map_;  // GUARDED_BY(mu_)
  uint64_t used_ = 0;                                                          // GUARDED_BY(mu_)
  Stats stats_;                                                                // GUARDED_BY(mu_)
};

}  // namespace pcrfs::fs
