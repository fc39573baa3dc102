// IndexWriter (index/lmdb/index_writer.h): builds a fresh index in a scratch LMDB environment and
// publishes a compacted, trailer-checked copy.
#include "index/lmdb/index_writer.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/coding.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/proc_self.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/lmdb_util.h"

namespace pcrfs::index {
namespace {

using lmdb::BlocksKey;
using lmdb::DecodeRecordInfo;
using lmdb::DirentKey;
using lmdb::EncodeRecordInfo;
using lmdb::InoKey;
using lmdb::kIndexFormatKey;
using lmdb::LmdbError;
using lmdb::RecordKey;
using lmdb::Val;

// The build env may grow to this; LMDB only reserves address space, the file grows as needed.
constexpr size_t kBuildMapSize = size_t{64} << 30;

void RemoveBuildFiles(const std::string& build_path) {
  ::unlink(build_path.c_str());
  ::unlink((build_path + "-lock").c_str());
}

}  // namespace

struct IndexWriter::Impl {
  std::string path;
  std::string build_path;
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_dbi entries = 0, dirents = 0, records = 0, meta = 0, blocks = 0;
  int format = kIndexFormat;
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

Result<std::unique_ptr<IndexWriter>> IndexWriter::Create(const std::string& path, int format) {
  if (format != kIndexFormat && format != kOldestIndexFormat) {
    return Err(
        Status::InvalidArgument(path + ": cannot write index format " + std::to_string(format)));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->format = format;
  impl->build_path = path + ".build";
  RemoveBuildFiles(impl->build_path);
  // A private scratch env: no lock file, no syncs (Finish fsyncs the compacted copy).
  auto env = lmdb::OpenEnv(impl->build_path, MDB_NOLOCK | MDB_NOSYNC | MDB_NOMETASYNC,
                           kBuildMapSize, 0644);
  if (!env) return Err(env.error());
  impl->env = *env;
  int rc = mdb_txn_begin(impl->env, nullptr, 0, &impl->txn);
  if (rc != 0) return Err(lmdb::LmdbError(impl->build_path + ": begin", rc));
  PCRFS_RETURN_ERR_IF_ERROR(lmdb::OpenDbis(impl->txn, MDB_CREATE,
                                           {{lmdb::kEntriesDb, &impl->entries},
                                            {lmdb::kDirentsDb, &impl->dirents},
                                            {lmdb::kRecordsDb, &impl->records},
                                            {lmdb::kMetaDb, &impl->meta}},
                                           impl->build_path));
  if (format >= 3) {
    PCRFS_RETURN_ERR_IF_ERROR(lmdb::OpenDbis(impl->txn, MDB_CREATE,
                                             {{lmdb::kBlocksDb, &impl->blocks}}, impl->build_path));
  }
  PCRFS_RETURN_ERR_IF_ERROR(
      impl->Put(impl->meta, kIndexFormatKey, std::to_string(format), 0, "put meta index_format"));
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

Status IndexWriter::AddBlockCrcs(uint64_t ino, int group, std::span<const uint32_t> masked) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  const std::string what = w.path + ": block CRCs of inode " + std::to_string(ino);
  if (w.format < 3) return Status::InvalidArgument(what + ": index format 2 has none");
  if (ino != w.last_ino || group < 1 || group > kNumGroups || masked.size() < 2) {
    return Status::InvalidArgument(what + ", group " + std::to_string(group) +
                                   ": must follow their entry, for a piece of 2 or more blocks");
  }
  std::string value;
  value.reserve(masked.size() * 4);
  for (uint32_t crc : masked) PutFixed32(&value, crc);
  const std::string key = BlocksKey(ino, group);
  Status s = w.Put(w.blocks, key, value, MDB_APPEND, "put block CRCs");
  if (s.code() == Status::Code::kAlreadyExists) {
    s = w.Put(w.blocks, key, value, MDB_NOOVERWRITE, "put block CRCs");
  }
  if (!s.ok()) return s;
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
      if (mdb_get(rtxn, meta, &k, &v) == 0) {
        if (auto m = proc::MappingOf(v.mv_data)) {
          map_addr = m->start;
          map_size = m->size;
        }
      }
      mdb_txn_abort(rtxn);
    }
  }
  Mutex trim_mu;
  CondVar trim_cv;
  bool copy_done = false;
  std::thread trimmer([&] {
    MutexLock l(&trim_mu);
    while (map_addr != nullptr &&
           !trim_cv.WaitFor(&trim_mu, std::chrono::milliseconds(20), [&] { return copy_done; })) {
      ::madvise(map_addr, map_size, MADV_DONTNEED);
    }
  });
  // The compacted copy renumbers pages in tree order and omits free pages, so the same entries
  // give the same bytes whatever the history of the build env.
  rc = mdb_env_copyfd2(env, fd->get(), MDB_CP_COMPACT);
  {
    MutexLock l(&trim_mu);
    copy_done = true;
  }
  trim_cv.SignalAll();
  trimmer.join();
  if (rc != 0) return LmdbError("copy " + build_path + " -> " + tmp, rc);
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(tmp, errno);
  const auto lmdb_size = static_cast<uint64_t>(st.st_size);
  PCRFS_RETURN_IF_ERROR(AppendIndexTrailer(fd->get(), lmdb_size, tmp));
  if (::fsync(fd->get()) != 0) return Status::FromErrno("fsync " + tmp, errno);
  fd->Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno("rename " + tmp + " -> " + path, errno);
  }
  PCRFS_RETURN_IF_ERROR(FsyncPath(lmdb::DirName(path)));
  mdb_env_close(env);
  env = nullptr;
  RemoveBuildFiles(build_path);
  return Status::OK();
}

}  // namespace pcrfs::index
