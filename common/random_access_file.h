// Positional reads from an immutable file. An interface so tests can inject faults and
// corruption (see FaultInjectingFile in tests). What a source that keeps what it reads offers
// beyond reading (readahead, speculative reads, its cached copies) is another interface,
// SpeculationSource (common/speculation_source.h); SourceFile below holds a file with its hooks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/speculation_source.h"
#include "common/status.h"

namespace pcrfs {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly n bytes at offset into dst. Reading past the end is Corruption ("truncated").
  virtual Status Read(uint64_t offset, size_t n, uint8_t* dst) const = 0;
  virtual uint64_t Size() const = 0;
  virtual const std::string& name() const = 0;
};

// pread(2) on an open file; thread-safe. The kernel's own readahead is turned off
// (POSIX_FADV_RANDOM): reads are exact, and callers that know better call Prefetch(). Its
// speculation hooks are the page cache's.
class PosixRandomAccessFile final : public RandomAccessFile, public SpeculationSource {
 public:
  // extra_flags are added to O_RDONLY (e.g. O_NOFOLLOW).
  static Result<std::unique_ptr<PosixRandomAccessFile>> Open(const std::string& path,
                                                             int extra_flags = 0);
  // The same for `name` in the folder open as `dirfd` (openat(2)), named `path` in messages:
  // a folder opened once keeps its files reachable whatever is renamed above it.
  static Result<std::unique_ptr<PosixRandomAccessFile>> OpenAt(int dirfd, const std::string& name,
                                                               const std::string& path,
                                                               int extra_flags = 0);

  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return size_; }
  const std::string& name() const override { return path_; }
  void Prefetch(uint64_t offset, uint64_t n) const override;
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

// A file opened for reading: its bytes (RandomAccessFile) and, when its source keeps what it
// reads, its speculation hooks (null otherwise). Usually one object implements both
// (PosixRandomAccessFile; RemoteFile with a cache); a test's fake file has only the first.
// Copies share the file; cheap to copy (one reference count).
class SourceFile {
 public:
  SourceFile() = default;
  // A file whose source keeps nothing: no speculation.
  explicit SourceFile(std::shared_ptr<const RandomAccessFile> file)
      : owner_(file), file_(file.get()) {}
  // One object that is a file and its own speculation source.
  template <typename T>
  requires(std::is_base_of_v<RandomAccessFile, T>&&
               std::is_base_of_v<SpeculationSource, T>) static SourceFile
      Speculative(std::shared_ptr<T> file) {
    SourceFile f;
    f.file_ = file.get();
    f.speculation_ = file.get();
    f.owner_ = std::move(file);
    return f;
  }

  bool has_file() const { return file_ != nullptr; }
  // REQUIRES: a file (not default-constructed).
  const RandomAccessFile& file() const { return *file_; }
  // Null: the source keeps nothing; read nothing ahead of need from it.
  const SpeculationSource* speculation() const { return speculation_; }
  // The hooks, sharing ownership of the file (null when there are none).
  std::shared_ptr<const SpeculationSource> shared_speculation() const {
    if (speculation_ == nullptr) return nullptr;
    return std::shared_ptr<const SpeculationSource>(owner_, speculation_);
  }

 private:
  std::shared_ptr<const void> owner_;
  const RandomAccessFile* file_ = nullptr;
  const SpeculationSource* speculation_ = nullptr;
};

// A file's first bytes held in memory, read once with one sequential read: reads that lie
// inside them are copies, the rest go to the file itself (a record's level-K prefix for the
// paper's reader: StoreSession::ReadRecord). Keeps the base file open. Thread-safe.
class PrefixFile final : public RandomAccessFile {
 public:
  PrefixFile(SourceFile base, std::vector<uint8_t> prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return base_.file().Size(); }
  const std::string& name() const override { return base_.file().name(); }
  uint64_t prefix_size() const { return prefix_.size(); }

 private:
  SourceFile base_;
  std::vector<uint8_t> prefix_;
};

}  // namespace pcrfs
