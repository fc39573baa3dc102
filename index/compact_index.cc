// Index format 4 (index/compact_index.h; docs/format.md, "Index file (index.pcri)").
#include "index/compact_index.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/lmdb_util.h"

namespace pcrfs::index {
namespace {

std::string U(uint64_t v) { return std::to_string(v); }

uint64_t ZigZag(uint64_t delta) {  // delta: a two's complement difference
  return (delta << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(delta) >> 63);
}
uint64_t UnZigZag(uint64_t v) { return (v >> 1) ^ (~(v & 1) + 1); }

// Shortest-form varints only.
bool GetVarint(Decoder* d, uint64_t* v) { return d->GetShortestVarint64(v); }

// Entry flags (the first byte of an encoded entry).
constexpr uint8_t kKindMask = 0x03;
constexpr uint8_t kSameMode = 0x04;
constexpr uint8_t kSameMtime = 0x08;
constexpr uint8_t kSameParent = 0x10;
constexpr uint8_t kZeroNsec = 0x20;
constexpr uint8_t kHasReason = 0x40;
constexpr uint8_t kReservedFlag = 0x80;

// What an entry is coded against: the previous entry, or zeros at a restart point.
struct DeltaState {
  uint32_t mode = 0;
  int64_t mtime_sec = 0;
  uint64_t parent = 0;
  std::string name;
  uint64_t next_child = 0;  // first_child + num_children of the previous directory
  uint64_t record = 0;
  uint64_t next_slot = 0;  // the previous file's slot + 1
};

void EncodeCompactEntry(const Entry& e, DeltaState* st, std::string* out) {
  uint8_t flags = static_cast<uint8_t>(e.kind) & kKindMask;
  if (e.mode == st->mode) flags |= kSameMode;
  if (e.mtime_sec == st->mtime_sec) flags |= kSameMtime;
  if (e.parent == st->parent) flags |= kSameParent;
  if (e.mtime_nsec == 0) flags |= kZeroNsec;
  if (e.passthrough_reason != PassthroughReason::kNone) flags |= kHasReason;
  out->push_back(static_cast<char>(flags));
  if (flags & kHasReason) out->push_back(static_cast<char>(e.passthrough_reason));
  if (!(flags & kSameMode)) PutVarint64(out, e.mode);
  if (!(flags & kSameMtime)) {
    PutVarint64(out,
                ZigZag(static_cast<uint64_t>(e.mtime_sec) - static_cast<uint64_t>(st->mtime_sec)));
  }
  if (!(flags & kZeroNsec)) PutVarint64(out, e.mtime_nsec);
  if (!(flags & kSameParent)) PutVarint64(out, ZigZag(e.parent - st->parent));
  size_t shared = 0;
  const size_t max_shared = std::min(e.name.size(), st->name.size());
  while (shared < max_shared && e.name[shared] == st->name[shared]) ++shared;
  PutVarint64(out, shared);
  PutLengthPrefixed(out, std::string_view(e.name).substr(shared));
  if (e.is_dir()) {
    PutVarint64(out, ZigZag(e.first_child - st->next_child));
    PutVarint64(out, e.num_children);
    PutVarint64(out, e.num_subdirs);
    st->next_child = e.first_child + e.num_children;
  } else {
    PutVarint64(out, e.source_size);
    PutVarint64(out, ZigZag(uint64_t{e.record} - st->record));
    PutVarint64(out, ZigZag(uint64_t{e.slot} - st->next_slot));
    for (const PieceRef& p : e.pieces) PutVarint64(out, p.length);
    st->record = e.record;
    st->next_slot = uint64_t{e.slot} + 1;
  }
  st->mode = e.mode;
  st->mtime_sec = e.mtime_sec;
  st->parent = e.parent;
  st->name = e.name;
}

// Decodes one entry coded against *st and updates it. Checks what one entry alone can break
// (the same rules as DecodeEntry); *what says what is wrong on false.
bool DecodeCompactEntry(Decoder* d, DeltaState* st, uint64_t ino, Entry* e, std::string* what) {
  *e = Entry();
  e->ino = ino;
  e->resolved_groups = 0;
  uint8_t flags = 0;
  uint64_t v = 0;
  auto fail = [&](const char* w) {
    *what = "entry " + U(ino) + ": " + w;
    return false;
  };
  if (!d->GetByte(&flags)) return fail("truncated");
  const uint8_t kind = flags & kKindMask;
  if (kind == 0) return fail("unknown kind 0");
  if (flags & kReservedFlag) return fail("reserved flag set");
  e->kind = static_cast<EntryKind>(kind);
  if (flags & kHasReason) {
    uint8_t reason = 0;
    if (!d->GetByte(&reason)) return fail("truncated");
    if (reason == 0) return fail("passthrough reason flag with reason 0");
    if (e->kind != EntryKind::kPassthrough) return fail("passthrough reason on a non-passthrough");
    e->passthrough_reason = static_cast<PassthroughReason>(reason);
  }
  if (flags & kSameMode) {
    e->mode = st->mode;
  } else {
    if (!GetVarint(d, &v)) return fail("truncated mode");
    if (v > 07777) return fail("mode out of range");
    e->mode = static_cast<uint32_t>(v);
  }
  if (flags & kSameMtime) {
    e->mtime_sec = st->mtime_sec;
  } else {
    if (!GetVarint(d, &v)) return fail("truncated mtime");
    e->mtime_sec = static_cast<int64_t>(static_cast<uint64_t>(st->mtime_sec) + UnZigZag(v));
  }
  if (!(flags & kZeroNsec)) {
    if (!GetVarint(d, &v)) return fail("truncated mtime");
    if (v == 0 || v >= 1000000000) return fail("mtime nanoseconds out of range");
    e->mtime_nsec = static_cast<uint32_t>(v);
  }
  if (flags & kSameParent) {
    e->parent = st->parent;
  } else {
    if (!GetVarint(d, &v)) return fail("truncated parent");
    e->parent = st->parent + UnZigZag(v);
  }
  uint64_t shared = 0;
  std::string_view suffix;
  if (!GetVarint(d, &shared) || !d->GetLengthPrefixed(&suffix)) return fail("truncated name");
  if (shared > st->name.size()) return fail("name shares more than the previous name holds");
  if (shared + suffix.size() > 255) return fail("name longer than 255 bytes");
  e->name.reserve(static_cast<size_t>(shared) + suffix.size());
  e->name.assign(st->name, 0, static_cast<size_t>(shared));
  e->name.append(suffix);
  if (ino == kRootIno) {
    if (!e->name.empty() || e->parent != kRootIno || !e->is_dir()) {
      return fail("the root must be a directory, unnamed, its own parent");
    }
  } else {
    if (e->parent == 0 || e->parent >= ino) return fail("bad parent");
    if (!IsValidName(e->name)) return fail("invalid name");
  }
  if (e->is_dir()) {
    if (!GetVarint(d, &v) || !GetVarint(d, &e->num_children) || !GetVarint(d, &e->num_subdirs)) {
      return fail("truncated directory fields");
    }
    e->first_child = st->next_child + UnZigZag(v);
    if (e->num_subdirs > e->num_children) return fail("more subdirectories than children");
    if (e->num_children > 0 &&
        (e->first_child <= ino || e->first_child + e->num_children < e->first_child)) {
      return fail("child range out of bounds");
    }
    st->next_child = e->first_child + e->num_children;
  } else {
    uint64_t record = 0, slot = 0;
    if (!GetVarint(d, &e->source_size) || !GetVarint(d, &record) || !GetVarint(d, &slot)) {
      return fail("truncated file fields");
    }
    record = st->record + UnZigZag(record);
    slot = st->next_slot + UnZigZag(slot);
    if (record > UINT32_MAX || slot > UINT32_MAX) return fail("record or slot out of range");
    e->record = static_cast<uint32_t>(record);
    e->slot = static_cast<uint32_t>(slot);
    uint64_t total = 2;
    for (int g = 0; g < kNumGroups; ++g) {
      PieceRef& p = e->pieces[static_cast<size_t>(g)];
      if (!GetVarint(d, &p.length)) return fail("truncated piece lengths");
      if (e->kind == EntryKind::kPassthrough && g > 0 && p.length != 0) {
        return fail("passthrough file with data beyond group 1");
      }
      if (total + p.length < total) return fail("piece lengths overflow");
      total += p.length;
    }
    st->record = record;
    st->next_slot = slot + 1;
  }
  st->mode = e->mode;
  st->mtime_sec = e->mtime_sec;
  st->parent = e->parent;
  st->name = e->name;
  return true;
}

// Compresses when it pays.
void Compress(std::string_view raw, int level, CompactCodec* codec, std::string* out) {
  if (level == 0) {
    *codec = CompactCodec::kNone;
    *out = std::string(raw);
    return;
  }
  std::string z(ZSTD_compressBound(raw.size()), '\0');
  const size_t n = ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), level);
  if (!ZSTD_isError(n) && n < raw.size()) {
    z.resize(n);
    *codec = CompactCodec::kZstd;
    *out = std::move(z);
  } else {
    *codec = CompactCodec::kNone;
    *out = std::string(raw);
  }
}

// Stored bytes -> raw bytes, exactly raw_length of them, or false.
bool Decompress(std::span<const uint8_t> stored, uint8_t codec, uint64_t raw_length,
                std::string* raw, std::string* what) {
  if (codec == static_cast<uint8_t>(CompactCodec::kNone)) {
    if (raw_length != stored.size()) {
      *what = "raw length differs from stored length of an uncompressed part";
      return false;
    }
    raw->assign(reinterpret_cast<const char*>(stored.data()), stored.size());
    return true;
  }
  if (codec != static_cast<uint8_t>(CompactCodec::kZstd)) {
    *what = "unknown codec " + U(codec);
    return false;
  }
  // The frame says how large it is: a size that disagrees is refused before anything is
  // allocated for it (a few bytes must not make the reader zero-fill gigabytes).
  const unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content != raw_length) {
    *what = content == ZSTD_CONTENTSIZE_ERROR ? std::string("zstd: not a frame")
            : content == ZSTD_CONTENTSIZE_UNKNOWN
                ? std::string("zstd: frame without its size")
                : "frame holds " + U(content) + " bytes, expected " + U(raw_length);
    return false;
  }
  raw->resize(static_cast<size_t>(raw_length));
  const size_t n = ZSTD_decompress(raw->data(), raw->size(), stored.data(), stored.size());
  if (ZSTD_isError(n) || n != raw_length) {
    *what = ZSTD_isError(n) ? std::string("zstd: ") + ZSTD_getErrorName(n)
                            : "decompressed to " + U(n) + " bytes, expected " + U(raw_length);
    return false;
  }
  return true;
}

// A compressed part may expand at most this much (a real index: 2 to 10 times).
constexpr uint64_t kMaxExpansion = 256;
// The longest entry: 1 + 1 + 3 varints + length-prefixed name + 3 or 13 varints.
constexpr uint64_t kMaxEntryBytes = 2 + 3 * 10 + 10 + 2 + 255 + 13 * 10;
constexpr uint64_t kMaxMetaBytes = 16 << 20;
constexpr size_t kRecordInfoSize = 108;

uint64_t BlockKey(uint64_t ino, int group) { return (ino << 4) | static_cast<uint64_t>(group); }

// The checks of ParseEntries that span entries (docs/format.md, "What a reader of index.pcri
// checks"): tree shape, sibling order, record slots used once, pieces that fill their
// regions. Fed every entry in inode order (Add), then asked about the whole (Finish); each
// returns false with *what set at the first problem.
class EntryChecks {
 public:
  EntryChecks(const std::vector<RecordInfo>& records, uint64_t num_entries)
      : records_(records),
        num_entries_(num_entries),
        sums_(records.size()),
        files_in_(records.size()) {}

  // Entry `ino`; the pieces long enough to have block CRCs go to *large (BlockKey, length).
  bool Add(uint64_t ino, const Entry& e, std::vector<std::pair<uint64_t, uint64_t>>* large,
           std::string* what) {
    const std::string at = "entry " + U(ino) + " \"" + e.name + "\": ";
    if (!AddToTree(ino, e, what) || (!e.is_dir() && !AddFile(ino, e, large, what))) {
      *what = at + *what;
      return false;
    }
    prev_name_ = e.name;
    prev_parent_ = e.parent;
    return true;
  }

  bool Finish(std::string* what) const {
    for (const DirInfo& di : dirs_) {
      if (di.seen_children != di.num_children || di.seen_subdirs != di.num_subdirs) {
        *what = "directory " + U(di.ino) + ": child counts do not match its children";
        return false;
      }
    }
    std::vector<uint64_t> slots = slots_;
    std::sort(slots.begin(), slots.end());
    auto dup = std::adjacent_find(slots.begin(), slots.end());
    if (dup != slots.end()) {
      *what =
          "record " + U(*dup >> 32) + " slot " + U(*dup & 0xffffffffu) + " is used by two files";
      return false;
    }
    for (size_t r = 0; r < records_.size(); ++r) {
      if (files_in_[r] != records_[r].num_images) continue;
      for (size_t g = 0; g < static_cast<size_t>(kNumGroups); ++g) {
        if (sums_[r][g] != records_[r].group_offset[g + 1] - records_[r].group_offset[g]) {
          *what =
              "record " + U(r) + ": the pieces of group " + U(g + 1) + " do not fill its region";
          return false;
        }
      }
    }
    return true;
  }

 private:
  struct DirInfo {
    uint64_t ino, first_child, num_children, num_subdirs;
    uint64_t seen_children = 0, seen_subdirs = 0;
  };

  // Its place in the tree: a child range inside the index, a parent that is a directory whose
  // range holds it, names strictly increasing among siblings.
  bool AddToTree(uint64_t ino, const Entry& e, std::string* what) {
    if (e.is_dir()) {
      if (e.num_children > 0 && e.first_child + e.num_children - 1 > num_entries_) {
        *what = "child range past the last entry";
        return false;
      }
      dirs_.push_back({ino, e.first_child, e.num_children, e.num_subdirs});
    }
    if (ino == kRootIno) return true;
    auto p = std::lower_bound(dirs_.begin(), dirs_.end(), e.parent,
                              [](const DirInfo& x, uint64_t v) { return x.ino < v; });
    if (p == dirs_.end() || p->ino != e.parent) {
      *what = "parent is not a directory";
      return false;
    }
    if (ino < p->first_child || ino - p->first_child >= p->num_children) {
      *what = "not in its parent's child range";
      return false;
    }
    // The previous entry is the previous sibling.
    if (ino > p->first_child && (prev_parent_ != e.parent || !(prev_name_ < e.name))) {
      *what = "names not strictly increasing in directory " + U(e.parent);
      return false;
    }
    ++p->seen_children;
    if (e.is_dir()) ++p->seen_subdirs;
    return true;
  }

  // A file: a known record and slot, pieces inside what is left of their group regions.
  bool AddFile(uint64_t ino, const Entry& e, std::vector<std::pair<uint64_t, uint64_t>>* large,
               std::string* what) {
    if (e.record >= records_.size()) {
      *what = "record " + U(e.record) + " unknown";
      return false;
    }
    const RecordInfo& r = records_[e.record];
    if (e.slot >= r.num_images) {
      *what = "slot " + U(e.slot) + " past its record";
      return false;
    }
    slots_.push_back((uint64_t{e.record} << 32) | e.slot);
    ++files_in_[e.record];
    for (int g = 0; g < kNumGroups; ++g) {
      const uint64_t len = e.pieces[static_cast<size_t>(g)].length;
      uint64_t& s = sums_[e.record][static_cast<size_t>(g)];
      const uint64_t region =
          r.group_offset[static_cast<size_t>(g) + 1] - r.group_offset[static_cast<size_t>(g)];
      if (len > region - s) {
        *what = "pieces of group " + U(static_cast<uint64_t>(g) + 1) +
                " overflow the region of record " + U(e.record);
        return false;
      }
      s += len;
      if (HasBlockCrcs(len)) large->emplace_back(BlockKey(ino, g + 1), len);
    }
    return true;
  }

  const std::vector<RecordInfo>& records_;
  const uint64_t num_entries_;
  std::vector<DirInfo> dirs_;                           // in inode order
  std::vector<uint64_t> slots_;                         // record << 32 | slot of every file
  std::vector<std::array<uint64_t, kNumGroups>> sums_;  // by record, group: piece bytes so far
  std::vector<uint64_t> files_in_;                      // by record
  std::string prev_name_;
  uint64_t prev_parent_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

struct CompactIndexWriter::Impl {
  std::string name;
  int level = 9;
  Status failed;
  bool finished = false;
  uint64_t num_entries = 0;
  DeltaState state;
  std::string chunk;  // raw entries of the chunk being filled
  uint64_t chunk_entries = 0;
  // The stored chunks, each its own string: no copy of them all when they grow (a string's
  // doubling holds the old and the new buffer at once), none at Finish.
  std::vector<std::string> entry_chunks;
  uint64_t entry_data_size = 0;
  std::string directory;
  std::string records;
  uint64_t num_records = 0;
  std::string blocks;
  uint64_t num_block_items = 0;
  uint64_t last_block_key = 0;
  std::map<std::string, std::string, std::less<>> meta;

  void FlushChunk() {
    if (chunk_entries == 0) return;
    CompactCodec codec;
    std::string stored;
    Compress(chunk, level, &codec, &stored);
    uint8_t e[kCompactChunkEntrySize] = {};
    EncodeFixed64(e, entry_data_size);
    EncodeFixed32(e + 8, static_cast<uint32_t>(stored.size()));
    EncodeFixed32(e + 12, static_cast<uint32_t>(chunk.size()));
    EncodeFixed32(e + 16, crc32c::Mask(crc32c::Value(stored.data(), stored.size())));
    e[20] = static_cast<uint8_t>(codec);
    directory.append(reinterpret_cast<const char*>(e), sizeof(e));
    entry_data_size += stored.size();
    stored.shrink_to_fit();  // Compress leaves it at ZSTD_compressBound: the raw size, ~3-15x
    entry_chunks.push_back(std::move(stored));
    chunk.clear();
    chunk_entries = 0;
  }
  Status Usable() const {
    if (!failed.ok()) return failed;
    if (finished) return Status::InvalidArgument(name + ": index already finished");
    return Status::OK();
  }
};

CompactIndexWriter::CompactIndexWriter(std::string name, int zstd_level)
    : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  impl_->level = std::clamp(zstd_level, 0, 19);
}
CompactIndexWriter::~CompactIndexWriter() = default;

Status CompactIndexWriter::AddEntry(const Entry& e) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  const std::string what = w.name + ": entry " + U(e.ino) + " \"" + e.name + "\"";
  if (e.ino != w.num_entries + 1) {
    return Status::InvalidArgument(what + ": inodes must be 1, 2, 3, ... (expected " +
                                   U(w.num_entries + 1) + ")");
  }
  if (w.num_entries % kCompactRestartInterval == 0) w.state = DeltaState();
  const size_t at = w.chunk.size();
  DeltaState before = w.state;
  EncodeCompactEntry(e, &w.state, &w.chunk);
  // Never write what a reader would refuse.
  Decoder d(std::string_view(w.chunk).substr(at));
  Entry back;
  std::string problem;
  if (!DecodeCompactEntry(&d, &before, e.ino, &back, &problem) || !d.done()) {
    w.failed = Status::InvalidArgument(w.name + ": " + (problem.empty() ? "bad entry" : problem));
    return w.failed;
  }
  ++w.num_entries;
  if (++w.chunk_entries == kCompactEntriesPerChunk) w.FlushChunk();
  return Status::OK();
}

Status CompactIndexWriter::AddBlockCrcs(uint64_t ino, int group, std::span<const uint32_t> masked) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  const uint64_t key = BlockKey(ino, group);
  if (ino == 0 || ino > w.num_entries || group < 1 || group > kNumGroups || masked.size() < 2 ||
      key <= w.last_block_key) {
    return Status::InvalidArgument(w.name + ": block CRCs of inode " + U(ino) + " group " +
                                   U(static_cast<uint64_t>(group)) +
                                   ": must follow their entry, in order, 2 or more blocks");
  }
  PutVarint64(&w.blocks, ino - (w.last_block_key >> 4));
  w.blocks.push_back(static_cast<char>(group));
  PutVarint64(&w.blocks, masked.size());
  for (uint32_t c : masked) PutFixed32(&w.blocks, c);
  w.last_block_key = key;
  ++w.num_block_items;
  return Status::OK();
}

Status CompactIndexWriter::AddRecord(const RecordInfo& r) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  if (r.id != w.num_records) {
    return Status::InvalidArgument(w.name + ": record " + U(r.id) +
                                   " added out of order (expected " + U(w.num_records) + ")");
  }
  const std::string v = lmdb::EncodeRecordInfo(r);
  auto check = lmdb::DecodeRecordInfo(r.id, v);
  if (!check) return Status::InvalidArgument(w.name + ": " + check.error().message());
  w.records += v;
  ++w.num_records;
  return Status::OK();
}

Status CompactIndexWriter::PutMeta(std::string_view key, std::string_view value) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.Usable());
  if (key.empty() || key.size() > 255) {
    return Status::InvalidArgument(w.name + ": meta key must be 1..255 bytes");
  }
  if (key == lmdb::kIndexFormatKey) {
    return Status::InvalidArgument(w.name + ": meta key \"" + std::string(key) + "\" is reserved");
  }
  w.meta[std::string(key)] = std::string(value);
  return Status::OK();
}

Result<std::string> CompactIndexWriter::Finish(std::unique_ptr<CompactIndex>* parsed) {
  Impl& w = *impl_;
  PCRFS_RETURN_ERR_IF_ERROR(w.Usable());
  w.FlushChunk();
  std::string meta_raw;
  PutVarint64(&meta_raw, w.meta.size());
  for (const auto& [k, v] : w.meta) {
    PutLengthPrefixed(&meta_raw, k);
    PutLengthPrefixed(&meta_raw, v);
  }
  std::string blocks_raw;
  PutVarint64(&blocks_raw, w.num_block_items);
  blocks_raw += w.blocks;

  struct Part {
    CompactSection kind;
    CompactCodec codec;
    std::vector<std::string> stored;  // its bytes, in pieces (the entry chunks)
    uint64_t raw_length;
    uint64_t size() const {
      uint64_t n = 0;
      for (const std::string& s : stored) n += s.size();
      return n;
    }
  };
  std::vector<Part> parts;
  // The sections are moved, not copied: the entry data (most of the index) is held once
  // before `out` and once in it.
  auto add = [&](CompactSection kind, std::string&& raw, bool compress) {
    Part p{kind, CompactCodec::kNone, {}, raw.size()};
    if (compress) {
      Compress(raw, w.level, &p.codec, &p.stored.emplace_back());
    } else {
      p.stored.push_back(std::move(raw));
    }
    raw = {};
    parts.push_back(std::move(p));
  };
  add(CompactSection::kMeta, std::move(meta_raw), true);
  add(CompactSection::kRecords, std::move(w.records), true);
  add(CompactSection::kChunkDirectory, std::move(w.directory), false);
  parts.push_back({CompactSection::kEntryData, CompactCodec::kNone, std::move(w.entry_chunks),
                   w.entry_data_size});
  w.entry_chunks = {};
  add(CompactSection::kBlockCrcs, std::move(blocks_raw), true);

  std::string out(kCompactHeaderSize + kCompactNumSections * kCompactSectionEntrySize, '\0');
  uint64_t total = out.size();
  for (const Part& p : parts) total += p.size();
  out.reserve(static_cast<size_t>(total));
  auto* table = reinterpret_cast<uint8_t*>(out.data()) + kCompactHeaderSize;
  for (size_t i = 0; i < parts.size(); ++i) {
    uint8_t* s = table + i * kCompactSectionEntrySize;
    uint32_t crc = 0;
    for (const std::string& piece : parts[i].stored) {
      crc = crc32c::Extend(crc, piece.data(), piece.size());
    }
    EncodeFixed32(s, static_cast<uint32_t>(parts[i].kind));
    EncodeFixed32(s + 4, static_cast<uint32_t>(parts[i].codec));
    EncodeFixed64(s + 8, out.size());
    EncodeFixed64(s + 16, parts[i].size());
    EncodeFixed64(s + 24, parts[i].raw_length);
    EncodeFixed32(s + 32, crc32c::Mask(crc));
    for (std::string& piece : parts[i].stored) {
      out += piece;
      piece = {};
    }
    table = reinterpret_cast<uint8_t*>(out.data()) + kCompactHeaderSize;
  }
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(h, kCompactIndexMagic, 8);
  EncodeFixed32(h + 8, kCompactIndexFormat);
  EncodeFixed32(h + 12, kCompactNumSections);
  EncodeFixed64(h + 16, w.num_entries);
  EncodeFixed64(h + 24, w.num_records);
  EncodeFixed64(h + 32, out.size());
  EncodeFixed32(h + 40, kCompactEntriesPerChunk);
  EncodeFixed32(h + 44, kCompactRestartInterval);
  EncodeFixed32(h + 48,
                crc32c::Mask(crc32c::Value(h + kCompactHeaderSize,
                                           kCompactNumSections * kCompactSectionEntrySize)));
  EncodeFixed32(h + 60, crc32c::Mask(crc32c::Value(h, 60)));
  auto check = CompactIndex::Parse(w.name, std::span<const uint8_t>(h, out.size()));
  if (!check) {
    w.failed = Status::InvalidArgument(check.error().message());
    return Err(w.failed);
  }
  if (parsed != nullptr) *parsed = std::move(*check);
  w.finished = true;
  return out;
}

Status WriteCompactIndexFile(const std::string& path, std::string_view bytes) {
  return WriteFileAtomic(path, bytes.data(), bytes.size());
}

// ---------------------------------------------------------------------------------------------
// Reader

struct CompactIndex::Impl {
  std::string name;
  uint64_t num_entries = 0;
  std::string entries;                                    // every chunk's raw bytes, back to back
  std::vector<uint64_t> restarts;                         // offset in `entries` of entry 16 i + 1
  std::vector<RecordInfo> records;                        // by id
  std::vector<std::pair<std::string, std::string>> meta;  // sorted by key
  struct BlockItem {
    uint64_t key;  // BlockKey(ino, group)
    uint64_t first;
    uint64_t count;
  };
  std::vector<BlockItem> block_items;
  std::vector<uint32_t> block_crcs;

  Status Damaged(const std::string& what) const {
    return Status::Corruption(name + ": damaged or not a pcrfs index: " + what);
  }

  // Walks entries from a restart point: Seek(ino) then Next() yields ino, ino + 1, ...
  class Cursor {
   public:
    explicit Cursor(const Impl* impl) : impl_(impl), d_(std::string_view()) {}
    Status Seek(uint64_t ino) {
      if (ino == 0 || ino > impl_->num_entries) {
        return Status::NotFound(impl_->name + ": no inode " + U(ino));
      }
      const uint64_t r = (ino - 1) / kCompactRestartInterval;
      if (r >= impl_->restarts.size()) return impl_->Damaged("restart table");
      const uint64_t off = impl_->restarts[static_cast<size_t>(r)];
      if (off > impl_->entries.size()) return impl_->Damaged("restart offset");
      d_ = Decoder(std::string_view(impl_->entries).substr(static_cast<size_t>(off)));
      next_ = r * kCompactRestartInterval + 1;
      Entry skip;
      while (next_ < ino) PCRFS_RETURN_IF_ERROR(Next(&skip));
      return Status::OK();
    }
    Status Next(Entry* e) {
      if (next_ == 0 || next_ > impl_->num_entries) {
        return Status::NotFound(impl_->name + ": no inode " + U(next_));
      }
      if ((next_ - 1) % kCompactRestartInterval == 0) state_ = DeltaState();
      std::string what;
      if (!DecodeCompactEntry(&d_, &state_, next_, e, &what)) return impl_->Damaged(what);
      ++next_;
      return Status::OK();
    }

   private:
    const Impl* impl_;
    Decoder d_;
    DeltaState state_;
    uint64_t next_ = 0;
  };

  Result<Entry> GetEntry(uint64_t ino) const {
    Cursor c(this);
    PCRFS_RETURN_ERR_IF_ERROR(c.Seek(ino));
    Entry e;
    PCRFS_RETURN_ERR_IF_ERROR(c.Next(&e));
    return e;
  }

  Status ParseAll(std::span<const uint8_t> bytes);
  Status ParseEntries(std::span<const uint8_t> directory, std::span<const uint8_t> data,
                      uint32_t per_chunk, std::vector<std::pair<uint64_t, uint64_t>>* large);
  Status ParseBlocks(std::string_view raw, const std::vector<std::pair<uint64_t, uint64_t>>& large);
};

CompactIndex::CompactIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompactIndex::~CompactIndex() = default;

Status CompactIndex::Impl::ParseAll(std::span<const uint8_t> bytes) {
  if (bytes.size() < kCompactHeaderSize) return Damaged("shorter than its header");
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, kCompactIndexMagic, 8) != 0) return Damaged("bad magic");
  if (crc32c::Unmask(DecodeFixed32(h + 60)) != crc32c::Value(h, 60)) {
    return Damaged("header checksum mismatch");
  }
  const uint32_t version = DecodeFixed32(h + 8);
  if (version != kCompactIndexFormat) {
    return Status::NotSupported(name + ": index format " + U(version) +
                                " is not supported (this pcrfs reads 2 to 4; use a newer pcrfs)");
  }
  const uint32_t num_sections = DecodeFixed32(h + 12);
  num_entries = DecodeFixed64(h + 16);
  const uint64_t num_records = DecodeFixed64(h + 24);
  const uint64_t file_size = DecodeFixed64(h + 32);
  const uint32_t per_chunk = DecodeFixed32(h + 40);
  const uint32_t restart = DecodeFixed32(h + 44);
  if (DecodeFixed32(h + 52) != 0 || DecodeFixed32(h + 56) != 0) {
    return Damaged("reserved header bytes are not zero");
  }
  if (file_size != bytes.size()) {
    return Damaged("header says " + U(file_size) + " bytes, the file has " + U(bytes.size()));
  }
  if (num_sections != kCompactNumSections) return Damaged("section count " + U(num_sections));
  if (restart != kCompactRestartInterval) return Damaged("restart interval " + U(restart));
  if (per_chunk == 0 || per_chunk % kCompactRestartInterval != 0 || per_chunk > (1u << 20)) {
    return Damaged("entries per chunk " + U(per_chunk));
  }
  if (num_entries == 0) return Damaged("no entries (not even the root)");
  // An entry takes at least a byte before compression, which expands at most kMaxExpansion
  // times; every record holds at least one file.
  if (num_entries > kMaxExpansion * bytes.size()) {
    return Damaged("entry count " + U(num_entries) + " for a file of " + U(bytes.size()) +
                   " bytes");
  }
  if (num_records > num_entries) return Damaged("record count " + U(num_records));
  const uint64_t table_end = kCompactHeaderSize + num_sections * kCompactSectionEntrySize;
  if (bytes.size() < table_end) return Damaged("truncated section table");
  if (crc32c::Unmask(DecodeFixed32(h + 48)) !=
      crc32c::Value(h + kCompactHeaderSize, table_end - kCompactHeaderSize)) {
    return Damaged("section table checksum mismatch");
  }
  std::array<std::span<const uint8_t>, kCompactNumSections> stored;
  std::array<uint8_t, kCompactNumSections> codec{};
  std::array<uint64_t, kCompactNumSections> raw_length{};
  uint64_t expect = table_end;
  for (uint32_t i = 0; i < num_sections; ++i) {
    const uint8_t* s = h + kCompactHeaderSize + i * kCompactSectionEntrySize;
    const uint32_t kind = DecodeFixed32(s);
    const uint32_t c = DecodeFixed32(s + 4);
    const uint64_t offset = DecodeFixed64(s + 8);
    const uint64_t length = DecodeFixed64(s + 16);
    const std::string what = "section " + U(i + 1);
    if (kind != i + 1) return Damaged(what + ": kind " + U(kind) + ", expected " + U(i + 1));
    if (c > static_cast<uint32_t>(CompactCodec::kZstd)) return Damaged(what + ": codec " + U(c));
    if (DecodeFixed32(s + 36) != 0) return Damaged(what + ": reserved bytes are not zero");
    if (offset != expect) return Damaged(what + ": does not start where the previous one ends");
    if (length > bytes.size() - offset) return Damaged(what + ": extends past the end of the file");
    stored[i] = bytes.subspan(static_cast<size_t>(offset), static_cast<size_t>(length));
    codec[i] = static_cast<uint8_t>(c);
    raw_length[i] = DecodeFixed64(s + 24);
    if (crc32c::Unmask(DecodeFixed32(s + 32)) !=
        crc32c::Value(stored[i].data(), stored[i].size())) {
      return Damaged(what + ": checksum mismatch");
    }
    if (raw_length[i] > kMaxExpansion * length + 65536) {
      return Damaged(what + ": raw length " + U(raw_length[i]) + " is implausible");
    }
    expect = offset + length;
  }
  if (expect != bytes.size()) return Damaged("bytes after the last section");
  if (codec[2] != 0 || codec[3] != 0) return Damaged("chunk directory or entry data compressed");

  std::string what;
  // Meta.
  std::string raw;
  if (raw_length[0] > kMaxMetaBytes) return Damaged("meta larger than 16 MiB");
  if (!Decompress(stored[0], codec[0], raw_length[0], &raw, &what)) return Damaged("meta: " + what);
  {
    Decoder d(raw);
    uint64_t n = 0;
    if (!GetVarint(&d, &n) || n > raw.size()) return Damaged("meta: bad count");
    for (uint64_t i = 0; i < n; ++i) {
      std::string_view k, v;
      if (!d.GetLengthPrefixed(&k) || !d.GetLengthPrefixed(&v)) return Damaged("meta: truncated");
      if (k.empty() || k.size() > 255 || k == lmdb::kIndexFormatKey) {
        return Damaged("meta: bad key");
      }
      if (!meta.empty() && !(meta.back().first < k)) return Damaged("meta: keys out of order");
      meta.emplace_back(std::string(k), std::string(v));
    }
    if (!d.done()) return Damaged("meta: trailing bytes");
  }
  // Records.
  if (raw_length[1] != num_records * kRecordInfoSize) {
    return Damaged("records: " + U(raw_length[1]) + " bytes for " + U(num_records) + " records");
  }
  if (!Decompress(stored[1], codec[1], raw_length[1], &raw, &what)) {
    return Damaged("records: " + what);
  }
  records.reserve(static_cast<size_t>(num_records));
  for (uint64_t i = 0; i < num_records; ++i) {
    auto r = lmdb::DecodeRecordInfo(
        static_cast<uint32_t>(i),
        std::string_view(raw).substr(static_cast<size_t>(i * kRecordInfoSize), kRecordInfoSize));
    if (!r) return Damaged(r.error().message());
    records.push_back(*r);
  }
  std::vector<std::pair<uint64_t, uint64_t>> large;  // BlockKey -> length of each large piece
  PCRFS_RETURN_IF_ERROR(ParseEntries(stored[2], stored[3], per_chunk, &large));
  if (!Decompress(stored[4], codec[4], raw_length[4], &raw, &what)) {
    return Damaged("block CRCs: " + what);
  }
  return ParseBlocks(raw, large);
}

Status CompactIndex::Impl::ParseEntries(std::span<const uint8_t> directory,
                                        std::span<const uint8_t> data, uint32_t per_chunk,
                                        std::vector<std::pair<uint64_t, uint64_t>>* large) {
  if (directory.size() % kCompactChunkEntrySize != 0) return Damaged("chunk directory size");
  const uint64_t chunks = directory.size() / kCompactChunkEntrySize;
  if (chunks != num_entries / per_chunk + (num_entries % per_chunk != 0 ? 1 : 0)) {
    return Damaged(U(chunks) + " entry chunks for " + U(num_entries) + " entries");
  }
  EntryChecks checks(records, num_entries);
  uint64_t data_at = 0;
  uint64_t ino = 1;
  std::string raw;
  std::string what;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint8_t* ce = directory.data() + c * kCompactChunkEntrySize;
    const uint64_t offset = DecodeFixed64(ce);
    const uint32_t stored_len = DecodeFixed32(ce + 8);
    const uint32_t raw_len = DecodeFixed32(ce + 12);
    const uint32_t crc = DecodeFixed32(ce + 16);
    const uint8_t codec = ce[20];
    const std::string chunk = "entry chunk " + U(c);
    if (ce[21] != 0 || ce[22] != 0 || ce[23] != 0) return Damaged(chunk + ": reserved bytes");
    if (offset != data_at || stored_len > data.size() - offset) {
      return Damaged(chunk + ": outside the entry data");
    }
    const uint64_t n = std::min<uint64_t>(per_chunk, num_entries - c * per_chunk);
    if (raw_len > n * kMaxEntryBytes || raw_len > kMaxExpansion * stored_len + 65536) {
      return Damaged(chunk + ": raw length too large");
    }
    const auto stored = data.subspan(static_cast<size_t>(offset), stored_len);
    if (crc32c::Unmask(crc) != crc32c::Value(stored.data(), stored.size())) {
      return Damaged(chunk + ": checksum mismatch");
    }
    if (!Decompress(stored, codec, raw_len, &raw, &what)) return Damaged(chunk + ": " + what);
    data_at = offset + stored_len;
    Decoder d(raw);
    DeltaState st;
    Entry e;
    const size_t base = entries.size();
    for (uint64_t i = 0; i < n; ++i, ++ino) {
      if ((ino - 1) % kCompactRestartInterval == 0) {
        st = DeltaState();
        restarts.push_back(base + (raw.size() - d.remaining()));
      }
      if (!DecodeCompactEntry(&d, &st, ino, &e, &what)) return Damaged(what);
      if (!checks.Add(ino, e, large, &what)) return Damaged(what);
    }
    if (!d.done()) return Damaged(chunk + ": bytes after its last entry");
    entries += raw;
  }
  if (data_at != data.size()) return Damaged("entry data after the last chunk");
  if (ino - 1 != num_entries) {
    return Damaged(U(ino - 1) + " entries in the chunks, the header says " + U(num_entries));
  }
  if (!checks.Finish(&what)) return Damaged(what);
  // Appending chunk by chunk left up to twice the bytes reserved (1.28M files: 64 MiB for 45);
  // a copy holds exactly them. Not reserved up front from the chunks' claims: a crafted
  // directory can claim far more than its chunks decompress to.
  std::string(entries).swap(entries);
  restarts.shrink_to_fit();
  return Status::OK();
}

Status CompactIndex::Impl::ParseBlocks(std::string_view raw,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& large) {
  Decoder d(raw);
  uint64_t n = 0;
  if (!GetVarint(&d, &n) || n > raw.size()) return Damaged("block CRCs: bad count");
  uint64_t last = 0;
  size_t li = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t delta = 0, count = 0;
    uint8_t group = 0;
    if (!GetVarint(&d, &delta) || !d.GetByte(&group) || !GetVarint(&d, &count)) {
      return Damaged("block CRCs: truncated");
    }
    const uint64_t ino = (last >> 4) + delta;
    if (ino < (last >> 4) || ino > num_entries || group < 1 || group > kNumGroups) {
      return Damaged("block CRCs: bad inode or group");
    }
    const uint64_t key = BlockKey(ino, group);
    if (key <= last) return Damaged("block CRCs: out of order");
    while (li < large.size() && large[li].first < key) ++li;
    if (li == large.size() || large[li].first != key) {
      return Damaged("block CRCs for inode " + U(ino) + " group " + U(group) +
                     ", which has no large piece");
    }
    if (count != NumChecksumBlocks(large[li].second) || count > d.remaining() / 4) {
      return Damaged("block CRCs of inode " + U(ino) + " group " + U(group) + ": wrong count");
    }
    block_items.push_back({key, block_crcs.size(), count});
    for (uint64_t b = 0; b < count; ++b) {
      uint32_t c = 0;
      d.GetFixed32(&c);
      block_crcs.push_back(c);
    }
    last = key;
  }
  if (!d.done()) return Damaged("block CRCs: trailing bytes");
  return Status::OK();
}

namespace {
std::atomic<uint64_t> g_parse_count{0};
}  // namespace

uint64_t CompactIndex::ParseCount() { return g_parse_count.load(std::memory_order_relaxed); }

Result<std::unique_ptr<CompactIndex>> CompactIndex::Parse(const std::string& name,
                                                          std::span<const uint8_t> bytes) {
  g_parse_count.fetch_add(1, std::memory_order_relaxed);
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  PCRFS_RETURN_ERR_IF_ERROR(impl->ParseAll(bytes));
  return std::unique_ptr<CompactIndex>(new CompactIndex(std::move(impl)));
}

Result<std::unique_ptr<CompactIndex>> CompactIndex::Open(const std::string& path) {
  auto fd = OpenFile(path, O_RDONLY | O_NOFOLLOW);
  if (!fd) {
    if (fd.error().ToErrno() == ELOOP) {
      return Err(Status::Corruption(path + ": the index is a symbolic link (pcrfs follows no " +
                                    "links inside a store)"));
    }
    return Err(fd.error());
  }
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  if (!S_ISREG(st.st_mode))
    return Err(Status::Corruption(path + ": the index is not a regular file"));
  fd->Reset();
  auto bytes = ReadWholeFile(path, uint64_t{16} << 30);
  if (!bytes) return Err(bytes.error());
  return Parse(path, *bytes);
}

Result<Entry> CompactIndex::Get(uint64_t ino) const { return impl_->GetEntry(ino); }

Result<uint64_t> CompactIndex::Lookup(uint64_t parent, std::string_view name) const {
  auto not_found = [&] {
    return Err(Status::NotFound(impl_->name + ": no entry \"" + std::string(name) +
                                "\" in directory " + U(parent)));
  };
  if (!IsValidName(name)) return not_found();
  auto dir = impl_->GetEntry(parent);
  if (!dir) return Err(dir.error());
  if (!dir->is_dir() || dir->num_children == 0) return not_found();
  const uint64_t lo = dir->first_child, hi = dir->first_child + dir->num_children;
  // Restart points inside (lo, hi): inodes 16 i + 1. Find the last whose name <= name.
  const uint64_t R = kCompactRestartInterval;
  uint64_t first_r = (lo - 1 + R - 1) / R;  // restart index of the first restart inode >= lo
  if (first_r * R + 1 == lo) ++first_r;     // lo itself is where a scan starts anyway
  uint64_t left = first_r, right = (hi - 1 + R - 1) / R;  // restart inodes < hi
  uint64_t start = lo;
  while (left < right) {
    const uint64_t mid = left + (right - left) / 2;
    auto e = impl_->GetEntry(mid * R + 1);
    if (!e) return Err(e.error());
    if (e->name <= name) {
      start = mid * R + 1;
      left = mid + 1;
    } else {
      right = mid;
    }
  }
  Impl::Cursor c(impl_.get());
  PCRFS_RETURN_ERR_IF_ERROR(c.Seek(start));
  Entry e;
  for (uint64_t ino = start; ino < hi; ++ino) {
    PCRFS_RETURN_ERR_IF_ERROR(c.Next(&e));
    if (e.name == name) return ino;
    if (e.name > name) break;
  }
  return not_found();
}

Status CompactIndex::List(const Entry& dir, uint64_t start,
                          const std::function<bool(const Entry&)>& fn) const {
  if (!dir.is_dir()) {
    return Status::InvalidArgument(impl_->name + ": inode " + U(dir.ino) + " is not a directory");
  }
  if (start >= dir.num_children) return Status::OK();
  Impl::Cursor c(impl_.get());
  PCRFS_RETURN_IF_ERROR(c.Seek(dir.first_child + start));
  Entry e;
  for (uint64_t i = start; i < dir.num_children; ++i) {
    PCRFS_RETURN_IF_ERROR(c.Next(&e));
    if (e.parent != dir.ino) {
      return Status::Corruption(impl_->name + ": inode " + U(e.ino) + " is in the child range of " +
                                U(dir.ino) + " but its parent is " + U(e.parent));
    }
    if (!fn(e)) break;
  }
  return Status::OK();
}

Result<RecordInfo> CompactIndex::GetRecord(uint32_t id) const {
  if (id >= impl_->records.size()) {
    return Err(Status::NotFound(impl_->name + ": record " + U(id)));
  }
  return impl_->records[id];
}

Result<uint32_t> CompactIndex::GetBlockCrc(uint64_t ino, int group, uint64_t block) const {
  const uint64_t key = BlockKey(ino, group);
  auto it = std::lower_bound(impl_->block_items.begin(), impl_->block_items.end(), key,
                             [](const Impl::BlockItem& x, uint64_t k) { return x.key < k; });
  const std::string what = "block CRCs of inode " + U(ino) + " group " + U(group);
  if (it == impl_->block_items.end() || it->key != key) {
    return Err(Status::NotFound(impl_->name + ": no " + what));
  }
  if (block >= it->count) {
    return Err(Status::Corruption(impl_->name + ": " + what + " have no block " + U(block)));
  }
  return impl_->block_crcs[static_cast<size_t>(it->first + block)];
}

Result<std::string> CompactIndex::GetMeta(std::string_view key) const {
  if (key == lmdb::kIndexFormatKey) return std::to_string(kCompactIndexFormat);
  auto it = std::lower_bound(impl_->meta.begin(), impl_->meta.end(), key,
                             [](const auto& x, std::string_view k) { return x.first < k; });
  if (it == impl_->meta.end() || it->first != key) {
    return Err(Status::NotFound(impl_->name + ": no meta key \"" + std::string(key) + "\""));
  }
  return it->second;
}

uint64_t CompactIndex::NumEntries() const { return impl_->num_entries; }
uint64_t CompactIndex::NumRecords() const { return impl_->records.size(); }
const std::string& CompactIndex::name() const { return impl_->name; }
uint64_t CompactIndex::MemoryBytes() const {
  return impl_->entries.capacity() + impl_->restarts.capacity() * 8 +
         impl_->records.capacity() * sizeof(RecordInfo) + impl_->block_crcs.capacity() * 4 +
         impl_->block_items.capacity() * sizeof(Impl::BlockItem);
}

void ResealCompactIndex(std::string* b) {
  const uint64_t size = b->size();
  const uint64_t table_end = kCompactHeaderSize + kCompactNumSections * kCompactSectionEntrySize;
  if (size < table_end) return;
  auto* p = reinterpret_cast<uint8_t*>(b->data());
  auto section = [&](uint32_t i) { return p + kCompactHeaderSize + i * kCompactSectionEntrySize; };
  const uint64_t dir_off = DecodeFixed64(section(2) + 8), dir_len = DecodeFixed64(section(2) + 16);
  const uint64_t data_off = DecodeFixed64(section(3) + 8);
  for (uint64_t c = 0;
       dir_off <= size && dir_len <= size - dir_off && c + kCompactChunkEntrySize <= dir_len;
       c += kCompactChunkEntrySize) {
    uint8_t* ce = p + dir_off + c;
    const uint64_t off = DecodeFixed64(ce);
    const uint64_t len = DecodeFixed32(ce + 8);
    if (data_off <= size && off <= size - data_off && len <= size - data_off - off) {
      EncodeFixed32(ce + 16, crc32c::Mask(crc32c::Value(p + data_off + off, len)));
    }
  }
  for (uint32_t i = 0; i < kCompactNumSections; ++i) {
    const uint64_t off = DecodeFixed64(section(i) + 8), len = DecodeFixed64(section(i) + 16);
    if (off <= size && len <= size - off) {
      EncodeFixed32(section(i) + 32, crc32c::Mask(crc32c::Value(p + off, len)));
    }
  }
  EncodeFixed32(
      p + 48, crc32c::Mask(crc32c::Value(p + kCompactHeaderSize, table_end - kCompactHeaderSize)));
  EncodeFixed32(p + 60, crc32c::Mask(crc32c::Value(p, 60)));
}

// ---------------------------------------------------------------------------------------------
// Conversion from index.lmdb

Result<std::string> ConvertLmdbIndex(const std::string& name, const LmdbRecordSource& source,
                                     std::unique_ptr<CompactIndex>* parsed) {
  CompactIndexWriter w(name + " (converted)");
  int format = 0;
  Status s = source(lmdb::kMetaDb, [&](std::string_view k, std::string_view v) -> Status {
    if (k == lmdb::kIndexFormatKey) {
      format = v == "2" ? 2 : v == "3" ? 3 : -1;
      if (format < 0) {
        return Status::NotSupported(name + ": index format \"" + std::string(v) +
                                    "\" is not supported (this pcrfs reads 2 to 4)");
      }
      return Status::OK();
    }
    return w.PutMeta(k, v);
  });
  if (!s.ok()) return Err(s);
  if (format == 0)
    return Err(
        Status::Corruption(name + ": damaged or not a pcrfs index: no index_format in meta"));
  s = source(lmdb::kRecordsDb, [&](std::string_view k, std::string_view v) -> Status {
    if (k.size() != 4) return Status::Corruption(name + ": malformed record key");
    uint32_t id = 0;
    for (char c : k) id = (id << 8) | static_cast<uint8_t>(c);
    auto r = lmdb::DecodeRecordInfo(id, v);
    if (!r) return Status::Corruption(name + ": " + r.error().message());
    return w.AddRecord(*r);
  });
  if (!s.ok()) return Err(s);
  s = source(lmdb::kEntriesDb, [&](std::string_view k, std::string_view v) -> Status {
    if (k.size() != 8) return Status::Corruption(name + ": malformed entry key");
    const uint64_t ino = DecodeBigEndian64(reinterpret_cast<const uint8_t*>(k.data()));
    auto e = DecodeEntry(ino, v);
    if (!e) return Status::Corruption(name + ": " + e.error().message());
    return w.AddEntry(*e);
  });
  if (!s.ok()) return Err(s);
  if (format >= 3) {
    std::vector<uint32_t> crcs;
    s = source(lmdb::kBlocksDb, [&](std::string_view k, std::string_view v) -> Status {
      if (k.size() != 9 || v.size() % 4 != 0) {
        return Status::Corruption(name + ": malformed block CRCs");
      }
      const uint64_t ino = DecodeBigEndian64(reinterpret_cast<const uint8_t*>(k.data()));
      crcs.resize(v.size() / 4);
      for (size_t i = 0; i < crcs.size(); ++i) {
        crcs[i] = DecodeFixed32(reinterpret_cast<const uint8_t*>(v.data()) + 4 * i);
      }
      return w.AddBlockCrcs(ino, static_cast<uint8_t>(k[8]), crcs);
    });
    if (!s.ok()) return Err(s);
  }
  auto out = w.Finish(parsed);
  if (!out) return Err(Status::Corruption(out.error().message()));
  return out;
}

Result<LmdbRecordSource> LiblmdbRecordSource(const std::string& path) {
  FileIdentity identity;
  auto lmdb_size = CheckIndexFile(path, nullptr, &identity);
  if (!lmdb_size) return Err(lmdb_size.error());
  auto env = lmdb::OpenEnv(path, MDB_RDONLY | MDB_NOLOCK, static_cast<size_t>(*lmdb_size), 0444);
  if (!env) return Err(env.error());
  std::shared_ptr<MDB_env> owned(*env, [](MDB_env* e) { mdb_env_close(e); });
  return LmdbRecordSource([owned, path](std::string_view db, const LmdbRecordFn& fn) -> Status {
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(owned.get(), nullptr, MDB_RDONLY, &txn);
    if (rc != 0) return lmdb::LmdbError(path + ": begin", rc);
    struct Abort {
      MDB_txn* t;
      ~Abort() { mdb_txn_abort(t); }
    } abort{txn};
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, std::string(db).c_str(), 0, &dbi);
    if (rc != 0) return lmdb::LmdbError(path + ": open " + std::string(db), rc);
    MDB_cursor* cursor;
    rc = mdb_cursor_open(txn, dbi, &cursor);
    if (rc != 0) return lmdb::LmdbError(path + ": cursor", rc);
    const lmdb::CursorCloser closer{cursor};
    MDB_val k, v;
    for (rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
      PCRFS_RETURN_IF_ERROR(fn(std::string_view(static_cast<const char*>(k.mv_data), k.mv_size),
                               std::string_view(static_cast<const char*>(v.mv_data), v.mv_size)));
    }
    if (rc != MDB_NOTFOUND) return lmdb::LmdbError(path + ": walk " + std::string(db), rc);
    return Status::OK();
  });
}

Result<uint64_t> CompactIndexDeclaredSize(const std::string& name, std::string_view head) {
  auto damaged = [&name](const char* what) {
    return Err(Status::Corruption(name + ": damaged or not a pcrfs index: " + what));
  };
  if (head.size() < kCompactHeaderSize) return damaged("shorter than its header");
  const auto* h = reinterpret_cast<const uint8_t*>(head.data());
  if (std::memcmp(h, kCompactIndexMagic, 8) != 0) return damaged("bad magic");
  if (crc32c::Unmask(DecodeFixed32(h + 60)) != crc32c::Value(h, 60)) {
    return damaged("header checksum mismatch");
  }
  if (DecodeFixed32(h + 8) != kCompactIndexFormat) return uint64_t{0};
  return DecodeFixed64(h + 32);
}

}  // namespace pcrfs::index
