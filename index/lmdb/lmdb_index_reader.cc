// LmdbIndexReader (index/lmdb/lmdb_index_reader.h): lock-free lookups and listings over a
// verified, read-only LMDB map, with the map's resident footprint kept under a budget.
#include "index/lmdb/lmdb_index_reader.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/proc_self.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/index_writer.h"
#include "index/lmdb/lmdb_util.h"

namespace pcrfs::index {

using lmdb::BlocksKey;
using lmdb::CursorCloser;
using lmdb::DecodeRecordInfo;
using lmdb::DirentKey;
using lmdb::InoKey;
using lmdb::kDirentValueSize;
using lmdb::kIndexFormatKey;
using lmdb::LmdbError;
using lmdb::RecordKey;
using lmdb::Val;

struct LmdbIndexReader::Impl {
  std::string path;
  MDB_env* env = nullptr;
  MDB_dbi entries = 0, dirents = 0, records = 0, meta = 0, blocks = 0;
  int format = kIndexFormat;
  uint64_t num_entries = 0;
  uint64_t num_records = 0;
  FileIdentity identity;
  void* map_addr = nullptr;
  size_t map_size = 0;
  std::atomic<uint64_t> mapped_budget{0};  // 0: never release
  std::atomic<uint32_t> uses{0};

  // Every kCheckEvery calls, if the process's file-backed resident memory is over the budget,
  // unmaps the index. Inline, not on a timer: the kernel maps index pages 64 KiB around each
  // fault (a whole large folio when the page cache holds one), so a burst of random lookups
  // maps 100 KB or more each and fills a million-entry index
  // 200 MB within a fraction of a second.
  static constexpr uint32_t kCheckEvery = 16;
  void MaybeRelease() {
    const uint64_t budget = mapped_budget.load(std::memory_order_relaxed);
    if (budget == 0 || uses.fetch_add(1, std::memory_order_relaxed) % kCheckEvery != 0) return;
    if (proc::ResidentFileBytes() > budget) Release();
  }
  void Release() const {
    // A read-only shared file mapping: dropping its page table entries loses nothing, and a
    // concurrent reader just faults the page in again from the page cache.
    if (map_addr != nullptr && map_size > 0) ::madvise(map_addr, map_size, MADV_DONTNEED);
  }

  Mutex mu;
  std::vector<MDB_txn*> idle_txns GUARDED_BY(mu);  // reset, ready for mdb_txn_renew

  // The env is opened MDB_NORDAHEAD (random lookups must not read 128 KiB each), so a cold
  // listing would fault the dirents in one page at a time. The dirents of a directory, and of
  // the directories after it, lie in adjacent leaf pages of the compacted file, so a listing
  // asks for the next kListReadahead bytes whenever it steps past what it asked for last.
  static constexpr uintptr_t kListReadahead = 256 << 10;
  std::atomic<uintptr_t> list_advised_begin{0}, list_advised_end{0};
  void AdviseListing(const void* at) {
    if (map_addr == nullptr) return;
    const auto p = reinterpret_cast<uintptr_t>(at);
    const auto map_begin = reinterpret_cast<uintptr_t>(map_addr);
    const uintptr_t map_end = map_begin + map_size;
    if (p < map_begin || p >= map_end) return;
    if (p >= list_advised_begin.load(std::memory_order_relaxed) &&
        p < list_advised_end.load(std::memory_order_relaxed)) {
      return;
    }
    const uintptr_t begin = p & ~uintptr_t{4095};
    const uintptr_t end = std::min(begin + kListReadahead, map_end);
    list_advised_begin.store(begin, std::memory_order_relaxed);
    list_advised_end.store(end, std::memory_order_relaxed);
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  }

  ~Impl() {
    for (MDB_txn* t : idle_txns) mdb_txn_abort(t);
    if (env) mdb_env_close(env);
  }

  // Open's steps, after CheckIndexFile.
  Status OpenEnvironment(uint64_t lmdb_size);
  Status OpenDatabases(bool with_blocks);
  Status CheckFormat();
  Status Damaged(const std::string& what) const {
    return Status::Corruption(path + ": damaged or not a pcrfs index: " + what);
  }

  // A read transaction borrowed from the pool for the length of one call. Data read through
  // it is valid until the lease ends: copy it out first.
  class Lease {
   public:
    explicit Lease(Impl* impl) : impl_(impl) {}
    ~Lease() {
      if (!txn_) return;
      mdb_txn_reset(txn_);
      {
        MutexLock lock(&impl_->mu);
        impl_->idle_txns.push_back(txn_);
      }
      impl_->MaybeRelease();
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    Status Begin() {
      {
        MutexLock lock(&impl_->mu);
        if (!impl_->idle_txns.empty()) {
          txn_ = impl_->idle_txns.back();
          impl_->idle_txns.pop_back();
        }
      }
      if (txn_) {
        int rc = mdb_txn_renew(txn_);
        if (rc == 0) return Status::OK();
        mdb_txn_abort(txn_);
        txn_ = nullptr;
        return LmdbError(impl_->path + ": renew read transaction", rc);
      }
      int rc = mdb_txn_begin(impl_->env, nullptr, MDB_RDONLY, &txn_);
      if (rc != 0) {
        txn_ = nullptr;
        return LmdbError(impl_->path + ": begin read transaction", rc);
      }
      return Status::OK();
    }
    MDB_txn* txn() const { return txn_; }

   private:
    Impl* impl_;
    MDB_txn* txn_ = nullptr;
  };

  // Looks key up in dbi; NotFound if absent. *out is valid until the lease ends.
  Status Get(const Lease& lease, MDB_dbi dbi, std::string_view key, std::string_view* out,
             const std::string& what) const {
    MDB_val k = Val(key.data(), key.size());
    MDB_val v;
    int rc = mdb_get(lease.txn(), dbi, &k, &v);
    if (rc != 0) return LmdbError(path + ": " + what, rc);
    *out = std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
    return Status::OK();
  }

  Result<Entry> GetEntry(const Lease& lease, uint64_t ino) const {
    std::string_view v;
    PCRFS_RETURN_ERR_IF_ERROR(Get(lease, entries, InoKey(ino), &v, "inode " + std::to_string(ino)));
    auto e = DecodeEntry(ino, v);
    if (!e) return Err(Status::Corruption(path + ": " + e.error().message()));
    return e;
  }

  Result<uint64_t> LookupChild(const Lease& lease, uint64_t parent, std::string_view name) const {
    if (!IsValidName(name)) {
      return Err(Status::NotFound(path + ": no entry \"" + std::string(name) + "\" in directory " +
                                  std::to_string(parent)));
    }
    std::string_view v;
    Status s = Get(lease, dirents, DirentKey(parent, name), &v, "lookup");
    if (s.IsNotFound()) {
      return Err(Status::NotFound(path + ": no entry \"" + std::string(name) + "\" in directory " +
                                  std::to_string(parent)));
    }
    if (!s.ok()) return Err(s);
    if (v.size() != kDirentValueSize) {
      return Err(Status::Corruption(path + ": malformed dirent value"));
    }
    return DecodeBigEndian64(reinterpret_cast<const uint8_t*>(v.data()));
  }
};

LmdbIndexReader::LmdbIndexReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LmdbIndexReader::~LmdbIndexReader() = default;

Status LmdbIndexReader::Impl::OpenEnvironment(uint64_t lmdb_size) {
  int rc = 0;
  auto opened = lmdb::OpenEnv(path, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD,
                              static_cast<size_t>(lmdb_size), 0444, &rc);
  if (!opened) {
    if (rc == EINVAL || rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH) {
      return Damaged(std::string("LMDB refused it: ") + mdb_strerror(rc));
    }
    return opened.error();
  }
  env = *opened;
  MDB_envinfo info;
  MDB_stat stat;
  if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &stat) != 0) {
    return Damaged("cannot read the LMDB meta pages");
  }
  if (stat.ms_psize == 0 || (info.me_last_pgno + 1) > lmdb_size / stat.ms_psize) {
    return Damaged("LMDB pages extend past the end of the file");
  }
  return Status::OK();
}

Status LmdbIndexReader::Impl::OpenDatabases(bool with_blocks) {
  // DBI handles opened in a transaction only outlive it if it commits (a reset closes them).
  MDB_txn* txn;
  int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc != 0) return LmdbError(path + ": begin read transaction", rc);
  Status s = with_blocks ? lmdb::OpenDbis(txn, 0, {{lmdb::kBlocksDb, &blocks}}, path)
                         : lmdb::OpenDbis(txn, 0,
                                          {{lmdb::kEntriesDb, &entries},
                                           {lmdb::kDirentsDb, &dirents},
                                           {lmdb::kRecordsDb, &records},
                                           {lmdb::kMetaDb, &meta}},
                                          path);
  if (!s.ok()) {
    mdb_txn_abort(txn);
    return Damaged(s.message().substr(path.size() + 2));
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) return LmdbError(path + ": open databases", rc);
  return Status::OK();
}

Status LmdbIndexReader::Impl::CheckFormat() {
  Lease lease(this);
  PCRFS_RETURN_IF_ERROR(lease.Begin());
  std::string_view value;
  if (!Get(lease, meta, kIndexFormatKey, &value, "meta index_format").ok()) {
    return Damaged("no index_format in meta");
  }
  // LMDB does not say where it mapped the file (me_mapaddr is only set for MDB_FIXEDMAP), but a
  // value read in a read-only transaction points into the map.
  if (auto m = proc::MappingOf(value.data())) {
    map_addr = m->start;
    map_size = m->size;
  }
  int version = 0;
  for (char c : value) {
    version =
        (c >= '0' && c <= '9' && version >= 0 && version < 1000) ? version * 10 + (c - '0') : -1;
  }
  if (value.empty() || version < kOldestIndexFormat || version > kIndexFormat) {
    const bool older = version >= 0 && version < kOldestIndexFormat;
    return Status::NotSupported(
        path + ": index format \"" + std::string(value) + "\" is not supported (this pcrfs reads " +
        std::to_string(kOldestIndexFormat) + " to " + std::to_string(kIndexFormat) + "; " +
        (older ? "rebuild the store with this pcr build" : "use a newer pcrfs") + ")");
  }
  format = version;
  if (format >= 3) PCRFS_RETURN_IF_ERROR(OpenDatabases(/*with_blocks=*/true));
  MDB_stat es;
  int rc = mdb_stat(lease.txn(), entries, &es);
  if (rc != 0) return LmdbError(path + ": stat entries", rc);
  num_entries = es.ms_entries;
  rc = mdb_stat(lease.txn(), records, &es);
  if (rc != 0) return LmdbError(path + ": stat records", rc);
  num_records = es.ms_entries;
  return Status::OK();
}

Result<std::unique_ptr<LmdbIndexReader>> LmdbIndexReader::Open(const std::string& path,
                                                               const FileIdentity* verified) {
  // Verify the whole file before LMDB maps it: LMDB trusts its pages and may crash on a
  // damaged file, so it only ever sees bytes whose checksum matched.
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  auto lmdb_size = CheckIndexFile(path, verified, &impl->identity);
  if (!lmdb_size) return Err(lmdb_size.error());
  PCRFS_RETURN_ERR_IF_ERROR(impl->OpenEnvironment(*lmdb_size));
  PCRFS_RETURN_ERR_IF_ERROR(impl->OpenDatabases(/*with_blocks=*/false));
  PCRFS_RETURN_ERR_IF_ERROR(impl->CheckFormat());
  return std::unique_ptr<LmdbIndexReader>(new LmdbIndexReader(std::move(impl)));
}

Result<Entry> LmdbIndexReader::Get(uint64_t ino) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  return impl_->GetEntry(lease, ino);
}

Result<uint64_t> LmdbIndexReader::Lookup(uint64_t parent, std::string_view name) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  return impl_->LookupChild(lease, parent, name);
}

Result<Entry> LmdbIndexReader::LookupPath(std::string_view path) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  auto cur = impl_->GetEntry(lease, kRootIno);
  if (!cur) return cur;
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view name = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (name.empty()) continue;  // leading, trailing or doubled '/'
    if (!cur->is_dir()) {
      return Err(Status::NotFound(impl_->path + ": \"" + std::string(path) +
                                  "\": a component is not a directory"));
    }
    auto child = impl_->LookupChild(lease, cur->ino, name);
    if (!child) {
      if (child.error().IsNotFound()) {
        return Err(Status::NotFound(impl_->path + ": no such path \"" + std::string(path) + "\""));
      }
      return Err(child.error());
    }
    cur = impl_->GetEntry(lease, *child);
    if (!cur) return cur;
  }
  return cur;
}

Status LmdbIndexReader::List(const Entry& dir, uint64_t start,
                             const std::function<bool(const Entry&)>& fn) const {
  if (!dir.is_dir()) {
    return Status::InvalidArgument(impl_->path + ": inode " + std::to_string(dir.ino) +
                                   " is not a directory");
  }
  if (start >= dir.num_children) return Status::OK();
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_IF_ERROR(lease.Begin());
  // The children are the consecutive keys [first_child, first_child + num_children): one seek,
  // then a cursor step per child instead of a tree search.
  MDB_cursor* cursor;
  int rc = mdb_cursor_open(lease.txn(), impl_->entries, &cursor);
  if (rc != 0) return LmdbError(impl_->path + ": open cursor", rc);
  const CursorCloser close_cursor{cursor};
  std::string key = InoKey(dir.first_child + start);
  MDB_val k = Val(key.data(), key.size());
  MDB_val v;
  rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_KEY);
  for (uint64_t i = start; i < dir.num_children; ++i) {
    const uint64_t want = dir.first_child + i;
    if (rc == 0 &&
        (k.mv_size != 8 || DecodeBigEndian64(static_cast<const uint8_t*>(k.mv_data)) != want)) {
      rc = MDB_NOTFOUND;
    }
    if (rc == MDB_NOTFOUND) {
      return Status::Corruption(impl_->path + ": directory " + std::to_string(dir.ino) +
                                " lists missing child inode " + std::to_string(want));
    }
    if (rc != 0) return LmdbError(impl_->path + ": list directory " + std::to_string(dir.ino), rc);
    auto e = DecodeEntry(want, std::string_view(static_cast<const char*>(v.mv_data), v.mv_size));
    if (!e) return Status::Corruption(impl_->path + ": " + e.error().message());
    if (e->parent != dir.ino) {
      return Status::Corruption(impl_->path + ": inode " + std::to_string(e->ino) +
                                " is in the child range of " + std::to_string(dir.ino) +
                                " but its parent is " + std::to_string(e->parent));
    }
    if (!fn(*e)) break;
    if (i + 1 < dir.num_children) rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
  }
  return Status::OK();
}

Status LmdbIndexReader::ListNames(const Entry& dir, uint64_t start, std::string_view start_name,
                                  const std::function<bool(const DirEntry&)>& fn) const {
  const std::string& path = impl_->path;
  if (!dir.is_dir()) {
    return Status::InvalidArgument(path + ": inode " + std::to_string(dir.ino) +
                                   " is not a directory");
  }
  if (start >= dir.num_children) return Status::OK();
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_IF_ERROR(lease.Begin());
  MDB_cursor* cursor;
  int rc = mdb_cursor_open(lease.txn(), impl_->dirents, &cursor);
  if (rc != 0) return LmdbError(path + ": open cursor", rc);
  const CursorCloser close_cursor{cursor};
  const std::string prefix = InoKey(dir.ino);
  MDB_val k, v;
  // Positions the cursor on child `start` by its name.
  auto seek = [&](std::string_view name) {
    const std::string key = DirentKey(dir.ino, name);
    k = Val(key.data(), key.size());
    return mdb_cursor_get(cursor, &k, &v, MDB_SET_KEY);
  };
  auto child_ino = [&] {
    return v.mv_size == kDirentValueSize ? DecodeBigEndian64(static_cast<const uint8_t*>(v.mv_data))
                                         : 0;
  };
  rc = IsValidName(start_name) ? seek(start_name) : MDB_NOTFOUND;
  if (rc != 0 || child_ino() != dir.first_child + start) {
    // No usable hint: the name of child `start` is in its entry.
    if (start == 0) {
      k = Val(prefix.data(), prefix.size());
      rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
    } else {
      auto first = impl_->GetEntry(lease, dir.first_child + start);
      if (!first) {
        return first.error().IsNotFound()
                   ? Status::Corruption(path + ": directory " + std::to_string(dir.ino) +
                                        " lists missing child inode " +
                                        std::to_string(dir.first_child + start))
                   : first.error();
      }
      rc = seek(first->name);
    }
  }
  for (uint64_t i = start; i < dir.num_children; ++i) {
    const uint64_t want = dir.first_child + i;
    if (rc != 0 && rc != MDB_NOTFOUND) {
      return LmdbError(path + ": list directory " + std::to_string(dir.ino), rc);
    }
    const auto* key = static_cast<const char*>(k.mv_data);
    const bool ours = rc == 0 && k.mv_size > 8 && std::memcmp(key, prefix.data(), 8) == 0;
    if (!ours || child_ino() != want) {
      return Status::Corruption(path + ": directory " + std::to_string(dir.ino) +
                                " has no dirent for its child inode " + std::to_string(want));
    }
    const auto kind = static_cast<EntryKind>(static_cast<const uint8_t*>(v.mv_data)[8]);
    const std::string_view name(key + 8, k.mv_size - 8);
    if ((kind != EntryKind::kDirectory && kind != EntryKind::kJpeg &&
         kind != EntryKind::kPassthrough) ||
        !IsValidName(name)) {
      return Status::Corruption(path + ": malformed dirent for inode " + std::to_string(want));
    }
    impl_->AdviseListing(k.mv_data);
    if (!fn(DirEntry{name, want, kind})) break;
    if (i + 1 < dir.num_children) rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
  }
  return Status::OK();
}

Result<RecordInfo> LmdbIndexReader::GetRecord(uint32_t id) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  std::string_view v;
  PCRFS_RETURN_ERR_IF_ERROR(
      impl_->Get(lease, impl_->records, RecordKey(id), &v, "record " + std::to_string(id)));
  auto r = DecodeRecordInfo(id, v);
  if (!r) return Err(Status::Corruption(impl_->path + ": " + r.error().message()));
  return r;
}

int LmdbIndexReader::format() const { return impl_->format; }

Result<uint32_t> LmdbIndexReader::GetBlockCrc(uint64_t ino, int group, uint64_t block) const {
  const std::string what =
      "block CRCs of inode " + std::to_string(ino) + " group " + std::to_string(group);
  if (impl_->format < 3) return Err(Status::NotFound(impl_->path + ": no " + what));
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  std::string_view v;
  Status s = impl_->Get(lease, impl_->blocks, BlocksKey(ino, group), &v, what);
  if (s.IsNotFound()) return Err(Status::Corruption(impl_->path + ": missing " + what));
  if (!s.ok()) return Err(s);
  if (v.size() % 4 != 0 || block >= v.size() / 4) {
    return Err(
        Status::Corruption(impl_->path + ": " + what + " have no block " + std::to_string(block)));
  }
  return DecodeFixed32(reinterpret_cast<const uint8_t*>(v.data()) + block * 4);
}

Result<std::string> LmdbIndexReader::GetMeta(std::string_view key) const {
  if (key.empty() || key.size() > 255) {
    return Err(Status::NotFound(impl_->path + ": no meta key \"" + std::string(key) + "\""));
  }
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  std::string_view v;
  PCRFS_RETURN_ERR_IF_ERROR(
      impl_->Get(lease, impl_->meta, key, &v, "meta \"" + std::string(key) + "\""));
  return std::string(v);
}

uint64_t LmdbIndexReader::NumEntries() const { return impl_->num_entries; }

uint64_t LmdbIndexReader::NumRecords() const { return impl_->num_records; }

const FileIdentity& LmdbIndexReader::identity() const { return impl_->identity; }

void LmdbIndexReader::ReleaseMappedPages() const { impl_->Release(); }

void LmdbIndexReader::SetMappedBudget(uint64_t bytes) const {
  impl_->mapped_budget.store(bytes, std::memory_order_relaxed);
}

}  // namespace pcrfs::index
