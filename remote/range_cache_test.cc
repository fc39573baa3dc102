#include "remote/range_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
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

// What the memory tier counts is what it holds: a buffer of which only a part was new is not
// kept whole by the extents of that part (a 512 KiB GET whose gap was one piece held 512 KiB
// for the piece's bytes, beyond the budget).
TEST(RangeCacheTest, APartlyNewBufferIsNotKeptWhole) {
  auto cache = Open({});
  cache->Insert(1, 0, Bytes(0, 100), false);
  auto whole = Bytes(0, 1000);
  cache->Insert(1, 0, whole, false);
  EXPECT_EQ(whole.use_count(), 1);  // only this test holds it
  EXPECT_EQ(cache->stats().memory_bytes, 1000u);
  std::vector<uint8_t> dst(1000);
  EXPECT_TRUE(cache->Copy(1, 0, 1000, dst.data()).empty());
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(dst[i], static_cast<uint8_t>(i * 7));
  auto fresh = Bytes(2000, 500);  // all new: kept as it is, not copied
  cache->Insert(1, 2000, fresh, false);
  EXPECT_EQ(fresh.use_count(), 2);
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

bool CopiesRight(RangeCache& cache, uint32_t id, uint64_t offset, uint64_t n) {
  std::vector<uint8_t> dst(n);
  if (!cache.Copy(id, offset, n, dst.data()).empty()) return false;
  return dst == *Bytes(offset, n);
}

// Bytes fetched ahead take at most half of the tier (AheadRoom), counting what is being fetched
// (ReserveAhead), and count as unread, byte by byte, until read.
TEST(RangeCacheTest, SpeculativeBytesCountUntilRead) {
  constexpr uint64_t kKiB = 1024;
  RangeCacheOptions o;
  o.memory_bytes = 1024 * kKiB;
  auto cache = Open(o);
  EXPECT_EQ(cache->AheadRoom(), 512 * kKiB);
  ASSERT_TRUE(cache->ReserveAhead(400 * kKiB));
  EXPECT_EQ(cache->AheadRoom(), 112 * kKiB);
  EXPECT_FALSE(cache->ReserveAhead(200 * kKiB));  // does not fit: nothing taken
  EXPECT_EQ(cache->AheadRoom(), 112 * kKiB);
  cache->Insert(1, 0, Bytes(0, 400 * kKiB), true);  // the reservation becomes unread bytes
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 400 * kKiB);
  EXPECT_EQ(cache->stats().reserved_ahead_bytes, 0u);
  EXPECT_EQ(cache->AheadRoom(), 112 * kKiB);
  std::vector<uint8_t> dst(100 * kKiB);
  cache->Copy(1, 0, 100 * kKiB, dst.data());
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 300 * kKiB);
  EXPECT_EQ(cache->AheadRoom(), 212 * kKiB);
  cache->Copy(1, 0, 100 * kKiB, dst.data());  // a second read of the same bytes counts once
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 300 * kKiB);
  cache->Copy(1, 200 * kKiB + 7, 10, dst.data());  // exactly the bytes read, not pages
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 300 * kKiB - 10);
  cache->MarkRead(1, 200 * kKiB, 100 * kKiB);  // taken from the fetch itself
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 200 * kKiB);
  cache->Insert(2, 0, Bytes(0, 1), false);  // demand bytes are never unread
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 200 * kKiB);
  ASSERT_TRUE(cache->ReserveAhead(300 * kKiB));
  cache->UnreserveAhead(300 * kKiB);  // a fetch ahead that failed gives its room back
  EXPECT_EQ(cache->AheadRoom(), 312 * kKiB);
}

// While the readers name their order (hints), bytes fetched ahead may take three quarters of the
// tier: all of them will be read, in the order fetched. Back to half when they stop; bytes
// unread beyond it stay (no room until they are read), never evicted for it.
TEST(RangeCacheTest, AKnownOrderWidensTheRoomAhead) {
  constexpr uint64_t kKiB = 1024;
  RangeCacheOptions o;
  o.memory_bytes = 1024 * kKiB;
  auto cache = Open(o);
  EXPECT_EQ(cache->AheadRoom(), 512 * kKiB);
  cache->SetOrderKnown(true);
  EXPECT_EQ(cache->AheadRoom(), 768 * kKiB);
  ASSERT_TRUE(cache->ReserveAhead(700 * kKiB));
  cache->Insert(1, 0, Bytes(0, 700 * kKiB), true);
  EXPECT_EQ(cache->AheadRoom(), 68 * kKiB);
  cache->SetOrderKnown(false);
  EXPECT_EQ(cache->AheadRoom(), 0u);
  EXPECT_FALSE(cache->ReserveAhead(1));
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 700 * kKiB);
  EXPECT_TRUE(CopiesRight(*cache, 1, 0, 700 * kKiB));  // nothing was evicted
  EXPECT_EQ(cache->AheadRoom(), 512 * kKiB);
}

// A full tier evicts bytes already read before any unread one, whatever their recency: a level
// many times the cache, read in a shuffled order, otherwise lost what was fetched ahead for it
// before it was read, and fetched it again.
TEST(RangeCacheTest, UnreadBytesAreEvictedLast) {
  constexpr uint64_t kKiB = 1024;
  RangeCacheOptions o;
  o.memory_bytes = 1024 * kKiB;
  auto cache = Open(o);
  ASSERT_TRUE(cache->ReserveAhead(400 * kKiB));
  cache->Insert(1, 0, Bytes(0, 400 * kKiB), true);   // the oldest, unread
  cache->Insert(2, 0, Bytes(0, 500 * kKiB), false);  // read on demand
  cache->Insert(3, 0, Bytes(0, 300 * kKiB), false);  // over the budget: 2 goes
  EXPECT_TRUE(cache->Missing(1, 0, 400 * kKiB).empty());
  EXPECT_TRUE(Same(cache->Missing(2, 0, 500 * kKiB), {{0, 500 * kKiB}}));
  EXPECT_EQ(cache->stats().evicted_unread_bytes, 0u);
  // Partly read: its read part goes before anything unread, the unread parts stay.
  std::vector<uint8_t> dst(100 * kKiB);
  cache->Copy(1, 100 * kKiB, 100 * kKiB, dst.data());
  cache->Insert(4, 0, Bytes(0, 700 * kKiB), true);  // 3 goes, then 1's read part
  EXPECT_TRUE(Same(cache->Missing(1, 0, 400 * kKiB), {{100 * kKiB, 100 * kKiB}}));
  EXPECT_TRUE(Same(cache->Missing(3, 0, 300 * kKiB), {{0, 300 * kKiB}}));
  EXPECT_TRUE(cache->Missing(4, 0, 700 * kKiB).empty());
  EXPECT_EQ(cache->stats().evicted_unread_bytes, 0u);
  EXPECT_LE(cache->stats().memory_bytes, 1024 * kKiB);
  // Only unread bytes left (more inserted as fetched ahead than the tier holds, without room
  // reserved): then the least recently used go, counted.
  cache->Insert(5, 0, Bytes(0, 300 * kKiB), true);
  EXPECT_EQ(cache->stats().evicted_unread_bytes, 300 * kKiB);  // what was left of 1
  EXPECT_TRUE(Same(cache->Missing(1, 0, 400 * kKiB), {{0, 400 * kKiB}}));
  EXPECT_LE(cache->stats().memory_bytes, 1024 * kKiB);
}

uint64_t BytesOnDisk(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() != ".lock") n += e.file_size();
  }
  return n;
}

RangeCacheOptions DiskOptions(const test::TempDir& dir, uint64_t disk_bytes) {
  RangeCacheOptions o;
  o.memory_bytes = 1;  // keeps nothing: every hit comes from disk
  o.disk_dir = dir.path() + "/chunks/id";
  o.disk_bytes = disk_bytes;
  return o;
}

TEST(RangeCacheTest, DiskTierOutlivesTheCacheAndHoldsItsCap) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 1000);  // segments of 250 bytes
  {
    auto cache = Open(o);
    ASSERT_TRUE(cache->stats().disk);
    cache->Insert(3, 0, Bytes(0, 400), false);
    cache->Insert(3, 1000, Bytes(1000, 400), false);
    cache->Insert(4, 0, Bytes(0, 400), false);  // over 1000: the oldest segment goes
    EXPECT_LE(cache->stats().disk_file_bytes, 1000u);
    EXPECT_EQ(cache->stats().disk_bytes, 800u);
    EXPECT_TRUE(Same(cache->Missing(3, 0, 400), {{0, 400}}));
  }
  // Two segments (bytes and index each), 400 + 32 bytes per extent.
  EXPECT_EQ(BytesOnDisk(o.disk_dir), 864u);
  // A new cache adopts the extents: the bytes come from disk, not memory.
  auto cache = Open(o);
  EXPECT_EQ(cache->stats().disk_extents, 2u);
  EXPECT_TRUE(CopiesRight(*cache, 4, 0, 400));
  EXPECT_TRUE(CopiesRight(*cache, 3, 1100, 200));  // a part of an extent
  EXPECT_EQ(cache->stats().disk_hit_bytes, 600u);
  EXPECT_TRUE(Same(cache->Missing(3, 900, 600), {{900, 100}, {1400, 100}}));
  // Drop forgets both tiers; the bytes stay as dead space in their segment.
  EXPECT_TRUE(cache->Drop(4, 10, 1));
  EXPECT_TRUE(Same(cache->Missing(4, 0, 400), {{0, 400}}));
  EXPECT_FALSE(cache->Drop(4, 10, 1));
  EXPECT_EQ(cache->stats().disk_dead_bytes, 400u);
  EXPECT_EQ(cache->stats().disk_bytes, 400u);
}

TEST(RangeCacheTest, TheOldOneFilePerExtentLayoutIsRemovedAtOpen) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 1 << 20);
  std::filesystem::create_directories(o.disk_dir);
  test::WriteAll(o.disk_dir + "/00000003-0-5", {1, 2, 3, 4, 5});
  test::WriteAll(o.disk_dir + "/.tmp-12-3", {1});
  auto cache = Open(o);
  EXPECT_FALSE(std::filesystem::exists(o.disk_dir + "/00000003-0-5"));
  EXPECT_FALSE(std::filesystem::exists(o.disk_dir + "/.tmp-12-3"));
  EXPECT_TRUE(Same(cache->Missing(3, 0, 5), {{0, 5}}));
  cache->Insert(3, 0, Bytes(0, 5), false);
  EXPECT_TRUE(CopiesRight(*cache, 3, 0, 5));
}

TEST(RangeCacheTest, ADamagedSegmentByteIsDetectedAndTheExtentFetchedAgain) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 64 << 20);
  {
    auto cache = Open(o);
    cache->Insert(7, 0, Bytes(0, 3000), false);
    cache->Insert(7, 5000, Bytes(5000, 2000), false);
  }
  const std::string seg = test::FilesWithExtension(o.disk_dir, ".seg").at(0);
  std::vector<uint8_t> bytes = test::ReadAll(seg);
  ASSERT_EQ(bytes.size(), 5000u);
  bytes[1234] ^= 0x10;  // in the first extent
  test::WriteAll(seg, bytes);
  auto cache = Open(o);
  std::vector<uint8_t> dst(100, 0xAA);
  // Even a read of bytes far from the damage checks the whole extent: never returned.
  EXPECT_TRUE(Same(cache->Copy(7, 2900, 100, dst.data()), {{2900, 100}}));
  EXPECT_EQ(cache->stats().dropped, 1u);
  EXPECT_EQ(cache->stats().disk_hit_bytes, 0u);
  EXPECT_TRUE(Same(cache->Missing(7, 0, 3000), {{0, 3000}}));  // forgotten: fetched again
  EXPECT_TRUE(CopiesRight(*cache, 7, 5000, 2000));             // the other one is fine
  cache->Insert(7, 0, Bytes(0, 3000), false);                  // the refetch
  EXPECT_TRUE(CopiesRight(*cache, 7, 0, 3000));
  EXPECT_EQ(cache->stats().disk_dead_bytes, 3000u);
  cache.reset();
  // The refetched copy (newer) wins at the next open over the damaged one.
  cache = Open(o);
  EXPECT_TRUE(CopiesRight(*cache, 7, 0, 3000));
  EXPECT_EQ(cache->stats().dropped, 0u);
}

TEST(RangeCacheTest, TheDiskTierEvictsWholeSegmentsOldestFirst) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 1 << 20);  // segments of 256 KiB
  auto cache = Open(o);
  constexpr uint64_t kN = 100, kLen = 40 << 10;  // 4 MB into 1 MiB
  for (uint64_t i = 0; i < kN; ++i) cache->Insert(1, i * kLen, Bytes(i * kLen, kLen), false);
  const RangeCacheStats s = cache->stats();
  EXPECT_LE(s.disk_file_bytes, uint64_t{1} << 20);
  EXPECT_GT(s.disk_file_bytes, uint64_t{1} << 19);
  EXPECT_EQ(s.disk_bytes, s.disk_extents * kLen);
  EXPECT_LE(s.disk_segments, 5u);
  // The memory tier (1 byte) evicts every extent too.
  EXPECT_EQ(s.evicted_bytes, kN * kLen + (kN - s.disk_extents) * kLen);
  // What is kept is the newest extents, in one run to the last: first in, first out.
  const uint64_t first_kept = kN - s.disk_extents;
  EXPECT_TRUE(Same(cache->Missing(1, 0, kN * kLen), {{0, first_kept * kLen}}));
  EXPECT_TRUE(CopiesRight(*cache, 1, (kN - 1) * kLen, kLen));
  EXPECT_TRUE(CopiesRight(*cache, 1, first_kept * kLen, kLen));
  EXPECT_EQ(BytesOnDisk(o.disk_dir), s.disk_file_bytes);
  // Reading does not keep a segment: the next ones still evict the oldest.
  cache->Insert(2, 0, Bytes(0, 300 << 10), false);
  EXPECT_TRUE(Same(cache->Missing(1, first_kept * kLen, kLen), {{first_kept * kLen, kLen}}));
  EXPECT_TRUE(cache->Missing(2, 0, 300 << 10).empty());
  // A long extent is kept as entries of at most kMaxDiskExtent bytes.
  EXPECT_TRUE(CopiesRight(*cache, 2, 100, 200 << 10));
}

// Bytes fetched ahead and not read yet keep their segment: the disk tier evicts the segment with
// the fewest unread bytes, so an unread extent outlives demand bytes written after it.
TEST(RangeCacheTest, TheDiskTierEvictsSegmentsWithUnreadBytesLast) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 1 << 20);  // segments of 256 KiB
  auto cache = Open(o);
  ASSERT_TRUE(cache->ReserveAhead(200 << 10));
  cache->Insert(1, 0, Bytes(0, 200 << 10), true);  // the oldest segment, unread
  constexpr uint64_t kN = 60, kLen = 40 << 10;     // 2.4 MB of demand bytes after it
  for (uint64_t i = 0; i < kN; ++i) cache->Insert(2, i * kLen, Bytes(i * kLen, kLen), false);
  EXPECT_TRUE(cache->Missing(1, 0, 200 << 10).empty());
  EXPECT_TRUE(CopiesRight(*cache, 1, 0, 200 << 10));  // and now it is read
  EXPECT_EQ(cache->stats().evicted_unread_bytes, 0u);
  EXPECT_LE(cache->stats().disk_file_bytes, uint64_t{1} << 20);
  // Read, it is evicted like any other: the oldest first.
  for (uint64_t i = kN; i < 2 * kN; ++i) cache->Insert(2, i * kLen, Bytes(i * kLen, kLen), false);
  EXPECT_TRUE(Same(cache->Missing(1, 0, 200 << 10), {{0, 200 << 10}}));
}

TEST(RangeCacheTest, ATornIndexTailIsIgnored) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 64 << 20);
  {
    auto cache = Open(o);
    for (uint64_t i = 0; i < 3; ++i) cache->Insert(9, i * 100, Bytes(i * 100, 100), false);
  }
  const std::string idx = test::FilesWithExtension(o.disk_dir, ".idx").at(0);
  std::vector<uint8_t> entries = test::ReadAll(idx);
  ASSERT_EQ(entries.size(), 3 * SegmentStore::kEntryBytes);
  entries.resize(entries.size() - 5);  // the third entry torn (a crash while writing it)
  test::WriteAll(idx, entries);
  auto cache = Open(o);
  EXPECT_EQ(cache->stats().disk_extents, 2u);
  EXPECT_TRUE(CopiesRight(*cache, 9, 0, 200));
  EXPECT_TRUE(Same(cache->Missing(9, 0, 300), {{200, 100}}));
  cache->Insert(9, 200, Bytes(200, 100), false);  // into a new segment
  EXPECT_TRUE(CopiesRight(*cache, 9, 0, 300));
  EXPECT_EQ(test::FilesWithExtension(o.disk_dir, ".seg").size(), 2u);
  cache.reset();
  cache = Open(o);
  EXPECT_TRUE(CopiesRight(*cache, 9, 0, 300));
}

TEST(RangeCacheTest, ManySmallExtentsMakeAHandfulOfFiles) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, uint64_t{1} << 30);
  constexpr uint32_t kRecords = 100;
  constexpr uint64_t kPerRecord = 1000, kLen = 100;  // 100k extents of 100 bytes
  {
    auto cache = Open(o);
    for (uint64_t i = 0; i < kPerRecord; ++i) {
      for (uint32_t r = 0; r < kRecords; ++r) {
        cache->Insert(r, i * 2 * kLen, Bytes(i * 2 * kLen, kLen), false);
      }
    }
    EXPECT_EQ(cache->stats().disk_extents, kRecords * kPerRecord);
  }
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(o.disk_dir)) ++files;
  EXPECT_LE(files, 3u);  // a segment, its index and .lock
  auto cache = Open(o);
  EXPECT_EQ(cache->stats().disk_extents, kRecords * kPerRecord);
  EXPECT_TRUE(CopiesRight(*cache, 42, 998 * kLen, kLen));
  EXPECT_TRUE(Same(cache->Missing(42, 0, 4 * kLen), {{kLen, kLen}, {3 * kLen, kLen}}));
}

TEST(RangeCacheTest, SpeculativeDiskBytesCountUntilRead) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 1 << 20);
  auto cache = Open(o);
  EXPECT_EQ(cache->capacity(), uint64_t{1} << 20);
  cache->Insert(1, 0, Bytes(0, 800 << 10), true);
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 800u << 10);
  EXPECT_FALSE(cache->WantsSpeculation());  // over half of the tier unread
  std::vector<uint8_t> dst(400 << 10);
  EXPECT_TRUE(cache->Copy(1, 0, 400 << 10, dst.data()).empty());
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 400u << 10);
  EXPECT_EQ(cache->AheadRoom(), 112u << 10);
  // One 128 KiB entry, [384, 512) KiB, of which 16 KiB were read.
  EXPECT_TRUE(cache->Drop(1, 500 << 10, 1));
  EXPECT_EQ(cache->stats().unread_speculative_bytes, 288u << 10);
}

TEST(RangeCacheTest, ThreadsShareTheDiskTier) {
  test::TempDir dir;
  RangeCacheOptions o = DiskOptions(dir, 2 << 20);  // small: segments come and go
  auto cache = Open(o);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 400; ++i) {
        const uint64_t off = ((i * 7 + t) % 300) * 3000;
        cache->Insert(i % 3, off, Bytes(off, 5000), i % 2 == 0);
        std::vector<uint8_t> dst(5000);
        auto missing = cache->Copy(i % 3, off, 5000, dst.data());
        // What was copied is right; the rest is named missing.
        std::vector<bool> gap(5000, false);
        for (const Range& m : missing) {
          for (uint64_t k = m.offset; k < m.offset + m.length; ++k) gap[k - off] = true;
        }
        auto want = Bytes(off, 5000);
        for (size_t k = 0; k < 5000; ++k) {
          if (!gap[k] && dst[k] != (*want)[k]) ++wrong;
        }
        if (i % 50 == 0) cache->Drop(i % 3, off, 10);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
  const RangeCacheStats s = cache->stats();
  EXPECT_LE(s.disk_file_bytes, uint64_t{2} << 20);
  EXPECT_EQ(BytesOnDisk(o.disk_dir), s.disk_file_bytes);
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
