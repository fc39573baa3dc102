// IndexReader (index/index_reader.h): a format 4 index (CompactIndex, in memory) or an LMDB
// one (LmdbIndexReader, index/lmdb/), behind one set of calls.
#include "index/index_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/lmdb/lmdb_index_reader.h"

namespace pcrfs::index {

struct IndexReader::Impl {
  std::string path;
  std::unique_ptr<CompactIndex> compact;  // format 4
  std::unique_ptr<LmdbIndexReader> lmdb;  // formats 2 and 3
  int format = 0;
  uint64_t num_entries = 0;
  uint64_t num_records = 0;
  FileIdentity identity;
};

IndexReader::IndexReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IndexReader::~IndexReader() = default;

Result<std::unique_ptr<IndexReader>> IndexReader::OpenCompact(const std::string& path) {
  // Never liblmdb: CompactIndex refuses a symlink and any file without format 4's magic (an
  // LMDB image renamed by a store's author is "bad magic", never mapped).
  auto compact = CompactIndex::Open(path);
  if (!compact) return Err(compact.error());
  FileIdentity identity;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                static_cast<uint64_t>(st.st_size),
                st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
  }
  return FromCompact(std::move(*compact), identity);
}

Result<std::unique_ptr<IndexReader>> IndexReader::Open(const std::string& path,
                                                       const FileIdentity* verified) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  {
    // Format 4 starts with its magic; the LMDB form with LMDB's meta page.
    auto fd = OpenFile(path, O_RDONLY | O_NOFOLLOW);
    char magic[8] = {};
    if (fd && ::pread(fd->get(), magic, sizeof(magic), 0) == static_cast<ssize_t>(sizeof(magic)) &&
        std::memcmp(magic, kCompactIndexMagic, sizeof(magic)) == 0) {
      struct stat st;
      if (::fstat(fd->get(), &st) == 0) {
        impl->identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                          static_cast<uint64_t>(st.st_size),
                          st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                          st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
      }
      fd->Reset();
      auto compact = CompactIndex::Open(path);
      if (!compact) return Err(compact.error());
      return FromCompact(std::move(*compact), impl->identity);
    }
    if (!fd && fd.error().ToErrno() == ELOOP) {
      return Err(Status::Corruption(path + ": the index is a symbolic link (pcrfs follows no " +
                                    "links inside a store)"));
    }
  }
  // Verified whole before LMDB maps it (LmdbIndexReader::Open).
  auto lmdb = LmdbIndexReader::Open(path, verified);
  if (!lmdb) return Err(lmdb.error());
  impl->format = (*lmdb)->format();
  impl->num_entries = (*lmdb)->NumEntries();
  impl->num_records = (*lmdb)->NumRecords();
  impl->identity = (*lmdb)->identity();
  impl->lmdb = std::move(*lmdb);
  return std::unique_ptr<IndexReader>(new IndexReader(std::move(impl)));
}

std::unique_ptr<IndexReader> IndexReader::FromCompact(std::unique_ptr<CompactIndex> compact,
                                                      const FileIdentity& identity) {
  auto impl = std::make_unique<Impl>();
  impl->path = compact->name();
  impl->format = kCompactIndexFormat;
  impl->num_entries = compact->NumEntries();
  impl->num_records = compact->NumRecords();
  impl->identity = identity;
  impl->compact = std::move(compact);
  return std::unique_ptr<IndexReader>(new IndexReader(std::move(impl)));
}

Result<Entry> IndexReader::Get(uint64_t ino) const {
  if (impl_->compact) return impl_->compact->Get(ino);
  return impl_->lmdb->Get(ino);
}

Result<uint64_t> IndexReader::Lookup(uint64_t parent, std::string_view name) const {
  if (impl_->compact) return impl_->compact->Lookup(parent, name);
  return impl_->lmdb->Lookup(parent, name);
}

Result<Entry> IndexReader::LookupPath(std::string_view path) const {
  if (impl_->compact) {
    const CompactIndex& c = *impl_->compact;
    auto cur = c.Get(kRootIno);
    size_t pos = 0;
    while (cur && pos < path.size()) {
      size_t slash = path.find('/', pos);
      if (slash == std::string_view::npos) slash = path.size();
      std::string_view name = path.substr(pos, slash - pos);
      pos = slash + 1;
      if (name.empty()) continue;
      if (!cur->is_dir()) {
        return Err(Status::NotFound(impl_->path + ": \"" + std::string(path) +
                                    "\": a component is not a directory"));
      }
      auto child = c.Lookup(cur->ino, name);
      if (!child) {
        if (child.error().IsNotFound()) {
          return Err(
              Status::NotFound(impl_->path + ": no such path \"" + std::string(path) + "\""));
        }
        return Err(child.error());
      }
      cur = c.Get(*child);
    }
    return cur;
  }
  return impl_->lmdb->LookupPath(path);
}

Status IndexReader::List(const Entry& dir, uint64_t start,
                         const std::function<bool(const Entry&)>& fn) const {
  if (impl_->compact) return impl_->compact->List(dir, start, fn);
  return impl_->lmdb->List(dir, start, fn);
}

Status IndexReader::ListNames(const Entry& dir, uint64_t start, std::string_view start_name,
                              const std::function<bool(const DirEntry&)>& fn) const {
  if (impl_->compact) {
    return impl_->compact->List(dir, start, [&](const Entry& e) {
      return fn(DirEntry{e.name, e.ino, e.kind});
    });
  }
  return impl_->lmdb->ListNames(dir, start, start_name, fn);
}

Result<RecordInfo> IndexReader::GetRecord(uint32_t id) const {
  if (impl_->compact) return impl_->compact->GetRecord(id);
  return impl_->lmdb->GetRecord(id);
}

int IndexReader::format() const { return impl_->format; }

Result<uint32_t> IndexReader::GetBlockCrc(uint64_t ino, int group, uint64_t block) const {
  if (impl_->format < 3) {
    return Err(Status::NotFound(impl_->path + ": no block CRCs of inode " + std::to_string(ino) +
                                " group " + std::to_string(group)));
  }
  if (impl_->compact) return impl_->compact->GetBlockCrc(ino, group, block);
  return impl_->lmdb->GetBlockCrc(ino, group, block);
}

Result<std::string> IndexReader::GetMeta(std::string_view key) const {
  if (impl_->compact) return impl_->compact->GetMeta(key);
  return impl_->lmdb->GetMeta(key);
}

uint64_t IndexReader::NumEntries() const { return impl_->num_entries; }

uint64_t IndexReader::NumRecords() const { return impl_->num_records; }

uint64_t IndexReader::MemoryBytes() const {
  return impl_->compact ? impl_->compact->MemoryBytes() : 0;
}

const FileIdentity& IndexReader::identity() const { return impl_->identity; }

void IndexReader::ReleaseMappedPages() const {
  if (impl_->lmdb) impl_->lmdb->ReleaseMappedPages();
}

void IndexReader::SetMappedBudget(uint64_t bytes) const {
  if (impl_->lmdb) impl_->lmdb->SetMappedBudget(bytes);
}

Result<uint64_t> StoreBytesAtLevel(const IndexReader& index, int k) {
  uint64_t bytes = 0;
  for (uint64_t id = 0; id < index.NumRecords(); ++id) {
    auto info = index.GetRecord(static_cast<uint32_t>(id));
    if (!info) return Err(info.error());
    bytes += RecordBytesAtLevel(*info, k);
  }
  return bytes;
}

}  // namespace pcrfs::index
