// The filesystem logic of the daemon, independent of FUSE: fuse_ops.cc is a thin adapter over
// this class, and tests call it directly without mounting.
//
// Thread-safe: every method may be called from many FUSE worker threads at once. No lock is
// held during I/O.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <semaphore>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "fs/baseline_cache.h"
#include "fs/hint_queue.h"
#include "fs/inode.h"
#include "fs/page_pusher.h"
#include "fs/piece_cache.h"
#include "fs/read_predictor.h"
#include "fs/record_scheduler.h"
#include "index/store.h"

namespace pcrfs::fs {

// How directory listings answer: with every entry's attributes (READDIRPLUS), so the kernel
// knows the files without a LOOKUP each, or plain (names and types), which is cheaper when
// nothing is opened afterwards (find, ls of a huge tree): the kernel then creates no inode per
// entry. kAuto lets the kernel choose per directory.
enum class ReaddirPlus { kAlways, kAuto, kNever };

// What a JPEG file's bytes are (-o form): the stored progressive level, or the same
// coefficients re-encoded as a sequential JPEG at lookup (codec/baseline.h), which decodes
// 1.5-2x faster. Passthrough files are served as stored either way.
enum class ServedForm { kProgressive, kBaseline };

class Filesystem;

struct FsOptions {
  int fixed_level = 0;  // 0: the root holds scan1..scan10; K: the tree at level K is the root
  ServedForm form = ServedForm::kProgressive;
  uid_t uid = 0;
  gid_t gid = 0;
  // Piece cache cap; with form=baseline a quarter of it holds transcoded files (BaselineCache).
  uint64_t cache_bytes = uint64_t{256} << 20;
  // A range taken for speculation may be taken again once this many bytes more were taken (the
  // caches may have let it go: fs/speculation_queue.h); a remote store's memory cache size.
  uint64_t speculation_memory = SpeculationQueue::kForgetAfter;
  // form=baseline: a folder of transcoded files on disk (fs/baseline_disk_cache.h) and its
  // budget; empty or 0: memory only. One mount per folder: a second one runs without and logs so.
  std::string baseline_disk_dir;
  uint64_t baseline_disk_bytes = 0;
  // When reads walk a directory in order, fetch this many following files (ReadPredictor).
  uint32_t readahead_slots = 64;
  // Once this percentage of a directory's files has been read (a shuffled epoch touches every
  // directory it reads evenly), fetch all of the directory's files (ReadPredictor). 0: never.
  uint32_t prefetch_percent = 3;
  // With attributes by default: the kernel then holds every listed file, so opening one costs
  // no LOOKUP and its bytes can be pushed before it is read (PagePusher): a cold level-1 epoch
  // 1.3-1.6x faster. A walk that opens nothing (find over a million files) pays for it: the
  // kernel builds an inode per entry (~1.1 KiB of reclaimable slab), 3.9x native; -o
  // readdirplus=no suits that use.
  ReaddirPlus readdirplus = ReaddirPlus::kAlways;
  // FUSE_INIT's max_readahead. The kernel takes the smaller of it and the mount's bdi window
  // (read_ahead_kb, 128 KiB unless the daemon raised it before INIT: -o kernel_readahead).
  uint32_t max_readahead = 1u << 20;
  // FUSE_INIT's max_background: the kernel's readahead READs are background requests, and
  // the kernel's default of 12 (congested at 9) is what 16 readers of a remote store hit
  // first: beyond it a READ waits in the kernel's queue, and a congested mount skips readahead
  // altogether, so a cold file arrives one 4 KiB page per READ, a round trip each (16 readers,
  // 2,000 files of 33 KB over HTTP: 6.7 READs and 3.6 GETs per file with 12, 1.0 with 128).
  // The congestion threshold is 3/4 of it. An unprivileged mount is capped by the kernel at
  // /proc/sys/fs/fuse/max_user_bgreq.
  uint16_t max_background = 64;
  // Whether a cold read of a file at a level of several pieces takes windows of the queued
  // speculative ranges around its pieces (RecordScheduler::WillRead). A read of one piece
  // (level 1) always may: its window holds the level of ~100 neighbours. At level k a window
  // holds 1/k of each neighbour, and a file's k pieces become k GETs of windows sharing the
  // link; where the level does not fit the caches (the daemon sets this false then), pieces
  // alone are faster (10k files at level 10, caches 1/10 of it, 16 readers, 20 ms: 484 files/s
  // with windows, 590-615 with pieces alone in one GET per file).
  bool windows_for_several_pieces = true;
  // A remote store: the HTTP client's counters as a JSON object, shown with the bytes served
  // in the root's user.pcrfs.remote. Empty: a local store (no such xattr).
  std::function<std::string()> remote_stats;
  // Pushing predicted files into the kernel's page cache (PagePusher): at most push_bytes over
  // the mount (0: off), through `push` (fuse_lowlevel_notify_store; empty: off). Only with
  // READDIRPLUS listings: the kernel accepts bytes for the inodes it holds only, and with
  // plain listings it learns of a file at its first open, just before the READ.
  uint64_t push_bytes = 0;
  PagePusher::Push push;
  // The mount's metrics in Prometheus's text format (fs/metrics_server.h), shown in the root's
  // user.pcrfs.metrics (what `pcr top` reads). Empty: no such xattr.
  std::function<std::string(const Filesystem&)> metrics_text;
  // Files readers said they will read next (hint_queue(), fed by fs/hint_server.h) are fetched
  // ahead in that order by a thread of the filesystem. hint_socket: the socket's path, shown in
  // the root's user.pcrfs.hint_socket (empty: no such xattr).
  bool hints = false;
  std::string hint_socket;
};

inline constexpr uint32_t kBlockSize = 128 * 1024;  // st_blksize: one FUSE read request
inline constexpr uint32_t kStatFsUnit = 4096;       // statfs's f_frsize, df's unit

// Calls fn with each component of a '/'-separated path in turn, skipping empty and "."
// components; a ".." component is EINVAL naming the path. Stops at fn's first error and
// returns it.
Status ForEachPathComponent(std::string_view path,
                            const std::function<Status(std::string_view)>& fn);

class Filesystem {
 public:
  Filesystem(std::unique_ptr<index::Store> store, FsOptions options);
  ~Filesystem();  // stops the hint consumer before anything it uses goes
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // Errors carry the errno to reply with (Status::ToErrno): ENOENT, ENOTDIR, EISDIR, ENODATA,
  // EIO for damaged data.
  Result<struct stat> GetAttr(uint64_t ino) const;
  // open(2) of `ino` with open(2)'s `flags`: OK for a file opened read-only; EROFS for write
  // access (the mount is read-only), EISDIR for a folder, ENOENT as GetAttr.
  Status Open(uint64_t ino, int flags) const;
  // opendir(3) of `ino`: OK for a folder, ENOTDIR for a file, ENOENT as GetAttr.
  Status OpenDir(uint64_t ino) const;
  Result<struct stat> Lookup(uint64_t parent, std::string_view name) const;
  // The FUSE inode of the file at `path`, relative to the mount root ("scan5/train/a.JPEG",
  // or "train/a.JPEG" with -o scans=K), as lookups from the root would find it: the hint
  // server's resolver. Empty and "." components are skipped. Errors carry the errno: EISDIR
  // for a folder (the root and scanK included), EINVAL for a ".." component, ENOENT (a
  // scanK-less path on the ladder, a name that is not there), ENOTDIR, EIO.
  Result<uint64_t> LookupPath(std::string_view path) const;

  // Lists a directory from `offset` (0: the start; "." and ".." come first). fn gets each
  // entry's name, attributes and the offset of the entry after it; it returns false to stop
  // (the reply buffer is full) and that entry is then not consumed. With `attrs` false (a
  // plain readdir) st holds only st_ino and the file type in st_mode, and the listing is read
  // from the index's dirents alone, a quarter of the bytes of whole entries. With form=baseline
  // a JPEG whose size is not known yet comes as in a plain listing, with st_nlink 0: its size
  // would cost a transcode, which a listing must not pay for every file of a folder.
  using DirFiller =
      std::function<bool(std::string_view name, const struct stat& st, uint64_t next_offset)>;
  Status ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fn, bool attrs = true) const;

  // Reads up to size bytes at offset into dst; returns the count (0 at or past EOF).
  Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const;
  // The bytes Read() has returned, over all files.
  uint64_t bytes_served() const;
  // What left the daemon at each level (index level - 1), by Read() and by files pushed into
  // the page cache (PagePusher: a reader then finds them there without a READ): bytes, files
  // (reads at offset 0, files pushed), and the bytes the same reads would have taken from the
  // source files (each read scaled by source size / size at its level; passthrough files: the
  // bytes read), and of that what exceeded the bytes served (never negative: a read whose level
  // is larger saves nothing). A pushed file read again with READs (a push that raced with the
  // reader, or pages the kernel dropped) is counted once (PagePusher::CountedByPush); one that
  // no reader reads was counted all the same.
  struct LevelCounters {
    std::array<uint64_t, index::kNumGroups> bytes{}, files{}, source_bytes{}, saved_bytes{};
  };
  LevelCounters level_counters() const;
  // Reads answered EIO because of damaged data (ReportDamage), and the files involved.
  uint64_t damaged_reads() const { return damaged_reads_.load(std::memory_order_relaxed); }
  uint64_t damaged_files() const;

  // user.pcrfs.level, user.pcrfs.full_size, user.pcrfs.source_size, user.pcrfs.passthrough,
  // user.pcrfs.passthrough_reason (passthrough files only); on the root also user.pcrfs.prefetch,
  // and with their options user.pcrfs.remote, baseline, metrics, hint_socket and hints. ENODATA for
  // any other user.* name, ENOTSUP for a name in another namespace (security.*, system.*,
  // trusted.*).
  Result<std::string> GetXattr(uint64_t ino, std::string_view name) const;
  Result<std::vector<std::string>> ListXattr(uint64_t ino) const;

  // What df shows, from the manifest (no I/O): size = the source dataset's bytes, used = the
  // bytes of the level at the root (level 10 under the ladder root), available = the bytes
  // that level saves (nothing can be written: ST_RDONLY), inodes = the store's entries, none
  // free. Counted in kStatFsUnit units; f_bsize is kBlockSize.
  struct statvfs StatFs() const;

  // Queues speculative reads of every record's level-`level` prefix (its header, tables and
  // group regions 1..level), from a thread of its own: what -o disk_cache_fill does. The
  // source paces them (a remote store fetches while its cache wants more). Returns at once.
  void FillLevel(int level);

  const index::Store& store() const { return *store_; }
  const PieceCache& cache() const { return cache_; }
  const PieceCache& large_file_cache() const { return large_cache_; }
  // form=baseline's transcoded files; null with form=progressive.
  const BaselineCache* baseline_cache() const { return baseline_.get(); }
  RecordScheduler::Stats scheduler_stats() const { return scheduler_.stats(); }
  PagePusher::Stats pusher_stats() const { return pusher_.stats(); }
  // Waits until the pusher has handled every speculative read finished so far (tests).
  void DrainPusher() { pusher_.Drain(); }
  // The files readers said they will read next, in their order (fs/hint_queue.h). With
  // FsOptions::hints a thread takes them one at a time, while the scheduler has less than
  // HintAheadBytes() queued, and queues each file's level pieces as speculative reads
  // (fs/planned_files.h, as the read predictor does), so the bytes come in the readers' order
  // and the daemon never holds a whole epoch's worth queued. A file a reader reads before its
  // turn is dropped; reads of hinted files do not feed the read predictor (the order is known,
  // there is nothing to guess). Its server feeds it; tests may too.
  HintQueue& hint_queue() const { return hints_; }
  // 16 MiB, or half the memory that holds fetched bytes (FsOptions::speculation_memory: a
  // remote store's -o remote_cache) if that is less: enough queued to keep a remote store's
  // concurrent fetches busy, little enough that a reader's later reads are not crowded out.
  static constexpr uint64_t kHintAheadBytes = uint64_t{16} << 20;
  uint64_t HintAheadBytes() const {
    return std::min(kHintAheadBytes, options_.speculation_memory / 2);
  }
  const FsOptions& options() const { return options_; }

 private:
  struct Resolved {
    bool ladder_root = false;  // the virtual root holding scan1..scan10
    int level = 0;
    index::Entry entry;
  };
  Result<Resolved> Resolve(uint64_t ino) const;
  struct stat EntryAttr(const index::Entry& e, int level) const;
  // EntryAttr, with a baseline-form JPEG's size (which may cost a transcode: EIO if its level's
  // bytes are damaged).
  Result<struct stat> Attr(const index::Entry& e, int level) const;
  bool ServesBaseline(const index::Entry& e) const {
    return baseline_ != nullptr && e.kind == index::EntryKind::kJpeg;
  }
  // The baseline form of e at level: from baseline_, or its level's bytes read (and checked)
  // as any read is and transcoded, once however many threads ask.
  Result<BaselineCache::Bytes> BaselineBytes(const index::Entry& e, int level) const;
  struct stat LadderRootAttr() const;
  // The verified bytes of checksum block `block` of piece `group` (a piece of one block is
  // block 0), from the cache or storage; concurrent requests for one block read it once. `keep`
  // puts a block read from storage into the cache (pointless when this request reads the whole
  // file: the kernel keeps its pages).
  Result<PieceBytes> GetBlock(const SourceFile& file, const index::Entry& e, int group,
                              uint64_t block, bool keep) const;
  // How many checksum blocks to ask for ahead of a large file read in order.
  static constexpr uint64_t kSequentialBlocksAhead = 4;
  // Logs a damaged file once (common/log.h: stderr in the foreground, syslog once
  // daemonized), naming the record file and the file's path in the dataset, and returns the
  // error its reads give: s's code and errno, that line as its message (a reader without the
  // log, the Python binding, shows the same line).
  Status ReportDamage(const index::Entry& e, int level, const Status& s) const;
  // Logs once per record that its header, footer or size disagree with the index.
  void ReportRecordProblem(uint32_t record, const Status& s) const;
  // Logs once that the store changed under the mount (Store's ESTALE: rebuilt or removed).
  void ReportStoreChanged(const Status& s) const;
  // The path of an entry relative to the dataset root ("train/cat/img.jpg").
  std::string PathOf(const index::Entry& e) const;
  Result<SourceFile> OpenRecord(uint32_t record) const;
  // The hint consumer's thread (FsOptions::hints).
  void ConsumeHints() EXCLUDES(hint_mu_);
  // A hinted file of a store whose records order their own requests (a remote store): its
  // level pieces are fetched ahead at once, as room allows (true: done with it). False: a
  // source the scheduler reads ahead (PlannedFiles). On the consumer's thread only.
  bool FetchHinted(index::Entry e, int level) EXCLUDES(hint_mu_);
  // Once the hinted store is known to order its own requests (hinted_remote_): takes the next
  // hinted files, up to kHintBatchFiles or the cache's room for bytes fetched ahead, and asks
  // (in the order of each record's first file) for the pieces of those in one record at once (one
  // multi-range GET from a web server: the files of a shuffled epoch that share a record, instead
  // of a GET per file, which held a hinted level-1 epoch to the GETs a second the link and the
  // proxy take). A record whose pieces find no room goes file by file (FetchHinted). On the
  // consumer's thread only.
  void FetchHintedBatch() EXCLUDES(hint_mu_);
  // Hinted files queued (on) or none left: the scheduler's own speculation yields to them, and
  // the hinted store's cache gives bytes fetched ahead its larger share (SetOrderKnown).
  void SetHinting(bool on);
  // Waits until the hinted store's cache has `bytes` of room ahead, or until `until`; false
  // once the consumer is to stop. On the consumer's thread only (hinted_remote_ set).
  bool WaitForHintRoom(uint64_t bytes, std::chrono::steady_clock::time_point until)
      EXCLUDES(hint_mu_);
  static constexpr size_t kHintBatchFiles = 256;
  // The cache room the consumer waits for before it takes the next hinted file, and how often
  // it looks (reads free room and signal nothing).
  static constexpr uint64_t kHintMinRoom = uint64_t{64} << 10;
  static constexpr std::chrono::milliseconds kRoomRecheck{2};
  static constexpr int kMaxRoomWaits = 500;  // about a second
  // Fuller batches: before taking one, the consumer waits up to kHintCoalesce for a quarter of
  // the room ahead to be free. Taken as soon as 64 KiB were, a batch held ~20 level-1 files
  // over 98 records at 100k files: 0.84 GETs per hinted file, the daemon's CPU the bound.
  static constexpr std::chrono::milliseconds kHintCoalesce{10};
  // The last hinted file's speculation hooks (a remote store's: its cache's room is the
  // store's). The consumer's thread only.
  std::shared_ptr<const SpeculationSource> hinted_remote_;
  std::atomic<uint64_t> hinted_fetched_{0};

  std::unique_ptr<index::Store> store_;
  const FsOptions options_;
  mutable PieceCache cache_;
  // The blocks of pieces longer than one checksum block (large files), apart: a large file
  // read through must not evict every small file's pieces, and the kernel keeps its pages.
  // Its share of options_.cache_bytes: 32 MiB, or half of a smaller budget.
  static constexpr uint64_t LargeFileCacheBytes(uint64_t budget) {
    return std::min(budget / 2, uint64_t{32} << 20);
  }
  mutable PieceCache large_cache_;
  // form=baseline: a quarter of options_.cache_bytes, and a size table of 2^20 slots (16 MiB
  // of address space, resident as used).
  static constexpr size_t kBaselineSizeSlots = size_t{1} << 20;
  static uint64_t PieceCacheBytes(const FsOptions& o) {
    return o.form == ServedForm::kBaseline ? o.cache_bytes - o.cache_bytes / 4 : o.cache_bytes;
  }
  std::unique_ptr<BaselineCache> baseline_;
  // Re-encodings run at once, at most one per core: each may take up to 1 GiB of libjpeg's
  // memory (codec/baseline.h), and lookups of many files (ls -l) would otherwise run as many as
  // there are FUSE threads.
  mutable std::counting_semaphore<256> reencode_slots_{
      static_cast<std::ptrdiff_t>(std::clamp(std::thread::hardware_concurrency(), 1u, 256u))};
  index::Entry root_;

  // Read without the counters; on success *level is the file's level and *source_bytes what
  // the read would have taken of the source file.
  Result<size_t> ReadUncounted(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst, int* level,
                               uint64_t* source_bytes) const;
  // The stored bytes of e at level (no baseline form); *source_bytes as ReadUncounted's, if not
  // null.
  Result<size_t> ReadStored(const index::Entry& e, int level, uint64_t offset, size_t size,
                            uint8_t* dst, uint64_t* source_bytes) const;
  // Per level, updated with relaxed atomic adds on each read (no lock).
  struct AtomicLevelCounters {
    std::array<std::atomic<uint64_t>, index::kNumGroups> bytes{}, files{}, source_bytes{},
        saved_bytes{};
  };
  mutable AtomicLevelCounters served_;
  mutable std::atomic<uint64_t> damaged_reads_{0};
  mutable Mutex mu_;
  // A plain readdir stops when the kernel's 4 KiB buffer is full and resumes at the next child
  // in the next call. Remembering that child's name saves an entry lookup per resume.
  struct ReaddirResume {
    uint64_t dir = 0, start = 0;
    std::string name;
  };
  static constexpr size_t kResumeSlots = 64;
  mutable std::vector<ReaddirResume> resume_ GUARDED_BY(mu_){kResumeSlots};  // by dir % slots
  mutable std::set<std::pair<uint32_t, uint32_t>> damaged_logged_ GUARDED_BY(mu_);
  mutable std::set<uint32_t> record_problem_logged_ GUARDED_BY(mu_);
  mutable std::atomic<bool> store_change_logged_{false};
  // Hinted files (hint_queue()), and what wakes their consumer while the scheduler has enough
  // queued: a speculative read that finished (the scheduler's OnArrived) or the end. Declared
  // before scheduler_, whose pool signals hint_room_ until it is joined.
  mutable HintQueue hints_;
  Mutex hint_mu_;
  CondVar hint_room_;
  bool hint_stop_ GUARDED_BY(hint_mu_) = false;
  // Pushes planned files once the scheduler has read their pieces. Its thread reads the
  // record files (store_ keeps them open): declared after store_, before scheduler_, whose
  // pool calls it.
  // Not with form=baseline: it pushes stored bytes, which are not a JPEG's served bytes.
  mutable PagePusher pusher_{
      {options_.readdirplus != ReaddirPlus::kNever && options_.form == ServedForm::kProgressive
           ? options_.push_bytes
           : 0},
      options_.push};
  // Every read of a record goes through scheduler_ (demand reads in GetBlock, speculative
  // ones from predictor_). Declared after store_: destroyed first, its threads joined while
  // the record files are still open.
  mutable RecordScheduler scheduler_{
      [this](const SpeculationSource& f, uint64_t offset, uint64_t end) {
        pusher_.Arrived(&f, offset, end);
        hint_room_.SignalAll();
      },
      options_.speculation_memory};
  mutable ReadPredictor predictor_{
      *store_, scheduler_, {options_.prefetch_percent, options_.readahead_slots}, &pusher_};
  // FillLevel's thread; declared last, so it stops before anything it uses goes.
  std::jthread fill_;
  std::thread hint_consumer_;  // joined by ~Filesystem()
};

}  // namespace pcrfs::fs
