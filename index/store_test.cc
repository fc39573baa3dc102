#include "index/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "common/test_support.h"
#include "index/lmdb/index_writer.h"
#include "index/record_writer.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;
using Bytes = std::vector<uint8_t>;

Bytes Piece(uint64_t ino, int g) {
  Bytes b(static_cast<size_t>((ino * 37 + static_cast<uint64_t>(g) * 11) % 90));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(ino + i * 3 + g);
  return b;
}

// STORE with "/"(1): a.jpg(2) b.txt(3) sub/(4); "/sub": c.jpg(5). One record.
void BuildStore(const std::string& dir) {
  ASSERT_EQ(mkdir((dir + "/records").c_str(), 0755), 0);
  auto w = RecordWriter::Create(dir + "/" + RecordFileName(0));
  ASSERT_TRUE(w.has_value());
  struct F {
    uint64_t ino;
    std::string path;
    EntryKind kind;
  };
  const std::vector<F> files = {{2, "a.jpg", EntryKind::kJpeg},
                                {3, "b.txt", EntryKind::kPassthrough},
                                {5, "sub/c.jpg", EntryKind::kJpeg}};
  for (const F& f : files) {
    std::vector<Bytes> pieces;
    for (int g = 0; g < (f.kind == EntryKind::kJpeg ? kNumGroups : 1); ++g) {
      pieces.push_back(Piece(f.ino, g));
    }
    std::vector<std::span<const uint8_t>> spans(pieces.begin(), pieces.end());
    ASSERT_TRUE((*w)->Add(f.path, f.kind,
                          f.kind == EntryKind::kJpeg ? PassthroughReason::kNone
                                                     : PassthroughReason::kNotJpeg,
                          spans)
                    .ok());
  }
  auto layout = (*w)->Finish();
  ASSERT_TRUE(layout.has_value());

  auto iw = IndexWriter::Create(dir + "/" + kIndexFile);
  ASSERT_TRUE(iw.has_value());
  Entry root;
  root.ino = 1;
  root.parent = 1;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = 3;
  root.num_subdirs = 1;
  ASSERT_TRUE((*iw)->AddEntry(root).ok());
  auto file_entry = [&](size_t slot, uint64_t parent, std::string name) {
    const RecordImage& img = layout->images[slot];
    Entry e;
    e.ino = files[slot].ino;
    e.parent = parent;
    e.name = std::move(name);
    e.kind = img.kind;
    e.passthrough_reason = img.passthrough_reason;
    e.mode = 0644;
    e.record = 0;
    e.slot = static_cast<uint32_t>(slot);
    e.pieces = img.pieces;
    e.source_size = e.SizeAtLevel(kNumGroups);
    return e;
  };
  ASSERT_TRUE((*iw)->AddEntry(file_entry(0, 1, "a.jpg")).ok());
  ASSERT_TRUE((*iw)->AddEntry(file_entry(1, 1, "b.txt")).ok());
  Entry sub = root;
  sub.ino = 4;
  sub.name = "sub";
  sub.first_child = 5;
  sub.num_children = 1;
  sub.num_subdirs = 0;
  ASSERT_TRUE((*iw)->AddEntry(sub).ok());
  ASSERT_TRUE((*iw)->AddEntry(file_entry(2, 4, "c.jpg")).ok());
  RecordInfo info;
  info.id = 0;
  info.file_size = layout->file_size;
  info.data_offset = layout->data_offset;
  info.group_offset = layout->group_offset;
  info.num_images = static_cast<uint32_t>(layout->images.size());
  ASSERT_TRUE((*iw)->AddRecord(info).ok());
  ASSERT_TRUE((*iw)->Finish().ok());

  Manifest m;
  m.generator = "pcrfs test";
  m.options.images_per_record = 16;
  m.options.max_input_scans = 1000;
  m.num_entries = 5;
  m.num_directories = 2;
  m.num_jpeg = 2;
  m.num_passthrough = 1;
  m.passthrough_by_reason["not_jpeg"] = 1;
  m.num_records = 1;
  const std::string json = m.ToJson();
  WriteAll(dir + "/" + kManifestFile, Bytes(json.begin(), json.end()));
}

Bytes Expected(uint64_t ino, EntryKind kind, int k) {
  if (kind == EntryKind::kPassthrough) return Piece(ino, 0);
  Bytes out;
  for (int g = 0; g < k; ++g) {
    Bytes p = Piece(ino, g);
    out.insert(out.end(), p.begin(), p.end());
  }
  out.push_back(0xFF);
  out.push_back(0xD9);
  return out;
}

TEST(StoreTest, ReadsEveryFileAtEveryLevel) {
  TempDir dir;
  BuildStore(dir.path());
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->manifest().num_records, 1u);
  for (const char* path : {"a.jpg", "b.txt", "sub/c.jpg"}) {
    auto e = (*store)->index().LookupPath(path);
    ASSERT_TRUE(e.has_value()) << path;
    for (int k = 1; k <= kNumGroups; ++k) {
      Bytes out;
      Status s = (*store)->ReadFile(*e, k, &out);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out, Expected(e->ino, e->kind, k)) << path << " level " << k;
      EXPECT_EQ(out.size(), e->SizeAtLevel(k));
    }
  }
  auto r1 = (*store)->OpenRecord(0);
  auto r2 = (*store)->OpenRecord(0);
  ASSERT_TRUE(r1.has_value() && r2.has_value());
  EXPECT_EQ(&r1->file(), &r2->file()) << "opened once and shared";
  EXPECT_EQ(r1->speculation(), r2->speculation());
  EXPECT_NE(r1->speculation(), nullptr) << "a local record has the page cache's hooks";
  EXPECT_TRUE((*store)->OpenRecord(1).error().IsCorruption());
  Bytes out;
  EXPECT_EQ((*store)->ReadFile(*(*store)->index().Get(1), 1, &out).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ((*store)->ReadFile(*(*store)->index().Get(2), 0, &out).code(),
            Status::Code::kInvalidArgument);
}

// A level's record bytes are the records' prefixes up to that level's region and their footers:
// each level adds exactly its group's pieces, and level 10 is every record file whole.
TEST(StoreTest, StoreBytesAtLevelAreTheRecordsPrefixes) {
  TempDir dir;
  BuildStore(dir.path());
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  const IndexReader& idx = (*store)->index();
  const RecordInfo record = *idx.GetRecord(0);
  EXPECT_EQ(*StoreBytesAtLevel(idx, 1), record.data_offset + Piece(2, 0).size() +
                                            Piece(3, 0).size() + Piece(5, 0).size() +
                                            kRecordFooterSize);
  for (int k = 2; k <= kNumGroups; ++k) {
    const auto g = k - 1;
    EXPECT_EQ(*StoreBytesAtLevel(idx, k) - *StoreBytesAtLevel(idx, k - 1),
              Piece(2, g).size() + Piece(5, g).size())
        << "level " << k;  // b.txt, a passthrough file, lives in group 1 only
  }
  struct stat st;
  ASSERT_EQ(::stat((dir.path() + "/" + RecordFileName(0)).c_str(), &st), 0);
  EXPECT_EQ(*StoreBytesAtLevel(idx, kNumGroups), static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(RecordBytesAtLevel(record, 0), RecordBytesAtLevel(record, 1));  // clamped
  EXPECT_EQ(RecordBytesAtLevel(record, 11), record.file_size);
}

// An index is decompressed and checked once per open (an older index.lmdb: by its conversion),
// and not at all when a parse of this process is handed over (the daemon's open after its fork).
TEST(StoreTest, ParsesTheIndexOnceAndReusesAParsedOne) {
  TempDir dir;
  BuildStore(dir.path());
  const uint64_t before = CompactIndex::ParseCount();
  auto first = Store::Open(dir.path());
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  EXPECT_EQ(CompactIndex::ParseCount(), before + 1);
  StoreOptions options;
  options.parsed_index = (*first)->shared_index();
  auto second = Store::Open(dir.path(), std::move(options));
  ASSERT_TRUE(second.has_value()) << second.error().ToString();
  EXPECT_EQ(CompactIndex::ParseCount(), before + 1);
  EXPECT_EQ(&(*second)->index(), &(*first)->index());
  first->reset();  // the second store keeps the index alive
  auto e = (*second)->index().LookupPath("sub/c.jpg");
  ASSERT_TRUE(e.has_value());
  Bytes out;
  ASSERT_TRUE((*second)->ReadFile(*e, 10, &out).ok());
  EXPECT_EQ(out, Expected(e->ino, e->kind, 10));
  // The manifest is still checked against a handed-over index.
  StoreOptions again;
  again.parsed_index = (*second)->shared_index();
  ASSERT_EQ(unlink((dir.path() + "/" + kManifestFile).c_str()), 0);
  EXPECT_FALSE(Store::Open(dir.path(), std::move(again)).has_value());
}

TEST(StoreTest, OpenErrors) {
  TempDir dir;
  auto s = Store::Open(dir.Join("missing"));
  EXPECT_EQ(s.error().message(), dir.Join("missing") + ": no such directory");
  WriteAll(dir.Join("file"), {1});
  s = Store::Open(dir.Join("file"));
  EXPECT_EQ(s.error().message(), dir.Join("file") + ": not a directory");
  s = Store::Open(dir.path());
  EXPECT_EQ(s.error().message(), dir.path() + ": not a pcrfs store (no manifest.json)");

  BuildStore(dir.path());
  const auto manifest = ReadAll(dir.Join(kManifestFile));
  std::string v2(manifest.begin(), manifest.end());
  v2.replace(v2.find("\"format_version\": 2"), 19, "\"format_version\": 3");
  WriteAll(dir.Join(kManifestFile), Bytes(v2.begin(), v2.end()));
  s = Store::Open(dir.path());
  EXPECT_EQ(s.error().code(), Status::Code::kNotSupported);
  EXPECT_EQ(s.error().message(),
            dir.path() + ": format version 3 is not supported (this pcrfs reads 1 to 2)");
  WriteAll(dir.Join(kManifestFile), Bytes{'{'});
  s = Store::Open(dir.path());
  EXPECT_TRUE(s.error().IsCorruption());
  EXPECT_NE(s.error().message().find("manifest.json"), std::string::npos);
  WriteAll(dir.Join(kManifestFile), manifest);

  const auto index = ReadAll(dir.Join(kIndexFile));
  auto damaged = index;
  damaged[damaged.size() / 2] ^= 4;
  WriteAll(dir.Join(kIndexFile), damaged);
  s = Store::Open(dir.path());
  EXPECT_TRUE(s.error().IsCorruption());
  EXPECT_NE(s.error().message().find("index.lmdb"), std::string::npos) << s.error().ToString();
  ASSERT_EQ(unlink(dir.Join(kIndexFile).c_str()), 0);
  s = Store::Open(dir.path());
  EXPECT_TRUE(s.error().IsCorruption());
  EXPECT_NE(s.error().message().find("index.pcri is missing"), std::string::npos);
  WriteAll(dir.Join(kIndexFile), index);
  EXPECT_TRUE(Store::Open(dir.path()).has_value());
}

// Every number of the manifest is checked against the index or a bound before anything is
// sized by it.
TEST(StoreTest, TamperedManifestNumbersAreRefused) {
  TempDir dir;
  BuildStore(dir.path());
  const auto original = ReadAll(dir.Join(kManifestFile));
  ASSERT_TRUE(Store::Open(dir.path()).has_value());
  using Json = nlohmann::ordered_json;
  struct Case {
    std::string field;  // a JSON pointer
    Json value;
    std::string named;  // the field the error names
  };
  const std::vector<Case> cases = {
      {"/num_records", 4000000000u, "\"num_records\" is 4000000000, the index has 1"},
      {"/num_records", 0, "\"num_records\" is 0"},
      {"/num_entries", 6, "\"num_entries\" is 6, the index holds 5"},
      {"/num_directories", 3, "num_passthrough\" is 6, not num_entries 5"},
      {"/num_directories", 0, "\"num_directories\" is 0"},
      {"/num_jpeg", 1, "\"num_directories\" + \"num_jpeg\" + \"num_passthrough\" is 4"},
      {"/num_passthrough", 18446744073709551615u, "num_passthrough\" is 18446744073709551615"},
      {"/passthrough_by_reason/not_jpeg", 2, "\"passthrough_by_reason\" adds up to 2"},
      {"/options/images_per_record", 0, "\"options.images_per_record\" is 0, not in 1..1048576"},
      {"/options/images_per_record", 2, "record 0 holds 3 files"},
      {"/options/max_input_scans", 0, "\"options.max_input_scans\" is 0"},
      {"/source_jpeg_bytes", 1, "\"source_jpeg_bytes\" is 1, more than source_bytes 0"},
      {"/level_bytes/9", 1u << 30, "\"level_bytes[9]\" is 1073741824, more than the record"},
      {"/level_bytes/0", 5, "\"level_bytes[1]\" is 0, less than the level below (5)"},
      {"/jpeg_level_bytes/3", 7, "\"jpeg_level_bytes[3]\" is 7, more than level_bytes[3] 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    Json j = Json::parse(std::string(original.begin(), original.end()));
    j[Json::json_pointer(c.field)] = c.value;
    const std::string text = j.dump(2);
    WriteAll(dir.Join(kManifestFile), Bytes(text.begin(), text.end()));
    auto s = Store::Open(dir.path());
    ASSERT_FALSE(s.has_value());
    EXPECT_TRUE(s.error().IsCorruption());
    EXPECT_EQ(s.error().message().rfind(dir.Join(kManifestFile) + ": ", 0), 0u)
        << s.error().message();
    EXPECT_NE(s.error().message().find(c.named), std::string::npos) << s.error().message();
  }
  // Quality figures: in range and no more images than were measured.
  Json j = Json::parse(std::string(original.begin(), original.end()));
  QualitySample q;
  q.measured = 2;
  for (LevelQuality& l : q.levels) l = {30, 25, 20, 0.99, 0.95, 0.9, 2};
  j["quality"] = QualityToJson(q);
  for (auto [field, value, named] : std::vector<std::tuple<std::string, Json, std::string>>{
           {"", Json(), ""},
           {"/quality/measured", 3, "\"quality.measured\" is 3, more than num_jpeg 2"},
           {"/quality/levels/4/n", 5, "\"quality.levels[4].n\" is 5"},
           {"/quality/levels/2/msssim/p5", 7.5, "\"quality.levels[2].msssim\" holds a value"},
           {"/quality/levels/2/psnr/min", -3, "\"quality.levels[2].psnr\" holds a negative"},
       }) {
    SCOPED_TRACE(field);
    Json t = j;
    if (!field.empty()) t[Json::json_pointer(field)] = value;
    const std::string text = t.dump(2);
    WriteAll(dir.Join(kManifestFile), Bytes(text.begin(), text.end()));
    auto s = Store::Open(dir.path());
    if (field.empty()) {
      EXPECT_TRUE(s.has_value()) << s.error().ToString();
      continue;
    }
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.error().message().find(named), std::string::npos) << s.error().message();
  }
  WriteAll(dir.Join(kManifestFile), original);
  EXPECT_TRUE(Store::Open(dir.path()).has_value());
}

TEST(StoreTest, DamagedRecords) {
  TempDir dir;
  BuildStore(dir.path());
  const std::string rec = dir.Join(RecordFileName(0));
  const auto good = ReadAll(rec);
  {
    // A flipped byte in c.jpg's group-3 piece: only c.jpg at levels >= 3 fails.
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    auto c = *(*store)->index().LookupPath("sub/c.jpg");
    auto a = *(*store)->index().LookupPath("a.jpg");
    // Index format 4 holds lengths only: offsets and CRCs come from the record's table.
    EXPECT_FALSE(c.PiecesResolved(1));
    ASSERT_TRUE((*store)->ResolvePieces(&c).ok());
    ASSERT_TRUE((*store)->ResolvePieces(&a).ok());
    ASSERT_GT(c.pieces[2].length, 0u);
    auto b = good;
    b[c.pieces[2].offset] ^= 1;
    WriteAll(rec, b);
    Bytes out;
    EXPECT_TRUE((*store)->ReadFile(c, 2, &out).ok());
    Status s = (*store)->ReadFile(c, 3, &out);
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_NE(s.message().find(rec), std::string::npos) << s.ToString();
    EXPECT_TRUE((*store)->ReadFile(a, 10, &out).ok());
    // An entry whose piece points outside its group region.
    Entry wild = a;
    wild.pieces[1].offset = wild.pieces[0].offset;
    s = (*store)->ReadFile(wild, 2, &out);
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_NE(s.message().find(rec), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("group 2"), std::string::npos) << s.ToString();
  }
  {
    // Truncation: the footer is gone, so the record no longer matches the index, but only the
    // pieces past the new end are lost (docs/semantics.md): a.jpg still reads, and the file
    // whose group-10 piece is last fails at level 10 only.
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    auto a = *(*store)->index().LookupPath("a.jpg");
    Entry last;
    for (const char* p : {"a.jpg", "b.txt", "sub/c.jpg"}) {
      auto e = (*store)->index().LookupPath(p);
      if (!e || e->is_dir() || e->record != 0) continue;
      ASSERT_TRUE((*store)->ResolvePieces(&*e).ok());
      const PieceRef& g10 = e->pieces[9];
      if (g10.length > 0 && g10.offset + g10.length + kRecordFooterSize == good.size()) last = *e;
    }
    ASSERT_GT(last.pieces[9].length, 0u);
    store = {};
    WriteAll(rec, Bytes(good.begin(), good.end() - kRecordFooterSize - 1));
    store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    Bytes out;
    Status header;
    ASSERT_TRUE((*store)->OpenRecord(0, &header).has_value());
    EXPECT_TRUE(header.IsCorruption()) << header.ToString();
    EXPECT_NE(header.message().find(rec), std::string::npos) << header.ToString();
    EXPECT_TRUE((*store)->ReadFile(a, 1, &out).ok());
    EXPECT_TRUE((*store)->ReadFile(last, 9, &out).ok());
    Status s = (*store)->ReadFile(last, 10, &out);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find(rec), std::string::npos) << s.ToString();
  }
  {
    // A record file that is a symlink is never followed, even to a good copy.
    const std::string outside = dir.Join("outside.pcr");
    WriteAll(outside, good);
    ASSERT_EQ(unlink(rec.c_str()), 0);
    ASSERT_EQ(symlink(outside.c_str(), rec.c_str()), 0);
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    auto a = *(*store)->index().LookupPath("a.jpg");
    Bytes out;
    Status s = (*store)->ReadFile(a, 1, &out);
    EXPECT_TRUE(s.IsCorruption()) << s.ToString();
    EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.ToString();
  }
  {
    ASSERT_EQ(unlink(rec.c_str()), 0);
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    auto a = *(*store)->index().LookupPath("a.jpg");
    Bytes out;
    Status s = (*store)->ReadFile(a, 1, &out);
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_NE(s.message().find("missing"), std::string::npos) << s.ToString();
  }
}

// A record file that counts the bytes read from it.
class CountingFile final : public RandomAccessFile {
 public:
  CountingFile(std::unique_ptr<RandomAccessFile> base, std::atomic<uint64_t>* bytes)
      : base_(std::move(base)), bytes_(bytes) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    bytes_->fetch_add(n);
    return base_->Read(offset, n, dst);
  }
  uint64_t Size() const override { return base_->Size(); }
  const std::string& name() const override { return base_->name(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::atomic<uint64_t>* bytes_;
};

// Opens the store in dir with every record file counting the bytes read from it into *bytes.
Result<std::unique_ptr<Store>> OpenCounting(const std::string& dir, bool check_tables,
                                            std::atomic<uint64_t>* bytes) {
  StoreOptions options;
  options.check_tables = check_tables;
  options.open_record = [bytes](const std::string& path, uint64_t) -> Result<SourceFile> {
    auto f = OpenRecordFileNoFollow(path);
    if (!f) return Err(f.error());
    return SourceFile(std::make_shared<const CountingFile>(std::move(*f), bytes));
  };
  return Store::Open(dir, std::move(options));
}

// StoreOptions::check_tables = false (a remote store): opening a record reads its header and
// footer only, so a damaged table goes unreported at open; with the default it is reported.
TEST(StoreTest, OpeningARecordWithoutItsTables) {
  TempDir dir;
  BuildStore(dir.path());
  const std::string rec = dir.Join(RecordFileName(0));
  auto good = ReadAll(rec);
  std::atomic<uint64_t> bytes{0};
  auto open = [&](bool check_tables) { return OpenCounting(dir.path(), check_tables, &bytes); };
  // The image table's first entry damaged: a table CRC mismatch, no piece touched.
  good[kRecordHeaderSize + kRecordGroupTableSize + 10] ^= 0x40;
  WriteAll(rec, good);
  for (bool check_tables : {true, false}) {
    SCOPED_TRACE(check_tables ? "tables checked" : "tables not read");
    auto store = open(check_tables);
    ASSERT_TRUE(store.has_value());
    bytes = 0;
    Status header;
    ASSERT_TRUE((*store)->OpenRecord(0, &header).has_value());
    if (check_tables) {
      // Header, the whole tables section (at least the group table) and footer.
      EXPECT_GT(bytes.load(), kRecordHeaderSize + kRecordGroupTableSize + kRecordFooterSize);
      EXPECT_TRUE(header.IsCorruption()) << header.ToString();
      EXPECT_NE(header.message().find("table checksum"), std::string::npos) << header.ToString();
    } else {
      EXPECT_EQ(bytes.load(), uint64_t{kRecordHeaderSize + kRecordFooterSize});
      EXPECT_TRUE(header.ok()) << header.ToString();
    }
    // Either way no file of the record reads: index format 4 takes each piece's CRC from the
    // table, whose CRC fails (docs/semantics.md, "Damage").
    for (const char* path : {"a.jpg", "b.txt", "sub/c.jpg"}) {
      auto e = (*store)->index().LookupPath(path);
      ASSERT_TRUE(e.has_value()) << path;
      Bytes out;
      Status s = (*store)->ReadFile(*e, 10, &out);
      EXPECT_TRUE(s.IsCorruption()) << path << ": " << s.ToString();
      EXPECT_NE(s.message().find("table checksum"), std::string::npos) << s.ToString();
    }
  }
}

// A record's table is kept for the groups read so far: a level-1 read parses (and keeps) group
// 1 only; a higher level parses the table once more, with the groups it needs; the pieces are
// the same as those of a table parsed whole.
TEST(StoreTest, ARecordTableKeepsTheGroupsReadSoFar) {
  TempDir dir;
  BuildStore(dir.path());
  std::atomic<uint64_t> bytes{0};
  auto store = OpenCounting(dir.path(), /*check_tables=*/false, &bytes);
  ASSERT_TRUE(store.has_value());
  auto whole = Store::Open(dir.path());
  ASSERT_TRUE(whole.has_value());
  const std::vector<std::string> paths = {"a.jpg", "b.txt", "sub/c.jpg"};
  std::vector<Entry> full;
  for (const std::string& path : paths) {
    Entry e = *(*whole)->index().LookupPath(path);
    ASSERT_EQ(e.record, 0u) << path;
    ASSERT_TRUE((*whole)->ResolvePieces(&e).ok());
    full.push_back(e);
  }
  auto lookup = [&](size_t i) { return *(*store)->index().LookupPath(paths[i]); };
  ASSERT_TRUE((*store)->OpenRecord(0).has_value());
  const uint64_t opened = bytes.load();
  Entry a = lookup(0);
  ASSERT_TRUE((*store)->ResolvePieces(&a, 1).ok());
  EXPECT_TRUE(a.PiecesResolved(1));
  EXPECT_FALSE(a.PiecesResolved(2));
  EXPECT_EQ(a.pieces[0], full[0].pieces[0]);
  const uint64_t table = bytes.load() - opened;
  EXPECT_GT(table, uint64_t{kRecordHeaderSize + kRecordGroupTableSize});
  // Another file at level 1: the table kept serves it.
  Entry b = lookup(1);
  ASSERT_TRUE((*store)->ResolvePieces(&b, 1).ok());
  EXPECT_EQ(b.pieces[0], full[1].pieces[0]);
  EXPECT_EQ(bytes.load(), opened + table);
  // Level 3: parsed once more, then kept for every level up to 3.
  Entry c = lookup(2);
  ASSERT_TRUE((*store)->ResolvePieces(&c, 3).ok());
  EXPECT_EQ(bytes.load(), opened + 2 * table);
  for (size_t g = 0; g < 3; ++g) EXPECT_EQ(c.pieces[g], full[2].pieces[g]) << g;
  Entry a2 = lookup(0);
  ASSERT_TRUE((*store)->ResolvePieces(&a2, 2).ok());
  EXPECT_EQ(bytes.load(), opened + 2 * table);
  // Every level of every file reads what the whole table gives, bytes included.
  for (size_t i = 0; i < full.size(); ++i) {
    for (int k = 1; k <= kNumGroups; ++k) {
      Bytes got, want;
      ASSERT_TRUE((*store)->ReadFile(lookup(i), k, &got).ok()) << i << " L" << k;
      ASSERT_TRUE((*whole)->ReadFile(full[i], k, &want).ok()) << i << " L" << k;
      EXPECT_EQ(got, want) << i << " L" << k;
    }
  }
  Entry all = lookup(2);
  ASSERT_TRUE((*store)->ResolvePieces(&all).ok());
  EXPECT_EQ(all.pieces, full[2].pieces);
}

// StoreOptions::table_folder (a remote store's cache folder): the parsed tables' rows go to a
// file there, the heap keeps the kinds; every piece and every byte read is the same as with
// the tables in memory. A folder where no file can be made keeps them in memory.
TEST(StoreTest, RecordTablesInAFileReadTheSame) {
  TempDir dir, cache;
  BuildStore(dir.path());
  auto in_memory = Store::Open(dir.path());
  ASSERT_TRUE(in_memory.has_value());
  for (const std::string& folder : {cache.path(), std::string("/nonexistent/pcrfs-cache")}) {
    SCOPED_TRACE(folder);
    StoreOptions options;
    options.table_folder = folder;
    auto store = Store::Open(dir.path(), std::move(options));
    ASSERT_TRUE(store.has_value());
    for (const char* path : {"a.jpg", "b.txt", "sub/c.jpg"}) {
      for (int k = 1; k <= kNumGroups; ++k) {
        Entry e = *(*store)->index().LookupPath(path);
        Entry want = *(*in_memory)->index().LookupPath(path);
        ASSERT_TRUE((*store)->ResolvePieces(&e, k).ok()) << path << " L" << k;
        ASSERT_TRUE((*in_memory)->ResolvePieces(&want, k).ok());
        // (A table keeps the groups read so far: compare the k the read needs.)
        for (size_t g = 0; g < static_cast<size_t>(k); ++g) {
          EXPECT_EQ(e.pieces[g], want.pieces[g]) << path << " L" << k << " g" << g;
        }
        Bytes got, expected;
        ASSERT_TRUE((*store)->ReadFile(e, k, &got).ok()) << path << " L" << k;
        ASSERT_TRUE((*in_memory)->ReadFile(want, k, &expected).ok());
        EXPECT_EQ(got, expected) << path << " L" << k;
      }
    }
    if (folder == cache.path()) {
      // One record of 3 images, 10 groups: 3 rows of 124 bytes.
      EXPECT_EQ((*store)->TableFileBytes(), 3u * (kNumGroups * 12 + 4));
      EXPECT_LT((*store)->TableMemoryBytes(), (*in_memory)->TableMemoryBytes());
    } else {
      EXPECT_EQ((*store)->TableFileBytes(), 0u);
      EXPECT_EQ((*store)->TableMemoryBytes(), (*in_memory)->TableMemoryBytes());
    }
  }
}

}  // namespace
}  // namespace pcrfs::index

namespace pcrfs::index {
namespace {

TEST(StoreTest, ConcurrentReads) {
  TempDir dir;
  BuildStore(dir.path());
  auto store = Store::Open(dir.path());
  ASSERT_TRUE(store.has_value());
  std::vector<Entry> files;
  for (const char* path : {"a.jpg", "b.txt", "sub/c.jpg"}) {
    files.push_back(*(*store)->index().LookupPath(path));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Bytes out;
      for (int i = 0; i < 100; ++i) {
        for (const Entry& e : files) {
          const int k = 1 + (i % kNumGroups);
          if (!(*store)->ReadFile(e, k, &out).ok() || out != Expected(e.ino, e.kind, k)) {
            ++failures;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace pcrfs::index
