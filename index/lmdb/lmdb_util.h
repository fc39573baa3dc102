// LMDB plumbing shared by the index writer and reader (index/lmdb/index_writer.h and
// index/index_reader.h are the API): the database names, key encodings, error mapping and
// environment setup, each written once. Internal to pcrfs_index.
#pragma once

#include <lmdb.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "index/record_info.h"

namespace pcrfs::index::lmdb {

inline constexpr char kEntriesDb[] = "entries";
inline constexpr char kDirentsDb[] = "dirents";
inline constexpr char kRecordsDb[] = "records";
inline constexpr char kMetaDb[] = "meta";
inline constexpr char kBlocksDb[] = "blocks";
inline constexpr char kIndexFormatKey[] = "index_format";
// A dirent value: the child's inode (u64 BE) and its kind (u8), so a plain readdir is served
// from the dirents alone.
inline constexpr size_t kDirentValueSize = 9;
// Named databases in an index: entries, dirents, records, meta, blocks.
inline constexpr unsigned kMaxDbs = 5;

// errno becomes a Status in Status::FromErrno; LMDB's own codes are mapped here.
Status LmdbError(const std::string& what, int rc);

inline MDB_val Val(const void* data, size_t n) { return MDB_val{n, const_cast<void*>(data)}; }

std::string InoKey(uint64_t ino);
std::string DirentKey(uint64_t parent, std::string_view name);
std::string BlocksKey(uint64_t ino, int group);
std::string RecordKey(uint32_t id);
std::string EncodeRecordInfo(const RecordInfo& r);
Result<RecordInfo> DecodeRecordInfo(uint32_t id, std::string_view v);

// An environment on the single file `path` (MDB_NOSUBDIR is added) with room for kMaxDbs
// databases and a map of map_size bytes. The caller owns the result (mdb_env_close).
// *lmdb_rc (if given) receives LMDB's code on failure.
Result<MDB_env*> OpenEnv(const std::string& path, unsigned flags, size_t map_size, mode_t mode,
                         int* lmdb_rc = nullptr);
// Opens each named database in txn (flags: 0 or MDB_CREATE).
Status OpenDbis(MDB_txn* txn, unsigned flags,
                std::initializer_list<std::pair<const char*, MDB_dbi*>> dbis,
                const std::string& what);

// Closes a cursor when the call that opened it returns.
struct CursorCloser {
  MDB_cursor* c;
  ~CursorCloser() { mdb_cursor_close(c); }
};

std::string DirName(const std::string& path);

}  // namespace pcrfs::index::lmdb
