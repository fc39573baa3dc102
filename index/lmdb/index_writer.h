// IndexWriter: writes the LMDB index of a store, index formats 2 and 3 (one file, MDB_NOSUBDIR;
// IndexReader, index/index_reader.h, reads it; format 4 is index/compact_index.h's). Named
// databases:
//   entries:  inode (8 bytes, big-endian)            -> EncodeEntry(entry)
//   dirents:  parent inode (8 bytes BE) + name bytes  -> child inode (8 bytes BE) + kind (u8)
//   records:  record id (4 bytes BE)                  -> encoded RecordInfo
//   meta:     key string                              -> value string
//   blocks:   inode (8 bytes BE) + group (u8)          -> masked CRC32C (u32 LE) per checksum
//             block of that piece, for pieces longer than kChecksumBlockSize (index format 3)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "index/entry.h"
#include "index/record_info.h"

namespace pcrfs::index {

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

}  // namespace pcrfs::index
