#include "remote/range_cache.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/log.h"

namespace pcrfs {
namespace {

uint64_t EndOf(uint64_t, const auto& e) requires requires { e.end; }
{ return e.end; }
uint64_t EndOf(uint64_t start, const auto& d) requires requires { d.where.length; }
{ return start + d.where.length; }

// The gaps of [begin, end) in the extents of `id` (a map of id to a map by start offset).
template <typename Objects>
std::vector<RangeCache::Range> Gaps(const Objects& objects, uint32_t id, uint64_t begin,
                                    uint64_t end) {
  std::vector<RangeCache::Range> gaps;
  auto obj = objects.find(id);
  if (obj == objects.end()) {
    if (begin < end) gaps.push_back({begin, end - begin});
    return gaps;
  }
  const auto& ext = obj->second;
  uint64_t pos = begin;
  auto it = ext.upper_bound(pos);
  if (it != ext.begin() && EndOf(std::prev(it)->first, std::prev(it)->second) > pos) --it;
  for (; it != ext.end() && it->first < end && pos < end; ++it) {
    if (it->first > pos) gaps.push_back({pos, it->first - pos});
    pos = std::max(pos, EndOf(it->first, it->second));
  }
  if (pos < end) gaps.push_back({pos, end - pos});
  return gaps;
}

// Whether [begin, end) is wholly a gap.
template <typename Objects>
bool IsGap(const Objects& objects, uint32_t id, uint64_t begin, uint64_t end) {
  auto gaps = Gaps(objects, id, begin, end);
  return gaps.size() == 1 && gaps[0].offset == begin && gaps[0].length == end - begin;
}

// The extent of `id` holding byte `pos`: an iterator into its map, or nullopt.
template <typename Objects>
auto Find(Objects& objects, uint32_t id, uint64_t pos)
    -> std::optional<typename Objects::mapped_type::iterator> {
  auto obj = objects.find(id);
  if (obj == objects.end()) return std::nullopt;
  auto it = obj->second.upper_bound(pos);
  if (it == obj->second.begin()) return std::nullopt;
  --it;
  if (EndOf(it->first, it->second) <= pos) return std::nullopt;
  return it;
}

// The start of the first extent of `id` after `pos`, or UINT64_MAX.
template <typename Objects>
uint64_t NextStart(const Objects& objects, uint32_t id, uint64_t pos) {
  auto obj = objects.find(id);
  if (obj == objects.end()) return UINT64_MAX;
  auto it = obj->second.upper_bound(pos);
  return it == obj->second.end() ? UINT64_MAX : it->first;
}

// The starts of the extents of `id` overlapping [begin, end).
template <typename Objects>
std::vector<uint64_t> Overlapping(const Objects& objects, uint32_t id, uint64_t begin,
                                  uint64_t end) {
  std::vector<uint64_t> starts;
  auto obj = objects.find(id);
  if (obj == objects.end()) return starts;
  auto it = obj->second.upper_bound(begin);
  if (it != obj->second.begin()) --it;
  for (; it != obj->second.end() && it->first < end; ++it) {
    if (EndOf(it->first, it->second) > begin) starts.push_back(it->first);
  }
  return starts;
}

}  // namespace

std::string RangeCacheStats::ToJson() const {
  nlohmann::json j;
  j["memory_bytes"] = memory_bytes;
  j["disk"] = disk;
  j["disk_bytes"] = disk_bytes;
  j["disk_extents"] = disk_extents;
  j["disk_segments"] = disk_segments;
  j["disk_file_bytes"] = disk_file_bytes;
  j["disk_dead_bytes"] = disk_dead_bytes;
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
  j["reserved_ahead_bytes"] = reserved_ahead_bytes;
  j["evicted_unread_bytes"] = evicted_unread_bytes;
  j["recently_read_bytes"] = recently_read_bytes;
  return j.dump();
}

Result<std::shared_ptr<RangeCache>> RangeCache::Open(RangeCacheOptions options, std::string* note) {
  std::shared_ptr<RangeCache> cache(new RangeCache(std::move(options)));
  RangeCache* c = cache.get();
  MutexLock l(&c->mu_);  // nobody else has the cache yet; the lock costs nothing
  c->memory_.budget = c->options_.memory_bytes;
  if (c->options_.disk_dir.empty() || c->options_.disk_bytes == 0) return cache;
  uint64_t removed = 0;
  auto store = SegmentStore::Open(
      c->options_.disk_dir, c->options_.disk_bytes,
      [c](const SegmentStore::Entry& e) {
        c->mu_.AssertHeld();
        return c->AdoptLocked(e);
      },
      &removed);
  if (!store) return Err(store.error());
  if (*store == nullptr) {
    if (note != nullptr) {
      *note = c->options_.disk_dir +
              ": the disk cache is in use by another pcrfs process; this mount runs without "
              "one and fetches again from the store whatever its memory cache drops (give "
              "each mount its own -o cache_dir)";
    }
    return cache;
  }
  if (removed > 0) {
    Log(LogLevel::kInfo, c->options_.disk_dir + ": removed " + std::to_string(removed) +
                             " files that are not segments (an older disk cache layout: one "
                             "file per extent, or temporary files)");
  }
  c->store_ = std::move(*store);
  c->stats_.disk = true;
  return cache;
}

RangeCache::~RangeCache() = default;

bool RangeCache::AdoptLocked(const SegmentStore::Entry& e) {
  const uint32_t id = e.key.b;
  const uint64_t start = e.key.a;
  if (e.where.length == 0 || start > UINT64_MAX - e.where.length) return false;
  if (!IsGap(disk_, id, start, start + e.where.length)) return false;  // a newer one kept
  AddDiskLocked(id, start, e.where, false);
  return true;
}

uint64_t RangeCache::MarkReadLocked(Unread& u, uint64_t start, uint64_t begin_at, uint64_t end_at) {
  if (u.unread == 0 || begin_at >= end_at || begin_at < start) return 0;
  // [begin, end) joins the read intervals; the bytes it adds to them were unread.
  uint32_t begin = static_cast<uint32_t>(begin_at - start);
  uint32_t end = static_cast<uint32_t>(end_at - start);
  uint64_t added = end - begin;
  // The first interval that ends at or after begin (they are disjoint: their ends increase).
  const auto first = std::lower_bound(u.read.begin(), u.read.end(), begin,
                                      [](const auto& r, uint32_t b) { return r.second < b; });
  auto it = first;
  for (; it != u.read.end() && it->first <= end; ++it) {
    const uint32_t a = std::max(begin, it->first), z = std::min(end, it->second);
    if (a < z) added -= z - a;
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
  }
  if (it == first) {
    u.read.insert(first, {begin, end});
  } else {
    *first = {begin, end};
    u.read.erase(first + 1, it);
  }
  added = std::min(added, u.unread);
  u.unread -= added;
  unread_ -= added;
  if (u.unread == 0) std::vector<std::pair<uint32_t, uint32_t>>().swap(u.read);
  return added;
}

void RangeCache::MarkRangeReadLocked(uint32_t id, uint64_t begin, uint64_t end) {
  if (unread_ == 0) return;
  if (!disk()) {
    auto obj = memory_.objects.find(id);
    if (obj == memory_.objects.end()) return;
    for (uint64_t s : Overlapping(memory_.objects, id, begin, end)) {
      Extent& e = obj->second.at(s);
      if (e.unread.unread == 0) continue;
      MarkReadLocked(e.unread, s, std::max(begin, s), std::min(end, e.end));
      if (e.unread.unread == 0 && e.in_unread_lru) {
        // Read through: evictable from now on, as recently used.
        memory_.lru.splice(memory_.lru.begin(), memory_.ListOf(e), e.lru);
        e.in_unread_lru = false;
        e.partly = false;
      } else if (e.in_unread_lru && !e.partly && !e.unread.read.empty()) {
        memory_.partly_lru.splice(memory_.partly_lru.begin(), memory_.unread_lru, e.lru);
        e.partly = true;
      }
    }
    return;
  }
  for (uint64_t s : Overlapping(disk_, id, begin, end)) {
    DiskExtent& d = disk_.at(id).at(s);
    if (d.unread.empty()) continue;
    const uint64_t read = d.unread.MarkRead(d.where.length, std::max(begin, s) - s,
                                            std::min(end, s + d.where.length) - s);
    unread_ -= std::min(unread_, read);
    LessUnreadInSegmentLocked(d.where.seq, read);
  }
}

void RangeCache::AddLocked(uint32_t id, uint64_t start, Extent e) {
  memory_.bytes += e.end - start;
  e.in_unread_lru = e.unread.unread > 0;
  e.partly = e.in_unread_lru && !e.unread.read.empty();
  Lru& lru = memory_.ListOf(e);
  lru.emplace_front(id, start);
  e.lru = lru.begin();
  unread_ += e.unread.unread;
  memory_.objects[id].emplace(start, std::move(e));
}

void RangeCache::RemoveLocked(uint32_t id, Extents::iterator it) {
  Extents& ext = memory_.objects[id];
  memory_.bytes -= it->second.end - it->first;
  unread_ -= it->second.unread.unread;
  memory_.ListOf(it->second).erase(it->second.lru);
  ext.erase(it);
  if (ext.empty()) memory_.objects.erase(id);
}

void RangeCache::EvictLocked() {
  while (memory_.bytes > memory_.budget) {
    // Bytes already read go first: whole extents with nothing unread, least recently used
    // first; then the read parts of extents partly read (a window of which some files were
    // read), whose unread parts stay as extents of their own; an unread byte only when nothing
    // else is left (AheadRoom keeps unread bytes to a share of the tier: that takes bytes
    // inserted as fetched ahead without room reserved).
    if (!memory_.lru.empty()) {
      auto [id, start] = memory_.lru.back();
      auto it = memory_.objects[id].find(start);
      stats_.evicted_bytes += it->second.end - start;
      NoteEvictedReadLocked(id, start, it->second.end);
      RemoveLocked(id, it);
      continue;
    }
    if (memory_.partly_lru.empty()) {
      if (memory_.unread_lru.empty()) break;
      auto [id, start] = memory_.unread_lru.back();
      auto it = memory_.objects[id].find(start);
      stats_.evicted_bytes += it->second.end - start;
      stats_.evicted_unread_bytes += it->second.unread.unread;
      RemoveLocked(id, it);
      continue;
    }
    const auto [id, start] = memory_.partly_lru.back();
    auto it = memory_.objects[id].find(start);
    const Extent& e = it->second;
    std::vector<Range> unread_parts;
    uint64_t pos = start;
    for (const auto& [b, z] : e.unread.read) {
      if (start + b > pos) unread_parts.push_back({pos, start + b - pos});
      pos = std::max(pos, start + z);
    }
    if (pos < e.end) unread_parts.push_back({pos, e.end - pos});
    const auto bytes = e.bytes;
    stats_.evicted_bytes += e.end - start - e.unread.unread;
    for (const auto& [b, z] : e.unread.read) NoteEvictedReadLocked(id, start + b, start + z);
    RemoveLocked(id, it);
    for (const Range& r : unread_parts) {
      Extent part;
      part.end = r.offset + r.length;
      const auto* from = bytes->data() + (r.offset - start);
      part.bytes = std::make_shared<const std::vector<uint8_t>>(from, from + r.length);
      part.unread.unread = r.length;
      AddLocked(id, r.offset, std::move(part));
      // Among the least recently used, where the whole extent was.
      memory_.unread_lru.splice(memory_.unread_lru.end(), memory_.unread_lru,
                                memory_.objects[id].at(r.offset).lru);
    }
  }
}

void RangeCache::AddDiskLocked(uint32_t id, uint64_t start, const SegmentStore::Location& where,
                               bool speculative) {
  DiskExtent& d = disk_[id].emplace(start, DiskExtent{where, {}}).first->second;
  disk_bytes_ += where.length;
  ++disk_extents_;
  if (speculative) {
    d.unread.SetAll(where.length);
    unread_ += where.length;
    unread_by_segment_[where.seq] += where.length;
  }
}

bool RangeCache::RemoveDiskLocked(uint32_t id, uint64_t start, SegmentStore::Location where,
                                  bool forget) {
  auto obj = disk_.find(id);
  if (obj == disk_.end()) return false;
  auto it = obj->second.find(start);
  if (it == obj->second.end() || !(it->second.where == where)) return false;
  if (const uint64_t u = it->second.unread.Count(where.length); u > 0) {
    unread_ -= std::min(unread_, u);
    LessUnreadInSegmentLocked(where.seq, u);
    if (!forget) stats_.evicted_unread_bytes += u;
  }
  obj->second.erase(it);
  if (obj->second.empty()) disk_.erase(obj);
  disk_bytes_ -= where.length;
  --disk_extents_;
  if (forget) store_->Forget(where);
  return true;
}

void RangeCache::ForgetEvictedLocked(const std::vector<SegmentStore::Entry>& evicted) {
  for (const SegmentStore::Entry& e : evicted) {
    if (RemoveDiskLocked(e.key.b, e.key.a, e.where, false)) {
      stats_.evicted_bytes += e.where.length;
    }
  }
}

void RangeCache::LessUnreadInSegmentLocked(uint32_t seq, uint64_t n) {
  auto it = unread_by_segment_.find(seq);
  if (it == unread_by_segment_.end()) return;
  it->second -= std::min(it->second, n);
  if (it->second == 0) unread_by_segment_.erase(it);
}

std::vector<RangeCache::Range> RangeCache::Missing(uint32_t id, uint64_t offset, uint64_t n) const {
  MutexLock l(&mu_);
  std::vector<Range> out;
  for (const Range& g : Gaps(memory_.objects, id, offset, offset + n)) {
    if (!disk()) {
      out.push_back(g);
      continue;
    }
    for (const Range& h : Gaps(disk_, id, g.offset, g.offset + g.length)) out.push_back(h);
  }
  return out;
}

std::vector<RangeCache::Range> RangeCache::Copy(uint32_t id, uint64_t offset, uint64_t n,
                                                uint8_t* dst) {
  struct DiskRead {
    SegmentStore::Location where;
    uint64_t start;  // the extent's
    uint64_t from, length;
    uint8_t* dst;
  };
  std::vector<Range> missing;
  std::vector<DiskRead> disk_reads;
  const uint64_t end = offset + n;
  {
    MutexLock l(&mu_);
    uint64_t pos = offset;
    while (pos < end) {
      if (auto it = Find(memory_.objects, id, pos)) {
        const uint64_t start = (*it)->first;
        Extent* e = &(*it)->second;
        const uint64_t stop = std::min(end, e->end);
        std::memcpy(dst + (pos - offset), e->bytes->data() + (pos - start), stop - pos);
        Lru& lru = memory_.ListOf(*e);
        lru.splice(lru.begin(), lru, e->lru);
        stats_.memory_hit_bytes += stop - pos;
        pos = stop;
        continue;
      }
      if (disk()) {
        if (auto it = Find(disk_, id, pos)) {
          const uint64_t start = (*it)->first;
          const SegmentStore::Location where = (*it)->second.where;
          const uint64_t stop =
              std::min({end, start + where.length, NextStart(memory_.objects, id, pos)});
          disk_reads.push_back({where, start, pos - start, stop - pos, dst + (pos - offset)});
          pos = stop;
          continue;
        }
      }
      uint64_t stop = std::min(end, NextStart(memory_.objects, id, pos));
      if (disk()) stop = std::min(stop, NextStart(disk_, id, pos));
      if (!missing.empty() && missing.back().offset + missing.back().length == pos) {
        missing.back().length += stop - pos;
      } else {
        missing.push_back({pos, stop - pos});
      }
      stats_.miss_bytes += stop - pos;
      pos = stop;
    }
    // Speculative bytes now read: no longer unread.
    MarkRangeReadLocked(id, offset, end);
  }
  for (const DiskRead& r : disk_reads) {
    const Status s = store_->Read(r.where, r.from, r.length, r.dst);
    MutexLock l(&mu_);
    if (s.ok()) {
      stats_.disk_hit_bytes += r.length;
      continue;
    }
    // Damaged, evicted meanwhile or unreadable: a miss, and the extent is forgotten.
    missing.push_back({r.start + r.from, r.length});
    stats_.miss_bytes += r.length;
    if (RemoveDiskLocked(id, r.start, r.where, true) && s.code() == Status::Code::kCorruption) {
      ++stats_.dropped;
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
  std::vector<Range> disk_gaps;
  std::map<uint32_t, uint64_t> unread_by_segment;
  {
    MutexLock l(&mu_);
    if (speculative) reserved_ -= std::min<uint64_t>(reserved_, bytes->size());
    if (bytes->empty()) return;
    stats_.inserted_bytes += bytes->size();
    for (const Range& g : Gaps(memory_.objects, id, offset, end)) {
      Extent e;
      e.end = g.offset + g.length;
      if (g.length == bytes->size()) {
        e.bytes = bytes;
      } else {
        // Only part of the buffer is new: the part is copied, so that what the cache holds is
        // what it counts (an extent sharing the buffer would keep all of it alive).
        const auto* from = bytes->data() + (g.offset - offset);
        e.bytes = std::make_shared<const std::vector<uint8_t>>(from, from + g.length);
      }
      // Read parts are kept as 32-bit offsets: a (never seen) extent of 4 GiB or more is not
      // tracked as unread.
      e.unread.unread = speculative && !disk() && g.length <= UINT32_MAX ? g.length : 0;
      AddLocked(id, g.offset, std::move(e));
    }
    EvictLocked();
    if (disk()) {
      disk_gaps = Gaps(disk_, id, offset, end);
      if (!disk_gaps.empty()) unread_by_segment = unread_by_segment_;
    }
  }
  if (disk_gaps.empty()) return;
  // Each gap as entries of at most kMaxDiskExtent bytes.
  struct Written {
    uint64_t start;
    SegmentStore::Location where;
  };
  std::vector<Written> written;
  std::vector<SegmentStore::Entry> evicted;
  for (const Range& g : disk_gaps) {
    for (uint64_t pos = g.offset; pos < g.offset + g.length; pos += kMaxDiskExtent) {
      const uint64_t len = std::min(kMaxDiskExtent, g.offset + g.length - pos);
      auto where =
          store_->Append({pos, id}, {bytes->data() + (pos - offset), static_cast<size_t>(len)},
                         &evicted, &unread_by_segment);
      if (where) written.push_back({pos, *where});  // else a full disk: in memory only
    }
  }
  MutexLock l(&mu_);
  ForgetEvictedLocked(evicted);
  for (const Written& w : written) {
    // Kept only while its segment is (an eviction after this names it), and only if no other
    // thread kept (part of) the range meanwhile.
    if (!store_->Contains(w.where.seq)) continue;
    if (!IsGap(disk_, id, w.start, w.start + w.where.length)) {
      store_->Forget(w.where);
      continue;
    }
    AddDiskLocked(id, w.start, w.where, speculative);
  }
}

bool RangeCache::Drop(uint32_t id, uint64_t offset, uint64_t n) {
  bool dropped = false;
  MutexLock l(&mu_);
  for (uint64_t s : Overlapping(memory_.objects, id, offset, offset + n)) {
    RemoveLocked(id, memory_.objects.at(id).find(s));
    ++stats_.dropped;
    dropped = true;
  }
  if (disk()) {
    for (uint64_t s : Overlapping(disk_, id, offset, offset + n)) {
      RemoveDiskLocked(id, s, disk_.at(id).at(s).where, true);
      ++stats_.dropped;
      dropped = true;
    }
  }
  return dropped;
}

void RangeCache::NoteEvictedReadLocked(uint32_t id, uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  auto& set = evicted_read_[id];
  // Merged with what touches it (a record read in order leaves one run).
  auto it = set.upper_bound(begin);
  if (it != set.begin() && std::prev(it)->second >= begin) --it;
  uint64_t b = begin, z = end;
  while (it != set.end() && it->first <= z) {
    b = std::min(b, it->first);
    z = std::max(z, it->second);
    evicted_read_bytes_ -= it->second - it->first;
    it = set.erase(it);
  }
  set.emplace(b, z);
  evicted_read_bytes_ += z - b;
  const auto now = std::chrono::steady_clock::now();
  evicted_read_order_.push_back({id, begin, end, now});
  ExpireEvictedReadLocked(now);
}

void RangeCache::ExpireEvictedReadLocked(std::chrono::steady_clock::time_point now) const {
  // Kept for kEvictedReadKept: long enough for a fetch ahead decided before the read (a
  // speculative read taken from the queue, a plan of files other readers have read), short
  // enough that the next epoch's fetch ahead is not held back; and at most kEvictedReadBytes.
  while (!evicted_read_order_.empty() &&
         (evicted_read_bytes_ > kEvictedReadBytes ||
          now - evicted_read_order_.front().when > kEvictedReadKept)) {
    const auto [oid, ob, oz, when] = evicted_read_order_.front();
    evicted_read_order_.pop_front();
    auto obj = evicted_read_.find(oid);
    if (obj == evicted_read_.end()) continue;
    // Forget [ob, oz) from whatever run holds it now.
    auto r = obj->second.upper_bound(ob);
    if (r == obj->second.begin()) continue;
    --r;
    if (r->second <= ob) continue;
    const uint64_t rb = r->first, rz = r->second;
    obj->second.erase(r);
    evicted_read_bytes_ -= rz - rb;
    if (rb < ob) {
      obj->second.emplace(rb, ob);
      evicted_read_bytes_ += ob - rb;
    }
    if (oz < rz) {
      obj->second.emplace(oz, rz);
      evicted_read_bytes_ += rz - oz;
    }
    if (obj->second.empty()) evicted_read_.erase(obj);
  }
}

std::vector<RangeCache::Range> RangeCache::MissingUnread(uint32_t id, uint64_t offset,
                                                         uint64_t n) const {
  std::vector<Range> missing = Missing(id, offset, n);
  MutexLock l(&mu_);
  ExpireEvictedReadLocked(std::chrono::steady_clock::now());
  auto obj = evicted_read_.find(id);
  if (obj == evicted_read_.end()) return missing;
  std::vector<Range> out;
  for (const Range& m : missing) {
    uint64_t pos = m.offset;
    const uint64_t end = m.offset + m.length;
    auto it = obj->second.upper_bound(pos);
    if (it != obj->second.begin() && std::prev(it)->second > pos) --it;
    for (; it != obj->second.end() && it->first < end && pos < end; ++it) {
      if (it->first > pos) out.push_back({pos, it->first - pos});
      pos = std::max(pos, it->second);
    }
    if (pos < end) out.push_back({pos, end - pos});
  }
  return out;
}

void RangeCache::MarkRead(uint32_t id, uint64_t offset, uint64_t n) {
  MutexLock l(&mu_);
  MarkRangeReadLocked(id, offset, offset + n);
}

void RangeCache::SetOrderKnown(bool known) {
  MutexLock l(&mu_);
  order_known_ = known;
}

uint64_t RangeCache::AheadShare() const {
  MutexLock l(&mu_);
  return AheadShareLocked();
}

uint64_t RangeCache::AheadRoom() const {
  MutexLock l(&mu_);
  const uint64_t share = AheadShareLocked();
  const uint64_t used = unread_ + reserved_;
  return used >= share ? 0 : share - used;
}

bool RangeCache::ReserveAhead(uint64_t n) {
  MutexLock l(&mu_);
  const uint64_t share = AheadShareLocked();
  const uint64_t used = unread_ + reserved_;
  if (used >= share || n > share - used) return false;
  reserved_ += n;
  return true;
}

void RangeCache::UnreserveAhead(uint64_t n) {
  MutexLock l(&mu_);
  reserved_ -= std::min(reserved_, n);
}

uint64_t RangeCache::capacity() const {
  MutexLock l(&mu_);
  return PrimaryBudgetLocked();
}

std::vector<std::pair<uint32_t, RangeCache::Range>> RangeCache::UnreadRanges() const {
  MutexLock l(&mu_);
  std::vector<std::pair<uint32_t, Range>> out;
  auto add = [&out](uint32_t id, uint64_t start, uint64_t end, const Unread& u) {
    uint64_t pos = start;
    for (const auto& [b, z] : u.read) {
      if (start + b > pos) out.push_back({id, {pos, start + b - pos}});
      pos = std::max(pos, start + z);
    }
    if (pos < end) out.push_back({id, {pos, end - pos}});
  };
  for (const auto& [id, extents] : memory_.objects) {
    for (const auto& [start, e] : extents) {
      if (e.unread.unread > 0) add(id, start, e.end, e.unread);
    }
  }
  for (const auto& [id, extents] : disk_) {
    for (const auto& [start, d] : extents) {
      const uint32_t object = id;  // clang 14 captures no structured binding (C++20's P1091)
      const uint64_t at = start;
      d.unread.ForEachRun(d.where.length, [&out, object, at](uint64_t b, uint64_t z) {
        out.push_back({object, {at + b, z - b}});
      });
    }
  }
  return out;
}

RangeCacheStats RangeCache::stats() const {
  SegmentStore::Stats st;
  if (disk()) st = store_->stats();
  MutexLock l(&mu_);
  RangeCacheStats s = stats_;
  s.memory_bytes = memory_.bytes;
  s.disk_bytes = disk_bytes_;
  s.disk_extents = disk_extents_;
  s.disk_segments = st.segments;
  s.disk_file_bytes = st.bytes;
  s.disk_dead_bytes = st.dead_bytes;
  s.unread_speculative_bytes = unread_;
  s.reserved_ahead_bytes = reserved_;
  ExpireEvictedReadLocked(std::chrono::steady_clock::now());
  s.recently_read_bytes = evicted_read_bytes_;
  return s;
}

}  // namespace pcrfs
