#include "common/file_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace pcrfs {
namespace {

TEST(FileUtilTest, ReadSmallFile) {
  char dir[] = "/tmp/pcrfs-file-util-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/f";
  const std::string text = "read_bytes: 123\nmore\n";
  ASSERT_TRUE(WriteFileAtomic(path, text.data(), text.size()).ok());
  EXPECT_EQ(ReadSmallFile(path.c_str()), text);
  EXPECT_EQ(ReadSmallFile(path.c_str(), 4), "read");  // at most max bytes
  EXPECT_EQ(ReadSmallFile((std::string(dir) + "/missing").c_str()), "");
  ::unlink(path.c_str());
  ::rmdir(dir);
  // A /proc file reports st_size 0 and is still read whole.
  const std::string statm = ReadSmallFile("/proc/self/statm");
  EXPECT_FALSE(statm.empty());
  EXPECT_EQ(statm.back(), '\n');
}

}  // namespace
}  // namespace pcrfs
