#include "fs/cache_sizing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "common/human_bytes.h"

namespace pcrfs::fs {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

// 10,000 files in 10 records, level 5 of 4 GiB.
LevelFootprint Level5() { return {.level = 5, .bytes = 4 * kGiB, .files = 10000, .records = 10}; }

CacheSizing Remote(uint64_t memory, uint64_t disk) {
  CacheSizing s;
  s.store = "http://h/store";
  s.remote = true;
  s.level = Level5();
  s.memory_cache = memory;
  s.disk_cache = disk;
  s.cache_dir = "/c";
  return s;
}

// The disk tier's index entries: 32 bytes per extent, at most one per piece of the level, three
// per record and one per 128 KiB.
TEST(CacheSizingTest, DiskCacheForALevelIsItsBytesAndAnEntryPerExtent) {
  const LevelFootprint l = Level5();
  const uint64_t extents = 10000 * 5 + 10 * 3 + (4 * kGiB) / (128 << 10) + 1;
  EXPECT_EQ(DiskCacheForLevel(l, ServedForm::kProgressive, true), 4 * kGiB + 32 * extents);
  // The margin is small: about 1% here (files of ~86 KiB at level 5).
  EXPECT_LT(DiskCacheForLevel(l, ServedForm::kProgressive, true), 4 * kGiB + 4 * kGiB / 100);
  // A level's pieces: level 1 has one per file.
  const LevelFootprint l1 = {.level = 1, .bytes = kGiB, .files = 100, .records = 1};
  EXPECT_EQ(DiskCacheForLevel(l1, ServedForm::kProgressive, true),
            kGiB + 32 * (100 + 3 + kGiB / (128 << 10) + 1));
  // An empty store still has room for its one entry.
  EXPECT_EQ(DiskCacheForLevel({.level = 1}, ServedForm::kProgressive, true), 32u);
  // Nothing overflows: a hostile index's sums saturate.
  EXPECT_EQ(DiskCacheForLevel({.level = 10, .bytes = UINT64_MAX, .files = UINT64_MAX},
                              ServedForm::kProgressive, true),
            UINT64_MAX);
}

// form=baseline keeps re-encoded files, at most 3/2 of the level, an entry each; a remote store
// keeps them in 3/4 of its disk_cache, so auto asks for 4/3 of that.
TEST(CacheSizingTest, DiskCacheForABaselineLevel) {
  const LevelFootprint l = {.level = 3, .bytes = 1000 * kMiB, .files = 1000, .records = 1};
  const uint64_t files = 1500 * kMiB + 32 * 1000;
  EXPECT_EQ(DiskCacheForLevel(l, ServedForm::kBaseline, false), files);
  const uint64_t remote = DiskCacheForLevel(l, ServedForm::kBaseline, true);
  EXPECT_EQ(remote, (files * 4 + 2) / 3);
  EXPECT_GE(remote - remote / 4, files);  // the daemon's 3/4 share holds them
}

TEST(CacheSizingTest, AutoTakesTheLevelWhereThereIsRoom) {
  const AutoDiskCache a = ChooseAutoDiskCache(4 * kGiB, 100 * kGiB, 0);
  EXPECT_EQ(a.bytes, 4 * kGiB);
  EXPECT_EQ(a.room, 100 * kGiB);
  EXPECT_TRUE(a.whole());
}

// At most half of the free space: the rest is for the filesystem's other writers.
TEST(CacheSizingTest, AutoTakesAtMostHalfTheFreeSpace) {
  const AutoDiskCache a = ChooseAutoDiskCache(4 * kGiB, 6 * kGiB, 0);
  EXPECT_EQ(a.bytes, 3 * kGiB);
  EXPECT_FALSE(a.whole());
  EXPECT_EQ(ChooseAutoDiskCache(4 * kGiB, 8 * kGiB, 0).bytes, 4 * kGiB);  // exactly twice: whole
  EXPECT_EQ(ChooseAutoDiskCache(4 * kGiB, 0, 0).bytes, 0u);               // a full disk: none
  EXPECT_EQ(ChooseAutoDiskCache(0, 8 * kGiB, 0).bytes, 0u);
}

// What the cache folder holds is its own: a remount that found its level cached keeps the same
// budget, instead of seeing its own bytes as used space and halving it.
TEST(CacheSizingTest, AutoCountsTheBytesItsFolderHoldsAsAvailable) {
  const AutoDiskCache first = ChooseAutoDiskCache(4 * kGiB, 10 * kGiB, 0);
  EXPECT_EQ(first.bytes, 4 * kGiB);
  // The first mount filled its 4 GiB: 6 GiB free now, 4 of them held by the cache.
  const AutoDiskCache second = ChooseAutoDiskCache(4 * kGiB, 6 * kGiB, 4 * kGiB);
  EXPECT_EQ(second.bytes, 4 * kGiB);
  EXPECT_TRUE(second.whole());
  // Room saturates rather than wrapping.
  EXPECT_EQ(ChooseAutoDiskCache(UINT64_MAX, UINT64_MAX, UINT64_MAX).room, UINT64_MAX);
}

TEST(CacheSizingTest, NothingToSayWhenTheLevelFits) {
  // In memory.
  EXPECT_EQ(CacheSizingWarning(Remote(4 * kGiB, 0)), "");
  // On disk, with the margin.
  const uint64_t need = DiskCacheForLevel(Level5(), ServedForm::kProgressive, true);
  EXPECT_EQ(CacheSizingWarning(Remote(256 * kMiB, need)), "");
  EXPECT_NE(CacheSizingWarning(Remote(256 * kMiB, need - 1)), "");
  // A local store reads from its own disk.
  CacheSizing local = Remote(256 * kMiB, 0);
  local.remote = false;
  local.store = "/data/store";
  EXPECT_TRUE(LevelFits(local));
  EXPECT_EQ(CacheSizingWarning(local), "");
}

TEST(CacheSizingTest, OneLineNamesTheLevelTheCachesAndTheFix) {
  EXPECT_EQ(CacheSizingWarning(Remote(256 * kMiB, 0)),
            "level 5 of http://h/store is 4.0 GiB, more than its caches (remote_cache 256.0 MiB, "
            "no disk_cache): each epoch fetches it again; -o disk_cache=auto keeps it on disk");
  // A disk cache too small: the size that fits, in a form -o disk_cache takes.
  const uint64_t need = DiskCacheForLevel(Level5(), ServedForm::kProgressive, true);
  const std::string fix = "disk_cache=" + std::to_string((need + kMiB - 1) / kMiB) + "M";
  EXPECT_EQ(CacheSizingWarning(Remote(256 * kMiB, kGiB)),
            "level 5 of http://h/store is 4.0 GiB, more than its caches (remote_cache 256.0 MiB, "
            "disk_cache 1.0 GiB): each epoch fetches it again; -o disk_cache=auto (or " +
                fix + ") keeps it on disk");
  // Without -o scans, level 10, the largest a reader may read.
  CacheSizing ladder = Remote(256 * kMiB, 0);
  ladder.level.level = 10;
  ladder.ladder = true;
  EXPECT_EQ(CacheSizingWarning(ladder),
            "level 10 of http://h/store (the largest of scan1..scan10) is 4.0 GiB, more than its "
            "caches (remote_cache 256.0 MiB, no disk_cache): each epoch fetches it again; -o "
            "disk_cache=auto keeps it on disk (or -o scans=K mounts one level)");
}

// auto took what half the free space allows: the line says so, and how much more room the
// whole level needs there.
TEST(CacheSizingTest, AutoShortOfTheLevelSaysSo) {
  CacheSizing s = Remote(256 * kMiB, 0);
  const uint64_t need = DiskCacheForLevel(s.level, ServedForm::kProgressive, true);
  s.automatic = ChooseAutoDiskCache(need, 3 * kGiB, 0);
  s.disk_cache = s.automatic->bytes;
  ASSERT_EQ(s.disk_cache, 3 * kGiB / 2);
  EXPECT_EQ(CacheSizingWarning(s),
            "level 5 of http://h/store is 4.0 GiB, more than its caches (remote_cache 256.0 MiB, "
            "disk_cache=auto 1.5 GiB: half of the 3.0 GiB free in /c): each epoch fetches it "
            "again; with " +
                HumanBytes(2 * need - 3 * kGiB) +
                " more free there (or -o cache_dir on a larger disk) disk_cache=auto keeps it on "
                "disk");
  // auto that got the whole level: nothing to say.
  s.automatic = ChooseAutoDiskCache(need, 100 * kGiB, 0);
  s.disk_cache = s.automatic->bytes;
  EXPECT_EQ(CacheSizingWarning(s), "");
  EXPECT_EQ(CacheSizingJson(s),
            "{\"level\":5,\"level_bytes\":" + std::to_string(4 * kGiB) +
                ",\"fits\":true,\"memory_cache\":" + std::to_string(256 * kMiB) +
                ",\"disk_cache\":" + std::to_string(need) + ",\"disk_cache_auto\":{\"wanted\":" +
                std::to_string(need) + ",\"room\":" + std::to_string(100 * kGiB) +
                ",\"bytes\":" + std::to_string(need) + "}}");
}

// A local store with form=baseline: a line only when auto could not take the whole level.
TEST(CacheSizingTest, ALocalBaselineStoreWarnsOnlyForAutoShort) {
  CacheSizing s = Remote(0, 0);
  s.remote = false;
  s.store = "/data/store";
  s.form = ServedForm::kBaseline;
  EXPECT_FALSE(LevelFits(s));
  EXPECT_EQ(CacheSizingWarning(s), "");  // no disk cache asked for: re-encoding is the default
  const uint64_t need = DiskCacheForLevel(s.level, ServedForm::kBaseline, false);
  s.automatic = ChooseAutoDiskCache(need, 2 * kGiB, 0);
  s.disk_cache = s.automatic->bytes;
  EXPECT_EQ(CacheSizingWarning(s),
            "level 5 of /data/store is 4.0 GiB, and its re-encoded files more than its disk cache "
            "(disk_cache=auto 1.0 GiB: half of the 2.0 GiB free in /c): each epoch re-encodes "
            "what it does not hold; with " +
                HumanBytes(2 * need - 2 * kGiB) +
                " more free there (or -o cache_dir on a larger disk) disk_cache=auto keeps it on "
                "disk");
  EXPECT_EQ(CacheSizingJson(Remote(kMiB, 0)).find("\"disk_cache_auto\":null}"),
            CacheSizingJson(Remote(kMiB, 0)).size() - 23);
}

}  // namespace
}  // namespace pcrfs::fs
