// Fuzz target: the index entry decoder (docs/format.md, "Index"). The first 8 bytes are the
// inode number (little-endian), the rest the LMDB value. Invariants beyond "no crash":
//   - DecodeEntry is strict, and varints must be minimal, so an accepted value is exactly the
//     encoding of what it decoded to: EncodeEntry(DecodeEntry(v)) == v;
//   - an accepted entry's name is valid (or empty for the root), and its sizes are defined at
//     every level.

#include <cstdint>
#include <string_view>

#include "common/coding.h"
#include "index/entry.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  if (size < 8) return 0;
  const uint64_t ino = DecodeFixed64(data);
  std::string_view value(reinterpret_cast<const char*>(data + 8), size - 8);
  auto entry = index::DecodeEntry(ino, value);
  if (!entry) {
    FUZZ_CHECK(entry.error().IsCorruption(), "%s", entry.error().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(entry->ino == ino, "ino");
  FUZZ_CHECK(ino == index::kRootIno ? entry->name.empty() : index::IsValidName(entry->name),
             "name");
  const std::string encoded = index::EncodeEntry(*entry);
  FUZZ_CHECK(encoded == value, "re-encoding differs (%zu vs %zu bytes)", encoded.size(),
             value.size());
  for (int k = 1; k <= index::kNumGroups; ++k) (void)entry->SizeAtLevel(k);
  return 0;
}
