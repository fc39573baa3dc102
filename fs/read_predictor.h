// Predicts which byte ranges of the records will be read next, from the files being read, and
// hands them to the RecordScheduler as speculative reads. It predicts files, not records: a
// record holds files of many directories, and only the directories being read are fetched.
//
// Per directory and level it counts the distinct files read:
// - Dense: once `dense_percent` of a directory's children (at least 2) have been read, as a
//   shuffled epoch does evenly across the directories it reads, every file of the directory
//   will be read: fetch all of them.
// - A walk: when a reader goes from one child to the next (a directory walk; children have
//   consecutive inode numbers in name order), fetch the next `readahead_files` children, and
//   again whenever the walk gets within half of that of the end.
// - Sibling folders: once files of `dense_percent` of a directory's subdirectories (at least 3)
//   were read, and a second file of one of them, the reads hop between sibling folders as a
//   shuffled epoch over the parent does (a class-per-folder dataset): every subdirectory of
//   that parent is planned, a few per read (kExpandPerRead children of the parent), and a
//   subdirectory first read before its turn is planned at its first read. One file from each
//   of many folders (a browser showing a file per folder) is not enough: no folder is read
//   twice. Only direct subdirectories: a parent planned this way does not count toward its
//   own parent.
// A file of a directory read again (another file read between) starts the directory's next pass,
// as the next epoch of a training job does: its counts start again, and it is planned afresh
// (the scheduler's queue skips what it took lately: fs/speculation_queue.h).
// A planned file contributes its level-k pieces, one per group region; pieces of consecutive
// files in a region are adjacent and merge into one range (fs/planned_files.h). Files of other
// directories in the same records are never part of a plan, so a folder read cold reads the
// folder's bytes only.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "fs/page_pusher.h"
#include "fs/planned_files.h"
#include "fs/record_scheduler.h"
#include "index/store.h"

namespace pcrfs::fs {

class ReadPredictor {
 public:
  struct Options {
    uint32_t dense_percent = 3;     // 0: never fetch whole directories
    uint32_t readahead_files = 64;  // 0: no walk readahead
  };
  // A plan lists at most this many children of a directory (a directory of a million files is
  // fetched in windows as it is read).
  static constexpr uint64_t kMaxPlanFiles = 65536;
  // Children of a parent whose subdirectories are dense looked at per read, at most, and the
  // files planned per read: subdirectories are taken until their files reach
  // kExpandFilesPerRead (at least one). The planning runs on the reading thread before its read
  // is sent: bounded work per read. The files planned by one expansion are queued together, so
  // the pieces of neighbouring small folders merge into one range per group region (one GET,
  // not one per folder and region).
  static constexpr uint64_t kExpandPerRead = 64;
  static constexpr uint64_t kExpandFilesPerRead = 2048;

  // `pusher` (may be null) is told every planned file small enough to push, before its
  // pieces are queued.
  ReadPredictor(const index::Store& store, RecordScheduler& scheduler, Options options,
                PagePusher* pusher = nullptr)
      : store_(store), scheduler_(scheduler), options_(options), pusher_(pusher) {}
  ReadPredictor(const ReadPredictor&) = delete;
  ReadPredictor& operator=(const ReadPredictor&) = delete;

  // A demand read of file `e` at `level` is being served.
  void OnRead(const index::Entry& e, int level);

  bool enabled() const { return options_.dense_percent > 0 || options_.readahead_files > 0; }
  // Directory passes started again (tests).
  uint64_t passes() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return passes_;
  }

 private:
  struct DirAccess {
    uint64_t first_child = 0, num_children = 0;  // 0 children: not known yet
    uint64_t last_ino = 0;                       // the file read last in this directory
    uint64_t distinct = 0;                       // files read (a re-read counts again)
    uint64_t readahead_end = 0;                  // inodes below this are planned
    uint64_t parent = 0;                         // this directory's parent
    bool planned_all = false;
    // Children read in this pass (by index): a file read again starts the next pass (an
    // epoch), planned afresh.
    std::vector<bool> read;
  };
  // A directory whose subdirectories are being read (by (dir, level)).
  struct ParentAccess {
    uint64_t first_child = 0, num_children = 0, num_subdirs = 0;
    uint64_t read_subdirs = 0;    // subdirectories with a file read
    uint64_t reread_subdirs = 0;  // ... with two different files read
    uint64_t cursor = 0;          // children [0, cursor) were looked at by the expansion
    bool expanding = false;       // enough subdirectories are read: plan them all
  };
  // The first (reads == 1) or second (2) different file of a subdirectory of `parent` is being
  // read: counts it, and returns whether the parent's subdirectories are to be planned now.
  bool NoteSiblingRead(uint64_t parent, int level, uint64_t reads) EXCLUDES(mu_);
  // Plans the next subdirectories of an expanding parent (kExpandPerRead, kExpandFilesPerRead).
  void Expand(uint64_t parent, int level) EXCLUDES(mu_);
  // Adds the level-k pieces of children [first, first + count) of `dir` to *plan.
  void PlanInto(uint64_t dir, uint64_t first, uint64_t count, int level, PlannedFiles* plan);
  // Queues the level-k pieces of children [first, first + count) of `dir`.
  void Plan(uint64_t dir, uint64_t first, uint64_t count, int level) {
    PlannedFiles plan(store_, pusher_);
    PlanInto(dir, first, count, level, &plan);
    plan.Queue(scheduler_);
  }

  const index::Store& store_;
  RecordScheduler& scheduler_;
  const Options options_;
  PagePusher* const pusher_;
  mutable Mutex mu_;
  std::map<std::pair<uint64_t, int>, DirAccess> dirs_ GUARDED_BY(mu_);  // by (dir, level)
  std::map<std::pair<uint64_t, int>, ParentAccess> parents_ GUARDED_BY(mu_);
  uint64_t passes_ GUARDED_BY(mu_) = 0;
};

}  // namespace pcrfs::fs
