// A record's image table as the reader keeps it (Store::ResolvePieces): each slot's kind, and
// per group each piece's CRC and where it ends, relative to the group's region (a piece starts
// where the slot before it ends: offsets are derived, docs/format.md). Parsed in memory; a
// table may then move its rows to a TableFile (an unlinked file in the store's cache folder),
// so that what it holds is clean page cache the kernel may reclaim, not the daemon's heap:
// 1 + 8 bytes per file and group in memory before, 1 after (the kinds).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/mutex.h"
#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

// An unlinked file (O_TMPFILE, else a unique name removed at once) that tables move their rows
// to. Each table takes a range of it, appended; the range is punched out (FALLOC_FL_PUNCH_HOLE)
// when the table is destroyed, so the file holds on disk only the tables alive. Thread-safe.
class TableFile {
 public:
  // Creates the file in `folder`; an error names the folder and the reason.
  static Result<std::shared_ptr<TableFile>> Create(const std::string& folder);
  ~TableFile() = default;
  TableFile(const TableFile&) = delete;
  TableFile& operator=(const TableFile&) = delete;

  // Takes a new range of n bytes and returns its offset (Release gives it back).
  uint64_t Take(uint64_t n) EXCLUDES(mu_);
  Status Write(uint64_t offset, const uint8_t* src, size_t n) const;
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const;
  // Frees [offset, offset + n) on disk (best effort).
  void Release(uint64_t offset, uint64_t n) const;
  // Bytes of the ranges taken and not released.
  uint64_t LiveBytes() const EXCLUDES(mu_);
  const std::string& name() const { return name_; }

 private:
  TableFile(UniqueFd fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
  UniqueFd fd_;
  std::string name_;  // "FOLDER/record tables", for messages
  mutable Mutex mu_;
  uint64_t end_ GUARDED_BY(mu_) = 0;
  mutable uint64_t live_ GUARDED_BY(mu_) = 0;
};

class RecordTable {
 public:
  RecordTable(uint32_t num_images, const std::array<uint64_t, kNumGroups + 1>& group_offset,
              int groups);
  ~RecordTable();
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(kinds_.size()); }
  int groups() const { return groups_; }
  EntryKind kind(uint32_t slot) const { return kinds_[slot]; }
  // Sets slot `slot` (in slot order, from 0): the pieces' lengths, CRCs (groups() of them are
  // kept) and its kind.
  void Add(uint32_t slot, EntryKind kind, const std::array<uint64_t, kNumGroups>& length,
           const std::array<uint32_t, kNumGroups>& masked_crc);
  // Moves the rows (ends and CRCs) to `file`, after the last Add. On an error the table keeps
  // them in memory and stays usable.
  Status MoveTo(std::shared_ptr<TableFile> file);
  bool in_file() const { return file_ != nullptr; }

  // Slot `slot`'s pieces of groups 1..groups() (slot < size()) into out[0..groups()); a piece
  // whose place lies outside its region gets offset UINT64_MAX. Errors: only for a table in a
  // file (the read failed, or a row no longer matches its CRC: "FILE: ...").
  Status Pieces(uint32_t slot, PieceRefs* out) const;

  // Heap bytes held.
  uint64_t MemoryBytes() const {
    return sizeof(*this) + kinds_.capacity() + crcs_.capacity() * 4 + ends32_.capacity() * 4 +
           ends64_.capacity() * 8;
  }
  // Bytes held in the table file.
  uint64_t FileBytes() const { return file_ != nullptr ? file_bytes_ : 0; }

 private:
  uint64_t End(size_t i) const { return ends64_.empty() ? ends32_[i] : ends64_[i]; }
  // A row in the file: the groups' CRCs (4 bytes each), ends (8 bytes each; UINT64_MAX:
  // outside), then the masked CRC32C of those bytes.
  size_t RowSize() const { return static_cast<size_t>(groups_) * 12 + 4; }
  static constexpr uint32_t kBad32 = UINT32_MAX;
  int groups_ = kNumGroups;
  std::array<uint64_t, kNumGroups> base_{};    // each region's offset in the record
  std::array<uint64_t, kNumGroups> region_{};  // and its length
  std::vector<EntryKind> kinds_;               // by slot
  // In memory (until MoveTo):
  std::vector<uint32_t> crcs_;    // slot * groups_ + g
  std::vector<uint32_t> ends32_;  // the same index; kBad32: outside
  std::vector<uint64_t> ends64_;  // when a region is >= 4 GiB; UINT64_MAX
  // In a file (after MoveTo): the rows, by slot, from file_offset_.
  std::shared_ptr<TableFile> file_;
  uint64_t file_offset_ = 0;
  uint64_t file_bytes_ = 0;
};

}  // namespace pcrfs::index
