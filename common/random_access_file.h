// Positional reads from an immutable file. An interface so tests can inject faults and
// corruption (see FaultInjectingFile in tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace pcrfs {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly n bytes at offset into dst. Reading past the end is Corruption ("truncated").
  virtual Status Read(uint64_t offset, size_t n, uint8_t* dst) const = 0;
  virtual uint64_t Size() const = 0;
  virtual const std::string& name() const = 0;
  // Hints that [offset, offset + n) will be read soon (asynchronous readahead). Optional.
  virtual void Prefetch(uint64_t /*offset*/, uint64_t /*n*/) const {}
  // Whether bytes read once stay cached for a while (the page cache, a block cache), so that
  // reading a range ahead of need makes the later read cheap. Speculative reads
  // (fs/record_scheduler.h) are issued only to such files.
  virtual bool KeepsReads() const { return false; }
  // A speculative read of [offset, offset + n): fetch it so that a later Read finds it kept.
  // `scratch` is a buffer the caller reuses. Returns the bytes it really moved from the device
  // or the origin (0 when all were kept already): what the caller may time as a transfer.
  // ResourceExhausted: the source keeps enough unread bytes already; try again later. By
  // default a Read into scratch (the page cache keeps it), n bytes moved.
  virtual Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const {
    scratch->resize(static_cast<size_t>(n));
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, static_cast<size_t>(n), scratch->data()));
    return n;
  }
  // How many speculative reads may run at once while demand reads run too, for a source that
  // orders its own requests so that demand reads never wait behind speculative ones (a remote
  // store's HTTP client: background requests get only spare connections). 0: the source has
  // one queue (a disk), and the scheduler pauses speculation while a demand read runs.
  virtual int ConcurrentSpeculativeReads() const { return 0; }
  // Drops any copy of [offset, offset + n) that the source keeps itself (a cache), so the next
  // Read fetches it from the origin; true if there was one. Called when bytes fail their CRC.
  virtual bool DropCached(uint64_t /*offset*/, uint64_t /*n*/) const { return false; }
  // Copies [offset, offset + n) into dst if the source holds all of it in memory now (the page
  // cache), without waiting for any I/O; false otherwise (dst's contents are then unspecified).
  // A read that would not wait is no work for the device, so the record scheduler does not
  // count it as a demand read holding speculative reads back. By default: never.
  virtual bool ReadCached(uint64_t /*offset*/, size_t /*n*/, uint8_t* /*dst*/) const {
    return false;
  }
};

// pread(2) on an open file; thread-safe. The kernel's own readahead is turned off
// (POSIX_FADV_RANDOM): reads are exact, and callers that know better call Prefetch().
class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  // extra_flags are added to O_RDONLY (e.g. O_NOFOLLOW).
  static Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path,
                                                        int extra_flags = 0);

  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return path_; }
  void Prefetch(uint64_t offset, uint64_t n) const override;
  bool KeepsReads() const override { return true; }  // the page cache
  // Skips what the page cache holds already (preadv2 RWF_NOWAIT copies it without I/O) and
  // reads the rest: the readers' own reads bring pieces in, and copying those would count as
  // device reads in the scheduler's rate (a 25 MB/s disk measured at hundreds of MB/s).
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override;
  // preadv2(RWF_NOWAIT): the page cache's copy, or false at the first page it lacks.
  bool ReadCached(uint64_t offset, size_t n, uint8_t* dst) const override;

 private:
  PosixRandomAccessFile(std::string path, UniqueFd fd, uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}

  std::string path_;
  UniqueFd fd_;
  uint64_t size_;
};

}  // namespace pcrfs
