// The predictor on a real store: files of two folders share a record, and reading one folder
// must fetch that folder's pieces only.
#include "fs/read_predictor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "builder/builder.h"
#include "fs/filesystem.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

// A record file that logs every read (offset, length), speculative ones (Warm: a Read into
// scratch) included.
class LoggingFile final : public RandomAccessFile, public SpeculationSource {
 public:
  explicit LoggingFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  Status Read(uint64_t offset, size_t n, uint8_t* dst) const override {
    {
      std::lock_guard<std::mutex> l(mu_);
      reads_.push_back({offset, n});
    }
    return base_->Read(offset, n, dst);
  }
  uint64_t Size() const override { return base_->Size(); }
  const std::string& name() const override { return base_->name(); }
  Result<uint64_t> Warm(uint64_t offset, uint64_t n, std::vector<uint8_t>* scratch) const override {
    scratch->resize(static_cast<size_t>(n));
    PCRFS_RETURN_ERR_IF_ERROR(Read(offset, static_cast<size_t>(n), scratch->data()));
    return n;
  }
  std::vector<RecordScheduler::Range> reads() const {
    std::lock_guard<std::mutex> l(mu_);
    return reads_;
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  mutable std::mutex mu_;
  mutable std::vector<RecordScheduler::Range> reads_;
};

// Writes `files` test JPEGs into each of `folders` under dir/src and builds dir/store with
// everything in one record.
void BuildStore(const std::string& dir, const std::vector<std::string>& folders, int files) {
  stdfs::remove_all(dir);
  uint32_t seed = 0;
  for (const std::string& folder : folders) {
    stdfs::create_directories(dir + "/src/" + folder);
    for (int i = 0; i < files; ++i) {
      testdata::JpegSpec spec;
      spec.width = 160 + 8 * i;
      spec.height = 120;
      spec.seed = ++seed;
      auto jpeg = testdata::MakeTestJpeg(spec);
      ASSERT_TRUE(jpeg.has_value());
      std::ofstream(dir + "/src/" + folder + "/" + std::to_string(i) + ".jpg", std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg->data()),
                 static_cast<std::streamsize>(jpeg->size()));
    }
  }
  tools::BuildConfig config;
  config.source = dir + "/src";
  config.store = dir + "/store";
  config.images_per_record = 1024;  // every folder in one record
  ASSERT_TRUE(tools::Build(config).has_value());
}

// Opens dir/store with every record file logging its reads.
Result<std::unique_ptr<index::Store>> OpenLogged(const std::string& dir) {
  index::StoreOptions options;
  options.open_record = [](const std::string& path, uint64_t) -> Result<SourceFile> {
    auto f = index::OpenRecordFileNoFollow(path);
    if (!f) return Err(f.error());
    return SourceFile::Speculative(std::make_shared<LoggingFile>(std::move(*f)));
  };
  return index::Store::Open(dir + "/store", options);
}

// The files of a folder (a path from the mount's root).
std::vector<index::Entry> FilesOf(const Filesystem& fs, const std::string& path) {
  std::vector<index::Entry> files;
  auto dir = fs.store().index().LookupPath(path);
  EXPECT_TRUE(dir.has_value()) << path;
  if (!dir) return files;
  EXPECT_TRUE(fs.store()
                  .index()
                  .List(*dir, 0,
                        [&](const index::Entry& e) {
                          files.push_back(e);
                          // Offsets from the record's table (index format 4 holds lengths).
                          EXPECT_TRUE(fs.store().ResolvePieces(&files.back()).ok());
                          return true;
                        })
                  .ok());
  return files;
}

// Whether the record's logged reads cover the first `level` pieces of every file of `files`.
bool Covered(const LoggingFile& log, const std::vector<index::Entry>& files, int level) {
  const auto reads = log.reads();
  for (const auto& e : files) {
    for (int g = 0; g < level; ++g) {
      const index::PieceRef& p = e.pieces[static_cast<size_t>(g)];
      const bool in = std::any_of(reads.begin(), reads.end(), [&](const auto& r) {
        return r.offset <= p.offset && p.offset + p.length <= r.offset + r.length;
      });
      if (!in) return false;
    }
  }
  return true;
}

// Whether any logged read touches a piece (of any level) of `files`.
bool Touched(const LoggingFile& log, const std::vector<index::Entry>& files) {
  for (const auto& r : log.reads()) {
    for (const auto& e : files) {
      for (const index::PieceRef& p : e.pieces) {
        if (p.length > 0 && r.offset < p.offset + p.length && p.offset < r.offset + r.length) {
          return true;
        }
      }
    }
  }
  return false;
}

// Reads the files named (under folder) through fs.
void ReadFiles(Filesystem& fs, const std::string& folder, const std::vector<std::string>& names) {
  uint64_t ino = kFuseRootIno;
  for (const auto& part : stdfs::path(folder)) {
    auto st = fs.Lookup(ino, part.string());
    ASSERT_TRUE(st.has_value()) << folder;
    ino = st->st_ino;
  }
  std::vector<uint8_t> buf(1 << 20);
  for (const std::string& name : names) {
    auto st = fs.Lookup(ino, name);
    ASSERT_TRUE(st.has_value()) << folder << "/" << name;
    ASSERT_TRUE(fs.Read(st->st_ino, 0, buf.size(), buf.data()).has_value());
  }
}

// Waits (at most 10 s) until pred() holds.
bool Eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(ReadPredictorTest, ReadingOneFolderFetchesThatFolderOnly) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-predictor-test-" + std::to_string(::getpid()));
  BuildStore(dir, {"a", "b"}, 8);  // both folders in one record
  auto store = OpenLogged(dir);
  ASSERT_TRUE(store.has_value());
  FsOptions fo;
  fo.fixed_level = 5;
  fo.prefetch_percent = 25;  // after 2 of the 8 files
  fo.readahead_slots = 0;
  Filesystem fs(std::move(*store), fo);
  auto folder = fs.Lookup(kFuseRootIno, "a");
  ASSERT_TRUE(folder.has_value());
  // Two files of a/, out of order (no walk): the third read should find the rest fetched.
  std::vector<uint8_t> buf(1 << 20);
  for (const char* name : {"5.jpg", "2.jpg"}) {
    auto st = fs.Lookup(folder->st_ino, name);
    ASSERT_TRUE(st.has_value());
    ASSERT_TRUE(fs.Read(st->st_ino, 0, buf.size(), buf.data()).has_value());
  }
  const auto& idx = fs.store().index();
  auto a = idx.Get(FromFuseIno(folder->st_ino).store_ino);
  ASSERT_TRUE(a.has_value());
  std::vector<index::Entry> files;
  ASSERT_TRUE(idx.List(*a, 0,
                       [&](const index::Entry& e) {
                         files.push_back(e);
                         EXPECT_TRUE(fs.store().ResolvePieces(&files.back()).ok());
                         return true;
                       })
                  .ok());
  ASSERT_EQ(files.size(), 8u);
  auto rec = fs.store().OpenRecord(files[0].record, nullptr);
  ASSERT_TRUE(rec.has_value());
  const auto* log = dynamic_cast<const LoggingFile*>(&rec->file());
  ASSERT_NE(log, nullptr);
  // Wait until the speculative reads covered every level-5 piece of a/.
  auto covered = [&](const index::PieceRef& p) {
    for (const auto& r : log->reads()) {
      if (r.offset <= p.offset && p.offset + p.length <= r.offset + r.length) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool all = false;
  while (!all && std::chrono::steady_clock::now() < deadline) {
    all = true;
    for (const auto& e : files) {
      for (int g = 0; g < 5; ++g) all = all && covered(e.pieces[static_cast<size_t>(g)]);
    }
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(all) << "the pieces of a/ were not all fetched";
  // Every byte read lies in the record's header and tables or in a level-5 piece of a/.
  auto info = idx.GetRecord(files[0].record);
  ASSERT_TRUE(info.has_value());
  for (const auto& r : log->reads()) {
    for (uint64_t b = r.offset; b < r.offset + r.length; ++b) {
      // (The header, tables and footer are read once, when the record is opened.)
      bool ok = b < info->data_offset || b >= info->group_offset[index::kNumGroups];
      for (const auto& e : files) {
        for (int g = 0; g < 5 && !ok; ++g) {
          const auto& p = e.pieces[static_cast<size_t>(g)];
          ok = b >= p.offset && b < p.offset + p.length;
        }
      }
      ASSERT_TRUE(ok) << "read of byte " << b << " which no file of a/ needs at level 5";
    }
  }
  stdfs::remove_all(dir);
}

// A shuffled epoch over train/ hops between its class folders: once enough of them (3 of 6
// here) are dense by their own reads, every class folder of train/ is fetched, but nothing of
// val/, a sibling of train/ whose folders nobody read.
TEST(ReadPredictorTest, ReadsSpreadOverSiblingFoldersFetchTheirParentsOtherFolders) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-predictor-siblings-" + std::to_string(::getpid()));
  const std::vector<std::string> train = {"train/c0", "train/c1", "train/c2",
                                          "train/c3", "train/c4", "train/c5"};
  std::vector<std::string> all = train;
  all.insert(all.end(), {"val/v0", "val/v1"});
  BuildStore(dir, all, 4);
  auto store = OpenLogged(dir);
  ASSERT_TRUE(store.has_value());
  FsOptions fo;
  fo.fixed_level = 2;
  fo.prefetch_percent = 50;  // a folder is dense after 2 of its 4 files; 3 of 6 siblings
  fo.readahead_slots = 0;
  Filesystem fs(std::move(*store), fo);
  const auto c0 = FilesOf(fs, "train/c0");
  ASSERT_EQ(c0.size(), 4u);
  auto rec = fs.store().OpenRecord(c0[0].record, nullptr);
  ASSERT_TRUE(rec.has_value());
  const auto* log = dynamic_cast<const LoggingFile*>(&rec->file());
  ASSERT_NE(log, nullptr);

  // One file of each of four sibling folders (a browser showing a file per folder): no folder
  // is read twice, so nothing else is fetched.
  ReadFiles(fs, "train/c0", {"3.jpg"});
  ReadFiles(fs, "train/c1", {"0.jpg"});
  ReadFiles(fs, "train/c2", {"2.jpg"});
  ReadFiles(fs, "train/c3", {"1.jpg"});
  // (val/v0 made dense after them: once it is fetched, the scheduler has had its chance to
  // fetch anything the browse had planned.)
  ReadFiles(fs, "val/v0", {"0.jpg", "3.jpg"});
  ASSERT_TRUE(Eventually([&] { return Covered(*log, FilesOf(fs, "val/v0"), 2); }));
  for (const char* other : {"train/c4", "train/c5", "val/v1"}) {
    EXPECT_FALSE(Touched(*log, FilesOf(fs, other))) << other << " read after one file per folder";
  }
  // A second file of one of them, as a shuffled epoch over train/ reads: every class folder of
  // train/, none of val/.
  ReadFiles(fs, "train/c1", {"2.jpg"});
  EXPECT_TRUE(Eventually([&] {
    return std::all_of(train.begin(), train.end(),
                       [&](const std::string& f) { return Covered(*log, FilesOf(fs, f), 2); });
  })) << "the class folders of train/ were not all fetched";
  EXPECT_FALSE(Touched(*log, FilesOf(fs, "val/v1"))) << "val/v1 is not being read";
  // Nothing above level 2 either.
  for (const auto& r : log->reads()) {
    for (const std::string& f : all) {
      for (const auto& e : FilesOf(fs, f)) {
        for (size_t g = 2; g < e.pieces.size(); ++g) {
          const index::PieceRef& p = e.pieces[g];
          EXPECT_FALSE(p.length > 0 && r.offset < p.offset + p.length &&
                       p.offset < r.offset + r.length)
              << "read of level " << g + 1 << " of " << f << "/" << e.name;
        }
      }
    }
  }
  stdfs::remove_all(dir);
}

// Many small sibling folders (ImageNet-like classes of few files): an expansion queues its
// folders together, so their pieces of one group region, side by side in the record, are read
// in one speculative read, not one per folder.
TEST(ReadPredictorTest, AnExpansionReadsNeighbouringSmallFoldersTogether) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-predictor-batch-" + std::to_string(::getpid()));
  std::vector<std::string> folders;
  for (int i = 0; i < 20; ++i)
    folders.push_back("train/c" + std::string(i < 10 ? "0" : "") + std::to_string(i));
  BuildStore(dir, folders, 2);
  auto store = OpenLogged(dir);
  ASSERT_TRUE(store.has_value());
  FsOptions fo;
  fo.fixed_level = 1;
  fo.prefetch_percent = 10;  // 3 sibling folders read, one of them twice: expand
  fo.readahead_slots = 0;
  Filesystem fs(std::move(*store), fo);
  auto rec = fs.store().OpenRecord(FilesOf(fs, folders[0])[0].record, nullptr);
  ASSERT_TRUE(rec.has_value());
  const auto* log = dynamic_cast<const LoggingFile*>(&rec->file());
  ASSERT_NE(log, nullptr);
  ReadFiles(fs, "train/c00", {"0.jpg"});
  ReadFiles(fs, "train/c01", {"0.jpg"});
  ReadFiles(fs, "train/c02", {"0.jpg"});
  ReadFiles(fs, "train/c01", {"1.jpg"});
  std::vector<index::Entry> later;  // the folders no reader touched
  for (size_t i = 3; i < folders.size(); ++i) {
    for (const auto& e : FilesOf(fs, folders[i])) later.push_back(e);
  }
  ASSERT_TRUE(Eventually([&] { return Covered(*log, later, 1); }));
  size_t reads = 0;
  for (const auto& r : log->reads()) {
    reads += std::any_of(later.begin(), later.end(), [&](const index::Entry& e) {
      const index::PieceRef& p = e.pieces[0];
      return r.offset < p.offset + p.length && p.offset < r.offset + r.length;
    });
  }
  EXPECT_LE(reads, 2u) << "the level-1 pieces of 17 folders, side by side in the record";
  stdfs::remove_all(dir);
}

// The next epoch reads a folder's files again: a file read again (another read between) starts
// the folder's next pass, planned afresh; the same file's next request does not.
TEST(ReadPredictorTest, AFolderReadAgainStartsItsNextPass) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-predictor-passes-" + std::to_string(::getpid()));
  BuildStore(dir, {"a"}, 8);
  auto store = OpenLogged(dir);
  ASSERT_TRUE(store.has_value());
  RecordScheduler scheduler;
  ReadPredictor predictor(**store, scheduler, {.dense_percent = 25, .readahead_files = 0});
  auto folder = (*store)->index().LookupPath("a");
  ASSERT_TRUE(folder.has_value());
  std::vector<index::Entry> files;
  ASSERT_TRUE((*store)
                  ->index()
                  .List(*folder, 0,
                        [&](const index::Entry& e) {
                          files.push_back(e);
                          return true;
                        })
                  .ok());
  ASSERT_EQ(files.size(), 8u);
  const std::vector<size_t> order = {5, 2, 7, 0, 3, 6, 1, 4};
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i : order) {
      predictor.OnRead(files[i], 5);
      predictor.OnRead(files[i], 5);  // the same file's next request
    }
    EXPECT_EQ(predictor.passes(), static_cast<uint64_t>(pass)) << pass;
  }
  // Another level is another pass count, and its own first pass.
  predictor.OnRead(files[0], 3);
  EXPECT_EQ(predictor.passes(), 2u);
  stdfs::remove_all(dir);
}

// The index of the first logged read that holds piece p; -1 if none does.
int FirstReadOf(const LoggingFile& log, const index::PieceRef& p) {
  const auto reads = log.reads();
  for (size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].offset <= p.offset && p.offset + p.length <= reads[i].offset + reads[i].length) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

TEST(HintConsumerTest, HintedFilesAreFetchedInTheHintsOrder) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-hint-order-test-" + std::to_string(::getpid()));
  BuildStore(dir, {"train"}, 24);  // one record
  auto store = OpenLogged(dir);
  ASSERT_TRUE(store.has_value());
  FsOptions fo;
  fo.fixed_level = 3;
  fo.hints = true;
  // The consumer takes the next file only once nothing is queued (HintAheadBytes() is 1), so
  // no two files' pieces meet in the scheduler's queue, where touching ranges merge.
  fo.speculation_memory = 2;
  Filesystem fs(std::move(*store), fo);
  std::vector<index::Entry> files = FilesOf(fs, "train");
  ASSERT_EQ(files.size(), 24u);
  std::mt19937 rng(7);
  std::shuffle(files.begin(), files.end(), rng);
  for (const index::Entry& e : files) {
    ASSERT_EQ(fs.hint_queue().Add(ToFuseIno(e.ino, 3), 1), HintQueue::Push::kQueued);
  }
  auto rec = fs.store().OpenRecord(files[0].record, nullptr);
  ASSERT_TRUE(rec.has_value());
  const auto* log = dynamic_cast<const LoggingFile*>(&rec->file());
  ASSERT_NE(log, nullptr);
  ASSERT_TRUE(Eventually([&] {
    return std::all_of(files.begin(), files.end(),
                       [&](const index::Entry& e) { return FirstReadOf(*log, e.pieces[2]) >= 0; });
  })) << "not every hinted file was fetched";
  EXPECT_EQ(fs.hint_queue().stats().taken, 24u);
  // The group-1 pieces were read in the hints' order (a file's three pieces lie in three
  // regions, so their reads are apart; the first piece of each says when its turn came).
  int last = -1;
  for (const index::Entry& e : files) {
    const int at = FirstReadOf(*log, e.pieces[0]);
    EXPECT_GT(at, last) << e.name;
    last = at;
  }
  // Nothing above level 3 was read.
  for (const index::Entry& e : files) EXPECT_EQ(FirstReadOf(*log, e.pieces[3]), -1) << e.name;
  stdfs::remove_all(dir);
}

TEST(HintConsumerTest, ReadsOfHintedFilesFeedNoPredictionAndDropTheirHints) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-hint-predict-test-" + std::to_string(::getpid()));
  BuildStore(dir, {"a", "b"}, 8);
  for (const bool hinted : {false, true}) {
    auto store = OpenLogged(dir);
    ASSERT_TRUE(store.has_value());
    FsOptions fo;
    fo.fixed_level = 5;
    fo.prefetch_percent = 25;  // after 2 of the 8 files: the rest of the folder
    fo.readahead_slots = 0;
    Filesystem fs(std::move(*store), fo);  // no consumer: the hints stay queued until read
    const std::vector<index::Entry> files = FilesOf(fs, "a");
    if (hinted) {
      for (const index::Entry& e : files) fs.hint_queue().Add(ToFuseIno(e.ino, 5), 1);
    }
    ReadFiles(fs, "a", {"5.jpg", "2.jpg"});
    if (!hinted) {  // the predictor planned the folder
      EXPECT_TRUE(Eventually([&] { return fs.scheduler_stats().speculative_bytes > 0; }));
      continue;
    }
    const RecordScheduler::Stats s = fs.scheduler_stats();
    EXPECT_EQ(s.speculative_bytes + s.queued_bytes, 0u);
    const HintQueue::Stats h = fs.hint_queue().stats();
    EXPECT_EQ(h.count(HintFate::kReadBefore), 2u);
    EXPECT_EQ(h.queued_now, 6u);
  }
  stdfs::remove_all(dir);
}

}  // namespace
}  // namespace pcrfs::fs
