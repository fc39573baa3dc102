// Fuzz target: a disk cache folder's segment index (common/segment_store.h), as a crash or a
// damaged disk may leave it. The input is a segment's .idx bytes after a 4-byte little-endian
// size of its .seg (mod 1 MiB). It must never crash or read outside a buffer. Invariants:
//   - SegmentStore::ParseIndex keeps only whole 32-byte entries whose bytes lie within the
//     segment, each one re-encoding to its own input bytes;
//   - a SegmentStore opened on a folder holding that segment adopts exactly those entries, and
//     reading each gives its bytes or a Corruption (its CRC does not match), never anything else.
// Seeds: tests/fuzz/regressions/segment_index_fuzzer.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/coding.h"
#include "common/file_util.h"
#include "common/segment_store.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// A temporary folder for the process, removed at exit (never destroyed before that).
const std::string& Folder() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/segment_index_fuzzer.XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    auto* s = new std::string(d);
    std::atexit([] { std::filesystem::remove_all(Folder()); });
    return s;
  }();
  return *dir;
}

void Write(const std::string& path, std::span<const uint8_t> bytes) {
  auto fd = pcrfs::OpenFile(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FUZZ_CHECK(fd.has_value(), "cannot write %s", path.c_str());
  FUZZ_CHECK(pcrfs::WriteFull(fd->get(), bytes.data(), bytes.size(), path).ok(), "write %s",
             path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  if (size < 4) return 0;
  const uint64_t data_size = DecodeFixed32(data) % (uint64_t{1} << 20);
  std::span<const uint8_t> idx(data + 4, size - 4);
  constexpr uint32_t kSeq = 7;
  const auto entries = SegmentStore::ParseIndex(idx, kSeq, data_size);
  FUZZ_CHECK(entries.size() <= idx.size() / SegmentStore::kEntryBytes, "more entries than fit");
  for (const auto& e : entries) {
    FUZZ_CHECK(e.where.seq == kSeq, "an entry of another segment");
    FUZZ_CHECK(uint64_t{e.where.offset} + e.where.length <= data_size,
               "an entry beyond its segment: %u + %u > %llu", e.where.offset, e.where.length,
               static_cast<unsigned long long>(data_size));
    uint8_t again[SegmentStore::kEntryBytes];
    SegmentStore::EncodeEntry(e, again);
    bool found = false;
    for (size_t i = 0; i + sizeof again <= idx.size() && !found; i += sizeof again) {
      found = std::memcmp(idx.data() + i, again, sizeof again) == 0;
    }
    FUZZ_CHECK(found, "an entry that does not re-encode to its input");
  }

  // The same bytes as a folder's only segment.
  const std::string dir = Folder() + "/cache";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<uint8_t> seg(static_cast<size_t>(data_size));
  for (size_t i = 0; i < seg.size(); ++i) seg[i] = static_cast<uint8_t>(i * 13);
  Write(dir + "/0000000000000007.seg", seg);
  Write(dir + "/0000000000000007.idx", idx);
  std::vector<SegmentStore::Entry> adopted;
  auto store = SegmentStore::Open(dir, uint64_t{1} << 30, [&](const SegmentStore::Entry& e) {
    adopted.push_back(e);
    return true;
  });
  FUZZ_CHECK(store.has_value() && *store != nullptr, "the folder does not open");
  FUZZ_CHECK(adopted.size() == entries.size(), "adopted %zu entries, parsed %zu", adopted.size(),
             entries.size());
  for (const auto& e : adopted) {
    std::vector<uint8_t> got(e.where.length);
    const Status s = (*store)->Read(e.where, 0, e.where.length, got.data());
    FUZZ_CHECK(s.ok() || s.code() == Status::Code::kCorruption, "read: %s", s.ToString().c_str());
    if (s.ok() && !got.empty()) {
      FUZZ_CHECK(std::memcmp(got.data(), seg.data() + e.where.offset, got.size()) == 0,
                 "read other bytes than the segment's");
    }
  }
  return 0;
}
