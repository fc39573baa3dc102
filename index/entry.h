// An index entry: everything lookup, getattr, readdir and read need, so none of them touches a
// record to answer. Encoded compactly in LMDB (docs/format.md, "Index").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "index/level_plan.h"
#include "index/passthrough_reason.h"
#include "index/record_format.h"

namespace pcrfs::index {

inline constexpr uint64_t kRootIno = 1;

struct Entry {
  uint64_t ino = 0;
  uint64_t parent = 0;  // the root is its own parent
  std::string name;     // empty for the root
  EntryKind kind = EntryKind::kDirectory;
  PassthroughReason passthrough_reason = PassthroughReason::kNone;
  uint32_t mode = 0;  // the source's permission bits (07777)
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;

  // Directories: children have the consecutive inode numbers [first_child, first_child +
  // num_children), in name order.
  uint64_t first_child = 0;
  uint64_t num_children = 0;
  uint64_t num_subdirs = 0;

  // Files.
  uint64_t source_size = 0;
  uint32_t record = 0;
  uint32_t slot = 0;
  PieceRefs pieces;
  // How many leading pieces (groups 1..resolved_groups) have their offset and masked_crc
  // filled. An index of format 4 stores only the lengths (0 here); Store::ResolvePieces fills
  // the groups a read needs from the record's image table.
  int resolved_groups = kNumGroups;
  bool PiecesResolved(int groups = kNumGroups) const {
    return kind == EntryKind::kDirectory || resolved_groups >= groups;
  }

  bool is_dir() const { return kind == EntryKind::kDirectory; }
  // The size of the level-k file (index/level_plan.h; 0 for a directory).
  uint64_t SizeAtLevel(int k) const { return LevelSize(kind, pieces, k); }
};

// A child as a directory listing names it (IndexReader::ListNames): name, inode and kind, from
// the dirents alone. `name` is valid during the listing's callback only.
struct DirEntry {
  std::string_view name;
  uint64_t ino = 0;
  EntryKind kind = EntryKind::kDirectory;
};

std::string EncodeEntry(const Entry& e);
// Strict: any malformed, truncated or out-of-range field is Corruption.
Result<Entry> DecodeEntry(uint64_t ino, std::string_view value);

// A name that can be a directory entry on Linux: non-empty, not "." or "..", no '/' or NUL,
// at most 255 bytes.
bool IsValidName(std::string_view name);

}  // namespace pcrfs::index
