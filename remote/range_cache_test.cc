#include "remote/range_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "common/test_support.h"

namespace pcrfs {
namespace {

using Range = RangeCache::Range;

std::shared_ptr<const std::vector<uint8_t>> Bytes(uint64_t offset, uint64_t n) {
  auto v = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i)
    (*v)[static_cast<size_t>(i)] = static_cast<uint8_t>((offset + i) * 7);
  return v;
}

bool Same(const std::vector<Range>& a, const std::vector<Range>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].offset != b[i].offset || a[i].length != b[i].length) return false;
  }
  return true;
}

std::shared_ptr<RangeCache> Open(RangeCacheOptions o, std::string* note = nullptr) {
  auto c = RangeCache::Open(std::move(o), note);
  EXPECT_TRUE(c.has_value());
  return c ? *c : nullptr;
}

TEST(RangeCacheTest, CopiesWhatItKeepsAndNamesTheGaps) {
  auto cache = Open({});
  cache->Insert(1, 100, Bytes(100, 50), false);
  cache->Insert(1, 200, Bytes(200, 50), false);
  std::vector<uint8_t> dst(300, 0xAA);
  auto missing = cache->Copy(1, 0, 300, dst.data());
  EXPECT_TRUE(Same(missing, {{0, 100}, {150, 50}, {250, 50}}));
  for (uint64_t i = 100; i < 150; ++i) EXPECT_EQ(dst[i], static_cast<uint8_t>(i * 7));
  for (uint64_t i = 200; i < 250; ++i) EXPECT_EQ(dst[i], static_cast<uint8_t>(i * 7));
  EXPECT_EQ(dst[0], 0xAA);  // gaps untouched
  // Another object is apart.
  EXPECT_TRUE(Same(cache->Missing(2, 100, 50), {{100, 50}}));
  // An overlapping insert keeps only the new parts; the bytes stay right.
  cache->Insert(1, 120, Bytes(120, 120), false);
  missing = cache->Copy(1, 100, 150, dst.data());
  EXPECT_TRUE(missing.empty());
  for (uint64_t i = 100; i < 250; ++i) EXPECT_EQ(dst[i - 100], static_cast<uint8_t>(i * 7));
  EXPECT_EQ(cache->stats().memory_bytes, 150u);
}

TEST(RangeCacheTest, MemoryBudgetEvictsLeastRecentlyUsed) {
  RangeCacheOptions o;
  o.memory_bytes = 300;
  auto cache = Open(o);
  cache->Insert(1, 0, Bytes(0, 100), false);
  cache->Insert(1, 100, Bytes(100, 100), false);
  cache->Insert(1, 200, Bytes(200, 100), false);
  std::vector<uint8_t> dst(100);
  EXPECT_TRUE(cache->Copy(1, 0, 100, dst.data()).empty());  // 0 is now the most recent
  cache->Insert(1, 300, Bytes(300, 100), false);            // evicts 100..200
  EXPECT_TRUE(Same(cache->Missing(1, 0, 400), {{100, 100}}));
  EXPECT_LE(cache->stats().memory_bytes, 300u);
  EXPECT_EQ(cache->stats().evicted_bytes, 100u);
}

TEST(RangeCacheTest, SpeculativeBytesCountUntilRead) {
  constexpr uint64_t kKiB = 1024;
  RangeCacheOptions o;
  o.memory_bytes = 1024 * kKiB;
  auto cache = Open(o);
  EXPECT_TRUE(cache->WantsSpeculation());
  cache->Insert(1, 0, Bytes(0, 800 * kKiB), true);
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 800 * kKiB);
  EXPECT_FALSE(cache->WantsSpeculation());  // over 3/4 of the budget unread
  std::vector<uint8_t> dst(400 * kKiB);
  cache->Copy(1, 0, 400 * kKiB, dst.data());
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 400 * kKiB);
  EXPECT_TRUE(cache->WantsSpeculation());
  cache->Copy(1, 0, 400 * kKiB, dst.data());  // a second read of the same bytes counts once
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 400 * kKiB);
  cache->Insert(1, 0, Bytes(0, 1), false);  // demand bytes are never unread
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 400 * kKiB);
}

TEST(RangeCacheTest, DiskTierOutlivesTheCacheAndHoldsItsCap) {
  test::TempDir dir;
  RangeCacheOptions o;
  o.memory_bytes = 1 << 20;
  o.disk_dir = dir.path() + "/chunks/id";
  o.disk_bytes = 1000;
  {
    auto cache = Open(o);
    ASSERT_TRUE(cache->stats().disk);
    cache->Insert(3, 0, Bytes(0, 400), false);
    cache->Insert(3, 1000, Bytes(1000, 400), false);
    cache->Insert(4, 0, Bytes(0, 400), false);  // over 1000: the oldest file goes
    EXPECT_LE(cache->stats().disk_bytes, 1000u);
  }
  uint64_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.disk_dir)) {
    if (e.path().filename().string()[0] != '.') on_disk += e.file_size();
  }
  EXPECT_EQ(on_disk, 800u);
  // A new cache adopts the files: the bytes come from disk, not memory.
  std::ofstream(o.disk_dir + "/00000009-0-100") << "short";  // size disagrees: removed
  auto cache = Open(o);
  std::vector<uint8_t> dst(400);
  EXPECT_TRUE(cache->Copy(4, 0, 400, dst.data()).empty());
  for (uint64_t i = 0; i < 400; ++i) EXPECT_EQ(dst[i], static_cast<uint8_t>(i * 7));
  EXPECT_EQ(cache->stats().disk_hit_bytes, 400u);
  EXPECT_FALSE(std::filesystem::exists(o.disk_dir + "/00000009-0-100"));
  // Drop forgets both tiers and removes the file.
  EXPECT_TRUE(cache->Drop(4, 10, 1));
  EXPECT_TRUE(Same(cache->Missing(4, 0, 400), {{0, 400}}));
  EXPECT_FALSE(cache->Drop(4, 10, 1));
}

TEST(RangeCacheTest, ASecondProcessOfTheFolderKeepsNoDiskTier) {
  test::TempDir dir;
  RangeCacheOptions o;
  o.disk_dir = dir.path() + "/chunks/id";
  o.disk_bytes = 1 << 20;
  auto first = Open(o);
  ASSERT_TRUE(first->stats().disk);
  std::string note;
  auto second = Open(o, &note);  // flock is per open file description: refused here too
  EXPECT_FALSE(second->stats().disk);
  EXPECT_NE(note.find("in use by another pcrfs process"), std::string::npos) << note;
}

}  // namespace
}  // namespace pcrfs
