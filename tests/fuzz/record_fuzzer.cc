// Fuzz target: the record reader on arbitrary bytes (docs/format.md, "What a record reader must
// check"). ReadRecordLayout, then ReadLevel of every image at every level and VerifyRecord, over
// an in-memory file. Invariants checked beyond "no crash, no sanitizer report":
//   - a level that reads has exactly LevelSize(kind, pieces, k) bytes, and a JPEG level ends in
//     FF D9; a passthrough file reads the same at every level (level_plan_fuzzer checks the plan);
//   - level k reading implies every level below it reads (levels are prefixes);
//   - VerifyRecord accepts every layout ReadRecordLayout accepts, and names an image as damaged
//     exactly when one of its ten pieces fails, which for a JPEG is when level 10 fails.
//
// Random mutations almost always break the header or table CRC, which would stop every input
// at check 1 or 6. So each input is also tried with both CRCs recomputed, which lets the fuzzer
// reach the structural checks behind them.

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/test_support.h"
#include "index/level_plan.h"
#include "index/record_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace pcrfs::fuzz {
namespace {

using index::EntryKind;
using index::kNumGroups;

void CheckRecord(const uint8_t* data, size_t size) {
  const test::MemoryFile file("fuzz.pcr", std::span<const uint8_t>(data, size));
  auto layout = index::ReadRecordLayout(file);
  auto verified = index::VerifyRecord(file);
  FUZZ_CHECK(layout.has_value() == verified.has_value(), "layout %d, verify %d", layout.has_value(),
             verified.has_value());
  if (!layout) return;
  FUZZ_CHECK(layout->file_size == size, "file_size");

  std::vector<bool> damaged(layout->images.size(), false);
  for (const auto& d : *verified) {
    FUZZ_CHECK(d.slot < layout->images.size(), "damaged slot %u out of range", d.slot);
    FUZZ_CHECK(d.path == layout->images[d.slot].path, "damaged path differs");
    damaged[d.slot] = true;
  }
  std::vector<uint8_t> out;
  for (size_t i = 0; i < layout->images.size(); ++i) {
    const index::RecordImage& img = layout->images[i];
    bool lower_failed = false;
    std::vector<uint8_t> first;
    for (int k = 1; k <= kNumGroups; ++k) {
      Status s = index::ReadLevel(file, img.kind, img.pieces, k, &out);
      if (!s.ok()) {
        FUZZ_CHECK(s.IsCorruption(), "level %d: %s", k, s.ToString().c_str());
        lower_failed = true;
        continue;
      }
      FUZZ_CHECK(!lower_failed, "image %zu: level %d reads but a lower level failed", i, k);
      FUZZ_CHECK(out.size() == index::LevelSize(img.kind, img.pieces, k), "level size");
      if (img.kind == EntryKind::kJpeg) {
        FUZZ_CHECK(out.size() >= 2 && out[out.size() - 2] == 0xFF && out.back() == 0xD9, "EOI");
      } else if (k == 1) {
        first = out;
      } else {
        FUZZ_CHECK(out == first, "passthrough differs between levels");
      }
    }
    if (img.kind == EntryKind::kJpeg) {
      FUZZ_CHECK(damaged[i] == lower_failed, "image %zu: verify says %d, reads say %d", i,
                 static_cast<int>(damaged[i]), static_cast<int>(lower_failed));
    } else {
      // Verify also checks the (empty) pieces 2..10, which a read never touches.
      FUZZ_CHECK(!lower_failed || damaged[i], "image %zu: unreadable but not damaged", i);
    }
  }
}

// Rewrites the header CRC and, when the header's table size fits in the file, the table CRC.
// Returns false when nothing changed.
bool FixChecksums(std::vector<uint8_t>* bytes) {
  std::vector<uint8_t>& b = *bytes;
  if (b.size() < index::kRecordHeaderSize) return false;
  const std::vector<uint8_t> before = b;
  const uint64_t table_size = DecodeFixed64(b.data() + 40);
  if (table_size >= 4 && table_size <= b.size() - index::kRecordHeaderSize) {
    const size_t crc_pos = static_cast<size_t>(index::kRecordHeaderSize + table_size - 4);
    const uint32_t crc =
        crc32c::Value(b.data() + index::kRecordHeaderSize, crc_pos - index::kRecordHeaderSize);
    EncodeFixed32(b.data() + crc_pos, crc32c::Mask(crc));
  }
  EncodeFixed32(b.data() + 60, crc32c::Mask(crc32c::Value(b.data(), 60)));
  return b != before;
}

}  // namespace
}  // namespace pcrfs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pcrfs::fuzz::CheckRecord(data, size);
  std::vector<uint8_t> fixed(data, data + size);
  if (pcrfs::fuzz::FixChecksums(&fixed)) pcrfs::fuzz::CheckRecord(fixed.data(), fixed.size());
  return 0;
}
