// Puts the bytes of files the readers are predicted to read into the kernel's page cache before
// anybody asks for them (FUSE_NOTIFY_STORE), so that reading such a file sends the daemon no
// request at all.
//
// Why: on fast storage the cold cost of a small file is its FUSE round trips, not its bytes
// (issue 12 item 3: ~60% of the daemon's CPU at level 1 went to the wake-ups of one LOOKUP and
// one READ per file). With READDIRPLUS the listing already told the kernel every file (no
// LOOKUP); a pushed file then needs no READ either. The kernel only accepts bytes for an inode
// it holds (a listed or looked-up file); for any other the push fails with ENOENT and the file
// is read the usual way.
//
// When: ReadPredictor plans the files of the folders being read and queues their pieces as
// speculative reads (RecordScheduler). The pusher is told each planned file's pieces, with
// their checksums, and the bytes that follow them (Expect), and every finished speculative
// read (Arrived). Once all of a file's pieces have arrived in the source's cache, a thread of
// its own assembles the file from memory (SpeculationSource::ReadCached: the page cache of a
// local record, the range cache of a remote one; never a device or network read), checks each
// piece's CRC32C, and pushes it (Push). It needs no index lookup: Expect carried everything
// (an LMDB get and an entry decode per push were a tenth of its CPU, issue 12). A file a
// reader asked for in the meantime (Forget) is skipped; a file whose bytes fail their check
// is left to the reads, which report the damage.
//
// Bound: the daemon never learns whether a pushed page was read (the kernel answers such reads
// itself), so the bytes it pushes over a mount are capped (Options::budget_bytes). Pushed
// pages are ordinary clean page cache: under memory pressure the kernel drops them, and a file
// whose pages went is read with READs as before.
//
// Thread-safe.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "common/speculation_source.h"
#include "common/status.h"

namespace pcrfs::fs {

// What a pushed file counts as in the mount's counters (pcrfs_bytes_served_total and its
// neighbours, by level): its level (1..10; 0: not counted by level) and the bytes its source
// file takes for the same bytes (Filesystem::ReadStored's scaling).
struct PushCounted {
  int level = 0;
  uint64_t source_bytes = 0;
};

class PagePusher {
 public:
  struct Options {
    uint64_t budget_bytes = 0;                    // bytes pushed over the mount at most; 0: off
    uint64_t max_file_bytes = uint64_t{1} << 20;  // larger files are read with READs
    // Pieces of the files expected and not pushed yet, at most (a file that would pass it is not
    // expected: read with READs). Each piece costs ~110 bytes of bookkeeping and each file ~130
    // more: 64Ki pieces ~15 MiB at level 1 (64Ki files), ~8 MiB at level 10 (6.5Ki files),
    // whatever the store's size (a shuffled epoch over ImageNet's 1,000 folders plans all 1.28M
    // files within its first reads). A cap by files held ~1 KB per file at level 10: 68 MiB.
    size_t max_pending_pieces = size_t{1} << 16;
  };
  // A piece of a file: `length` bytes at `offset` of the record, whose CRC32C, masked
  // (common/crc32c.h), is `masked_crc`.
  struct Piece {
    uint64_t offset;
    uint64_t length;
    uint32_t masked_crc;
  };
  using Counted = PushCounted;
  // Hands the kernel the bytes of `ino` from offset 0: 0, or a negative errno (-ENOENT: the
  // kernel holds no such inode).
  using Push = std::function<int(uint64_t ino, const uint8_t* data, size_t n)>;

  struct Stats {
    uint64_t expected = 0;  // files Expect took
    uint64_t pushed = 0, pushed_bytes = 0;
    // The pushed files, their bytes and their source files' bytes, by level (Counted).
    std::array<uint64_t, 10> files_by_level{}, bytes_by_level{}, source_bytes_by_level{};
    uint64_t unknown = 0;        // the kernel held no inode for the file (ENOENT)
    uint64_t not_in_memory = 0;  // arrived, but a byte was missing when assembled (evicted)
    uint64_t damaged = 0;        // a piece failed its CRC: left to the reads
    uint64_t failed = 0;         // any other push error
    uint64_t over_budget = 0;    // ready files not pushed: the budget was spent
    uint64_t refused = 0;        // too many files pending: not expected
    uint64_t read_first = 0;     // a reader asked for it while it was assembled: not pushed
  };

  PagePusher(Options options, Push push);
  ~PagePusher();  // joins the thread; pending files are dropped
  PagePusher(const PagePusher&) = delete;
  PagePusher& operator=(const PagePusher&) = delete;

  bool enabled() const { return enabled_; }
  uint64_t max_file_bytes() const { return options_.max_file_bytes; }

  // File `ino` is predicted to be read; its bytes are `pieces` of `record` (the record file's
  // speculation hooks, SourceFile::speculation(); in file order, each its own range of the
  // record, none shared with another file), then `tail`
  // (LevelPlan::tail(): a JPEG's end-of-image marker). Call before the pieces are queued as
  // speculative reads; `record` must outlive the pusher. A file expected already, of no bytes or
  // more than max_file_bytes, or arriving when the budget is spent is ignored.
  void Expect(const SpeculationSource* record, uint64_t ino, const std::vector<Piece>& pieces,
              std::string_view tail = {}, Counted counted = {}) EXCLUDES(mu_);
  // A speculative read of [offset, end) of `record` finished: those bytes are in the source's
  // cache. Returns at once (the work happens on the pusher's thread).
  void Arrived(const SpeculationSource* record, uint64_t offset, uint64_t end) EXCLUDES(mu_);
  // A reader asks the daemon for `ino`: pushing it is pointless now, and for a while (the
  // last kRecentReads files asked for) an Expect of it is ignored. Returns the bytes of `ino`
  // a push counted as served that no READ has counted off yet (0 for a file never pushed, the
  // common case): only then need the READ ask CountedByPush.
  uint64_t Forget(uint64_t ino) EXCLUDES(mu_);
  static constexpr size_t kRecentReads = 16384;
  // A READ of `n` bytes of `ino` was answered: how many of them a push of `ino` counted as
  // served already (a push that raced with the reader's READ, or whose pages the kernel dropped
  // before the read), so that the served counters count each byte a reader gets once. Counts
  // them off the file's pushed bytes.
  uint64_t CountedByPush(uint64_t ino, uint64_t n) EXCLUDES(mu_);
  // Files made ready by arrivals are pushed in batches of at most this many (an arrival that
  // completes every pending file holds them once, not twice).
  static constexpr size_t kReadyBatch = 1024;

  Stats stats() const EXCLUDES(mu_);
  // One line for user.pcrfs.prefetch.
  std::string Describe() const;
  // Waits until every arrival so far has been handled (tests).
  void Drain() EXCLUDES(mu_);

 private:
  struct PendingPiece {
    uint64_t end = 0;
    uint64_t ino = 0;
    uint64_t missing = 0;  // bytes of this piece that have not arrived
  };
  struct PendingFile {
    const SpeculationSource* record = nullptr;
    uint64_t size = 0;
    uint64_t missing = 0;       // bytes of all its pieces not arrived yet
    std::vector<Piece> pieces;  // in file order; their offsets are keys in pieces_[record]
    std::string tail;
    Counted counted;
  };
  // A file whose pieces have all arrived, taken out of files_.
  struct Ready {
    uint64_t ino;
    PendingFile file;
  };
  struct Arrival {
    const SpeculationSource* record;
    uint64_t offset, end;
  };
  void Run() EXCLUDES(mu_);
  // Counts an arrival against the pieces it covers; moves the files now complete to *ready.
  void ApplyLocked(const Arrival& a, std::vector<Ready>* ready) REQUIRES(mu_);
  // Takes the file out of files_ and its pieces out of pieces_; returns it.
  PendingFile EraseFileLocked(std::unordered_map<uint64_t, PendingFile>::iterator it) REQUIRES(mu_);
  // Assembles the file from the record's cached bytes, checks them and pushes them.
  void PushOne(const Ready& r, std::vector<uint8_t>* buffer) EXCLUDES(mu_);

  const Options options_;
  const Push push_;
  const bool enabled_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool busy_ GUARDED_BY(mu_) = false;  // the thread is handling arrivals taken off the queue
  std::deque<Arrival> arrivals_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, PendingFile> files_ GUARDED_BY(mu_);
  size_t pending_pieces_ GUARDED_BY(mu_) = 0;  // of files_, summed
  std::unordered_map<const SpeculationSource*, std::map<uint64_t, PendingPiece>> pieces_
      GUARDED_BY(mu_);
  // The files asked for last: a set, and the same in order (a ring) to drop the oldest.
  std::unordered_set<uint64_t> recent_ GUARDED_BY(mu_);
  std::vector<uint64_t> recent_ring_ GUARDED_BY(mu_);
  size_t recent_next_ GUARDED_BY(mu_) = 0;
  uint64_t committed_bytes_ GUARDED_BY(mu_) = 0;  // pushed, or being pushed
  // Files pushed (counted as served) and the bytes of each that a READ of it would count a
  // second time: a ring of the last kRecentReads, as recent_.
  std::unordered_map<uint64_t, uint64_t> pushed_left_ GUARDED_BY(mu_);
  std::vector<uint64_t> pushed_ring_ GUARDED_BY(mu_);
  size_t pushed_next_ GUARDED_BY(mu_) = 0;
  Stats stats_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace pcrfs::fs
