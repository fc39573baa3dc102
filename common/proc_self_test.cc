#include "common/proc_self.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace pcrfs {
namespace {

// The file is read through an fd kept open per thread; a forked child must read its own,
// not its parent's (an fd opened via /proc/self names the process that opened it).
TEST(ProcSelfTest, ResidentFileBytesIsTheCallersAfterAFork) {
  // Shared memory (memfd) counts in statm's "shared" as a mapped file does, with no disk I/O.
  constexpr size_t kBytes = size_t{32} << 20;
  const int fd = ::memfd_create("pcrfs-proc-self-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    const std::vector<char> block(1 << 20, 'x');
    for (size_t i = 0; i < kBytes; i += block.size()) {
      ASSERT_EQ(::write(fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    }
  }
  const uint64_t parent_before = proc::ResidentFileBytes();  // opens this thread's fd
  ASSERT_GT(parent_before, 0u);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const uint64_t base = proc::ResidentFileBytes();
    void* p = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) ::_exit(2);
    volatile char sum = 0;
    for (size_t i = 0; i < kBytes; i += 4096) sum = sum + static_cast<const char*>(p)[i];
    // Only this process mapped the file: its count grows by it.
    ::_exit(proc::ResidentFileBytes() >= base + kBytes - (size_t{1} << 20) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child read its own /proc/self/statm";
  // And the parent's did not grow by the child's mapping.
  EXPECT_LT(proc::ResidentFileBytes(), parent_before + kBytes / 2);
  ::close(fd);
}

TEST(ProcSelfTest, ResidentBytesCountsAnonymousMemory) {
  const uint64_t before = proc::ResidentBytes();
  ASSERT_GT(before, 0u);
  EXPECT_GE(before, proc::ResidentFileBytes());
  constexpr size_t kBytes = size_t{64} << 20;
  void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  for (size_t i = 0; i < kBytes; i += 4096) static_cast<volatile char*>(p)[i] = 1;
  EXPECT_GE(proc::ResidentBytes(), before + kBytes - (size_t{4} << 20));
  ::munmap(p, kBytes);
}

}  // namespace
}  // namespace pcrfs
