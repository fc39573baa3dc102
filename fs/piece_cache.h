// A byte-capped LRU cache of verified pieces, shared by all reader threads.
// The lock is held for map operations only, never during I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/single_flight.h"
#include "common/status.h"

namespace pcrfs::fs {

// One checksum block of a piece (index::kChecksumBlockSize; a piece of one block is block 0).
struct PieceKey {
  uint32_t record;
  uint32_t slot;
  uint32_t group;  // 1..10
  uint64_t block = 0;
  bool operator==(const PieceKey&) const = default;
};

struct PieceKeyHash {
  size_t operator()(const PieceKey& k) const {
    uint64_t h = (uint64_t{k.record} << 32) ^ (uint64_t{k.slot} << 4) ^ k.group ^ (k.block << 40) ^
                 (k.block >> 24);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
};

// std::allocator, except that resize() leaves new elements default-initialized: a block is
// filled by a read at once, and zeroing a megabyte first cost more than reading it.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using BlockBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;
using PieceBytes = std::shared_ptr<const BlockBytes>;

class PieceCache {
 public:
  explicit PieceCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  PieceCache(const PieceCache&) = delete;
  PieceCache& operator=(const PieceCache&) = delete;

  PieceBytes Get(const PieceKey& key);
  bool Contains(const PieceKey& key) const EXCLUDES(mu_);
  // Pieces larger than a quarter of the capacity are not kept.
  void Put(const PieceKey& key, PieceBytes bytes) EXCLUDES(mu_);
  // The cached bytes of key, or else what load() returns, run once however many threads ask
  // for the same key at the same time (the others wait for its result instead of reading the
  // same bytes again). `keep` puts loaded bytes in the cache. load runs without the lock.
  using Loader = std::function<Result<PieceBytes>()>;
  Result<PieceBytes> GetOrLoad(const PieceKey& key, bool keep, const Loader& load) EXCLUDES(mu_);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const EXCLUDES(mu_);
  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0;
  };
  Stats stats() const EXCLUDES(mu_);

 private:
  struct Item {
    PieceKey key;
    PieceBytes bytes;
  };
  const uint64_t capacity_;
  mutable Mutex mu_;
  SingleFlight<PieceKey, Result<PieceBytes>, PieceKeyHash> flights_;
  std::list<Item> lru_ GUARDED_BY(mu_);  // front = most recent
  std::unordered_map<PieceKey, std::list<Item>::iterator, PieceKeyHash> map_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);
};

}  // namespace pcrfs::fs
