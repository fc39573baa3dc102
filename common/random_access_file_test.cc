#include "common/random_access_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/file_util.h"

namespace pcrfs {
namespace {

// A speculative read reports what it moved from the device: everything for a file just
// dropped from the page cache (where the file system can drop it: not tmpfs), nothing once the
// pages are cached, and the bytes are the file's either way.
TEST(PosixRandomAccessFileTest, WarmReportsOnlyTheBytesNotCachedYet) {
  char dir[] = "/var/tmp/pcrfs-raf-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/f";
  constexpr size_t kSize = size_t{3} << 20;
  std::string data(kSize, '\0');
  for (size_t i = 0; i < kSize; ++i) data[i] = static_cast<char>((i * 7) % 253);
  ASSERT_TRUE(WriteFileAtomic(path, data.data(), data.size()).ok());
  auto f = PosixRandomAccessFile::Open(path);
  ASSERT_TRUE(f.has_value());
  {
    auto fd = OpenFile(path, O_RDONLY);
    ASSERT_TRUE(fd.has_value());
    ::fdatasync(fd->get());
    ::posix_fadvise(fd->get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  std::vector<uint8_t> scratch;
  auto first = (*f)->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_LE(*first, kSize - 8192);
  auto again = (*f)->Warm(4096, kSize - 8192, &scratch);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 0u) << "every page is cached now";
  std::vector<uint8_t> out(kSize);
  ASSERT_TRUE((*f)->Read(0, kSize, out.data()).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), data);
  EXPECT_FALSE((*f)->Warm(kSize - 10, 20, &scratch).has_value()) << "past the end";
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace pcrfs
