#include "fs/page_pusher.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/crc32c.h"
#include "common/thread_name.h"

namespace pcrfs::fs {

PagePusher::PagePusher(Options options, Push push)
    : options_(options), push_(std::move(push)), enabled_(options_.budget_bytes > 0 && push_) {
  if (enabled_) thread_ = std::thread([this] { Run(); });
}

PagePusher::~PagePusher() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void PagePusher::Expect(const SpeculationSource* record, uint64_t ino,
                        const std::vector<Piece>& pieces, std::string_view tail, Counted counted) {
  if (!enabled_) return;
  uint64_t size = tail.size();
  for (const Piece& p : pieces) size += p.length;
  if (size == 0 || size > options_.max_file_bytes) return;
  MutexLock l(&mu_);
  if (committed_bytes_ >= options_.budget_bytes) return;
  if (files_.count(ino) > 0 || recent_.count(ino) > 0) return;
  if (pending_pieces_ + pieces.size() > options_.max_pending_pieces) {
    ++stats_.refused;
    return;
  }
  auto& record_pieces = pieces_[record];
  PendingFile f;
  f.record = record;
  f.size = size;
  f.tail = std::string(tail);
  f.counted = counted;
  for (const Piece& p : pieces) {
    if (p.length == 0) continue;
    // Pieces never overlap another file's; one that is already expected (a damaged index)
    // makes this file one the pusher leaves alone.
    auto next = record_pieces.lower_bound(p.offset);
    const bool clash = (next != record_pieces.end() && next->first < p.offset + p.length) ||
                       (next != record_pieces.begin() && std::prev(next)->second.end > p.offset);
    if (clash) {
      for (const Piece& q : f.pieces) record_pieces.erase(q.offset);
      if (record_pieces.empty()) pieces_.erase(record);
      return;
    }
    record_pieces.emplace(p.offset, PendingPiece{p.offset + p.length, ino, p.length});
    f.pieces.push_back(p);
    f.missing += p.length;
  }
  if (f.pieces.empty()) {
    if (record_pieces.empty()) pieces_.erase(record);
    return;
  }
  ++stats_.expected;
  pending_pieces_ += f.pieces.size();
  files_.emplace(ino, std::move(f));
}

void PagePusher::Arrived(const SpeculationSource* record, uint64_t offset, uint64_t end) {
  if (!enabled_ || end <= offset) return;
  {
    MutexLock l(&mu_);
    if (stop_ || pieces_.count(record) == 0) return;
    arrivals_.push_back({record, offset, end});
  }
  cv_.Signal();
}

uint64_t PagePusher::Forget(uint64_t ino) {
  if (!enabled_) return 0;
  MutexLock l(&mu_);
  auto it = files_.find(ino);
  if (it != files_.end()) EraseFileLocked(it);
  auto pushed = pushed_left_.find(ino);
  const uint64_t left = pushed == pushed_left_.end() ? 0 : pushed->second;
  if (!recent_.insert(ino).second) return left;
  if (recent_ring_.size() < kRecentReads) {
    recent_ring_.push_back(ino);
    return left;
  }
  recent_.erase(recent_ring_[recent_next_]);
  recent_ring_[recent_next_] = ino;
  recent_next_ = (recent_next_ + 1) % kRecentReads;
  return left;
}

uint64_t PagePusher::CountedByPush(uint64_t ino, uint64_t n) {
  if (!enabled_) return 0;
  MutexLock l(&mu_);
  auto it = pushed_left_.find(ino);
  if (it == pushed_left_.end()) return 0;
  const uint64_t counted = std::min(n, it->second);
  it->second -= counted;
  // Left in the ring until it is dropped from there: an entry of 0 counts nothing.
  return counted;
}

PagePusher::PendingFile PagePusher::EraseFileLocked(
    std::unordered_map<uint64_t, PendingFile>::iterator it) {
  PendingFile f = std::move(it->second);
  files_.erase(it);
  pending_pieces_ -= f.pieces.size();
  auto rp = pieces_.find(f.record);
  if (rp != pieces_.end()) {
    for (const Piece& p : f.pieces) rp->second.erase(p.offset);
    if (rp->second.empty()) pieces_.erase(rp);
  }
  return f;
}

void PagePusher::ApplyLocked(const Arrival& a, std::vector<Ready>* ready) {
  auto rp = pieces_.find(a.record);
  if (rp == pieces_.end()) return;
  auto& record_pieces = rp->second;
  auto it = record_pieces.upper_bound(a.offset);
  if (it != record_pieces.begin() && std::prev(it)->second.end > a.offset) --it;
  std::vector<uint64_t> complete;
  for (; it != record_pieces.end() && it->first < a.end; ++it) {
    PendingPiece& p = it->second;
    const uint64_t overlap = std::min(a.end, p.end) - std::max(a.offset, it->first);
    const uint64_t got = std::min(overlap, p.missing);  // a byte counts once
    p.missing -= got;
    auto f = files_.find(p.ino);
    if (f == files_.end()) continue;
    f->second.missing -= std::min(got, f->second.missing);
    if (f->second.missing == 0) complete.push_back(p.ino);
  }
  for (uint64_t ino : complete) {
    auto f = files_.find(ino);
    if (f == files_.end()) continue;
    // (Invalidates `it`, which is no longer used, and maybe `rp`.)
    ready->push_back({ino, EraseFileLocked(f)});
  }
}

void PagePusher::Run() {
  NameThisThread("pcrfs-push");
  std::vector<uint8_t> buffer;
  std::vector<Ready> ready;
  for (;;) {
    ready.clear();
    {
      MutexLock l(&mu_);
      busy_ = false;
      cv_.SignalAll();  // Drain()
      cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return stop_ || !arrivals_.empty(); });
      if (stop_) return;
      busy_ = true;
      while (!arrivals_.empty() && ready.size() < kReadyBatch) {
        ApplyLocked(arrivals_.front(), &ready);
        arrivals_.pop_front();
      }
    }
    for (const Ready& r : ready) PushOne(r, &buffer);
    // One arrival may have completed every pending file: do not keep room for as many.
    if (ready.capacity() > 2 * kReadyBatch) std::vector<Ready>().swap(ready);
  }
}

void PagePusher::PushOne(const Ready& r, std::vector<uint8_t>* buffer) {
  const PendingFile& f = r.file;
  buffer->resize(f.size);
  uint8_t* dst = buffer->data();
  for (const Piece& p : f.pieces) {
    if (!f.record->ReadCached(p.offset, p.length, dst)) {
      MutexLock l(&mu_);
      ++stats_.not_in_memory;
      return;
    }
    if (crc32c::Mask(crc32c::Value(dst, p.length)) != p.masked_crc) {
      MutexLock l(&mu_);
      ++stats_.damaged;
      return;
    }
    dst += p.length;
  }
  std::memcpy(dst, f.tail.data(), f.tail.size());
  {
    MutexLock l(&mu_);
    if (stop_) return;
    // A reader asked for it while it was assembled: it has its bytes (and they were counted as
    // served) already.
    if (recent_.count(r.ino) > 0) {
      ++stats_.read_first;
      return;
    }
    if (committed_bytes_ + f.size > options_.budget_bytes) {
      ++stats_.over_budget;
      return;
    }
    committed_bytes_ += f.size;
  }
  const int rc = push_(r.ino, buffer->data(), f.size);
  MutexLock l(&mu_);
  if (rc == 0) {
    ++stats_.pushed;
    stats_.pushed_bytes += f.size;
    // A reader that asked for it while it was pushed had its READ counted: not counted again.
    const bool read_meanwhile = recent_.count(r.ino) > 0;
    if (!read_meanwhile && f.counted.level >= 1 &&
        f.counted.level <= static_cast<int>(stats_.files_by_level.size())) {
      const auto i = static_cast<size_t>(f.counted.level - 1);
      ++stats_.files_by_level[i];
      stats_.bytes_by_level[i] += f.size;
      stats_.source_bytes_by_level[i] += f.counted.source_bytes;
      if (pushed_left_.insert_or_assign(r.ino, f.size).second) {
        if (pushed_ring_.size() < kRecentReads) {
          pushed_ring_.push_back(r.ino);
        } else {
          pushed_left_.erase(pushed_ring_[pushed_next_]);
          pushed_ring_[pushed_next_] = r.ino;
          pushed_next_ = (pushed_next_ + 1) % kRecentReads;
        }
      }
    }
    return;
  }
  committed_bytes_ -= f.size;
  if (rc == -ENOENT) {
    ++stats_.unknown;
  } else {
    ++stats_.failed;
  }
}

PagePusher::Stats PagePusher::stats() const {
  MutexLock l(&mu_);
  return stats_;
}

std::string PagePusher::Describe() const {
  if (!enabled_) return "pushed to the page cache: off";
  const Stats s = stats();
  return "pushed to the page cache: " + std::to_string(s.pushed) + " files (" +
         std::to_string((s.pushed_bytes + (1 << 19)) >> 20) + " MiB of " +
         std::to_string(options_.budget_bytes >> 20) + " MiB); not known to the kernel " +
         std::to_string(s.unknown) + ", evicted before " + std::to_string(s.not_in_memory) +
         ", damaged " + std::to_string(s.damaged) + ", read first " + std::to_string(s.read_first) +
         ", over budget " + std::to_string(s.over_budget) + ", failed " + std::to_string(s.failed);
}

void PagePusher::Drain() {
  MutexLock l(&mu_);
  cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return stop_ || (arrivals_.empty() && !busy_); });
}

}  // namespace pcrfs::fs
