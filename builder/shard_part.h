// Sharded builds (docs/design.md, "Sharded builds"): `pcr build SRC PART --shard I/N` writes
// the records of shard I of N into the folder PART, and `pcr merge PART... STORE` joins N parts
// into the store a single `pcr build SRC STORE` writes, byte for byte.
//
// A part holds:
//   PART/records/NNNNNNNN.pcr  the records of its range, numbered as in the single build
//   PART/listing.bin           the whole source as walked (SourceTree), the same in every part
//   PART/part.json             what the part is (ShardPart), with a checksum of itself
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "builder/source_tree.h"
#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::tools {

inline constexpr char kPartFile[] = "part.json";
inline constexpr char kListingFile[] = "listing.bin";

// Shard `index` of `count`, 0-based. count 0: not a shard.
struct ShardSpec {
  uint32_t index = 0;
  uint32_t count = 0;
  bool enabled() const { return count > 0; }
};

// "I/N" with 0 <= I < N <= 1000000; InvalidArgument naming --shard otherwise.
Result<ShardSpec> ParseShardSpec(std::string_view text);

// The records [first, second) of shard s when the single build writes num_records records:
// contiguous, in order, sizes differing by at most one; empty when N exceeds num_records.
std::pair<uint32_t, uint32_t> ShardRecordRange(uint32_t num_records, ShardSpec s);

// FNV-1a, 64 bit: a stable fingerprint (not a defence against a forger).
class Fingerprint {
 public:
  void Add(std::string_view s) {
    for (unsigned char c : s) {
      h_ ^= c;
      h_ *= 0x100000001b3ull;
    }
    Add64(s.size());
  }
  void Add64(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= (v >> (8 * i)) & 0xff;
      h_ *= 0x100000001b3ull;
    }
  }
  std::string Hex() const;

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// The walked source (without its root path, so a source mounted elsewhere is the same source),
// with every node, child list, file order and problem, so `pcr merge` can
// write the index without the source. Deterministic: equal trees give equal bytes.
std::string EncodeListing(const SourceTree& tree);
// Corruption on malformed bytes or out-of-range node numbers.
Result<SourceTree> DecodeListing(std::string_view bytes);

// A file of the part's records whose size or mtime changed between the listing and its
// reading: the index describes the version that was read.
struct ChangedFile {
  uint64_t position = 0;  // in SourceTree::files
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
};

struct PartRecord {
  uint32_t id = 0;
  uint64_t size = 0;
  uint32_t crc32c = 0;  // of the whole file, unmasked
  // The block CRCs of its pieces longer than a checksum block (the index holds them), so a
  // merge need not read those pieces again. has_blocks: part.json gave them (older parts
  // do not).
  bool has_blocks = false;
  std::vector<index::PieceBlockCrcs> blocks;
};

// part.json.
struct ShardPart {
  std::string generator;
  std::string source;   // the source as given to the shard (informative only)
  std::string options;  // BuildOptions::Encode of the build: parts to merge must agree
  ShardSpec shard;
  uint64_t num_files = 0;
  uint32_t num_records = 0;  // of the whole store
  uint32_t record_begin = 0, record_end = 0;
  std::string listing_digest;  // Fingerprint of listing.bin: the source's identity
  uint32_t listing_crc32c = 0;
  std::vector<PartRecord> records;
  std::vector<ChangedFile> changed;

  // Pretty JSON ending in a "checksum" of everything before it.
  std::string ToJson() const;
  // Corruption for malformed JSON, a bad checksum or inconsistent fields.
  static Result<ShardPart> FromJson(const std::string& text);
};

}  // namespace pcrfs::tools
