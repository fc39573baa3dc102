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
    if (f) file_ = std::move(*f);
  }
  ~DroppedFile() {
    ::unlink(path_.c_str());
    ::rmdir(dir_);
  }
  DroppedFile(const DroppedFile&) = delete;
  DroppedFile& operator=(const DroppedFile&) = delete;
  const RandomAccessFile* file() const { return file_.get(); }  // null if it failed
  const std::string& data() const { return data_; }

 private:
  char dir_[26] = "/var/tmp/pcrfs-raf-XXXXXX";
  std::string path_, data_;
  std::unique_ptr<RandomAccessFile> file_;
};

// A speculative read reports what it moved from the device: everything for a file just
// dropped from the page cache (where the file system can drop it: not tmpfs), nothing once the
// pages are cached, and the bytes are the file's either way.
TEST(PosixRandomAccessFileTest, WarmReportsOnlyTheBytesNotCachedYet) {
  constexpr size_t kSize = size_t{3} << 20;
  const DroppedFile dropped(kSize, 7, 253);
  const RandomAccessFile* f = dropped.file();
  ASSERT_NE(f, nullptr);
  const std::string& data = dropped.data();
  std::vector<uint8_t> scratch;
  auto first = f->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_LE(*first, kSize - 8192);
  auto again = f->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0u) << "every page is cached now";
  std::vector<uint8_t> out(kSize);
  ASSERT_TRUE(f->Read(0, kSize, out.data()).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), data);
  EXPECT_FALSE(f->Warm(kSize - 10, 20, &scratch).has_value()) << "past the end";
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
  const std::string& data = file.data();
  std::vector<uint8_t> out(kSize);
  // The drop may not take on every file system; where it did, nothing is copied. (A miss
  // starts the kernel reading the pages asked for, so each range below is asked only once
  // before it is read.)
  const bool dropped = !f->ReadCached(uint64_t{512} << 10, 4096, out.data());
  if (dropped) {
    EXPECT_FALSE(f->ReadCached(100, 60000, out.data()));
  }
  ASSERT_TRUE(f->Read(0, 65536, out.data()).ok());
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(f->ReadCached(100, 60000, out.data())) << "read once: cached";
  EXPECT_EQ(std::string(out.begin(), out.begin() + 60000), data.substr(100, 60000));
  if (dropped) {
    EXPECT_FALSE(f->ReadCached(uint64_t{24} << 20, 8192, out.data())) << "never read";
  }
  EXPECT_FALSE(f->ReadCached(kSize - 10, 20, out.data())) << "past the end";
}

}  // namespace
}  // namespace pcrfs
