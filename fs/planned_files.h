// Files to fetch ahead at a level, gathered and then queued as speculative reads: the one way
// from "these files will be read" to the record scheduler, taken by the read predictor (the
// files of the folders being read, fs/read_predictor.h) and by the hint consumer (the files a
// reader named, in its order: Filesystem, fs/hint_queue.h).
//
// A planned file contributes its level-k pieces (index/level_plan.h: the one arithmetic of
// which bytes make level k), one per group region of its record. Queue() hands them over per
// record, each region's pieces in offset order with adjacent ones merged, so the pieces of
// files stored side by side become one range per region. Files planned one Queue() at a time
// are queued in that order (the scheduler's queue is first in first out). The page pusher, if
// on, is told every planned file small enough to push, before its pieces are queued.
//
// Not thread-safe: one plan per caller.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "fs/page_pusher.h"
#include "fs/record_scheduler.h"
#include "index/store.h"

namespace pcrfs::fs {

class PlannedFiles {
 public:
  // `pusher` may be null (nothing pushed); store and pusher must outlive the plan.
  PlannedFiles(const index::Store& store, PagePusher* pusher) : store_(store), pusher_(pusher) {}

  // Adds the level-`level` pieces of file entry `e` (their offsets and CRCs read from the
  // record's table when the index holds lengths only: Store::ResolvePieces, which reads the
  // table once per record). False, nothing added, for a folder or pieces that could not be
  // resolved (a damaged record: a demand read of the file reports it).
  bool Add(index::Entry e, int level);
  bool empty() const { return pieces_.empty(); }
  // The bytes planned so far.
  uint64_t bytes() const { return bytes_; }

  // Tells the pusher the planned files and queues their pieces with `scheduler`; records
  // without speculation hooks (a source that keeps nothing read ahead) are skipped. Empties
  // the plan.
  void Queue(RecordScheduler& scheduler);

 private:
  struct PushFile {
    uint64_t ino;
    std::vector<PagePusher::Piece> pieces;
    std::string_view tail;
    PagePusher::Counted counted;
  };

  const index::Store& store_;
  PagePusher* const pusher_;
  // Per record, per group region, the pieces in the order added; the files to push, by record.
  std::map<uint32_t, std::vector<std::vector<RecordScheduler::Range>>> pieces_;
  std::map<uint32_t, std::vector<PushFile>> push_files_;
  uint64_t bytes_ = 0;
};

}  // namespace pcrfs::fs
