// Many small byte strings kept on the local disk in a few large files: the disk tier of the
// remote range cache (remote/range_cache.h) and of form=baseline's files
// (fs/baseline_disk_cache.h). A folder holds append-only segments, so that a million small
// entries are not a million disk files:
//
//   SEQ.seg   the entries' bytes, one after another (SEQ: 16 hex digits, increasing, < 2^32)
//   SEQ.idx   32 bytes per entry: key.a u64, offset u64, length u32, masked CRC32C of the
//             bytes u32, key.b u32, masked CRC32C of the 28 bytes before it u32 (little-endian)
//
// A key is 12 bytes whose meaning is the owner's (the range cache: record id and offset in the
// record; the baseline cache: a u64 and zero). The store keeps no map of keys: the owner keeps
// where each of its entries is (a Location, 16 bytes) and reads them back by Location.
//
// Each Open writes new segments only (an earlier one's are read, never appended to). Open reads
// every .idx (32 bytes per entry, not the bytes) and offers the owner, newest first, the entries
// whose entry CRC matches and whose bytes lie within their segment; what the owner declines
// counts as dead space. Every Read checks the bytes' CRC, so damage on the disk is reported,
// never returned. While over the budget the oldest segment goes with every entry in it (first in,
// first out by segment; an owner may name segments to keep longer, Append), and the owner is
// told which entries went. Anything else in the folder
// (the files of an older layout, temporary files) is removed at Open. One process at a time uses
// a folder (flock on ".lock").
//
// Thread-safe; no lock is held during I/O. Owners that keep their own map of locations call
// Append outside their lock and record the result under it only if Contains(seq) still holds
// (then a later eviction of that segment names the entry).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/status.h"

namespace pcrfs {

class SegmentStore {
 public:
  struct Key {
    uint64_t a = 0;
    uint32_t b = 0;
  };
  // Where an entry's bytes are, and their CRC.
  struct Location {
    uint32_t seq = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    uint32_t crc = 0;  // masked CRC32C of the bytes
    bool operator==(const Location&) const = default;
  };
  struct Entry {
    Key key;
    Location where;
  };
  static constexpr size_t kEntryBytes = 32;
  // A segment's bytes and index hold about this much together (less with a small budget: a
  // sixteenth of it, at least 1 MiB or a quarter of the budget if that is less); a larger entry
  // gets a segment of its own.
  static constexpr uint64_t kSegmentBytes = uint64_t{64} << 20;

  // The entry's 32 bytes.
  static void EncodeEntry(const Entry& e, uint8_t out[kEntryBytes]);
  // The entries of an .idx file's bytes (of segment `seq`, whose .seg has data_size bytes) whose
  // entry CRC matches and whose bytes lie within the segment, in file order; a torn tail and
  // damaged entries are skipped. Never reads outside `idx`.
  static std::vector<Entry> ParseIndex(std::span<const uint8_t> idx, uint32_t seq,
                                       uint64_t data_size);

  // Opens `dir` (creating it) and takes its lock; nullptr if another process holds it. Removes
  // what is not a segment (*removed counts it) and the oldest segments while over the budget,
  // then calls adopt(entry) for every entry of the rest, newest first; adopt returns false for
  // one it does not keep (superseded), whose bytes are then dead space.
  // Errors: the folder cannot be created or its lock file opened.
  static Result<std::unique_ptr<SegmentStore>> Open(const std::string& dir, uint64_t budget_bytes,
                                                    const std::function<bool(const Entry&)>& adopt,
                                                    uint64_t* removed = nullptr);
  SegmentStore(const SegmentStore&) = delete;
  SegmentStore& operator=(const SegmentStore&) = delete;

  // Writes bytes as key's entry into the newest segment (a new one when it is full) and returns
  // where; nullopt if the disk refused (full) or the entry cannot fit the budget. Segments
  // evicted to stay within the budget append their entries to *evicted (the owner forgets those
  // whose Location it holds). Without `spare` the oldest segments go; with it (segment -> bytes
  // in it the owner still needs, e.g. fetched ahead and not read yet) the ones it needs least,
  // the oldest among equals.
  std::optional<Location> Append(Key key, std::span<const uint8_t> bytes,
                                 std::vector<Entry>* evicted,
                                 const std::map<uint32_t, uint64_t>* spare = nullptr) EXCLUDES(mu_);
  // Reads [from, from + n) of the entry at `where` into dst, checking the CRC of all its bytes
  // (read whole when n is less). NotFound: its segment was evicted; Corruption: the bytes do not
  // match their CRC (counted in stats().damaged); IOError: the disk failed.
  Status Read(const Location& where, uint64_t from, uint64_t n, uint8_t* dst) const EXCLUDES(mu_);
  // Whether segment `seq` is still kept.
  bool Contains(uint32_t seq) const EXCLUDES(mu_);
  // The owner no longer uses the entry at `where`: its bytes are dead space until its segment
  // is evicted.
  void Forget(const Location& where) EXCLUDES(mu_);

  struct Stats {
    uint64_t segments = 0, bytes = 0, budget = 0;  // bytes: segments and .idx files
    uint64_t dead_bytes = 0;  // of entries forgotten or declined, in kept segments
    uint64_t adopted = 0;     // entries kept at Open
    uint64_t removed_files = 0;
    uint64_t written = 0, written_bytes = 0;  // by Append
    uint64_t damaged = 0;                     // Reads that found a CRC mismatch
    uint64_t evicted_entries = 0, evicted_segments = 0;
  };
  Stats stats() const EXCLUDES(mu_);
  const std::string& dir() const { return dir_; }

 private:
  SegmentStore(std::string dir, uint64_t budget, UniqueFd lock);
  struct Segment {
    std::shared_ptr<const UniqueFd> data, idx;
    uint64_t data_end = 0, idx_end = 0;  // written or reserved
    uint64_t dead = 0;
  };
  std::string SegmentPath(uint64_t seq, const char* ext) const;
  void Adopt(const std::function<bool(const Entry&)>& adopt) EXCLUDES(mu_);
  // Takes segments out (the oldest, or by `spare` as Append says; never `keep`) while over the
  // budget, into *gone.
  void EvictLocked(uint32_t keep, std::vector<Segment>* gone, std::vector<uint32_t>* seqs,
                   const std::map<uint32_t, uint64_t>* spare = nullptr) REQUIRES(mu_);
  // Reads the entries of evicted segments into *evicted (if not null) and removes their files;
  // returns how many entries they held.
  size_t Dispose(std::vector<Segment>& gone, const std::vector<uint32_t>& seqs,
                 std::vector<Entry>* evicted) const;

  const std::string dir_;
  const uint64_t budget_;
  const uint64_t segment_bytes_;
  UniqueFd lock_;
  mutable Mutex mu_;
  std::map<uint32_t, Segment> segments_ GUARDED_BY(mu_);  // by seq: oldest first
  uint32_t current_ GUARDED_BY(mu_) = 0;                  // the segment Append writes to (0: none)
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t used_ GUARDED_BY(mu_) = 0;  // data_end + idx_end of every segment
  mutable Stats stats_ GUARDED_BY(mu_);
};

}  // namespace pcrfs
