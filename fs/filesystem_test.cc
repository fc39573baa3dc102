// The daemon's logic without a mount: a real store built from generated JPEGs.
#include "fs/filesystem.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "codec/baseline.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/speculation_source.h"
#include "common/test_support.h"

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
    test::WriteTestJpegs(
        src, {"a/one.jpg", "a/two.jpg", "a/b/three.jpg", "top.jpg"},
        {.width = 200, .height = 150, .width_step = 17, .height_step = 9, .seed = 0});
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

// A record file whose page cache is a model the test controls: a read caches the pages it
// touched, ReadCached copies only when every page is cached, DropAll empties the cache. The
// kernel's cache (PosixRandomAccessFile::ReadCached, tested in common/) drops pages under memory
// pressure whenever it likes, which made a test of the Filesystem's rule over it flaky.
class PageCachedFile final : public RandomAccessFile, public SpeculationSource {
 public:
  PageCachedFile(std::string name, std::string bytes)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) return Status::Corruption("past");
    std::memcpy(dst, bytes_.data() + offset, n);
    MutexLock l(&mu_);
    for (uint64_t p = offset / kPage; n > 0 && p <= (offset + n - 1) / kPage; ++p) pages_.insert(p);
    return Status::OK();
  }
  uint64_t Size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override {
    scratch->resize(n);
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, n, scratch->data()));
    return n;
  }
  bool ReadCached(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) return false;
    {
      MutexLock l(&mu_);
      for (uint64_t p = offset / kPage; n > 0 && p <= (offset + n - 1) / kPage; ++p) {
        if (pages_.count(p) == 0) return false;
      }
    }
    std::memcpy(dst, bytes_.data() + offset, n);
    return true;
  }
  void DropAll() const {
    MutexLock l(&mu_);
    pages_.clear();
  }

 private:
  static constexpr uint64_t kPage = 4096;
  const std::string name_;
  const std::string bytes_;
  mutable Mutex mu_;
  mutable std::set<uint64_t> pages_ GUARDED_BY(mu_);
};

// A piece the page cache holds is copied without a demand read: such a read is no work for
// the device and must not hold speculative reads back (issue 12). Dropped from the cache, the
// same piece is a demand read again. The bytes are the same either way.
TEST_F(FilesystemTest, PiecesInThePageCacheAreNotDemandReads) {
  std::map<std::string, std::shared_ptr<PageCachedFile>> opened;
  Mutex opened_mu;
  index::StoreOptions store_options;
  store_options.open_record = [&](const std::string& path, uint64_t) -> Result<SourceFile> {
    std::ifstream in(path, std::ios::binary);
    auto file = std::make_shared<PageCachedFile>(
        path, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
    MutexLock l(&opened_mu);
    opened[path] = file;
    return SourceFile::Speculative(std::move(file));
  };
  auto store = index::Store::Open(*dir_ + "/store", std::move(store_options));
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  FsOptions options;
  options.prefetch_percent = 0;
  options.readahead_slots = 0;
  auto fs = std::make_unique<Filesystem>(std::move(*store), options);
  auto entry = fs->store().index().LookupPath("a/two.jpg");
  ASSERT_TRUE(entry.has_value());
  std::vector<uint8_t> expected;
  ASSERT_TRUE(fs->store().ReadFile(*entry, 3, &expected).ok());  // the record is cached now
  const uint64_t ino = Walk(*fs, "scan3/a/two.jpg");
  EXPECT_EQ(ReadAll(*fs, ino), expected);
  auto st = fs->scheduler_stats();
  EXPECT_EQ(st.demand_reads, 0u);
  EXPECT_EQ(st.cache_hits, 3u) << "one per piece";
  EXPECT_EQ(st.cache_hit_bytes, expected.size() - 2) << "all but the EOI marker";

  const std::string record = *dir_ + "/store/" + index::RecordFileName(entry->record);
  {
    MutexLock l(&opened_mu);
    ASSERT_EQ(opened.count(record), 1u);
    opened[record]->DropAll();
  }
  EXPECT_EQ(ReadAll(*fs, ino), expected);  // a whole-file read kept no piece in memory
  st = fs->scheduler_stats();
  EXPECT_EQ(st.demand_reads + st.cache_hits, 6u);
  EXPECT_GT(st.demand_reads, 0u) << "dropped pages are read from the device";
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
  // open(2) and opendir(3): read-only files, folders as folders.
  EXPECT_TRUE(fs->Open(file, O_RDONLY).ok());
  EXPECT_TRUE(fs->Open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC).ok());
  for (int flags : {O_WRONLY, O_RDWR, O_WRONLY | O_TRUNC}) {
    EXPECT_EQ(fs->Open(file, flags).ToErrno(), EROFS) << flags;
    EXPECT_EQ(fs->Open(dir, flags).ToErrno(), EROFS) << flags;
  }
  EXPECT_EQ(fs->Open(dir, O_RDONLY).ToErrno(), EISDIR);
  EXPECT_EQ(fs->Open(ToFuseIno(999999, 3), O_RDONLY).ToErrno(), ENOENT);
  EXPECT_TRUE(fs->OpenDir(dir).ok());
  EXPECT_TRUE(fs->OpenDir(kFuseRootIno).ok());
  EXPECT_EQ(fs->OpenDir(file).ToErrno(), ENOTDIR);
  EXPECT_EQ(fs->OpenDir(ToFuseIno(999999, 3)).ToErrno(), ENOENT);
  // Namespaces pcrfs does not serve: "not supported", which GNU ls remembers per device.
  for (const char* name : {"security.selinux", "system.posix_acl_access",
                           "system.posix_acl_default", "trusted.x", "user"}) {
    EXPECT_EQ(fs->GetXattr(file, name).error().ToErrno(), ENOTSUP) << name;
    EXPECT_EQ(fs->GetXattr(dir, name).error().ToErrno(), ENOTSUP) << name;
    EXPECT_EQ(fs->GetXattr(kFuseRootIno, name).error().ToErrno(), ENOTSUP) << name;
  }
}

TEST_F(FilesystemTest, ReadDirResumesAtEveryOffset) {
  auto fs = Make();
  const uint64_t dir = Walk(*fs, "scan5/a");
  for (bool attrs : {true, false}) {
    SCOPED_TRACE(attrs ? "readdirplus" : "plain readdir");
    std::vector<std::string> all;
    std::vector<uint64_t> nexts;
    std::vector<struct stat> stats;
    ASSERT_TRUE(fs->ReadDir(
                      dir, 0,
                      [&](std::string_view n, const struct stat& st, uint64_t next) {
                        all.emplace_back(n);
                        nexts.push_back(next);
                        stats.push_back(st);
                        return true;
                      },
                      attrs)
                    .ok());
    EXPECT_EQ(all, (std::vector<std::string>{".", "..", "b", "one.jpg", "two.jpg"}));
    // Both kinds of listing give the inode and type a lookup gives.
    for (size_t i = 2; i < all.size(); ++i) {
      auto st = fs->Lookup(dir, all[i]);
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(stats[i].st_ino, st->st_ino) << all[i];
      EXPECT_EQ(stats[i].st_mode & S_IFMT, st->st_mode & S_IFMT) << all[i];
      if (attrs) {
        EXPECT_EQ(stats[i].st_size, st->st_size) << all[i];
      }
    }
    for (size_t i = 0; i < nexts.size(); ++i) {
      std::vector<std::string> rest;
      ASSERT_TRUE(fs->ReadDir(
                        dir, nexts[i],
                        [&](std::string_view n, const struct stat&, uint64_t) {
                          rest.emplace_back(n);
                          return true;
                        },
                        attrs)
                      .ok());
      EXPECT_EQ(rest, std::vector<std::string>(all.begin() + static_cast<long>(i) + 1, all.end()));
    }
    // A listing that stops (a full reply buffer) and resumes where it stopped, one entry per
    // call: the resumed calls start from the remembered name.
    std::vector<std::string> paged;
    uint64_t off = 0;
    for (int calls = 0; calls < 10; ++calls) {
      bool took = false;
      ASSERT_TRUE(fs->ReadDir(
                        dir, off,
                        [&](std::string_view n, const struct stat&, uint64_t next) {
                          if (took) return false;
                          took = true;
                          paged.emplace_back(n);
                          off = next;
                          return true;
                        },
                        attrs)
                      .ok());
      if (!took) break;
    }
    EXPECT_EQ(paged, all);
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

// df's numbers: size = the source's bytes, used = the bytes of the tree at the root's level
// (what du of the mount adds up), available = the difference, so df never reads 100% full at
// a level that saves bytes. Counted apart here: from the source folder and by walking the tree.
// -o form=baseline: a JPEG's size and bytes are its level's baseline form, transcoded once
// however many lookups ask at the same time; listings carry no size they do not know.
TEST_F(FilesystemTest, BaselineFormTranscodesEachFileOnce) {
  FsOptions options;
  options.form = ServedForm::kBaseline;
  options.fixed_level = 4;
  auto fs = Make(options);
  ASSERT_NE(fs->baseline_cache(), nullptr);
  EXPECT_EQ(Make()->baseline_cache(), nullptr);
  const uint64_t dir = Walk(*fs, "a");
  ASSERT_NE(dir, 0u);

  auto listing = [&] {
    std::map<std::string, struct stat> out;
    EXPECT_TRUE(fs->ReadDir(dir, 0, [&](std::string_view n, const struct stat& st, uint64_t) {
                    out[std::string(n)] = st;
                    return true;
                  }).ok());
    return out;
  };
  auto before = listing();
  ASSERT_TRUE(before.count("one.jpg"));
  EXPECT_EQ(before["one.jpg"].st_nlink, 0u);  // no attributes
  EXPECT_EQ(before["one.jpg"].st_size, 0);
  EXPECT_EQ(before["b"].st_nlink, 2u);  // folders as ever
  EXPECT_EQ(fs->baseline_cache()->stats().transcoded, 0u);

  std::vector<std::thread> threads;
  std::vector<off_t> sizes(8, -1);
  for (size_t t = 0; t < sizes.size(); ++t) {
    threads.emplace_back([&, t] {
      auto st = fs->Lookup(dir, "one.jpg");
      if (st) sizes[t] = st->st_size;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fs->baseline_cache()->stats().transcoded, 1u);
  for (off_t size : sizes) EXPECT_EQ(size, sizes[0]);

  auto entry = fs->store().index().LookupPath("a/one.jpg");
  ASSERT_TRUE(entry.has_value());
  std::vector<uint8_t> stored;
  ASSERT_TRUE(fs->store().ReadFile(*entry, 4, &stored).ok());
  auto expected = codec::ToBaseline(stored);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(static_cast<size_t>(sizes[0]), expected->size());
  const uint64_t ino = Walk(*fs, "a/one.jpg");
  // Read in pieces, then whole.
  std::vector<uint8_t> got(expected->size());
  for (size_t off = 0; off < got.size(); off += 1000) {
    auto n = fs->Read(ino, off, 1000, got.data() + off);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, std::min<size_t>(1000, got.size() - off));
  }
  EXPECT_TRUE(got == *expected);
  EXPECT_EQ(ReadAll(*fs, ino), *expected);
  EXPECT_EQ(fs->baseline_cache()->stats().transcoded, 1u);
  // Once known, the size comes with the listing.
  auto after = listing();
  EXPECT_EQ(after["one.jpg"].st_size, sizes[0]);
  EXPECT_EQ(after["one.jpg"].st_nlink, 1u);
  EXPECT_EQ(after["two.jpg"].st_nlink, 0u);
  // Passthrough files are served as stored.
  const uint64_t notes = Walk(*fs, "notes.txt");
  auto notes_entry = fs->store().index().LookupPath("notes.txt");
  ASSERT_TRUE(notes_entry.has_value());
  std::vector<uint8_t> notes_bytes;
  ASSERT_TRUE(fs->store().ReadFile(*notes_entry, 4, &notes_bytes).ok());
  EXPECT_EQ(ReadAll(*fs, notes), notes_bytes);
  EXPECT_EQ(fs->baseline_cache()->stats().transcoded, 1u);
  EXPECT_NE(fs->GetXattr(kFuseRootIno, "user.pcrfs.baseline")->find("\"transcoded\":1,"),
            std::string::npos);
}

TEST_F(FilesystemTest, StatFsSizeIsTheSourceAndUsedIsTheMountedLevel) {
  uint64_t source = 0;
  for (const auto& e : stdfs::recursive_directory_iterator(*dir_ + "/src")) {
    if (e.is_regular_file()) source += e.file_size();
  }
  std::function<uint64_t(const Filesystem&, uint64_t)> tree_bytes = [&](const Filesystem& fs,
                                                                        uint64_t dir) {
    uint64_t total = 0;
    EXPECT_TRUE(fs.ReadDir(dir, 0, [&](std::string_view name, const struct stat& st, uint64_t) {
                    if (name == "." || name == "..") return true;
                    total += S_ISDIR(st.st_mode) ? tree_bytes(fs, st.st_ino)
                                                 : static_cast<uint64_t>(st.st_size);
                    return true;
                  }).ok());
    return total;
  };
  auto units = [](uint64_t bytes) { return (bytes + kStatFsUnit - 1) / kStatFsUnit; };
  for (const int level : {0, 1, 5, 10}) {
    SCOPED_TRACE(level);
    FsOptions options;
    options.fixed_level = level;
    auto fs = Make(options);
    const uint64_t used =
        level == 0 ? tree_bytes(*fs, Walk(*fs, "scan10")) : tree_bytes(*fs, kFuseRootIno);
    const struct statvfs sv = fs->StatFs();
    EXPECT_EQ(sv.f_frsize, kStatFsUnit);
    EXPECT_EQ(sv.f_bsize, kBlockSize);
    EXPECT_EQ(sv.f_blocks, units(std::max(source, used)));
    EXPECT_EQ(sv.f_blocks - sv.f_bfree, units(used));
    EXPECT_EQ(sv.f_bavail, sv.f_bfree);
    if (level == 1) {
      EXPECT_GT(sv.f_bavail, 0u);  // level 1 is far smaller than the source
    }
    // The store's entries: 5 files and 4 folders (a, a/b, empty and the root).
    EXPECT_EQ(sv.f_files, 4u + 1u + 4u);
    EXPECT_EQ(sv.f_ffree, 0u);
    EXPECT_EQ(sv.f_favail, 0u);
    EXPECT_EQ(sv.f_namemax, 255u);
    EXPECT_TRUE(sv.f_flag & ST_RDONLY);
  }
}

TEST_F(FilesystemTest, LookupPathFindsWhatLookupsFromTheRootFind) {
  auto fs = Make();
  auto errno_of = [&](std::string_view path) {
    auto ino = fs->LookupPath(path);
    return ino ? 0 : ino.error().ToErrno();
  };
  EXPECT_EQ(fs->LookupPath("scan3/a/one.jpg").value(), Walk(*fs, "scan3/a/one.jpg"));
  EXPECT_EQ(fs->LookupPath("scan10/a/b/three.jpg").value(), Walk(*fs, "scan10/a/b/three.jpg"));
  EXPECT_EQ(fs->LookupPath(".//scan3/a/./one.jpg").value(), Walk(*fs, "scan3/a/one.jpg"));
  EXPECT_EQ(fs->LookupPath("scan1/notes.txt").value(), Walk(*fs, "scan1/notes.txt"));
  EXPECT_EQ(errno_of("scan3/a"), EISDIR);
  EXPECT_EQ(errno_of("scan3/a/"), EISDIR);
  EXPECT_EQ(errno_of("scan3"), EISDIR);
  EXPECT_EQ(errno_of(""), EISDIR);
  EXPECT_EQ(errno_of("a/one.jpg"), ENOENT);  // the ladder needs its scanK
  EXPECT_EQ(errno_of("scan11/a/one.jpg"), ENOENT);
  EXPECT_EQ(errno_of("scan3/a/nope.jpg"), ENOENT);
  EXPECT_EQ(errno_of("scan3/a/one.jpg/x"), ENOENT);
  EXPECT_EQ(errno_of("scan3/a/../top.jpg"), EINVAL);
  EXPECT_EQ(errno_of(std::string_view("scan3/a/one.jpg\0", 16)), ENOENT);
  FsOptions fixed;
  fixed.fixed_level = 5;
  auto five = Make(fixed);
  EXPECT_EQ(five->LookupPath("a/one.jpg").value(), Walk(*five, "a/one.jpg"));
  EXPECT_EQ(FromFuseIno(five->LookupPath("top.jpg").value()).level, 5);
  EXPECT_EQ(five->LookupPath("scan5/a/one.jpg").error().ToErrno(), ENOENT);
  EXPECT_EQ(five->LookupPath("/").error().ToErrno(), EISDIR);
}

TEST_F(FilesystemTest, TheRootNamesTheHintSocketAndCountsHints) {
  FsOptions o;
  o.hints = true;
  o.hint_socket = "/run/pcrfs/mnt-abcdef/hints.sock";
  auto fs = Make(o);
  EXPECT_EQ(fs->GetXattr(kFuseRootIno, "user.pcrfs.hint_socket").value(), o.hint_socket);
  EXPECT_EQ(*fs->ListXattr(kFuseRootIno),
            (std::vector<std::string>{"user.pcrfs.prefetch", "user.pcrfs.hint_socket",
                                      "user.pcrfs.hints"}));
  const std::string json = fs->GetXattr(kFuseRootIno, "user.pcrfs.hints").value();
  EXPECT_NE(json.find("\"taken\":0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ahead_bytes\":16777216"), std::string::npos) << json;
  EXPECT_EQ(fs->GetXattr(Walk(*fs, "scan3"), "user.pcrfs.hint_socket").error().ToErrno(), ENODATA);
  // A hinted file is taken and fetched (its pieces fetched ahead: it reads the same after).
  const uint64_t one = Walk(*fs, "scan4/a/one.jpg");
  ASSERT_EQ(fs->hint_queue().Add(one, 1), HintQueue::Push::kQueued);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (fs->hint_queue().stats().taken < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(fs->hint_queue().stats().taken, 1u);
  auto entry = fs->store().index().LookupPath("a/one.jpg");
  std::vector<uint8_t> want;
  ASSERT_TRUE(fs->store().ReadFile(*entry, 4, &want).ok());
  EXPECT_EQ(ReadAll(*fs, one), want);
  // Without a socket, neither xattr.
  auto plain = Make();
  EXPECT_EQ(plain->GetXattr(kFuseRootIno, "user.pcrfs.hint_socket").error().ToErrno(), ENODATA);
  EXPECT_EQ(plain->GetXattr(kFuseRootIno, "user.pcrfs.hints").error().ToErrno(), ENODATA);
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
  // The mount's root says what the record prefetcher is doing; nothing else does.
  EXPECT_EQ(*fs->ListXattr(kFuseRootIno), std::vector<std::string>{"user.pcrfs.prefetch"});
  EXPECT_EQ(
      fs->GetXattr(kFuseRootIno, "user.pcrfs.prefetch").value().rfind("speculative reads: ", 0),
      0u);
  EXPECT_EQ(fs->GetXattr(Walk(*fs, "scan3"), "user.pcrfs.prefetch").error().ToErrno(), ENODATA);
  EXPECT_EQ(fs->GetXattr(jpg, "user.pcrfs.prefetch").error().ToErrno(), ENODATA);
  FsOptions off;
  off.prefetch_percent = 0;
  off.readahead_slots = 0;
  EXPECT_EQ(Make(off)->GetXattr(kFuseRootIno, "user.pcrfs.prefetch").value(),
            "off (-o prefetch=0,readahead=0)");
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

struct StoreFile {
  std::string path;
  index::Entry entry;
};

void CollectFiles(const index::IndexReader& idx, const index::Entry& dir, const std::string& prefix,
                  std::vector<StoreFile>* out) {
  ASSERT_TRUE(idx.List(dir, 0,
                       [&](const index::Entry& e) {
                         const std::string p = prefix.empty() ? e.name : prefix + "/" + e.name;
                         if (e.is_dir()) {
                           CollectFiles(idx, e, p, out);
                         } else {
                           out->push_back({p, e});
                         }
                         return true;
                       })
                  .ok());
}

TEST_F(FilesystemTest, ReadErrorsFailExactlyTheFilesWhosePiecesOverlapThem) {
  auto probe = Make();
  std::vector<StoreFile> files;
  CollectFiles(probe->store().index(), *probe->store().index().Get(index::kRootIno), "", &files);
  ASSERT_EQ(files.size(), 5u);
  // Offsets and CRCs from the records' tables (index format 4 holds lengths only).
  for (StoreFile& f : files) ASSERT_TRUE(probe->store().ResolvePieces(&f.entry).ok());
  const uint32_t bad_record = files[0].entry.record;
  const uint64_t tables_end = probe->store().index().GetRecord(bad_record)->data_offset;
  const index::Entry& victim = files[0].entry;
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, index::kRecordHeaderSize},  // the header only: every file of the record (format 4)
      {victim.pieces[2].offset + 1, victim.pieces[2].offset + 2},  // inside one group-3 piece
      {victim.pieces[0].offset, victim.pieces[0].offset + 1},      // the first byte of a piece 1
      {victim.pieces[4].offset, UINT64_MAX},                       // region 5 onwards
      {0, UINT64_MAX},                                             // the whole record
  };
  for (const auto& [begin, end] : ranges) {
    SCOPED_TRACE("bad range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    index::StoreOptions options;
    options.open_record = [&, begin = begin, end = end](const std::string& path,
                                                        uint64_t) -> Result<SourceFile> {
      auto file = index::OpenRecordFileNoFollow(path);
      if (!file) return Err(file.error());
      if (path.find(index::RecordFileName(bad_record)) == std::string::npos) {
        return SourceFile::Speculative(std::shared_ptr<PosixRandomAccessFile>(std::move(*file)));
      }
      return SourceFile(
          std::make_shared<const test::FaultInjectingFile>(std::move(*file), begin, end));
    };
    auto store = index::Store::Open(*dir_ + "/store", options);
    ASSERT_TRUE(store.has_value());
    Filesystem fs(std::move(*store), FsOptions{});
    int failed = 0;
    Filesystem::LevelCounters want;  // what the counters must say of the reads that succeeded
    for (const StoreFile& f : files) {
      for (int k = 1; k <= 10; ++k) {
        // The header and tables hold the pieces' CRCs: damage there costs the whole record.
        bool overlaps = f.entry.record == bad_record && begin < tables_end;
        const int pieces = f.entry.kind == index::EntryKind::kJpeg ? k : 1;
        for (int g = 0; g < pieces; ++g) {
          const index::PieceRef& p = f.entry.pieces[static_cast<size_t>(g)];
          overlaps |= f.entry.record == bad_record && p.length > 0 && p.offset < end &&
                      p.offset + p.length > begin;
        }
        const uint64_t ino = Walk(fs, "scan" + std::to_string(k) + "/" + f.path);
        ASSERT_NE(ino, 0u) << f.path;
        const uint64_t size = static_cast<uint64_t>(fs.GetAttr(ino)->st_size);
        std::vector<uint8_t> buf(size);
        auto n = fs.Read(ino, 0, buf.size(), buf.data());
        if (overlaps) {
          ++failed;
          ASSERT_FALSE(n.has_value()) << f.path << " level " << k;
          EXPECT_EQ(n.error().ToErrno(), EIO) << f.path << " level " << k;
        } else {
          ASSERT_TRUE(n.has_value()) << f.path << " level " << k << ": " << n.error().ToString();
          const auto i = static_cast<size_t>(k - 1);
          want.bytes[i] += size;
          want.files[i] += size > 0;
          // A whole file stands for its whole source file (a passthrough file: itself).
          const uint64_t source =
              f.entry.kind == index::EntryKind::kPassthrough ? size : f.entry.source_size;
          want.source_bytes[i] += size > 0 ? source : 0;
          want.saved_bytes[i] += size > 0 && source > size ? source - size : 0;
          std::vector<uint8_t> expected;
          ASSERT_TRUE(fs.store().ReadFile(f.entry, k, &expected).ok());
          EXPECT_EQ(buf, expected) << f.path << " level " << k;
        }
      }
    }
    EXPECT_GT(failed, 0);
    // The metrics' counters (fs/metrics_server.h): each EIO counted, each byte served by level.
    EXPECT_EQ(fs.damaged_reads(), static_cast<uint64_t>(failed));
    EXPECT_EQ(fs.damaged_files() > 0, failed > 0);
    const Filesystem::LevelCounters got = fs.level_counters();
    EXPECT_EQ(got.bytes, want.bytes);
    EXPECT_EQ(got.files, want.files);
    EXPECT_EQ(got.source_bytes, want.source_bytes);
    EXPECT_EQ(got.saved_bytes, want.saved_bytes);
  }
}

TEST_F(FilesystemTest, PathOfDamagedFileIsLogged) {
  // A missing record: every file in it is EIO, named by its full path in the log.
  const std::string copy = *dir_ + "/copy";
  stdfs::remove_all(copy);
  stdfs::copy(*dir_ + "/store", copy, stdfs::copy_options::recursive);
  auto probe = index::Store::Open(copy);
  ASSERT_TRUE(probe.has_value());
  auto three = (*probe)->index().LookupPath("a/b/three.jpg");
  ASSERT_TRUE(three.has_value());
  stdfs::remove(copy + "/" + index::RecordFileName(three->record));
  Filesystem fs(std::move(*probe), FsOptions{});
  const uint64_t ino = Walk(fs, "scan4/a/b/three.jpg");
  ASSERT_NE(ino, 0u);
  std::vector<uint8_t> buf(100);
  ::testing::internal::CaptureStderr();
  auto n = fs.Read(ino, 0, buf.size(), buf.data());
  auto again = fs.Read(ino, 0, buf.size(), buf.data());
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().ToErrno(), EIO);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(log.find("\"a/b/three.jpg\""), std::string::npos) << log;
  EXPECT_NE(log.find(index::RecordFileName(three->record)), std::string::npos) << log;
  EXPECT_EQ(log.find("damaged"), log.rfind("damaged")) << "logged once: " << log;
  EXPECT_EQ(fs.damaged_reads(), 2u);  // each EIO counts; the file once
  EXPECT_EQ(fs.damaged_files(), 1u);
  stdfs::remove_all(copy);
}

}  // namespace
}  // namespace pcrfs::fs
