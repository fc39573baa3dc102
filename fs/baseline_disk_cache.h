// -o form=baseline's transcoded files (codec/baseline.h) on the local disk, so that a later
// mount (or this one, once its memory has dropped them) neither re-encodes a file nor reads its
// progressive bytes: the disk tier of BaselineCache (fs/baseline_cache.h).
//
// A file is kept by key (its fuse inode: store inode << 4 | level, the same in every mount of
// one store; the folder is per store identity, location/store_location.h) in append-only
// segments, so that a million small files are not a million disk files:
//
//   SEQ.seg   the files' bytes, one after another (SEQ: 16 hex digits, increasing)
//   SEQ.idx   32 bytes per file: key u64, offset u64, length u32, masked CRC32C of the bytes
//             u32, zero u32, masked CRC32C of the 28 bytes before it u32 (little-endian)
//
// Each mount writes new segments only (an earlier mount's are read, never appended to). Opening
// the folder reads every .idx (32 bytes per file kept, not the bytes) and keeps entries whose
// CRC matches and whose bytes lie within their segment; a later entry of a key wins. Every
// Get() checks the bytes' CRC: a damaged file is dropped and reported as not kept (the caller
// re-encodes it and Puts it again, into a newer segment), so damage costs one re-encode, never
// wrong bytes. Over the budget the oldest segment goes, with every file in it (first in, first
// out by segment: a training epoch reads everything, so what was written first is what was
// read least recently, up to the order within an epoch). One daemon at a time uses a folder
// (flock on ".lock"); a second one runs without the disk tier and says so.
//
// Thread-safe; no lock is held during I/O.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"
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

  static constexpr size_t kEntryBytes = 32;
  // A segment holds about this much (less with a small budget: a sixteenth of it, at least
  // 1 MiB); a larger file gets a segment of its own.
  static constexpr uint64_t kSegmentBytes = uint64_t{64} << 20;

 private:
  BaselineDiskCache(std::string dir, uint64_t budget, UniqueFd lock);
  struct Where {
    uint64_t seq;
    uint64_t offset;
    uint32_t length;
    uint32_t crc;  // masked CRC32C of the bytes
  };
  struct Segment {
    std::shared_ptr<const UniqueFd> data, idx;
    uint64_t data_end = 0, idx_end = 0;  // written or reserved
    std::vector<uint64_t> keys;          // of its entries (some may be superseded)
  };
  std::string SegmentPath(uint64_t seq, const char* ext) const;
  void Adopt() EXCLUDES(mu_);
  // Removes the oldest segments while over the budget (never `keep`); their paths go to
  // *unlink.
  void EvictLocked(uint64_t keep, std::vector<std::string>* unlink) REQUIRES(mu_);
  void ForgetSegmentLocked(std::map<uint64_t, Segment>::iterator it,
                           std::vector<std::string>* unlink) REQUIRES(mu_);

  const std::string dir_;
  const uint64_t budget_;
  const uint64_t segment_bytes_;
  UniqueFd lock_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Where> files_ GUARDED_BY(mu_);
  std::map<uint64_t, Segment> segments_ GUARDED_BY(mu_);  // by seq: oldest first
  uint64_t current_ GUARDED_BY(mu_) = 0;                  // the segment Put appends to (0: none)
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t used_ GUARDED_BY(mu_) = 0;  // data_end + idx_end of every segment
  mutable Stats stats_ GUARDED_BY(mu_);
};

}  // namespace pcrfs::fs
