// The test fakes and helpers every unit test shares (library pcrfs_test_support): temporary
// directories, whole-file I/O, and RandomAccessFile fakes (in memory, failing a byte range).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/random_access_file.h"

namespace pcrfs::test {

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<uint8_t> ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::vector<uint8_t>& data);
// The paths of the files in dir whose extension is ext (".seg"), sorted.
std::vector<std::string> FilesWithExtension(const std::string& dir, const std::string& ext);

// An in-memory file with the given contents. Reading past the end is Corruption, as for a
// truncated file.
class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string name, std::vector<uint8_t> data)
      : name_(std::move(name)), data_(std::move(data)) {}
  MemoryFile(std::string name, std::span<const uint8_t> data)
      : name_(std::move(name)), data_(data.begin(), data.end()) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return data_.size(); }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  std::vector<uint8_t> data_;
};

// Wraps a file; reads overlapping [bad_begin, bad_end) fail with EIO, as on storage with bad
// sectors. The base is borrowed (it must outlive this file) or owned, as when a Store's
// record-file opener (StoreOptions::open_record) hands out the wrapped file.
class FaultInjectingFile final : public RandomAccessFile {
 public:
  FaultInjectingFile(const RandomAccessFile* base, uint64_t bad_begin, uint64_t bad_end)
      : base_(base), bad_begin_(bad_begin), bad_end_(bad_end) {}
  FaultInjectingFile(std::unique_ptr<RandomAccessFile> base, uint64_t bad_begin, uint64_t bad_end)
      : owned_(std::move(base)), base_(owned_.get()), bad_begin_(bad_begin), bad_end_(bad_end) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t Size() const override { return base_->Size(); }
  const std::string& name() const override { return base_->name(); }

 private:
  std::unique_ptr<RandomAccessFile> owned_;  // null when borrowed
  const RandomAccessFile* base_;
  uint64_t bad_begin_, bad_end_;
};

}  // namespace pcrfs::test
