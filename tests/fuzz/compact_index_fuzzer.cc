// Fuzz target: index format 4, index.pcri (docs/format.md, "Index file (index.pcri)"), the index
// a store ships. The first byte selects: odd, every checksum of the rest is recomputed first
// (ResealCompactIndex), so the fuzzer reaches the decoders behind the checksums as a hostile
// store author would; even, the bytes are parsed as they are. Invariants beyond "no crash":
//   - a refused index is Corruption or NotSupported, naming the file;
//   - in an accepted index every entry decodes, every directory lists exactly its child range,
//     each child's parent is the directory, and Lookup(parent, name) finds each child;
//   - every file's record exists and its sizes are defined at every level;
//   - CompactIndexDeclaredSize (what a remote mount trusts of a first answer) refuses with
//     Corruption naming the file, and for an accepted index declares exactly its size.

#include <cstdint>
#include <string>

#include "index/compact_index.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  using namespace pcrfs::index;
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) ResealCompactIndex(&bytes);
  // What a remote mount reads of a server's first answer before it allocates the rest.
  auto declared = CompactIndexDeclaredSize("fuzz.pcri", bytes);
  if (!declared) {
    FUZZ_CHECK(declared.error().code() == Status::Code::kCorruption &&
                   declared.error().message().find("fuzz.pcri") != std::string::npos,
               "%s", declared.error().ToString().c_str());
  }
  auto idx = CompactIndex::Parse(
      "fuzz.pcri",
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!idx) {
    const Status& e = idx.error();
    FUZZ_CHECK(e.code() == Status::Code::kCorruption || e.code() == Status::Code::kNotSupported,
               "%s", e.ToString().c_str());
    FUZZ_CHECK(e.message().find("fuzz.pcri") != std::string::npos, "%s", e.ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(declared.has_value() && *declared == bytes.size(),
             "parsed, but its header does not declare its size");
  const CompactIndex& x = **idx;
  FUZZ_CHECK(x.NumEntries() >= 1, "no root");
  for (uint64_t ino = 1; ino <= x.NumEntries(); ++ino) {
    auto e = x.Get(ino);
    FUZZ_CHECK(e.has_value(), "Get(%llu): %s", static_cast<unsigned long long>(ino),
               e.error().ToString().c_str());
    if (!e->is_dir()) {
      FUZZ_CHECK(x.GetRecord(e->record).has_value(), "record");
      for (int k = 1; k <= kNumGroups; ++k) (void)e->SizeAtLevel(k);
      continue;
    }
    uint64_t n = 0;
    Status s = x.List(*e, 0, [&](const Entry& c) {
      FUZZ_CHECK(c.ino == e->first_child + n, "child order");
      FUZZ_CHECK(c.parent == ino, "child's parent");
      auto found = x.Lookup(ino, c.name);
      FUZZ_CHECK(found.has_value() && *found == c.ino, "lookup of a child");
      ++n;
      return true;
    });
    FUZZ_CHECK(s.ok(), "List: %s", s.ToString().c_str());
    FUZZ_CHECK(n == e->num_children, "child count");
    (void)x.Lookup(ino, "a");
  }
  (void)x.GetBlockCrc(2, 1, 0);
  (void)x.GetMeta("format_version");
  return 0;
}
