#include "fs/baseline_disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs::fs {
namespace {

constexpr char kLockFile[] = ".lock";

uint32_t Crc(const uint8_t* p, size_t n) { return crc32c::Mask(crc32c::Value(p, n)); }

// "SEQ.seg" / "SEQ.idx": true and the sequence number if `name` is one of them.
bool ParseName(const char* name, const char* ext, uint64_t* seq) {
  unsigned long long s = 0;
  int used = 0;
  char e[4] = {};
  if (std::sscanf(name, "%16llx.%3s%n", &s, e, &used) != 2) return false;
  if (name[used] != '\0' || std::string(e) != ext || s == 0 || used != 20) return false;
  *seq = s;
  return true;
}

}  // namespace

Result<std::unique_ptr<BaselineDiskCache>> BaselineDiskCache::Open(const std::string& dir,
                                                                   uint64_t budget_bytes,
                                                                   std::string* note) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Err(
        Status::IOError(dir + ": cannot create the baseline disk cache folder: " + ec.message()));
  }
  auto fd = OpenFile(dir + "/" + kLockFile, O_RDWR | O_CREAT | O_CLOEXEC);
  if (!fd) return Err(fd.error());
  if (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) {
    if (note != nullptr) {
      *note = dir +
              ": the disk cache is in use by another pcrfs process; this mount keeps its "
              "baseline files in memory only (give each mount its own -o cache_dir)";
    }
    return std::unique_ptr<BaselineDiskCache>();
  }
  std::unique_ptr<BaselineDiskCache> cache(
      new BaselineDiskCache(dir, budget_bytes, std::move(*fd)));
  cache->Adopt();
  return cache;
}

BaselineDiskCache::BaselineDiskCache(std::string dir, uint64_t budget, UniqueFd lock)
    : dir_(std::move(dir)),
      budget_(budget),
      segment_bytes_(std::clamp(budget / 16, uint64_t{1} << 20, kSegmentBytes)),
      lock_(std::move(lock)) {
  MutexLock l(&mu_);
  stats_.budget = budget_;
}

std::string BaselineDiskCache::SegmentPath(uint64_t seq, const char* ext) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016" PRIx64 ".%s", seq, ext);
  return dir_ + "/" + name;
}

void BaselineDiskCache::Adopt() {
  std::vector<uint64_t> seqs;
  std::vector<std::string> unlink;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  while (dirent* de = ::readdir(d)) {
    if (de->d_name[0] == '.') continue;
    uint64_t seq = 0;
    if (ParseName(de->d_name, "seg", &seq)) {
      seqs.push_back(seq);
    } else if (!ParseName(de->d_name, "idx", &seq)) {
      unlink.push_back(dir_ + "/" + de->d_name);  // not ours (or a stray): gone
    }
  }
  ::closedir(d);
  std::sort(seqs.begin(), seqs.end());
  MutexLock l(&mu_);
  for (uint64_t seq : seqs) {
    next_seq_ = std::max(next_seq_, seq + 1);
    const std::string data_path = SegmentPath(seq, "seg"), idx_path = SegmentPath(seq, "idx");
    auto data = OpenFile(data_path, O_RDONLY | O_CLOEXEC);
    auto idx = OpenFile(idx_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (!data || !idx || ::fstat(data->get(), &st) != 0) {
      unlink.push_back(data_path);
      unlink.push_back(idx_path);
      continue;
    }
    const uint64_t data_size = static_cast<uint64_t>(st.st_size);
    // 32 bytes per file: a million files are 32 MB, read once per mount.
    auto entries = ReadWholeFd(idx->get(), uint64_t{1} << 32, idx_path);
    if (!entries) {
      unlink.push_back(data_path);
      unlink.push_back(idx_path);
      continue;
    }
    Segment seg;
    seg.data_end = data_size;
    seg.idx_end = entries->size();
    for (size_t i = 0; i + kEntryBytes <= entries->size(); i += kEntryBytes) {
      const uint8_t* p = entries->data() + i;
      if (DecodeFixed32(p + 28) != Crc(p, 28)) continue;  // torn or damaged: skipped
      Where w{seq, DecodeFixed64(p + 8), DecodeFixed32(p + 16), DecodeFixed32(p + 20)};
      if (w.offset > data_size || w.length > data_size - w.offset) continue;
      const uint64_t key = DecodeFixed64(p);
      files_.insert_or_assign(key, w);
      seg.keys.push_back(key);
    }
    seg.data = std::make_shared<const UniqueFd>(std::move(*data));
    seg.idx = std::make_shared<const UniqueFd>(std::move(*idx));
    used_ += seg.data_end + seg.idx_end;
    segments_.emplace(seq, std::move(seg));
  }
  EvictLocked(0, &unlink);
  // A file may be superseded by a later segment's entry of the same key: counted once.
  stats_.adopted = files_.size();
  l.Unlock();
  for (const auto& p : unlink) ::unlink(p.c_str());
}

void BaselineDiskCache::ForgetSegmentLocked(std::map<uint64_t, Segment>::iterator it,
                                            std::vector<std::string>* unlink) {
  const uint64_t seq = it->first;
  for (uint64_t key : it->second.keys) {
    auto f = files_.find(key);
    if (f != files_.end() && f->second.seq == seq) {
      files_.erase(f);
      ++stats_.evicted_files;
    }
  }
  used_ -= it->second.data_end + it->second.idx_end;
  ++stats_.evicted_segments;
  unlink->push_back(SegmentPath(seq, "seg"));
  unlink->push_back(SegmentPath(seq, "idx"));
  if (current_ == seq) current_ = 0;
  segments_.erase(it);
}

void BaselineDiskCache::EvictLocked(uint64_t keep, std::vector<std::string>* unlink) {
  while (used_ > budget_ && !segments_.empty() && segments_.begin()->first != keep) {
    ForgetSegmentLocked(segments_.begin(), unlink);
  }
}

std::optional<uint64_t> BaselineDiskCache::Size(uint64_t key) const {
  MutexLock l(&mu_);
  auto it = files_.find(key);
  if (it == files_.end()) return std::nullopt;
  return it->second.length;
}

BaselineDiskCache::Bytes BaselineDiskCache::Get(uint64_t key) {
  Where w;
  std::shared_ptr<const UniqueFd> fd;
  {
    MutexLock l(&mu_);
    auto it = files_.find(key);
    auto seg = it == files_.end() ? segments_.end() : segments_.find(it->second.seq);
    if (seg == segments_.end()) {
      ++stats_.misses;
      return nullptr;
    }
    w = it->second;
    fd = seg->second.data;  // stays readable if the segment is evicted meanwhile
  }
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.length);
  const Status s = PreadFull(fd->get(), bytes->data(), w.length, w.offset, dir_);
  MutexLock l(&mu_);
  if (!s.ok() || Crc(bytes->data(), bytes->size()) != w.crc) {
    auto it = files_.find(key);
    if (it != files_.end() && it->second.seq == w.seq && it->second.offset == w.offset) {
      files_.erase(it);
    }
    ++stats_.damaged;
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  return bytes;
}

void BaselineDiskCache::Put(uint64_t key, const std::vector<uint8_t>& bytes) {
  if (bytes.size() > UINT32_MAX) return;
  std::vector<std::string> unlink;
  Where w{0, 0, static_cast<uint32_t>(bytes.size()), Crc(bytes.data(), bytes.size())};
  std::shared_ptr<const UniqueFd> data, idx;
  uint64_t idx_offset = 0;
  {
    MutexLock l(&mu_);
    if (files_.count(key)) return;
    auto cur = segments_.find(current_);
    if (cur == segments_.end() ||
        (cur->second.data_end > 0 && cur->second.data_end + bytes.size() > segment_bytes_)) {
      const uint64_t seq = next_seq_++;
      // Creating two files under the lock: once per segment_bytes_ of files.
      auto d = OpenFile(SegmentPath(seq, "seg"), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      auto i = OpenFile(SegmentPath(seq, "idx"), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (!d || !i) {
        ::unlink(SegmentPath(seq, "seg").c_str());
        ::unlink(SegmentPath(seq, "idx").c_str());
        return;
      }
      Segment seg;
      seg.data = std::make_shared<const UniqueFd>(std::move(*d));
      seg.idx = std::make_shared<const UniqueFd>(std::move(*i));
      cur = segments_.emplace(seq, std::move(seg)).first;
      current_ = seq;
    }
    Segment& seg = cur->second;
    w.seq = cur->first;
    w.offset = seg.data_end;
    idx_offset = seg.idx_end;
    seg.data_end += bytes.size();
    seg.idx_end += kEntryBytes;
    used_ += bytes.size() + kEntryBytes;
    data = seg.data;
    idx = seg.idx;
  }
  uint8_t entry[kEntryBytes] = {};
  EncodeFixed64(entry, key);
  EncodeFixed64(entry + 8, w.offset);
  EncodeFixed32(entry + 16, w.length);
  EncodeFixed32(entry + 20, w.crc);
  EncodeFixed32(entry + 28, Crc(entry, 28));
  // The bytes before their entry: a crash between the two leaves bytes no entry names.
  Status s = PwriteFull(data->get(), bytes.data(), bytes.size(), w.offset, dir_);
  if (s.ok()) s = PwriteFull(idx->get(), entry, sizeof entry, idx_offset, dir_);
  MutexLock l(&mu_);
  // A full disk: the reserved space stays a hole (its entry, if any, fails its CRC at the next
  // open); the file is kept in memory only.
  if (!s.ok()) return;
  auto seg = segments_.find(w.seq);
  if (seg == segments_.end()) return;  // evicted meanwhile
  seg->second.keys.push_back(key);
  files_.emplace(key, w);
  ++stats_.written;
  stats_.written_bytes += bytes.size();
  EvictLocked(current_, &unlink);
  l.Unlock();
  for (const auto& p : unlink) ::unlink(p.c_str());
}

BaselineDiskCache::Stats BaselineDiskCache::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.files = files_.size();
  s.bytes = used_;
  return s;
}

}  // namespace pcrfs::fs
