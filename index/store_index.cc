#include "index/store_index.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"

namespace pcrfs::index {
namespace {

constexpr char kEntriesDb[] = "entries";
constexpr char kDirentsDb[] = "dirents";
constexpr char kRecordsDb[] = "records";
constexpr char kMetaDb[] = "meta";
constexpr char kIndexFormatKey[] = "index_format";
constexpr char kIndexFormatValue[] = "2";
// A dirent value: the child's inode (u64 BE) and its kind (u8), so a plain readdir is served
// from the dirents alone.
constexpr size_t kDirentValueSize = 9;

// The build env may grow to this; LMDB only reserves address space, the file grows as needed.
constexpr size_t kBuildMapSize = size_t{64} << 30;

constexpr size_t kRecordInfoSize = 8 * (2 + kNumGroups + 1) + 4;

// errno becomes a Status in Status::FromErrno; LMDB's own codes are mapped here.
Status LmdbError(const std::string& what, int rc) {
  const std::string msg = what + ": " + mdb_strerror(rc);
  switch (rc) {
    case MDB_NOTFOUND:
      return Status::NotFound(msg);
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
    case MDB_BAD_VALSIZE:
      return Status::Corruption(msg);
    case MDB_MAP_FULL:
      return Status::ResourceExhausted(msg);
    case MDB_KEYEXIST:
      return Status::AlreadyExists(msg);
    default:
      if (rc > 0) return Status::FromErrno(what, rc);
      return Status::IOError(msg);
  }
}

MDB_val Val(const void* data, size_t n) { return MDB_val{n, const_cast<void*>(data)}; }

std::string InoKey(uint64_t ino) {
  std::string k(8, '\0');
  EncodeBigEndian64(reinterpret_cast<uint8_t*>(k.data()), ino);
  return k;
}

std::string DirentKey(uint64_t parent, std::string_view name) {
  std::string k = InoKey(parent);
  k.append(name);
  return k;
}

std::string RecordKey(uint32_t id) {
  std::string k(4, '\0');
  for (int i = 0; i < 4; ++i) k[static_cast<size_t>(i)] = static_cast<char>(id >> (8 * (3 - i)));
  return k;
}

std::string EncodeRecordInfo(const RecordInfo& r) {
  std::string out;
  PutFixed64(&out, r.file_size);
  PutFixed64(&out, r.data_offset);
  for (uint64_t off : r.group_offset) PutFixed64(&out, off);
  PutFixed32(&out, r.num_images);
  return out;
}

Result<RecordInfo> DecodeRecordInfo(uint32_t id, std::string_view v) {
  auto bad = [id](const std::string& what) {
    return Err(Status::Corruption("index record " + std::to_string(id) + ": " + what));
  };
  if (v.size() != kRecordInfoSize) return bad("wrong size");
  Decoder d(v);
  RecordInfo r;
  r.id = id;
  d.GetFixed64(&r.file_size);
  d.GetFixed64(&r.data_offset);
  for (uint64_t& off : r.group_offset) d.GetFixed64(&off);
  d.GetFixed32(&r.num_images);
  if (!d.done()) return bad("malformed");
  if (r.group_offset[0] != r.data_offset || r.data_offset < kRecordHeaderSize) {
    return bad("data offset mismatch");
  }
  for (int g = 0; g < kNumGroups; ++g) {
    if (r.group_offset[static_cast<size_t>(g) + 1] < r.group_offset[static_cast<size_t>(g)]) {
      return bad("group offsets decrease");
    }
  }
  if (r.group_offset[kNumGroups] > UINT64_MAX - kRecordFooterSize ||
      r.group_offset[kNumGroups] + kRecordFooterSize != r.file_size) {
    return bad("file size does not match the regions");
  }
  if (r.num_images > kMaxRecordImages) return bad("too many images");
  return r;
}

void RemoveBuildFiles(const std::string& build_path) {
  ::unlink(build_path.c_str());
  ::unlink((build_path + "-lock").c_str());
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The pcrfs trailer after the LMDB image (docs/format.md, "Index file").
constexpr char kIndexTrailerMagic[8] = {'P', 'C', 'R', 'F', 'S', 'I', 'D', 'X'};
constexpr uint32_t kIndexTrailerVersion = 1;
constexpr size_t kIndexTrailerSize = 32;

Result<uint32_t> CrcOfFileRange(int fd, uint64_t n, const std::string& what) {
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(n, 1 << 20)));
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < n;) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - pos));
    PCRFS_RETURN_ERR_IF_ERROR(PreadFull(fd, buf.data(), chunk, pos, what));
    crc = crc32c::Extend(crc, buf.data(), chunk);
    pos += chunk;
  }
  return crc;
}

// The mapping (from /proc/self/maps) that holds address p; leaves *start null if none does.
// Closes a cursor when the call that opened it returns.
struct CursorCloser {
  MDB_cursor* c;
  ~CursorCloser() { mdb_cursor_close(c); }
};

void FindMapping(const void* p, void** start, size_t* size) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return;
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long lo, hi;
    if (std::sscanf(line, "%llx-%llx", &lo, &hi) == 2 && lo <= addr && addr < hi) {
      *start = reinterpret_cast<void*>(static_cast<uintptr_t>(lo));
      *size = static_cast<size_t>(hi - lo);
      break;
    }
  }
  std::fclose(maps);
}

}  // namespace

std::string RecordFileName(uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "records/%08u.pcr", id);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// IndexWriter

struct IndexWriter::Impl {
  std::string path;
  std::string build_path;
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_dbi entries = 0, dirents = 0, records = 0, meta = 0;
  uint64_t last_ino = 0;
  uint64_t puts_in_txn = 0;
  bool finished = false;
  Status failed;

  ~Impl() {
    if (txn) mdb_txn_abort(txn);
    if (env) mdb_env_close(env);
    RemoveBuildFiles(build_path);
    if (!finished) ::unlink((path + ".tmp").c_str());
  }

  Status Put(MDB_dbi dbi, std::string_view key, std::string_view value, unsigned flags,
             const std::string& what) {
    MDB_val k = Val(key.data(), key.size());
    MDB_val v = Val(value.data(), value.size());
    int rc = mdb_put(txn, dbi, &k, &v, flags);
    if (rc != 0) {
      Status s = LmdbError(build_path + ": " + what, rc);
      if (rc != MDB_KEYEXIST) failed = s;  // the write transaction is dead
      return s;
    }
    ++puts_in_txn;
    return Status::OK();
  }

  // A write transaction keeps every page it dirties in memory, so one transaction for a
  // million entries would cost hundreds of MB. Committing every kPutsPerTxn puts bounds that
  // (the scratch env is NOSYNC: a commit is a write to the page cache, no fsync).
  static constexpr uint64_t kPutsPerTxn = 32768;
  Status MaybeCommit() {
    if (puts_in_txn < kPutsPerTxn) return Status::OK();
    int rc = mdb_txn_commit(txn);
    txn = nullptr;
    if (rc == 0) rc = mdb_txn_begin(env, nullptr, 0, &txn);
    if (rc != 0) {
      txn = nullptr;
      failed = LmdbError(build_path + ": intermediate commit", rc);
      return failed;
    }
    puts_in_txn = 0;
    return Status::OK();
  }

  Status Usable() const {
    if (!failed.ok()) return failed;
    if (finished) return Status::InvalidArgument(path + ": index already finished");
    return Status::OK();
  }

  Status DoFinish();
};

IndexWriter::IndexWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexWriter::~IndexWriter() = default;

Result<std::unique_ptr<IndexWriter>> IndexWriter::Create(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->build_path = path + ".build";
  RemoveBuildFiles(impl->build_path);
  int rc = mdb_env_create(&impl->env);
  if (rc != 0) return Err(LmdbError("mdb_env_create", rc));
  if ((rc = mdb_env_set_maxdbs(impl->env, 4)) != 0 ||
      (rc = mdb_env_set_mapsize(impl->env, kBuildMapSize)) != 0) {
    return Err(LmdbError(impl->build_path, rc));
  }
  // A private scratch env: no lock file, no syncs (Finish fsyncs the compacted copy).
  rc = mdb_env_open(impl->env, impl->build_path.c_str(),
                    MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC | MDB_NOMETASYNC, 0644);
  if (rc != 0) return Err(LmdbError(impl->build_path, rc));
  rc = mdb_txn_begin(impl->env, nullptr, 0, &impl->txn);
  if (rc != 0) return Err(LmdbError(impl->build_path + ": begin", rc));
  for (auto [name, dbi] : {std::pair{kEntriesDb, &impl->entries},
                           {kDirentsDb, &impl->dirents},
                           {kRecordsDb, &impl->records},
                           {kMetaDb, &impl->meta}}) {
    rc = mdb_dbi_open(impl->txn, name, MDB_CREATE, dbi);
    if (rc != 0) return Err(LmdbError(impl->build_path + ": open db " + name, rc));
  }
  PCRFS_RETURN_ERR_IF_ERROR(
      impl->Put(impl->meta, kIndexFormatKey, kIndexFormatValue, 0, "put meta index_format"));
  return std::unique_ptr<IndexWriter>(new IndexWriter(std::move(impl)));
}

Status IndexWriter::AddEntry(const Entry& e) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  const std::string what = w.path + ": entry " + std::to_string(e.ino) + " \"" + e.name + "\"";
  if (e.ino <= w.last_ino) {
    return Status::InvalidArgument(what + ": inodes must be added in increasing order (last was " +
                                   std::to_string(w.last_ino) + ")");
  }
  if (e.ino != kRootIno && !IsValidName(e.name)) {
    return Status::InvalidArgument(what + ": invalid name \"" + e.name + "\"");
  }
  const std::string value = EncodeEntry(e);
  // Never write what a reader would reject.
  auto check = DecodeEntry(e.ino, value);
  if (!check) return Status::InvalidArgument(what + ": " + check.error().message());
  const std::string key = InoKey(e.ino);
  PCRFS_RETURN_IF_ERROR(w.Put(w.entries, key, value, MDB_APPEND, "put entry"));
  if (e.ino != kRootIno) {
    // Breadth-first inode numbers with children in name order make the dirent keys (parent,
    // name) increase too, so they append (full pages, no search). Anything else still works:
    // MDB_APPEND refuses a key that is not the largest, and a normal put decides.
    const std::string dirent = DirentKey(e.parent, e.name);
    std::string dirent_value = key;
    dirent_value.push_back(static_cast<char>(e.kind));
    Status s = w.Put(w.dirents, dirent, dirent_value, MDB_APPEND, "put dirent");
    if (s.code() == Status::Code::kAlreadyExists) {
      s = w.Put(w.dirents, dirent, dirent_value, MDB_NOOVERWRITE, "put dirent");
    }
    if (!s.ok()) {
      if (s.code() == Status::Code::kAlreadyExists) {
        s = Status::AlreadyExists(what + ": directory " + std::to_string(e.parent) +
                                  " already has a child with this name");
      }
      w.failed = s;  // the entry went in without its dirent: the index is unusable
      return s;
    }
  }
  w.last_ino = e.ino;
  return w.MaybeCommit();
}

Status IndexWriter::AddRecord(const RecordInfo& r) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  const std::string value = EncodeRecordInfo(r);
  auto check = DecodeRecordInfo(r.id, value);
  if (!check) return Status::InvalidArgument(w.path + ": " + check.error().message());
  return w.Put(w.records, RecordKey(r.id), value, MDB_NOOVERWRITE,
               "put record " + std::to_string(r.id));
}

Status IndexWriter::PutMeta(std::string_view key, std::string_view value) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  if (key.empty() || key.size() > 255) {
    return Status::InvalidArgument(w.path + ": meta key must be 1..255 bytes");
  }
  if (key == kIndexFormatKey) {
    return Status::InvalidArgument(w.path + ": meta key \"" + std::string(key) + "\" is reserved");
  }
  return w.Put(w.meta, key, value, 0, "put meta " + std::string(key));
}

Status IndexWriter::Finish() {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  Status s = w.DoFinish();
  if (!s.ok()) {
    w.failed = s;
    return s;
  }
  w.finished = true;
  return s;
}

Status IndexWriter::Impl::DoFinish() {
  int rc = mdb_txn_commit(txn);
  txn = nullptr;
  if (rc != 0) return LmdbError(build_path + ": commit", rc);

  const std::string tmp = path + ".tmp";
  auto fd = OpenFile(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (!fd) return fd.error();
  // The copy reads every page through LMDB's map, and each page read stays mapped: a
  // million-entry index would add ~250 MB to the builder's RSS. Find the map (a value read in
  // a read transaction points into it) and unmap pages behind the copy as it goes; it is a
  // read-only shared file mapping, so nothing is lost.
  void* map_addr = nullptr;
  size_t map_size = 0;
  {
    MDB_txn* rtxn;
    if (mdb_txn_begin(env, nullptr, MDB_RDONLY, &rtxn) == 0) {
      const std::string key = kIndexFormatKey;
      MDB_val k = Val(key.data(), key.size());
      MDB_val v;
      if (mdb_get(rtxn, meta, &k, &v) == 0) FindMapping(v.mv_data, &map_addr, &map_size);
      mdb_txn_abort(rtxn);
    }
  }
  std::mutex trim_mu;
  std::condition_variable trim_cv;
  bool copy_done = false;
  std::thread trimmer([&] {
    std::unique_lock<std::mutex> l(trim_mu);
    while (map_addr != nullptr &&
           !trim_cv.wait_for(l, std::chrono::milliseconds(20), [&] { return copy_done; })) {
      ::madvise(map_addr, map_size, MADV_DONTNEED);
    }
  });
  // The compacted copy renumbers pages in tree order and omits free pages, so the same entries
  // give the same bytes whatever the history of the build env.
  rc = mdb_env_copyfd2(env, fd->get(), MDB_CP_COMPACT);
  {
    std::lock_guard<std::mutex> l(trim_mu);
    copy_done = true;
  }
  trim_cv.notify_all();
  trimmer.join();
  if (rc != 0) return LmdbError("copy " + build_path + " -> " + tmp, rc);
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(tmp, errno);
  const auto lmdb_size = static_cast<uint64_t>(st.st_size);
  auto crc = CrcOfFileRange(fd->get(), lmdb_size, tmp);
  if (!crc) return crc.error();
  uint8_t trailer[kIndexTrailerSize] = {};
  std::memcpy(trailer, kIndexTrailerMagic, 8);
  EncodeFixed32(trailer + 8, kIndexTrailerVersion);
  EncodeFixed64(trailer + 16, lmdb_size);
  EncodeFixed32(trailer + 24, crc32c::Mask(*crc));
  EncodeFixed32(trailer + 28, crc32c::Mask(crc32c::Value(trailer, 28)));
  PCRFS_RETURN_IF_ERROR(PwriteFull(fd->get(), trailer, sizeof(trailer), lmdb_size, tmp));
  if (::fsync(fd->get()) != 0) return Status::FromErrno("fsync " + tmp, errno);
  fd->Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno("rename " + tmp + " -> " + path, errno);
  }
  PCRFS_RETURN_IF_ERROR(FsyncPath(DirName(path)));
  mdb_env_close(env);
  env = nullptr;
  RemoveBuildFiles(build_path);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// IndexReader

struct IndexReader::Impl {
  std::string path;
  MDB_env* env = nullptr;
  MDB_dbi entries = 0, dirents = 0, records = 0, meta = 0;
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
    if (ResidentFileBytes() > budget) Release();
  }
  void Release() const {
    // A read-only shared file mapping: dropping its page table entries loses nothing, and a
    // concurrent reader just faults the page in again from the page cache.
    if (map_addr != nullptr && map_size > 0) ::madvise(map_addr, map_size, MADV_DONTNEED);
  }

  std::mutex mu;
  std::vector<MDB_txn*> idle_txns;  // GUARDED_BY(mu); reset, ready for mdb_txn_renew

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

  // A read transaction borrowed from the pool for the length of one call. Data read through
  // it is valid until the lease ends: copy it out first.
  class Lease {
   public:
    explicit Lease(Impl* impl) : impl_(impl) {}
    ~Lease() {
      if (!txn_) return;
      mdb_txn_reset(txn_);
      {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->idle_txns.push_back(txn_);
      }
      impl_->MaybeRelease();
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    Status Begin() {
      {
        std::lock_guard<std::mutex> lock(impl_->mu);
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

IndexReader::IndexReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexReader::~IndexReader() = default;

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       const FileIdentity* verified) {
  auto bad = [&path](const std::string& what) {
    return Err(Status::Corruption(path + ": damaged or not a pcrfs index: " + what));
  };
  uint64_t lmdb_size;
  FileIdentity identity;
  {
    // Verify the whole file before LMDB maps it: LMDB trusts its pages and may crash on a
    // damaged file, so it only ever sees bytes whose checksum matched.
    auto fd = OpenFile(path, O_RDONLY);
    if (!fd) return Err(fd.error());
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
    if (!S_ISREG(st.st_mode)) return bad("not a regular file");
    const auto size = static_cast<uint64_t>(st.st_size);
    identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), size,
                st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
    if (size < kIndexTrailerSize) return bad("file too small (" + std::to_string(size) + " bytes)");
    uint8_t trailer[kIndexTrailerSize];
    PCRFS_RETURN_ERR_IF_ERROR(
        PreadFull(fd->get(), trailer, sizeof(trailer), size - kIndexTrailerSize, path));
    if (std::memcmp(trailer, kIndexTrailerMagic, 8) != 0) {
      return bad("no pcrfs trailer (truncated, or not written by pcrfs)");
    }
    if (crc32c::Unmask(DecodeFixed32(trailer + 28)) != crc32c::Value(trailer, 28)) {
      return bad("trailer checksum mismatch");
    }
    const uint32_t version = DecodeFixed32(trailer + 8);
    if (version != kIndexTrailerVersion) {
      return Err(Status::NotSupported(path + ": index format version " + std::to_string(version) +
                                      " is not supported (this pcrfs reads " +
                                      std::to_string(kIndexTrailerVersion) + ")"));
    }
    lmdb_size = DecodeFixed64(trailer + 16);
    if (DecodeFixed32(trailer + 12) != 0 || lmdb_size != size - kIndexTrailerSize) {
      return bad("trailer does not match the file size (truncated or extended)");
    }
    if (verified == nullptr || !(*verified == identity)) {
      auto crc = CrcOfFileRange(fd->get(), lmdb_size, path);
      if (!crc) return Err(crc.error());
      if (crc32c::Mask(*crc) != DecodeFixed32(trailer + 24)) return bad("checksum mismatch");
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  int rc = mdb_env_create(&impl->env);
  if (rc != 0) return Err(LmdbError("mdb_env_create", rc));
  if ((rc = mdb_env_set_maxdbs(impl->env, 4)) != 0 ||
      (rc = mdb_env_set_mapsize(impl->env, static_cast<size_t>(lmdb_size))) != 0) {
    return Err(LmdbError(path, rc));
  }
  rc = mdb_env_open(impl->env, path.c_str(),
                    MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD, 0444);
  if (rc != 0) {
    Status s = LmdbError(path, rc);
    if (rc == EINVAL || rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH) {
      return bad(std::string("LMDB refused it: ") + mdb_strerror(rc));
    }
    return Err(s);
  }
  MDB_envinfo info;
  MDB_stat stat;
  if (mdb_env_info(impl->env, &info) != 0 || mdb_env_stat(impl->env, &stat) != 0) {
    return bad("cannot read the LMDB meta pages");
  }
  if (stat.ms_psize == 0 || (info.me_last_pgno + 1) > lmdb_size / stat.ms_psize) {
    return bad("LMDB pages extend past the end of the file");
  }
  impl->identity = identity;
  {
    // DBI handles opened in a transaction only outlive it if it commits (a reset closes them).
    MDB_txn* txn;
    rc = mdb_txn_begin(impl->env, nullptr, MDB_RDONLY, &txn);
    if (rc != 0) return Err(LmdbError(path + ": begin read transaction", rc));
    for (auto [name, dbi] : {std::pair{kEntriesDb, &impl->entries},
                             {kDirentsDb, &impl->dirents},
                             {kRecordsDb, &impl->records},
                             {kMetaDb, &impl->meta}}) {
      rc = mdb_dbi_open(txn, name, 0, dbi);
      if (rc != 0) {
        mdb_txn_abort(txn);
        return bad(std::string("database \"") + name + "\": " + mdb_strerror(rc));
      }
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0) return Err(LmdbError(path + ": open databases", rc));
  }
  {
    Impl::Lease lease(impl.get());
    PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
    std::string_view format;
    Status s = impl->Get(lease, impl->meta, kIndexFormatKey, &format, "meta index_format");
    if (!s.ok()) return bad("no index_format in meta");
    // LMDB does not say where it mapped the file (me_mapaddr is only set for MDB_FIXEDMAP),
    // but a value read in a read-only transaction points into the map.
    FindMapping(format.data(), &impl->map_addr, &impl->map_size);
    if (format != kIndexFormatValue) {
      const bool older =
          format.size() < std::strlen(kIndexFormatValue) ||
          (format.size() == std::strlen(kIndexFormatValue) && format < kIndexFormatValue);
      return Err(Status::NotSupported(
          path + ": index format \"" + std::string(format) +
          "\" is not supported (this pcrfs reads " + kIndexFormatValue + "; " +
          (older ? "rebuild the store with this pcr build" : "use a newer pcrfs") + ")"));
    }
    MDB_stat es;
    rc = mdb_stat(lease.txn(), impl->entries, &es);
    if (rc != 0) return Err(LmdbError(path + ": stat entries", rc));
    impl->num_entries = es.ms_entries;
    rc = mdb_stat(lease.txn(), impl->records, &es);
    if (rc != 0) return Err(LmdbError(path + ": stat records", rc));
    impl->num_records = es.ms_entries;
  }
  return std::unique_ptr<IndexReader>(new IndexReader(std::move(impl)));
}

Result<Entry> IndexReader::Get(uint64_t ino) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  return impl_->GetEntry(lease, ino);
}

Result<uint64_t> IndexReader::Lookup(uint64_t parent, std::string_view name) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  return impl_->LookupChild(lease, parent, name);
}

Result<Entry> IndexReader::LookupPath(std::string_view path) const {
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

Status IndexReader::List(const Entry& dir, uint64_t start,
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

Status IndexReader::ListNames(const Entry& dir, uint64_t start, std::string_view start_name,
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

Result<RecordInfo> IndexReader::GetRecord(uint32_t id) const {
  Impl::Lease lease(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(lease.Begin());
  std::string_view v;
  PCRFS_RETURN_ERR_IF_ERROR(
      impl_->Get(lease, impl_->records, RecordKey(id), &v, "record " + std::to_string(id)));
  auto r = DecodeRecordInfo(id, v);
  if (!r) return Err(Status::Corruption(impl_->path + ": " + r.error().message()));
  return r;
}

Result<std::string> IndexReader::GetMeta(std::string_view key) const {
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

uint64_t IndexReader::NumEntries() const { return impl_->num_entries; }

uint64_t IndexReader::NumRecords() const { return impl_->num_records; }

const FileIdentity& IndexReader::identity() const { return impl_->identity; }

void IndexReader::ReleaseMappedPages() const { impl_->Release(); }

void IndexReader::SetMappedBudget(uint64_t bytes) const {
  impl_->mapped_budget.store(bytes, std::memory_order_relaxed);
}

uint64_t ResidentFileBytes() {
  // statm: size resident shared text lib data dt, in pages.
  unsigned long long size = 0, resident = 0, shared = 0;
  if (std::sscanf(ReadSmallFile("/proc/self/statm", 128).c_str(), "%llu %llu %llu", &size,
                  &resident, &shared) != 3) {
    return 0;
  }
  return static_cast<uint64_t>(shared) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace pcrfs::index
