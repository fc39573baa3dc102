#include "fs/baseline_disk_cache.h"

namespace pcrfs::fs {

Result<std::unique_ptr<BaselineDiskCache>> BaselineDiskCache::Open(const std::string& dir,
                                                                   uint64_t budget_bytes,
                                                                   std::string* note) {
  std::unique_ptr<BaselineDiskCache> cache(new BaselineDiskCache());
  BaselineDiskCache* c = cache.get();
  MutexLock l(&c->mu_);  // nobody else has the cache yet
  // Newest first: the first entry of a key wins.
  auto store = SegmentStore::Open(dir, budget_bytes, [c](const SegmentStore::Entry& e) {
    c->mu_.AssertHeld();
    return e.key.b == 0 && c->files_.emplace(e.key.a, e.where).second;
  });
  if (!store) return Err(store.error());
  if (*store == nullptr) {
    if (note != nullptr) {
      *note = dir +
              ": the disk cache is in use by another pcrfs process; this mount keeps its "
              "baseline files in memory only (give each mount its own -o cache_dir)";
    }
    return std::unique_ptr<BaselineDiskCache>();
  }
  c->store_ = std::move(*store);
  c->stats_.adopted = c->files_.size();
  l.Unlock();
  return cache;
}

void BaselineDiskCache::ForgetEvictedLocked(const std::vector<SegmentStore::Entry>& evicted) {
  for (const SegmentStore::Entry& e : evicted) {
    auto f = files_.find(e.key.a);
    if (e.key.b == 0 && f != files_.end() && f->second == e.where) {
      files_.erase(f);
      ++stats_.evicted_files;
    }
  }
}

std::optional<uint64_t> BaselineDiskCache::Size(uint64_t key) const {
  MutexLock l(&mu_);
  auto it = files_.find(key);
  if (it == files_.end()) return std::nullopt;
  return it->second.length;
}

BaselineDiskCache::Bytes BaselineDiskCache::Get(uint64_t key) {
  SegmentStore::Location w;
  {
    MutexLock l(&mu_);
    auto it = files_.find(key);
    if (it == files_.end()) {
      ++stats_.misses;
      return nullptr;
    }
    w = it->second;
  }
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.length);
  const Status s = store_->Read(w, 0, w.length, bytes->data());
  MutexLock l(&mu_);
  if (!s.ok()) {
    auto it = files_.find(key);
    if (it != files_.end() && it->second == w) {
      files_.erase(it);
      store_->Forget(w);
    }
    if (s.code() != Status::Code::kNotFound) ++stats_.damaged;  // not merely evicted
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  return bytes;
}

void BaselineDiskCache::Put(uint64_t key, const std::vector<uint8_t>& bytes) {
  {
    MutexLock l(&mu_);
    if (files_.count(key)) return;
  }
  std::vector<SegmentStore::Entry> evicted;
  auto w = store_->Append({key, 0}, bytes, &evicted);
  MutexLock l(&mu_);
  ForgetEvictedLocked(evicted);
  // Kept only while its segment is (an eviction after this names it).
  if (!w || !store_->Contains(w->seq)) return;
  if (!files_.emplace(key, *w).second) {
    store_->Forget(*w);  // another thread kept it meanwhile
    return;
  }
  ++stats_.written;
  stats_.written_bytes += bytes.size();
}

BaselineDiskCache::Stats BaselineDiskCache::stats() const {
  const SegmentStore::Stats st = store_->stats();
  MutexLock l(&mu_);
  Stats s = stats_;
  s.files = files_.size();
  s.bytes = st.bytes;
  s.budget = st.budget;
  s.evicted_segments = st.evicted_segments;
  return s;
}

}  // namespace pcrfs::fs
