// The builder and the verifier as libraries, without the command line: a store from generated
// JPEGs and other files, its determinism, --resume, large files streamed into records, and the
// verifier's findings on a clean and on a damaged store.
#include "builder/builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "builder/build_stages.h"
#include "builder/builder_test_support.h"
#include "builder/provenance.h"
#include "builder/quality_sample.h"
#include "builder/remote_source.h"
#include "builder/verifier.h"
#include "common/test_support.h"
#include "index/record_format.h"
#include "index/store.h"

namespace pcrfs::tools {
namespace {

namespace stdfs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using pcrfs::test::ReadAll;
using pcrfs::test::TempDir;
using pcrfs::test::WriteAll;

void MakeSource(const std::string& src) {
  stdfs::create_directories(src + "/cats/inner");
  stdfs::create_directories(src + "/dogs");
  test::WriteTestJpegs(
      src, {"cats/a.jpg", "cats/b.jpg", "cats/inner/c.jpg", "dogs/d.jpg"},
      {.width = 90, .height = 70, .width_step = 13, .height_step = 7, .seed = 100});
  const std::string text = "labels\n";
  WriteAll(src + "/labels.csv", Bytes(text.begin(), text.end()));
  // Larger than the streaming threshold (16 MiB): copied into its record block by block.
  test::WriteRandomFile(src + "/dogs/video.bin", 17 << 20, 5);
}

TEST(BuilderTest, BuildsAStoreThatReadsBackExactly) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  auto report = Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("store")));
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  EXPECT_EQ(report->files_total, 6u);
  EXPECT_EQ(report->manifest.num_jpeg, 4u);
  EXPECT_EQ(report->manifest.num_passthrough, 2u);
  EXPECT_EQ(report->manifest.num_records, 3u);  // 6 files, 2 per record
  EXPECT_TRUE(report->problems.empty());
  auto store = index::Store::Open(dir.Join("store"));
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  EXPECT_EQ((*store)->index().format(), index::kCompactIndexFormat);  // index.pcri
  for (const char* name : {"labels.csv", "dogs/video.bin"}) {
    auto e = (*store)->index().LookupPath(name);
    ASSERT_TRUE(e.has_value()) << name;
    Bytes got;
    ASSERT_TRUE((*store)->ReadFile(*e, 1, &got).ok());
    EXPECT_EQ(got, ReadAll(dir.Join("src/") + name)) << name;
  }
  // The 17 MiB file carries a CRC per 1 MiB block in the index.
  auto video = (*store)->index().LookupPath("dogs/video.bin");
  EXPECT_TRUE((*store)->index().GetBlockCrc(video->ino, 1, 16).has_value());
  auto jpeg = (*store)->index().LookupPath("cats/inner/c.jpg");
  ASSERT_TRUE(jpeg.has_value());
  EXPECT_EQ(jpeg->kind, index::EntryKind::kJpeg);
  Bytes level10;
  ASSERT_TRUE((*store)->ReadFile(*jpeg, 10, &level10).ok());
  EXPECT_EQ(level10.size(), jpeg->SizeAtLevel(10));
}

TEST(BuilderTest, SameInputSameBytesWhateverTheThreads) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  BuildConfig one = test::SmallBuildConfig(dir.Join("src"), dir.Join("one"));
  one.threads = 1;
  BuildConfig three = test::SmallBuildConfig(dir.Join("src"), dir.Join("three"));
  three.threads = 3;
  ASSERT_TRUE(Build(one).has_value());
  ASSERT_TRUE(Build(three).has_value());
  EXPECT_EQ(test::StoreContent(dir.Join("one")), test::StoreContent(dir.Join("three")));
}

// --resume trusts only what the interrupted build recorded about itself (STORE.partial/.build):
// a partial folder without it is rebuilt from scratch, to the same bytes. (Kills at random
// points and their resumes are tested end to end in tests/e2e/test_faults.py.)
TEST(BuilderTest, ResumeWithoutBuildStateStartsOver) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  ASSERT_TRUE(Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("ref"))).has_value());
  ASSERT_TRUE(Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("store"))).has_value());
  stdfs::rename(dir.Join("store"), dir.Join("store.partial"));
  stdfs::create_directories(dir.Join("store.partial/.build"));
  stdfs::remove(dir.Join("store.partial/index.lmdb"));
  stdfs::remove(dir.Join("store.partial/manifest.json"));
  // Without the state folder nothing can be trusted: it is rebuilt from scratch.
  BuildConfig resume = test::SmallBuildConfig(dir.Join("src"), dir.Join("store"));
  resume.resume = true;
  auto report = Build(resume);
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  EXPECT_EQ(report->records_reused, 0u);
  EXPECT_EQ(test::StoreContent(dir.Join("store")), test::StoreContent(dir.Join("ref")));
}

TEST(BuilderTest, BadArgumentsAreRefusedBeforeAnyWork) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  EXPECT_EQ(CheckBuildArguments(test::SmallBuildConfig(dir.Join("missing"), dir.Join("s"))).code(),
            Status::Code::kNotFound);
  EXPECT_EQ(
      CheckBuildArguments(test::SmallBuildConfig(dir.Join("src"), dir.Join("src/inside"))).code(),
      Status::Code::kInvalidArgument);
  BuildConfig zero = test::SmallBuildConfig(dir.Join("src"), dir.Join("s"));
  zero.images_per_record = 0;
  EXPECT_EQ(CheckBuildArguments(zero).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("s"))).has_value());
  EXPECT_EQ(CheckBuildArguments(test::SmallBuildConfig(dir.Join("src"), dir.Join("s"))).code(),
            Status::Code::kAlreadyExists);
  EXPECT_FALSE(stdfs::exists(dir.Join("missing.partial")));
}

TEST(VerifierTest, CleanStoreAndItsSourcePass) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  ASSERT_TRUE(Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("store"))).has_value());
  VerifyConfig v;
  v.store = dir.Join("store");
  v.source = dir.Join("src");
  v.jobs = 2;
  auto report = VerifyStore(v);
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  EXPECT_TRUE(report->findings.empty())
      << report->findings[0].path << ": " << report->findings[0].reason;
  EXPECT_EQ(report->records, 3u);
  EXPECT_EQ(report->compared, 6u);
}

TEST(VerifierTest, FindsDamageDifferencesAndStrays) {
  TempDir dir;
  MakeSource(dir.Join("src"));
  ASSERT_TRUE(Build(test::SmallBuildConfig(dir.Join("src"), dir.Join("store"))).has_value());
  // Flip a byte inside video.bin's piece (a record of its own or with one other file) and
  // change a source file after the build.
  auto store = index::Store::Open(dir.Join("store"));
  auto video = (*store)->index().LookupPath("dogs/video.bin");
  const std::string record = dir.Join("store/") + index::RecordFileName(video->record);
  store->reset();
  Bytes bytes = ReadAll(record);
  bytes[video->pieces[0].offset + 5 * index::kChecksumBlockSize + 3] ^= 1;
  WriteAll(record, bytes);
  const std::string changed = "changed\n";
  WriteAll(dir.Join("src/labels.csv"), Bytes(changed.begin(), changed.end()));
  WriteAll(dir.Join("store/records/stray.tmp"), Bytes{1, 2, 3});

  VerifyConfig v;
  v.store = dir.Join("store");
  v.source = dir.Join("src");
  auto report = VerifyStore(v);
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  auto has = [&](VerifyFinding::Kind kind, const std::string& path_part) {
    return std::any_of(report->findings.begin(), report->findings.end(), [&](const auto& f) {
      return f.kind == kind && f.path.find(path_part) != std::string::npos;
    });
  };
  EXPECT_TRUE(has(VerifyFinding::Kind::kDamaged, "video.bin"));
  EXPECT_TRUE(has(VerifyFinding::Kind::kDiffers, "labels.csv"));
  EXPECT_TRUE(has(VerifyFinding::Kind::kStray, "stray.tmp"));
  EXPECT_FALSE(has(VerifyFinding::Kind::kDamaged, "cats/a.jpg"));
}

TEST(BuildProgressTest, StagesInOrderEndingAtTheirTotals) {
  TempDir dir;
  const std::string src = dir.Join("src"), store = dir.Join("st");
  MakeSource(src);
  BuildConfig c = test::SmallBuildConfig(src, store);
  c.quality_sample = 3;
  std::vector<BuildProgress> seen;
  c.progress = [&](const BuildProgress& p) { seen.push_back(p); };
  auto report = Build(c);
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  using Stage = BuildProgress::Stage;
  ASSERT_FALSE(seen.empty());
  // Stages never go back, counts never fall within a stage.
  for (size_t i = 1; i < seen.size(); ++i) {
    ASSERT_GE(seen[i].stage, seen[i - 1].stage);
    if (seen[i].stage == seen[i - 1].stage) {
      EXPECT_GE(seen[i].done, seen[i - 1].done);
      EXPECT_GE(seen[i].bytes, seen[i - 1].bytes);
    }
  }
  auto last_of = [&](Stage s) {
    std::optional<BuildProgress> last;
    for (const auto& p : seen) {
      if (p.stage == s) last = p;
    }
    return last;
  };
  const uint64_t source_bytes = report->manifest.source_bytes;
  auto listing = last_of(Stage::kListing);
  ASSERT_TRUE(listing.has_value());
  EXPECT_EQ(listing->done, 6u);
  EXPECT_EQ(listing->bytes, source_bytes);
  EXPECT_EQ(listing->total, 0u);  // not known while listing
  auto files = last_of(Stage::kFiles);
  ASSERT_TRUE(files.has_value());
  EXPECT_EQ(files->done, 6u);
  EXPECT_EQ(files->total, 6u);
  EXPECT_EQ(files->bytes, source_bytes);
  EXPECT_EQ(files->bytes_total, source_bytes);
  auto quality = last_of(Stage::kQuality);
  ASSERT_TRUE(quality.has_value());
  EXPECT_EQ(quality->done, 3u);
  EXPECT_EQ(quality->total, 3u);
}

// A build whose files the quality sample all takes measures the windows of its large JPEGs
// cut while it transcoded them; one with more files than the sample takes cuts them from the
// stored level 10 afterwards, as `pcr quality` does on a finished store. The figures are the
// same doubles all three ways.
TEST(BuildQualityTest, WindowsCutWhileTranscodingGiveTheFiguresOfTheStoredLevel10) {
  TempDir dir;
  const std::string a = dir.Join("a"), b = dir.Join("b");
  for (const std::string& src : {a, b}) {
    stdfs::create_directories(src + "/big");
    test::WriteTestJpegs(src, {"big/wide.jpg"}, {.width = 1500, .height = 700, .seed = 1});
    test::WriteTestJpegs(src, {"big/tall.jpg"}, {.width = 600, .height = 1300, .seed = 2});
    test::WriteTestJpegs(src, {"big/both.jpg"}, {.width = 1400, .height = 1200, .seed = 3});
    test::WriteTestJpegs(src, {"small.jpg"}, {.width = 300, .height = 200, .seed = 4});
  }
  // Two files more than the sample takes: which ones it takes is known only once all are stored.
  const std::string text = "notes\n";
  WriteAll(b + "/notes.txt", Bytes(text.begin(), text.end()));
  test::WriteRandomFile(b + "/data.bin", 5000, 6);
  std::array<index::QualitySample, 2> built;
  for (int i = 0; i < 2; ++i) {
    BuildConfig c = test::SmallBuildConfig(i == 0 ? a : b, dir.Join(i == 0 ? "sa" : "sb"));
    c.quality_sample = 4;
    auto report = Build(c);
    ASSERT_TRUE(report.has_value()) << report.error().ToString();
    EXPECT_EQ(report->manifest.num_jpeg, 4u);
    built[i] = report->manifest.quality;
  }
  auto store = index::Store::Open(dir.Join("sa"));
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  auto measured = MeasureStoreQuality(**store, 4, 0, 2);
  ASSERT_TRUE(measured.has_value()) << measured.error().ToString();
  for (const index::QualitySample& q : built) {
    EXPECT_EQ(q.measured, 4u);
    for (size_t k = 0; k < q.levels.size(); ++k) {
      const index::LevelQuality &x = q.levels[k], &y = (*measured)[k];
      EXPECT_EQ(x.n, y.n) << k;
      EXPECT_EQ(x.mean_psnr, y.mean_psnr) << k;
      EXPECT_EQ(x.p5_psnr, y.p5_psnr) << k;
      EXPECT_EQ(x.min_psnr, y.min_psnr) << k;
      EXPECT_EQ(x.mean_msssim, y.mean_msssim) << k;
      EXPECT_EQ(x.p5_msssim, y.p5_msssim) << k;
      EXPECT_EQ(x.min_msssim, y.min_msssim) << k;
    }
  }
  // Not the trivial figures of identical images.
  EXPECT_LT(built[0].levels[0].mean_msssim, 0.999);
}

// With more files than the sample takes, the records stage predicts the sample, to cut the
// windows of those files while transcoding them: for a tree of JPEGs only, its prediction is
// exactly the sample the finished store measures, whatever the seed.
TEST(BuildQualityTest, ThePredictedSampleOfATreeOfJpegsIsTheSampleMeasured) {
  TempDir dir;
  const std::string src = dir.Join("src");
  for (const char* d : {"/a/deep", "/b", "/c"}) stdfs::create_directories(src + d);
  std::vector<std::string> names;
  for (int i = 0; i < 36; ++i) {
    const char* folder[] = {"a/", "a/deep/", "b/", "c/", ""};
    names.push_back(folder[i % 5] + std::to_string(i) + ".jpg");
  }
  test::WriteTestJpegs(src, names, {.width = 40, .height = 30, .seed = 9});
  auto tree = WalkSource(src);
  ASSERT_TRUE(tree.has_value()) << tree.error().ToString();
  for (uint64_t seed : {0, 1, 2, 3, 77}) {
    BuildConfig c = test::SmallBuildConfig(src, dir.Join("st" + std::to_string(seed)));
    c.quality_sample = 7;
    c.quality_seed = seed;
    ASSERT_TRUE(Build(c).has_value());
    auto store = index::Store::Open(c.store);
    ASSERT_TRUE(store.has_value()) << store.error().ToString();
    const index::IndexReader& idx = (*store)->index();
    std::vector<uint64_t> jpegs;
    for (uint64_t ino = index::kRootIno; ino <= idx.NumEntries(); ++ino) {
      if (idx.Get(ino)->kind == index::EntryKind::kJpeg) jpegs.push_back(ino);
    }
    ASSERT_EQ(jpegs.size(), names.size());
    std::set<std::string> measured, predicted;
    for (uint64_t ino : ChooseQualitySample(jpegs, 7, seed)) {
      std::string path = idx.Get(ino)->name;
      for (uint64_t p = idx.Get(ino)->parent; p != index::kRootIno; p = idx.Get(p)->parent) {
        path = idx.Get(p)->name + "/" + path;
      }
      measured.insert(path);
    }
    const std::vector<bool> likely = FilesLikelySampled(*tree, 7, seed);
    for (size_t i = 0; i < likely.size(); ++i) {
      if (likely[i]) predicted.insert(tree->RelPath(tree->nodes[tree->files[i]]));
    }
    EXPECT_EQ(measured.size(), 7u);
    EXPECT_EQ(predicted, measured) << "seed " << seed;
  }
  // No more files than the sample: every one.
  const std::vector<bool> all = FilesLikelySampled(*tree, 36, 5);
  EXPECT_EQ(std::count(all.begin(), all.end(), true), 36);
}

TEST(ProvenanceTest, WrittenBesideTheManifestAndRoundTrips) {
  TempDir dir;
  const std::string src = dir.Join("src"), store = dir.Join("st");
  MakeSource(src);
  const int64_t before = UnixMillisNow();
  auto report = Build(test::SmallBuildConfig(src, store));
  ASSERT_TRUE(report.has_value()) << report.error().ToString();
  const Bytes bytes = ReadAll(store + "/" + kProvenanceFile);
  auto p = Provenance::FromJson(std::string(bytes.begin(), bytes.end()));
  ASSERT_TRUE(p.has_value()) << p.error().ToString();
  EXPECT_EQ(p->command, "build");
  EXPECT_EQ(p->source_kind, "folder");
  EXPECT_EQ(p->source, src);
  EXPECT_EQ(p->shards, 0u);
  EXPECT_EQ(p->threads, 2u);
  EXPECT_EQ(p->files_listed, 6u);
  EXPECT_GE(p->started_ms, before);
  EXPECT_GE(p->finished_ms, p->started_ms);
  EXPECT_LE(p->finished_ms, UnixMillisNow());
  EXPECT_EQ(Provenance::FromJson(p->ToJson())->ToJson(), p->ToJson());
  // The manifest holds none of it.
  const Bytes manifest = ReadAll(store + "/manifest.json");
  const std::string m(manifest.begin(), manifest.end());
  EXPECT_EQ(m.find(src), std::string::npos);
  EXPECT_EQ(m.find(std::to_string(p->started_ms)), std::string::npos);

  for (const char* bad : {"", "[]", "{\"command\": 1}", "{\"command\": \"build\"}"}) {
    EXPECT_FALSE(Provenance::FromJson(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatUtc(0), "1970-01-01 00:00:00 UTC");
  EXPECT_EQ(FormatUtc(1795445181741), "2026-11-23 14:46:21 UTC");
}

TEST(RemoteSourceTest, WhatAUrlNames) {
  EXPECT_FALSE(IsRemoteArchiveUrl("s3://bucket/datasets/train"));
  EXPECT_FALSE(IsRemoteArchiveUrl("s3://bucket"));
  EXPECT_FALSE(IsRemoteArchiveUrl("s3://bucket/x.tar.d"));
  EXPECT_TRUE(IsRemoteArchiveUrl("s3://bucket/archives/train.TAR"));
  EXPECT_TRUE(IsRemoteArchiveUrl("s3://bucket/a.tar.gz"));
  EXPECT_TRUE(IsRemoteArchiveUrl("s3://bucket/a.tgz"));
  EXPECT_TRUE(IsRemoteArchiveUrl("s3://bucket/a.zip"));
  EXPECT_TRUE(IsRemoteArchiveUrl("https://example.org/data"));  // http(s): always an archive
  EXPECT_FALSE(IsRemoteArchiveUrl("/local/train.tar"));
  // A URL is checked for its form before the lock; it is reached only when the build starts.
  BuildConfig c;
  c.source = "s3://bucket/p?x=1";
  c.store = "/nonexistent-parent/st";
  EXPECT_FALSE(CheckBuildArguments(c).ok());
}

// A listing whose continuation tokens go round (A, B, A, ...) ends in one line, not a loop.
class LoopingLister final : public ObjectClient {
 public:
  Result<ObjectListing> List(std::string_view token, uint32_t) override {
    ++pages;
    ObjectListing page;
    page.entries.push_back({"k" + std::to_string(pages), 1, 0, 0});
    page.next_token = token == "A" ? "B" : "A";  // "" -> A -> B -> A
    return page;
  }
  std::string Name(std::string_view key) const override { return "s3://b/" + std::string(key); }
  int pages = 0;

 protected:
  void DoGet(ObjectGet, GetCallback done) override { done(Err(Status::NotFound("no"))); }
};

TEST(RemoteSourceTest, AListingThatLoopsFails) {
  auto lister = std::make_shared<LoopingLister>();
  RemoteAccess access;
  access.name = "s3://b/p";
  access.is_bucket = true;
  access.client = lister;
  auto src = BucketSource::Open(access);
  ASSERT_FALSE(src.has_value());
  EXPECT_TRUE(src.error().IsCorruption());
  EXPECT_EQ(src.error().message(),
            "s3://b/p: the listing gave a continuation token it gave before (a loop)");
  EXPECT_EQ(lister->pages, 3);
}

}  // namespace
}  // namespace pcrfs::tools
