// Writes one record file. Not thread-safe: one writer per record.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

class RecordWriter {
 public:
  // Starts a record that will be published at `path`. Data goes to `path + ".tmp"` (buffered
  // in memory up to a bound, then spilled to unlinked temporary files, so memory stays bounded
  // whatever the record's size); Finish() fsyncs and renames it into place, so `path` either
  // does not exist or holds a complete record.
  static Result<std::unique_ptr<RecordWriter>> Create(std::string path);
  // As above, with the number of piece bytes held in memory before spilling (tests use a
  // small budget to exercise the spill path).
  static Result<std::unique_ptr<RecordWriter>> Create(std::string path, uint64_t memory_budget);
  static constexpr uint64_t kDefaultMemoryBudget = 64ull << 20;
  ~RecordWriter();  // removes the .tmp file if Finish() was not reached
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Appends a file in the next slot. kJpeg takes exactly kNumGroups pieces; kPassthrough takes
  // exactly one (the whole file), or none for an empty file. `path` is stored for recovery and
  // checking.
  Status Add(std::string_view path, EntryKind kind, PassthroughReason passthrough_reason,
             std::span<const std::span<const uint8_t>> pieces);

  // Appends a passthrough file of `size` bytes in the next slot without holding it in memory:
  // read(offset, dst) fills dst with the bytes at offset, in chunks of at most one checksum
  // block. If read fails, nothing of the file is kept, the writer stays usable and its error is
  // returned (the caller may retry, or Add the file as unreadable).
  using ChunkReader = std::function<Status(uint64_t offset, std::span<uint8_t> dst)>;
  Status AddStream(std::string_view path, PassthroughReason passthrough_reason, uint64_t size,
                   const ChunkReader& read);

  // Writes header, tables, regions and footer; fsyncs; renames. Returns the layout as a reader
  // would parse it (piece offsets are absolute).
  Result<RecordLayout> Finish();

  // The block CRCs of every piece longer than kChecksumBlockSize added so far, in slot order.
  const std::vector<PieceBlockCrcs>& block_crcs() const;

 private:
  struct Impl;
  explicit RecordWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcrfs::index
