#include "fs/page_pusher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "fs/filesystem.h"
#include "fs/inode.h"
#include "index/store.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

// Only its address matters to the pusher.
class NullFile final : public RandomAccessFile {
 public:
  Status Read(uint64_t, size_t, uint8_t*) const override { return Status::OK(); }
  uint64_t Size() const override { return 1 << 20; }
  const std::string& name() const override { return name_; }

 private:
  std::string name_ = "null";
};

// Fetch hands out `size` bytes of the file number; Push records what it got.
struct Recorder {
  Mutex mu;
  std::map<uint64_t, std::vector<uint8_t>> pushed GUARDED_BY(mu);
  int answer = 0;  // what Push returns
  std::set<uint64_t> not_in_memory;

  PagePusher::Fetch fetch() {
    return [this](uint64_t ino, std::vector<uint8_t>* out) {
      if (not_in_memory.count(ino) > 0) return Status::NotFound("not in memory");
      out->assign(100, static_cast<uint8_t>(ino));
      return Status::OK();
    };
  }
  PagePusher::Push push() {
    return [this](uint64_t ino, const uint8_t* data, size_t n) {
      if (answer != 0) return answer;
      MutexLock l(&mu);
      pushed[ino].assign(data, data + n);
      return 0;
    };
  }
  std::set<uint64_t> inos() {
    MutexLock l(&mu);
    std::set<uint64_t> out;
    for (const auto& [ino, bytes] : pushed) out.insert(ino);
    return out;
  }
};

TEST(PagePusherTest, AFileIsPushedOnceEveryPieceHasArrived) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 1 << 20}, rec.fetch(), rec.push());
  NullFile record, other;
  // Two files, three pieces each, in three group regions.
  pusher.Expect(&record, 7, 100, {{0, 10}, {100, 20}, {200, 30}});
  pusher.Expect(&record, 8, 100, {{10, 10}, {120, 20}, {230, 30}});
  pusher.Arrived(&record, 0, 20);     // region 1 of both
  pusher.Arrived(&record, 100, 130);  // region 2 of 7, and half of 8's
  pusher.Arrived(&other, 0, 1000);    // another record: nothing of theirs
  pusher.Drain();
  EXPECT_TRUE(rec.inos().empty());
  pusher.Arrived(&record, 200, 245);  // region 3 of 7, half of 8's
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{7});
  pusher.Arrived(&record, 130, 140);
  pusher.Arrived(&record, 245, 260);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), (std::set<uint64_t>{7, 8}));
  MutexLock l(&rec.mu);
  EXPECT_EQ(rec.pushed[8], std::vector<uint8_t>(100, 8)) << "the bytes Fetch returned";
  const auto s = pusher.stats();
  EXPECT_EQ(s.expected, 2u);
  EXPECT_EQ(s.pushed, 2u);
  EXPECT_EQ(s.pushed_bytes, 200u);
}

TEST(PagePusherTest, AFileAReaderAskedForIsNotPushed) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 1 << 20}, rec.fetch(), rec.push());
  NullFile record;
  pusher.Expect(&record, 1, 100, {{0, 10}});
  pusher.Expect(&record, 2, 100, {{10, 10}});
  pusher.Forget(1);
  pusher.Forget(3);  // asked for before it was planned
  pusher.Expect(&record, 3, 100, {{20, 10}});
  pusher.Arrived(&record, 0, 30);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{2});
}

TEST(PagePusherTest, TheBudgetCapsWhatIsPushed) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 200}, rec.fetch(), rec.push());
  NullFile record;
  for (uint64_t i = 0; i < 5; ++i) pusher.Expect(&record, i, 100, {{i * 10, 10}});
  pusher.Arrived(&record, 0, 50);
  pusher.Drain();
  EXPECT_EQ(rec.inos().size(), 2u) << "100 bytes each, 200 allowed";
  EXPECT_EQ(pusher.stats().over_budget, 3u);
  // Once spent, nothing more is even expected.
  pusher.Expect(&record, 9, 10, {{100, 10}});
  EXPECT_EQ(pusher.stats().expected, 5u);
}

TEST(PagePusherTest, FilesTheKernelDoesNotHoldCostNoBudget) {
  Recorder rec;
  rec.answer = -ENOENT;
  PagePusher pusher({.budget_bytes = 150}, rec.fetch(), rec.push());
  NullFile record;
  for (uint64_t i = 0; i < 3; ++i) pusher.Expect(&record, i, 100, {{i * 10, 10}});
  pusher.Arrived(&record, 0, 30);
  pusher.Drain();
  auto s = pusher.stats();
  EXPECT_EQ(s.unknown, 3u);
  EXPECT_EQ(s.over_budget, 0u);
  rec.answer = 0;
  pusher.Expect(&record, 5, 100, {{50, 10}});
  pusher.Arrived(&record, 50, 60);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{5});
}

TEST(PagePusherTest, LargeFilesAndEvictedBytesAreLeftToReads) {
  Recorder rec;
  rec.not_in_memory.insert(2);
  PagePusher pusher({.budget_bytes = 1 << 30, .max_file_bytes = 1000}, rec.fetch(), rec.push());
  NullFile record;
  pusher.Expect(&record, 1, 1001, {{0, 10}});
  pusher.Expect(&record, 2, 100, {{10, 10}});
  pusher.Arrived(&record, 0, 20);
  pusher.Drain();
  EXPECT_TRUE(rec.inos().empty());
  const auto s = pusher.stats();
  EXPECT_EQ(s.expected, 1u);
  EXPECT_EQ(s.not_in_memory, 1u);
}

TEST(PagePusherTest, OffWithoutABudget) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 0}, rec.fetch(), rec.push());
  EXPECT_FALSE(pusher.enabled());
  NullFile record;
  pusher.Expect(&record, 1, 100, {{0, 10}});
  pusher.Arrived(&record, 0, 10);
  pusher.Drain();
  EXPECT_TRUE(rec.inos().empty());
}

// The daemon's path without FUSE: a folder read as a shuffled epoch reads it plans its files,
// the scheduler reads their pieces, and every planned file nobody has asked for yet is pushed
// with exactly the bytes a read returns.
TEST(PagePusherTest, AFilesystemPushesThePlannedFilesWithTheirBytes) {
  const std::string dir =
      stdfs::temp_directory_path() / ("pcrfs-pusher-test-" + std::to_string(::getpid()));
  stdfs::remove_all(dir);
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("d/f" + std::to_string(10 + i) + ".jpg");
  test::WriteTestJpegs(dir + "/src", names, {.width_step = 8, .height_step = 4, .seed = 5});
  tools::BuildConfig config;
  config.source = dir + "/src";
  config.store = dir + "/store";
  config.images_per_record = 4;
  ASSERT_TRUE(tools::Build(config).has_value());

  for (const bool known : {true, false}) {
    SCOPED_TRACE(known ? "the kernel holds the inodes" : "it does not");
    Recorder rec;
    if (!known) rec.answer = -ENOENT;
    FsOptions options;
    options.readdirplus = ReaddirPlus::kAlways;
    options.readahead_slots = 0;
    options.prefetch_percent = 3;  // a second file read plans the folder
    options.push_bytes = uint64_t{1} << 30;
    options.push = rec.push();
    auto store = index::Store::Open(dir + "/store");
    ASSERT_TRUE(store.has_value());
    Filesystem fs(std::move(*store), options);
    auto lookup = [&](const std::string& name) {
      auto d = fs.Lookup(kFuseRootIno, "scan3");
      auto sub = fs.Lookup(d->st_ino, "d");
      return fs.Lookup(sub->st_ino, name)->st_ino;
    };
    auto read_all = [&](uint64_t ino) {
      std::vector<uint8_t> out(1 << 20);
      auto n = fs.Read(ino, 0, out.size(), out.data());
      EXPECT_TRUE(n.has_value());
      out.resize(n ? *n : 0);
      return out;
    };
    const uint64_t first = lookup("f13.jpg"), second = lookup("f17.jpg");
    read_all(first);
    read_all(second);
    // The scheduler reads the plan in the background: wait for it, a bounded time.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (fs.pusher_stats().pushed + fs.pusher_stats().unknown < 10 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    fs.DrainPusher();
    const auto s = fs.pusher_stats();
    std::set<uint64_t> want;
    for (const std::string& n : names) {
      const uint64_t ino = lookup(stdfs::path(n).filename());
      if (ino != first && ino != second) want.insert(ino);
    }
    if (!known) {
      EXPECT_EQ(s.unknown, 10u);
      EXPECT_TRUE(rec.inos().empty());
      continue;
    }
    EXPECT_EQ(s.pushed, 10u) << fs.GetXattr(kFuseRootIno, "user.pcrfs.prefetch").value_or("");
    EXPECT_EQ(rec.inos(), want) << "every planned file but the two read";
    for (uint64_t ino : want) {
      std::vector<uint8_t> got;
      {
        MutexLock l(&rec.mu);
        got = rec.pushed[ino];
      }
      EXPECT_EQ(got, read_all(ino)) << "ino " << ino;
    }
  }
  stdfs::remove_all(dir);
}

}  // namespace
}  // namespace pcrfs::fs
