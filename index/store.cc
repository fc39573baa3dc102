#include "index/store.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/level_walk.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/lmdb_pages.h"
#include "index/manifest_check.h"
#include "index/record_reader.h"

namespace pcrfs::index {
namespace {

std::string U(uint64_t v) { return std::to_string(v); }

// Cheap consistency check when a record is first opened: header and footer agree with the
// index. The pieces themselves are checked against their CRCs whenever they are read.
// prefetch_tables: ask for the tables with the header although they are not checked here (an
// index of format 4 needs them for the first read: Store::ResolvePieces), one round trip.
Status CheckRecordHeader(const SourceFile& record, const RecordInfo& info, bool check_tables,
                         bool prefetch_tables) {
  const RandomAccessFile& f = record.file();
  const auto prefetch = [&record](uint64_t offset, uint64_t n) {
    if (record.speculation() != nullptr) record.speculation()->Prefetch(offset, n);
  };
  auto bad = [&f](const std::string& what) {
    return Status::Corruption(f.name() + ": record does not match the index: " + what);
  };
  if (f.Size() != info.file_size) {
    return bad("file has " + U(f.Size()) + " bytes, index says " + U(info.file_size));
  }
  if (f.Size() < kRecordHeaderSize + kRecordFooterSize) return bad("file too small");
  // Everything checked below is asked for at once: the header (and tables: all bytes before
  // the data) and the footer. A remote record then costs one round trip, not three in a row.
  if (!check_tables && !prefetch_tables) {
    prefetch(0, kRecordHeaderSize);
  } else if (info.data_offset <= f.Size()) {
    prefetch(0, info.data_offset);
  }
  prefetch(f.Size() - kRecordFooterSize, kRecordFooterSize);
  uint8_t bytes[RecordHeader::kEncodedLength];
  PCRFS_RETURN_IF_ERROR(f.Read(0, sizeof(bytes), bytes));
  auto h = RecordHeader::DecodeFrom(bytes);
  if (!h) return bad(h.error().message());
  if (h->version != kRecordFormatVersion) return bad("record format version");
  if (h->num_images != info.num_images) return bad("number of images");
  if (h->data_offset != info.data_offset) return bad("data offset");
  if (h->file_size != info.file_size) return bad("file size in header");
  // The tables are not needed to read (the index holds every piece's place and CRC), but a
  // damaged table means a damaged record: check its CRC so the damage is reported at once
  // (unless the caller would rather not fetch them: StoreOptions::check_tables).
  const uint64_t table_size = h->table_size;
  if (info.data_offset < kRecordHeaderSize || table_size < 4 ||
      table_size > info.data_offset - kRecordHeaderSize || info.data_offset > f.Size()) {
    return bad("table size");
  }
  if (check_tables) {
    std::vector<uint8_t> tables(static_cast<size_t>(table_size));
    PCRFS_RETURN_IF_ERROR(f.Read(kRecordHeaderSize, tables.size(), tables.data()));
    if (crc32c::Unmask(DecodeFixed32(tables.data() + table_size - 4)) !=
        crc32c::Value(tables.data(), table_size - 4)) {
      return bad("table checksum mismatch");
    }
  }
  uint8_t footer_bytes[RecordFooter::kEncodedLength];
  PCRFS_RETURN_IF_ERROR(f.Read(f.Size() - kRecordFooterSize, sizeof(footer_bytes), footer_bytes));
  auto footer = RecordFooter::DecodeFrom(footer_bytes);
  if (!footer || footer->file_size != f.Size()) return bad("bad footer");
  return Status::OK();
}

// Checks that `path` inside a store is a regular file reached without a symlink (O_NOFOLLOW):
// the store must not make pcrfs read files outside it.
Status CheckNoFollow(const std::string& path, const std::string& what) {
  auto fd = OpenFile(path, O_RDONLY | O_NOFOLLOW);
  if (!fd) {
    if (fd.error().ToErrno() == ELOOP) {
      return Status::Corruption(path + ": " + what + " is a symbolic link (pcrfs follows no " +
                                "links inside a store)");
    }
    return fd.error();
  }
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(path, errno);
  if (!S_ISREG(st.st_mode))
    return Status::Corruption(path + ": " + what + " is not a regular file");
  return Status::OK();
}

Result<std::unique_ptr<IndexReader>> OpenStoreIndex(const std::string& dir) {
  struct stat st;
  const std::string compact_path = dir + "/" + kCompactIndexFile;
  if (::lstat(compact_path.c_str(), &st) == 0 || errno != ENOENT) {
    return IndexReader::OpenCompact(compact_path);  // refuses a symlink and any non-format-4 file
  }
  const std::string lmdb_path = dir + "/" + kIndexFile;
  if (::lstat(lmdb_path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return Err(Status::Corruption(dir + ": damaged store: " + kCompactIndexFile + " is missing"));
    }
    return Err(Status::FromErrno(lmdb_path, errno));
  }
  if (Status s = CheckNoFollow(lmdb_path, "the index"); !s.ok()) return Err(s);
  // An older store: its index.lmdb converted in memory through every check of format 4.
  auto source = LmdbSourceOf(lmdb_path);
  if (!source) return Err(source.error());
  std::unique_ptr<CompactIndex> compact;  // the converter's own check, parsed once
  auto bytes = ConvertLmdbIndex(lmdb_path, *source, &compact);
  if (!bytes) return Err(bytes.error());
  FileIdentity identity;
  if (::stat(lmdb_path.c_str(), &st) == 0) {
    identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint64_t>(st.st_size),
                st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
  }
  return IndexReader::FromCompact(std::move(compact), identity);
}

}  // namespace

Result<LmdbRecordSource> LmdbSourceOf(const std::string& lmdb_path) {
  // Never liblmdb, which trusts its pages: the file's bytes, its trailer's CRC checked (an
  // accident), then every page read with bounds checks (index/lmdb/lmdb_pages.h: an author).
  FileIdentity identity;
  auto lmdb_size = CheckIndexFile(lmdb_path, nullptr, &identity);
  if (!lmdb_size) return Err(lmdb_size.error());
  auto bytes = ReadWholeFile(lmdb_path, identity.size);
  if (!bytes) return Err(bytes.error());
  if (bytes->size() < *lmdb_size) {
    return Err(
        Status::Corruption(lmdb_path + ": damaged or not a pcrfs index: changed while read"));
  }
  bytes->resize(static_cast<size_t>(*lmdb_size));  // the LMDB image, without its trailer
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(*bytes));
  return LmdbRecordSource(
      [owned, lmdb_path](std::string_view db, const LmdbRecordFn& fn) -> Status {
        Status s = ForEachLmdbRecord(*owned, db, fn);
        if (s.code() == Status::Code::kCorruption) {
          return Status::Corruption(lmdb_path + ": damaged or not a pcrfs index: " + s.message());
        }
        return s;
      });
}

Result<std::unique_ptr<PosixRandomAccessFile>> OpenRecordFileNoFollow(const std::string& path) {
  auto file = PosixRandomAccessFile::Open(path, O_NOFOLLOW);
  if (!file && file.error().ToErrno() == ELOOP) {
    return Err(Status::Corruption(path + ": record file is a symbolic link (pcrfs follows no " +
                                  "links inside a store)"));
  }
  return file;
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, StoreOptions options) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Err(Status::NotFound(dir + ": no such directory"));
    return Err(Status::FromErrno(dir, errno));
  }
  if (!S_ISDIR(st.st_mode)) return Err(Status::InvalidArgument(dir + ": not a directory"));

  const std::string manifest_path = dir + "/" + kManifestFile;
  if (::lstat(manifest_path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return Err(Status::InvalidArgument(dir + ": not a pcrfs store (no " + kManifestFile + ")"));
    }
    return Err(Status::FromErrno(manifest_path, errno));
  }
  if (Status s = CheckNoFollow(manifest_path, "the manifest"); !s.ok()) return Err(s);
  auto text = ReadWholeFile(manifest_path, kMaxManifestBytes);
  if (!text) return Err(text.error());
  auto manifest =
      Manifest::FromJson(std::string(reinterpret_cast<const char*>(text->data()), text->size()));
  if (!manifest) {
    const Status& e = manifest.error();
    if (e.code() == Status::Code::kNotSupported) {
      return Err(Status::NotSupported(dir + ": " + e.message()));
    }
    return Err(Status::Corruption(manifest_path + ": " + e.message()));
  }

  const std::string records_path = dir + "/" + kRecordsDir;
  if (::lstat(records_path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Err(Status::Corruption(records_path + (S_ISLNK(st.st_mode)
                                                      ? ": is a symbolic link (pcrfs follows no "
                                                        "links inside a store)"
                                                      : ": not a directory")));
  }

  std::shared_ptr<const IndexReader> index = std::move(options.parsed_index);
  if (index == nullptr) {
    // A store's index is a stranger's input: whatever it claims, opening it ends in a message.
    try {
      auto opened = OpenStoreIndex(dir);
      if (!opened) return Err(opened.error());
      index = std::move(*opened);
    } catch (const std::bad_alloc&) {
      return Err(Status::ResourceExhausted(dir + ": the index does not fit in memory"));
    }
  }

  // Before anyone sizes memory or loops by a number of the manifest.
  if (Status s = CheckManifest(manifest_path, *manifest, *index); !s.ok()) return Err(s);

  std::unique_ptr<Store> store(new Store());
  store->dir_ = dir;
  store->options_ = std::move(options);
  if (!store->options_.table_folder.empty()) {
    // Without the file (a read-only or full folder) the tables stay in memory, as for a local
    // store: slower to fill the heap, never a failed read.
    auto table_file = TableFile::Create(store->options_.table_folder);
    if (table_file) store->table_file_ = std::move(*table_file);
  }
  if (!store->options_.open_record) {
    // Records are opened relative to records/ as opened now: a store renamed or moved while
    // open (`mv STORE OTHER` under a mount) is read as it was, and a store rebuilt at its path
    // is never mixed into this one (ChangedSinceOpen tells the two apart from damage).
    auto records = std::make_shared<UniqueFd>(
        ::open(records_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat rst;
    if (records->get() >= 0 && ::fstat(records->get(), &rst) == 0) {
      store->records_dev_ = rst.st_dev;
      store->records_ino_ = rst.st_ino;
      store->records_fd_ = records;
    }
    store->options_.open_record = [records](const std::string& path,
                                            uint64_t) -> Result<SourceFile> {
      auto file = records->get() < 0
                      ? OpenRecordFileNoFollow(path)
                      : PosixRandomAccessFile::OpenAt(
                            records->get(), path.substr(path.rfind('/') + 1), path, O_NOFOLLOW);
      if (!file && file.error().ToErrno() == ELOOP) {
        return Err(Status::Corruption(path + ": record file is a symbolic link (pcrfs follows " +
                                      "no links inside a store)"));
      }
      if (!file) return Err(file.error());
      return SourceFile::Speculative(std::shared_ptr<PosixRandomAccessFile>(std::move(*file)));
    };
  }
  store->manifest_ = std::move(*manifest);
  store->index_ = std::move(index);
  return store;
}

Result<Store::OpenRecordFile> Store::GetRecordFile(uint32_t id) const {
  std::promise<Result<OpenRecordFile>> mine;
  std::shared_future<Result<OpenRecordFile>> other;
  {
    MutexLock lock(&mu_);
    auto it = records_.find(id);
    if (it != records_.end()) return it->second;
    auto opening = opening_.find(id);
    if (opening != opening_.end()) {
      other = opening->second;
    } else {
      opening_.emplace(id, mine.get_future().share());
    }
  }
  if (other.valid()) return other.get();
  // Open outside the lock: a slow disk or network must not block readers of records already
  // open. Concurrent callers for this record wait above for this result.
  Result<OpenRecordFile> r = Err(Status::IOError(dir_ + "/" + RecordFileName(id) + ": not opened"));
  try {
    r = OpenRecordFileNow(id);
  } catch (const std::exception& e) {  // (bad_alloc) waiters must not wait forever
    r = Err(Status::IOError(dir_ + "/" + RecordFileName(id) + ": " + e.what()));
  }
  {
    MutexLock lock(&mu_);
    if (r) records_.emplace(id, *r);
    opening_.erase(id);  // an error is not kept: the next caller tries again
  }
  mine.set_value(r);
  return r;
}

Result<Store::OpenRecordFile> Store::OpenRecordFileNow(uint32_t id) const {
  auto info = index_->GetRecord(id);
  if (!info) {
    if (info.error().IsNotFound()) {
      return Err(Status::Corruption(dir_ + ": record " + U(id) + " is not in the index"));
    }
    return Err(info.error());
  }
  auto file = options_.open_record(dir_ + "/" + RecordFileName(id), info->file_size);
  if (!file) {
    if (file.error().IsNotFound()) {
      if (ChangedSinceOpen()) {
        return Err(Status::IOError(
            dir_ + ": changed since it was opened (rebuilt, replaced or removed: " +
                RecordFileName(id) + " is gone, which is no damage); open it again (a " +
                "mount: unmount and mount it again) to read the new store",
            ESTALE));
      }
      return Err(Status::Corruption(dir_ + "/" + RecordFileName(id) + ": record file is missing"));
    }
    return Err(file.error());
  }
  // A mismatch is remembered, not fatal: reads use only the index's piece offsets and check
  // each piece's CRC, so a damaged header or footer costs no file, and a truncated record
  // costs only the files whose pieces lie past its new end.
  const bool prefetch_tables = index_->format() >= kCompactIndexFormat;
  Status header = CheckRecordHeader(*file, *info, options_.check_tables, prefetch_tables);
  // A remote failure to read (a timeout, a 503, a refusal: no Corruption, no local EIO) says
  // nothing of the record: the open fails, is not kept, and the next read tries again; no
  // cached byte is dropped for it. A record the origin does not have (404) is missing: damage.
  if (header.IsNotFound()) {
    header = Status::Corruption(header.message() + ": record file is missing");
  }
  auto transient = [](const Status& s) {
    return !s.ok() && !s.IsCorruption() && s.sys_errno() != EIO;
  };
  if (transient(header)) return Err(header);
  const SpeculationSource* source = file->speculation();
  if (!header.ok() && info->file_size >= kRecordFooterSize && source != nullptr) {
    // Bytes a cache kept (a remote store's disk cache) may be the damaged ones: drop them and
    // check the origin's once more.
    const bool head = source->DropCached(0, info->data_offset);
    const bool foot = source->DropCached(info->file_size - kRecordFooterSize, kRecordFooterSize);
    if (head || foot)
      header = CheckRecordHeader(*file, *info, options_.check_tables, prefetch_tables);
    if (transient(header)) return Err(header);
  }
  return OpenRecordFile{std::move(*file), *info, std::move(header)};
}

bool Store::ChangedSinceOpen() const {
  if (records_fd_ == nullptr) return false;
  struct stat st;
  // Removed (the rename of a rebuild, then the old store's removal) ...
  if (::fstat(records_fd_->get(), &st) != 0 || st.st_nlink == 0) return true;
  // ... or something else at the path now: another store, or nothing.
  if (::stat((dir_ + "/" + kRecordsDir).c_str(), &st) != 0) return true;
  return st.st_dev != records_dev_ || st.st_ino != records_ino_;
}

Result<SourceFile> Store::OpenRecord(uint32_t id, Status* header_problem) const {
  auto r = GetRecordFile(id);
  if (!r) return Err(r.error());
  if (header_problem != nullptr) *header_problem = r->header_status;
  return r->file;
}

Result<std::shared_ptr<const RecordTable>> Store::GetRecordTable(uint32_t id, int groups) const {
  for (;;) {
    std::promise<TableResult> promise;
    {
      MutexLock lock(&mu_);
      auto it = table_of_.find(id);
      if (it != table_of_.end()) {
        tables_.splice(tables_.end(), tables_, it->second);  // most recently used last
        if (it->second->second->groups() >= groups) return it->second->second;
        // Parsed for lower levels only: parsed again below, with the groups this read needs.
      }
      // One reader parses a record's table; the others wait for it (16 readers of one cold
      // record would otherwise each hold a copy of its tables section).
      auto loading = table_loading_.find(id);
      if (loading != table_loading_.end()) {
        std::shared_future<TableResult> waiting = loading->second;
        lock.Unlock();
        TableResult r = waiting.get();
        if (!r.has_value() || (*r)->groups() >= groups) return r;
        continue;  // that parse kept fewer groups than this read needs
      }
      table_loading_.emplace(id, promise.get_future().share());
    }
    TableResult result = LoadRecordTable(id, groups);
    {
      MutexLock lock(&mu_);
      table_loading_.erase(id);
      if (result.has_value()) {
        if (auto old = table_of_.find(id); old != table_of_.end()) {  // fewer groups
          table_bytes_ -= old->second->second->MemoryBytes();
          table_file_bytes_ -= old->second->second->FileBytes();
          tables_.erase(old->second);
          table_of_.erase(old);
        }
        tables_.emplace_back(id, *result);
        table_of_[id] = std::prev(tables_.end());
        table_bytes_ += (*result)->MemoryBytes();
        table_file_bytes_ += (*result)->FileBytes();
        while (tables_.size() > 1 &&
               (table_bytes_ > kMaxTableBytes || table_file_bytes_ > kMaxTableFileBytes)) {
          table_bytes_ -= tables_.front().second->MemoryBytes();
          table_file_bytes_ -= tables_.front().second->FileBytes();
          table_of_.erase(tables_.front().first);
          tables_.pop_front();
        }
      }
    }
    promise.set_value(result);
    return result;
  }
}

Store::TableResult Store::LoadRecordTable(uint32_t id, int groups) const {
  auto rec = GetRecordFile(id);
  if (!rec) return Err(rec.error());
  const RandomAccessFile& f = rec->file.file();
  const RecordInfo& info = rec->info;
  auto bad = [&f](const std::string& what) {
    return Err(Status::Corruption(f.name() + ": record table unusable: " + what));
  };
  // Header (magic, CRC), then the tables section and its CRC; the footer is not needed.
  uint8_t hb[RecordHeader::kEncodedLength];
  if (f.Size() < sizeof(hb)) return bad("file too small");
  PCRFS_RETURN_ERR_IF_ERROR(f.Read(0, sizeof(hb), hb));
  auto h = RecordHeader::DecodeFrom(hb);
  if (!h) return bad(h.error().message());
  if (h->version != kRecordFormatVersion || h->num_images != info.num_images ||
      h->data_offset != info.data_offset ||
      h->table_size != RecordTableSize(h->num_images, h->names_size) ||
      RecordDataOffset(h->table_size) != info.data_offset ||
      h->table_size > f.Size() - kRecordHeaderSize) {
    return bad("header does not match the index");
  }
  if (h->table_size > kMaxTableSection) {
    return bad("tables section of " + U(h->table_size) + " bytes (at most " + U(kMaxTableSection) +
               ")");
  }
  std::vector<uint8_t> tables(static_cast<size_t>(h->table_size));
  PCRFS_RETURN_ERR_IF_ERROR(f.Read(kRecordHeaderSize, tables.size(), tables.data()));
  if (crc32c::Unmask(DecodeFixed32(tables.data() + tables.size() - 4)) !=
      crc32c::Value(tables.data(), tables.size() - 4)) {
    return bad("table checksum mismatch");
  }
  auto table = std::make_shared<RecordTable>(h->num_images, info.group_offset, groups);
  for (uint32_t i = 0; i < h->num_images; ++i) {
    auto img = RecordImageEntry::DecodeFrom(tables.data() + kRecordGroupTableSize +
                                            uint64_t{i} * kRecordImageEntrySize);
    if (!img) return bad("slot " + U(i) + ": " + img.error().message());
    table->Add(i, static_cast<EntryKind>(img->kind), img->length, img->masked_crc);
  }
  // Kept in memory when the file fails (a full disk): the read goes on.
  if (table_file_ != nullptr) (void)table->MoveTo(table_file_);
  return std::shared_ptr<const RecordTable>(std::move(table));
}

uint64_t Store::TableMemoryBytes() const {
  MutexLock l(&mu_);
  return table_bytes_;
}

uint64_t Store::TableFileBytes() const {
  MutexLock l(&mu_);
  return table_file_bytes_;
}

Status Store::ResolvePieces(Entry* e, int groups) const {
  groups = std::clamp(groups, 1, kNumGroups);
  if (e->PiecesResolved(groups)) return Status::OK();
  auto table = GetRecordTable(e->record, groups);
  if (!table) return table.error();
  // Named only when something disagrees: this runs on every FUSE read.
  const auto file = [&] { return dir_ + "/" + RecordFileName(e->record); };
  const RecordTable& t = **table;
  if (e->slot >= t.size()) {
    return Status::Corruption(file() + ": no slot " + U(e->slot) + " for entry " + U(e->ino));
  }
  if (t.kind(e->slot) != e->kind) {
    return Status::Corruption(file() + ": slot " + U(e->slot) +
                              " is not of the kind the index says (\"" + e->name + "\")");
  }
  PieceRefs p = e->pieces;
  PCRFS_RETURN_IF_ERROR(t.Pieces(e->slot, &p));
  for (size_t g = 0; g < static_cast<size_t>(t.groups()); ++g) {
    if (p[g].length != e->pieces[g].length || p[g].offset == UINT64_MAX) {
      return Status::Corruption(file() + ": slot " + U(e->slot) + " (\"" + e->name +
                                "\"): piece of group " + U(g + 1) +
                                " disagrees with the index or lies outside its region");
    }
  }
  e->pieces = p;
  e->resolved_groups = t.groups();
  return Status::OK();
}

Status Store::ReadFile(const Entry& e, int k, std::vector<uint8_t>* out) const {
  out->clear();
  if (!e.is_dir() && k >= 1 && k <= kNumGroups) {
    // Bounded by the index, which is checked: the size of what ReadFileTo will hand over.
    out->reserve(static_cast<size_t>(std::min<uint64_t>(e.SizeAtLevel(k), uint64_t{1} << 30)));
  }
  return ReadFileTo(e, k, [out](std::span<const uint8_t> bytes) {
    out->insert(out->end(), bytes.begin(), bytes.end());
    return Status::OK();
  });
}

Status Store::ReadFileTo(const Entry& e, int k, const ByteSink& sink) const {
  return ReadFileTo(e, k, SourceFile(), sink);
}

Status Store::ReadFileTo(const Entry& unresolved, int k, const SourceFile& record,
                         const ByteSink& sink) const {
  Entry resolved_copy;
  const Entry* ep = &unresolved;
  if (!unresolved.PiecesResolved(k)) {
    resolved_copy = unresolved;
    PCRFS_RETURN_IF_ERROR(ResolvePieces(&resolved_copy, k));
    ep = &resolved_copy;
  }
  const Entry& e = *ep;
  if (e.is_dir()) {
    return Status::InvalidArgument(dir_ + ": inode " + U(e.ino) + " is a directory");
  }
  if (k < 1 || k > kNumGroups) {
    return Status::InvalidArgument(dir_ + ": level " + std::to_string(k) + " is not in 1.." +
                                   std::to_string(kNumGroups));
  }
  auto rec = GetRecordFile(e.record);
  if (!rec) return rec.error();
  const SourceFile& file = record.has_file() ? record : rec->file;
  const LevelPlan plan(e.kind, e.pieces, k);
  for (int g = 0; g < plan.pieces_used(); ++g) {
    const auto gi = static_cast<size_t>(g);
    const PieceRef& p = e.pieces[gi];
    const uint64_t begin = rec->info.group_offset[gi];
    const uint64_t end = rec->info.group_offset[gi + 1];
    if (p.offset < begin || p.offset > end || p.length > end - p.offset) {
      return Status::Corruption(rec->file.file().name() + ": entry " + U(e.ino) + " \"" + e.name +
                                "\" (slot " + U(e.slot) + "): piece of group " + U(gi + 1) + " [" +
                                U(p.offset) + ", +" + U(p.length) + ") lies outside its region [" +
                                U(begin) + ", " + U(end) + ")");
    }
  }
  std::vector<uint8_t> buf;
  return WalkLevel(
      plan,
      [&](const LevelSpan& s, uint64_t b) -> Result<std::span<const uint8_t>> {
        const auto n = static_cast<size_t>(ChecksumBlockLength(s.piece.length, b));
        if (buf.size() < n) buf.resize(n);
        PCRFS_RETURN_ERR_IF_ERROR(ReadBlock(file, e, s.group, b, buf.data()));
        return std::span<const uint8_t>(buf.data(), n);
      },
      [&](uint64_t, std::span<const uint8_t> bytes) { return sink(bytes); });
}

Result<uint32_t> Store::BlockCrc(const Entry& e, int group, uint64_t block) const {
  if (e.is_dir() || group < 1 || group > kNumGroups) {
    return Err(Status::InvalidArgument(dir_ + ": no piece " + std::to_string(group) + " in inode " +
                                       U(e.ino)));
  }
  if (!e.PiecesResolved(group)) {
    Entry copy = e;
    PCRFS_RETURN_ERR_IF_ERROR(ResolvePieces(&copy, group));
    return BlockCrc(copy, group, block);
  }
  const PieceRef& p = e.pieces[static_cast<size_t>(group - 1)];
  if (!HasBlockCrcs(p.length)) return p.masked_crc;
  if (index_->format() >= 3) {
    auto crc = index_->GetBlockCrc(e.ino, group, block);
    // Format 4 may lack them (converted from format 2): derived below, as for format 2.
    if (crc || index_->format() < 4 || !crc.error().IsNotFound()) return crc;
  }
  const DerivedKey key{e.record, e.slot, group};
  std::shared_ptr<const std::vector<uint32_t>> crcs;
  {
    MutexLock lock(&mu_);
    auto it = derived_crcs_.find(key);
    if (it != derived_crcs_.end()) crcs = it->second;
  }
  if (!crcs) {
    // An older store: read the whole piece once, check it against its CRC, and remember the
    // CRC of each block, so later reads of this piece check one block each.
    auto rec = GetRecordFile(e.record);
    if (!rec) return Err(rec.error());
    auto computed = ComputeBlockCrcs(rec->file.file(), p);
    if (!computed) return Err(computed.error());
    crcs = std::make_shared<const std::vector<uint32_t>>(std::move(*computed));
    MutexLock lock(&mu_);
    if (derived_crcs_.size() >= kMaxDerived) derived_crcs_.clear();
    derived_crcs_.emplace(key, crcs);
  }
  if (block >= crcs->size()) {
    return Err(Status::InvalidArgument(dir_ + ": no block " + U(block) + " in inode " + U(e.ino)));
  }
  return (*crcs)[static_cast<size_t>(block)];
}

Status Store::ReadBlock(const SourceFile& file, const Entry& e, int group, uint64_t block,
                        uint8_t* dst) const {
  if (!e.PiecesResolved(group)) {
    Entry copy = e;
    PCRFS_RETURN_IF_ERROR(ResolvePieces(&copy, group));
    return ReadBlock(file, copy, group, block, dst);
  }
  auto crc = BlockCrc(e, group, block);
  if (!crc) return crc.error();
  return ReadPieceBlock(file.file(), e.pieces[static_cast<size_t>(group - 1)], group, block, *crc,
                        dst, file.speculation());
}

}  // namespace pcrfs::index
