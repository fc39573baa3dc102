// Sizing a mount's caches for the level it serves, so that a user need not work it out (issue
// 40). At mount the daemon knows the level's bytes (index::StoreBytesAtLevel: what reading the
// level reads of the record files) and its caches' sizes. A remote store's level that fits
// neither the memory tier (-o remote_cache) nor the disk tier (-o disk_cache) is fetched again
// by every epoch, and one line at mount says so and which option fixes it. -o disk_cache=auto
// sizes the disk tier for the level itself, within the cache folder's free space.
//
// Pure arithmetic on numbers the daemon gathers (fs/daemon.cc: the index, statvfs of the cache
// folder, the bytes the folder holds), so the tests need no filesystem and no mount
// (fs/cache_sizing_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fs/filesystem.h"

namespace pcrfs::fs {

// What the level takes of the store.
struct LevelFootprint {
  int level = 0;         // 1..10
  uint64_t bytes = 0;    // index::StoreBytesAtLevel
  uint64_t files = 0;    // at most this many files (the index's entries)
  uint64_t records = 0;  // record files
};

// The form=baseline files of a level are at most this much larger than its stored bytes: the
// same coefficients coded sequentially took 101-138% of the progressive bytes at levels 10-1
// (DESIGN.md 9; README "Which form when": 1.1-1.4x); 3/2 leaves room above the largest.
inline constexpr uint64_t kBaselineGrowthNum = 3, kBaselineGrowthDen = 2;

// The -o disk_cache that keeps `level` on disk, all of it, so no epoch after the first reads
// the origin (remote) or re-encodes (form=baseline). For the progressive form: the level's
// bytes, plus the disk tier's index entry (common/segment_store.h: 32 bytes) per extent, of
// which there are at most one per piece of the level (a demand read fetches one piece; a
// speculative chunk is one extent for many), three per record (its header, tables and footer,
// each read apart) and one per RangeCache::kMaxDiskExtent (a longer extent is kept as several
// entries); segments hold no other overhead (a full segment's unwritten tail is not counted).
// For form=baseline: the re-encoded files (kBaselineGrowth of the bytes, an entry per file),
// which a remote store's disk_cache holds in 3/4 of its budget (fs/daemon.cc; the record bytes
// are then read once per file, to re-encode it).
uint64_t DiskCacheForLevel(const LevelFootprint& level, ServedForm form, bool remote);

// -o disk_cache=auto: the budget that holds the level (`wanted`, DiskCacheForLevel), at most half
// of what the cache folder's filesystem has for it: its free space at mount plus the bytes the
// folder's disk tiers hold already (`held`), since those are the cache's own, reused across
// mounts. Half, because the folder's filesystem is shared (the root, /var or a home, where the
// training job writes checkpoints and logs) and the disk tier grows after the mount while they
// do: taking all that is free would later fail their writes (and the cache's own) with ENOSPC;
// half leaves everyone else at least as much as the cache takes. Counting `held`, because
// otherwise each remount would see its own cached level as used space and shrink: a first mount
// taking half of F, the next a quarter, evicting half of what it kept.
struct AutoDiskCache {
  uint64_t wanted = 0;  // what holds the level
  uint64_t room = 0;    // free + held
  uint64_t bytes = 0;   // the budget: min(wanted, room / 2)
  bool whole() const { return bytes >= wanted; }
};
AutoDiskCache ChooseAutoDiskCache(uint64_t wanted, uint64_t free_bytes, uint64_t held_bytes);

// What the check at mount knows.
struct CacheSizing {
  std::string store;  // what to show: a local path, or the redacted URL
  bool remote = false;
  LevelFootprint level;
  // No -o scans: scan1..scan10 at the root. The level checked is then 10, the largest a reader
  // may read (every lower level is a prefix of it, and -o disk_cache_fill fetches it).
  bool ladder = false;
  ServedForm form = ServedForm::kProgressive;
  uint64_t memory_cache = 0;               // -o remote_cache
  uint64_t disk_cache = 0;                 // the whole disk budget: -o disk_cache, or auto's choice
  std::optional<AutoDiskCache> automatic;  // -o disk_cache=auto was given
  std::string cache_dir;                   // where the disk tiers live
};

// Whether the level stays in the caches from one epoch to the next: a remote store's in its
// memory tier (its record bytes), or in the disk budget (DiskCacheForLevel). A local store
// keeps its bytes on its own disk; with form=baseline its re-encoded files must fit the disk.
bool LevelFits(const CacheSizing& s);

// The one line the daemon prints (and logs) at mount, or "" when there is nothing to say: for a
// remote store whose level does not fit its caches, and for -o disk_cache=auto that could not
// take the whole level (a local store's too). Names the store, the level, its bytes, the caches'
// sizes, what that costs and the option that fixes it, e.g. "level 5 of http://h/store is 4.2
// GiB, more than its caches (remote_cache 256.0 MiB, no disk_cache): each epoch fetches it
// again; -o disk_cache=auto keeps it on disk".
std::string CacheSizingWarning(const CacheSizing& s);

// {"level":5,"level_bytes":N,"fits":false,"memory_cache":N,"disk_cache":N,"disk_cache_auto":
// {"wanted":N,"room":N,"bytes":N} or null}: the root's user.pcrfs.remote shows it as "sizing".
std::string CacheSizingJson(const CacheSizing& s);

}  // namespace pcrfs::fs
