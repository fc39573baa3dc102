#include "common/file_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/log.h"

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

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(FileUtilTest, MakePrivateDirCreatesNarrowsAndRefuses) {
  char tmp[] = "/tmp/pcrfs-private-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string root = tmp;
  // Each new component 0700; *created names the outermost one made.
  std::string created;
  ASSERT_TRUE(MakePrivateDir(root + "/a/b/c", &created).ok());
  EXPECT_EQ(created, root + "/a");
  for (const char* rel : {"/a", "/a/b", "/a/b/c"}) EXPECT_EQ(ModeOf(root + rel), 0700u) << rel;
  ASSERT_TRUE(MakePrivateDir(root + "/a/b/c", &created).ok());
  EXPECT_EQ(created, "");  // nothing new
  // Ours and readable by others (an older pcrfs made 0755 folders): narrowed.
  ASSERT_EQ(::chmod((root + "/a/b/c").c_str(), 0755), 0);
  ASSERT_TRUE(MakePrivateDir(root + "/a/b/c").ok());
  EXPECT_EQ(ModeOf(root + "/a/b/c"), 0700u);
  // Writable by group or others: refused, naming the folder and why, and left as it is.
  ASSERT_EQ(::chmod((root + "/a/b/c").c_str(), 0777), 0);
  Status s = MakePrivateDir(root + "/a/b/c");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(root + "/a/b/c: cache folder refused: writable by group or others"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(ModeOf(root + "/a/b/c"), 0777u);
  // Another user's: refused (needs root to give a folder away).
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod((root + "/a/b/c").c_str(), 0700), 0);
    ASSERT_EQ(::chown((root + "/a/b/c").c_str(), 65534, 65534), 0);
    s = MakePrivateDir(root + "/a/b/c");
    EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.ToString();
  }
  // Not a folder.
  ASSERT_TRUE(WriteFileAtomic(root + "/f", "x", 1).ok());
  EXPECT_FALSE(MakePrivateDir(root + "/f").ok());
  std::filesystem::remove_all(root);
}

TEST(FileUtilTest, WriteFileAtomicNeverWritesThroughAPlantedLink) {
  char tmp[] = "/tmp/pcrfs-atomic-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string root = tmp;
  const std::string victim = root + "/victim";
  ASSERT_TRUE(WriteFileAtomic(victim, "keep", 4).ok());
  // Links where the temporary file goes (path.tmp.PID.N, N this process's count of calls):
  // removed, not followed.
  for (int k = 0; k < 2000; ++k) {
    const std::string link =
        root + "/etag.tmp." + std::to_string(::getpid()) + "." + std::to_string(k);
    ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  }
  ASSERT_TRUE(WriteFileAtomic(root + "/etag", "new", 3, 0600).ok());
  EXPECT_EQ(ReadSmallFile(victim.c_str()), "keep");
  EXPECT_EQ(ReadSmallFile((root + "/etag").c_str()), "new");
  EXPECT_EQ(ModeOf(root + "/etag"), 0600u);
  std::filesystem::remove_all(root);
}

TEST(FileUtilTest, SecretFileReadableByOthersIsWarnedOnce) {
  char tmp[] = "/tmp/pcrfs-secret-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string root = tmp;
  const std::string log = root + "/log", open_file = root + "/open", closed = root + "/closed";
  ASSERT_TRUE(WriteFileAtomic(open_file, "k", 1, 0644).ok());
  ASSERT_TRUE(WriteFileAtomic(closed, "k", 1, 0600).ok());
  ASSERT_TRUE(SetLogFile(log).ok());
  WarnIfReadableByOthers(closed, "option sas_file");
  WarnIfReadableByOthers(open_file, "option sas_file");
  WarnIfReadableByOthers(open_file, "option sas_file");  // once per path
  CloseLogFile();
  const std::string text = ReadSmallFile(log.c_str());
  EXPECT_NE(text.find("option sas_file " + open_file +
                      " is readable by group or others (mode 0644): it holds a secret; chmod "
                      "600 it"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find(closed), std::string::npos) << text;
  EXPECT_EQ(text.find(open_file), text.rfind(open_file)) << text;
  std::filesystem::remove_all(root);
}

TEST(FileUtilTest, RootRunsNoCommandFromAnotherUsersFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "the check is root's";
  char tmp[] = "/tmp/pcrfs-trusted-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string path = std::string(tmp) + "/config";
  ASSERT_TRUE(WriteFileAtomic(path, "x", 1, 0600).ok());
  EXPECT_TRUE(CheckTrustedByRoot(path, "credential_process from").ok());
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  Status s = CheckTrustedByRoot(path, "credential_process from");
  EXPECT_NE(s.message().find("refused: writable by group or others (mode 0666)"), std::string::npos)
      << s.ToString();
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  s = CheckTrustedByRoot(path, "credential_process from");
  EXPECT_NE(s.message().find("credential_process from " + path + " refused: owned by uid 65534"),
            std::string::npos)
      << s.ToString();
  std::filesystem::remove_all(tmp);
}

TEST(FileUtilTest, AKilledWritersLeftoversAreKnownAndRemoved) {
  EXPECT_TRUE(IsAtomicWriteLeftover("index.pcri.tmp.9013.16"));
  EXPECT_TRUE(IsAtomicWriteLeftover("a.tmp.1.0"));
  EXPECT_FALSE(IsAtomicWriteLeftover("index.pcri"));
  EXPECT_FALSE(IsAtomicWriteLeftover("a.tmp"));
  EXPECT_FALSE(IsAtomicWriteLeftover("a.tmp.12"));
  EXPECT_FALSE(IsAtomicWriteLeftover("a.tmp.12."));
  EXPECT_FALSE(IsAtomicWriteLeftover("a.tmp..3"));
  EXPECT_FALSE(IsAtomicWriteLeftover("a.tmp.1x.3"));
  EXPECT_FALSE(IsAtomicWriteLeftover(".tmp.1.3"));
  char tmp[] = "/tmp/pcrfs-leftovers-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string root = tmp;
  ASSERT_TRUE(WriteFileAtomic(root + "/keep", "k", 1).ok());
  for (const char* name : {"/keep.tmp.77.0", "/index.pcri.tmp.9013.16"}) {
    ASSERT_TRUE(WriteFileAtomic(root + name + std::string(".x"), "t", 1).ok());
    ASSERT_EQ(::rename((root + name + ".x").c_str(), (root + name).c_str()), 0);
  }
  auto removed = RemoveAtomicWriteLeftovers(root);
  ASSERT_TRUE(removed) << removed.error().ToString();
  EXPECT_EQ(*removed, 2u);
  EXPECT_EQ(ReadSmallFile((root + "/keep").c_str()), "k");
  EXPECT_NE(::access((root + "/keep.tmp.77.0").c_str(), F_OK), 0);
  EXPECT_FALSE(RemoveAtomicWriteLeftovers(root + "/missing"));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace pcrfs
