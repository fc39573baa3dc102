#include "builder/store_lock.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/test_support.h"

namespace pcrfs::tools {
namespace {

std::string ReadText(const std::string& path) {
  const std::vector<uint8_t> bytes = test::ReadAll(path);
  return std::string(bytes.begin(), bytes.end());
}

TEST(StoreWriterLock, LockFileSitsBesideTheStore) {
  EXPECT_EQ(StoreWriterLock::LockPath("/d/st"), "/d/st.lock");
  EXPECT_EQ(StoreWriterLock::LockPath("/d/st//"), "/d/st.lock");
  EXPECT_EQ(StoreWriterLock::LockPath("st"), "st.lock");
}

TEST(StoreWriterLock, SecondWriterIsRefusedWithTheHoldersPid) {
  test::TempDir dir;
  const std::string store = dir.Join("st");
  {
    auto first = StoreWriterLock::Acquire(store);
    ASSERT_TRUE(first.has_value()) << first.error().ToString();
    EXPECT_EQ(first->path(), store + ".lock");
    EXPECT_EQ(ReadText(store + ".lock").substr(0, std::to_string(::getpid()).size() + 1),
              std::to_string(::getpid()) + " ");

    // flock(2) locks belong to an open file description: a second Acquire in this process
    // conflicts just as another process would.
    auto second = StoreWriterLock::Acquire(store);
    ASSERT_FALSE(second.has_value());
    EXPECT_EQ(second.error().code(), Status::Code::kAlreadyExists);
    const std::string& msg = second.error().message();
    EXPECT_NE(msg.find(store + ": another pcr build (pid " + std::to_string(::getpid())),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("is writing this store"), std::string::npos) << msg;

    // A moved lock is still one lock.
    StoreWriterLock moved = std::move(*first);
    EXPECT_FALSE(StoreWriterLock::Acquire(store).has_value());
  }
  // Released: the file is gone and the next writer gets the lock.
  EXPECT_NE(::access((store + ".lock").c_str(), F_OK), 0);
  auto again = StoreWriterLock::Acquire(store);
  EXPECT_TRUE(again.has_value()) << again.error().ToString();
}

TEST(StoreWriterLock, RefusalNamesTheHoldersCommand) {
  test::TempDir dir;
  const std::string store = dir.Join("st");
  auto merge = StoreWriterLock::Acquire(store, "merge");
  ASSERT_TRUE(merge.has_value()) << merge.error().ToString();
  EXPECT_EQ(ReadText(store + ".lock").substr(ReadText(store + ".lock").size() - 7), " merge\n");
  auto build = StoreWriterLock::Acquire(store, "build");
  ASSERT_FALSE(build.has_value());
  EXPECT_NE(build.error().message().find("another pcr merge (pid " + std::to_string(::getpid())),
            std::string::npos)
      << build.error().message();
}

TEST(StoreWriterLock, OlderLockFilesNameNoCommand) {
  // "PID HOST\n", as an older pcr writes it while holding the lock: that was a build.
  test::TempDir dir;
  const std::string store = dir.Join("st");
  UniqueFd fd(::open((store + ".lock").c_str(), O_RDWR | O_CREAT, 0644));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::flock(fd.get(), LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::pwrite(fd.get(), "77 somehost\n", 12, 0), 12);
  auto refused = StoreWriterLock::Acquire(store);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message().find("another pcr build (pid 77 on host somehost)"),
            std::string::npos)
      << refused.error().message();
}

TEST(StoreWriterLock, AnotherProcessHoldsIt) {
  test::TempDir dir;
  const std::string store = dir.Join("st");
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = StoreWriterLock::Acquire(store);
    const char c = lock ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    char wait_for;
    (void)!::read(done[0], &wait_for, 1);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto refused = StoreWriterLock::Acquire(store);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message().find("(pid " + std::to_string(child) + " on host "),
            std::string::npos)
      << refused.error().message();
  ASSERT_EQ(::write(done[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  // The child exited holding the lock without releasing it: its file stays, unlocked, and the
  // next writer takes it over (a killed build).
  EXPECT_EQ(::access((store + ".lock").c_str(), F_OK), 0);
  auto taken = StoreWriterLock::Acquire(store);
  ASSERT_TRUE(taken.has_value()) << taken.error().ToString();
  EXPECT_EQ(ReadText(store + ".lock").rfind(std::to_string(::getpid()) + " ", 0), 0u);
}

TEST(StoreWriterLock, UnwritableFolderIsAnIOError) {
  auto lock = StoreWriterLock::Acquire("/nonexistent-folder/st");
  ASSERT_FALSE(lock.has_value());
  EXPECT_EQ(lock.error().code(), Status::Code::kIOError);
  EXPECT_NE(lock.error().message().find("/nonexistent-folder/st: cannot create the writer lock"),
            std::string::npos)
      << lock.error().message();
}

}  // namespace
}  // namespace pcrfs::tools
