// A store on disk, opened for reading:
//   STORE/manifest.json, STORE/index.lmdb, STORE/records/NNNNNNNN.pcr
#pragma once

#include <memory>
#include <mutex>
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

class Store {
 public:
  // Clear errors: "STORE: no such directory", "STORE: not a pcrfs store (no manifest.json)",
  // "STORE: format version N is not supported (this pcrfs reads 1)", a damaged index, ...
  static Result<std::unique_ptr<Store>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const IndexReader& index() const { return *index_; }

  // The record file, opened once and shared. Thread-safe.
  Result<std::shared_ptr<RandomAccessFile>> OpenRecord(uint32_t id) const;

  // The bytes of a file entry at level k (1..10), every piece checked against its CRC.
  Status ReadFile(const Entry& e, int k, std::vector<uint8_t>* out) const;

 private:
  Store() = default;

  std::string dir_;
  Manifest manifest_;
  std::unique_ptr<IndexReader> index_;
  struct OpenRecordFile {
    std::shared_ptr<RandomAccessFile> file;
    RecordInfo info;  // from the index; the file's header was checked against it
  };
  Result<OpenRecordFile> GetRecordFile(uint32_t id) const;

  mutable std::mutex mu_;
  mutable std::unordered_map<uint32_t, OpenRecordFile> records_;  // GUARDED_BY(mu_)
};

}  // namespace pcrfs::index
