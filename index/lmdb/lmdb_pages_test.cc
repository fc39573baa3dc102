#include "index/lmdb/lmdb_pages.h"

#include <gtest/gtest.h>
#include <lmdb.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/test_support.h"
#include "index/index_reader.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/index_writer.h"
#include "index/lmdb/lmdb_util.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;
using Records = std::vector<std::pair<std::string, std::string>>;

const char* const kDbs[] = {lmdb::kEntriesDb, lmdb::kDirentsDb, lmdb::kRecordsDb, lmdb::kMetaDb,
                            lmdb::kBlocksDb};

Entry MakeFile(uint64_t ino, uint64_t parent, std::string name) {
  Entry e;
  e.ino = ino;
  e.parent = parent;
  e.name = std::move(name);
  e.kind = EntryKind::kJpeg;
  e.mode = 0644;
  e.mtime_sec = 1600000000 + static_cast<int64_t>(ino);
  e.source_size = 1000 * ino;
  e.record = static_cast<uint32_t>(ino / 100);
  e.slot = static_cast<uint32_t>(ino % 100);
  for (int g = 0; g < kNumGroups; ++g) {
    e.pieces[g] = PieceRef{100 * ino + static_cast<uint64_t>(g), ino + static_cast<uint64_t>(g),
                           static_cast<uint32_t>(ino * 31 + static_cast<uint64_t>(g))};
  }
  return e;
}

// An index of one folder of `num_files` JPEG entries, their records, a few meta keys (one of
// `big_meta` bytes) and, for the first file, block CRCs of `num_blocks` blocks (an overflow value
// when 4 * num_blocks is over a page). Format 2 has no blocks database.
std::vector<uint8_t> BuildIndex(const TempDir& dir, uint64_t num_files, size_t big_meta,
                                size_t num_blocks, int format = kIndexFormat) {
  const std::string path = dir.Join("index-" + std::to_string(num_files) + ".lmdb");
  auto w = IndexWriter::Create(path, format);
  EXPECT_TRUE(w.has_value()) << w.error().ToString();
  if (!w) return {};
  Entry root;
  root.ino = kRootIno;
  root.parent = kRootIno;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = num_files;
  EXPECT_TRUE((*w)->AddEntry(root).ok());
  for (uint64_t i = 0; i < num_files; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "n%08llu_%llx.JPEG", static_cast<unsigned long long>(i),
                  static_cast<unsigned long long>(i * 2654435761u));
    Status s = (*w)->AddEntry(MakeFile(2 + i, kRootIno, name));
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (i == 0 && num_blocks >= 2 && format >= 3) {
      std::vector<uint32_t> crcs(num_blocks);
      for (size_t b = 0; b < num_blocks; ++b) crcs[b] = static_cast<uint32_t>(b * 0x9E3779B9u);
      EXPECT_TRUE((*w)->AddBlockCrcs(2, 1, crcs).ok());
    }
  }
  for (uint32_t r = 0; r <= num_files / 100; ++r) {
    RecordInfo info;
    info.id = r;
    info.data_offset = 1000;
    for (int g = 0; g <= kNumGroups; ++g) {
      info.group_offset[g] = 1000 + 100 * static_cast<uint64_t>(g);
    }
    info.file_size = info.group_offset[kNumGroups] + 16;
    info.num_images = 100;
    EXPECT_TRUE((*w)->AddRecord(info).ok());
  }
  EXPECT_TRUE((*w)->PutMeta("generator", "lmdb_pages_test").ok());
  std::string big(big_meta, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  if (big_meta > 0) {
    EXPECT_TRUE((*w)->PutMeta("big", big).ok());
  }
  Status s = (*w)->Finish();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ReadAll(path);
}

std::span<const uint8_t> WithoutTrailer(const std::vector<uint8_t>& file) {
  return std::span<const uint8_t>(file).first(file.size() - IndexTrailer::kEncodedLength);
}

Result<Records> Walk(std::span<const uint8_t> file, std::string_view db) {
  Records out;
  Status s = ForEachLmdbRecord(file, db, [&](std::string_view k, std::string_view v) {
    // Views point into the file.
    EXPECT_GE(reinterpret_cast<const uint8_t*>(k.data()), file.data());
    EXPECT_LE(reinterpret_cast<const uint8_t*>(v.data() + v.size()), file.data() + file.size());
    out.emplace_back(k, v);
    return Status::OK();
  });
  if (!s.ok()) return Err(s);
  return out;
}

// The same database read by liblmdb through a cursor (the file is one this test wrote).
// Sets *stat (if given) to liblmdb's statistics of the database.
Records WalkWithLiblmdb(const std::string& path, const char* db, MDB_stat* stat = nullptr) {
  Records out;
  auto env = lmdb::OpenEnv(path, MDB_RDONLY | MDB_NOLOCK, size_t{1} << 30, 0);
  EXPECT_TRUE(env.has_value()) << env.error().ToString();
  if (!env) return out;
  MDB_txn* txn = nullptr;
  EXPECT_EQ(mdb_txn_begin(*env, nullptr, MDB_RDONLY, &txn), 0);
  MDB_dbi dbi = 0;
  EXPECT_EQ(mdb_dbi_open(txn, db, 0, &dbi), 0) << db;
  if (stat != nullptr) {
    EXPECT_EQ(mdb_stat(txn, dbi, stat), 0);
  }
  MDB_cursor* c = nullptr;
  EXPECT_EQ(mdb_cursor_open(txn, dbi, &c), 0);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    out.emplace_back(std::string(static_cast<const char*>(k.mv_data), k.mv_size),
                     std::string(static_cast<const char*>(v.mv_data), v.mv_size));
  }
  mdb_cursor_close(c);
  mdb_txn_abort(txn);
  mdb_env_close(*env);
  return out;
}

size_t PageSize(const std::vector<uint8_t>& file) {
  return static_cast<size_t>(file[40]) | static_cast<size_t>(file[41]) << 8 |
         static_cast<size_t>(file[42]) << 16;
}

TEST(LmdbPagesTest, SameRecordsAsLiblmdb) {
  TempDir dir;
  // Small: one leaf per database. Large: thousands of entries (branch pages, depth 2 or more),
  // block CRCs and a meta value in overflow pages.
  for (auto [files, big_meta, blocks] :
       {std::tuple<uint64_t, size_t, size_t>{3, 0, 0},
        std::tuple<uint64_t, size_t, size_t>{20000, 20000, 3000}}) {
    SCOPED_TRACE("files " + std::to_string(files));
    const std::vector<uint8_t> file = BuildIndex(dir, files, big_meta, blocks);
    ASSERT_FALSE(file.empty());
    const std::string path = dir.Join("index-" + std::to_string(files) + ".lmdb");
    size_t total = 0, overflow_pages = 0;
    std::map<std::string, unsigned> depths;
    for (const char* db : kDbs) {
      SCOPED_TRACE(db);
      auto mine = Walk(WithoutTrailer(file), db);
      ASSERT_TRUE(mine.has_value()) << mine.error().ToString();
      MDB_stat stat{};
      EXPECT_EQ(*mine, WalkWithLiblmdb(path, db, &stat));
      depths[db] = stat.ms_depth;
      overflow_pages += stat.ms_overflow_pages;
      // The trailer after the image changes nothing.
      auto with_trailer = Walk(file, db);
      ASSERT_TRUE(with_trailer.has_value()) << with_trailer.error().ToString();
      EXPECT_EQ(*with_trailer, *mine);
      total += mine->size();
    }
    if (files == 20000) {
      // What the walk must handle: branch pages and overflow runs.
      EXPECT_GE(depths[lmdb::kEntriesDb], 3u);
      EXPECT_GE(depths[lmdb::kDirentsDb], 2u);
      EXPECT_GT(overflow_pages, 2u);
      EXPECT_EQ(Walk(file, lmdb::kEntriesDb)->size(), 20001u);
      EXPECT_EQ(Walk(file, lmdb::kDirentsDb)->size(), 20000u);
      auto meta = Walk(file, lmdb::kMetaDb);
      ASSERT_EQ(meta->size(), 3u);
      EXPECT_EQ((*meta)[0].first, "big");
      EXPECT_EQ((*meta)[0].second.size(), 20000u);
      EXPECT_GT((*meta)[0].second.size(), PageSize(file));
      auto blocks_db = Walk(file, lmdb::kBlocksDb);
      ASSERT_EQ(blocks_db->size(), 1u);
      EXPECT_EQ((*blocks_db)[0].second.size(), 4 * 3000u);
    } else {
      EXPECT_EQ(total, 4u + 3u + 1u + 2u + 0u);
    }
  }
}

TEST(LmdbPagesTest, StopsWhenFnFails) {
  TempDir dir;
  const std::vector<uint8_t> file = BuildIndex(dir, 2000, 0, 0);
  int calls = 0;
  Status s = ForEachLmdbRecord(file, lmdb::kEntriesDb, [&](std::string_view, std::string_view) {
    return ++calls == 1500 ? Status::NotFound("enough") : Status::OK();
  });
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), "enough");
  EXPECT_EQ(calls, 1500);
}

TEST(LmdbPagesTest, MissingDatabase) {
  TempDir dir;
  const std::vector<uint8_t> file = BuildIndex(dir, 3, 0, 0, kOldestIndexFormat);
  using namespace std::string_view_literals;
  for (std::string_view db : {"blocks"sv, "nope"sv, ""sv, "entries\0"sv, "entrie"sv}) {
    Status s = ForEachLmdbRecord(file, db, [](std::string_view, std::string_view) {
      ADD_FAILURE() << "a record of a missing database";
      return Status::OK();
    });
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("no database"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(Walk(file, "entries").has_value());
}

TEST(LmdbPagesTest, NotLmdb) {
  const std::vector<uint8_t> empty;
  const std::vector<uint8_t> zeros(16384, 0);
  for (const std::vector<uint8_t>* f : {&empty, &zeros}) {
    Status s = ForEachLmdbRecord(*f, "entries",
                                 [](std::string_view, std::string_view) { return Status::OK(); });
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  }
  EXPECT_NE(ForEachLmdbRecord(zeros, "entries", [](auto, auto) { return Status::OK(); })
                .message()
                .find("no valid LMDB meta page"),
            std::string::npos);
}

// Every truncation at a page boundary (and one byte short of it) is Corruption for every
// database; the whole image is not.
TEST(LmdbPagesTest, Truncations) {
  TempDir dir;
  const std::vector<uint8_t> file = BuildIndex(dir, 3000, 9000, 2500);
  const size_t psize = PageSize(file);
  ASSERT_EQ(psize, 4096u);
  const size_t image = file.size() - IndexTrailer::kEncodedLength;
  ASSERT_EQ(image % psize, 0u);
  ASSERT_GT(image / psize, 20u);
  for (size_t n = 0; n <= image; n += psize) {
    for (size_t cut : {n, n > 0 ? n - 1 : 0}) {
      std::span<const uint8_t> part(file.data(), cut);
      for (const char* db : kDbs) {
        Status s = ForEachLmdbRecord(part, db, [](auto, auto) { return Status::OK(); });
        if (cut == image) {
          EXPECT_TRUE(s.ok()) << s.ToString();
        } else {
          ASSERT_TRUE(s.IsCorruption()) << cut << " " << db << ": " << s.ToString();
        }
      }
    }
  }
  Status s = ForEachLmdbRecord(std::span<const uint8_t>(file.data(), image - psize), "entries",
                               [](auto, auto) { return Status::OK(); });
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
}

// Thousands of seeded random byte changes: never a crash (run this under ASan too), and either
// Corruption or a walk a single changed byte explains: the same number of records, at most one of
// them different.
TEST(LmdbPagesTest, ByteFlips) {
  TempDir dir;
  for (auto [files, big_meta, blocks, flips] :
       {std::tuple<uint64_t, size_t, size_t, int>{3, 0, 0, 4000},
        std::tuple<uint64_t, size_t, size_t, int>{1500, 9000, 2500, 3000}}) {
    std::vector<uint8_t> file = BuildIndex(dir, files, big_meta, blocks);
    ASSERT_FALSE(file.empty());
    std::vector<Records> original;
    for (const char* db : kDbs) original.push_back(*Walk(file, db));
    std::mt19937_64 rng(files * 7919 + 17);
    int corruption = 0, same = 0, one_differs = 0;
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % (file.size() - IndexTrailer::kEncodedLength);
      const auto mask = static_cast<uint8_t>(1 + rng() % 255);
      file[at] ^= mask;
      for (size_t d = 0; d < std::size(kDbs); ++d) {
        auto got = Walk(file, kDbs[d]);
        if (!got) {
          ASSERT_TRUE(got.error().IsCorruption()) << got.error().ToString();
          ++corruption;
          continue;
        }
        ASSERT_EQ(got->size(), original[d].size())
            << "byte " << at << " ^ " << int{mask} << ", " << kDbs[d];
        size_t differ = 0;
        for (size_t r = 0; r < got->size(); ++r) differ += (*got)[r] != original[d][r];
        ASSERT_LE(differ, 1u) << "byte " << at << " ^ " << int{mask} << ", " << kDbs[d];
        ++(differ == 0 ? same : one_differs);
      }
      file[at] ^= mask;
    }
    // The flips hit headers and node tables as well as bytes the walk ignores.
    EXPECT_GT(corruption, 0);
    EXPECT_GT(same, 0);
    std::printf("%llu files, %d flips: %d Corruption, %d equal, %d with one record changed\n",
                static_cast<unsigned long long>(files), flips, corruption, same, one_differs);
  }
}

// What pcrfs never writes is refused by name: a DUPSORT database (liblmdb writes it here).
TEST(LmdbPagesTest, RefusesDupsort) {
  TempDir dir;
  const std::string path = dir.Join("dup.lmdb");
  auto env = lmdb::OpenEnv(path, 0, size_t{1} << 24, 0644);
  ASSERT_TRUE(env.has_value()) << env.error().ToString();
  MDB_txn* txn = nullptr;
  ASSERT_EQ(mdb_txn_begin(*env, nullptr, 0, &txn), 0);
  MDB_dbi plain = 0, dup = 0;
  ASSERT_EQ(mdb_dbi_open(txn, "plain", MDB_CREATE, &plain), 0);
  ASSERT_EQ(mdb_dbi_open(txn, "dup", MDB_CREATE | MDB_DUPSORT, &dup), 0);
  for (int i = 0; i < 3; ++i) {
    std::string k = "k", v = "v" + std::to_string(i);
    MDB_val kv = lmdb::Val(k.data(), k.size()), vv = lmdb::Val(v.data(), v.size());
    ASSERT_EQ(mdb_put(txn, dup, &kv, &vv, 0), 0);
    ASSERT_EQ(mdb_put(txn, plain, &kv, &vv, 0), 0);
  }
  ASSERT_EQ(mdb_txn_commit(txn), 0);
  mdb_env_close(*env);
  const std::vector<uint8_t> file = ReadAll(path);
  auto p = Walk(file, "plain");
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  EXPECT_EQ(*p, (Records{{"k", "v2"}}));
  Status s = ForEachLmdbRecord(file, "dup", [](auto, auto) { return Status::OK(); });
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("flags 0x4"), std::string::npos) << s.message();
}

// A branch page that refers to itself.
TEST(LmdbPagesTest, Cycle) {
  TempDir dir;
  std::vector<uint8_t> file = BuildIndex(dir, 3000, 0, 0);
  const size_t psize = PageSize(file);
  // Find a branch page (flags 0x01) and point its first child at itself.
  size_t branch = 0;
  for (size_t pg = 2; pg * psize < file.size() - psize; ++pg) {
    if (file[pg * psize + 10] == 0x01) {
      branch = pg;
      break;
    }
  }
  ASSERT_NE(branch, 0u);
  std::vector<uint8_t> cyclic = file;
  uint8_t* page = cyclic.data() + branch * psize;
  const size_t off = page[16] | page[17] << 8;
  page[off] = static_cast<uint8_t>(branch);
  page[off + 1] = static_cast<uint8_t>(branch >> 8);
  page[off + 2] = static_cast<uint8_t>(branch >> 16);
  page[off + 3] = 0;
  page[off + 4] = page[off + 5] = 0;
  size_t failed = 0;
  for (const char* db : kDbs) {
    Status s = ForEachLmdbRecord(cyclic, db, [](auto, auto) { return Status::OK(); });
    if (!s.ok()) {
      ++failed;
      EXPECT_TRUE(s.IsCorruption());
      EXPECT_NE(s.message().find("already read"), std::string::npos) << s.message();
    }
  }
  EXPECT_EQ(failed, 1u);
}

// A hand-built LMDB image with 512-byte pages (the smallest LMDB page), for shapes IndexWriter
// never writes.
class Image {
 public:
  static constexpr size_t kPage = 512;
  Image() : bytes_(2 * kPage, 0) {}

  uint64_t NewPage(uint16_t flags) {
    const uint64_t pg = bytes_.size() / kPage;
    bytes_.resize(bytes_.size() + kPage, 0);
    Put(pg * kPage, pg, 8);
    Put(pg * kPage + 10, flags, 2);
    Put(pg * kPage + 12, 16, 2);
    Put(pg * kPage + 14, kPage, 2);
    return pg;
  }
  // Appends a node to page pg (nodes fill the page from its end, offsets from its start).
  void AddNode(uint64_t pg, uint64_t lo_hi, uint16_t flags, std::string_view key,
               std::string_view data) {
    const size_t base = pg * kPage;
    const size_t lower = Get16(base + 12), upper = Get16(base + 14);
    const size_t size = (8 + key.size() + data.size() + 1) / 2 * 2;
    ASSERT_LE(lower + 2 + size, upper);
    const size_t at = upper - size;
    Put(base + at, lo_hi & 0xFFFF, 2);
    Put(base + at + 2, (lo_hi >> 16) & 0xFFFF, 2);
    Put(base + at + 4, flags, 2);
    Put(base + at + 6, key.size(), 2);
    std::memcpy(bytes_.data() + base + at + 8, key.data(), key.size());
    std::memcpy(bytes_.data() + base + at + 8 + key.size(), data.data(), data.size());
    Put(base + lower, at, 2);
    Put(base + 12, lower + 2, 2);
    Put(base + 14, at, 2);
  }
  uint64_t Leaf(const Records& records) {
    const uint64_t pg = NewPage(0x02);
    for (const auto& [k, v] : records) AddNode(pg, v.size(), 0, k, v);
    return pg;
  }
  // A branch page over `children` (the first key is empty, as LMDB writes it).
  uint64_t Branch(const std::vector<uint64_t>& children) {
    const uint64_t pg = NewPage(0x01);
    for (size_t i = 0; i < children.size(); ++i) {
      AddNode(pg, children[i] & 0xFFFFFFFF, static_cast<uint16_t>(children[i] >> 32),
              i == 0 ? "" : std::string(1, static_cast<char>('a' + i)), "");
    }
    return pg;
  }
  // A value in an overflow run; returns the node data (the run's first page number).
  std::string Overflow(std::string_view value) {
    const uint64_t pg = NewPage(0x04);
    const uint64_t pages = (16 - 1 + value.size()) / kPage + 1;
    Put(pg * kPage + 12, pages, 4);
    for (uint64_t i = 1; i < pages; ++i) bytes_.resize(bytes_.size() + kPage, 0);
    std::memcpy(bytes_.data() + pg * kPage + 16, value.data(), value.size());
    return Le(pg, 8);
  }
  static std::string Db(uint16_t depth, uint64_t branch, uint64_t leaf, uint64_t overflow,
                        uint64_t entries, uint64_t root) {
    return Le(0, 4) + Le(0, 2) + Le(depth, 2) + Le(branch, 8) + Le(leaf, 8) + Le(overflow, 8) +
           Le(entries, 8) + Le(root, 8);
  }
  void Meta(uint64_t which, uint64_t txnid, const std::string& main_db) {
    const size_t base = which * kPage;
    Put(base, which, 8);
    Put(base + 10, 0x08, 2);
    Put(base + 16, 0xBEEFC0DE, 4);
    Put(base + 20, 1, 4);
    const std::string free_db = Db(0, 0, 0, 0, 0, ~uint64_t{0});
    std::memcpy(bytes_.data() + base + 40, free_db.data(), free_db.size());
    Put(base + 40, kPage, 4);
    std::memcpy(bytes_.data() + base + 88, main_db.data(), main_db.size());
    Put(base + 136, bytes_.size() / kPage - 1, 8);
    Put(base + 144, txnid, 8);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  static std::string Le(uint64_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
    return s;
  }
  void Put(size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      bytes_[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  }
  size_t Get16(size_t at) const { return bytes_[at] | bytes_[at + 1] << 8; }
  std::vector<uint8_t> bytes_;
};

Status WalkStatus(std::span<const uint8_t> file, std::string_view db) {
  return ForEachLmdbRecord(file, db, [](auto, auto) { return Status::OK(); });
}

// Database "t": three records, the last in a two-page overflow run, read the same by liblmdb.
TEST(LmdbPagesTest, HandBuiltImage) {
  Image img;
  const std::string big(700, 'v');
  const uint64_t ov_data_pg = img.bytes().size() / Image::kPage;
  const std::string ov = img.Overflow(big);
  const uint64_t leaf = img.NewPage(0x02);
  img.AddNode(leaf, 1, 0, "a", "1");
  img.AddNode(leaf, 2, 0, "b", "22");
  img.AddNode(leaf, big.size(), 0x01, "c", ov);
  const uint64_t main = img.Leaf({{"t", Image::Db(1, 0, 1, 2, 3, leaf)}});
  // The main database's record needs F_SUBDATA on its node: rebuild that leaf by hand.
  img.bytes()[main * Image::kPage + Image::kPage - 48 - 8 - 2 + 4] = 0x02;
  img.Meta(0, 0, Image::Db(0, 0, 0, 0, 0, ~uint64_t{0}));
  img.Meta(1, 1, Image::Db(1, 0, 1, 0, 1, main));
  EXPECT_EQ(ov_data_pg, 2u);
  auto got = Walk(img.bytes(), "t");
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  const Records want{{"a", "1"}, {"b", "22"}, {"c", big}};
  EXPECT_EQ(*got, want);
  TempDir dir;
  WriteAll(dir.Join("img.lmdb"), img.bytes());
  EXPECT_EQ(WalkWithLiblmdb(dir.Join("img.lmdb"), "t"), want);

  // Meta 1 has the higher txnid; with meta 1's txnid lowered, meta 0 (no databases) wins.
  std::vector<uint8_t> b = img.bytes();
  b[Image::kPage + 144] = 0;
  EXPECT_NE(WalkStatus(b, "t").message().find("no database"), std::string::npos);
  // Meta 0 damaged: meta 1 alone.
  b = img.bytes();
  b[16] ^= 1;
  EXPECT_TRUE(Walk(b, "t").has_value());
  // Both damaged.
  b[Image::kPage + 20] = 2;
  EXPECT_NE(WalkStatus(b, "t").message().find("no valid LMDB meta page"), std::string::npos);
  // Other layouts, refused by name.
  b = img.bytes();
  std::swap(b[16], b[19]);
  std::swap(b[17], b[18]);
  b[Image::kPage + 16] = 0;
  EXPECT_NE(WalkStatus(b, "t").message().find("big-endian"), std::string::npos);
  b = img.bytes();
  b[Image::kPage + 16] = 0;
  std::memmove(&b[12], &b[16], 8);
  EXPECT_NE(WalkStatus(b, "t").message().find("32-bit"), std::string::npos);
  // An overflow run longer than its value needs; one that would end past the file.
  b = img.bytes();
  b[2 * Image::kPage + 12] = 9;
  Status s = WalkStatus(b, "t");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("overflow run of 9 pages"), std::string::npos) << s.message();
  const size_t c_node = leaf * Image::kPage + Image::kPage - 10 - 12 - 18;  // nodes a, b, c
  ASSERT_EQ(b[c_node + 8], 'c');
  b[c_node] = 0xF0;  // 4592 bytes: 9 pages with the header, the file has 6
  b[c_node + 1] = 0x11;
  s = WalkStatus(b, "t");
  EXPECT_NE(s.message().find("refers to page 2 (+8) outside the file"), std::string::npos)
      << s.message();
}

// A tree of `depth` levels: a chain of branch pages with one child each over one leaf.
std::vector<uint8_t> Chain(unsigned depth, unsigned stated_depth) {
  Image img;
  uint64_t pg = img.Leaf({{"k", "v"}});
  for (unsigned d = 1; d < depth; ++d) pg = img.Branch({pg});
  const uint64_t main = img.NewPage(0x02);
  img.AddNode(main, 48, 0x02, "t",
              Image::Db(static_cast<uint16_t>(stated_depth), depth - 1, 1, 0, 1, pg));
  img.Meta(0, 0, Image::Db(0, 0, 0, 0, 0, ~uint64_t{0}));
  img.Meta(1, 1, Image::Db(1, 0, 1, 0, 1, main));
  return img.bytes();
}

TEST(LmdbPagesTest, DepthBound) {
  auto ok = Walk(Chain(32, 32), "t");
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  EXPECT_EQ(*ok, (Records{{"k", "v"}}));
  Status s = WalkStatus(Chain(33, 33), "t");
  EXPECT_NE(s.message().find("has depth 33"), std::string::npos) << s.message();
  // A leaf above the stated depth, a branch at it.
  s = WalkStatus(Chain(3, 4), "t");
  EXPECT_NE(s.message().find("where a branch page is expected"), std::string::npos) << s.message();
  s = WalkStatus(Chain(4, 3), "t");
  EXPECT_NE(s.message().find("where a leaf page is expected"), std::string::npos) << s.message();
}

// Two branch nodes naming the same leaf (a DAG: without the visited set, 2^depth reads).
TEST(LmdbPagesTest, SharedPage) {
  Image img;
  const uint64_t leaf = img.Leaf({{"k", "v"}});
  const uint64_t branch = img.Branch({leaf, leaf});
  const uint64_t main = img.NewPage(0x02);
  img.AddNode(main, 48, 0x02, "t", Image::Db(2, 1, 2, 0, 2, branch));
  img.Meta(0, 0, Image::Db(0, 0, 0, 0, 0, ~uint64_t{0}));
  img.Meta(1, 1, Image::Db(1, 0, 1, 0, 1, main));
  Status s = WalkStatus(img.bytes(), "t");
  EXPECT_NE(s.message().find("already read"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace pcrfs::index
