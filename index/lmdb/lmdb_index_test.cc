#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/proc_self.h"
#include "common/test_support.h"
#include "index/index_reader.h"
#include "index/lmdb/index_writer.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;

Entry Dir(uint64_t ino, uint64_t parent, std::string name, uint64_t first, uint64_t n,
          uint64_t subdirs) {
  Entry e;
  e.ino = ino;
  e.parent = parent;
  e.name = std::move(name);
  e.kind = EntryKind::kDirectory;
  e.mode = 0755;
  e.mtime_sec = 1600000000 + static_cast<int64_t>(ino);
  e.first_child = first;
  e.num_children = n;
  e.num_subdirs = subdirs;
  return e;
}

Entry File(uint64_t ino, uint64_t parent, std::string name, EntryKind kind) {
  Entry e;
  e.ino = ino;
  e.parent = parent;
  e.name = std::move(name);
  e.kind = kind;
  e.passthrough_reason =
      kind == EntryKind::kPassthrough ? PassthroughReason::kNotJpeg : PassthroughReason::kNone;
  e.mode = 0644;
  e.mtime_sec = 1600000000 + static_cast<int64_t>(ino);
  e.mtime_nsec = 5;
  e.source_size = 1000 * ino;
  e.record = 0;
  e.slot = static_cast<uint32_t>(ino);
  for (int g = 0; g < (kind == EntryKind::kJpeg ? kNumGroups : 1); ++g) {
    e.pieces[g] = PieceRef{100 * ino + static_cast<uint64_t>(g), ino + static_cast<uint64_t>(g),
                           static_cast<uint32_t>(ino * 31 + static_cast<uint64_t>(g))};
  }
  return e;
}

// /            1: a/ b.jpg empty/ z.txt
// /a           2: c/ x.jpg y.png
// /a/c         6: deep.jpg
std::vector<Entry> SampleTree() {
  return {
      Dir(1, 1, "", 2, 4, 2),
      Dir(2, 1, "a", 6, 3, 1),
      File(3, 1, "b.jpg", EntryKind::kJpeg),
      Dir(4, 1, "empty", 0, 0, 0),
      File(5, 1, "z.txt", EntryKind::kPassthrough),
      Dir(6, 2, "c", 9, 1, 0),
      File(7, 2, "x.jpg", EntryKind::kJpeg),
      File(8, 2, "y.png", EntryKind::kPassthrough),
      File(9, 6, "deep.jpg", EntryKind::kJpeg),
  };
}

RecordInfo SampleRecord(uint32_t id) {
  RecordInfo r;
  r.id = id;
  r.data_offset = 1000;
  for (int g = 0; g <= kNumGroups; ++g) r.group_offset[g] = 1000 + 100 * static_cast<uint64_t>(g);
  r.file_size = r.group_offset[kNumGroups] + 16;
  r.num_images = 6;
  return r;
}

void BuildIndex(const std::string& path) {
  auto w = IndexWriter::Create(path);
  ASSERT_TRUE(w.has_value()) << w.error().ToString();
  for (const Entry& e : SampleTree()) ASSERT_TRUE((*w)->AddEntry(e).ok()) << e.name;
  ASSERT_TRUE((*w)->AddRecord(SampleRecord(0)).ok());
  ASSERT_TRUE((*w)->AddRecord(SampleRecord(7)).ok());
  ASSERT_TRUE((*w)->PutMeta("generator", "pcrfs test").ok());
  Status s = (*w)->Finish();
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::vector<std::string> Names(const IndexReader& r, const Entry& dir, uint64_t start,
                               size_t limit = 100) {
  std::vector<std::string> names;
  Status s = r.List(dir, start, [&](const Entry& e) {
    names.push_back(e.name);
    return names.size() < limit;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return names;
}

TEST(StoreIndexTest, RecordFileName) {
  EXPECT_EQ(RecordFileName(0), "records/00000000.pcr");
  EXPECT_EQ(RecordFileName(42), "records/00000042.pcr");
  EXPECT_EQ(RecordFileName(4294967295u), "records/4294967295.pcr");
}

TEST(StoreIndexTest, LookupsAndListings) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  BuildIndex(path);
  // Only the index itself is left: no build env, lock file or .tmp.
  EXPECT_EQ(access((path + ".build").c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".build-lock").c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".tmp").c_str(), F_OK), -1);

  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  const IndexReader& idx = **r;
  EXPECT_EQ(idx.NumEntries(), 9u);

  for (const Entry& want : SampleTree()) {
    auto e = idx.Get(want.ino);
    ASSERT_TRUE(e.has_value()) << e.error().ToString();
    EXPECT_EQ(e->name, want.name);
    EXPECT_EQ(e->parent, want.parent);
    EXPECT_EQ(e->kind, want.kind);
    EXPECT_EQ(e->pieces, want.pieces);
    EXPECT_EQ(e->SizeAtLevel(3), want.SizeAtLevel(3));
    if (want.ino != kRootIno) {
      auto ino = idx.Lookup(want.parent, want.name);
      ASSERT_TRUE(ino.has_value());
      EXPECT_EQ(*ino, want.ino);
    }
  }
  EXPECT_TRUE(idx.Get(10).error().IsNotFound());
  EXPECT_TRUE(idx.Get(0).error().IsNotFound());
  EXPECT_TRUE(idx.Lookup(1, "nope").error().IsNotFound());
  EXPECT_TRUE(idx.Lookup(1, "x.jpg").error().IsNotFound());  // in /a, not in /
  EXPECT_TRUE(idx.Lookup(3, "x").error().IsNotFound());
  EXPECT_TRUE(idx.Lookup(1, "").error().IsNotFound());
  EXPECT_TRUE(idx.Lookup(1, "..").error().IsNotFound());

  EXPECT_EQ(idx.LookupPath("a/c/deep.jpg")->ino, 9u);
  EXPECT_EQ(idx.LookupPath("/a/c/")->ino, 6u);
  EXPECT_EQ(idx.LookupPath("")->ino, kRootIno);
  EXPECT_EQ(idx.LookupPath("/")->ino, kRootIno);
  EXPECT_EQ(idx.LookupPath("empty")->ino, 4u);
  EXPECT_TRUE(idx.LookupPath("a/nope").error().IsNotFound());
  EXPECT_TRUE(idx.LookupPath("b.jpg/x").error().IsNotFound());
  EXPECT_TRUE(idx.LookupPath("a/../b.jpg").error().IsNotFound());

  const Entry root = *idx.Get(kRootIno);
  EXPECT_EQ(Names(idx, root, 0), (std::vector<std::string>{"a", "b.jpg", "empty", "z.txt"}));
  EXPECT_EQ(Names(idx, root, 2), (std::vector<std::string>{"empty", "z.txt"}));
  EXPECT_EQ(Names(idx, root, 4), std::vector<std::string>{});
  EXPECT_EQ(Names(idx, root, 99), std::vector<std::string>{});
  EXPECT_EQ(Names(idx, root, 1, 2), (std::vector<std::string>{"b.jpg", "empty"}));
  EXPECT_EQ(Names(idx, *idx.Get(2), 0), (std::vector<std::string>{"c", "x.jpg", "y.png"}));
  EXPECT_EQ(Names(idx, *idx.Get(4), 0), std::vector<std::string>{});
  EXPECT_EQ(idx.List(*idx.Get(3), 0, [](const Entry&) { return true; }).code(),
            Status::Code::kInvalidArgument);

  auto rec = idx.GetRecord(7);
  ASSERT_TRUE(rec.has_value()) << rec.error().ToString();
  EXPECT_EQ(rec->id, 7u);
  EXPECT_EQ(rec->group_offset, SampleRecord(7).group_offset);
  EXPECT_EQ(rec->file_size, SampleRecord(7).file_size);
  EXPECT_EQ(rec->num_images, 6u);
  EXPECT_TRUE(idx.GetRecord(1).error().IsNotFound());
  EXPECT_EQ(*idx.GetMeta("generator"), "pcrfs test");
  EXPECT_EQ(*idx.GetMeta("index_format"), "3");
  EXPECT_EQ(idx.format(), 3);
  EXPECT_TRUE(idx.GetMeta("nope").error().IsNotFound());
  EXPECT_TRUE(idx.GetMeta("").error().IsNotFound());
}

TEST(StoreIndexTest, SameInputSameBytes) {
  TempDir a, b;
  BuildIndex(a.Join("index.lmdb"));
  BuildIndex(b.Join("other-name.lmdb"));
  const auto x = ReadAll(a.Join("index.lmdb"));
  const auto y = ReadAll(b.Join("other-name.lmdb"));
  EXPECT_FALSE(x.empty());
  EXPECT_EQ(x, y);
}

TEST(StoreIndexTest, WriterRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  {
    auto w = IndexWriter::Create(path);
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, 2, 0)).ok());
    Status s = (*w)->AddEntry(File(2, 1, "a/b", EntryKind::kJpeg));
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(s.message().find("a/b"), std::string::npos) << s.ToString();
    EXPECT_EQ((*w)->AddEntry(File(2, 1, "..", EntryKind::kJpeg)).code(),
              Status::Code::kInvalidArgument);
    EXPECT_EQ((*w)->AddEntry(File(2, 1, std::string(256, 'n'), EntryKind::kJpeg)).code(),
              Status::Code::kInvalidArgument);
    ASSERT_TRUE((*w)->AddEntry(File(3, 1, "b", EntryKind::kJpeg)).ok());
    EXPECT_EQ((*w)->AddEntry(File(2, 1, "c", EntryKind::kJpeg)).code(),
              Status::Code::kInvalidArgument);  // out of order
    Entry bad_mode = File(4, 1, "d", EntryKind::kJpeg);
    bad_mode.mode = 0100644;
    EXPECT_EQ((*w)->AddEntry(bad_mode).code(), Status::Code::kInvalidArgument);
    RecordInfo bad_rec = SampleRecord(1);
    bad_rec.file_size += 1;
    EXPECT_EQ((*w)->AddRecord(bad_rec).code(), Status::Code::kInvalidArgument);
    EXPECT_EQ((*w)->PutMeta("index_format", "2").code(), Status::Code::kInvalidArgument);
    EXPECT_EQ((*w)->AddEntry(File(5, 1, "b", EntryKind::kJpeg)).code(),
              Status::Code::kAlreadyExists);
  }
  // Abandoned: nothing left behind.
  EXPECT_EQ(access(path.c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".build").c_str(), F_OK), -1);
}

// An index whose meta says another format (checksums made to match): refused with a message
// that says what to do.
TEST(StoreIndexTest, OtherIndexFormatsAreRefused) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  BuildIndex(path);
  const auto good = ReadAll(path);
  const std::string needle = "index_format3";
  auto at = std::search(good.begin(), good.end(), needle.begin(), needle.end());
  ASSERT_NE(at, good.end());
  for (auto [format, advice] : {std::pair{'1', "rebuild the store"}, {'4', "use a newer pcrfs"}}) {
    auto other = good;
    other[static_cast<size_t>(at - good.begin()) + needle.size() - 1] =
        static_cast<uint8_t>(format);
    const size_t lmdb_size = other.size() - 32;
    uint8_t* trailer = other.data() + lmdb_size;
    EncodeFixed32(trailer + 24, crc32c::Mask(crc32c::Value(other.data(), lmdb_size)));
    EncodeFixed32(trailer + 28, crc32c::Mask(crc32c::Value(trailer, 28)));
    WriteAll(path, other);
    auto r = IndexReader::Open(path);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Status::Code::kNotSupported) << r.error().ToString();
    EXPECT_NE(r.error().message().find(std::string("index format \"") + format +
                                       "\" is not supported (this pcrfs reads 2 to 3; " + advice),
              std::string::npos)
        << r.error().ToString();
  }
}

// Pieces longer than one checksum block carry a CRC per block (index format 3).
TEST(StoreIndexTest, BlockCrcs) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  const std::vector<uint32_t> crcs = {11, 22, 33};
  {
    auto w = IndexWriter::Create(path);
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, 2, 0)).ok());
    Entry big = File(2, 1, "big", EntryKind::kPassthrough);
    ASSERT_TRUE((*w)->AddEntry(big).ok());
    EXPECT_EQ((*w)->AddBlockCrcs(1, 1, crcs).code(), Status::Code::kInvalidArgument);  // not last
    EXPECT_EQ((*w)->AddBlockCrcs(2, 0, crcs).code(), Status::Code::kInvalidArgument);
    EXPECT_EQ((*w)->AddBlockCrcs(2, 1, std::vector<uint32_t>{1}).code(),
              Status::Code::kInvalidArgument);  // one block: the piece's own CRC serves
    ASSERT_TRUE((*w)->AddBlockCrcs(2, 1, crcs).ok());
    ASSERT_TRUE((*w)->AddEntry(File(3, 1, "small", EntryKind::kJpeg)).ok());
    ASSERT_TRUE((*w)->AddBlockCrcs(3, 10, crcs).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ((*r)->format(), 3);
  for (uint64_t b = 0; b < crcs.size(); ++b) EXPECT_EQ(*(*r)->GetBlockCrc(2, 1, b), crcs[b]);
  EXPECT_EQ(*(*r)->GetBlockCrc(3, 10, 2), 33u);
  EXPECT_TRUE((*r)->GetBlockCrc(2, 1, 3).error().IsCorruption());
  EXPECT_TRUE((*r)->GetBlockCrc(2, 2, 0).error().IsCorruption());  // a piece that needs them
}

// Stores built before block CRCs (index format 2) still open; they have none.
TEST(StoreIndexTest, Format2StillOpens) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  {
    auto w = IndexWriter::Create(path, kOldestIndexFormat);
    ASSERT_TRUE(w.has_value());
    for (const Entry& e : SampleTree()) ASSERT_TRUE((*w)->AddEntry(e).ok()) << e.name;
    EXPECT_EQ((*w)->AddBlockCrcs(SampleTree().back().ino, 1, std::vector<uint32_t>{1, 2}).code(),
              Status::Code::kInvalidArgument);
    ASSERT_TRUE((*w)->Finish().ok());
  }
  EXPECT_FALSE(IndexWriter::Create(dir.Join("x.lmdb"), 1).has_value());
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_EQ((*r)->format(), 2);
  EXPECT_EQ(*(*r)->GetMeta("index_format"), "2");
  EXPECT_TRUE((*r)->GetBlockCrc(2, 1, 0).error().IsNotFound());
  EXPECT_TRUE((*r)->LookupPath("").has_value());
}

TEST(StoreIndexTest, DamagedFilesFailCleanly) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  BuildIndex(path);
  const auto good = ReadAll(path);
  ASSERT_GT(good.size(), 4096u);
  const std::string bad = dir.Join("bad.lmdb");

  // Every single flipped byte (flipped in place and restored: rewriting the file each time is
  // slow on some filesystems).
  WriteAll(bad, good);
  {
    const int fd = ::open(bad.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    for (size_t off = 0; off < good.size(); ++off) {
      const uint8_t flipped = good[off] ^ 0x01;
      ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(off)), 1);
      auto r = IndexReader::Open(bad);
      ASSERT_EQ(::pwrite(fd, &good[off], 1, static_cast<off_t>(off)), 1);
      ASSERT_FALSE(r.has_value()) << "offset " << off;
      ASSERT_TRUE(r.error().IsCorruption()) << r.error().ToString();
    }
    ::close(fd);
  }
  // Every truncation length class, and some extensions.
  for (size_t len : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{4096}, good.size() / 2,
                     good.size() - 33, good.size() - 32, good.size() - 1}) {
    WriteAll(bad, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(len)));
    auto r = IndexReader::Open(bad);
    ASSERT_FALSE(r.has_value()) << "length " << len;
    EXPECT_TRUE(r.error().IsCorruption()) << r.error().ToString();
    EXPECT_NE(r.error().message().find(bad), std::string::npos);
  }
  auto longer = good;
  longer.push_back(0);
  WriteAll(bad, longer);
  EXPECT_TRUE(IndexReader::Open(bad).error().IsCorruption());
  // Not an index at all.
  WriteAll(bad, std::vector<uint8_t>(10000, 'x'));
  EXPECT_TRUE(IndexReader::Open(bad).error().IsCorruption());
  EXPECT_TRUE(IndexReader::Open(dir.Join("missing.lmdb")).error().IsNotFound());
  EXPECT_FALSE(IndexReader::Open(dir.path()).has_value());
  // And the good one still opens.
  WriteAll(bad, good);
  EXPECT_TRUE(IndexReader::Open(bad).has_value());
}

// A tree big enough to span many write transactions (the writer commits every 32,768 puts) and
// many LMDB pages: 30 directories of 1,000 files each.
void BuildWideIndex(const std::string& path, uint64_t dirs, uint64_t files_per_dir) {
  auto w = IndexWriter::Create(path);
  ASSERT_TRUE(w.has_value()) << w.error().ToString();
  ASSERT_TRUE((*w)->AddEntry(Dir(kRootIno, kRootIno, "", 2, dirs, dirs)).ok());
  uint64_t next = 2 + dirs;
  for (uint64_t d = 0; d < dirs; ++d) {
    char name[24];
    std::snprintf(name, sizeof name, "d%04llu", static_cast<unsigned long long>(d));
    ASSERT_TRUE((*w)->AddEntry(Dir(2 + d, kRootIno, name, next, files_per_dir, 0)).ok());
    next += files_per_dir;
  }
  next = 2 + dirs;
  for (uint64_t d = 0; d < dirs; ++d) {
    for (uint64_t f = 0; f < files_per_dir; ++f, ++next) {
      char name[32];
      std::snprintf(name, sizeof name, "img_%06llu.jpg", static_cast<unsigned long long>(f));
      Status s = (*w)->AddEntry(File(next, 2 + d, name, EntryKind::kJpeg));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(StoreIndexTest, ManyEntriesAcrossTransactions) {
  TempDir dir;
  const std::string path = dir.Join("wide.lmdb");
  BuildWideIndex(path, 30, 1000);
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  const IndexReader& idx = **r;
  EXPECT_EQ(idx.NumEntries(), 1u + 30 + 30000);
  for (unsigned long long d : {0ull, 17ull, 29ull}) {
    char dname[16];
    std::snprintf(dname, sizeof dname, "d%04llu", d);
    auto dir_entry = idx.LookupPath(dname);
    ASSERT_TRUE(dir_entry.has_value()) << dname;
    // The whole listing, and one resumed in the middle, walk the children in order.
    std::vector<std::string> names;
    ASSERT_TRUE(idx.List(*dir_entry, 0,
                         [&](const Entry& e) {
                           names.push_back(e.name);
                           return true;
                         })
                    .ok());
    ASSERT_EQ(names.size(), 1000u);
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(names[999], "img_000999.jpg");
    std::vector<uint64_t> inos;
    ASSERT_TRUE(idx.List(*dir_entry, 998,
                         [&](const Entry& e) {
                           inos.push_back(e.ino);
                           return true;
                         })
                    .ok());
    EXPECT_EQ(inos,
              (std::vector<uint64_t>{dir_entry->first_child + 998, dir_entry->first_child + 999}));
    auto f = idx.LookupPath(std::string(dname) + "/img_000500.jpg");
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->ino, dir_entry->first_child + 500);
    EXPECT_EQ(f->pieces[3].offset, File(f->ino, 0, "", EntryKind::kJpeg).pieces[3].offset);
  }
}

// ListNames gives exactly what List gives (name, inode, kind), from the dirents alone, from any
// start, with a right, a wrong or no hint for the name of the first child.
void ExpectListNamesMatchesList(const IndexReader& idx, const Entry& dir) {
  std::vector<Entry> want;
  ASSERT_TRUE(idx.List(dir, 0, [&](const Entry& e) { return want.push_back(e), true; }).ok());
  ASSERT_EQ(want.size(), dir.num_children);
  for (uint64_t start = 0; start <= want.size(); ++start) {
    const std::string right = start < want.size() ? want[start].name : "";
    for (std::string hint :
         {right, std::string(), std::string("not-a-child"),
          want.empty() ? std::string("x") : want.front().name, std::string("bad/name")}) {
      std::vector<std::pair<std::string, uint64_t>> got;
      std::vector<EntryKind> kinds;
      Status s = idx.ListNames(dir, start, hint, [&](const IndexReader::DirEntry& d) {
        got.emplace_back(std::string(d.name), d.ino);
        kinds.push_back(d.kind);
        return true;
      });
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(got.size(), want.size() - start) << "start " << start << " hint " << hint;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[start + i].name);
        EXPECT_EQ(got[i].second, want[start + i].ino);
        EXPECT_EQ(kinds[i], want[start + i].kind);
      }
    }
  }
  // fn returning false stops the walk.
  size_t calls = 0;
  ASSERT_TRUE(
      idx.ListNames(dir, 0, "", [&](const IndexReader::DirEntry&) { return ++calls < 2; }).ok());
  EXPECT_EQ(calls, std::min<size_t>(2, want.size()));
}

TEST(StoreIndexTest, ListNamesMatchesList) {
  TempDir dir;
  const std::string path = dir.Join("index.lmdb");
  BuildIndex(path);
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  for (uint64_t ino : {1, 2, 4, 6}) {
    SCOPED_TRACE(ino);
    ExpectListNamesMatchesList(**r, *(*r)->Get(ino));
  }
  EXPECT_EQ((*r)->ListNames(*(*r)->Get(3), 0, "", [](auto&) { return true; }).code(),
            Status::Code::kInvalidArgument);

  const std::string wide = dir.Join("wide.lmdb");
  BuildWideIndex(wide, 3, 300);
  auto w = IndexReader::Open(wide);
  ASSERT_TRUE(w.has_value()) << w.error().ToString();
  ExpectListNamesMatchesList(**w, *(*w)->LookupPath("d0001"));
}

TEST(StoreIndexTest, DirentsOutOfOrderStillWork) {
  // Depth-first inode numbers: the dirent keys (parent, name) do not increase with the inode,
  // so they cannot be appended; the writer falls back to ordinary puts.
  //   1: /  -> 2: a/ (children 3, 4), 5: b (file)
  TempDir dir;
  const std::string path = dir.Join("dfs.lmdb");
  auto w = IndexWriter::Create(path);
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, 2, 1)).ok());
  ASSERT_TRUE((*w)->AddEntry(Dir(2, 1, "a", 3, 2, 0)).ok());
  ASSERT_TRUE((*w)->AddEntry(File(3, 2, "x.jpg", EntryKind::kJpeg)).ok());
  ASSERT_TRUE((*w)->AddEntry(File(4, 2, "y.jpg", EntryKind::kJpeg)).ok());
  ASSERT_TRUE((*w)->AddEntry(File(5, 1, "b", EntryKind::kPassthrough)).ok());  // (1,"b") < (2,..)
  // A real duplicate is still refused.
  Status dup = (*w)->AddEntry(File(6, 2, "x.jpg", EntryKind::kJpeg));
  EXPECT_EQ(dup.code(), Status::Code::kAlreadyExists) << dup.ToString();
}

TEST(StoreIndexTest, DirentsAppendedInOrderAndDuplicatesRefused) {
  TempDir dir;
  auto w = IndexWriter::Create(dir.Join("dup.lmdb"));
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, 2, 0)).ok());
  ASSERT_TRUE((*w)->AddEntry(File(2, 1, "same.jpg", EntryKind::kJpeg)).ok());
  Status dup = (*w)->AddEntry(File(3, 1, "same.jpg", EntryKind::kJpeg));
  EXPECT_EQ(dup.code(), Status::Code::kAlreadyExists) << dup.ToString();
  EXPECT_NE(dup.message().find("already has a child"), std::string::npos) << dup.ToString();
}

TEST(StoreIndexTest, VerifiedIdentitySkipsTheWholeFileCheckOnlyForThatFile) {
  TempDir dir;
  const std::string path = dir.Join("wide.lmdb");
  BuildWideIndex(path, 4, 1000);
  auto first = IndexReader::Open(path);
  ASSERT_TRUE(first.has_value());
  const FileIdentity verified = (*first)->identity();
  EXPECT_TRUE(IndexReader::Open(path, &verified).has_value());

  // Damage a byte in the middle (LMDB does not look there at open). The file's ctime changes,
  // so the identity no longer matches and the whole-file check finds it.
  auto bytes = ReadAll(path);
  const size_t off = bytes.size() / 2;
  bytes[off] ^= 0x40;
  WriteAll(path, bytes);
  auto again = IndexReader::Open(path, &verified);
  ASSERT_FALSE(again.has_value());
  EXPECT_TRUE(again.error().IsCorruption()) << again.error().ToString();
  // Only an identity taken from this very file skips the check (which is what it is for: the
  // daemon reopening the file it verified a moment ago).
  FileIdentity now;
  {
    auto probe = IndexReader::Open(path);
    ASSERT_FALSE(probe.has_value());
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    now = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
           static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
           st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
  }
  EXPECT_TRUE(IndexReader::Open(path, &now).has_value());
}

TEST(StoreIndexTest, ReleaseMappedPagesKeepsEverythingReadable) {
  TempDir dir;
  const std::string path = dir.Join("wide.lmdb");
  BuildWideIndex(path, 10, 1000);
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value());
  const IndexReader& idx = **r;
  auto count_all = [&] {
    uint64_t n = 0;
    auto root = idx.Get(kRootIno);
    EXPECT_TRUE(root.has_value());
    EXPECT_TRUE(idx.List(*root, 0,
                         [&](const Entry& d) {
                           EXPECT_TRUE(
                               idx.List(d, 0, [&](const Entry&) { return ++n, true; }).ok());
                           return true;
                         })
                    .ok());
    return n;
  };
  EXPECT_EQ(count_all(), 10000u);
  // The touched pages were in the resident set, and releasing takes them out.
  auto shared_bytes = [] {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0, shared = 0;
    statm >> size >> resident >> shared;
    return shared * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  };
  const uint64_t file_size = ReadAll(path).size();
  const uint64_t before = shared_bytes();
  idx.ReleaseMappedPages();
  const uint64_t after = shared_bytes();
  EXPECT_GE(before, after + file_size / 2) << "file " << file_size << " after " << after;
  // Release while other threads read: nothing is lost, nothing crashes.
  std::atomic<bool> stop{false};
  std::thread releaser([&] {
    while (!stop) idx.ReleaseMappedPages();
  });
  for (int i = 0; i < 5; ++i) EXPECT_EQ(count_all(), 10000u);
  stop = true;
  releaser.join();
  EXPECT_EQ(count_all(), 10000u);
}

TEST(StoreIndexTest, MappedBudgetBoundsTheResidentIndex) {
  // 500 x 1,000 entries: a ~90 MB index. Random lookups map it a page cache folio at a time (64
  // KiB around each fault, or a whole large folio); with a budget the reader unmaps it every
  // 16 calls once over the budget, so what stays mapped is the budget plus at most 16 lookups'
  // worth, whatever the index size.
  TempDir dir;
  const std::string path = dir.Join("big.lmdb");
  BuildWideIndex(path, 500, 1000);
  auto r = IndexReader::Open(path);
  ASSERT_TRUE(r.has_value());
  const IndexReader& idx = **r;
  const uint64_t file_size = ReadAll(path).size();
  ASSERT_GT(file_size, uint64_t{70} << 20);
  auto random_gets = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 50000; ++i) {
      ASSERT_TRUE(idx.Get(1 + rng() % idx.NumEntries()).has_value());
    }
  };
  auto grown = [](uint64_t base) {
    const uint64_t now = proc::ResidentFileBytes();
    return now > base ? now - base : 0;
  };
  idx.ReleaseMappedPages();
  const uint64_t base = proc::ResidentFileBytes();
  random_gets(1);
  const uint64_t unbounded = grown(base);
  EXPECT_GT(unbounded, file_size * 2 / 3);
  idx.ReleaseMappedPages();
  idx.SetMappedBudget(base + (uint64_t{2} << 20));
  random_gets(2);
  const uint64_t bounded = grown(base);
  EXPECT_LT(bounded, file_size / 3) << "unbounded " << unbounded;
  idx.SetMappedBudget(0);
}

TEST(StoreIndexTest, ConcurrentReaders) {
  TempDir dir;
  BuildIndex(dir.Join("index.lmdb"));
  auto r = IndexReader::Open(dir.Join("index.lmdb"));
  ASSERT_TRUE(r.has_value());
  const IndexReader& idx = **r;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto e = idx.LookupPath("a/c/deep.jpg");
        if (!e || e->ino != 9) ++failures;
        auto root = idx.Get(kRootIno);
        if (!root || Names(idx, *root, 0).size() != 4) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace pcrfs::index

namespace pcrfs::index {
namespace {

// Names that Linux cannot hold in one path component never reach the index; every other byte
// string (non-UTF-8, control bytes, 255 bytes) is kept exactly.
TEST(StoreIndexTest, WriterRefusesNamesLinuxCannotHoldAndKeepsTheRest) {
  TempDir dir;
  const std::vector<std::string> bad = {
      "a/b", "/", std::string("nul\0byte", 8), std::string(256, 'x'), "", ".", ".."};
  for (const std::string& name : bad) {
    auto w = IndexWriter::Create(dir.Join("bad.lmdb"));
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, 1, 0)).ok());
    Status s = (*w)->AddEntry(File(2, 1, name, EntryKind::kJpeg));
    EXPECT_FALSE(s.ok()) << "name of " << name.size() << " bytes accepted";
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  }
  const std::vector<std::string> good = {std::string(255, 'y'),
                                         "\xff\xfe latin-1 \xe9",
                                         "tab\there",
                                         "new\nline",
                                         "...",
                                         " lead",
                                         "\x01"};
  std::vector<std::string> sorted = good;
  std::sort(sorted.begin(), sorted.end());
  {
    auto w = IndexWriter::Create(dir.Join("good.lmdb"));
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE((*w)->AddEntry(Dir(1, 1, "", 2, sorted.size(), 0)).ok());
    for (size_t i = 0; i < sorted.size(); ++i) {
      Status s = (*w)->AddEntry(File(2 + i, 1, sorted[i], EntryKind::kJpeg));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto r = IndexReader::Open(dir.Join("good.lmdb"));
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  for (size_t i = 0; i < sorted.size(); ++i) {
    auto ino = (*r)->Lookup(1, sorted[i]);
    ASSERT_TRUE(ino.has_value()) << i;
    EXPECT_EQ((*r)->Get(*ino)->name, sorted[i]);
  }
}

}  // namespace
}  // namespace pcrfs::index
