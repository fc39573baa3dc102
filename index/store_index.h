// The LMDB index of a store (one file, MDB_NOSUBDIR). Named databases:
//   entries:  inode (8 bytes, big-endian)            -> EncodeEntry(entry)
//   dirents:  parent inode (8 bytes BE) + name bytes  -> child inode (8 bytes BE) + kind (u8)
//   records:  record id (4 bytes BE)                  -> encoded RecordInfo
//   meta:     key string                              -> value string
//   blocks:   inode (8 bytes BE) + group (u8)          -> masked CRC32C (u32 LE) per checksum
//             block of that piece, for pieces longer than kChecksumBlockSize (index format 3)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "index/entry.h"
#include "index/record_format.h"

namespace pcrfs::index {

struct RecordInfo {
  uint32_t id = 0;
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  std::array<uint64_t, kNumGroups + 1> group_offset{};
  uint32_t num_images = 0;
};

// Record file name inside the store, relative: "records/00000042.pcr".
std::string RecordFileName(uint32_t id);

// The bytes of record `r` that reading level k (1..10; clamped) of all its files reads: the
// prefix [0, group_offset[k]) (header, tables and group regions 1..k: a format 4 index holds no
// piece CRCs, so the tables are read too) and the 16-byte footer, which opening the record reads.
// What a remote store's range cache holds of the record once level k of every file in it was
// read; level 10 is the whole file.
uint64_t RecordBytesAtLevel(const RecordInfo& r, int k);

// Builds a fresh index in one write transaction. Entries must be added in increasing inode
// order. The output file is a compacted copy, so the same input gives the same bytes.
// The index formats this pcrfs writes and reads: 3 (block CRCs) and 2 (none: a reader derives
// them by reading a large piece once).
inline constexpr int kIndexFormat = 3;
inline constexpr int kOldestIndexFormat = 2;

class IndexWriter {
 public:
  // `format` is kIndexFormat; kOldestIndexFormat writes an index without block CRCs (tests of
  // older stores).
  static Result<std::unique_ptr<IndexWriter>> Create(const std::string& path,
                                                     int format = kIndexFormat);
  ~IndexWriter();
  IndexWriter(const IndexWriter&) = delete;
  IndexWriter& operator=(const IndexWriter&) = delete;

  // Also adds the (parent, name) dirent for every entry but the root. Refuses invalid names.
  Status AddEntry(const Entry& e);
  // The block CRCs of piece `group` (1..10) of the entry `ino` added last (a piece longer than
  // kChecksumBlockSize: NumChecksumBlocks of its length). Refused by a format 2 writer.
  Status AddBlockCrcs(uint64_t ino, int group, std::span<const uint32_t> masked);
  Status AddRecord(const RecordInfo& r);
  Status PutMeta(std::string_view key, std::string_view value);
  // Commits and writes the compacted, fsynced file at the path given to Create().
  Status Finish();

 private:
  struct Impl;
  explicit IndexWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What identifies one version of a file: a file rewritten, replaced or touched in any way gets
// a new ctime (or a new inode).
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// Read-only, lock-free access for many threads at once (MDB_RDONLY | MDB_NOLOCK: the store is
// immutable). Each call uses a short read transaction that is reset and renewed per thread.
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
  struct DirEntry {
    std::string_view name;
    uint64_t ino = 0;
    EntryKind kind = EntryKind::kDirectory;
  };
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
