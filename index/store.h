// A store on disk, opened for reading:
//   STORE/manifest.json, STORE/index.lmdb, STORE/records/NNNNNNNN.pcr
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/random_access_file.h"
#include "common/status.h"
#include "index/entry.h"
#include "index/manifest.h"
#include "index/store_index.h"

namespace pcrfs::index {

inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kIndexFile[] = "index.lmdb";
inline constexpr char kRecordsDir[] = "records";

// Opens a record file by its path. The default opens it read-only and never follows a symlink
// (OpenRecordFileNoFollow); tests inject one that fails or corrupts reads.
using RecordFileOpener =
    std::function<Result<std::unique_ptr<RandomAccessFile>>(const std::string& path)>;

struct StoreOptions {
  RecordFileOpener open_record;  // empty: OpenRecordFileNoFollow
  // The identity of an index.lmdb this process verified already (IndexReader::Open).
  std::optional<FileIdentity> verified_index;
};

// open(path, O_RDONLY | O_NOFOLLOW), a regular file: a symlink is Corruption ("is a symbolic
// link"), never followed, so a store cannot make pcrfs serve a file outside it.
Result<std::unique_ptr<RandomAccessFile>> OpenRecordFileNoFollow(const std::string& path);

class Store {
 public:
  // Clear errors: "STORE: no such directory", "STORE: not a pcrfs store (no manifest.json)",
  // "STORE: format version N is not supported (this pcrfs reads 1)", a damaged index, ...
  // Nothing inside STORE is followed if it is a symlink (manifest, index, records/, records).
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, StoreOptions options = {});

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const IndexReader& index() const { return *index_; }

  // The record file, opened once and shared. Thread-safe. An error only when the file cannot
  // be opened at all (missing, a symlink, not a regular file). A record whose header, footer
  // or size disagree with the index is still served: readers use only the index's piece
  // offsets and check every piece's CRC, so damage costs exactly the pieces it touches.
  // header_problem (if given) receives what disagrees, OK when nothing does.
  Result<std::shared_ptr<RandomAccessFile>> OpenRecord(uint32_t id,
                                                       Status* header_problem = nullptr) const;

  // The bytes of a file entry at level k (1..10), every piece checked against its CRC.
  Status ReadFile(const Entry& e, int k, std::vector<uint8_t>* out) const;

 private:
  Store() = default;

  std::string dir_;
  StoreOptions options_;
  Manifest manifest_;
  std::unique_ptr<IndexReader> index_;
  struct OpenRecordFile {
    std::shared_ptr<RandomAccessFile> file;
    RecordInfo info;       // from the index
    Status header_status;  // the file's header, footer and size checked against info
  };
  Result<OpenRecordFile> GetRecordFile(uint32_t id) const;

  mutable std::mutex mu_;
  mutable std::unordered_map<uint32_t, OpenRecordFile> records_;  // GUARDED_BY(mu_)
};

}  // namespace pcrfs::index
