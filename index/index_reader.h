// IndexReader: a store's index, read-only, in either form: format 4 (index.pcri, CompactIndex,
// held in memory) or the LMDB one (formats 2 and 3, index/lmdb/: shard parts the builder wrote
// itself, tests, conversion).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "index/entry.h"
#include "index/file_identity.h"
#include "index/record_info.h"

namespace pcrfs::index {

// Read-only, lock-free access for many threads at once (an LMDB index is LmdbIndexReader's,
// index/lmdb/lmdb_index_reader.h: a short read transaction per call).
class CompactIndex;

// Reads either index form: format 4 (index.pcri, CompactIndex, held in memory) or the LMDB one
// (formats 2 and 3: shard parts the builder wrote itself, tests, conversion).
class IndexReader {
 public:
  // Checks the whole file against its CRC trailer before LMDB sees it (LMDB trusts its pages),
  // unless `verified` is given and the file still has that identity: a process that verified
  // it moments ago (the daemon checks the store before mounting, then reopens it after
  // forking) need not read it all again.
  static Result<std::unique_ptr<IndexReader>> Open(const std::string& path,
                                                   const FileIdentity* verified = nullptr);
  // index.pcri only: the file must be format 4 (its magic), else Corruption "bad magic": a store
  // cannot hand an LMDB image to liblmdb under that name.
  static Result<std::unique_ptr<IndexReader>> OpenCompact(const std::string& path);
  // A format 4 index parsed already (CompactIndex::Parse); identity is that of its file.
  static std::unique_ptr<IndexReader> FromCompact(std::unique_ptr<CompactIndex> compact,
                                                  const FileIdentity& identity);
  ~IndexReader();
  IndexReader(const IndexReader&) = delete;
  IndexReader& operator=(const IndexReader&) = delete;

  // Format 4 entries hold piece lengths only (Entry::resolved_groups; Store::ResolvePieces).
  Result<Entry> Get(uint64_t ino) const;
  // NotFound if parent has no child called name.
  Result<uint64_t> Lookup(uint64_t parent, std::string_view name) const;
  // '/'-separated, relative to the root; "" or "/" is the root.
  Result<Entry> LookupPath(std::string_view path) const;
  // Calls fn for the children of dir in name order, starting at child index `start`, until fn
  // returns false.
  Status List(const Entry& dir, uint64_t start, const std::function<bool(const Entry&)>& fn) const;
  // The same children, from the dirents alone: name, inode and kind, about 45 bytes of index
  // per child instead of a whole entry (~160). What a plain readdir needs. `start_name`, when
  // not empty, is the name of child `start` (a caller continuing a listing knows it) and saves
  // looking it up; a wrong one is detected and ignored. `name` is valid during the call only.
  using DirEntry = index::DirEntry;  // index/entry.h
  Status ListNames(const Entry& dir, uint64_t start, std::string_view start_name,
                   const std::function<bool(const DirEntry&)>& fn) const;
  Result<RecordInfo> GetRecord(uint32_t id) const;
  // The index format (2, 3 or 4). Format 2 has no block CRCs; format 4 may lack some (NotFound).
  int format() const;
  // The masked CRC32C of checksum block `block` of piece `group` of inode `ino`: NotFound in a
  // format 2 index; Corruption if the index has no such block for a piece that needs one.
  Result<uint32_t> GetBlockCrc(uint64_t ino, int group, uint64_t block) const;
  Result<std::string> GetMeta(std::string_view key) const;
  uint64_t NumEntries() const;
  // The number of records the index describes (the records table's size).
  uint64_t NumRecords() const;
  // Heap bytes a format 4 index holds (CompactIndex::MemoryBytes); 0 for an LMDB one (mapped:
  // page cache, ReleaseMappedPages).
  uint64_t MemoryBytes() const;
  // The identity of the file that was opened (and verified).
  const FileIdentity& identity() const;
  // The index is memory-mapped, so every page a lookup touched counts in the process's RSS
  // although it is only page cache. This unmaps them all (the page cache keeps them; the next
  // access maps a page again, a minor fault). Safe while other threads read.
  void ReleaseMappedPages() const;
  // Keeps that footprint bounded: every 16 calls, if proc::ResidentFileBytes() is over `bytes`, the
  // index's pages are released. 0 (the default) never releases.
  void SetMappedBudget(uint64_t bytes) const;

 private:
  struct Impl;
  explicit IndexReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// RecordBytesAtLevel summed over every record of the index: level k's bytes in a remote store's
// caches (the daemon's cache sizing and -o disk_cache=auto, pcr inspect's "record bytes"). More
// than the manifest's level_bytes (the bytes served) by the records' headers and tables, less by
// the 2-byte EOI of each JPEG, which is stored nowhere. One index lookup per record. Errors: a
// record the index cannot return.
Result<uint64_t> StoreBytesAtLevel(const IndexReader& index, int k);

}  // namespace pcrfs::index
