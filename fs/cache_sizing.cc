#include "fs/cache_sizing.h"

#include <algorithm>

#include "common/human_bytes.h"
#include "common/segment_store.h"
#include "remote/range_cache.h"

namespace pcrfs::fs {
namespace {

using u128 = unsigned __int128;

uint64_t Saturate(u128 v) { return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v); }

// a * num / den, rounded up.
u128 Scale(u128 a, uint64_t num, uint64_t den) { return (a * num + den - 1) / den; }

// "4404M": a value -o disk_cache takes (whole MiB, rounded up) that is at least `bytes`.
std::string SizeOption(uint64_t bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return std::to_string(bytes / kMiB + (bytes % kMiB != 0)) + "M";
}

// What the disk budget is, for the line: "no disk_cache", "disk_cache 1.0 GiB", "disk_cache=auto
// 1.5 GiB: half of the 3.0 GiB free in DIR".
std::string DescribeDisk(const CacheSizing& s) {
  if (s.automatic) {
    return "disk_cache=auto " + HumanBytes(s.disk_cache) + ": half of the " +
           HumanBytes(s.automatic->room) + " free in " + s.cache_dir;
  }
  return s.disk_cache == 0 ? "no disk_cache" : "disk_cache " + HumanBytes(s.disk_cache);
}

}  // namespace

uint64_t DiskCacheForLevel(const LevelFootprint& level, ServedForm form, bool remote) {
  constexpr uint64_t kEntry = SegmentStore::kEntryBytes;
  const int k = std::clamp(level.level, 1, index::kNumGroups);
  if (form == ServedForm::kBaseline) {
    const u128 files =
        Scale(level.bytes, kBaselineGrowthNum, kBaselineGrowthDen) + u128{level.files} * kEntry;
    // A remote store's baseline files get 3/4 of the budget (fs/daemon.cc).
    return Saturate(remote ? Scale(files, 4, 3) : files);
  }
  const u128 extents = u128{level.files} * static_cast<uint64_t>(k) + u128{level.records} * 3 +
                       level.bytes / RangeCache::kMaxDiskExtent + 1;
  return Saturate(u128{level.bytes} + extents * kEntry);
}

AutoDiskCache ChooseAutoDiskCache(uint64_t wanted, uint64_t free_bytes, uint64_t held_bytes) {
  AutoDiskCache a;
  a.wanted = wanted;
  a.room = Saturate(u128{free_bytes} + held_bytes);
  a.bytes = std::min(wanted, a.room / 2);
  return a;
}

bool LevelFits(const CacheSizing& s) {
  if (!s.remote && s.form != ServedForm::kBaseline) return true;  // read from its own disk
  if (s.remote && s.level.bytes <= s.memory_cache) return true;
  return s.disk_cache >= DiskCacheForLevel(s.level, s.form, s.remote);
}

std::string CacheSizingWarning(const CacheSizing& s) {
  if (LevelFits(s)) return "";
  const bool auto_short = s.automatic && !s.automatic->whole();
  if (!s.remote && !auto_short) return "";  // a local store warns only for what auto could take
  std::string line = "level " + std::to_string(s.level.level) + " of " + s.store;
  if (s.ladder) line += " (the largest of scan1..scan10)";
  line += " is " + HumanBytes(s.level.bytes);
  if (s.remote) {
    line += ", more than its caches (remote_cache " + HumanBytes(s.memory_cache) + ", " +
            DescribeDisk(s) + "): each epoch fetches it again";
  } else {
    line += ", and its re-encoded files more than its disk cache (" + DescribeDisk(s) +
            "): each epoch re-encodes what it does not hold";
  }
  if (auto_short) {
    // disk_cache=auto takes the whole level once the folder's filesystem has twice that room.
    const uint64_t more = Saturate(u128{s.automatic->wanted} * 2 - s.automatic->room);
    line += "; with " + HumanBytes(more) + " more free there (or -o cache_dir on a larger disk) " +
            "disk_cache=auto keeps it on disk";
  } else if (s.disk_cache == 0) {
    line += "; -o disk_cache=auto keeps it on disk";
  } else {
    line += "; -o disk_cache=auto (or disk_cache=" +
            SizeOption(DiskCacheForLevel(s.level, s.form, s.remote)) + ") keeps it on disk";
  }
  if (s.ladder) line += " (or -o scans=K mounts one level)";
  return line;
}

std::string CacheSizingJson(const CacheSizing& s) {
  std::string json = "{\"level\":" + std::to_string(s.level.level) +
                     ",\"level_bytes\":" + std::to_string(s.level.bytes) +
                     ",\"fits\":" + (LevelFits(s) ? "true" : "false") +
                     ",\"memory_cache\":" + std::to_string(s.memory_cache) +
                     ",\"disk_cache\":" + std::to_string(s.disk_cache) + ",\"disk_cache_auto\":";
  if (!s.automatic) return json + "null}";
  return json + "{\"wanted\":" + std::to_string(s.automatic->wanted) +
         ",\"room\":" + std::to_string(s.automatic->room) +
         ",\"bytes\":" + std::to_string(s.automatic->bytes) + "}}";
}

}  // namespace pcrfs::fs
