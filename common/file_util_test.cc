#include "common/file_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

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

// Processes that write the same file at once (DataLoader workers revalidating one cache
// folder's metadata) each put a whole copy in place: none fails, nothing is left behind. With one
// temporary name for all of them, one's rename took the other's file away (ENOENT).
TEST(FileUtilTest, WriteFileAtomicFromManyProcessesAtOnce) {
  char dir[] = "/tmp/pcrfs-file-util-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/manifest.json.etag";
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string text = "etag of writer " + std::to_string(k);
      int failed = 0;
      for (int i = 0; i < 300; ++i) failed += !WriteFileAtomic(path, text.data(), text.size()).ok();
      ::_exit(failed == 0 ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed";
  }
  EXPECT_EQ(ReadSmallFile(path.c_str()).rfind("etag of writer ", 0), 0u);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.exists();
  EXPECT_EQ(entries, 1) << "temporary files left behind";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pcrfs
