// The transcoded files of -o form=baseline (codec/baseline.h) and their sizes, in memory.
//
// stat(2) must give a file's exact size before any read, and the size of a baseline file is
// only known once it has been transcoded: so the daemon transcodes at LOOKUP (or GETATTR) and
// keeps the bytes for the READs that follow, here, in a byte-capped LRU. Sizes are kept apart,
// in a table of 16-byte slots indexed by a hash of the inode (a colliding inode overwrites the
// slot: a size evicted is recomputed), so that a later stat of a file whose bytes were evicted
// (or read: the kernel's page cache then has them) transcodes nothing.
//
// With a disk tier (fs/baseline_disk_cache.h: -o disk_cache), a file missing here is looked for
// there before it is transcoded, a transcoded file is written there too, and a size missing
// from the table is the disk tier's: a later mount re-encodes none of the files kept on disk.
//
// Thread-safe. Concurrent requests for one inode transcode it once; the others wait for it.
// The lock is never held while transcoding or during disk I/O.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/single_flight.h"
#include "common/status.h"
#include "fs/baseline_disk_cache.h"

namespace pcrfs::fs {

class BaselineCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;
  using Loader = std::function<Result<Bytes>()>;

  // capacity_bytes: transcoded bytes kept (one file larger than that is still kept, alone).
  // size_slots: the size table's slots, rounded up to a power of two; allocated untouched
  // (calloc), so its memory is resident only as far as it is used.
  // disk: the disk tier (nullptr: none).
  BaselineCache(uint64_t capacity_bytes, size_t size_slots,
                std::unique_ptr<BaselineDiskCache> disk = nullptr);
  BaselineCache(const BaselineCache&) = delete;
  BaselineCache& operator=(const BaselineCache&) = delete;

  // The size of inode `ino`'s transcoded file, if the table or the disk tier has it.
  std::optional<uint64_t> Size(uint64_t ino) const EXCLUDES(mu_);
  // The transcoded bytes of `ino`: kept ones (memory, else the disk tier's, checked), or else
  // what load() returns, run once however many threads ask at the same time. A successful load
  // is kept (in memory and on disk) and its size recorded.
  Result<Bytes> GetOrLoad(uint64_t ino, const Loader& load) EXCLUDES(mu_);
  // Forgets ino's bytes (not its size): a reader has them all.
  void Drop(uint64_t ino) EXCLUDES(mu_);

  struct Stats {
    uint64_t transcoded = 0;  // loads run (successful or not): none for a file kept on disk
    uint64_t failed = 0;      // loads that failed (damaged level bytes)
    uint64_t transcoded_bytes = 0;
    uint64_t hits = 0;       // bytes served from memory
    uint64_t size_hits = 0;  // sizes answered from the table
    uint64_t evictions = 0;
    uint64_t used = 0, capacity = 0;
    bool disk = false;  // the disk tier is on; then its counters:
    BaselineDiskCache::Stats disk_stats;
  };
  Stats stats() const EXCLUDES(mu_);

 private:
  struct Item {
    uint64_t ino;
    Bytes bytes;
  };
  struct SizeSlot {
    uint64_t ino;  // 0: empty (no file has fuse inode 0)
    uint64_t size;
  };
  struct FreeSlots {
    void operator()(SizeSlot* p) const { std::free(p); }
  };
  size_t SlotOf(uint64_t ino) const;
  void Keep(uint64_t ino, Bytes bytes) REQUIRES(mu_);
  // The kept bytes of ino, counted as a hit (nullptr if none).
  Bytes Lookup(uint64_t ino) EXCLUDES(mu_);

  const uint64_t capacity_;
  const size_t slot_mask_;
  mutable Mutex mu_;
  const std::unique_ptr<BaselineDiskCache> disk_;
  SingleFlight<uint64_t, Result<Bytes>> flights_;
  std::list<Item> lru_ GUARDED_BY(mu_);  // front = most recent
  std::unordered_map<uint64_t, std::list<Item>::iterator> map_ GUARDED_BY(mu_);
  std::unique_ptr<SizeSlot, FreeSlots> sizes_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
  mutable Stats stats_ GUARDED_BY(mu_);
};

}  // namespace pcrfs::fs
