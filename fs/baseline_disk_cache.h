// -o form=baseline's transcoded files (codec/baseline.h) on the local disk, so that a later
// mount (or this one, once its memory has dropped them) neither re-encodes a file nor reads its
// progressive bytes: the disk tier of BaselineCache (fs/baseline_cache.h).
//
// A file is kept by key (its fuse inode: store inode << 4 | level, the same in every mount of
// one store; the folder is per store identity, location/store_location.h) as an entry of a
// SegmentStore (common/segment_store.h: append-only segments SEQ.seg + SEQ.idx, 32 bytes of
// index per file with CRCs of the bytes and of the entry; key.a = key, key.b = 0), so that a
// million small files are not a million disk files.
//
// Opening the folder reads every .idx (not the bytes); a later entry of a key wins. Every Get()
// checks the bytes' CRC: a damaged file is dropped and reported as not kept (the caller
// re-encodes it and Puts it again, into a newer segment), so damage costs one re-encode, never
// wrong bytes. Over the budget the oldest segment goes, with every file in it (first in, first
// out by segment: a training epoch reads everything, so what was written first is what was
// read least recently, up to the order within an epoch). One daemon at a time uses a folder
// (flock on ".lock"); a second one runs without the disk tier and says so.
//
// Thread-safe; no lock is held during I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/segment_store.h"
#include "common/status.h"

namespace pcrfs::fs {

class BaselineDiskCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

  // Opens `dir` (creating it), takes its lock and adopts what an earlier mount left there
  // (oldest segments dropped while over `budget_bytes`). A folder locked by another process:
  // nullptr, and *note says so. Errors: the folder cannot be created or locked.
  static Result<std::unique_ptr<BaselineDiskCache>> Open(const std::string& dir,
                                                         uint64_t budget_bytes, std::string* note);
  BaselineDiskCache(const BaselineDiskCache&) = delete;
  BaselineDiskCache& operator=(const BaselineDiskCache&) = delete;

  // The length of key's kept file (unchecked until it is read).
  std::optional<uint64_t> Size(uint64_t key) const EXCLUDES(mu_);
  // key's bytes if kept and their CRC matches; nullptr otherwise (a damaged or unreadable file
  // is forgotten and counted in stats().damaged).
  Bytes Get(uint64_t key) EXCLUDES(mu_);
  // Keeps bytes as key's file (nothing if it is kept already or the disk refuses: full).
  void Put(uint64_t key, const std::vector<uint8_t>& bytes) EXCLUDES(mu_);

  struct Stats {
    uint64_t files = 0, bytes = 0, budget = 0;  // kept now (bytes: segments and .idx files)
    uint64_t adopted = 0;                       // files found at Open
    uint64_t hits = 0, misses = 0;              // of Get
    uint64_t damaged = 0;                       // Get found a CRC mismatch or a read error
    uint64_t written = 0, written_bytes = 0;    // by Put
    uint64_t evicted_files = 0, evicted_segments = 0;
  };
  Stats stats() const EXCLUDES(mu_);

  static constexpr size_t kEntryBytes = SegmentStore::kEntryBytes;
  static constexpr uint64_t kSegmentBytes = SegmentStore::kSegmentBytes;

 private:
  BaselineDiskCache() = default;
  // Forgets the files of evicted segments. REQUIRES: mu_ held.
  void ForgetEvictedLocked(const std::vector<SegmentStore::Entry>& evicted) REQUIRES(mu_);

  std::unique_ptr<SegmentStore> store_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, SegmentStore::Location> files_ GUARDED_BY(mu_);
  mutable Stats stats_ GUARDED_BY(mu_);  // counters of Get and Put
};

}  // namespace pcrfs::fs
