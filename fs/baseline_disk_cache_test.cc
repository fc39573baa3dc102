#include "fs/baseline_disk_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/test_support.h"
#include "fs/baseline_cache.h"

namespace pcrfs::fs {
namespace {

using test::ReadAll;
using test::TempDir;
using test::WriteAll;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return v;
}

std::unique_ptr<BaselineDiskCache> OpenOk(const std::string& dir, uint64_t budget) {
  std::string note;
  auto c = BaselineDiskCache::Open(dir, budget, &note);
  EXPECT_TRUE(c) << c.error().message();
  EXPECT_TRUE(note.empty()) << note;
  return c ? std::move(*c) : nullptr;
}

TEST(BaselineDiskCacheTest, KeepsFilesAcrossOpens) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  {
    auto c = OpenOk(dir, 64 << 20);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->Get(17), nullptr);
    EXPECT_FALSE(c->Size(17));
    for (uint8_t i = 1; i <= 50; ++i) c->Put(i * 16 + 1, Pattern(1000 + i * 37, i));
    c->Put(17, Pattern(5, 0));  // kept already: ignored
    EXPECT_EQ(c->stats().files, 50u);
    EXPECT_EQ(*c->Size(17), 1037u);
    ASSERT_NE(c->Get(17), nullptr);
    EXPECT_EQ(*c->Get(17), Pattern(1037, 1));
  }
  // Small files share one segment: two files on disk, not fifty.
  EXPECT_EQ(test::FilesWithExtension(dir, ".seg").size(), 1u);
  EXPECT_EQ(test::FilesWithExtension(dir, ".idx").size(), 1u);
  auto c = OpenOk(dir, 64 << 20);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->stats().adopted, 50u);
  for (uint8_t i = 1; i <= 50; ++i) {
    EXPECT_EQ(*c->Size(i * 16 + 1), 1000u + i * 37);
    auto b = c->Get(i * 16 + 1);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(*b, Pattern(1000 + i * 37, i));
  }
  EXPECT_EQ(c->stats().hits, 50u);
  EXPECT_EQ(c->stats().damaged, 0u);
}

TEST(BaselineDiskCacheTest, DamagedBytesAreDroppedAndMadeAgain) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  {
    auto c = OpenOk(dir, 64 << 20);
    c->Put(33, Pattern(4000, 3));
    c->Put(49, Pattern(3000, 4));
  }
  // One byte of the first file's bytes flipped on disk.
  const std::string seg = test::FilesWithExtension(dir, ".seg").at(0);
  std::vector<uint8_t> bytes = ReadAll(seg);
  bytes[1234] ^= 0x40;
  WriteAll(seg, bytes);
  {
    auto c = OpenOk(dir, 64 << 20);
    EXPECT_EQ(*c->Size(33), 4000u);  // unchecked until read
    EXPECT_EQ(c->Get(33), nullptr);  // damaged: never served
    EXPECT_EQ(c->stats().damaged, 1u);
    EXPECT_FALSE(c->Size(33));  // forgotten
    ASSERT_NE(c->Get(49), nullptr);
    EXPECT_EQ(*c->Get(49), Pattern(3000, 4));
    c->Put(33, Pattern(4000, 3));  // made again: into this mount's segment
    EXPECT_EQ(*c->Get(33), Pattern(4000, 3));
  }
  // The newer copy wins at the next open.
  auto c = OpenOk(dir, 64 << 20);
  ASSERT_NE(c->Get(33), nullptr);
  EXPECT_EQ(*c->Get(33), Pattern(4000, 3));
  EXPECT_EQ(c->stats().damaged, 0u);
}

TEST(BaselineDiskCacheTest, ATornOrDamagedIndexLosesOnlyItsEntries) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  {
    auto c = OpenOk(dir, 64 << 20);
    for (uint64_t k = 1; k <= 4; ++k) c->Put(k, Pattern(100 * k, static_cast<uint8_t>(k)));
  }
  const std::string idx = test::FilesWithExtension(dir, ".idx").at(0);
  std::vector<uint8_t> entries = ReadAll(idx);
  ASSERT_EQ(entries.size(), 4 * BaselineDiskCache::kEntryBytes);
  entries[BaselineDiskCache::kEntryBytes + 17] ^= 1;  // entry 2's length
  entries.resize(entries.size() - 5);                 // entry 4 torn
  WriteAll(idx, entries);
  auto c = OpenOk(dir, 64 << 20);
  EXPECT_EQ(c->stats().files, 2u);
  EXPECT_EQ(*c->Get(1), Pattern(100, 1));
  EXPECT_EQ(c->Get(2), nullptr);
  EXPECT_EQ(*c->Get(3), Pattern(300, 3));
  EXPECT_EQ(c->Get(4), nullptr);
  EXPECT_EQ(c->stats().damaged, 0u);  // not kept is not damaged
}

TEST(BaselineDiskCacheTest, StaysWithinItsBudgetOldestSegmentsFirst) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  const uint64_t budget = 4 << 20;  // segments of 1 MiB
  auto c = OpenOk(dir, budget);
  for (uint64_t k = 1; k <= 100; ++k) c->Put(k, Pattern(100 << 10, static_cast<uint8_t>(k)));
  const auto s = c->stats();
  EXPECT_LE(s.bytes, budget);
  EXPECT_GT(s.bytes, budget / 2);
  EXPECT_GT(s.evicted_segments, 0u);
  EXPECT_EQ(s.files + s.evicted_files, 100u);
  EXPECT_EQ(c->Get(1), nullptr);  // the oldest went
  ASSERT_NE(c->Get(100), nullptr);
  EXPECT_EQ(*c->Get(100), Pattern(100 << 10, 100));
  uint64_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() != ".lock") on_disk += e.file_size();
  }
  EXPECT_EQ(on_disk, s.bytes);
  c.reset();
  // A smaller budget at the next open drops the oldest segments.
  auto d = OpenOk(dir, 2 << 20);
  EXPECT_LE(d->stats().bytes, uint64_t{2} << 20);
  ASSERT_NE(d->Get(100), nullptr);
}

TEST(BaselineDiskCacheTest, OneProcessAtATimeUsesAFolder) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  auto c = OpenOk(dir, 1 << 20);
  // flock locks are per open file description: a second open in this process conflicts too.
  std::string note;
  auto second = BaselineDiskCache::Open(dir, 1 << 20, &note);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, nullptr);
  EXPECT_NE(note.find("in use by another pcrfs process"), std::string::npos) << note;
}

TEST(BaselineDiskCacheTest, StrayFilesAreRemoved) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  {
    auto c = OpenOk(dir, 1 << 20);
    c->Put(5, Pattern(10, 5));
  }
  WriteAll(dir + "/junk", Pattern(10, 1));
  WriteAll(dir + "/00000000000000ff.seg", Pattern(10, 1));  // no .idx
  auto c = OpenOk(dir, 1 << 20);
  EXPECT_FALSE(std::filesystem::exists(dir + "/junk"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/00000000000000ff.seg"));
  EXPECT_EQ(*c->Get(5), Pattern(10, 5));
  c->Put(6, Pattern(10, 6));  // a new segment after the highest number seen
  EXPECT_TRUE(std::filesystem::exists(dir + "/0000000000000100.seg"));
}

TEST(BaselineCacheTest, TheDiskTierSavesLoadsAcrossMounts) {
  TempDir tmp;
  const std::string dir = tmp.Join("b");
  std::atomic<int> loads{0};
  auto loader = [&](uint64_t ino) {
    return [&, ino]() -> Result<BaselineCache::Bytes> {
      ++loads;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return std::make_shared<const std::vector<uint8_t>>(
          Pattern(2000 + ino, static_cast<uint8_t>(ino)));
    };
  };
  {
    BaselineCache cache(1 << 20, 64, OpenOk(dir, 8 << 20));
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&] {
        auto b = cache.GetOrLoad(33, loader(33));
        ASSERT_TRUE(b);
        EXPECT_EQ(**b, Pattern(2033, 33));
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(loads, 1);  // concurrent requests load once
    ASSERT_TRUE(cache.GetOrLoad(49, loader(49)));
    EXPECT_EQ(loads, 2);
    EXPECT_EQ(cache.stats().disk_stats.written, 2u);
  }
  BaselineCache cache(1 << 20, 64, OpenOk(dir, 8 << 20));
  EXPECT_EQ(*cache.Size(33), 2033u);  // from the disk tier: no load
  EXPECT_EQ(*cache.Size(49), 2049u);
  auto b = cache.GetOrLoad(49, loader(49));
  ASSERT_TRUE(b);
  EXPECT_EQ(**b, Pattern(2049, 49));
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(cache.stats().transcoded, 0u);
  EXPECT_TRUE(cache.stats().disk);
  EXPECT_EQ(cache.stats().disk_stats.hits, 1u);
}

}  // namespace
}  // namespace pcrfs::fs
