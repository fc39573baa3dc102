// LmdbIndexReader: a store's index of format 2 or 3 (the LMDB file IndexWriter writes,
// index/lmdb/index_writer.h), read-only and lock-free for many threads at once (MDB_RDONLY |
// MDB_NOLOCK: the store is immutable). Each call uses a short read transaction that is reset
// and renewed per thread. What callers use is IndexReader (index/index_reader.h), which opens
// this or a format 4 index; the calls below are its calls, with its contracts.
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

class LmdbIndexReader {
 public:
  // Checks the whole file against its CRC trailer before LMDB sees it (LMDB trusts its pages),
  // unless `verified` is given and the file still has that identity.
  static Result<std::unique_ptr<LmdbIndexReader>> Open(const std::string& path,
                                                       const FileIdentity* verified);
  ~LmdbIndexReader();
  LmdbIndexReader(const LmdbIndexReader&) = delete;
  LmdbIndexReader& operator=(const LmdbIndexReader&) = delete;

  Result<Entry> Get(uint64_t ino) const;
  Result<uint64_t> Lookup(uint64_t parent, std::string_view name) const;
  Result<Entry> LookupPath(std::string_view path) const;
  Status List(const Entry& dir, uint64_t start, const std::function<bool(const Entry&)>& fn) const;
  Status ListNames(const Entry& dir, uint64_t start, std::string_view start_name,
                   const std::function<bool(const DirEntry&)>& fn) const;
  Result<RecordInfo> GetRecord(uint32_t id) const;
  int format() const;  // 2 or 3
  Result<uint32_t> GetBlockCrc(uint64_t ino, int group, uint64_t block) const;
  Result<std::string> GetMeta(std::string_view key) const;
  uint64_t NumEntries() const;
  uint64_t NumRecords() const;
  const FileIdentity& identity() const;
  void ReleaseMappedPages() const;
  void SetMappedBudget(uint64_t bytes) const;

 private:
  struct Impl;
  explicit LmdbIndexReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcrfs::index
