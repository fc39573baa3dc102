#include "index/compact_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/test_support.h"
#include "index/index_reader.h"
#include "index/lmdb/index_writer.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::TempDir;

constexpr uint32_t kPerRecord = 64;

// A tree numbered breadth-first, children in name order, its files packed into records of
// kPerRecord slots in inode order, every record full except perhaps the last.
struct Tree {
  std::vector<Entry> entries;  // entries[i].ino == i + 1
  std::vector<RecordInfo> records;
  std::vector<std::pair<uint64_t, int>> large;  // (ino, group) of pieces > 1 MiB
};

Tree MakeTree(uint32_t seed, const std::vector<uint64_t>& dir_sizes, bool huge_names = false) {
  std::mt19937_64 rng(seed);
  Tree t;
  Entry root;
  root.ino = 1;
  root.parent = 1;
  root.kind = EntryKind::kDirectory;
  root.mode = 0755;
  root.mtime_sec = -5;  // before the epoch
  root.first_child = 2;
  root.num_children = dir_sizes.size();
  root.num_subdirs = dir_sizes.size();
  t.entries.push_back(root);
  uint64_t next = 2 + dir_sizes.size();
  for (size_t d = 0; d < dir_sizes.size(); ++d) {
    Entry e;
    e.ino = 2 + d;
    e.parent = 1;
    char name[32];
    std::snprintf(name, sizeof(name), "n%08zu", d);
    e.name = name;
    e.kind = EntryKind::kDirectory;
    e.mode = 0755;
    e.mtime_sec = 1700000000 + static_cast<int64_t>(d);
    e.mtime_nsec = d % 2 ? 123456789 : 0;
    e.first_child = dir_sizes[d] ? next : 0;
    e.num_children = dir_sizes[d];
    next += dir_sizes[d];
    t.entries.push_back(e);
  }
  uint64_t files = 0;
  for (size_t d = 0; d < dir_sizes.size(); ++d) {
    std::vector<std::string> names;
    for (uint64_t i = 0; i < dir_sizes[d]; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "n%08zu_%06llu.JPEG", d,
                    static_cast<unsigned long long>(i * 7 + rng() % 7));
      names.push_back(name);
      if (huge_names && i % 3 == 0) {
        names.back() = std::string(230, 'x') + names.back() + std::to_string(1000 + i);
      }
    }
    std::sort(names.begin(), names.end());
    for (uint64_t i = 0; i < dir_sizes[d]; ++i) {
      Entry e;
      e.ino = t.entries.size() + 1;
      e.parent = 2 + d;
      e.name = names[i];
      const bool passthrough = rng() % 10 == 0;
      e.kind = passthrough ? EntryKind::kPassthrough : EntryKind::kJpeg;
      if (passthrough) e.passthrough_reason = PassthroughReason::kNotJpeg;
      e.mode = rng() % 5 == 0 ? 0600 : 0644;
      e.mtime_sec = 1600000000 + static_cast<int64_t>(rng() % 1000);
      e.mtime_nsec = static_cast<uint32_t>(rng() % 1000000000);
      e.record = static_cast<uint32_t>(files / kPerRecord);
      e.slot = static_cast<uint32_t>(files % kPerRecord);
      ++files;
      for (int g = 0; g < (passthrough ? 1 : kNumGroups); ++g) {
        e.pieces[static_cast<size_t>(g)].length = rng() % 3 == 0 ? 0 : rng() % 40000;
      }
      if (rng() % 500 == 0) {
        e.pieces[0].length = kChecksumBlockSize * 2 + 17;
        t.large.emplace_back(e.ino, 1);
      }
      e.source_size = e.SizeAtLevel(10) + 100;
      t.entries.push_back(e);
    }
  }
  // Records: regions exactly the sum of their pieces.
  for (uint64_t r = 0; r * kPerRecord < files; ++r) {
    RecordInfo info;
    info.id = static_cast<uint32_t>(r);
    info.data_offset = 4096;
    info.num_images = static_cast<uint32_t>(std::min<uint64_t>(kPerRecord, files - r * kPerRecord));
    std::array<uint64_t, kNumGroups> sums{};
    for (const Entry& e : t.entries) {
      if (e.is_dir() || e.record != r) continue;
      for (size_t g = 0; g < kNumGroups; ++g) sums[g] += e.pieces[g].length;
    }
    info.group_offset[0] = info.data_offset;
    for (size_t g = 0; g < kNumGroups; ++g)
      info.group_offset[g + 1] = info.group_offset[g] + sums[g];
    info.file_size = info.group_offset[kNumGroups] + 16;
    t.records.push_back(info);
  }
  return t;
}

std::vector<uint32_t> CrcsOf(uint64_t ino, int group, uint64_t n) {
  std::vector<uint32_t> c;
  for (uint64_t b = 0; b < n; ++b) c.push_back(static_cast<uint32_t>(ino * 1000 + group * 10 + b));
  return c;
}

Result<std::string> Write(const Tree& t, int level = 9) {
  CompactIndexWriter w("test.pcri", level);
  size_t li = 0;
  for (const Entry& e : t.entries) {
    PCRFS_RETURN_ERR_IF_ERROR(w.AddEntry(e));
    for (; li < t.large.size() && t.large[li].first == e.ino; ++li) {
      const uint64_t len = e.pieces[static_cast<size_t>(t.large[li].second - 1)].length;
      PCRFS_RETURN_ERR_IF_ERROR(w.AddBlockCrcs(
          e.ino, t.large[li].second, CrcsOf(e.ino, t.large[li].second, NumChecksumBlocks(len))));
    }
  }
  for (const RecordInfo& r : t.records) PCRFS_RETURN_ERR_IF_ERROR(w.AddRecord(r));
  PCRFS_RETURN_ERR_IF_ERROR(w.PutMeta("format_version", "1"));
  PCRFS_RETURN_ERR_IF_ERROR(w.PutMeta("num_records", std::to_string(t.records.size())));
  return w.Finish();
}

Result<std::unique_ptr<CompactIndex>> ParseBytes(const std::string& b) {
  return CompactIndex::Parse(
      "test.pcri", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
}

void ExpectSameEntry(const Entry& want, const Entry& got) {
  EXPECT_EQ(got.ino, want.ino);
  EXPECT_EQ(got.parent, want.parent);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.passthrough_reason, want.passthrough_reason);
  EXPECT_EQ(got.mode, want.mode);
  EXPECT_EQ(got.mtime_sec, want.mtime_sec);
  EXPECT_EQ(got.mtime_nsec, want.mtime_nsec);
  if (want.is_dir()) {
    if (want.num_children) {
      EXPECT_EQ(got.first_child, want.first_child);
    }
    EXPECT_EQ(got.num_children, want.num_children);
    EXPECT_EQ(got.num_subdirs, want.num_subdirs);
  } else {
    EXPECT_EQ(got.source_size, want.source_size);
    EXPECT_EQ(got.record, want.record);
    EXPECT_EQ(got.slot, want.slot);
    for (size_t g = 0; g < kNumGroups; ++g) {
      EXPECT_EQ(got.pieces[g].length, want.pieces[g].length) << want.ino << " group " << g;
    }
    EXPECT_FALSE(got.PiecesResolved(1));
  }
}

void CheckEverything(const Tree& t, const CompactIndex& idx) {
  ASSERT_EQ(idx.NumEntries(), t.entries.size());
  ASSERT_EQ(idx.NumRecords(), t.records.size());
  for (const Entry& want : t.entries) {
    auto got = idx.Get(want.ino);
    ASSERT_TRUE(got.has_value()) << got.error().ToString();
    ExpectSameEntry(want, *got);
    if (want.ino != kRootIno) {
      auto ino = idx.Lookup(want.parent, want.name);
      ASSERT_TRUE(ino.has_value()) << want.name << ": " << ino.error().ToString();
      EXPECT_EQ(*ino, want.ino);
      // Names just before and after, absent.
      EXPECT_TRUE(idx.Lookup(want.parent, want.name + "~").error().IsNotFound());
      EXPECT_TRUE(idx.Lookup(want.parent, want.name.substr(0, want.name.size() - 1) + " ")
                      .error()
                      .IsNotFound());
    }
    if (want.is_dir()) {
      EXPECT_TRUE(idx.Lookup(want.ino, "!").error().IsNotFound());
      EXPECT_TRUE(idx.Lookup(want.ino, "\x7f").error().IsNotFound());
      for (uint64_t start : {uint64_t{0}, uint64_t{1}, uint64_t{15}, uint64_t{16}, uint64_t{17},
                             want.num_children}) {
        std::vector<uint64_t> seen;
        ASSERT_TRUE(idx.List(want, start,
                             [&](const Entry& e) {
                               seen.push_back(e.ino);
                               return true;
                             })
                        .ok());
        const uint64_t n = start < want.num_children ? want.num_children - start : 0;
        ASSERT_EQ(seen.size(), n);
        for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], want.first_child + start + i);
      }
    }
  }
  EXPECT_TRUE(idx.Get(0).error().IsNotFound());
  EXPECT_TRUE(idx.Get(t.entries.size() + 1).error().IsNotFound());
  for (const RecordInfo& r : t.records) {
    auto got = idx.GetRecord(r.id);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->group_offset, r.group_offset);
    EXPECT_EQ(got->num_images, r.num_images);
    EXPECT_EQ(got->file_size, r.file_size);
  }
  EXPECT_TRUE(idx.GetRecord(static_cast<uint32_t>(t.records.size())).error().IsNotFound());
  for (auto [ino, group] : t.large) {
    const auto want = CrcsOf(ino, group, 3);
    for (uint64_t b = 0; b < 3; ++b) EXPECT_EQ(*idx.GetBlockCrc(ino, group, b), want[b]);
    EXPECT_FALSE(idx.GetBlockCrc(ino, group, 3).has_value());
  }
  EXPECT_TRUE(idx.GetBlockCrc(2, 1, 0).error().IsNotFound());
  EXPECT_EQ(*idx.GetMeta("index_format"), "4");
  EXPECT_EQ(*idx.GetMeta("num_records"), std::to_string(t.records.size()));
  EXPECT_TRUE(idx.GetMeta("nope").error().IsNotFound());
}

TEST(CompactIndexTest, RoundTripSmallAndRestartBoundaries) {
  // Directory sizes around the restart interval and chunk size, empty ones between.
  const Tree t = MakeTree(1, {0, 1, 15, 16, 17, 0, 31, 32, 33, 2, 0});
  for (int level : {0, 3, 9}) {
    auto bytes = Write(t, level);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
    auto idx = ParseBytes(*bytes);
    ASSERT_TRUE(idx.has_value()) << idx.error().ToString();
    CheckEverything(t, **idx);
  }
}

TEST(CompactIndexTest, RoundTripTenThousandEntriesAndHugeNames) {
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(static_cast<uint64_t>(i * 13 % 500));
  sizes.push_back(4100);  // one directory across a chunk boundary
  const Tree t = MakeTree(2, sizes, /*huge_names=*/true);
  ASSERT_GT(t.entries.size(), 10000u);
  auto bytes = Write(t);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  auto idx = ParseBytes(*bytes);
  ASSERT_TRUE(idx.has_value()) << idx.error().ToString();
  CheckEverything(t, **idx);
  // Written to disk and opened again.
  TempDir dir;
  ASSERT_TRUE(WriteCompactIndexFile(dir.Join("index.pcri"), *bytes).ok());
  auto opened = CompactIndex::Open(dir.Join("index.pcri"));
  ASSERT_TRUE(opened.has_value()) << opened.error().ToString();
  EXPECT_EQ((*opened)->NumEntries(), t.entries.size());
  // The in-memory form is about the raw entry size.
  EXPECT_LT((*opened)->MemoryBytes(), t.entries.size() * 120);
}

TEST(CompactIndexTest, HeldEntriesTakeTheirBytesNotTheGrowthOfTheirBuffer) {
  // Stored uncompressed, the file holds every raw entry byte once: the parsed index holds no
  // more than that, its restart offsets and the records (appending 3 chunks one by one had
  // reserved up to twice the entries' bytes).
  std::vector<uint64_t> sizes(30, 400);
  const Tree t = MakeTree(4, sizes);
  auto bytes = Write(t, /*level=*/0);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  auto idx = ParseBytes(*bytes);
  ASSERT_TRUE(idx.has_value()) << idx.error().ToString();
  ASSERT_GT(t.entries.size(), 2 * kCompactEntriesPerChunk);
  const uint64_t restarts = (t.entries.size() / kCompactRestartInterval + 1) * 8;
  EXPECT_LE((*idx)->MemoryBytes(),
            bytes->size() + restarts + (*idx)->NumRecords() * sizeof(RecordInfo));
}

TEST(CompactIndexTest, RootOnly) {
  Tree t = MakeTree(3, {});
  t.entries[0].num_children = 0;
  t.entries[0].first_child = 0;
  auto bytes = Write(t);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  auto idx = ParseBytes(*bytes);
  ASSERT_TRUE(idx.has_value()) << idx.error().ToString();
  EXPECT_EQ((*idx)->NumEntries(), 1u);
  EXPECT_TRUE((*idx)->Lookup(1, "x").error().IsNotFound());
}

// Every invariant across entries: the writer refuses the index with the reader's message.
TEST(CompactIndexTest, WriterRefusesWhatTheReaderWould) {
  auto expect_refused = [](Tree t, const std::string& want) {
    auto bytes = Write(t);
    ASSERT_FALSE(bytes.has_value()) << want;
    EXPECT_NE(bytes.error().message().find(want), std::string::npos) << bytes.error().ToString();
  };
  const Tree good = MakeTree(4, {3, 20});
  {
    Tree t = good;  // siblings out of order
    std::swap(t.entries[4].name, t.entries[5].name);
    expect_refused(t, "names not strictly increasing");
  }
  {
    Tree t = good;  // a duplicate name
    t.entries[5].name = t.entries[4].name;
    expect_refused(t, "names not strictly increasing");
  }
  {
    Tree t = good;  // a child claiming another parent
    t.entries[4].parent = 3;
    expect_refused(t, "not in its parent's child range");
  }
  {
    Tree t = good;  // a parent that is a file
    t.entries[7].parent = 5;
    expect_refused(t, "parent is not a directory");
  }
  {
    Tree t = good;  // a child range past the end
    t.entries[2].num_children = 21;
    expect_refused(t, "child range past the last entry");
  }
  {
    Tree t = good;  // a child count that does not match
    t.entries[2].num_children = 19;
    expect_refused(t, "not in its parent's child range");
  }
  {
    Tree t = good;
    t.entries[0].num_subdirs = 1;
    expect_refused(t, "child counts do not match");
  }
  {
    Tree t = good;  // a record that does not exist
    t.entries[4].record = 9;
    expect_refused(t, "record 9 unknown");
  }
  {
    Tree t = good;  // a slot past the record
    t.entries[4].slot = 64;
    expect_refused(t, "past its record");
  }
  {
    Tree t = good;  // one slot used twice (and none by another)
    t.entries[5].slot = t.entries[4].slot;
    expect_refused(t, "used by two files");
  }
  {
    Tree t = good;  // pieces overflowing their region
    t.entries[4].pieces[0].length = t.records[0].group_offset[1] - t.records[0].group_offset[0] + 1;
    expect_refused(t, "overflow the region");
  }
  {
    Tree t = good;  // a full record whose pieces do not fill a region
    t.records[0].group_offset[1] += 1;
    for (size_t g = 2; g <= kNumGroups; ++g) t.records[0].group_offset[g] += 1;
    t.records[0].file_size += 1;
    expect_refused(t, "do not fill its region");
  }
  {
    Tree t = good;  // block CRCs for a small piece
    t.large.emplace_back(5, 1);
    expect_refused(t, "block CRCs of inode 5 group 1");
  }
}

void Reseal(std::string* b) { ResealCompactIndex(b); }

TEST(CompactIndexTest, DamageIsCorruptionNeverACrash) {
  const Tree t = MakeTree(5, {5, 40, 0, 17});
  auto bytes = Write(t, /*level=*/0);
  ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
  ASSERT_TRUE(ParseBytes(*bytes).has_value());
  // Every truncation.
  for (size_t n = 0; n < bytes->size(); ++n) {
    auto r = ParseBytes(bytes->substr(0, n));
    ASSERT_FALSE(r.has_value()) << n;
    EXPECT_EQ(r.error().code(), Status::Code::kCorruption) << r.error().ToString();
  }
  // Every single byte changed, without and with the checksums recomputed: refused, or (with
  // resealed checksums, a change the format cannot tell) a valid index that reads without harm.
  for (size_t i = 0; i < bytes->size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string b = *bytes;
      b[i] = static_cast<char>(b[i] ^ x);
      auto r = ParseBytes(b);
      EXPECT_FALSE(r.has_value()) << "byte " << i;
      Reseal(&b);
      r = ParseBytes(b);
      if (!r) {
        EXPECT_TRUE(r.error().code() == Status::Code::kCorruption ||
                    r.error().code() == Status::Code::kNotSupported)
            << r.error().ToString();
        EXPECT_NE(r.error().message().find("test.pcri"), std::string::npos);
        continue;
      }
      for (uint64_t ino = 1; ino <= (*r)->NumEntries(); ++ino) {
        auto e = (*r)->Get(ino);
        ASSERT_TRUE(e.has_value()) << e.error().ToString();
        if (e->is_dir()) {
          (void)(*r)->List(*e, 0, [](const Entry&) { return true; });
          (void)(*r)->Lookup(ino, "n00000001_000001.JPEG");
        }
      }
    }
  }
}

TEST(CompactIndexTest, OtherVersionIsNotSupported) {
  const Tree t = MakeTree(6, {3});
  auto bytes = Write(t);
  ASSERT_TRUE(bytes.has_value());
  std::string b = *bytes;
  EncodeFixed32(reinterpret_cast<uint8_t*>(b.data()) + 8, 5);
  Reseal(&b);
  auto r = ParseBytes(b);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Status::Code::kNotSupported) << r.error().ToString();
}

// An LMDB index written by IndexWriter converts to an equal compact index.
TEST(CompactIndexTest, ConvertsAnLmdbIndex) {
  std::vector<uint64_t> sizes = {3, 0, 70, 16};
  const Tree t = MakeTree(7, sizes);
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  {
    auto w = IndexWriter::Create(path);
    ASSERT_TRUE(w.has_value());
    size_t li = 0;
    for (const Entry& e : t.entries) {
      Entry full = e;  // the LMDB form carries offsets and CRCs: the converter drops them
      for (size_t g = 0; g < kNumGroups; ++g) {
        full.pieces[g].offset = 100000 + e.ino * 100 + g;
        full.pieces[g].masked_crc = static_cast<uint32_t>(e.ino);
      }
      ASSERT_TRUE((*w)->AddEntry(full).ok());
      for (; li < t.large.size() && t.large[li].first == e.ino; ++li) {
        ASSERT_TRUE(
            (*w)->AddBlockCrcs(e.ino, t.large[li].second, CrcsOf(e.ino, t.large[li].second, 3))
                .ok());
      }
    }
    for (const RecordInfo& r : t.records) ASSERT_TRUE((*w)->AddRecord(r).ok());
    ASSERT_TRUE((*w)->PutMeta("format_version", "1").ok());
    ASSERT_TRUE((*w)->PutMeta("num_records", std::to_string(t.records.size())).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto source = LiblmdbRecordSource(path);
  ASSERT_TRUE(source.has_value()) << source.error().ToString();
  auto converted = ConvertLmdbIndex(path, *source);
  ASSERT_TRUE(converted.has_value()) << converted.error().ToString();
  auto direct = Write(t);
  ASSERT_TRUE(direct.has_value());
  EXPECT_EQ(*converted, *direct);  // the same bytes as writing the compact index directly
  auto idx = ParseBytes(*converted);
  ASSERT_TRUE(idx.has_value());
  CheckEverything(t, **idx);

  // A source failing midway fails the conversion with its error.
  auto failing = [&](std::string_view db, const LmdbRecordFn& fn) -> Status {
    if (db == "entries") return Status::Corruption("index.lmdb: page 7 points outside the file");
    return (*source)(db, fn);
  };
  auto bad = ConvertLmdbIndex(path, failing);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("page 7"), std::string::npos);
}

}  // namespace
}  // namespace pcrfs::index
