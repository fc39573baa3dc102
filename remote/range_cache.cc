#include "remote/range_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

namespace pcrfs {
namespace {

constexpr char kLockFile[] = ".lock";

// "RECORD-OFFSET-LENGTH": true and the numbers if `name` is one.
bool ParseName(const char* name, uint32_t* id, uint64_t* offset, uint64_t* length) {
  unsigned int i = 0;
  unsigned long long o = 0, l = 0;
  int used = 0;
  if (std::sscanf(name, "%8x-%llu-%llu%n", &i, &o, &l, &used) != 3) return false;
  if (name[used] != '\0' || l == 0) return false;
  *id = i;
  *offset = o;
  *length = l;
  return true;
}

}  // namespace

std::string RangeCacheStats::ToJson() const {
  nlohmann::json j;
  j["memory_bytes"] = memory_bytes;
  j["disk"] = disk;
  j["disk_bytes"] = disk_bytes;
  j["memory_hit_bytes"] = memory_hit_bytes;
  j["disk_hit_bytes"] = disk_hit_bytes;
  j["miss_bytes"] = miss_bytes;
  const uint64_t asked = memory_hit_bytes + disk_hit_bytes + miss_bytes;
  j["hit_ratio"] = asked == 0 ? 0.0
                              : static_cast<double>(memory_hit_bytes + disk_hit_bytes) /
                                    static_cast<double>(asked);
  j["inserted_bytes"] = inserted_bytes;
  j["evicted_bytes"] = evicted_bytes;
  j["dropped_damaged"] = dropped;
  j["unread_speculative_bytes"] = unread_speculative_bytes;
  return j.dump();
}

Result<std::shared_ptr<RangeCache>> RangeCache::Open(RangeCacheOptions options, std::string* note) {
  std::shared_ptr<RangeCache> cache(new RangeCache(std::move(options)));
  {
    MutexLock l(&cache->mu_);  // nobody else has the cache yet; the lock costs nothing
    cache->memory_.budget = cache->options_.memory_bytes;
  }
  if (!cache->options_.disk_dir.empty() && cache->options_.disk_bytes > 0) {
    std::error_code ec;
    std::filesystem::create_directories(cache->options_.disk_dir, ec);
    if (ec) {
      return Err(Status::IOError(cache->options_.disk_dir +
                                 ": cannot create the disk cache folder: " + ec.message()));
    }
    auto fd = OpenFile(cache->options_.disk_dir + "/" + kLockFile, O_RDWR | O_CREAT | O_CLOEXEC);
    if (!fd) return Err(fd.error());
    if (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
      if (note != nullptr) {
        *note = cache->options_.disk_dir +
                ": the disk cache is in use by another pcrfs process; this mount runs without "
                "one and fetches again from the store whatever its memory cache drops (give "
                "each mount its own -o cache_dir)";
      }
    } else {
      cache->lock_fd_ = std::move(*fd);
      {
        MutexLock l(&cache->mu_);
        cache->disk_.disk = true;
        cache->disk_.budget = cache->options_.disk_bytes;
        cache->stats_.disk = true;
      }
      cache->AdoptDiskFiles();
    }
  }
  return cache;
}

RangeCache::~RangeCache() = default;

std::string RangeCache::FileName(uint32_t id, uint64_t offset, uint64_t length) const {
  char name[64];
  std::snprintf(name, sizeof(name), "%08x-%" PRIu64 "-%" PRIu64, id, offset, length);
  return options_.disk_dir + "/" + name;
}

void RangeCache::AdoptDiskFiles() {
  struct Found {
    int64_t mtime_ns;
    uint32_t id;
    uint64_t offset, length;
  };
  std::vector<Found> found;
  DIR* d = ::opendir(options_.disk_dir.c_str());
  if (d == nullptr) return;
  while (dirent* de = ::readdir(d)) {
    if (de->d_name[0] == '.') continue;
    const std::string path = options_.disk_dir + "/" + de->d_name;
    uint32_t id;
    uint64_t offset, length;
    struct stat st;
    if (!ParseName(de->d_name, &id, &offset, &length) || ::lstat(path.c_str(), &st) != 0 ||
        !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != length) {
      ::unlink(path.c_str());  // a temporary file of a crashed mount, or damaged
      continue;
    }
    found.push_back(
        {int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, id, offset, length});
  }
  ::closedir(d);
  // Oldest first, so the most recently written end up at the LRU front.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime_ns, a.id, a.offset) < std::tie(b.mtime_ns, b.id, b.offset);
  });
  std::vector<std::string> unlink;
  MutexLock l(&mu_);
  for (const Found& f : found) {
    auto gaps = GapsLocked(disk_, f.id, f.offset, f.offset + f.length);
    if (gaps.size() != 1 || gaps[0].offset != f.offset || gaps[0].length != f.length) {
      unlink.push_back(FileName(f.id, f.offset, f.length));  // overlaps one already adopted
      continue;
    }
    Extent e;
    e.end = f.offset + f.length;
    AddLocked(disk_, f.id, f.offset, std::move(e));
  }
  EvictLocked(disk_, &unlink);
  for (const auto& p : unlink) ::unlink(p.c_str());
}

std::vector<RangeCache::Range> RangeCache::GapsLocked(const Tier& tier, uint32_t id, uint64_t begin,
                                                      uint64_t end) {
  std::vector<Range> gaps;
  auto obj = tier.objects.find(id);
  if (obj == tier.objects.end()) {
    if (begin < end) gaps.push_back({begin, end - begin});
    return gaps;
  }
  const Extents& ext = obj->second;
  uint64_t pos = begin;
  auto it = ext.upper_bound(pos);
  if (it != ext.begin() && std::prev(it)->second.end > pos) --it;
  for (; it != ext.end() && it->first < end && pos < end; ++it) {
    if (it->first > pos) gaps.push_back({pos, it->first - pos});
    pos = std::max(pos, it->second.end);
  }
  if (pos < end) gaps.push_back({pos, end - pos});
  return gaps;
}

RangeCache::Extent* RangeCache::FindLocked(Tier& tier, uint32_t id, uint64_t pos, uint64_t* start) {
  auto obj = tier.objects.find(id);
  if (obj == tier.objects.end()) return nullptr;
  auto it = obj->second.upper_bound(pos);
  if (it == obj->second.begin()) return nullptr;
  --it;
  if (it->second.end <= pos) return nullptr;
  *start = it->first;
  return &it->second;
}

uint64_t RangeCache::NextStartLocked(const Tier& tier, uint32_t id, uint64_t pos) {
  auto obj = tier.objects.find(id);
  if (obj == tier.objects.end()) return UINT64_MAX;
  auto it = obj->second.upper_bound(pos);
  return it == obj->second.end() ? UINT64_MAX : it->first;
}

void RangeCache::MarkReadLocked(uint64_t start, Extent& e, uint64_t begin, uint64_t end) {
  const uint64_t length = e.end - start;
  if (e.read_pages.empty()) e.read_pages.assign((length + kUnreadPage - 1) / kUnreadPage, false);
  for (uint64_t p = (begin - start) / kUnreadPage; p * kUnreadPage < end - start; ++p) {
    if (e.read_pages[p]) continue;
    e.read_pages[p] = true;
    const uint64_t bytes = std::min(kUnreadPage, length - p * kUnreadPage);
    const uint64_t done = std::min(bytes, e.unread);
    e.unread -= done;
    unread_ -= done;
  }
}

void RangeCache::AddLocked(Tier& tier, uint32_t id, uint64_t start, Extent e) {
  tier.bytes += e.end - start;
  tier.lru.emplace_front(id, start);
  e.lru = tier.lru.begin();
  if (&tier == &PrimaryLocked()) unread_ += e.unread;
  tier.objects[id].emplace(start, std::move(e));
}

void RangeCache::RemoveLocked(Tier& tier, uint32_t id, Extents::iterator it,
                              std::vector<std::string>* unlink) {
  Extents& ext = tier.objects[id];
  tier.bytes -= it->second.end - it->first;
  if (&tier == &PrimaryLocked()) unread_ -= it->second.unread;
  tier.lru.erase(it->second.lru);
  if (tier.disk && unlink != nullptr) {
    unlink->push_back(FileName(id, it->first, it->second.end - it->first));
  }
  ext.erase(it);
  if (ext.empty()) tier.objects.erase(id);
}

void RangeCache::EvictLocked(Tier& tier, std::vector<std::string>* unlink) {
  while (tier.bytes > tier.budget && !tier.lru.empty()) {
    auto [id, start] = tier.lru.back();
    auto& ext = tier.objects[id];
    auto it = ext.find(start);
    stats_.evicted_bytes += it->second.end - it->first;
    RemoveLocked(tier, id, it, unlink);
  }
}

std::vector<RangeCache::Range> RangeCache::Missing(uint32_t id, uint64_t offset, uint64_t n) const {
  MutexLock l(&mu_);
  std::vector<Range> out;
  for (const Range& g : GapsLocked(memory_, id, offset, offset + n)) {
    if (!disk_.disk) {
      out.push_back(g);
      continue;
    }
    for (const Range& h : GapsLocked(disk_, id, g.offset, g.offset + g.length)) out.push_back(h);
  }
  return out;
}

std::vector<RangeCache::Range> RangeCache::Copy(uint32_t id, uint64_t offset, uint64_t n,
                                                uint8_t* dst) {
  struct DiskRead {
    std::string path;
    uint64_t file_offset, length;
    uint8_t* dst;
    uint32_t id;
    uint64_t start;  // the extent's
  };
  std::vector<Range> missing;
  std::vector<DiskRead> disk_reads;
  const uint64_t end = offset + n;
  {
    MutexLock l(&mu_);
    uint64_t pos = offset;
    while (pos < end) {
      uint64_t start = 0;
      if (Extent* e = FindLocked(memory_, id, pos, &start)) {
        const uint64_t stop = std::min(end, e->end);
        std::memcpy(dst + (pos - offset), e->bytes->data() + e->bytes_offset + (pos - start),
                    stop - pos);
        memory_.lru.splice(memory_.lru.begin(), memory_.lru, e->lru);
        stats_.memory_hit_bytes += stop - pos;
        pos = stop;
        continue;
      }
      if (disk_.disk) {
        if (Extent* e = FindLocked(disk_, id, pos, &start)) {
          const uint64_t stop = std::min({end, e->end, NextStartLocked(memory_, id, pos)});
          disk_reads.push_back({FileName(id, start, e->end - start), pos - start, stop - pos,
                                dst + (pos - offset), id, start});
          disk_.lru.splice(disk_.lru.begin(), disk_.lru, e->lru);
          pos = stop;
          continue;
        }
      }
      uint64_t stop = std::min(end, NextStartLocked(memory_, id, pos));
      if (disk_.disk) stop = std::min(stop, NextStartLocked(disk_, id, pos));
      if (!missing.empty() && missing.back().offset + missing.back().length == pos) {
        missing.back().length += stop - pos;
      } else {
        missing.push_back({pos, stop - pos});
      }
      stats_.miss_bytes += stop - pos;
      pos = stop;
    }
    // Speculative bytes now read: no longer unread.
    Tier& primary = PrimaryLocked();
    auto obj = primary.objects.find(id);
    if (obj != primary.objects.end() && unread_ > 0) {
      auto it = obj->second.upper_bound(offset);
      if (it != obj->second.begin()) --it;
      for (; it != obj->second.end() && it->first < end; ++it) {
        if (it->second.unread == 0 || it->second.end <= offset) continue;
        MarkReadLocked(it->first, it->second, std::max(offset, it->first),
                       std::min(end, it->second.end));
      }
    }
  }
  for (const DiskRead& r : disk_reads) {
    auto fd = OpenFile(r.path, O_RDONLY | O_CLOEXEC);
    Status s = fd ? PreadFull(fd->get(), r.dst, r.length, r.file_offset, r.path) : fd.error();
    MutexLock l(&mu_);
    if (s.ok()) {
      stats_.disk_hit_bytes += r.length;
      continue;
    }
    // Gone or unreadable: a miss, and the extent is forgotten.
    const uint64_t pos = r.file_offset + r.start;
    missing.push_back({pos, r.length});
    stats_.miss_bytes += r.length;
    auto obj = disk_.objects.find(r.id);
    if (obj != disk_.objects.end()) {
      auto it = obj->second.find(r.start);
      std::vector<std::string> unlink;
      if (it != obj->second.end()) RemoveLocked(disk_, r.id, it, &unlink);
    }
  }
  if (!disk_reads.empty()) {
    std::sort(missing.begin(), missing.end(),
              [](const Range& a, const Range& b) { return a.offset < b.offset; });
  }
  return missing;
}

void RangeCache::Insert(uint32_t id, uint64_t offset,
                        std::shared_ptr<const std::vector<uint8_t>> bytes, bool speculative) {
  const uint64_t end = offset + bytes->size();
  if (bytes->empty()) return;
  std::vector<std::string> unlink;
  std::vector<Range> disk_gaps;
  {
    MutexLock l(&mu_);
    stats_.inserted_bytes += bytes->size();
    for (const Range& g : GapsLocked(memory_, id, offset, end)) {
      Extent e;
      e.end = g.offset + g.length;
      e.bytes = bytes;
      e.bytes_offset = static_cast<size_t>(g.offset - offset);
      e.unread = speculative && !disk_.disk ? g.length : 0;
      AddLocked(memory_, id, g.offset, std::move(e));
    }
    EvictLocked(memory_, nullptr);
    if (disk_.disk) disk_gaps = GapsLocked(disk_, id, offset, end);
  }
  if (disk_gaps.empty()) return;
  static std::atomic<uint64_t> counter{0};
  std::vector<Range> written;
  for (const Range& g : disk_gaps) {
    const std::string path = FileName(id, g.offset, g.length);
    const std::string tmp = options_.disk_dir + "/.tmp-" + std::to_string(::getpid()) + "-" +
                            std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    auto fd = OpenFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    Status s = fd ? WriteFull(fd->get(), bytes->data() + (g.offset - offset),
                              static_cast<size_t>(g.length), tmp)
                  : fd.error();
    if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Status::FromErrno(tmp, errno);
    if (!s.ok()) {
      ::unlink(tmp.c_str());  // a full disk: the bytes stay in memory only
      continue;
    }
    written.push_back(g);
  }
  MutexLock l(&mu_);
  for (const Range& g : written) {
    auto gaps = GapsLocked(disk_, id, g.offset, g.offset + g.length);
    if (gaps.size() != 1 || gaps[0].offset != g.offset || gaps[0].length != g.length) {
      // Another thread kept (part of) it meanwhile. The same name is the same bytes: keep the
      // file if an extent of that exact range is kept, else remove it.
      uint64_t start = 0;
      Extent* e = FindLocked(disk_, id, g.offset, &start);
      if (e == nullptr || start != g.offset || e->end != g.offset + g.length) {
        unlink.push_back(FileName(id, g.offset, g.length));
      }
      continue;
    }
    Extent e;
    e.end = g.offset + g.length;
    e.unread = speculative ? g.length : 0;
    AddLocked(disk_, id, g.offset, std::move(e));
  }
  EvictLocked(disk_, &unlink);
  for (const auto& p : unlink) ::unlink(p.c_str());
}

bool RangeCache::Drop(uint32_t id, uint64_t offset, uint64_t n) {
  std::vector<std::string> unlink;
  bool dropped = false;
  {
    MutexLock l(&mu_);
    for (Tier* tier : {&memory_, &disk_}) {
      auto obj = tier->objects.find(id);
      if (obj == tier->objects.end()) continue;
      std::vector<uint64_t> starts;
      auto it = obj->second.upper_bound(offset);
      if (it != obj->second.begin()) --it;
      for (; it != obj->second.end() && it->first < offset + n; ++it) {
        if (it->second.end > offset) starts.push_back(it->first);
      }
      for (uint64_t s : starts) {
        auto o = tier->objects.find(id);
        if (o == tier->objects.end()) break;
        auto e = o->second.find(s);
        if (e == o->second.end()) continue;
        RemoveLocked(*tier, id, e, &unlink);
        ++stats_.dropped;
        dropped = true;
      }
    }
  }
  for (const auto& p : unlink) ::unlink(p.c_str());
  return dropped;
}

bool RangeCache::WantsSpeculation() const {
  MutexLock l(&mu_);
  return unread_ < PrimaryLocked().budget / 4 * 3;
}

uint64_t RangeCache::capacity() const {
  MutexLock l(&mu_);
  return PrimaryLocked().budget;
}

RangeCacheStats RangeCache::stats() const {
  MutexLock l(&mu_);
  RangeCacheStats s = stats_;
  s.memory_bytes = memory_.bytes;
  s.disk_bytes = disk_.bytes;
  s.unread_speculative_bytes = unread_;
  return s;
}

}  // namespace pcrfs
