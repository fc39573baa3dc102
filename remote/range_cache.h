// The bytes of a remote store's record files that were fetched, kept so that a later read needs
// no request: in memory (bounded; least recently used bytes dropped first) and, with
// -o disk_cache=SIZE, in segment files on the local disk that outlive the mount (oldest segment
// dropped first).
//
// What is kept is byte ranges ("extents") of objects named by record id, as they were fetched:
// an exact piece for a demand read, a chunk of several files for a speculative one. Within a
// tier the extents of one object never overlap: a new extent keeps only the parts not yet kept.
// Since the level-k bytes of a record are a prefix of its level-(k+1) bytes, bytes fetched for
// level 5 serve levels 1 to 5 with no request.
//
// Bytes fetched ahead of the readers (speculative: a RemoteFile's Warm and PrefetchAhead) are
// kept until read. They may take at most half of the larger tier (AheadRoom), counting what is
// being fetched ahead now (ReserveAhead, before the request is sent), and the memory tier evicts
// bytes already read (least recently used first) before any unread one: a level many times the
// cache, read in a shuffled order, otherwise lost what was fetched for it before anybody read it
// and fetched it again (3.5-5x the bytes served). The disk tier evicts the segment with the
// fewest unread bytes (the oldest among equals). Unread is counted exactly, by byte, in the
// memory tier of a cache without a disk tier; by 64-byte granules in the disk tier (a granule a
// read touched counts read: remote/unread_granules.h).
//
// What the disk returns is checked against its extent's CRC here; beyond that every piece is
// CRC-checked by the reader against the index (index/record_reader.cc), which calls Drop() on a
// mismatch and reads once more, so damaged cached bytes cost one refetch, never wrong bytes.
//
// The disk tier lives in one folder per index identity (location/store_location.cc names it from
// the index file's trailer, so a store rebuilt at the same URL never meets the old bytes), as a
// SegmentStore (common/segment_store.h): append-only segments SEQ.seg + SEQ.idx of at most
// 64 MiB, an entry per extent with CRCs of its bytes and of the entry (key: record id, offset in
// the record), so that the small exact pieces of an epoch's demand reads become a few files,
// not one file each. An extent longer than kMaxDiskExtent is kept as several entries, so a disk
// read reads (and checks) at most that much. In memory a disk extent is its segment, offset,
// length and CRC (16 bytes, in a std::map node: about 64 bytes per extent). Every disk read
// checks the extent's CRC: a mismatch drops the extent (counted as damaged) and reports its
// bytes missing, so they are fetched again. Drop() forgets an extent; its bytes stay in its
// segment as dead space until the segment goes. The disk tier evicts whole segments, oldest
// first (first in, first out by segment: the order an epoch reads), not by recency of use.
// Opening the folder reads the .idx files only (32 bytes per extent) and keeps, newest first,
// the entries that do not overlap one kept already; the files of the older layout (one file
// per extent) are removed then, with one line logged. One daemon at a time uses a folder (flock
// on ".lock"); a second one runs without the disk tier and says so.
//
// Thread-safe. Disk files are written and read without the lock held.
#pragma once

#include <boost/container/flat_map.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/segment_store.h"
#include "common/status.h"
#include "remote/unread_granules.h"

namespace pcrfs {

struct RangeCacheOptions {
  uint64_t memory_bytes = uint64_t{256} << 20;
  std::string disk_dir;     // empty: no disk tier
  uint64_t disk_bytes = 0;  // 0: no disk tier
};

struct RangeCacheStats {
  uint64_t memory_bytes = 0, disk_bytes = 0;          // kept now
  uint64_t disk_extents = 0, disk_segments = 0;       // kept now
  uint64_t disk_file_bytes = 0, disk_dead_bytes = 0;  // segment files; dropped bytes in them
  uint64_t memory_hit_bytes = 0, disk_hit_bytes = 0, miss_bytes = 0;  // of Copy()
  uint64_t inserted_bytes = 0, evicted_bytes = 0;
  uint64_t dropped = 0;  // extents dropped by Drop() or for a CRC mismatch on disk (damaged)
  uint64_t unread_speculative_bytes = 0;  // fetched ahead, not read yet
  uint64_t reserved_ahead_bytes = 0;      // being fetched ahead (ReserveAhead)
  uint64_t evicted_unread_bytes = 0;      // fetched ahead and evicted before read (ever)
  uint64_t recently_read_bytes = 0;       // read, evicted, not fetched ahead for now
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
  // left there (the oldest segments removed while over the budget). A folder locked by another
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
  // Missing, less the bytes read and evicted recently (in the last 2 s): what is worth
  // fetching ahead. A level larger than the cache, read by many readers,
  // has a fetch ahead decided just before a reader took some of its bytes; those were then
  // fetched again and held as unread for good.
  std::vector<Range> MissingUnread(uint32_t id, uint64_t offset, uint64_t n) const EXCLUDES(mu_);
  // Keeps bytes->size() bytes of object `id` from `offset` (the parts not kept yet).
  // speculative: fetched ahead of need, with bytes->size() bytes reserved by ReserveAhead,
  // which this gives back; its bytes count as unread until copied or marked read.
  void Insert(uint32_t id, uint64_t offset, std::shared_ptr<const std::vector<uint8_t>> bytes,
              bool speculative) EXCLUDES(mu_);
  // Bytes [offset, offset + n) of `id` were read by other means than Copy (a reader took them
  // straight from the fetch that brought them): no longer unread.
  void MarkRead(uint32_t id, uint64_t offset, uint64_t n) EXCLUDES(mu_);
  // Drops every extent that overlaps the range, in both tiers (a piece failed its CRC); true if
  // there was one.
  bool Drop(uint32_t id, uint64_t offset, uint64_t n) EXCLUDES(mu_);
  // Bytes that may be fetched ahead now and kept until read: the ahead share of the larger
  // tier (half; three quarters while the readers name their order), less what it keeps unread
  // and what is being fetched ahead.
  uint64_t AheadRoom() const EXCLUDES(mu_);
  // Takes n bytes of AheadRoom for a fetch ahead about to be sent: false (nothing taken) if
  // they do not fit. Insert(speculative) gives them back when the bytes arrive, UnreserveAhead
  // when the fetch fails.
  bool ReserveAhead(uint64_t n) EXCLUDES(mu_);
  void UnreserveAhead(uint64_t n) EXCLUDES(mu_);
  // Whether there is any room to fetch ahead (AheadRoom() > 0).
  bool WantsSpeculation() const EXCLUDES(mu_) { return AheadRoom() > 0; }
  // Bytes the larger tier holds: what may be fetched ahead at most.
  uint64_t capacity() const EXCLUDES(mu_);
  // The share of the larger tier that bytes fetched ahead and not read yet may take, in
  // quarters: the rest is for what the readers fetch themselves (read once, evicted first).
  // Half for speculation on the readers' next files; three quarters while the readers name
  // the files they read next (hints: SetOrderKnown), whose bytes are all read, in the order
  // they were fetched. With a cache of 1 MiB at level 1 (~4 KB a file), the room ahead is what
  // bounds the files in flight over a 20 ms link: half held a hinted epoch to ~0.77 of the
  // link's files/s.
  static constexpr uint64_t kAheadShareQuarters = 2;
  static constexpr uint64_t kOrderKnownAheadShareQuarters = 3;
  // Whether the readers name their order now (the hinted files' consumer says so while it
  // has hinted files to fetch): the ahead share is kOrderKnownAheadShareQuarters, else
  // kAheadShareQuarters. Bytes already unread beyond a smaller share stay, and no more are
  // fetched ahead until they are read.
  void SetOrderKnown(bool known) EXCLUDES(mu_);
  // The share itself: AheadRoom with nothing unread or being fetched ahead.
  uint64_t AheadShare() const EXCLUDES(mu_);
  // The disk tier keeps an extent as entries of at most this many bytes.
  static constexpr uint64_t kMaxDiskExtent = uint64_t{128} << 10;

  RangeCacheStats stats() const EXCLUDES(mu_);
  // The bytes fetched ahead and not read yet, by object (tests).
  std::vector<std::pair<uint32_t, Range>> UnreadRanges() const EXCLUDES(mu_);

 private:
  // Speculative bytes of a memory extent not read yet, exactly: which of its bytes were read.
  struct Unread {
    uint64_t unread = 0;
    // The parts read, [begin, end) from the extent's start (an extent is less than 4 GiB),
    // sorted and merged (none once all are read): a vector, not a map, since an extent of tiny
    // pieces read one by one holds thousands (8 bytes each here against ~64 for a map node).
    // The disk tier, which holds far more extents, keeps granules instead (DiskExtent).
    std::vector<std::pair<uint32_t, uint32_t>> read;
  };
  using Lru = std::list<std::pair<uint32_t, uint64_t>>;  // (id, start); front: most recent
  struct Extent {                                        // of the memory tier
    uint64_t end = 0;
    // Its bytes, all of them (a buffer of which only a part was new is not shared: Insert).
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    Unread unread;               // without a disk tier (the disk tier's: DiskExtent::unread)
    bool in_unread_lru = false;  // in Tier::unread_lru or Tier::partly_lru (else Tier::lru)
    bool partly = false;         // in Tier::partly_lru: some of its bytes read, some not
    Lru::iterator lru;
  };
  using Extents = std::map<uint64_t, Extent>;  // by start offset
  // A disk extent: where its bytes are (the extent's length is where.length).
  // By start offset; a sorted vector (32 bytes an extent, against ~64 for a map node: a disk
  // tier of 4 GiB held 670,906 extents of 1.28M tiny files' pieces). Inserting shifts the
  // extents of one object (a record: hundreds).
  struct DiskExtent {
    SegmentStore::Location where;  // where its bytes are (the extent's length is where.length)
    // Its speculative bytes not read yet, by 64-byte granules (empty: none; their bytes by
    // segment in unread_by_segment_).
    UnreadGranules unread;
  };
  using DiskExtents = boost::container::flat_map<uint64_t, DiskExtent>;
  // Marks [begin, end) of an extent read; returns the bytes that were unread. REQUIRES: mu_.
  // `start`: the extent's.
  uint64_t MarkReadLocked(Unread& u, uint64_t start, uint64_t begin, uint64_t end) REQUIRES(mu_);
  // Marks [begin, end) of `id` read in the primary tier's extents. REQUIRES: mu_ held.
  void MarkRangeReadLocked(uint32_t id, uint64_t begin, uint64_t end) REQUIRES(mu_);
  struct Tier {
    uint64_t budget = 0, bytes = 0;
    std::map<uint32_t, Extents> objects;
    Lru lru;         // extents with nothing unread: evicted first
    Lru unread_lru;  // extents with unread bytes, none read: evicted only when no other is left
    // Extents with unread bytes and read ones: their read parts go before unread_lru's. A list
    // of their own, so eviction does not look through every unread extent for one (it did:
    // 28% of the daemon's CPU at level 10, on the HTTP client's thread).
    Lru partly_lru;
    // The list that holds extent e.
    Lru& ListOf(const Extent& e) {
      return !e.in_unread_lru ? lru : e.partly ? partly_lru : unread_lru;
    }
  };

  explicit RangeCache(RangeCacheOptions options) : options_(std::move(options)) {}
  // Adopts one entry found at open; false if it overlaps one adopted already.
  bool AdoptLocked(const SegmentStore::Entry& e) REQUIRES(mu_);
  void AddLocked(uint32_t id, uint64_t start, Extent e) REQUIRES(mu_);
  void RemoveLocked(uint32_t id, Extents::iterator it) REQUIRES(mu_);
  void EvictLocked() REQUIRES(mu_);
  void AddDiskLocked(uint32_t id, uint64_t start, const SegmentStore::Location& where,
                     bool speculative) REQUIRES(mu_);
  // Removes a disk extent if it is still at `where`; forget: tell the store its bytes are dead
  // (not when its segment was evicted).
  bool RemoveDiskLocked(uint32_t id, uint64_t start, SegmentStore::Location where, bool forget)
      REQUIRES(mu_);
  void ForgetEvictedLocked(const std::vector<SegmentStore::Entry>& evicted) REQUIRES(mu_);
  // The memory tier evicted [begin, end) of `id`, read: remembered (MissingUnread).
  void NoteEvictedReadLocked(uint32_t id, uint64_t begin, uint64_t end) REQUIRES(mu_);
  // Forgets what was evicted longer than kEvictedReadKept ago (or beyond kEvictedReadBytes).
  void ExpireEvictedReadLocked(std::chrono::steady_clock::time_point now) const REQUIRES(mu_);
  // n unread bytes of segment `seq` were read or went.
  void LessUnreadInSegmentLocked(uint32_t seq, uint64_t n) REQUIRES(mu_);
  bool disk() const { return store_ != nullptr; }
  uint64_t PrimaryBudgetLocked() const REQUIRES(mu_) {
    return disk() ? options_.disk_bytes : memory_.budget;
  }
  uint64_t AheadShareLocked() const REQUIRES(mu_) {
    return PrimaryBudgetLocked() / 4 *
           (order_known_ ? kOrderKnownAheadShareQuarters : kAheadShareQuarters);
  }

  const RangeCacheOptions options_;
  std::unique_ptr<SegmentStore> store_;  // the disk tier (set by Open only)
  mutable Mutex mu_;
  Tier memory_ GUARDED_BY(mu_);
  bool order_known_ GUARDED_BY(mu_) = false;
  std::map<uint32_t, DiskExtents> disk_ GUARDED_BY(mu_);
  uint64_t disk_bytes_ GUARDED_BY(mu_) = 0, disk_extents_ GUARDED_BY(mu_) = 0;
  // Their unread bytes by segment (SegmentStore::Append evicts the segments with fewest last).
  std::map<uint32_t, uint64_t> unread_by_segment_ GUARDED_BY(mu_);
  uint64_t unread_ GUARDED_BY(mu_) = 0;    // sum of the primary tier's unread bytes
  uint64_t reserved_ GUARDED_BY(mu_) = 0;  // being fetched ahead (ReserveAhead)
  // Read bytes the memory tier evicted lately, merged per object, and the order they went in.
  struct EvictedRead {
    uint32_t id;
    uint64_t begin, end;
    std::chrono::steady_clock::time_point when;
  };
  static constexpr std::chrono::seconds kEvictedReadKept{2};
  static constexpr uint64_t kEvictedReadBytes = uint64_t{256} << 20;
  mutable std::map<uint32_t, std::map<uint64_t, uint64_t>> evicted_read_ GUARDED_BY(mu_);
  mutable std::deque<EvictedRead> evicted_read_order_ GUARDED_BY(mu_);
  mutable uint64_t evicted_read_bytes_ GUARDED_BY(mu_) = 0;
  RangeCacheStats stats_ GUARDED_BY(mu_);  // counters only
};

}  // namespace pcrfs
