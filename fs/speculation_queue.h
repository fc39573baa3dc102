// The record scheduler's queue of speculative reads (fs/record_scheduler.h): byte ranges of
// record files, first in first out, with what it has queued per file so that no byte is read
// speculatively twice while the caches may still hold it. Pure data: no threads, no clock, no
// lock (the scheduler holds its own).
//
// - Add queues the parts of ranges not queued or taken before (per file), at the back; a
//   range that touches one queued for the same file joins it, so ranges planned folder by
//   folder become one long range where the folders lie side by side in the record. Once
//   `forget_after` bytes have been taken or read on demand since (all of them went into the
//   caches), or `forget_ranges` ranges have been remembered (their map nodes are the memory:
//   at ImageNet's 1.28M files the pieces of level 10 average ~230 bytes, and 512 MiB of them
//   held ~2M ranges, ~130 MiB), ranges taken before may be queued again: a
//   long training job reads a dataset larger than its caches epoch after epoch, and by then
//   the caches have let them go (warming bytes a cache still holds costs little: a remote
//   file fetches only what its cache lacks, a local one copies from the page cache).
// - TakeFront takes a chunk from the front; PushFront puts one back (a busy source).
// - Promote takes, out of the middle of the queue, a window of a queued range that a demand
//   read starts in (the scheduler's WillRead).
// Lookups by file and offset go through a per-file index (file -> offset -> queued range),
// not a walk of the queue.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/speculation_source.h"

namespace pcrfs::fs {

class SpeculationQueue {
 public:
  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  // A queued range: bytes [offset, end) of the file whose speculation hooks `file` are.
  struct Pending {
    std::shared_ptr<const SpeculationSource> file;
    uint64_t offset;
    uint64_t end;
  };

  // By default, what was taken is forgotten after the remote memory cache's default size
  // (-o remote_cache) more has been taken.
  static constexpr uint64_t kForgetAfter = uint64_t{256} << 20;
  // And after this many ranges (seen and demanded) were remembered: two generations of them
  // hold at most ~8 MiB (64-byte map nodes). At 1.28M files of level 10, 2^17 held ~16 MiB
  // and 2^16 moved the same origin bytes (docs/notebook/2026-11-29-memory.md).
  static constexpr uint64_t kForgetRanges = uint64_t{1} << 16;
  explicit SpeculationQueue(uint64_t forget_after = kForgetAfter,
                            uint64_t forget_ranges = kForgetRanges)
      : forget_after_(forget_after), forget_ranges_(forget_ranges) {}

  // Queues `ranges` of `file` (clipped to `size`, in this order) minus every byte queued now or
  // taken for `file` before (within the last forget_after bytes taken); returns the parts it
  // queued.
  std::vector<Range> Add(const std::shared_ptr<const SpeculationSource>& file,
                         const std::vector<Range>& ranges, uint64_t size);
  // Puts [offset, end) of `file` (taken before, not queued now) back at the front, less what
  // demand reads fetched since (Discard, NoteDemanded): a range taken for a speculative read
  // that was refused, or a promoted window the source had no room for, would otherwise fetch
  // again bytes a reader has had.
  void PushFront(const std::shared_ptr<const SpeculationSource>& file, uint64_t offset,
                 uint64_t end);
  bool empty() const { return queue_.empty(); }
  // REQUIRES: !empty().
  const Pending& front() const { return queue_.front(); }
  // Takes up to n bytes from the front of the queue. REQUIRES: !empty().
  Pending TakeFront(uint64_t n);
  // If r starts inside a range queued for `file`, takes [r.offset, end) out of the queue,
  // where end is r.offset + max(r.length, chunk) or the queued range's end if sooner, and
  // returns it; what is left of the queued range on either side stays queued, in place.
  // Otherwise returns a range of length 0.
  Range Promote(const SpeculationSource* file, const Range& r, uint64_t chunk);
  // A demand read fetches r now: whatever of r is queued leaves the queue (what is left on
  // either side stays), and r counts as seen (a later Add skips it, as a range taken), so no
  // speculative read fetches it again later, when the cache
  // may have let the demand read's bytes go (a level larger than the cache, read in order:
  // those bytes were fetched twice, and then held as unread).
  void Discard(const SpeculationSource* file, const Range& r);
  // A demand read fetches r now (a piece whose window was promoted: it left the queue with
  // it): seen, and never pushed back (PushFront).
  void NoteDemanded(const SpeculationSource* file, const Range& r);
  // Drops everything queued (what was queued before still counts as seen).
  void Clear();
  // n bytes were read on demand: they enter the caches too, pushing older bytes out.
  void NoteDemand(uint64_t n) { taken_since_forget_ += n; }
  // How many times what was taken was forgotten (tests, stats).
  uint64_t forgotten() const { return forgotten_; }

  uint64_t queued_bytes() const { return queued_bytes_; }
  uint64_t promoted_reads() const { return promoted_reads_; }
  uint64_t promoted_bytes() const { return promoted_bytes_; }
  // The queued ranges, front first (tests).
  std::vector<Pending> Snapshot() const { return {queue_.begin(), queue_.end()}; }

  // Byte ranges of one file, merged: begin -> end.
  using RangeSet = std::map<uint64_t, uint64_t>;
  // Adds [begin, end) to `set`; appends to `added` (if not null) the parts that were new.
  static void Insert(RangeSet* set, uint64_t begin, uint64_t end, std::vector<Range>* added);
  // Appends to `out` the parts of [begin, end) that `set` does not hold.
  static void Subtract(const RangeSet& set, uint64_t begin, uint64_t end, std::vector<Range>* out);

 private:
  using Queue = std::list<Pending>;
  // The queued ranges of one file by offset (disjoint: a byte is queued at most once).
  using QueueIndex = std::map<uint64_t, Queue::iterator>;

  // Queues [offset, end) of `file` (no byte of it queued yet): merged into a queued range it
  // touches, else at the back (at the front if `front`).
  void Enqueue(const std::shared_ptr<const SpeculationSource>& file, uint64_t offset, uint64_t end,
               bool front);
  void Unindex(const Pending& p);
  // Promote: takes [r.offset, r.offset + max(r.length, chunk)) out, within the queued range
  // r.offset lies in.
  Range TakeOut(const SpeculationSource* file, const Range& r, uint64_t chunk, bool promoted);

  // Once more than forget_after_ bytes were taken since the last time, or more than
  // forget_ranges_ ranges were remembered: what the generation before last saw is forgotten (so
  // a range is queued again only after at least that many bytes were taken since it was, or
  // that many ranges remembered), and the new generation starts with what is queued now.
  void MaybeForget();
  // Insert into seen_ or demanded_, counting the ranges this generation remembers.
  void Remember(RangeSet* set, uint64_t begin, uint64_t end, std::vector<Range>* added);

  const uint64_t forget_after_;
  const uint64_t forget_ranges_;
  Queue queue_;
  std::unordered_map<const SpeculationSource*, QueueIndex> queued_;
  // Queued or taken: in this generation, and in the one before.
  std::unordered_map<const SpeculationSource*, RangeSet> seen_, seen_before_;
  // What demand reads fetched, in this generation and the one before (PushFront skips it).
  std::unordered_map<const SpeculationSource*, RangeSet> demanded_, demanded_before_;
  uint64_t queued_bytes_ = 0;
  uint64_t taken_since_forget_ = 0;
  // Ranges in seen_ and demanded_ now, and when this generation started (what was queued).
  uint64_t ranges_ = 0, ranges_at_forget_ = 0;
  uint64_t forgotten_ = 0;
  uint64_t promoted_reads_ = 0, promoted_bytes_ = 0;
};

}  // namespace pcrfs::fs
