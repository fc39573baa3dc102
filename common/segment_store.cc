#include "common/segment_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs {
namespace {

constexpr char kLockFile[] = ".lock";

uint32_t Crc(const uint8_t* p, size_t n) { return crc32c::Mask(crc32c::Value(p, n)); }

// "SEQ.seg" / "SEQ.idx" (16 lowercase hex digits, 0 < SEQ < 2^32): the sequence number and
// extension if `name` is one of them.
bool ParseName(const char* name, uint32_t* seq, std::string* ext) {
  if (std::strlen(name) != 20 || name[16] != '.') return false;
  uint64_t s = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = name[i];
    if (c >= '0' && c <= '9') {
      s = s * 16 + static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      s = s * 16 + static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return false;
    }
  }
  *ext = name + 17;
  if ((*ext != "seg" && *ext != "idx") || s == 0 || s > UINT32_MAX) return false;
  *seq = static_cast<uint32_t>(s);
  return true;
}

}  // namespace

void SegmentStore::EncodeEntry(const Entry& e, uint8_t out[kEntryBytes]) {
  EncodeFixed64(out, e.key.a);
  EncodeFixed64(out + 8, e.where.offset);
  EncodeFixed32(out + 16, e.where.length);
  EncodeFixed32(out + 20, e.where.crc);
  EncodeFixed32(out + 24, e.key.b);
  EncodeFixed32(out + 28, Crc(out, 28));
}

std::vector<SegmentStore::Entry> SegmentStore::ParseIndex(std::span<const uint8_t> idx,
                                                          uint32_t seq, uint64_t data_size) {
  std::vector<Entry> out;
  for (size_t i = 0; i + kEntryBytes <= idx.size(); i += kEntryBytes) {
    const uint8_t* p = idx.data() + i;
    if (DecodeFixed32(p + 28) != Crc(p, 28)) continue;  // torn or damaged: skipped
    const uint64_t offset = DecodeFixed64(p + 8);
    const uint32_t length = DecodeFixed32(p + 16);
    if (offset > data_size || length > data_size - offset || offset > UINT32_MAX) continue;
    Entry e;
    e.key.a = DecodeFixed64(p);
    e.key.b = DecodeFixed32(p + 24);
    e.where = {seq, static_cast<uint32_t>(offset), length, DecodeFixed32(p + 20)};
    out.push_back(e);
  }
  return out;
}

Result<std::unique_ptr<SegmentStore>> SegmentStore::Open(
    const std::string& dir, uint64_t budget_bytes, const std::function<bool(const Entry&)>& adopt,
    uint64_t* removed) {
  // Private: the bytes of a private bucket are not for every local user.
  PCRFS_RETURN_ERR_IF_ERROR(MakePrivateDir(dir));
  auto fd = OpenFile(dir + "/" + kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (!fd) return Err(fd.error());
  if (::flock(fd->get(), LOCK_EX | LOCK_NB) != 0) return std::unique_ptr<SegmentStore>();
  std::unique_ptr<SegmentStore> store(new SegmentStore(dir, budget_bytes, std::move(*fd)));
  store->Adopt(adopt);
  if (removed != nullptr) *removed = store->stats().removed_files;
  return store;
}

SegmentStore::SegmentStore(std::string dir, uint64_t budget, UniqueFd lock)
    : dir_(std::move(dir)),
      budget_(budget),
      segment_bytes_(
          std::clamp(budget / 16, std::min(uint64_t{1} << 20, budget / 4), kSegmentBytes)),
      lock_(std::move(lock)) {
  MutexLock l(&mu_);
  stats_.budget = budget_;
}

std::string SegmentStore::SegmentPath(uint64_t seq, const char* ext) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016" PRIx64 ".%s", seq, ext);
  return dir_ + "/" + name;
}

void SegmentStore::Adopt(const std::function<bool(const Entry&)>& adopt) {
  std::vector<uint32_t> segs, idxs;
  std::vector<std::string> unlink;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  while (dirent* de = ::readdir(d)) {
    const std::string name = de->d_name;
    if (name == "." || name == ".." || name == kLockFile) continue;
    uint32_t seq = 0;
    std::string ext;
    if (ParseName(de->d_name, &seq, &ext)) {
      (ext == "seg" ? segs : idxs).push_back(seq);
    } else {
      unlink.push_back(dir_ + "/" + name);  // not ours: an older layout, a temporary file
    }
  }
  ::closedir(d);
  std::sort(segs.begin(), segs.end());
  std::sort(idxs.begin(), idxs.end());
  for (uint32_t seq : idxs) {  // an index without its segment
    if (!std::binary_search(segs.begin(), segs.end(), seq)) {
      unlink.push_back(SegmentPath(seq, "idx"));
    }
  }
  MutexLock l(&mu_);
  for (uint32_t seq : segs) {
    next_seq_ = std::max<uint64_t>(next_seq_, uint64_t{seq} + 1);
    const std::string data_path = SegmentPath(seq, "seg"), idx_path = SegmentPath(seq, "idx");
    auto data = OpenFile(data_path, O_RDONLY | O_CLOEXEC);
    auto idx = OpenFile(idx_path, O_RDONLY | O_CLOEXEC);
    struct stat ds, is;
    if (!data || !idx || ::fstat(data->get(), &ds) != 0 || ::fstat(idx->get(), &is) != 0 ||
        !S_ISREG(ds.st_mode) || !S_ISREG(is.st_mode)) {
      unlink.push_back(data_path);
      unlink.push_back(idx_path);
      continue;
    }
    Segment seg;
    seg.data_end = static_cast<uint64_t>(ds.st_size);
    seg.idx_end = static_cast<uint64_t>(is.st_size);
    seg.data = std::make_shared<const UniqueFd>(std::move(*data));
    seg.idx = std::make_shared<const UniqueFd>(std::move(*idx));
    used_ += seg.data_end + seg.idx_end;
    segments_.emplace(seq, std::move(seg));
  }
  stats_.removed_files = unlink.size();
  std::vector<Segment> gone;
  std::vector<uint32_t> gone_seqs;
  EvictLocked(0, &gone, &gone_seqs);
  for (uint32_t seq : gone_seqs) {
    unlink.push_back(SegmentPath(seq, "seg"));
    unlink.push_back(SegmentPath(seq, "idx"));
  }
  // Newest first: a later entry of a key, or of overlapping bytes, wins.
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) {
    Segment& seg = it->second;
    // 32 bytes per entry: a million entries are 32 MB, read once per Open.
    auto bytes = ReadWholeFd(seg.idx->get(), uint64_t{1} << 32, SegmentPath(it->first, "idx"));
    if (!bytes) {
      seg.dead = seg.data_end;  // unreadable: nothing in it is used
      continue;
    }
    std::vector<Entry> entries = ParseIndex(*bytes, it->first, seg.data_end);
    uint64_t live = 0;
    for (auto e = entries.rbegin(); e != entries.rend(); ++e) {
      if (adopt(*e)) {
        live += e->where.length;
        ++stats_.adopted;
      }
    }
    seg.dead = seg.data_end - std::min(seg.data_end, live);
  }
  l.Unlock();
  for (const auto& p : unlink) ::unlink(p.c_str());
}

void SegmentStore::EvictLocked(uint32_t keep, std::vector<Segment>* gone,
                               std::vector<uint32_t>* seqs,
                               const std::map<uint32_t, uint64_t>* spare) {
  while (used_ > budget_ && !segments_.empty()) {
    // The oldest segment, or with `spare`, the one the owner needs least (the fewest bytes it
    // still wants: the oldest among equals); never `keep`, the segment being written.
    auto it = segments_.end();
    uint64_t least = UINT64_MAX;
    for (auto s = segments_.begin(); s != segments_.end(); ++s) {
      if (s->first == keep) continue;
      uint64_t wanted = 0;
      if (spare != nullptr) {
        auto w = spare->find(s->first);
        if (w != spare->end()) wanted = w->second;
      }
      if (wanted < least) {
        least = wanted;
        it = s;
      }
      if (wanted == 0) break;  // nothing older can be needed less
    }
    if (it == segments_.end()) break;
    used_ -= it->second.data_end + it->second.idx_end;
    ++stats_.evicted_segments;
    if (current_ == it->first) current_ = 0;
    seqs->push_back(it->first);
    gone->push_back(std::move(it->second));
    segments_.erase(it);
  }
}

size_t SegmentStore::Dispose(std::vector<Segment>& gone, const std::vector<uint32_t>& seqs,
                             std::vector<Entry>* evicted) const {
  size_t entries_found = 0;
  for (size_t i = 0; i < gone.size(); ++i) {
    const uint32_t seq = seqs[i];
    // What this process wrote or adopted: entries not yet written fail their CRC and are not
    // the owner's either (their Append finds the segment gone).
    std::vector<uint8_t> idx(static_cast<size_t>(gone[i].idx_end));
    size_t got = 0;
    while (got < idx.size()) {  // the tail may be short: entries still being written
      const ssize_t r =
          ::pread(gone[i].idx->get(), idx.data() + got, idx.size() - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    idx.resize(got);
    {
      auto entries = ParseIndex(idx, seq, gone[i].data_end);
      entries_found += entries.size();
      if (evicted != nullptr) evicted->insert(evicted->end(), entries.begin(), entries.end());
    }
    ::unlink(SegmentPath(seq, "seg").c_str());
    ::unlink(SegmentPath(seq, "idx").c_str());
  }
  return entries_found;
}

std::optional<SegmentStore::Location> SegmentStore::Append(
    Key key, std::span<const uint8_t> bytes, std::vector<Entry>* evicted,
    const std::map<uint32_t, uint64_t>* spare) {
  if (bytes.size() > UINT32_MAX || bytes.size() + kEntryBytes > budget_) return std::nullopt;
  Location w{0, 0, static_cast<uint32_t>(bytes.size()), Crc(bytes.data(), bytes.size())};
  std::shared_ptr<const UniqueFd> data, idx;
  uint64_t idx_offset = 0;
  {
    MutexLock l(&mu_);
    auto cur = segments_.find(current_);
    // Full: its bytes and index together (tiny entries would make a large index otherwise).
    if (cur == segments_.end() ||
        (cur->second.data_end > 0 &&
         cur->second.data_end + cur->second.idx_end + bytes.size() + kEntryBytes >
             segment_bytes_)) {
      if (next_seq_ > UINT32_MAX) return std::nullopt;
      const uint32_t seq = static_cast<uint32_t>(next_seq_++);
      // Creating two files under the lock: once per segment_bytes_ of entries.
      auto d = OpenFile(SegmentPath(seq, "seg"), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      auto i = OpenFile(SegmentPath(seq, "idx"), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (!d || !i) {
        ::unlink(SegmentPath(seq, "seg").c_str());
        ::unlink(SegmentPath(seq, "idx").c_str());
        return std::nullopt;
      }
      Segment seg;
      seg.data = std::make_shared<const UniqueFd>(std::move(*d));
      seg.idx = std::make_shared<const UniqueFd>(std::move(*i));
      cur = segments_.emplace(seq, std::move(seg)).first;
      current_ = seq;
    }
    Segment& seg = cur->second;
    w.seq = cur->first;
    w.offset = static_cast<uint32_t>(seg.data_end);
    idx_offset = seg.idx_end;
    seg.data_end += bytes.size();
    seg.idx_end += kEntryBytes;
    used_ += bytes.size() + kEntryBytes;
    data = seg.data;
    idx = seg.idx;
  }
  uint8_t entry[kEntryBytes] = {};
  EncodeEntry({key, w}, entry);
  // The bytes before their entry: a crash between the two leaves bytes no entry names.
  Status s = PwriteFull(data->get(), bytes.data(), bytes.size(), w.offset, dir_);
  if (s.ok()) s = PwriteFull(idx->get(), entry, sizeof entry, idx_offset, dir_);
  std::vector<Segment> gone;
  std::vector<uint32_t> seqs;
  bool kept = false;
  {
    MutexLock l(&mu_);
    // A full disk: the reserved space stays a hole (its entry, if any, fails its CRC at the
    // next Open), counted dead.
    auto seg = segments_.find(w.seq);
    if (seg != segments_.end()) {
      if (s.ok()) {
        kept = true;
        ++stats_.written;
        stats_.written_bytes += bytes.size();
      } else {
        seg->second.dead += bytes.size();
      }
    }
    EvictLocked(current_, &gone, &seqs, spare);
  }
  if (!gone.empty()) {
    const size_t n = Dispose(gone, seqs, evicted);
    MutexLock l(&mu_);
    stats_.evicted_entries += n;
  }
  if (!kept) return std::nullopt;
  return w;
}

Status SegmentStore::Read(const Location& where, uint64_t from, uint64_t n, uint8_t* dst) const {
  if (from > where.length || n > where.length - from) {
    return Status::InvalidArgument(dir_ + ": read outside an entry");
  }
  std::shared_ptr<const UniqueFd> fd;
  {
    MutexLock l(&mu_);
    auto seg = segments_.find(where.seq);
    if (seg == segments_.end()) return Status::NotFound(dir_ + ": segment evicted");
    fd = seg->second.data;  // stays readable if the segment is evicted meanwhile
  }
  std::vector<uint8_t> whole;
  uint8_t* buf = dst;
  if (n != where.length) {
    whole.resize(where.length);
    buf = whole.data();
  }
  Status s = PreadFull(fd->get(), buf, where.length, where.offset, SegmentPath(where.seq, "seg"));
  if (s.ok() && Crc(buf, where.length) != where.crc) {
    s = Status::Corruption(SegmentPath(where.seq, "seg") + ": an entry's bytes fail their CRC");
  }
  if (!s.ok()) {
    if (s.code() == Status::Code::kCorruption) {
      MutexLock l(&mu_);
      ++stats_.damaged;
    }
    return s;
  }
  if (buf != dst && n > 0) std::memcpy(dst, buf + from, static_cast<size_t>(n));
  return Status::OK();
}

bool SegmentStore::Contains(uint32_t seq) const {
  MutexLock l(&mu_);
  return segments_.count(seq) > 0;
}

void SegmentStore::Forget(const Location& where) {
  MutexLock l(&mu_);
  auto seg = segments_.find(where.seq);
  if (seg != segments_.end()) seg->second.dead += where.length;
}

SegmentStore::Stats SegmentStore::stats() const {
  MutexLock l(&mu_);
  Stats s = stats_;
  s.segments = segments_.size();
  s.bytes = used_;
  for (const auto& [seq, seg] : segments_) s.dead_bytes += std::min(seg.dead, seg.data_end);
  return s;
}

}  // namespace pcrfs
