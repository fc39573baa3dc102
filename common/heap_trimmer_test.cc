#include "common/heap_trimmer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/proc_self.h"

namespace pcrfs {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PCRFS_OWN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PCRFS_OWN_ALLOCATOR 1
#endif
#endif

// 64 MiB in 64 KiB blocks (glibc's heap, below its mmap threshold), every other one freed: holes
// the top-of-heap trim cannot return, which stay resident until malloc_trim.
struct Holes {
  std::vector<std::unique_ptr<char[]>> kept;
  Holes() {
    std::vector<std::unique_ptr<char[]>> all;
    for (int i = 0; i < 1024; ++i) {
      all.emplace_back(new char[64 << 10]);
      std::memset(all.back().get(), i, 64 << 10);  // resident
    }
    for (size_t i = 0; i < all.size(); ++i) {
      if (i % 2 == 1) kept.push_back(std::move(all[i]));
    }
  }
};

TEST(HeapTrimmerTest, FreedHolesGoBackToTheKernel) {
#ifdef PCRFS_OWN_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator is not glibc's";
#endif
  Holes holes;
  ASSERT_GT(HeapTrimmer::FreeHeapBytes(), uint64_t{24} << 20);
  const uint64_t before = proc::ResidentBytes();
  EXPECT_FALSE(HeapTrimmer::TrimIfOver(uint64_t{1} << 40)) << "under the threshold: no trim";
  EXPECT_TRUE(HeapTrimmer::TrimIfOver(uint64_t{16} << 20));
  const uint64_t after = proc::ResidentBytes();
  ASSERT_GT(before, 0u);
  // 32 MiB were freed; nearly all of it is no longer resident.
  EXPECT_LT(after + (uint64_t{24} << 20), before) << before << " -> " << after;
  // What is kept is untouched.
  for (size_t i = 0; i < holes.kept.size(); ++i) {
    ASSERT_EQ(holes.kept[i][100], static_cast<char>(2 * i + 1));
  }
}

TEST(HeapTrimmerTest, TheThreadTrimsWhenMuchIsFree) {
#ifdef PCRFS_OWN_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator is not glibc's";
#endif
  Holes holes;
  const uint64_t before = proc::ResidentBytes();
  HeapTrimmer trimmer({.interval = std::chrono::milliseconds(5), .min_free_bytes = 8 << 20});
  for (int i = 0; i < 2000 && trimmer.trims() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(trimmer.trims(), 0u);
  // The free bytes stay free in malloc's books; their pages are no longer resident.
  EXPECT_LT(proc::ResidentBytes() + (uint64_t{24} << 20), before);
}

}  // namespace
}  // namespace pcrfs
