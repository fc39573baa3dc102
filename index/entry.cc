#include "index/entry.h"

#include "common/coding.h"

namespace pcrfs::index {
namespace {

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// Varints must be in their shortest form, so every entry has exactly one encoding.
bool GetVarint(Decoder* d, uint64_t* v) { return d->GetShortestVarint64(v); }
bool GetVarint(Decoder* d, uint32_t* v) {
  uint64_t w;
  if (!GetVarint(d, &w) || w > UINT32_MAX) return false;
  *v = static_cast<uint32_t>(w);
  return true;
}
bool GetName(Decoder* d, std::string_view* s) {
  const size_t before = d->remaining();
  if (!d->GetLengthPrefixed(s)) return false;
  return before - d->remaining() == VarintLength(s->size()) + s->size();
}

Status Bad(uint64_t ino, const std::string& what) {
  return Status::Corruption("index entry " + std::to_string(ino) + ": " + what);
}

}  // namespace

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

// Layout (docs/format.md, "Entry encoding"):
//   kind u8, reason u8, mode varint, zigzag(mtime_sec) varint, mtime_nsec varint,
//   parent varint, name length-prefixed,
//   directory: first_child, num_children, num_subdirs (varints)
//   file:      source_size, record, slot (varints), then per group offset varint,
//              length varint, masked crc fixed32.
std::string EncodeEntry(const Entry& e) {
  std::string out;
  out.reserve(32 + e.name.size() + (e.is_dir() ? 0 : kNumGroups * 12));
  out.push_back(static_cast<char>(e.kind));
  out.push_back(static_cast<char>(e.passthrough_reason));  // the stored byte
  PutVarint64(&out, e.mode);
  PutVarint64(&out, ZigZag(e.mtime_sec));
  PutVarint64(&out, e.mtime_nsec);
  PutVarint64(&out, e.parent);
  PutLengthPrefixed(&out, e.name);
  if (e.is_dir()) {
    PutVarint64(&out, e.first_child);
    PutVarint64(&out, e.num_children);
    PutVarint64(&out, e.num_subdirs);
  } else {
    PutVarint64(&out, e.source_size);
    PutVarint64(&out, e.record);
    PutVarint64(&out, e.slot);
    for (const PieceRef& p : e.pieces) {
      PutVarint64(&out, p.offset);
      PutVarint64(&out, p.length);
      PutFixed32(&out, p.masked_crc);
    }
  }
  return out;
}

Result<Entry> DecodeEntry(uint64_t ino, std::string_view value) {
  Decoder d(value);
  Entry e;
  e.ino = ino;
  uint8_t kind, reason;
  uint64_t mtime;
  std::string_view name;
  if (!d.GetByte(&kind) || !d.GetByte(&reason) || !GetVarint(&d, &e.mode) ||
      !GetVarint(&d, &mtime) || !GetVarint(&d, &e.mtime_nsec) || !GetVarint(&d, &e.parent) ||
      !GetName(&d, &name)) {
    return Err(Bad(ino, "truncated or malformed"));
  }
  if (kind < static_cast<uint8_t>(EntryKind::kDirectory) ||
      kind > static_cast<uint8_t>(EntryKind::kPassthrough)) {
    return Err(Bad(ino, "unknown kind " + std::to_string(kind)));
  }
  e.kind = static_cast<EntryKind>(kind);
  e.passthrough_reason = static_cast<PassthroughReason>(reason);  // unknown values stay opaque
  e.mtime_sec = UnZigZag(mtime);
  if (e.mode > 07777) return Err(Bad(ino, "mode out of range"));
  if (e.mtime_nsec >= 1000000000) return Err(Bad(ino, "mtime nanoseconds out of range"));
  e.name = std::string(name);
  if (ino == kRootIno) {
    if (!e.name.empty() || e.parent != kRootIno || e.kind != EntryKind::kDirectory) {
      return Err(Bad(ino, "the root must be a directory, unnamed, its own parent"));
    }
  } else {
    if (ino == 0 || e.parent == 0 || e.parent == ino) return Err(Bad(ino, "bad parent"));
    if (!IsValidName(e.name)) return Err(Bad(ino, "invalid name"));
  }
  if (e.is_dir()) {
    if (e.passthrough_reason != PassthroughReason::kNone) {
      return Err(Bad(ino, "directory with a passthrough reason"));
    }
    if (!GetVarint(&d, &e.first_child) || !GetVarint(&d, &e.num_children) ||
        !GetVarint(&d, &e.num_subdirs)) {
      return Err(Bad(ino, "truncated directory fields"));
    }
    if (e.num_subdirs > e.num_children) return Err(Bad(ino, "more subdirectories than children"));
    if (e.num_children > 0 &&
        (e.first_child <= ino || e.first_child + e.num_children < e.first_child)) {
      return Err(Bad(ino, "child range out of bounds"));
    }
  } else {
    if (e.kind == EntryKind::kJpeg && e.passthrough_reason != PassthroughReason::kNone) {
      return Err(Bad(ino, "JPEG with a passthrough reason"));
    }
    if (!GetVarint(&d, &e.source_size) || !GetVarint(&d, &e.record) || !GetVarint(&d, &e.slot)) {
      return Err(Bad(ino, "truncated file fields"));
    }
    for (int g = 0; g < kNumGroups; ++g) {
      PieceRef& p = e.pieces[static_cast<size_t>(g)];
      if (!GetVarint(&d, &p.offset) || !GetVarint(&d, &p.length) || !d.GetFixed32(&p.masked_crc)) {
        return Err(Bad(ino, "truncated piece table"));
      }
      if (p.offset + p.length < p.offset) return Err(Bad(ino, "piece range overflows"));
      if (e.kind == EntryKind::kPassthrough && g > 0 && p.length != 0) {
        return Err(Bad(ino, "passthrough file with data beyond group 1"));
      }
    }
  }
  if (!d.done()) return Err(Bad(ino, "trailing bytes"));
  return e;
}

}  // namespace pcrfs::index
