// The bytes of a remote store's record files that were fetched, kept so that a later read needs
// no request: in memory (bounded) and, with -o disk_cache=SIZE, in files on the local disk that
// outlive the mount. Both tiers drop the least recently used bytes first.
//
// What is kept is byte ranges ("extents") of objects named by record id, as they were fetched:
// an exact piece for a demand read, a chunk of several files for a speculative one. Within a
// tier the extents of one object never overlap: a new extent keeps only the parts not yet kept.
// Since the level-k bytes of a record are a prefix of its level-(k+1) bytes, bytes fetched for
// level 5 serve levels 1 to 5 with no request.
//
// Nothing here checks what it returns: every piece is CRC-checked by the reader against the
// index (index/record_reader.cc), which calls Drop() on a mismatch and reads once more, so a
// damaged cache file costs one refetch, never wrong bytes.
//
// The disk tier lives in one folder per index identity (location/store_location.cc names it from
// the index file's trailer, so a store rebuilt at the same URL never meets the old bytes).
// Files are "RECORD-OFFSET-LENGTH" (hex record id, decimal numbers), written to a temporary
// name and renamed, so a crash leaves no partial extent; a file whose size does not match its
// name is removed when the folder is opened. One daemon at a time uses a folder (flock on
// ".lock"); a second one runs without the disk tier and says so.
//
// Thread-safe. Disk files are written and read without the lock held.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pcrfs {

struct RangeCacheOptions {
  uint64_t memory_bytes = uint64_t{256} << 20;
  std::string disk_dir;     // empty: no disk tier
  uint64_t disk_bytes = 0;  // 0: no disk tier
};

struct RangeCacheStats {
  uint64_t memory_bytes = 0, disk_bytes = 0;                          // kept now
  uint64_t memory_hit_bytes = 0, disk_hit_bytes = 0, miss_bytes = 0;  // of Copy()
  uint64_t inserted_bytes = 0, evicted_bytes = 0;
  uint64_t dropped = 0;                   // extents dropped by Drop() (damaged)
  uint64_t unread_speculative_bytes = 0;  // fetched ahead, not read yet
  bool disk = false;                      // the disk tier is on
  // {"memory_bytes":..., "disk_bytes":..., "hit_ratio":..., ...}
  std::string ToJson() const;
};

class RangeCache {
 public:
  struct Range {
    uint64_t offset;
    uint64_t length;
  };

  // Opens the disk folder (creating it), takes its lock and adopts the extents an earlier mount
  // left there (most recently written kept first if over the budget). A folder locked by another
  // process: the disk tier is off and *note says so. Errors: the folder cannot be created.
  static Result<std::shared_ptr<RangeCache>> Open(RangeCacheOptions options, std::string* note);
  ~RangeCache();
  RangeCache(const RangeCache&) = delete;
  RangeCache& operator=(const RangeCache&) = delete;

  // Copies what is kept of [offset, offset + n) of object `id` into dst (the rest of dst is left
  // as it was) and returns the ranges that are not kept, in order.
  std::vector<Range> Copy(uint32_t id, uint64_t offset, uint64_t n, uint8_t* dst) EXCLUDES(mu_);
  // The ranges of [offset, offset + n) not kept, in order (copies nothing).
  std::vector<Range> Missing(uint32_t id, uint64_t offset, uint64_t n) const EXCLUDES(mu_);
  // Keeps bytes->size() bytes of object `id` from `offset` (the parts not kept yet).
  // speculative: fetched before anybody asked; such bytes count as unread until copied.
  void Insert(uint32_t id, uint64_t offset, std::shared_ptr<const std::vector<uint8_t>> bytes,
              bool speculative) EXCLUDES(mu_);
  // Drops every extent that overlaps the range, in both tiers (a piece failed its CRC); true if
  // there was one.
  bool Drop(uint32_t id, uint64_t offset, uint64_t n) EXCLUDES(mu_);
  // Whether fetching more bytes ahead of the readers is useful now: the unread speculative
  // bytes are below 3/4 of the larger tier, so what is fetched ahead is not evicted unread.
  bool WantsSpeculation() const EXCLUDES(mu_);
  // Bytes the larger tier holds: what may be fetched ahead at most.
  uint64_t capacity() const EXCLUDES(mu_);

  RangeCacheStats stats() const EXCLUDES(mu_);

 private:
  struct Extent {
    uint64_t end = 0;
    std::shared_ptr<const std::vector<uint8_t>> bytes;  // memory tier: the bytes are
    size_t bytes_offset = 0;                            //   bytes[bytes_offset, + length)
    uint64_t unread = 0;                                // speculative bytes not copied yet
    std::vector<bool> read_pages;  // speculative: which kUnreadPage pages were copied
    std::list<std::pair<uint32_t, uint64_t>>::iterator lru;
  };
  using Extents = std::map<uint64_t, Extent>;    // by start offset
  static constexpr uint64_t kUnreadPage = 4096;  // granularity of "read" for unread bytes
  // Marks [begin, end) of the extent at `start` read. REQUIRES: mu_ held.
  void MarkReadLocked(uint64_t start, Extent& e, uint64_t begin, uint64_t end) REQUIRES(mu_);
  struct Tier {
    bool disk = false;
    uint64_t budget = 0, bytes = 0;
    std::map<uint32_t, Extents> objects;
    std::list<std::pair<uint32_t, uint64_t>> lru;  // front: most recent
  };

  explicit RangeCache(RangeCacheOptions options) : options_(std::move(options)) {}
  void AdoptDiskFiles() EXCLUDES(mu_);
  std::string FileName(uint32_t id, uint64_t offset, uint64_t length) const;
  // The gaps of [begin, end) in `tier`'s extents of `id`. REQUIRES: mu_ held.
  static std::vector<Range> GapsLocked(const Tier& tier, uint32_t id, uint64_t begin, uint64_t end);
  // The extent of `tier` holding byte `pos` of `id`, or nullptr. REQUIRES: mu_ held.
  static Extent* FindLocked(Tier& tier, uint32_t id, uint64_t pos, uint64_t* start);
  // The start of the first extent of `tier` after `pos`, or UINT64_MAX. REQUIRES: mu_ held.
  static uint64_t NextStartLocked(const Tier& tier, uint32_t id, uint64_t pos);
  void AddLocked(Tier& tier, uint32_t id, uint64_t start, Extent e) REQUIRES(mu_);
  // Removes one extent; disk files to unlink are appended to *unlink. REQUIRES: mu_ held.
  void RemoveLocked(Tier& tier, uint32_t id, Extents::iterator it, std::vector<std::string>* unlink)
      REQUIRES(mu_);
  void EvictLocked(Tier& tier, std::vector<std::string>* unlink) REQUIRES(mu_);
  Tier& PrimaryLocked() REQUIRES(mu_) { return disk_.disk ? disk_ : memory_; }
  const Tier& PrimaryLocked() const REQUIRES(mu_) { return disk_.disk ? disk_ : memory_; }

  const RangeCacheOptions options_;
  UniqueFd lock_fd_;
  mutable Mutex mu_;
  Tier memory_ GUARDED_BY(mu_);
  Tier disk_ GUARDED_BY(mu_);
  uint64_t unread_ GUARDED_BY(mu_) = 0;    // sum of the primary tier's Extent::unread
  RangeCacheStats stats_ GUARDED_BY(mu_);  // counters only
};

}  // namespace pcrfs
