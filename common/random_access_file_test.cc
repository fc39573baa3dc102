#include "common/random_access_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/test_support.h"

namespace pcrfs {
namespace {

// A file of `size` bytes under /var/tmp (not tmpfs, where nothing can be dropped from the page
// cache), written, synced and dropped from the page cache where the file system allows, and
// opened as a PosixRandomAccessFile. Removed with its folder at the end of the test.
class DroppedFile {
 public:
  DroppedFile(size_t size, size_t mul, size_t mod) : data_(size, '\0') {
    EXPECT_NE(::mkdtemp(dir_), nullptr);
    path_ = std::string(dir_) + "/f";
    for (size_t i = 0; i < size; ++i) data_[i] = static_cast<char>((i * mul) % mod);
    EXPECT_TRUE(WriteFileAtomic(path_, data_.data(), data_.size()).ok());
    auto fd = OpenFile(path_, O_RDONLY);
    EXPECT_TRUE(fd.has_value());
    if (fd) {
      ::fdatasync(fd->get());  // dirty pages are not dropped
      ::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_DONTNEED);
    }
    auto f = PosixRandomAccessFile::Open(path_);
    EXPECT_TRUE(f.has_value());
    if (f) file_ = SourceFile::Speculative(std::shared_ptr<PosixRandomAccessFile>(std::move(*f)));
  }
  ~DroppedFile() {
    ::unlink(path_.c_str());
    ::rmdir(dir_);
  }
  DroppedFile(const DroppedFile&) = delete;
  DroppedFile& operator=(const DroppedFile&) = delete;
  // Null if it failed to open.
  const RandomAccessFile* file() const { return hooks() ? &file_.file() : nullptr; }
  const SpeculationSource* hooks() const { return file_.speculation(); }
  const std::string& data() const { return data_; }

 private:
  char dir_[26] = "/var/tmp/pcrfs-raf-XXXXXX";
  std::string path_, data_;
  SourceFile file_;
};

// A speculative read reports what it moved from the device: everything for a file just
// dropped from the page cache (where the file system can drop it: not tmpfs), nothing once the
// pages are cached, and the bytes are the file's either way.
TEST(PosixRandomAccessFileTest, WarmReportsOnlyTheBytesNotCachedYet) {
  constexpr size_t kSize = size_t{3} << 20;
  const DroppedFile dropped(kSize, 7, 253);
  const RandomAccessFile* f = dropped.file();
  ASSERT_NE(f, nullptr);
  const SpeculationSource* hooks = dropped.hooks();
  const std::string& data = dropped.data();
  std::vector<uint8_t> scratch;
  auto first = hooks->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_LE(*first, kSize - 8192);
  auto again = hooks->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0u) << "every page is cached now";
  std::vector<uint8_t> out(kSize);
  ASSERT_TRUE(f->Read(0, kSize, out.data()).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), data);
  EXPECT_FALSE(hooks->Warm(kSize - 10, 20, &scratch).has_value()) << "past the end";
}

// ReadCached copies only what the page cache holds whole: a dropped file (where the file system
// can drop it: not tmpfs) reads nothing, the same range once read reads the file's bytes, and a
// range that runs into a dropped page or past the end is refused.
//
// The file is larger than any readahead reaches (read_ahead_kb is 8 MiB on the project's
// disk): the "never read" range sits 24 MiB in. At 256 KiB of a 1 MiB file it was flaky: the
// cached copy of [100, 60100) met the first read's readahead marker and started an
// asynchronous readahead of the next window, which could land before the check.
TEST(PosixRandomAccessFileTest, ReadCachedCopiesOnlyWhatThePageCacheHolds) {
  constexpr size_t kSize = size_t{32} << 20;
  const DroppedFile file(kSize, 13, 251);
  const RandomAccessFile* f = file.file();
  ASSERT_NE(f, nullptr);
  const SpeculationSource* hooks = file.hooks();
  const std::string& data = file.data();
  std::vector<uint8_t> out(kSize);
  // The drop may not take on every file system; where it did, nothing is copied. (A miss
  // starts the kernel reading the pages asked for, so each range below is asked only once
  // before it is read.)
  const bool dropped = !hooks->ReadCached(uint64_t{512} << 10, 4096, out.data());
  if (dropped) {
    EXPECT_FALSE(hooks->ReadCached(100, 60000, out.data()));
  }
  ASSERT_TRUE(f->Read(0, 65536, out.data()).ok());
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(hooks->ReadCached(100, 60000, out.data())) << "read once: cached";
  EXPECT_EQ(std::string(out.begin(), out.begin() + 60000), data.substr(100, 60000));
  if (dropped) {
    EXPECT_FALSE(hooks->ReadCached(uint64_t{24} << 20, 8192, out.data())) << "never read";
  }
  EXPECT_FALSE(hooks->ReadCached(kSize - 10, 20, out.data())) << "past the end";
}

// A SourceFile carries speculation hooks only when made from a file that has them, and keeps
// the file alive as long as a copy of it or of its shared hooks lives.
TEST(SourceFileTest, HooksOnlyFromASpeculativeFileAndSharedOwnership) {
  std::string path = "/tmp/pcrfs-sourcefile-XXXXXX";
  const int fd = ::mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "0123456789", 10), 10);
  ::close(fd);
  auto opened = PosixRandomAccessFile::Open(path);
  ASSERT_TRUE(opened.has_value());
  std::shared_ptr<PosixRandomAccessFile> posix(std::move(*opened));
  std::weak_ptr<PosixRandomAccessFile> alive = posix;

  {
    const SourceFile plain(std::shared_ptr<const RandomAccessFile>{posix});
    EXPECT_EQ(plain.speculation(), nullptr) << "a file alone has no hooks";
    EXPECT_EQ(plain.shared_speculation(), nullptr);
    EXPECT_EQ(&plain.file(), posix.get());
  }

  std::shared_ptr<const SpeculationSource> hooks;
  {
    const SourceFile speculative = SourceFile::Speculative(std::move(posix));
    EXPECT_EQ(speculative.speculation(), static_cast<const SpeculationSource*>(alive.lock().get()));
    EXPECT_EQ(&speculative.file(), static_cast<const RandomAccessFile*>(alive.lock().get()));
    hooks = speculative.shared_speculation();
    EXPECT_EQ(hooks.get(), speculative.speculation());
  }
  EXPECT_FALSE(alive.expired()) << "the shared hooks keep the file open";
  std::vector<uint8_t> scratch;
  auto moved = hooks->Warm(2, 5, &scratch);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(std::string(scratch.begin(), scratch.begin() + 5), "23456");
  hooks.reset();
  EXPECT_TRUE(alive.expired());
  ::unlink(path.c_str());
}

// A record's prefix held in memory: reads inside it are copies (the base is not read: a fault
// there does not touch them), reads that pass its end go to the base file.
TEST(PrefixFileTest, ReadsInsideThePrefixAreCopiesTheRestGoToTheFile) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  auto base = std::make_shared<test::MemoryFile>("rec.pcr", data);
  std::vector<uint8_t> prefix(data.begin(), data.begin() + 300);
  prefix[10] ^= 0xff;  // tells a copy from a read of the base
  const PrefixFile file(SourceFile(base), prefix);
  EXPECT_EQ(file.Size(), 1000u);
  EXPECT_EQ(file.name(), "rec.pcr");
  EXPECT_EQ(file.prefix_size(), 300u);
  std::vector<uint8_t> out(300);
  ASSERT_TRUE(file.Read(0, 300, out.data()).ok());
  EXPECT_EQ(out, prefix);
  ASSERT_TRUE(file.Read(5, 20, out.data()).ok());
  EXPECT_EQ(out[5], prefix[10]);
  ASSERT_TRUE(file.Read(290, 20, out.data()).ok());  // crosses the prefix's end: the base's
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 20, data.begin() + 290));
  EXPECT_FALSE(file.Read(990, 20, out.data()).ok());  // past the end: the base's Corruption
  ASSERT_TRUE(file.Read(300, 0, out.data()).ok());
}

}  // namespace
}  // namespace pcrfs
