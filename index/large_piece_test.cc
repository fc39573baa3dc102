// Pieces longer than one checksum block: written in a stream, checked block by block
// (index format 3), and still readable from an index of format 2.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <random>

#include "common/crc32c.h"
#include "common/test_support.h"
#include "index/lmdb/index_writer.h"
#include "index/record_reader.h"
#include "index/record_writer.h"
#include "index/store.h"

namespace pcrfs::index {
namespace {

using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;
using Bytes = std::vector<uint8_t>;

Bytes Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// A chunk reader over bytes in memory that fails at `fail_at` (if set).
RecordWriter::ChunkReader ReaderOf(const Bytes& data, uint64_t fail_at = UINT64_MAX) {
  return [&data, fail_at](uint64_t offset, std::span<uint8_t> dst) {
    if (dst.size() > kChecksumBlockSize) return Status::InvalidArgument("chunk too large");
    if (offset + dst.size() > fail_at) return Status::IOError("source went away", 5);
    std::copy(data.begin() + static_cast<std::ptrdiff_t>(offset),
              data.begin() + static_cast<std::ptrdiff_t>(offset + dst.size()), dst.begin());
    return Status::OK();
  };
}

const Bytes& BigFile() {
  static const Bytes b = Random(3 * kChecksumBlockSize + 12345, 7);
  return b;
}
const Bytes& SmallFile() {
  static const Bytes b = Random(100, 8);
  return b;
}
// A JPEG whose group-10 piece spans three blocks.
std::vector<Bytes> JpegPieces() {
  std::vector<Bytes> p;
  for (int g = 1; g <= kNumGroups; ++g) {
    p.push_back(Random(g == 10 ? 2 * kChecksumBlockSize + 1 : 50u + g, 100 + g));
  }
  return p;
}

// A store "/": big.bin(2) photo.jpg(3) small.txt(4) in one record, with an index of `format`.
// Returns the writer's block CRCs.
std::vector<PieceBlockCrcs> BuildStore(
    const std::string& dir, int format,
    uint64_t memory_budget = RecordWriter::kDefaultMemoryBudget) {
  std::vector<PieceBlockCrcs> blocks;
  EXPECT_EQ(mkdir((dir + "/records").c_str(), 0755), 0);
  auto w = RecordWriter::Create(dir + "/" + RecordFileName(0), memory_budget);
  EXPECT_TRUE(w.has_value());
  EXPECT_TRUE(
      (*w)->AddStream("big.bin", PassthroughReason::kNotJpeg, BigFile().size(), ReaderOf(BigFile()))
          .ok());
  const std::vector<Bytes> jpeg = JpegPieces();
  std::vector<std::span<const uint8_t>> spans(jpeg.begin(), jpeg.end());
  EXPECT_TRUE((*w)->Add("photo.jpg", EntryKind::kJpeg, PassthroughReason::kNone, spans).ok());
  std::span<const uint8_t> small(SmallFile());
  EXPECT_TRUE(
      (*w)->Add("small.txt", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, {&small, 1})
          .ok());
  blocks = (*w)->block_crcs();
  auto layout = (*w)->Finish();
  EXPECT_TRUE(layout.has_value()) << layout.error().ToString();

  auto iw = IndexWriter::Create(dir + "/" + kIndexFile, format);
  EXPECT_TRUE(iw.has_value());
  Entry root;
  root.ino = 1;
  root.parent = 1;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = 3;
  EXPECT_TRUE((*iw)->AddEntry(root).ok());
  const char* names[] = {"big.bin", "photo.jpg", "small.txt"};
  for (uint32_t slot = 0; slot < 3; ++slot) {
    const RecordImage& img = layout->images[slot];
    Entry e;
    e.ino = 2 + slot;
    e.parent = 1;
    e.name = names[slot];
    e.kind = img.kind;
    e.passthrough_reason = img.passthrough_reason;
    e.mode = 0644;
    e.slot = slot;
    e.pieces = img.pieces;
    e.source_size = e.SizeAtLevel(kNumGroups);
    EXPECT_TRUE((*iw)->AddEntry(e).ok());
    if (format < 3) continue;
    for (const PieceBlockCrcs& b : blocks) {
      if (b.slot == slot) {
        EXPECT_TRUE((*iw)->AddBlockCrcs(e.ino, b.group, b.masked).ok());
      }
    }
  }
  RecordInfo info;
  info.file_size = layout->file_size;
  info.data_offset = layout->data_offset;
  info.group_offset = layout->group_offset;
  info.num_images = 3;
  EXPECT_TRUE((*iw)->AddRecord(info).ok());
  EXPECT_TRUE((*iw)->Finish().ok());
  Manifest m;
  m.generator = "pcrfs test";
  m.options.images_per_record = 16;
  m.options.max_input_scans = 1000;
  m.num_entries = 4;
  m.num_directories = 1;
  m.num_jpeg = 1;
  m.num_passthrough = 2;
  m.passthrough_by_reason = {{"not-jpeg", 2}};
  m.num_records = 1;
  const std::string json = m.ToJson();
  WriteAll(dir + "/" + kManifestFile, Bytes(json.begin(), json.end()));
  return blocks;
}

Bytes Expected(const std::string& name, int k) {
  if (name == "big.bin") return BigFile();
  if (name == "small.txt") return SmallFile();
  Bytes out;
  const std::vector<Bytes> jpeg = JpegPieces();
  for (int g = 0; g < k; ++g) out.insert(out.end(), jpeg[g].begin(), jpeg[g].end());
  out.push_back(0xFF);
  out.push_back(0xD9);
  return out;
}

TEST(LargePieceTest, WriterBlockCrcsMatchTheBytes) {
  TempDir dir;
  auto blocks = BuildStore(dir.path(), kIndexFormat);
  ASSERT_EQ(blocks.size(), 2u);  // big.bin's piece 1, photo.jpg's piece 10
  EXPECT_EQ(blocks[0].slot, 0u);
  EXPECT_EQ(blocks[0].group, 1);
  EXPECT_EQ(blocks[1].slot, 1u);
  EXPECT_EQ(blocks[1].group, 10);
  auto file = PosixRandomAccessFile::Open(dir.Join(RecordFileName(0)));
  ASSERT_TRUE(file.has_value());
  auto layout = ReadRecordLayout(**file);
  ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
  for (const PieceBlockCrcs& b : blocks) {
    const PieceRef& p = layout->images[b.slot].pieces[static_cast<size_t>(b.group - 1)];
    auto computed = ComputeBlockCrcs(**file, p);
    ASSERT_TRUE(computed.has_value());
    EXPECT_EQ(*computed, b.masked);
    EXPECT_EQ(b.masked.size(), NumChecksumBlocks(p.length));
  }
  // The streamed file is one piece with the CRC of its bytes, like Add() gives.
  EXPECT_EQ(layout->images[0].pieces[0].masked_crc, crc32c::Mask(crc32c::Value(BigFile())));
  EXPECT_EQ(layout->images[0].pieces[0].length, BigFile().size());
}

TEST(LargePieceTest, ReadsEveryByteInBothFormats) {
  for (int format : {kIndexFormat, kOldestIndexFormat}) {
    TempDir dir;
    BuildStore(dir.path(), format);
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    // An index.lmdb is converted to format 4 at open; one of format 2 has no block CRCs, which
    // are then derived by reading the piece once.
    EXPECT_EQ((*store)->index().format(), kCompactIndexFormat);
    for (const char* name : {"big.bin", "photo.jpg", "small.txt"}) {
      auto e = (*store)->index().LookupPath(name);
      ASSERT_TRUE(e.has_value());
      for (int k : {1, 9, 10}) {
        Bytes got;
        size_t largest = 0;
        Status s = (*store)->ReadFileTo(*e, k, [&](std::span<const uint8_t> b) {
          largest = std::max(largest, b.size());
          got.insert(got.end(), b.begin(), b.end());
          return Status::OK();
        });
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(got, Expected(name, k)) << name << " level " << k << " format " << format;
        EXPECT_LE(largest, kChecksumBlockSize);  // handed over block by block
      }
    }
  }
}

// One damaged byte in block 2 of a large piece costs reads of that block only (format 3). A
// format 2 index has no block CRCs: the whole piece is checked, and fails.
TEST(LargePieceTest, DamageCostsOnlyItsBlock) {
  for (int format : {kIndexFormat, kOldestIndexFormat}) {
    TempDir dir;
    BuildStore(dir.path(), format);
    const std::string record = dir.Join(RecordFileName(0));
    uint64_t big_offset;
    {
      auto file = PosixRandomAccessFile::Open(record);
      big_offset = ReadRecordLayout(**file)->images[0].pieces[0].offset;
    }
    Bytes bytes = ReadAll(record);
    bytes[big_offset + 2 * kChecksumBlockSize + 17] ^= 0x40;
    WriteAll(record, bytes);
    auto store = Store::Open(dir.path());
    ASSERT_TRUE(store.has_value());
    auto e = (*store)->index().LookupPath("big.bin");
    auto file = (*store)->OpenRecord(0);
    ASSERT_TRUE(file.has_value());
    Bytes buf(kChecksumBlockSize);
    for (uint64_t b = 0; b < 4; ++b) {
      Status s = (*store)->ReadBlock(*file, *e, 1, b, buf.data());
      if (b == 2 || format == kOldestIndexFormat) {
        EXPECT_TRUE(s.IsCorruption()) << "block " << b << " format " << format;
        EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
      } else {
        ASSERT_TRUE(s.ok()) << s.ToString();
        const uint64_t n = ChecksumBlockLength(BigFile().size(), b);
        EXPECT_TRUE(
            std::equal(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n),
                       BigFile().begin() + static_cast<std::ptrdiff_t>(b * kChecksumBlockSize)));
      }
    }
    // Streaming stops at the damage: nothing past it is handed over.
    uint64_t handed = 0;
    Status s = (*store)->ReadFileTo(*e, 10, [&](std::span<const uint8_t> b) {
      handed += b.size();
      return Status::OK();
    });
    EXPECT_TRUE(s.IsCorruption());
    EXPECT_EQ(handed, format == kIndexFormat ? 2 * kChecksumBlockSize : 0u);
    // The other files are untouched.
    for (const char* name : {"photo.jpg", "small.txt"}) {
      Bytes got;
      ASSERT_TRUE((*store)->ReadFile(*(*store)->index().LookupPath(name), 10, &got).ok());
      EXPECT_EQ(got, Expected(name, 10));
    }
  }
}

// A stream that fails half way leaves nothing of itself in the record, and the writer goes on,
// whether its bytes were still in memory or already spilled to disk.
TEST(LargePieceTest, FailedStreamIsRolledBack) {
  for (uint64_t budget : {RecordWriter::kDefaultMemoryBudget, uint64_t{1000}}) {
    TempDir dir;
    const std::string path = dir.Join("r.pcr");
    auto w = RecordWriter::Create(path, budget);
    ASSERT_TRUE(w.has_value());
    std::span<const uint8_t> small(SmallFile());
    ASSERT_TRUE(
        (*w)->Add("first.txt", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, {&small, 1})
            .ok());
    Status s = (*w)->AddStream("big.bin", PassthroughReason::kNotJpeg, BigFile().size(),
                               ReaderOf(BigFile(), 2 * kChecksumBlockSize + 5));
    EXPECT_EQ(s.code(), Status::Code::kIOError);
    EXPECT_TRUE((*w)->block_crcs().empty());
    ASSERT_TRUE((*w)->AddStream("big.bin", PassthroughReason::kNotJpeg, BigFile().size(),
                                ReaderOf(BigFile()))
                    .ok());
    ASSERT_TRUE(
        (*w)->Add("last.txt", EntryKind::kPassthrough, PassthroughReason::kNotJpeg, {&small, 1})
            .ok());
    auto layout = (*w)->Finish();
    ASSERT_TRUE(layout.has_value()) << layout.error().ToString();
    ASSERT_EQ(layout->images.size(), 3u);
    EXPECT_EQ(layout->GroupEnd(1) - layout->data_offset, BigFile().size() + 2 * SmallFile().size());
    auto file = PosixRandomAccessFile::Open(path);
    ASSERT_TRUE(file.has_value());
    auto reread = ReadRecordLayout(**file);
    ASSERT_TRUE(reread.has_value());
    EXPECT_EQ(*reread, *layout);
    const Bytes* want[] = {&SmallFile(), &BigFile(), &SmallFile()};
    for (size_t i = 0; i < 3; ++i) {
      Bytes got;
      ASSERT_TRUE(
          ReadLevel(**file, EntryKind::kPassthrough, layout->images[i].pieces, 10, &got).ok());
      EXPECT_EQ(got, *want[i]) << i;
    }
    auto v = VerifyRecord(**file);
    ASSERT_TRUE(v.has_value());
    EXPECT_TRUE(v->empty());
  }
}

}  // namespace
}  // namespace pcrfs::index
