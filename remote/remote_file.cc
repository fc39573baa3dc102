#include "remote/remote_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <vector>

#include "common/file_util.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

// Bytes of landed fetches (RemoteFile::Fetch::landed) kept by every file of this process: a
// reader that never comes for its pieces (its read failed on another piece, or found it in the
// piece cache meanwhile) leaves them until a bound pushes them out.
std::atomic<uint64_t> g_landed_bytes{0};

}  // namespace

RemoteFile::Shared::~Shared() {
  MutexLock l(&mu);
  g_landed_bytes.fetch_sub(landed_bytes, std::memory_order_relaxed);
}

RemoteFile::RemoteFile(std::shared_ptr<ObjectClient> client, std::string key, uint64_t size,
                       std::shared_ptr<RangeCache> cache, uint32_t cache_id, uint64_t align)
    : client_(std::move(client)),
      key_(std::move(key)),
      name_(client_->Name(key_)),
      size_(size),
      cache_(std::move(cache)),
      cache_id_(cache_id),
      align_(align),
      shared_(std::make_shared<Shared>()) {}

ObjectGet RemoteFile::RangeGet(uint64_t offset, uint64_t n, uint8_t* dst) const {
  ObjectGet req;
  req.key = key_;
  req.range = ByteRange{offset, n};
  req.expected_size = size_;
  req.size_label = "index says";
  req.changed_advice = ": remount";
  req.dst = dst;
  req.dst_size = n;
  return req;
}

Status RemoteFile::ReadUncached(uint64_t offset, size_t n, uint8_t* dst) const {
  auto r = client_->GetBlocking(RangeGet(offset, n, dst));
  return r.has_value() ? Status::OK() : r.error();
}

std::shared_ptr<RemoteFile::Fetch> RemoteFile::StartLocked(
    uint64_t offset, uint64_t end, std::vector<std::shared_ptr<Fetch>>* started) const {
  auto f = std::make_shared<Fetch>();
  f->offset = offset;
  f->end = end;
  f->bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(end - offset));
  f->done = f->promise.get_future().share();
  shared_->pending[offset] = f;
  started->push_back(f);
  return f;
}

void RemoteFile::CoverLocked(const std::vector<RangeCache::Range>& ranges,
                             std::vector<std::shared_ptr<Fetch>>* fetches,
                             std::vector<std::shared_ptr<Fetch>>* started) const {
  auto& pending = shared_->pending;
  for (const RangeCache::Range& m : ranges) {
    uint64_t end = m.offset + m.length;
    uint64_t pos = m.offset;
    if (align_ > 0) {
      pos -= pos % align_;
      if (end % align_ != 0) end = std::min(size_, end + (align_ - end % align_));
    }
    auto it = pending.upper_bound(pos);
    if (it != pending.begin() && std::prev(it)->second->end > pos) --it;
    for (; it != pending.end() && it->first < end && pos < end; ++it) {
      if (it->second->end <= pos) continue;
      if (it->first > pos) fetches->push_back(StartLocked(pos, it->first, started));
      if (std::find(fetches->begin(), fetches->end(), it->second) == fetches->end()) {
        fetches->push_back(it->second);
      }
      pos = std::max(pos, it->second->end);
    }
    if (pos < end) fetches->push_back(StartLocked(pos, end, started));
  }
}

std::vector<RangeCache::Range> RemoteFile::StillMissingLocked(
    const std::vector<RangeCache::Range>& missing, std::vector<RangeCache::Range>* arrived) const {
  std::vector<RangeCache::Range> still;
  for (const RangeCache::Range& m : missing) {
    uint64_t pos = m.offset;
    for (const RangeCache::Range& r : cache_->Missing(cache_id_, m.offset, m.length)) {
      if (r.offset > pos) arrived->push_back({pos, r.offset - pos});
      still.push_back(r);
      pos = r.offset + r.length;
    }
    if (pos < m.offset + m.length) arrived->push_back({pos, m.offset + m.length - pos});
  }
  return still;
}

bool RemoteFile::ReserveAheadLocked(std::vector<std::shared_ptr<Fetch>>* started) const {
  uint64_t bytes = 0;
  for (const auto& f : *started) bytes += f->end - f->offset;
  if (bytes == 0 || cache_->ReserveAhead(bytes)) {
    for (const auto& f : *started) f->ahead = true;
    return true;
  }
  // No room: nobody could have joined them (that takes shared_->mu), so they simply go.
  for (const auto& f : *started) shared_->pending.erase(f->offset);
  started->clear();
  return false;
}

void RemoteFile::NoteConsumed(Fetch& f, uint64_t offset, uint64_t n) const {
  if (!f.ahead) return;
  {
    MutexLock l(&f.mu);
    if (!f.inserted) {
      f.consumed.push_back({offset, n});
      return;
    }
  }
  cache_->MarkRead(cache_id_, offset, n);
}

void RemoteFile::RetireLandedLocked(Shared& shared, Fetch& f) {
  if (!f.landed || f.retired) return;
  f.retired = true;
  shared.landed_live.fetch_sub(1, std::memory_order_relaxed);
}

void RemoteFile::DropOldestLandedLocked(Shared& shared) {
  const std::shared_ptr<Fetch> old = shared.landed.front();
  shared.landed.pop_front();
  shared.landed_bytes -= old->end - old->offset;
  g_landed_bytes.fetch_sub(old->end - old->offset, std::memory_order_relaxed);
  auto o = shared.pending.find(old->offset);
  if (o != shared.pending.end() && o->second == old) shared.pending.erase(o);
  RetireLandedLocked(shared, *old);
}

void RemoteFile::TakenLocked(Shared& shared, Fetch& f, uint64_t offset, uint64_t end) {
  if (!f.landed || f.to_read == 0) return;
  f.to_read -= std::min(f.to_read, end - offset);
  if (f.to_read > 0) return;
  auto it = shared.pending.find(f.offset);
  if (it == shared.pending.end() || it->second.get() != &f) return;
  // Still in flight: its completion sees to_read == 0 and lets it go.
  if (!f.completed) return;
  shared.pending.erase(it);
  RetireLandedLocked(shared, f);
  for (auto l = shared.landed.begin(); l != shared.landed.end(); ++l) {
    if (l->get() != &f) continue;
    shared.landed_bytes -= f.end - f.offset;
    g_landed_bytes.fetch_sub(f.end - f.offset, std::memory_order_relaxed);
    shared.landed.erase(l);
    break;
  }
}

void RemoteFile::TakeLanded(uint64_t offset, uint64_t end) const {
  if (shared_->landed_live.load(std::memory_order_relaxed) == 0) return;
  MutexLock l(&shared_->mu);
  auto& pending = shared_->pending;
  auto it = pending.upper_bound(offset);
  if (it != pending.begin()) --it;
  std::vector<std::shared_ptr<Fetch>> overlapping;
  for (; it != pending.end() && it->first < end; ++it) {
    if (it->second->end > offset && it->second->landed) overlapping.push_back(it->second);
  }
  for (const auto& f : overlapping) {
    TakenLocked(*shared_, *f, std::max(offset, f->offset), std::min(end, f->end));
  }
}

void RemoteFile::Submit(const std::vector<std::shared_ptr<Fetch>>& started, bool background,
                        bool ahead) const {
  std::vector<ObjectGet> together;
  std::vector<std::shared_ptr<Fetch>> together_fetches;
  for (const auto& f : started) {
    ObjectGet req = RangeGet(f->offset, f->end - f->offset, f->bytes->data());
    req.background = background;
    req.on_progress = [f](uint64_t written) {
      {
        MutexLock l(&f->mu);
        f->arrived = written;
      }
      f->arrived_cv.SignalAll();
    };
    if (f->end - f->offset <= kMultiRangePart) {
      together.push_back(std::move(req));
      together_fetches.push_back(f);
      continue;
    }
    client_->Get(std::move(req), [f, shared = shared_, cache = cache_, id = cache_id_,
                                  ahead](Result<ObjectData> r) {
      Finish(f, shared, cache, id, ahead, r.has_value() ? Status::OK() : r.error());
    });
  }
  if (together.empty()) return;
  // One request where the store takes several ranges in one (a web server).
  client_->GetRanges(
      std::move(together), [fetches = std::move(together_fetches), shared = shared_, cache = cache_,
                            id = cache_id_, ahead](size_t i, Result<ObjectData> r) {
        Finish(fetches[i], shared, cache, id, ahead, r.has_value() ? Status::OK() : r.error());
      });
}

void RemoteFile::Finish(const std::shared_ptr<Fetch>& f, const std::shared_ptr<Shared>& shared,
                        const std::shared_ptr<RangeCache>& cache, uint32_t id, bool ahead,
                        Status s) {
  if (cache && ahead) {
    // Its room was reserved: kept as unread, less what readers took meanwhile; or, failed,
    // given back.
    if (s.ok()) {
      cache->Insert(id, f->offset, f->bytes, true);
    } else {
      cache->UnreserveAhead(f->end - f->offset);
    }
    std::vector<RangeCache::Range> consumed;
    {
      MutexLock l(&f->mu);
      f->inserted = true;
      consumed.swap(f->consumed);
    }
    for (const RangeCache::Range& c : consumed) cache->MarkRead(id, c.offset, c.length);
  } else if (s.ok() && cache) {
    cache->Insert(id, f->offset, f->bytes, false);
  }
  {
    MutexLock l(&shared->mu);
    f->completed = true;
    auto it = shared->pending.find(f->offset);
    if (it != shared->pending.end() && it->second == f) {
      const uint64_t size = f->end - f->offset;
      const auto now = std::chrono::steady_clock::now();
      while (!shared->landed.empty() && now - shared->landed.front()->kept_at > kLandedKept) {
        DropOldestLandedLocked(*shared);
      }
      if (s.ok() && f->landed && f->to_read > 0 &&
          g_landed_bytes.load(std::memory_order_relaxed) + size <= kMaxLandedTotal) {
        // Kept for its reader; the oldest kept go beyond the file's bound.
        f->kept_at = now;
        shared->landed.push_back(f);
        shared->landed_bytes += size;
        g_landed_bytes.fetch_add(size, std::memory_order_relaxed);
        while (shared->landed_bytes > kMaxLandedBytes) DropOldestLandedLocked(*shared);
      } else {
        shared->pending.erase(it);
        RetireLandedLocked(*shared, *f);
      }
    }
  }
  f->promise.set_value(std::move(s));
  {
    MutexLock l(&f->mu);
    f->finished = true;
  }
  f->arrived_cv.SignalAll();
}

bool RemoteFile::WaitArrived(Fetch& f, uint64_t until) {
  MutexLock l(&f.mu);
  while (!f.finished && f.offset + f.arrived < until) f.arrived_cv.Wait(&f.mu);
  return f.offset + f.arrived >= until;
}

Status RemoteFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  if (n == 0) return Status::OK();
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(name_ + ": read of " + std::to_string(n) + " bytes at " +
                              std::to_string(offset) + " is past the end (size " +
                              std::to_string(size_) + ", truncated)");
  }
  if (!cache_) return ReadUncached(offset, n, dst);
  auto missing = cache_->Copy(cache_id_, offset, n, dst);
  if (missing.empty()) {
    TakeLanded(offset, offset + n);
    return Status::OK();
  }
  std::vector<std::shared_ptr<Fetch>> fetches, started;
  std::vector<RangeCache::Range> arrived;
  {
    MutexLock l(&shared_->mu);
    // A fetch that ended after Copy put its bytes in the cache before it left `pending`: those
    // are copied below, not fetched a second time (this race cost 2-10% extra origin bytes).
    missing = StillMissingLocked(missing, &arrived);
    CoverLocked(missing, &fetches, &started);
  }
  for (const RangeCache::Range& a : arrived) {
    // Evicted again in between (a tiny cache): read those bytes directly.
    for (const RangeCache::Range& m :
         cache_->Copy(cache_id_, a.offset, a.length, dst + (a.offset - offset))) {
      PCRFS_RETURN_IF_ERROR(
          ReadUncached(m.offset, static_cast<size_t>(m.length), dst + (m.offset - offset)));
    }
  }
  Submit(started, /*background=*/false, /*ahead=*/false);
  bool others_failed = false;
  for (const auto& f : fetches) {
    uint64_t until = f->offset;  // what this read needs of f
    for (const RangeCache::Range& m : missing) {
      if (m.offset < f->end && f->offset < m.offset + m.length) {
        until = std::max(until, std::min(f->end, m.offset + m.length));
      }
    }
    if (!WaitArrived(*f, until)) {
      const Status& s = f->done.get();
      if (!s.ok()) {
        // The origin's answer (a timeout, a 5xx after the retries, a 404) is this read's too:
        // asking again would hold the read for another deadline. Only a fetch that got bytes
        // it could not use (Corruption: a short or changed answer) is fetched again below.
        if (std::find(started.begin(), started.end(), f) != started.end() || !s.IsCorruption()) {
          return s;
        }
        others_failed = true;
        continue;
      }
    }
    for (const RangeCache::Range& m : missing) {
      const uint64_t a = std::max(m.offset, f->offset);
      const uint64_t z = std::min(m.offset + m.length, f->end);
      if (a < z) {
        std::memcpy(dst + (a - offset), f->bytes->data() + (a - f->offset), z - a);
        NoteConsumed(*f, a, z - a);
      }
    }
  }
  if (others_failed) {
    for (const RangeCache::Range& m : missing) {
      PCRFS_RETURN_IF_ERROR(
          ReadUncached(m.offset, static_cast<size_t>(m.length), dst + (m.offset - offset)));
    }
  }
  TakeLanded(offset, offset + n);
  return Status::OK();
}

void RemoteFile::Prefetch(uint64_t offset, uint64_t n) const {
  PrefetchRanges({{offset, n}}, /*ahead=*/false);
}

void RemoteFile::PrefetchAll(const std::vector<Span>& spans) const {
  PrefetchRanges(spans, /*ahead=*/false);
}

bool RemoteFile::PrefetchAhead(uint64_t offset, uint64_t n) const {
  return PrefetchRanges({{offset, n}}, /*ahead=*/true);
}

bool RemoteFile::PrefetchAheadAll(const std::vector<Span>& spans) const {
  return PrefetchRanges(spans, /*ahead=*/true);
}

bool RemoteFile::PrefetchRanges(const std::vector<Span>& spans, bool ahead) const {
  if (!cache_) return false;
  std::vector<std::shared_ptr<Fetch>> fetches, started;
  {
    // Looked up under the lock, so a fetch ending meanwhile is either cached or still pending.
    MutexLock l(&shared_->mu);
    for (const Span& span : spans) {
      if (span.length == 0 || span.offset >= size_) continue;
      const uint64_t n = std::min(span.length, size_ - span.offset);
      CoverLocked(ahead ? cache_->MissingUnread(cache_id_, span.offset, n)
                        : cache_->Missing(cache_id_, span.offset, n),
                  &fetches, &started);
    }
    if (ahead && !ReserveAheadLocked(&started)) return false;
    if (!ahead) {
      // A demand read's pieces: kept for it once they arrive (Fetch::landed), until it took
      // what it asked for (not the bytes -o fetch_align added).
      for (const auto& f : started) {
        f->landed = true;
        f->to_read = 0;
        for (const Span& span : spans) {
          if (span.offset >= f->end) continue;
          const uint64_t a = std::max(f->offset, span.offset);
          const uint64_t z =
              span.length < f->end - span.offset ? span.offset + span.length : f->end;
          if (a < z) f->to_read += z - a;
        }
      }
      shared_->landed_live.fetch_add(started.size(), std::memory_order_relaxed);
    }
  }
  Submit(started, /*background=*/false, ahead);
  return true;
}

Result<uint64_t> RemoteFile::Warm(uint64_t offset, uint64_t n,
                                  std::vector<uint8_t>* scratch) const {
  if (!cache_) {
    scratch->resize(static_cast<size_t>(n));
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, static_cast<size_t>(n), scratch->data()));
    return n;
  }
  if (n == 0 || offset >= size_) return uint64_t{0};
  n = std::min(n, size_ - offset);
  std::vector<std::shared_ptr<Fetch>> fetches, started;
  {
    MutexLock l(&shared_->mu);
    CoverLocked(cache_->MissingUnread(cache_id_, offset, n), &fetches, &started);
    // Only what the cache can keep until it is read (a level many times the cache, read in a
    // shuffled order, would otherwise lose it first and fetch it again).
    if (!ReserveAheadLocked(&started)) {
      return Err(Status::ResourceExhausted(name_ + ": no room to keep more bytes fetched ahead"));
    }
  }
  Submit(started, /*background=*/true, /*ahead=*/true);
  uint64_t asked = 0;
  Status first;
  for (const auto& f : started) {
    const Status& s = f->done.get();
    if (!s.ok() && first.ok()) first = s;
    asked += f->end - f->offset;
  }
  if (!first.ok()) return Err(first);
  return asked;
}

bool RemoteFile::ReadCached(uint64_t offset, size_t n, uint8_t* dst) const {
  if (!cache_ || offset > size_ || n > size_ - offset) return false;
  return cache_->Copy(cache_id_, offset, n, dst).empty();
}

bool RemoteFile::DropCached(uint64_t offset, uint64_t n) const {
  if (cache_ == nullptr) return false;
  bool dropped = false;
  {
    // Damaged bytes kept for a reader are not handed out again either.
    MutexLock l(&shared_->mu);
    for (auto it = shared_->landed.begin(); it != shared_->landed.end();) {
      const std::shared_ptr<Fetch> f = *it;
      if (f->end <= offset || f->offset >= offset + n) {
        ++it;
        continue;
      }
      auto p = shared_->pending.find(f->offset);
      if (p != shared_->pending.end() && p->second == f) shared_->pending.erase(p);
      RetireLandedLocked(*shared_, *f);
      shared_->landed_bytes -= f->end - f->offset;
      g_landed_bytes.fetch_sub(f->end - f->offset, std::memory_order_relaxed);
      it = shared_->landed.erase(it);
      dropped = true;
    }
  }
  return cache_->Drop(cache_id_, offset, n) || dropped;
}

Result<DownloadResult> Download(ObjectClient& client, const std::string& key,
                                const std::string& dest, const std::string& known_etag,
                                uint64_t max_bytes) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = dest + ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  ObjectGet req;
  req.key = key;
  req.if_none_match = known_etag;
  req.body_file = tmp;
  // Created here, private and new (never a planted file or link): the client writes into it.
  if (auto fd = OpenFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600); !fd) {
    return Err(fd.error());
  }
  req.max_body_bytes = max_bytes;
  auto r = client.GetBlocking(std::move(req));
  DownloadResult out;
  if (!r.has_value()) {
    ::unlink(tmp.c_str());
    return Err(r.error());
  }
  if (r->not_modified) {
    ::unlink(tmp.c_str());
    out.etag = known_etag;
    return out;
  }
  // On the disk before the rename: a crash leaves the old file or the new one, whole.
  if (auto fd = OpenFile(tmp, O_RDONLY | O_CLOEXEC); !fd || ::fsync(fd->get()) != 0) {
    Status s = fd ? Status::FromErrno("fsync " + tmp, errno) : fd.error();
    ::unlink(tmp.c_str());
    return Err(s);
  }
  if (std::rename(tmp.c_str(), dest.c_str()) != 0) {
    Status s = Status::FromErrno("rename " + tmp + " to " + dest, errno);
    ::unlink(tmp.c_str());
    return Err(s);
  }
  out.modified = true;
  out.etag = r->etag;
  out.size = r->body_bytes;
  return out;
}

namespace {

// A temporary file beside dest of a given size, mapped for writing; Commit() renames it over
// dest (as Download does), else it is removed. Disk-backed: a large object is not held in
// the heap.
class MappedTemp {
 public:
  ~MappedTemp() {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  Status Create(const std::string& dest, uint64_t size) {
    static std::atomic<uint64_t> counter{0};
    tmp_ = dest + ".tmp-" + std::to_string(::getpid()) + "-r" +
           std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    auto fd = OpenFile(tmp_, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (!fd) return fd.error();
    fd_ = std::move(*fd);
    if (size == 0) return Status::OK();  // nothing to map
    // Every block allocated now: a full disk is an error here, never a SIGBUS while the
    // mapping is written.
    if (int err = ::posix_fallocate(fd_.get(), 0, static_cast<off_t>(size)); err != 0) {
      return Status::FromErrno(tmp_, err);
    }
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    if (m == MAP_FAILED) return Status::FromErrno("mmap " + tmp_, errno);
    map_ = static_cast<uint8_t*>(m);
    size_ = size;
    return Status::OK();
  }
  uint8_t* data() { return map_; }
  Status Commit(const std::string& dest) {
    // On the disk before the rename: a crash leaves the old file or the new one, whole.
    if (map_ != nullptr && ::msync(map_, size_, MS_SYNC) != 0) {
      return Status::FromErrno("msync " + tmp_, errno);
    }
    if (map_ != nullptr && ::munmap(map_, size_) != 0) {
      return Status::FromErrno("munmap " + tmp_, errno);
    }
    map_ = nullptr;
    if (::fsync(fd_.get()) != 0) return Status::FromErrno("fsync " + tmp_, errno);
    if (std::rename(tmp_.c_str(), dest.c_str()) != 0) {
      return Status::FromErrno("rename " + tmp_ + " to " + dest, errno);
    }
    tmp_.clear();
    return Status::OK();
  }

 private:
  std::string tmp_;
  UniqueFd fd_;
  uint8_t* map_ = nullptr;
  size_t size_ = 0;
};

// Writes bytes beside dest and renames the file over it.
Status WriteWhole(const std::string& dest, const std::string& bytes) {
  MappedTemp file;
  PCRFS_RETURN_IF_ERROR(file.Create(dest, bytes.size()));
  if (!bytes.empty()) std::memcpy(file.data(), bytes.data(), bytes.size());
  return file.Commit(dest);
}

}  // namespace

Result<DownloadResult> DownloadRanged(ObjectClient& client, const std::string& key,
                                      const std::string& dest, const std::string& known_etag,
                                      const RangedDownloadOptions& options) {
  const uint64_t first_bytes = std::max<uint64_t>(1, options.first_bytes);
  const uint64_t part_bytes = std::max<uint64_t>(1, options.part_bytes);
  for (int attempt = 0;; ++attempt) {
    ObjectGet first;
    first.key = key;
    first.range = ByteRange{0, first_bytes};
    first.if_none_match = known_etag;
    auto r = client.GetBlocking(std::move(first));
    if (!r) return Err(r.error());
    DownloadResult out;
    if (r->not_modified) {
      out.etag = known_etag;
      return out;
    }
    const uint64_t size = r->size;
    std::string bytes = std::move(r->body);
    const std::string etag = r->etag;
    if (options.declared_size) {
      auto declared = options.declared_size(bytes);
      if (!declared) return Err(declared.error());
      if (*declared != 0 && *declared != size) {
        return Err(Status::Corruption(client.Name(key) + ": the server says " +
                                      std::to_string(size) + " bytes, the file's header says " +
                                      std::to_string(*declared)));
      }
    }
    if (bytes.size() >= size) {
      PCRFS_RETURN_ERR_IF_ERROR(WriteWhole(dest, bytes));
      out.modified = true;
      out.etag = etag;
      out.size = bytes.size();
      return out;
    }
    if (etag.empty()) return Download(client, key, dest, "", options.max_bytes);
    if (size > options.max_bytes) {
      return Err(Status::Corruption(client.Name(key) + ": " + std::to_string(size) +
                                    " bytes, more than the " + std::to_string(options.max_bytes) +
                                    " this download takes"));
    }
    MappedTemp file;
    PCRFS_RETURN_ERR_IF_ERROR(file.Create(dest, size));
    std::memcpy(file.data(), bytes.data(), bytes.size());
    // The rest, every range asked at once; each answer is checked (size, exact bytes) by Get.
    struct Part {
      std::promise<Result<ObjectData>> done;
      std::future<Result<ObjectData>> result;
    };
    std::vector<Part> parts((size - bytes.size() + part_bytes - 1) / part_bytes);
    uint64_t off = bytes.size();
    for (Part& part : parts) {
      part.result = part.done.get_future();
      ObjectGet get;
      get.key = key;
      get.range = ByteRange{off, std::min(part_bytes, size - off)};
      get.expected_size = size;
      // If-Match compares strongly: a weak ETag (W/"...") never matches, so it is not sent;
      // the answers' ETags and sizes are still compared with the first's.
      if (!etag.starts_with("W/")) get.if_match = etag;
      get.dst = file.data() + off;
      get.dst_size = get.range->length;
      off += get.range->length;
      client.Get(std::move(get), [promise = &part.done](Result<ObjectData> d) {
        promise->set_value(std::move(d));
      });
    }
    Status failed;
    bool changed = false;
    for (Part& part : parts) {
      Result<ObjectData> d = part.result.get();  // every one waited for: they write to file
      if (!d) {
        if (d.error().code() == Status::Code::kCorruption) {
          changed = true;  // a 412, another size, a short answer
        } else if (failed.ok()) {
          failed = d.error();
        }
      } else if (!d->etag.empty() && d->etag != etag) {
        changed = true;
      }
    }
    if (!failed.ok()) return Err(failed);
    if (changed) {
      if (attempt < options.restarts) continue;
      return Err(Status::Corruption(client.Name(key) + ": changed during the download " +
                                    std::to_string(attempt + 1) + " times"));
    }
    PCRFS_RETURN_ERR_IF_ERROR(file.Commit(dest));
    out.modified = true;
    out.etag = etag;
    out.size = size;
    return out;
  }
}

}  // namespace pcrfs
