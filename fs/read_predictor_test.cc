// The predictor on a real store: files of two folders share a record, and reading one folder
// must fetch that folder's pieces only.
#include "fs/read_predictor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "builder/builder.h"
#include "fs/filesystem.h"
#include "tests/testdata/jpeg_factory.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

// A record file that logs every read (offset, length).
class LoggingFile final : public RandomAccessFile {
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
  bool KeepsReads() const override { return true; }
  std::vector<RecordScheduler::Range> reads() const {
    std::lock_guard<std::mutex> l(mu_);
    return reads_;
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  mutable std::mutex mu_;
  mutable std::vector<RecordScheduler::Range> reads_;
};

TEST(ReadPredictorTest, ReadingOneFolderFetchesThatFolderOnly) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-predictor-test-" + std::to_string(::getpid()));
  stdfs::remove_all(dir);
  for (const char* folder : {"a", "b"}) {
    stdfs::create_directories(dir + "/src/" + folder);
    for (int i = 0; i < 8; ++i) {
      testdata::JpegSpec spec;
      spec.width = 160 + 8 * i;
      spec.height = 120;
      spec.seed = static_cast<uint32_t>(i + (folder[0] == 'b' ? 100 : 0));
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
  config.images_per_record = 64;  // both folders in one record
  ASSERT_TRUE(tools::Build(config).has_value());

  std::shared_ptr<LoggingFile> logged;
  index::StoreOptions options;
  options.open_record = [&](const std::string& path,
                            uint64_t) -> Result<std::unique_ptr<RandomAccessFile>> {
    auto f = index::OpenRecordFileNoFollow(path);
    if (!f) return Err(f.error());
    auto l = std::make_unique<LoggingFile>(std::move(*f));
    return std::unique_ptr<RandomAccessFile>(std::move(l));
  };
  auto store = index::Store::Open(dir + "/store", options);
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
                         return true;
                       })
                  .ok());
  ASSERT_EQ(files.size(), 8u);
  auto rec = fs.store().OpenRecord(files[0].record, nullptr);
  ASSERT_TRUE(rec.has_value());
  auto* log = dynamic_cast<LoggingFile*>(rec->get());
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

}  // namespace
}  // namespace pcrfs::fs
