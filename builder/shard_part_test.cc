// Sharded builds: the --shard argument, the record ranges, the listing and part.json formats,
// and parts built and merged as libraries into the single build's bytes.
#include "builder/shard_part.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "common/test_support.h"

namespace pcrfs::tools {
namespace {

namespace stdfs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;

TEST(ShardSpecTest, ParsesAndRefuses) {
  auto s = ParseShardSpec("2/7");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->index, 2u);
  EXPECT_EQ(s->count, 7u);
  EXPECT_TRUE(s->enabled());
  EXPECT_TRUE(ParseShardSpec("0/1").has_value());
  for (const char* bad :
       {"7/7", "1/0", "0/0", "", "/", "1/", "/2", "a/2", "1/2/3", "-1/2", "1 /2", "0/1000001"}) {
    auto r = ParseShardSpec(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_NE(r.error().message().find("--shard"), std::string::npos) << bad;
    }
  }
  EXPECT_NE(ParseShardSpec("3/3").error().message().find("between 0 and 2"), std::string::npos);
}

TEST(ShardSpecTest, RangesCoverEveryRecordOnce) {
  for (uint32_t records : {0u, 1u, 2u, 5u, 16u, 1000u, 4000000000u}) {
    for (uint32_t n : {1u, 2u, 3u, 7u, 20u, 1000u}) {
      uint32_t next = 0;
      for (uint32_t i = 0; i < n; ++i) {
        auto [first, last] = ShardRecordRange(records, {i, n});
        EXPECT_EQ(first, next) << records << " " << i << "/" << n;
        EXPECT_LE(last - first, records / n + 1);
        EXPECT_GE(last - first, records / n);
        next = last;
      }
      EXPECT_EQ(next, records);
    }
  }
}

void MakeSource(const std::string& src) {
  stdfs::create_directories(src + "/b/inner");
  stdfs::create_directories(src + "/a");
  stdfs::create_directories(src + "/empty");
  test::WriteTestJpegs(src, {"a/1.jpg", "a/2.jpg", "b/inner/3.jpg", "b/4.jpg", "b/5.jpg"},
                       {.width = 64, .height = 48, .width_step = 9, .height_step = 5, .seed = 300});
  // Pieces longer than a checksum block: block CRCs in the index.
  test::WriteRandomFile(src + "/b/blob.bin", 3 << 20, 9);
  const std::string text = "x,y\n";
  WriteAll(src + "/labels.csv", Bytes(text.begin(), text.end()));
}

TEST(ListingTest, RoundTripsAndRefusesDamage) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  auto tree = WalkSource(dir.Join("src"));
  ASSERT_TRUE(tree.has_value());
  const std::string bytes = EncodeListing(*tree);
  auto back = DecodeListing(bytes);
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(EncodeListing(*back), bytes);
  EXPECT_EQ(back->files, tree->files);
  ASSERT_EQ(back->nodes.size(), tree->nodes.size());
  for (size_t i = 0; i < tree->nodes.size(); ++i) {
    EXPECT_EQ(back->RelPath(back->nodes[i]), tree->RelPath(tree->nodes[i]));
    EXPECT_EQ(back->Children(back->nodes[i]), tree->Children(tree->nodes[i]));
    EXPECT_EQ(back->nodes[i].mtime_nsec, tree->nodes[i].mtime_nsec);
  }
  // Every truncation, and a node number out of range, is Corruption, never a crash.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = DecodeListing(std::string_view(bytes).substr(0, cut));
    EXPECT_FALSE(r.has_value()) << cut;
  }
  EXPECT_FALSE(DecodeListing(bytes + "x").has_value());
  std::string bad = bytes;
  bad[8] = '\x7f';  // the node count: more nodes than bytes
  EXPECT_FALSE(DecodeListing(bad).has_value());
  // A name longer than 255 bytes (a node's name is its length and 255 bytes at most).
  SourceTree one;
  one.nodes.emplace_back();
  one.nodes[0].is_dir = true;
  one.AddChild(0, std::string(200, 'n'), false);
  one.files.push_back(1);
  std::string named = EncodeListing(one);
  const std::string old_name = std::string("\xc8\x01", 2) + std::string(200, 'n');
  const size_t at = named.find(old_name);
  ASSERT_NE(at, std::string::npos);
  named.replace(at, old_name.size(), std::string("\x90\x02", 2) + std::string(272, 'n'));
  auto refused = DecodeListing(named);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message().find("longer than 255"), std::string::npos)
      << refused.error().message();
}

TEST(ShardPartTest, JsonRoundTripsAndChecksItself) {
  ShardPart p;
  p.generator = "pcrfs test";
  p.source = "/data/src";
  p.options = "format=1 images_per_record=2";
  p.shard = {1, 3};
  p.num_files = 10;
  p.num_records = 5;
  p.record_begin = 1;
  p.record_end = 3;
  p.listing_digest = "0123456789abcdef";
  p.listing_crc32c = 0xdeadbeef;
  // Record 2 carries the block CRCs of a long piece (slot 1, group 10); record 1 is of an older
  // part, without them.
  p.records = {{1, 100, 0x1234, false, {}},
               {2, 200, 0xffffffff, true, {{1, 10, {0x11, 0xffffffff, 7}}}}};
  p.changed = {{3, 7, -5, 999999999}};
  const std::string json = p.ToJson();
  auto back = ShardPart::FromJson(json);
  ASSERT_TRUE(back.has_value()) << back.error().ToString();
  EXPECT_EQ(back->ToJson(), json);
  EXPECT_EQ(back->changed[0].mtime_sec, -5);
  EXPECT_EQ(back->records[1].crc32c, 0xffffffffu);
  EXPECT_FALSE(back->records[0].has_blocks);
  ASSERT_TRUE(back->records[1].has_blocks);
  EXPECT_EQ(back->records[1].blocks, p.records[1].blocks);

  std::string edited = json;
  edited.replace(edited.find("\"num_files\": 10"), 15, "\"num_files\": 11");
  auto r = ShardPart::FromJson(edited);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("checksum mismatch"), std::string::npos);
  EXPECT_FALSE(ShardPart::FromJson(json.substr(0, json.size() / 2)).has_value());
  EXPECT_FALSE(ShardPart::FromJson("{}").has_value());
  // A record range that is not the shard's is refused even with a right checksum.
  ShardPart wrong = p;
  wrong.record_end = 4;
  wrong.records.push_back({3, 1, 1, false, {}});
  EXPECT_FALSE(ShardPart::FromJson(wrong.ToJson()).has_value());
}

BuildConfig Config(const std::string& src, const std::string& store) {
  BuildConfig c = test::SmallBuildConfig(src, store);
  c.quality_sample = 3;
  c.quality_seed = 4;
  c.threads = 1;
  return c;
}

TEST(ShardBuildTest, MergedPartsEqualTheSingleBuild) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  ASSERT_TRUE(Build(Config(dir.Join("src"), dir.Join("single"))).has_value());
  const auto single = test::StoreContent(dir.Join("single"));
  ASSERT_EQ(single.count("records/00000003.pcr"), 1u);  // 7 files, 2 per record
  for (uint32_t n : {1u, 2u, 3u, 5u}) {
    MergeConfig merge;
    merge.store = dir.Join("merged" + std::to_string(n));
    for (uint32_t i = n; i-- > 0;) {  // given in reverse order
      BuildConfig c =
          Config(dir.Join("src"), dir.Join(std::to_string(n) + "_" + std::to_string(i)));
      c.shard = {i, n};
      auto report = Build(c);
      ASSERT_TRUE(report.has_value()) << report.error().ToString();
      EXPECT_EQ(report->num_records, 4u);
      EXPECT_EQ(std::make_pair(report->record_begin, report->record_end),
                ShardRecordRange(4, c.shard));
      merge.parts.push_back(c.store);
    }
    ASSERT_TRUE(CheckMergeParts(merge).ok()) << CheckMergeParts(merge).ToString();
    auto lock = StoreWriterLock::Acquire(merge.store);
    ASSERT_TRUE(lock.has_value());
    auto report = MergeLocked(merge, *lock);
    ASSERT_TRUE(report.has_value()) << report.error().ToString();
    EXPECT_EQ(report->manifest.num_jpeg, 5u);
    EXPECT_EQ(report->manifest.quality.measured, 3u);
    EXPECT_EQ(test::StoreContent(merge.store), single) << n << " shards";
  }
  // The parts of 3 shards, one missing or twice, are refused before any work.
  MergeConfig bad;
  bad.store = dir.Join("bad");
  bad.parts = {dir.Join("3_0"), dir.Join("3_2")};
  EXPECT_NE(CheckMergeParts(bad).message().find("shard 1/3 is missing"), std::string::npos);
  bad.parts = {dir.Join("3_0"), dir.Join("3_1"), dir.Join("3_1"), dir.Join("3_2")};
  EXPECT_NE(CheckMergeParts(bad).message().find("given twice"), std::string::npos);
  bad.parts = {dir.Join("3_0"), dir.Join("3_1"), dir.Join("2_1")};
  EXPECT_NE(CheckMergeParts(bad).message().find("different N"), std::string::npos);
}

}  // namespace
}  // namespace pcrfs::tools
