// The daemon's logic without a mount: a real store built from generated JPEGs.
#include "fs/filesystem.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "mount-tools/builder.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

class FilesystemTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(stdfs::temp_directory_path() /
                           ("pcrfs-fs-test-" + std::to_string(::getpid())));
    stdfs::remove_all(*dir_);
    const std::string src = *dir_ + "/src";
    stdfs::create_directories(src + "/a/b");
    stdfs::create_directories(src + "/empty");
    int i = 0;
    for (const char* name : {"a/one.jpg", "a/two.jpg", "a/b/three.jpg", "top.jpg"}) {
      testdata::JpegSpec spec;
      spec.width = 200 + 17 * i;
      spec.height = 150 + 9 * i;
      spec.seed = static_cast<uint32_t>(i++);
      auto jpeg = testdata::MakeTestJpeg(spec);
      ASSERT_TRUE(jpeg.has_value());
      std::ofstream(src + "/" + name, std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg->data()),
                 static_cast<std::streamsize>(jpeg->size()));
    }
    std::ofstream(src + "/notes.txt") << "plain text, stored byte for byte\n";
    tools::BuildConfig config;
    config.source = src;
    config.store = *dir_ + "/store";
    config.images_per_record = 2;
    auto report = tools::Build(config);
    ASSERT_TRUE(report.has_value()) << report.error().ToString();
  }
  static void TearDownTestSuite() {
    stdfs::remove_all(*dir_);
    delete dir_;
  }

  std::unique_ptr<Filesystem> Make(FsOptions options = {}) {
    auto store = index::Store::Open(*dir_ + "/store");
    EXPECT_TRUE(store.has_value());
    return std::make_unique<Filesystem>(std::move(*store), options);
  }

  // Resolves a '/'-separated path from the mount root.
  static uint64_t Walk(const Filesystem& fs, const std::string& path) {
    uint64_t ino = kFuseRootIno;
    size_t pos = 0;
    while (pos < path.size()) {
      size_t slash = path.find('/', pos);
      if (slash == std::string::npos) slash = path.size();
      auto st = fs.Lookup(ino, path.substr(pos, slash - pos));
      if (!st) return 0;
      ino = st->st_ino;
      pos = slash + 1;
    }
    return ino;
  }

  static std::vector<uint8_t> ReadAll(const Filesystem& fs, uint64_t ino) {
    auto st = fs.GetAttr(ino);
    std::vector<uint8_t> out(static_cast<size_t>(st->st_size) + 10);
    auto n = fs.Read(ino, 0, out.size(), out.data());
    EXPECT_TRUE(n.has_value());
    out.resize(n ? *n : 0);
    return out;
  }

  static std::string* dir_;
};

std::string* FilesystemTest::dir_ = nullptr;

TEST_F(FilesystemTest, LadderRootListsTenLevels) {
  auto fs = Make();
  std::vector<std::string> names;
  ASSERT_TRUE(fs->ReadDir(kFuseRootIno, 0, [&](std::string_view n, const struct stat&, uint64_t) {
                  names.emplace_back(n);
                  return true;
                }).ok());
  ASSERT_EQ(names.size(), 12u);
  EXPECT_EQ(names[0], ".");
  EXPECT_EQ(names[2], "scan1");
  EXPECT_EQ(names[11], "scan10");
  EXPECT_EQ(fs->GetAttr(kFuseRootIno)->st_nlink, 12u);
}

TEST_F(FilesystemTest, LevelsMatchStoreReadsAndGrow) {
  auto fs = Make();
  for (const std::string rel : {"a/one.jpg", "a/b/three.jpg", "top.jpg", "notes.txt"}) {
    auto entry = fs->store().index().LookupPath(rel);
    ASSERT_TRUE(entry.has_value());
    uint64_t prev = 0;
    for (int k = 1; k <= 10; ++k) {
      const uint64_t ino = Walk(*fs, "scan" + std::to_string(k) + "/" + rel);
      ASSERT_NE(ino, 0u) << rel;
      auto st = fs->GetAttr(ino);
      ASSERT_TRUE(st.has_value());
      std::vector<uint8_t> expected;
      ASSERT_TRUE(fs->store().ReadFile(*entry, k, &expected).ok());
      EXPECT_EQ(static_cast<uint64_t>(st->st_size), expected.size());
      EXPECT_EQ(ReadAll(*fs, ino), expected) << rel << " level " << k;
      EXPECT_GE(expected.size(), prev);
      prev = expected.size();
    }
  }
}

TEST_F(FilesystemTest, RandomOffsetReadsAreSlices) {
  auto fs = Make();
  std::mt19937 rng(3);
  for (int k : {1, 4, 10}) {
    const uint64_t ino = Walk(*fs, "scan" + std::to_string(k) + "/a/two.jpg");
    const std::vector<uint8_t> whole = ReadAll(*fs, ino);
    for (int i = 0; i < 200; ++i) {
      const uint64_t off = rng() % (whole.size() + 50);
      const size_t n = rng() % 5000 + 1;
      std::vector<uint8_t> buf(n);
      auto got = fs->Read(ino, off, n, buf.data());
      ASSERT_TRUE(got.has_value());
      const size_t want = off >= whole.size() ? 0 : std::min<size_t>(n, whole.size() - off);
      ASSERT_EQ(*got, want);
      EXPECT_TRUE(
          std::equal(buf.begin(), buf.begin() + static_cast<long>(want),
                     whole.begin() + static_cast<long>(std::min<uint64_t>(off, whole.size()))));
    }
  }
}

TEST_F(FilesystemTest, ErrorsFollowTheSyscalls) {
  auto fs = Make();
  const uint64_t file = Walk(*fs, "scan2/top.jpg");
  const uint64_t dir = Walk(*fs, "scan2/a");
  EXPECT_EQ(fs->Lookup(dir, "missing").error().ToErrno(), ENOENT);
  EXPECT_EQ(fs->Lookup(file, "x").error().ToErrno(), ENOTDIR);
  uint8_t buf[16];
  EXPECT_EQ(fs->Read(dir, 0, 16, buf).error().ToErrno(), EISDIR);
  EXPECT_EQ(fs->ReadDir(file, 0, [](auto, auto&, auto) { return true; }).ToErrno(), ENOTDIR);
  EXPECT_EQ(fs->GetAttr(ToFuseIno(999999, 3)).error().ToErrno(), ENOENT);
  EXPECT_EQ(fs->GetAttr(ToFuseIno(1, 11)).error().ToErrno(), ENOENT);
  EXPECT_EQ(fs->Lookup(kFuseRootIno, "scan11").error().ToErrno(), ENOENT);
  EXPECT_EQ(fs->GetXattr(file, "user.other").error().ToErrno(), ENODATA);
}

TEST_F(FilesystemTest, ReadDirResumesAtEveryOffset) {
  auto fs = Make();
  const uint64_t dir = Walk(*fs, "scan5/a");
  std::vector<std::string> all;
  std::vector<uint64_t> nexts;
  ASSERT_TRUE(fs->ReadDir(dir, 0, [&](std::string_view n, const struct stat&, uint64_t next) {
                  all.emplace_back(n);
                  nexts.push_back(next);
                  return true;
                }).ok());
  EXPECT_EQ(all, (std::vector<std::string>{".", "..", "b", "one.jpg", "two.jpg"}));
  for (size_t i = 0; i < nexts.size(); ++i) {
    std::vector<std::string> rest;
    ASSERT_TRUE(fs->ReadDir(dir, nexts[i], [&](std::string_view n, const struct stat&, uint64_t) {
                    rest.emplace_back(n);
                    return true;
                  }).ok());
    EXPECT_EQ(rest, std::vector<std::string>(all.begin() + static_cast<long>(i) + 1, all.end()));
  }
}

TEST_F(FilesystemTest, FixedLevelRootIsTheTree) {
  FsOptions options;
  options.fixed_level = 6;
  auto fixed = Make(options);
  auto ladder = Make();
  const uint64_t a = Walk(*fixed, "a/one.jpg");
  const uint64_t b = Walk(*ladder, "scan6/a/one.jpg");
  ASSERT_NE(a, 0u);
  EXPECT_EQ(ReadAll(*fixed, a), ReadAll(*ladder, b));
  EXPECT_EQ(fixed->GetXattr(a, "user.pcrfs.level").value(), "6");
  EXPECT_EQ(fixed->Lookup(kFuseRootIno, "scan1").error().ToErrno(), ENOENT);
  // Another level's inode does not exist in a fixed-level mount.
  EXPECT_FALSE(fixed->GetAttr(Walk(*ladder, "scan2/a/one.jpg")).has_value());
}

TEST_F(FilesystemTest, XattrsDescribeTheFile) {
  auto fs = Make();
  const uint64_t jpg = Walk(*fs, "scan3/top.jpg");
  const uint64_t txt = Walk(*fs, "scan3/notes.txt");
  EXPECT_EQ(fs->GetXattr(jpg, "user.pcrfs.level").value(), "3");
  EXPECT_EQ(fs->GetXattr(jpg, "user.pcrfs.passthrough").value(), "0");
  EXPECT_EQ(fs->GetXattr(txt, "user.pcrfs.passthrough").value(), "1");
  EXPECT_EQ(fs->GetXattr(txt, "user.pcrfs.passthrough_reason").value(), "not-jpeg");
  EXPECT_EQ(std::stoull(fs->GetXattr(jpg, "user.pcrfs.full_size").value()),
            static_cast<uint64_t>(fs->GetAttr(Walk(*fs, "scan10/top.jpg"))->st_size));
  EXPECT_EQ(fs->ListXattr(jpg)->size(), 4u);
  EXPECT_EQ(fs->ListXattr(txt)->size(), 5u);
}

TEST_F(FilesystemTest, ConcurrentReadersWithATinyCache) {
  FsOptions options;
  options.cache_bytes = 64 * 1024;  // constant eviction
  auto fs = Make(options);
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> files;
  for (int k = 1; k <= 10; ++k) {
    for (const char* rel : {"a/one.jpg", "a/two.jpg", "a/b/three.jpg", "top.jpg", "notes.txt"}) {
      const uint64_t ino = Walk(*fs, "scan" + std::to_string(k) + "/" + rel);
      files.emplace_back(ino, ReadAll(*fs, ino));
    }
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<uint8_t> buf(70000);
      for (int i = 0; i < 300; ++i) {
        const auto& [ino, whole] = files[rng() % files.size()];
        const uint64_t off = rng() % (whole.size() + 1);
        auto n = fs->Read(ino, off, buf.size(), buf.data());
        if (!n || !std::equal(buf.begin(), buf.begin() + static_cast<long>(*n),
                              whole.begin() + static_cast<long>(off))) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(fs->cache().used(), 64u * 1024);
}

}  // namespace
}  // namespace pcrfs::fs
