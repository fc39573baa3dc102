// Index format 4 (docs/format.md, "Index file (index.pcri)"): one file, a header, a section
// table and sections (meta, records, entry chunks, block CRCs), parsed entirely by pcrfs's own
// bounds-checked decoders and checked as a whole at open, so a store from a stranger cannot
// make the daemon read outside a buffer. Entries omit their pieces' offsets and CRCs (the
// record's image table has them: Store::ResolvePieces) and are delta coded with a restart
// point every kCompactRestartInterval entries, as in LevelDB blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "index/entry.h"
#include "index/record_info.h"

namespace pcrfs::index {

inline constexpr char kCompactIndexFile[] = "index.pcri";
inline constexpr int kCompactIndexFormat = 4;
inline constexpr char kCompactIndexMagic[9] = "PCRFSCIX";
inline constexpr uint32_t kCompactRestartInterval = 16;
inline constexpr uint32_t kCompactEntriesPerChunk = 4096;
inline constexpr size_t kCompactHeaderSize = 64;
inline constexpr size_t kCompactSectionEntrySize = 40;
inline constexpr size_t kCompactChunkEntrySize = 24;

enum class CompactSection : uint32_t {
  kMeta = 1,
  kRecords = 2,
  kChunkDirectory = 3,
  kEntryData = 4,
  kBlockCrcs = 5,
};
inline constexpr uint32_t kCompactNumSections = 5;

enum class CompactCodec : uint8_t { kNone = 0, kZstd = 1 };

class CompactIndex;

// Builds index.pcri in memory. Entries come in inode order 1, 2, 3, ... (dense); records in id
// order 0, 1, 2, ...; block CRCs after their entry, in (inode, group) order. Piece offsets and
// CRCs of the entries are ignored (the record holds them).
class CompactIndexWriter {
 public:
  // `name` names the index in errors; zstd_level 1..19, 0 stores everything uncompressed.
  explicit CompactIndexWriter(std::string name, int zstd_level = 9);
  ~CompactIndexWriter();
  CompactIndexWriter(const CompactIndexWriter&) = delete;
  CompactIndexWriter& operator=(const CompactIndexWriter&) = delete;

  Status AddEntry(const Entry& e);
  Status AddBlockCrcs(uint64_t ino, int group, std::span<const uint32_t> masked);
  Status AddRecord(const RecordInfo& r);
  Status PutMeta(std::string_view key, std::string_view value);
  // The bytes of the file, already parsed back through every check of CompactIndex::Parse
  // (nothing a reader would refuse is ever written); `parsed` (if given) receives that parse.
  Result<std::string> Finish(std::unique_ptr<CompactIndex>* parsed = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes bytes to path atomically (NAME.tmp, fsync, rename, fsync of the folder).
Status WriteCompactIndexFile(const std::string& path, std::string_view bytes);

// The file size an index.pcri's header declares, from the file's first bytes (`head`, at
// least its 64-byte header): what a download of it may take, known before the rest arrives.
// 0 when the header is of another index format (nothing declared in a known place). Errors:
// Corruption "NAME: damaged or not a pcrfs index: ..." (too short, bad magic, header CRC).
Result<uint64_t> CompactIndexDeclaredSize(const std::string& name, std::string_view head);

// A parsed, checked index.pcri held in memory: the decompressed entry bytes plus the offset of
// every restart point. Immutable, so any number of threads may read at once.
class CompactIndex {
 public:
  // Checks everything (docs/format.md, "What a reader of index.pcri checks"); any violation is
  // Corruption "NAME: damaged or not a pcrfs index: WHAT", another version NotSupported.
  static Result<std::unique_ptr<CompactIndex>> Parse(const std::string& name,
                                                     std::span<const uint8_t> bytes);
  // How many times this process has called Parse (and so decompressed and checked a whole
  // index), fork()s included: what tests read to see that a mount parses its index once.
  static uint64_t ParseCount();
  // Reads path (not following a symlink, at most 16 GiB) and parses it.
  static Result<std::unique_ptr<CompactIndex>> Open(const std::string& path);
  ~CompactIndex();

  // Entries have resolved_groups == 0: lengths only.
  Result<Entry> Get(uint64_t ino) const;
  Result<uint64_t> Lookup(uint64_t parent, std::string_view name) const;
  Status List(const Entry& dir, uint64_t start, const std::function<bool(const Entry&)>& fn) const;
  Result<RecordInfo> GetRecord(uint32_t id) const;
  // NotFound when the index has no block CRCs for that piece (the reader then derives them
  // by reading the piece once, as for index format 2).
  Result<uint32_t> GetBlockCrc(uint64_t ino, int group, uint64_t block) const;
  // "index_format" is "4"; other keys as written.
  Result<std::string> GetMeta(std::string_view key) const;
  uint64_t NumEntries() const;
  uint64_t NumRecords() const;
  // Bytes held in memory for the entries, restart offsets, records and block CRCs.
  uint64_t MemoryBytes() const;
  const std::string& name() const;

 private:
  struct Impl;
  explicit CompactIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Recomputes every checksum of an index.pcri whose bytes were changed (chunks, sections,
// section table, header), as a hostile author would: tests and fuzz targets use it to reach the
// decoders behind the checksums. Changes nothing it cannot locate inside the bytes.
void ResealCompactIndex(std::string* bytes);

// Where the converter reads an LMDB index: calls fn for every (key, value) of the named
// database in key order, and returns fn's first error (NotFound when the database does not
// exist). index/lmdb/lmdb_pages.h's ForEachLmdbRecord over the file's bytes has this shape.
using LmdbRecordFn = std::function<Status(std::string_view key, std::string_view value)>;
using LmdbRecordSource = std::function<Status(std::string_view db, const LmdbRecordFn& fn)>;

// index.lmdb (format 2 or 3) -> the bytes of an equivalent index.pcri, every record decoded
// strictly and the result checked as CompactIndex::Parse checks it. `name` names the source.
// `parsed` (if given) receives that check's parse (no second one needed to use the result).
Result<std::string> ConvertLmdbIndex(const std::string& name, const LmdbRecordSource& source,
                                     std::unique_ptr<CompactIndex>* parsed = nullptr);

// A record source over an LMDB index file through liblmdb (after its CRC trailer is checked):
// for indexes this process trusts (its own shard parts, tests).
Result<LmdbRecordSource> LiblmdbRecordSource(const std::string& path);

}  // namespace pcrfs::index
