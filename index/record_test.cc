#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>

#include "common/crc32c.h"
#include "common/test_support.h"
#include "index/level_plan.h"
#include "index/record_reader.h"
#include "index/record_writer.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::FaultInjectingFile;
using pcrfs::test::MemoryFile;
using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using Bytes = std::vector<uint8_t>;

struct TestImage {
  std::string path;
  EntryKind kind;
  PassthroughReason reason;
  std::vector<Bytes> pieces;  // 10 for JPEG, 1 for passthrough
};

std::vector<TestImage> MakeImages(int n, uint32_t seed, int max_piece) {
  std::mt19937 rng(seed);
  std::vector<TestImage> images;
  for (int i = 0; i < n; ++i) {
    TestImage img;
    img.path = "dir" + std::to_string(i % 3) + "/img_" + std::to_string(i) + ".jpg";
    const bool passthrough = rng() % 4 == 0;
    img.kind = passthrough ? EntryKind::kPassthrough : EntryKind::kJpeg;
    img.reason =
        passthrough ? static_cast<PassthroughReason>(1 + rng() % 3) : PassthroughReason::kNone;
    const int np = passthrough ? 1 : kNumGroups;
    for (int g = 0; g < np; ++g) {
      // About a quarter of the pieces are empty (grey images have empty colour groups).
      size_t len = rng() % 4 == 0 ? 0 : rng() % static_cast<uint32_t>(max_piece + 1);
      Bytes piece(len);
      for (auto& b : piece) b = static_cast<uint8_t>(rng());
      img.pieces.push_back(std::move(piece));
    }
    images.push_back(std::move(img));
  }
  return images;
}

RecordLayout WriteRecord(const std::string& path, const std::vector<TestImage>& images,
                         uint64_t budget = RecordWriter::kDefaultMemoryBudget) {
  auto w = RecordWriter::Create(path, budget);
  EXPECT_TRUE(w.has_value()) << w.error().ToString();
  for (const auto& img : images) {
    std::vector<std::span<const uint8_t>> spans(img.pieces.begin(), img.pieces.end());
    Status s = (*w)->Add(img.path, img.kind, img.reason, spans);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  auto layout = (*w)->Finish();
  EXPECT_TRUE(layout.has_value()) << layout.error().ToString();
  return *layout;
}

Bytes ExpectedLevel(const TestImage& img, int k) {
  Bytes out;
  if (img.kind == EntryKind::kPassthrough) return img.pieces[0];
  for (int g = 0; g < k; ++g) out.insert(out.end(), img.pieces[g].begin(), img.pieces[g].end());
  out.push_back(0xFF);
  out.push_back(0xD9);
  return out;
}

// Every read of every image at every level matches, and the layout is what the writer said.
void CheckRecord(const std::string& path, const std::vector<TestImage>& images,
                 const RecordLayout& written) {
  auto file = PosixRandomAccessFile::Open(path);
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  auto layout = ReadRecordLayout(**file);
  ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
  EXPECT_EQ(*layout, written);
  ASSERT_EQ(layout->images.size(), images.size());
  EXPECT_EQ(layout->file_size, (*file)->Size());
  EXPECT_EQ(layout->data_offset % 8, 0u);
  EXPECT_EQ(layout->group_offset[0], layout->data_offset);
  EXPECT_EQ(layout->GroupEnd(kNumGroups) + kRecordFooterSize, layout->file_size);
  for (size_t i = 0; i < images.size(); ++i) {
    const RecordImage& ri = layout->images[i];
    EXPECT_EQ(ri.path, images[i].path);
    EXPECT_EQ(ri.kind, images[i].kind);
    EXPECT_EQ(ri.passthrough_reason, images[i].reason);
    for (int g = 0; g < kNumGroups; ++g) {
      // Levels 1..k of the record are one range: piece g lies inside region g.
      EXPECT_GE(ri.pieces[g].offset, layout->group_offset[g]);
      EXPECT_LE(ri.pieces[g].offset + ri.pieces[g].length, layout->group_offset[g + 1]);
      if (i > 0) {
        const PieceRef& prev = layout->images[i - 1].pieces[g];
        EXPECT_EQ(prev.offset + prev.length, ri.pieces[g].offset) << "slot order";
      }
      Bytes piece(ri.pieces[g].length);
      ASSERT_TRUE(ReadPiece(**file, ri.pieces[g], piece.data()).ok());
      const Bytes expected =
          static_cast<size_t>(g) < images[i].pieces.size() ? images[i].pieces[g] : Bytes();
      EXPECT_EQ(piece, expected);
    }
    for (int k = 1; k <= kNumGroups; ++k) {
      Bytes out;
      Status s = ReadLevel(**file, ri.kind, ri.pieces, k, &out);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out, ExpectedLevel(images[i], k)) << "image " << i << " level " << k;
      EXPECT_EQ(out.size(), LevelSize(ri.kind, ri.pieces, k));
    }
  }
  auto damaged = VerifyRecord(**file);
  ASSERT_TRUE(damaged.has_value());
  EXPECT_TRUE(damaged->empty());
}

int CountFiles(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  }
  closedir(d);
  return n;
}

TEST(RecordTest, RoundTripSizes) {
  TempDir dir;
  for (int n : {0, 1, 2, 37}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto images = MakeImages(n, static_cast<uint32_t>(n) + 7, 3000);
    const std::string path = dir.Join("r" + std::to_string(n) + ".pcr");
    RecordLayout layout = WriteRecord(path, images);
    CheckRecord(path, images, layout);
  }
  EXPECT_EQ(CountFiles(dir.path()), 4) << "no .tmp or spill files left behind";
}

TEST(RecordTest, EmptyRecordIsValid) {
  TempDir dir;
  RecordLayout layout = WriteRecord(dir.Join("e.pcr"), {});
  EXPECT_TRUE(layout.images.empty());
  EXPECT_EQ(layout.data_offset, 64u + 168u);  // header + group table + names crc, padded
  EXPECT_EQ(layout.file_size, layout.data_offset + 16);
  CheckRecord(dir.Join("e.pcr"), {}, layout);
}

TEST(RecordTest, SpillingGivesTheSameBytes) {
  TempDir dir;
  auto images = MakeImages(50, 99, 5000);
  RecordLayout a = WriteRecord(dir.Join("mem.pcr"), images);
  RecordLayout b = WriteRecord(dir.Join("spill.pcr"), images, /*budget=*/1000);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ReadAll(dir.Join("mem.pcr")), ReadAll(dir.Join("spill.pcr")));
  CheckRecord(dir.Join("spill.pcr"), images, b);
  EXPECT_EQ(CountFiles(dir.path()), 2);
}

TEST(RecordTest, LevelSizes) {
  PieceRefs p{};
  for (int g = 0; g < kNumGroups; ++g) p[g].length = static_cast<uint64_t>(g + 1) * 10;
  EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, 1), 12u);
  EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, 3), 62u);
  EXPECT_EQ(LevelSize(EntryKind::kJpeg, p, 10), 552u);
  for (int k = 1; k <= 10; ++k) EXPECT_EQ(LevelSize(EntryKind::kPassthrough, p, k), 10u);
  EXPECT_EQ(LevelSize(EntryKind::kDirectory, p, 5), 0u);
}

TEST(RecordTest, WriterRejectsBadInput) {
  TempDir dir;
  auto w = RecordWriter::Create(dir.Join("x.pcr"));
  ASSERT_TRUE(w.has_value());
  Bytes b(5, 1);
  std::vector<std::span<const uint8_t>> one{b}, two{b, b}, ten(10, std::span<const uint8_t>(b));
  EXPECT_FALSE((*w)->Add("a", EntryKind::kJpeg, PassthroughReason::kNone, one).ok());
  EXPECT_FALSE((*w)->Add("a", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, two).ok());
  EXPECT_FALSE((*w)->Add("a", EntryKind::kDirectory, PassthroughReason::kNone, one).ok());
  EXPECT_FALSE((*w)->Add("a", EntryKind::kJpeg, PassthroughReason::kCorrupt, ten).ok());
  EXPECT_FALSE((*w)->Add("", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, one).ok());
  EXPECT_TRUE((*w)->Add("empty", EntryKind::kPassthrough, PassthroughReason::kTruncated, {}).ok());
  EXPECT_TRUE((*w)->Add("a", EntryKind::kJpeg, PassthroughReason::kNone, ten).ok());
  ASSERT_TRUE((*w)->Finish().has_value());
  EXPECT_FALSE((*w)->Add("b", EntryKind::kJpeg, PassthroughReason::kNone, ten).ok());
  EXPECT_FALSE((*w)->Finish().has_value());
  EXPECT_FALSE(RecordWriter::Create(dir.Join("nodir/x.pcr")).has_value());
}

TEST(RecordTest, AbandonedWriterLeavesNothing) {
  TempDir dir;
  {
    auto w = RecordWriter::Create(dir.Join("x.pcr"), /*budget=*/10);
    ASSERT_TRUE(w.has_value());
    Bytes b(100, 1);
    std::vector<std::span<const uint8_t>> one{b};
    ASSERT_TRUE((*w)->Add("a", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, one).ok());
  }
  EXPECT_EQ(CountFiles(dir.path()), 0);
}

// The smallest interesting record: three images, small pieces, some empty.
struct SmallRecord {
  std::vector<TestImage> images;
  Bytes bytes;
  RecordLayout layout;
};

SmallRecord MakeSmallRecord(const TempDir& dir) {
  SmallRecord r;
  r.images = MakeImages(4, 1234, 12);
  r.images[0].kind = EntryKind::kJpeg;  // make sure both kinds are there
  r.images[0].reason = PassthroughReason::kNone;
  r.images[0].pieces.resize(kNumGroups, Bytes{1, 2, 3});
  r.images[3].kind = EntryKind::kPassthrough;
  r.images[3].reason = PassthroughReason::kEmpty;
  r.images[3].pieces = {Bytes{9, 9, 9, 9}};
  r.layout = WriteRecord(dir.Join("small.pcr"), r.images);
  r.bytes = ReadAll(dir.Join("small.pcr"));
  return r;
}

// Which image owns byte `off` of the data section (-1 if none).
int OwnerOf(const RecordLayout& layout, uint64_t off) {
  for (size_t i = 0; i < layout.images.size(); ++i) {
    for (const PieceRef& p : layout.images[i].pieces) {
      if (off >= p.offset && off < p.offset + p.length) return static_cast<int>(i);
    }
  }
  return -1;
}

TEST(RecordTest, EveryFlippedByteIsDetected) {
  TempDir dir;
  SmallRecord r = MakeSmallRecord(dir);
  const RecordLayout& L = r.layout;
  ASSERT_GT(L.GroupEnd(kNumGroups), L.data_offset);
  int header_hits = 0, data_hits = 0, footer_hits = 0;
  for (size_t off = 0; off < r.bytes.size(); ++off) {
    SCOPED_TRACE("offset " + std::to_string(off));
    Bytes damaged = r.bytes;
    damaged[off] ^= 0x20;
    MemoryFile file("small.pcr", damaged);
    auto layout = ReadRecordLayout(file);
    if (off < L.data_offset || off >= L.GroupEnd(kNumGroups)) {
      // Header, group table, image table, names, table CRC, padding, footer.
      ASSERT_FALSE(layout.has_value());
      EXPECT_TRUE(layout.error().IsCorruption()) << layout.error().ToString();
      EXPECT_NE(layout.error().message().find("small.pcr"), std::string::npos);
      EXPECT_FALSE(VerifyRecord(file).has_value());
      (off < L.data_offset ? header_hits : footer_hits)++;
      continue;
    }
    ++data_hits;
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    const int owner = OwnerOf(L, off);
    ASSERT_GE(owner, 0);
    for (size_t i = 0; i < L.images.size(); ++i) {
      const RecordImage& img = L.images[i];
      Bytes out;
      Status s = ReadLevel(file, img.kind, img.pieces, kNumGroups, &out);
      EXPECT_EQ(s.ok(), static_cast<int>(i) != owner) << "image " << i;
      if (!s.ok()) {
        EXPECT_TRUE(s.IsCorruption());
      }
    }
    auto verify = VerifyRecord(file);
    ASSERT_TRUE(verify.has_value());
    ASSERT_EQ(verify->size(), 1u);
    EXPECT_EQ((*verify)[0].slot, static_cast<uint32_t>(owner));
    EXPECT_EQ((*verify)[0].path, r.images[owner].path);
  }
  EXPECT_EQ(header_hits, static_cast<int>(L.data_offset));
  EXPECT_EQ(footer_hits, 16);
  EXPECT_GT(data_hits, 40);
}

TEST(RecordTest, EveryTruncationIsDetected) {
  TempDir dir;
  SmallRecord r = MakeSmallRecord(dir);
  for (size_t len = 0; len < r.bytes.size(); ++len) {
    MemoryFile file("small.pcr", Bytes(r.bytes.begin(), r.bytes.begin() + len));
    auto layout = ReadRecordLayout(file);
    ASSERT_FALSE(layout.has_value()) << "length " << len;
    EXPECT_TRUE(layout.error().IsCorruption());
  }
  // And on a real file, one length in each part: header, tables, data, footer.
  const std::string path = dir.Join("small.pcr");
  for (uint64_t len : {uint64_t{30}, r.layout.data_offset - 10, r.layout.data_offset + 5,
                       r.layout.file_size - 3}) {
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(len)), 0);
    auto file = PosixRandomAccessFile::Open(path);
    ASSERT_TRUE(file.has_value());
    auto layout = ReadRecordLayout(**file);
    ASSERT_FALSE(layout.has_value()) << "length " << len;
    EXPECT_NE(layout.error().message().find(path), std::string::npos);
  }
}

TEST(RecordTest, WrongVersionIsNotSupported) {
  TempDir dir;
  SmallRecord r = MakeSmallRecord(dir);
  Bytes b = r.bytes;
  b[8] = 2;
  uint32_t crc = crc32c::Mask(crc32c::Value(b.data(), 60));
  for (int i = 0; i < 4; ++i) b[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
  MemoryFile file("v2.pcr", b);
  auto layout = ReadRecordLayout(file);
  ASSERT_FALSE(layout.has_value());
  EXPECT_EQ(layout.error().code(), Status::Code::kNotSupported) << layout.error().ToString();
}

TEST(RecordTest, FaultsAffectOnlyTheirPieces) {
  TempDir dir;
  auto images = MakeImages(20, 5, 500);
  RecordLayout L = WriteRecord(dir.Join("f.pcr"), images);
  auto base = PosixRandomAccessFile::Open(dir.Join("f.pcr"));
  ASSERT_TRUE(base.has_value());
  for (size_t victim = 0; victim < L.images.size(); ++victim) {
    for (int g = 0; g < kNumGroups; ++g) {
      const PieceRef& bad = L.images[victim].pieces[g];
      if (bad.length == 0) continue;
      FaultInjectingFile file(base->get(), bad.offset, bad.offset + bad.length);
      for (size_t i = 0; i < L.images.size(); ++i) {
        const RecordImage& img = L.images[i];
        for (int k = 1; k <= kNumGroups; ++k) {
          Bytes out;
          Status s = ReadLevel(file, img.kind, img.pieces, k, &out);
          const bool uses = i == victim && (img.kind == EntryKind::kJpeg ? g < k : g == 0);
          EXPECT_EQ(s.ok(), !uses) << "victim " << victim << " group " << g + 1 << " image " << i
                                   << " level " << k << ": " << s.ToString();
          if (!s.ok()) {
            EXPECT_EQ(s.sys_errno(), EIO);
          }
        }
      }
      auto verify = VerifyRecord(file);
      ASSERT_TRUE(verify.has_value());
      ASSERT_EQ(verify->size(), 1u);
      EXPECT_EQ((*verify)[0].slot, victim);
    }
  }
}

TEST(RecordTest, ReadLevelChecksArguments) {
  TempDir dir;
  SmallRecord r = MakeSmallRecord(dir);
  MemoryFile file("small.pcr", r.bytes);
  Bytes out;
  const RecordImage& img = r.layout.images[0];
  EXPECT_EQ(ReadLevel(file, img.kind, img.pieces, 0, &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ReadLevel(file, img.kind, img.pieces, 11, &out).code(), Status::Code::kInvalidArgument);
  PieceRefs wild = img.pieces;
  wild[2].offset = UINT64_MAX - 2;
  wild[2].length = 100;
  EXPECT_TRUE(ReadLevel(file, img.kind, wild, 3, &out).IsCorruption());
  wild[2].offset = 0;
  wild[2].length = UINT64_MAX;
  EXPECT_TRUE(ReadLevel(file, img.kind, wild, 3, &out).IsCorruption());
}

}  // namespace
}  // namespace pcrfs::index
