// A store on disk, opened for reading:
//   STORE/manifest.json, STORE/index.pcri (or, older, STORE/index.lmdb), STORE/records/NNNNNNNN.pcr
#pragma once

#include <sys/types.h>

#include <functional>
#include <future>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/random_access_file.h"
#include "common/status.h"
#include "index/compact_index.h"
#include "index/entry.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/record_table.h"

namespace pcrfs::index {

inline constexpr char kManifestFile[] = "manifest.json";
// A longer manifest is refused (Open, and the download of a remote store's).
inline constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;
inline constexpr char kIndexFile[] = "index.lmdb";
inline constexpr char kRecordsDir[] = "records";

// Opens a record file by its path; expected_size is the record's size per the index (a remote
// store's opener needs it: it sends no HEAD). The default opens the local file read-only and
// never follows a symlink (OpenRecordFileNoFollow, which ignores the size: a mismatch is found
// by the header check), with the page cache's speculation hooks; tests inject one that fails
// or corrupts reads (a file without hooks: nothing is read from it speculatively).
using RecordFileOpener =
    std::function<Result<SourceFile>(const std::string& path, uint64_t expected_size)>;

struct StoreOptions {
  RecordFileOpener open_record;  // empty: OpenRecordFileNoFollow
  // Whether opening a record also reads its tables section and checks its CRC (a damaged table
  // is then reported at once). Reads never need the tables (the index holds every piece's
  // place and CRC), so a remote store turns this off: the tables are about 170 bytes per file,
  // 5% of what level 1 of a photo store fetches. Header and footer are always checked.
  bool check_tables = true;
  // The store's index as this process parsed and checked it already (Store::shared_index() of
  // an earlier Open of the same folder; the daemon's check before its fork): used as it is,
  // the index file is not read again. The manifest is still checked against it.
  std::shared_ptr<const IndexReader> parsed_index;
  // A folder for the parsed record tables' rows (index/record_table.h: an unlinked file, page
  // cache rather than heap; a remote store's cache folder); empty: they stay in memory. A
  // folder where the file cannot be made is the same as none.
  std::string table_folder;
};

// The records of an index.lmdb, for ConvertLmdbIndex (an older store's index converted to
// format 4 at open, `pcr upgrade`, a remote store's cache).
Result<LmdbRecordSource> LmdbSourceOf(const std::string& lmdb_path);

// open(path, O_RDONLY | O_NOFOLLOW), a regular file: a symlink is Corruption ("is a symbolic
// link"), never followed, so a store cannot make pcrfs serve a file outside it.
Result<std::unique_ptr<PosixRandomAccessFile>> OpenRecordFileNoFollow(const std::string& path);

class Store {
 public:
  // Clear errors: "STORE: no such directory", "STORE: not a pcrfs store (no manifest.json)",
  // "STORE: format version N is not supported (this pcrfs reads 1)", a damaged index, ...
  // Nothing inside STORE is followed if it is a symlink (manifest, index, records/, records).
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, StoreOptions options = {});

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const IndexReader& index() const { return *index_; }
  // The same index, to hand to a later Open (StoreOptions::parsed_index).
  std::shared_ptr<const IndexReader> shared_index() const { return index_; }

  // The record file, opened once and shared. Thread-safe. An error only when the file cannot
  // be opened at all (missing, a symlink, not a regular file). A record whose header, footer
  // or size disagree with the index is still served: readers use only the index's piece
  // offsets and check every piece's CRC, so damage costs exactly the pieces it touches.
  // header_problem (if given) receives what disagrees, OK when nothing does. A header that
  // cannot be read for a remote reason (an IOError but a local EIO: a timeout, a 503) fails
  // the open, which is not kept: the next call tries again. The handle carries the file's
  // speculation hooks when its source has them (SourceFile::speculation()).
  Result<SourceFile> OpenRecord(uint32_t id, Status* header_problem = nullptr) const;

  // Fills the offsets and masked CRCs of e's pieces of groups 1..groups when the index did not
  // hold them (format 4: Entry::resolved_groups 0) from the record's image table, read once per
  // record and kept in a bounded LRU. Only the groups asked for so far are kept of a record's
  // table (a mount that reads level 1 keeps 9 bytes per file, not 81); a read of a higher
  // group parses the table again. A record whose header or tables are damaged, or whose table
  // disagrees with the index about this file (kind, piece lengths of those groups), is
  // Corruption for the files it touches. A no-op for a resolved entry. Stat, readdir and lookup
  // never need it. A read at level k needs groups 1..k.
  Status ResolvePieces(Entry* e, int groups = kNumGroups) const;
  // Bytes the parsed record tables kept for ResolvePieces take (at most kMaxTableBytes, but
  // for the newest table).
  uint64_t TableMemoryBytes() const EXCLUDES(mu_);
  // Bytes of the parsed record tables' rows in the table file (StoreOptions::table_folder).
  uint64_t TableFileBytes() const EXCLUDES(mu_);

  // The bytes of a file entry at level k (1..10), every piece checked against its CRC.
  Status ReadFile(const Entry& e, int k, std::vector<uint8_t>* out) const;
  // The same bytes handed to sink in order, in checksum blocks (at most kChecksumBlockSize
  // each), each checked before sink sees it: constant memory whatever the file's size.
  using ByteSink = std::function<Status(std::span<const uint8_t> bytes)>;
  Status ReadFileTo(const Entry& e, int k, const ByteSink& sink) const;
  // The same, reading e's record through `record` instead of the store's own handle: a copy of
  // the record's first bytes held in memory (StoreSession::ReadRecord) that falls back to the
  // real file past them. Every piece is still checked against its CRC.
  Status ReadFileTo(const Entry& e, int k, const SourceFile& record, const ByteSink& sink) const;

  // The masked CRC32C of checksum block `block` of piece `group` (1..10) of e: the piece's own
  // CRC when it has one block; else from the index, or for a format 2 index computed by
  // reading the piece once (kept for the most recent pieces).
  Result<uint32_t> BlockCrc(const Entry& e, int group, uint64_t block) const;
  // Reads checksum block `block` of piece `group` of e from `file` (its record, OpenRecord)
  // into dst (room for ChecksumBlockLength(piece length, block) bytes) and checks it; a block
  // that fails its CRC is read once more if the source dropped a cached copy of it.
  Status ReadBlock(const SourceFile& file, const Entry& e, int group, uint64_t block,
                   uint8_t* dst) const;

 private:
  Store() = default;

  // Whether records/ at dir_ is no longer the folder opened by Open (rebuilt, replaced, moved
  // or removed since): a record missing then is no damage. False for a custom opener.
  bool ChangedSinceOpen() const;

  std::string dir_;
  StoreOptions options_;
  // records/ as Open found it (the default opener's folder; nullptr for a custom opener).
  std::shared_ptr<UniqueFd> records_fd_;
  dev_t records_dev_ = 0;
  ino_t records_ino_ = 0;
  Manifest manifest_;
  std::shared_ptr<const IndexReader> index_;
  struct OpenRecordFile {
    SourceFile file;
    RecordInfo info;       // from the index
    Status header_status;  // the file's header, footer and size checked against info
  };
  Result<OpenRecordFile> GetRecordFile(uint32_t id) const EXCLUDES(mu_);
  // Opens record `id` and checks its header: what GetRecordFile does for the first caller.
  Result<OpenRecordFile> OpenRecordFileNow(uint32_t id) const;

  using TableResult = Result<std::shared_ptr<const RecordTable>>;
  // Record id's table with at least `groups` groups.
  TableResult GetRecordTable(uint32_t id, int groups) const EXCLUDES(mu_);
  // Reads, checks and parses record id's table for groups 1..groups (GetRecordTable's miss).
  TableResult LoadRecordTable(uint32_t id, int groups) const EXCLUDES(mu_);
  // The parsed tables kept take at most this many bytes (the newest is always kept; ImageNet's
  // whole store fits), and a record's tables section longer than kMaxTableSection is refused:
  // a hostile store's record may claim up to 2^24 images.
  static constexpr uint64_t kMaxTableBytes = uint64_t{128} << 20;
  // The same for the rows moved to the table file (12 bytes per file and group, + 4).
  static constexpr uint64_t kMaxTableFileBytes = uint64_t{512} << 20;
  static constexpr uint64_t kMaxTableSection = uint64_t{256} << 20;

  mutable Mutex mu_;
  mutable std::unordered_map<uint32_t, OpenRecordFile> records_ GUARDED_BY(mu_);
  // Parsed record tables, least recently used first out.
  mutable std::list<std::pair<uint32_t, std::shared_ptr<const RecordTable>>> tables_
      GUARDED_BY(mu_);
  mutable std::unordered_map<uint32_t, decltype(tables_)::iterator> table_of_ GUARDED_BY(mu_);
  mutable uint64_t table_bytes_ GUARDED_BY(mu_) = 0;
  mutable uint64_t table_file_bytes_ GUARDED_BY(mu_) = 0;
  // Where tables move their rows (StoreOptions::table_folder); nullptr: kept in memory.
  std::shared_ptr<TableFile> table_file_;
  mutable std::unordered_map<uint32_t, std::shared_future<TableResult>> table_loading_
      GUARDED_BY(mu_);
  // Records being opened: later callers wait for the first one's result instead of opening
  // (and, for a remote store, fetching the header and tables) again.
  mutable std::unordered_map<uint32_t, std::shared_future<Result<OpenRecordFile>>> opening_
      GUARDED_BY(mu_);
  // Format 2 indexes only: block CRCs computed from large pieces, by (record, slot, group).
  struct DerivedKey {
    uint32_t record, slot;
    int group;
    bool operator==(const DerivedKey&) const = default;
  };
  struct DerivedKeyHash {
    size_t operator()(const DerivedKey& k) const {
      return std::hash<uint64_t>()((uint64_t{k.record} << 36) ^ (uint64_t{k.slot} << 4) ^
                                   static_cast<uint64_t>(k.group));
    }
  };
  static constexpr size_t kMaxDerived = 256;
  mutable std::unordered_map<DerivedKey, std::shared_ptr<const std::vector<uint32_t>>,
                             DerivedKeyHash>
      derived_crcs_ GUARDED_BY(mu_);
};

}  // namespace pcrfs::index
