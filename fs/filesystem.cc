#include "fs/filesystem.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "codec/baseline.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "fs/planned_files.h"
#include "index/level_plan.h"
#include "index/level_walk.h"
#include "index/record_reader.h"

namespace pcrfs::fs {
namespace {

Status Errno(int err, std::string_view what) { return Status::FromErrno(what, err); }

constexpr char kXattrPrefix[] = "user.pcrfs.";
const char* const kFileXattrs[] = {"level", "full_size", "source_size", "passthrough",
                                   "passthrough_reason"};

// user.pcrfs.baseline's disk tier: ",\"disk\":{...}" (empty without one).
std::string DiskJson(const BaselineCache::Stats& b) {
  if (!b.disk) return "";
  const BaselineDiskCache::Stats& d = b.disk_stats;
  return ",\"disk\":{\"files\":" + std::to_string(d.files) +
         ",\"bytes\":" + std::to_string(d.bytes) + ",\"budget\":" + std::to_string(d.budget) +
         ",\"adopted\":" + std::to_string(d.adopted) + ",\"hits\":" + std::to_string(d.hits) +
         ",\"misses\":" + std::to_string(d.misses) + ",\"damaged\":" + std::to_string(d.damaged) +
         ",\"written\":" + std::to_string(d.written) +
         ",\"written_bytes\":" + std::to_string(d.written_bytes) +
         ",\"evicted_files\":" + std::to_string(d.evicted_files) +
         ",\"evicted_segments\":" + std::to_string(d.evicted_segments) + "}";
}

void SetTimes(struct stat* st, int64_t sec, uint32_t nsec) {
  st->st_mtim.tv_sec = sec;
  st->st_mtim.tv_nsec = nsec;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

}  // namespace

Filesystem::Filesystem(std::unique_ptr<index::Store> store, FsOptions options)
    : store_(std::move(store)),
      options_(options),
      cache_(PieceCacheBytes(options) - LargeFileCacheBytes(PieceCacheBytes(options))),
      large_cache_(LargeFileCacheBytes(PieceCacheBytes(options))) {
  if (options.form == ServedForm::kBaseline) {
    std::unique_ptr<BaselineDiskCache> disk;
    if (!options.baseline_disk_dir.empty() && options.baseline_disk_bytes > 0) {
      std::string note;
      auto opened =
          BaselineDiskCache::Open(options.baseline_disk_dir, options.baseline_disk_bytes, &note);
      if (!opened) {
        Log(LogLevel::kWarning, opened.error().message() + " (baseline files kept in memory only)");
      } else {
        disk = std::move(*opened);
      }
      if (!note.empty()) Log(LogLevel::kWarning, note);
    }
    baseline_ = std::make_unique<BaselineCache>(options.cache_bytes / 4, kBaselineSizeSlots,
                                                std::move(disk));
  }
  auto root = store_->index().Get(index::kRootIno);
  if (root) root_ = std::move(*root);
  if (options.hints) hint_consumer_ = std::thread([this] { ConsumeHints(); });
}

Filesystem::~Filesystem() {
  hints_.Close();
  {
    MutexLock l(&hint_mu_);
    hint_stop_ = true;
  }
  hint_room_.SignalAll();
  if (hint_consumer_.joinable()) hint_consumer_.join();
}

void Filesystem::ConsumeHints() {
  NameThisThread("pcrfs-hinted");
  // How long the consumer waits for an arrival before it looks at the scheduler again: the
  // queued bytes also shrink when a reader's read takes a queued range (promotion), which
  // signals nothing.
  constexpr auto kRecheck = std::chrono::milliseconds(20);
  for (;;) {
    // A remote store's hinted files are fetched here, not by the scheduler, whose own
    // speculation waits while they are queued: the cache's room for bytes fetched ahead is
    // theirs.
    if (hints_.size() == 0) SetHinting(false);
    if (!hints_.WaitNonEmpty()) break;
    if (hinted_remote_ != nullptr) SetHinting(true);
    // Through the scheduler (a local store): taken only once it has room, so that a file read
    // meanwhile is dropped from the hint queue (NoteRead) instead of being fetched after its
    // read.
    while (hinted_remote_ == nullptr && scheduler_.stats().queued_bytes >= HintAheadBytes()) {
      MutexLock l(&hint_mu_);
      if (hint_stop_) return;
      hint_room_.WaitFor(&hint_mu_, kRecheck);
    }
    if (hinted_remote_ != nullptr) {
      // A remote store's cache with no room for the next file's bytes: wait until readers read
      // what is fetched ahead (its room is the whole store's, whichever record asks); then a
      // little longer for a quarter of the share, so that a batch shares records.
      if (!WaitForHintRoom(kHintMinRoom, std::chrono::steady_clock::time_point::max()) ||
          !WaitForHintRoom(hinted_remote_->AheadShare() / 4,
                           std::chrono::steady_clock::now() + kHintCoalesce)) {
        return;
      }
      FetchHintedBatch();
      continue;
    }
    const std::optional<uint64_t> ino = hints_.TryPop();
    if (!ino) continue;  // read, or reset, meanwhile
    const NodeId id = FromFuseIno(*ino);
    auto e = store_->index().Get(id.store_ino);
    if (!e) continue;  // a damaged index: reads report it
    if (FetchHinted(*e, id.level)) continue;
    // One file per Queue: its pieces go behind the previous hinted file's, in the readers'
    // order (the scheduler's queue is first in first out).
    PlannedFiles plan(*store_, &pusher_);
    if (plan.Add(std::move(*e), id.level)) plan.Queue(scheduler_);
  }
}

void Filesystem::SetHinting(bool on) {
  scheduler_.Yield(on);
  if (hinted_remote_ != nullptr) hinted_remote_->SetOrderKnown(on);
}

bool Filesystem::WaitForHintRoom(uint64_t bytes, std::chrono::steady_clock::time_point until) {
  while (hinted_remote_->AheadRoom() < bytes && std::chrono::steady_clock::now() < until) {
    MutexLock l(&hint_mu_);
    if (hint_stop_) return false;
    hint_room_.WaitFor(&hint_mu_, kRoomRecheck);
  }
  return true;
}

bool Filesystem::FetchHinted(index::Entry e, int level) {
  if (e.is_dir()) return true;
  auto file = OpenRecord(e.record);
  if (!file) return true;  // reported when the file is read
  const std::shared_ptr<const SpeculationSource> source = file->shared_speculation();
  // A source that keeps nothing, or a disk's page cache: the scheduler's speculative reads.
  if (!source || source->ConcurrentSpeculativeReads() == 0) return false;
  const bool first = hinted_remote_ == nullptr;
  hinted_remote_ = source;
  if (first) SetHinting(true);
  if (!store_->ResolvePieces(&e, level).ok()) return true;  // a read of it reports the damage
  const index::LevelPlan plan(e.kind, e.pieces, level, 0, e.SizeAtLevel(level));
  // Every piece at once, as a reader's own read would (one round trip), each fetched only
  // with room to keep it until it is read (PrefetchAhead); without room, wait for the readers.
  // Many files are in flight together: what bounds them is the cache's room, not a thread
  // per request (12 speculative reads at a time would hold a level-5 epoch to ~120 files/s
  // over a 20 ms link). With room for all of them, they go together (one multi-range GET from
  // a web server); else piece by piece as room frees.
  std::vector<SpeculationSource::Span> pieces;
  for (const index::LevelSpan& span : plan.spans()) {
    pieces.push_back({span.piece.offset, span.piece.length});
  }
  if (source->PrefetchAheadAll(pieces)) {
    hinted_fetched_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  for (const index::LevelSpan& span : plan.spans()) {
    // A piece that never fits (larger than the room the cache has at most) is left to its
    // reader after a while.
    for (int waits = 0; !source->PrefetchAhead(span.piece.offset, span.piece.length);) {
      if (source->AheadRoom() >= span.piece.length) continue;  // freed meanwhile
      if (++waits > kMaxRoomWaits) break;
      MutexLock l(&hint_mu_);
      if (hint_stop_) return true;
      hint_room_.WaitFor(&hint_mu_, kRoomRecheck);
    }
  }
  hinted_fetched_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Filesystem::FetchHintedBatch() {
  struct Hinted {
    index::Entry entry;
    int level;
  };
  // One group per record, in the order of each record's first hinted file: the files the
  // readers want first are asked for first (a batch's GETs may wait for connections).
  std::vector<std::pair<uint32_t, std::vector<Hinted>>> by_record;
  std::map<uint32_t, size_t> group_of;
  const uint64_t room = hinted_remote_->AheadRoom();
  uint64_t planned = 0;
  for (size_t taken = 0; taken < kHintBatchFiles && planned < room;) {
    const std::optional<uint64_t> ino = hints_.TryPop();
    if (!ino) break;  // none left (or all read meanwhile)
    const NodeId id = FromFuseIno(*ino);
    auto e = store_->index().Get(id.store_ino);
    if (!e || e->is_dir()) continue;  // a damaged index: reads report it
    ++taken;
    planned += e->SizeAtLevel(id.level);
    const auto [g, added] = group_of.try_emplace(e->record, by_record.size());
    if (added) by_record.emplace_back(e->record, std::vector<Hinted>{});
    by_record[g->second].second.push_back({std::move(*e), id.level});
  }
  for (auto& [record, files] : by_record) {
    auto file = OpenRecord(record);
    if (!file) continue;  // reported when its files are read
    const std::shared_ptr<const SpeculationSource> source = file->shared_speculation();
    if (!source || source->ConcurrentSpeculativeReads() == 0) {
      for (Hinted& h : files) {
        PlannedFiles plan(*store_, &pusher_);
        if (plan.Add(std::move(h.entry), h.level)) plan.Queue(scheduler_);
      }
      continue;
    }
    std::vector<SpeculationSource::Span> pieces;
    uint64_t resolved = 0;  // files whose pieces are asked for (the others' reads report them)
    for (const Hinted& h : files) {
      index::Entry e = h.entry;
      if (!store_->ResolvePieces(&e, h.level).ok()) continue;  // its read reports the damage
      ++resolved;
      const index::LevelPlan plan(e.kind, e.pieces, h.level, 0, e.SizeAtLevel(h.level));
      for (const index::LevelSpan& span : plan.spans()) {
        pieces.push_back({span.piece.offset, span.piece.length});
      }
    }
    if (source->PrefetchAheadAll(pieces)) {
      hinted_fetched_.fetch_add(resolved, std::memory_order_relaxed);
      continue;
    }
    for (Hinted& h : files) FetchHinted(std::move(h.entry), h.level);  // as room frees
  }
}

void Filesystem::FillLevel(int level) {
  level = std::clamp(level, 1, index::kNumGroups);
  fill_ = std::jthread([this, level](std::stop_token stop) {
    NameThisThread("pcrfs-fill");
    const uint64_t records = store_->index().NumRecords();
    uint64_t queued = 0;
    for (uint64_t id = 0; id < records && !stop.stop_requested(); ++id) {
      auto info = store_->index().GetRecord(static_cast<uint32_t>(id));
      if (!info) continue;
      auto file = OpenRecord(static_cast<uint32_t>(id));
      if (!file) continue;  // reported when a file of it is read
      // The level's prefix: RecordBytesAtLevel less the footer, which opening the record read.
      const uint64_t end = index::RecordBytesAtLevel(*info, level) - index::kRecordFooterSize;
      scheduler_.Speculate(*file, {{0, end}});
      queued += end;
    }
    Log(LogLevel::kInfo, "disk_cache_fill: level " + std::to_string(level) + " of " +
                             std::to_string(records) + " records queued (" +
                             std::to_string(queued >> 20) + " MiB)");
  });
}

Result<Filesystem::Resolved> Filesystem::Resolve(uint64_t ino) const {
  Resolved r;
  if (ino == kFuseRootIno) {
    if (options_.fixed_level == 0) {
      r.ladder_root = true;
      r.entry = root_;
      return r;
    }
    r.level = options_.fixed_level;
    r.entry = root_;
    return r;
  }
  const NodeId id = FromFuseIno(ino);
  if (id.level < 1 || id.level > index::kNumGroups ||
      (options_.fixed_level != 0 && id.level != options_.fixed_level)) {
    return Err(Errno(ENOENT, "inode " + std::to_string(ino)));
  }
  auto e = store_->index().Get(id.store_ino);
  if (!e) return Err(e.error().IsNotFound() ? Errno(ENOENT, "inode") : e.error());
  r.level = id.level;
  r.entry = std::move(*e);
  return r;
}

struct stat Filesystem::EntryAttr(const index::Entry& e, int level) const {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  st.st_ino = (e.ino == index::kRootIno && options_.fixed_level != 0) ? kFuseRootIno
                                                                      : ToFuseIno(e.ino, level);
  st.st_uid = options_.uid;
  st.st_gid = options_.gid;
  st.st_blksize = kBlockSize;
  if (e.is_dir()) {
    st.st_mode = S_IFDIR | 0755;
    st.st_nlink = 2 + e.num_subdirs;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(e.SizeAtLevel(level));
    st.st_blocks = (st.st_size + 511) / 512;
  }
  SetTimes(&st, e.mtime_sec, e.mtime_nsec);
  return st;
}

struct stat Filesystem::LadderRootAttr() const {
  struct stat st;
  std::memset(&st, 0, sizeof st);
  st.st_ino = kFuseRootIno;
  st.st_mode = S_IFDIR | 0755;
  st.st_nlink = 2 + index::kNumGroups;
  st.st_uid = options_.uid;
  st.st_gid = options_.gid;
  st.st_blksize = kBlockSize;
  SetTimes(&st, root_.mtime_sec, root_.mtime_nsec);
  return st;
}

Result<struct stat> Filesystem::Attr(const index::Entry& e, int level) const {
  struct stat st = EntryAttr(e, level);
  if (!ServesBaseline(e)) return st;
  std::optional<uint64_t> size = baseline_->Size(st.st_ino);
  if (!size) {
    auto bytes = BaselineBytes(e, level);
    if (!bytes) return Err(bytes.error());
    size = (*bytes)->size();
  }
  st.st_size = static_cast<off_t>(*size);
  st.st_blocks = (st.st_size + 511) / 512;
  return st;
}

Result<BaselineCache::Bytes> Filesystem::BaselineBytes(const index::Entry& e, int level) const {
  return baseline_->GetOrLoad(ToFuseIno(e.ino, level), [&]() -> Result<BaselineCache::Bytes> {
    std::vector<uint8_t> stored(e.SizeAtLevel(level));
    auto n = ReadStored(e, level, 0, stored.size(), stored.data(), nullptr);
    if (!n) return Err(n.error());  // reported
    reencode_slots_.acquire();
    struct Release {
      std::counting_semaphore<256>& slots;
      ~Release() { slots.release(); }
    } release{reencode_slots_};
    auto baseline = codec::ToBaseline(std::span<const uint8_t>(stored.data(), *n));
    if (!baseline) {
      // The bytes passed their checksums, so this is a bug or a file libjpeg cannot re-encode.
      Status s = Status::IOError("baseline form: " + baseline.error().message(), EIO);
      return Err(ReportDamage(e, level, s));
    }
    return std::make_shared<const std::vector<uint8_t>>(std::move(*baseline));
  });
}

Result<struct stat> Filesystem::GetAttr(uint64_t ino) const {
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  if (r->ladder_root) return LadderRootAttr();
  return Attr(r->entry, r->level);
}

Status Filesystem::Open(uint64_t ino, int flags) const {
  if ((flags & O_ACCMODE) != O_RDONLY) return Errno(EROFS, "open");
  auto st = GetAttr(ino);
  if (!st) return st.error();
  if (S_ISDIR(st->st_mode)) return Errno(EISDIR, "open");
  return Status::OK();
}

Status Filesystem::OpenDir(uint64_t ino) const {
  auto st = GetAttr(ino);
  if (!st) return st.error();
  if (!S_ISDIR(st->st_mode)) return Errno(ENOTDIR, "opendir");
  return Status::OK();
}

Status ForEachPathComponent(std::string_view path,
                            const std::function<Status(std::string_view)>& fn) {
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    const std::string_view name = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (name.empty() || name == ".") continue;
    if (name == "..") return Errno(EINVAL, path);
    PCRFS_RETURN_IF_ERROR(fn(name));
  }
  return Status::OK();
}

Result<uint64_t> Filesystem::LookupPath(std::string_view path) const {
  int level = options_.fixed_level;  // 0: the ladder, whose first component says it
  uint64_t ino = index::kRootIno;
  PCRFS_RETURN_ERR_IF_ERROR(ForEachPathComponent(path, [&](std::string_view name) -> Status {
    if (level == 0) {
      for (int k = 1; k <= index::kNumGroups && level == 0; ++k) {
        if (name == "scan" + std::to_string(k)) level = k;
      }
      return level == 0 ? Errno(ENOENT, path) : Status::OK();
    }
    auto child = store_->index().Lookup(ino, name);
    if (!child) return child.error().IsNotFound() ? Errno(ENOENT, path) : child.error();
    ino = *child;
    return Status::OK();
  }));
  if (level == 0 || ino == index::kRootIno) return Err(Errno(EISDIR, path));
  auto e = store_->index().Get(ino);
  if (!e) return Err(e.error().IsNotFound() ? Errno(ENOENT, path) : e.error());
  if (e->is_dir()) return Err(Errno(EISDIR, path));
  return ToFuseIno(ino, level);
}

Result<struct stat> Filesystem::Lookup(uint64_t parent, std::string_view name) const {
  auto r = Resolve(parent);
  if (!r) return Err(r.error());
  if (r->ladder_root) {
    for (int k = 1; k <= index::kNumGroups; ++k) {
      if (name == "scan" + std::to_string(k)) return EntryAttr(root_, k);
    }
    return Err(Errno(ENOENT, name));
  }
  if (!r->entry.is_dir()) return Err(Errno(ENOTDIR, name));
  auto child = store_->index().Lookup(r->entry.ino, name);
  if (!child) return Err(child.error().IsNotFound() ? Errno(ENOENT, name) : child.error());
  auto e = store_->index().Get(*child);
  if (!e) return Err(e.error());
  return Attr(*e, r->level);
}

Status Filesystem::ReadDir(uint64_t ino, uint64_t offset, const DirFiller& fn, bool attrs) const {
  auto r = Resolve(ino);
  if (!r) return r.error();
  if (!r->ladder_root && !r->entry.is_dir()) return Errno(ENOTDIR, "readdir");
  // Offsets: 0 = start, 1 = after ".", 2 = after "..", 2 + i + 1 = after child i.
  struct stat self = r->ladder_root ? LadderRootAttr() : EntryAttr(r->entry, r->level);
  if (offset == 0 && !fn(".", self, 1)) return Status::OK();
  if (offset <= 1) {
    struct stat parent = self;  // the kernel fills in the real ".." itself
    if (!fn("..", parent, 2)) return Status::OK();
  }
  const uint64_t start = offset <= 2 ? 0 : offset - 2;
  if (r->ladder_root) {
    for (uint64_t i = start; i < index::kNumGroups; ++i) {
      const int k = static_cast<int>(i) + 1;
      if (!fn("scan" + std::to_string(k), EntryAttr(root_, k), 2 + i + 1)) break;
    }
    return Status::OK();
  }
  uint64_t i = start;
  const int level = r->level;
  if (attrs) {
    return store_->index().List(r->entry, start, [&](const index::Entry& child) {
      struct stat st = EntryAttr(child, level);
      if (ServesBaseline(child)) {
        // Its size only if known: a listing transcodes nothing.
        std::optional<uint64_t> size = baseline_->Size(st.st_ino);
        if (size) {
          st.st_size = static_cast<off_t>(*size);
          st.st_blocks = (st.st_size + 511) / 512;
        } else {
          const ino_t ino = st.st_ino;
          std::memset(&st, 0, sizeof st);
          st.st_ino = ino;
          st.st_mode = S_IFREG;
        }
      }
      return fn(child.name, st, 2 + ++i);
    });
  }
  const size_t slot = r->entry.ino % kResumeSlots;
  std::string hint;
  if (start > 0) {
    MutexLock l(&mu_);
    const ReaddirResume& resume = resume_[slot];
    if (resume.dir == r->entry.ino && resume.start == start) hint = resume.name;
  }
  struct stat st;
  std::memset(&st, 0, sizeof st);
  Status s = store_->index().ListNames(
      r->entry, start, hint, [&](const index::IndexReader::DirEntry& child) {
        st.st_ino = ToFuseIno(child.ino, level);
        st.st_mode = child.kind == index::EntryKind::kDirectory ? S_IFDIR : S_IFREG;
        if (fn(child.name, st, 3 + i)) {
          ++i;
          return true;
        }
        MutexLock l(&mu_);
        resume_[slot] = {r->entry.ino, i, std::string(child.name)};
        return false;
      });
  return s;
}

std::string Filesystem::PathOf(const index::Entry& e) const {
  std::vector<std::string> parts{e.name};
  uint64_t parent = e.parent;
  // Bounded: a damaged index cannot make this loop forever.
  for (int depth = 0; parent != index::kRootIno && depth < 4096; ++depth) {
    auto p = store_->index().Get(parent);
    if (!p) {
      parts.push_back("<inode " + std::to_string(parent) + ">");
      break;
    }
    parts.push_back(p->name);
    parent = p->parent;
  }
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path.push_back('/');
    path += *it;
  }
  return path;
}

Status Filesystem::ReportDamage(const index::Entry& e, int level, const Status& s) const {
  damaged_reads_.fetch_add(1, std::memory_order_relaxed);
  const std::string record = store_->dir() + "/" + index::RecordFileName(e.record);
  std::string line = "damaged data: " + record + ": \"" + PathOf(e) + "\" (level " +
                     std::to_string(level) + "): " + s.message();
  bool first;
  {
    MutexLock l(&mu_);
    first = damaged_logged_.insert({e.record, e.slot}).second;
  }
  if (first) Log(LogLevel::kError, line);
  return s.IsCorruption() ? Status::Corruption(std::move(line))
                          : Status::IOError(std::move(line), s.sys_errno());
}

void Filesystem::ReportRecordProblem(uint32_t record, const Status& s) const {
  {
    MutexLock l(&mu_);
    if (!record_problem_logged_.insert(record).second) return;
  }
  Log(LogLevel::kWarning, "damaged record: " + s.message() +
                              " (serving only pieces whose checksums match the index; run pcr "
                              "verify)");
}

namespace {
// Damage, reported: what the bytes showed (Corruption) or a local read error (EIO: a bad
// sector). A timeout, a 503 or a refused request (a remote store's: ETIMEDOUT, EACCES, none)
// is the network's: the read fails with EIO all the same, nothing is counted or logged.
bool IsDamage(const Status& s) {
  return s.IsCorruption() || (s.code() == Status::Code::kIOError && s.sys_errno() == EIO);
}
}  // namespace

void Filesystem::ReportStoreChanged(const Status& s) const {
  if (store_change_logged_.exchange(true)) return;
  Log(LogLevel::kError, "store changed under the mount: " + s.message() +
                            "; files whose records this mount had opened are still served");
}

Result<SourceFile> Filesystem::OpenRecord(uint32_t record) const {
  Status header;
  auto file = store_->OpenRecord(record, &header);
  if (!file && file.error().code() == Status::Code::kIOError &&
      file.error().sys_errno() == ESTALE) {
    ReportStoreChanged(file.error());
  }
  if (file && !header.ok()) ReportRecordProblem(record, header);
  return file;
}

Result<PieceBytes> Filesystem::GetBlock(const SourceFile& file, const index::Entry& e, int group,
                                        uint64_t block, bool keep) const {
  const PieceKey key{e.record, e.slot, static_cast<uint32_t>(group), block};
  const index::PieceRef& ref = e.pieces[static_cast<size_t>(group - 1)];
  PieceCache& cache = index::HasBlockCrcs(ref.length) ? large_cache_ : cache_;
  return cache.GetOrLoad(key, keep, [&]() -> Result<PieceBytes> {
    if (index::HasBlockCrcs(ref.length) && block + 1 < index::NumChecksumBlocks(ref.length) &&
        block > 0 && cache.Contains({e.record, e.slot, static_cast<uint32_t>(group), block - 1})) {
      // A large file read in order: ask for the next blocks while this one is read and checked.
      const uint64_t next = ref.offset + (block + 1) * index::kChecksumBlockSize;
      scheduler_.WillRead(file, {{next, std::min(kSequentialBlocksAhead * index::kChecksumBlockSize,
                                                 ref.offset + ref.length - next)}});
    }
    auto bytes = std::make_shared<BlockBytes>(
        static_cast<size_t>(index::ChecksumBlockLength(ref.length, block)));
    // Bytes the page cache holds are copied without waiting, and are no work for the device:
    // such a read is counted, not timed as a demand read (its time says nothing of the
    // source's latency or congestion). Anything else, a damaged copy included, takes the
    // demand path. (Only a source with one queue: a remote one has its own cache, which its
    // Read serves without a request.)
    const SpeculationSource* source = file.speculation();
    if (source != nullptr && source->ConcurrentSpeculativeReads() == 0 &&
        source->ReadCached(ref.offset + block * index::kChecksumBlockSize, bytes->size(),
                           bytes->data())) {
      auto crc = store_->BlockCrc(e, group, block);
      if (crc && crc32c::Mask(crc32c::Value(bytes->data(), bytes->size())) == *crc) {
        scheduler_.NoteCacheHit(bytes->size());
        return PieceBytes(std::move(bytes));
      }
    }
    Status s = scheduler_.Demand(file, bytes->size(), [&] {
      return store_->ReadBlock(file, e, group, block, bytes->data());
    });
    // Damage stays as it is (EIO to the reader); anything else is an IOError without errno
    // (EIO to the reader, a 404 no ENOENT, and no damage: IsDamage).
    if (!s.ok()) return Err(IsDamage(s) ? s : Status::IOError(s.message()));
    return PieceBytes(std::move(bytes));
  });
}

Result<size_t> Filesystem::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const {
  // Before the read, which may plan this very file (ReadPredictor).
  const bool pushed_before = pusher_.Forget(ino) > 0;
  int level = 0;
  uint64_t scaled = 0;
  auto n = ReadUncounted(ino, offset, size, dst, &level, &scaled);
  if (n && *n > 0 && level >= 1 && level <= index::kNumGroups) {
    // Bytes a push of this file counted already are not counted again (level_counters).
    // (A push that ends after Forget is not counted: it sees the READ in its recent files.)
    const uint64_t pushed = pushed_before ? pusher_.CountedByPush(ino, *n) : 0;
    if (pushed == *n) return n;
    const uint64_t bytes = *n - pushed;
    if (pushed > 0) {
      scaled = static_cast<uint64_t>(static_cast<unsigned __int128>(scaled) * bytes / *n);
    }
    const auto i = static_cast<size_t>(level - 1);
    served_.bytes[i].fetch_add(bytes, std::memory_order_relaxed);
    served_.source_bytes[i].fetch_add(scaled, std::memory_order_relaxed);
    if (scaled > bytes) served_.saved_bytes[i].fetch_add(scaled - bytes, std::memory_order_relaxed);
    if (offset == 0 && pushed == 0) served_.files[i].fetch_add(1, std::memory_order_relaxed);
  }
  return n;
}

uint64_t Filesystem::bytes_served() const {
  uint64_t total = 0;
  for (const auto& b : served_.bytes) total += b.load(std::memory_order_relaxed);
  return total;
}

Filesystem::LevelCounters Filesystem::level_counters() const {
  LevelCounters c;
  for (size_t i = 0; i < c.bytes.size(); ++i) {
    c.bytes[i] = served_.bytes[i].load(std::memory_order_relaxed);
    c.files[i] = served_.files[i].load(std::memory_order_relaxed);
    c.source_bytes[i] = served_.source_bytes[i].load(std::memory_order_relaxed);
    c.saved_bytes[i] = served_.saved_bytes[i].load(std::memory_order_relaxed);
  }
  // Files pushed into the page cache left the daemon as READ replies do (a reader then finds
  // them there without asking): counted the same way, by level.
  const PagePusher::Stats pushed = pusher_.stats();
  for (size_t i = 0; i < c.bytes.size(); ++i) {
    c.bytes[i] += pushed.bytes_by_level[i];
    c.files[i] += pushed.files_by_level[i];
    c.source_bytes[i] += pushed.source_bytes_by_level[i];
    if (pushed.source_bytes_by_level[i] > pushed.bytes_by_level[i]) {
      c.saved_bytes[i] += pushed.source_bytes_by_level[i] - pushed.bytes_by_level[i];
    }
  }
  return c;
}

uint64_t Filesystem::damaged_files() const {
  MutexLock l(&mu_);
  return damaged_logged_.size();
}

Result<size_t> Filesystem::ReadUncounted(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst,
                                         int* level, uint64_t* source_bytes) const {
  auto resolved = Resolve(ino);
  if (!resolved) return Err(resolved.error());
  const Resolved& r = *resolved;
  if (r.ladder_root || r.entry.is_dir()) return Err(Errno(EISDIR, "read"));
  *level = r.level;
  if (!ServesBaseline(r.entry)) {
    return ReadStored(r.entry, r.level, offset, size, dst, source_bytes);
  }
  auto bytes = BaselineBytes(r.entry, r.level);
  if (!bytes) return Err(bytes.error());
  const std::vector<uint8_t>& file = **bytes;
  if (offset >= file.size()) return size_t{0};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, file.size() - offset));
  std::memcpy(dst, file.data() + offset, n);
  *source_bytes =
      static_cast<uint64_t>(static_cast<unsigned __int128>(n) * r.entry.source_size / file.size());
  // Read whole in one request: the kernel's page cache has it now.
  if (offset == 0 && n == file.size()) baseline_->Drop(ino);
  return n;
}

Result<size_t> Filesystem::ReadStored(const index::Entry& entry, int level, uint64_t offset,
                                      size_t size, uint8_t* dst, uint64_t* source_bytes) const {
  index::Entry e = entry;
  if (index::LevelPlan(e.kind, e.pieces, level, offset, size).empty()) return size_t{0};
  // The pieces of one file lie in different group regions. Ask for all of them at once, so a
  // cold read waits for the slowest piece instead of the sum of all.
  auto file = OpenRecord(e.record);
  if (!file) {
    if (IsDamage(file.error())) return Err(ReportDamage(e, level, file.error()));
    return Err(Status::IOError(file.error().message(), EIO));
  }
  // A format 4 index holds piece lengths only: offsets and CRCs come from the record's table.
  if (Status s = store_->ResolvePieces(&e, level); !s.ok()) {
    if (IsDamage(s)) return Err(ReportDamage(e, level, s));
    return Err(Status::IOError(s.message(), EIO));
  }
  // Which pieces, which parts of them, and which bytes of the tail (index/level_plan.h).
  const index::LevelPlan plan(e.kind, e.pieces, level, offset, size);
  const bool whole_file = plan.offset() == 0 && plan.end() == plan.file_size();
  // A hinted file's read says nothing the hints did not: the predictor guesses only from the
  // others (and the hint of a file read before its turn is dropped).
  if (!hints_.NoteRead(ToFuseIno(e.ino, level))) predictor_.OnRead(e, level);
  // Several pieces: fetched at once. One piece from a remote store (level 1): its fetch may
  // take a window of a queued speculative range with it (RecordScheduler::WillRead).
  const SpeculationSource* source = file->speculation();
  if (plan.pieces_used() > 1 ||
      (plan.pieces_used() == 1 && source != nullptr && source->ConcurrentSpeculativeReads() > 0)) {
    std::vector<RecordScheduler::Range> wanted;
    for (const index::LevelSpan& s : plan.spans()) {
      const uint64_t block = s.first_block();
      const PieceCache& cache = index::HasBlockCrcs(s.piece.length) ? large_cache_ : cache_;
      if (!cache.Contains({e.record, e.slot, static_cast<uint32_t>(s.group), block})) {
        // The checksum blocks this request needs of this piece, not the whole piece.
        const uint64_t begin = block * index::kChecksumBlockSize;
        const uint64_t stop = std::min(s.piece.length, s.end_block() * index::kChecksumBlockSize);
        wanted.push_back({s.piece.offset + begin, stop - begin});
      }
    }
    scheduler_.WillRead(*file, wanted,
                        plan.pieces_used() == 1 || options_.windows_for_several_pieces);
  }

  PieceBytes held;  // the block being copied (index/level_walk.h)
  Status walked = index::WalkLevel(
      plan,
      [&](const index::LevelSpan& s, uint64_t b) -> Result<std::span<const uint8_t>> {
        auto block = GetBlock(*file, e, s.group, b, !whole_file);
        if (!block) return Err(block.error());
        held = std::move(*block);
        return std::span<const uint8_t>(held->data(), held->size());
      },
      [&](uint64_t at, std::span<const uint8_t> bytes) {
        std::memcpy(dst + (at - plan.offset()), bytes.data(), bytes.size());
        return Status::OK();
      });
  if (!walked.ok()) {
    if (IsDamage(walked)) return Err(ReportDamage(e, level, walked));
    return Err(walked);
  }
  if (source_bytes != nullptr) {
    *source_bytes = plan.length();
    if (plan.file_size() > 0 && e.kind != index::EntryKind::kPassthrough) {
      *source_bytes = static_cast<uint64_t>(static_cast<unsigned __int128>(plan.length()) *
                                            e.source_size / plan.file_size());
    }
  }
  return static_cast<size_t>(plan.length());
}

Result<std::string> Filesystem::GetXattr(uint64_t ino, std::string_view name) const {
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  // Only user.* names exist here. For the other namespaces (security.selinux,
  // system.posix_acl_access, trusted.*) "not supported" is the truthful answer, and it is the
  // one that makes GNU ls stop asking: it remembers ENOTSUP per device, whereas ENODATA cost
  // two FUSE round trips per file of every `ls -l`.
  if (name.substr(0, 5) != "user.") return Err(Errno(ENOTSUP, name));
  if (name.substr(0, sizeof(kXattrPrefix) - 1) != kXattrPrefix) {
    return Err(Errno(ENODATA, name));
  }
  const std::string_view key = name.substr(sizeof(kXattrPrefix) - 1);
  const int level = r->ladder_root ? 0 : r->level;
  if (key == "remote" && ino == kFuseRootIno && options_.remote_stats) {
    // Pushed bytes are apart: the daemon never learns whether the kernel's readers took them.
    return "{\"bytes_served\":" + std::to_string(bytes_served()) +
           ",\"bytes_pushed\":" + std::to_string(pusher_.stats().pushed_bytes) +
           ",\"client\":" + options_.remote_stats() + "}";
  }
  if (key == "baseline" && ino == kFuseRootIno && baseline_) {
    const BaselineCache::Stats b = baseline_->stats();
    return "{\"transcoded\":" + std::to_string(b.transcoded) +
           ",\"failed\":" + std::to_string(b.failed) +
           ",\"transcoded_bytes\":" + std::to_string(b.transcoded_bytes) +
           ",\"hits\":" + std::to_string(b.hits) + ",\"size_hits\":" + std::to_string(b.size_hits) +
           ",\"evictions\":" + std::to_string(b.evictions) + ",\"used\":" + std::to_string(b.used) +
           ",\"capacity\":" + std::to_string(b.capacity) + DiskJson(b) + "}";
  }
  if (key == "metrics" && ino == kFuseRootIno && options_.metrics_text) {
    return options_.metrics_text(*this);
  }
  if (key == "hint_socket" && ino == kFuseRootIno && !options_.hint_socket.empty()) {
    return options_.hint_socket;
  }
  if (key == "hints" && ino == kFuseRootIno && options_.hints) {
    const HintQueue::Stats h = hints_.stats();
    std::string json = h.ToJson();
    json.insert(json.size() - 1,
                ",\"ahead_bytes\":" + std::to_string(HintAheadBytes()) + ",\"fetched_ahead\":" +
                    std::to_string(hinted_fetched_.load(std::memory_order_relaxed)));
    return json;
  }
  if (key == "prefetch" && ino == kFuseRootIno) {
    if (!predictor_.enabled()) return std::string("off (-o prefetch=0,readahead=0)");
    return scheduler_.Describe() + "; " + pusher_.Describe();
  }
  if (key == "level") {
    if (level == 0) return Err(Errno(ENODATA, name));
    return std::to_string(level);
  }
  if (r->ladder_root || r->entry.is_dir()) return Err(Errno(ENODATA, name));
  const index::Entry& e = r->entry;
  const bool passthrough = e.kind == index::EntryKind::kPassthrough;
  if (key == "full_size") return std::to_string(e.SizeAtLevel(index::kNumGroups));
  if (key == "source_size") return std::to_string(e.source_size);
  if (key == "passthrough") return std::string(passthrough ? "1" : "0");
  if (key == "passthrough_reason" && passthrough) {
    return index::PassthroughReasonName(e.passthrough_reason);
  }
  return Err(Errno(ENODATA, name));
}

Result<std::vector<std::string>> Filesystem::ListXattr(uint64_t ino) const {
  auto r = Resolve(ino);
  if (!r) return Err(r.error());
  std::vector<std::string> names;
  if (ino == kFuseRootIno) names.push_back(std::string(kXattrPrefix) + "prefetch");
  if (ino == kFuseRootIno && baseline_) names.push_back(std::string(kXattrPrefix) + "baseline");
  if (ino == kFuseRootIno && options_.remote_stats) {
    names.push_back(std::string(kXattrPrefix) + "remote");
  }
  if (ino == kFuseRootIno && options_.metrics_text) {
    names.push_back(std::string(kXattrPrefix) + "metrics");
  }
  if (ino == kFuseRootIno && !options_.hint_socket.empty()) {
    names.push_back(std::string(kXattrPrefix) + "hint_socket");
  }
  if (ino == kFuseRootIno && options_.hints) names.push_back(std::string(kXattrPrefix) + "hints");
  if (r->ladder_root) return names;
  if (r->entry.is_dir()) {
    names.push_back(std::string(kXattrPrefix) + "level");
    return names;
  }
  for (const char* x : kFileXattrs) {
    if (std::strcmp(x, "passthrough_reason") == 0 &&
        r->entry.kind != index::EntryKind::kPassthrough) {
      continue;
    }
    names.push_back(std::string(kXattrPrefix) + x);
  }
  return names;
}

struct statvfs Filesystem::StatFs() const {
  struct statvfs sv;
  std::memset(&sv, 0, sizeof sv);
  const index::Manifest& m = store_->manifest();
  // Used: the bytes of the level at the root (the ladder: level 10, the store's whole content,
  // of which every lower level is a prefix). Size: the source dataset's bytes. Available: the
  // difference, the bytes this level saves against the source. df's Use% is used / (used +
  // available), so a zero there always read 100% (squashfs's convention) and said nothing.
  const int level = options_.fixed_level != 0 ? options_.fixed_level : index::kNumGroups;
  const uint64_t used = m.level_bytes[static_cast<size_t>(level - 1)];
  const uint64_t size = std::max(m.source_bytes, used);
  auto units = [](uint64_t bytes) { return (bytes + kStatFsUnit - 1) / kStatFsUnit; };
  sv.f_bsize = kBlockSize;  // the preferred read size
  sv.f_frsize = kStatFsUnit;
  sv.f_blocks = units(size);
  sv.f_bfree = units(size) - units(used);
  sv.f_bavail = sv.f_bfree;
  sv.f_files = m.num_entries;  // nothing can be created: no free inodes
  sv.f_namemax = 255;
  sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
  return sv;
}

}  // namespace pcrfs::fs
