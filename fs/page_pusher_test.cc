#include "fs/page_pusher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "common/crc32c.h"
#include "fs/filesystem.h"
#include "fs/inode.h"
#include "fs/record_scheduler.h"
#include "index/store.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

// A record's speculation hooks over memory: byte i is i % 251 (a piece's CRC names its bytes),
// and ReadCached fails for a range that touches an evicted byte, as preadv2(RWF_NOWAIT) does
// for a page the page cache lacks. The pusher reads nothing else.
class MemoryFile final : public SpeculationSource {
 public:
  Result<uint64_t> Warm(uint64_t, uint64_t n, std::vector<uint8_t>*) const override { return n; }
  bool ReadCached(uint64_t offset, size_t n, uint8_t* dst) const override {
    for (uint64_t e : evicted) {
      if (e >= offset && e < offset + n) return false;
    }
    for (size_t i = 0; i < n; ++i) dst[i] = Byte(offset + i) ^ (damaged.count(offset + i) ? 1 : 0);
    return true;
  }
  static uint8_t Byte(uint64_t at) { return static_cast<uint8_t>(at % 251); }

  std::set<uint64_t> evicted, damaged;  // set before the pusher reads
};

// The pieces [offset, offset + length) of a MemoryFile, with their CRCs.
std::vector<PagePusher::Piece> Pieces(std::vector<std::pair<uint64_t, uint64_t>> ranges) {
  std::vector<PagePusher::Piece> out;
  for (const auto& [offset, length] : ranges) {
    std::vector<uint8_t> bytes(length);
    for (uint64_t i = 0; i < length; ++i) bytes[i] = MemoryFile::Byte(offset + i);
    out.push_back({offset, length, crc32c::Mask(crc32c::Value(bytes.data(), bytes.size()))});
  }
  return out;
}

// What a file of those pieces and that tail holds.
std::vector<uint8_t> Bytes(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                           std::string_view tail = {}) {
  std::vector<uint8_t> out;
  for (const auto& [offset, length] : ranges) {
    for (uint64_t i = 0; i < length; ++i) out.push_back(MemoryFile::Byte(offset + i));
  }
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

// Push records what it got.
struct Recorder {
  Mutex mu;
  std::map<uint64_t, std::vector<uint8_t>> pushed GUARDED_BY(mu);
  int answer = 0;  // what Push returns

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
  PagePusher pusher({.budget_bytes = 1 << 20}, rec.push());
  MemoryFile record, other;
  // Two files, three pieces each, in three group regions; the first ends with two bytes of
  // its own.
  pusher.Expect(&record, 7, Pieces({{0, 10}, {100, 20}, {200, 30}}), "\xFF\xD9", {3, 500});
  pusher.Expect(&record, 8, Pieces({{10, 10}, {120, 20}, {230, 30}}));
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
  EXPECT_EQ(rec.pushed[7], Bytes({{0, 10}, {100, 20}, {200, 30}}, "\xFF\xD9"))
      << "the pieces in file order, then the tail";
  EXPECT_EQ(rec.pushed[8], Bytes({{10, 10}, {120, 20}, {230, 30}}));
  const auto s = pusher.stats();
  EXPECT_EQ(s.expected, 2u);
  EXPECT_EQ(s.pushed, 2u);
  EXPECT_EQ(s.pushed_bytes, 122u);
  // Counted by level as it asked (8 asked for no level: pushed, not counted by level).
  EXPECT_EQ(s.files_by_level[2], 1u);
  EXPECT_EQ(s.bytes_by_level[2], 62u);
  EXPECT_EQ(s.source_bytes_by_level[2], 500u);
  EXPECT_EQ(s.files_by_level[0] + s.files_by_level[9], 0u);
  // A READ of 7 after its push counts only what the push did not: nothing, up to its 62 bytes
  // (Forget says there is something to count off; of a file never pushed, nothing).
  EXPECT_EQ(pusher.Forget(7), 62u);
  EXPECT_EQ(pusher.Forget(8), 0u);
  EXPECT_EQ(pusher.CountedByPush(7, 40), 40u);
  EXPECT_EQ(pusher.CountedByPush(7, 40), 22u);
  EXPECT_EQ(pusher.CountedByPush(7, 40), 0u);
  EXPECT_EQ(pusher.CountedByPush(8, 40), 0u);
}

TEST(PagePusherTest, AFileAReaderAskedForIsNotPushed) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 1 << 20}, rec.push());
  MemoryFile record;
  pusher.Expect(&record, 1, Pieces({{0, 10}}));
  pusher.Expect(&record, 2, Pieces({{10, 10}}));
  pusher.Forget(1);
  pusher.Forget(3);  // asked for before it was planned
  pusher.Expect(&record, 3, Pieces({{20, 10}}));
  pusher.Arrived(&record, 0, 30);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{2});
}

TEST(PagePusherTest, TheBudgetCapsWhatIsPushed) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 200}, rec.push());
  MemoryFile record;
  for (uint64_t i = 0; i < 5; ++i) pusher.Expect(&record, i, Pieces({{i * 100, 100}}));
  pusher.Arrived(&record, 0, 500);
  pusher.Drain();
  EXPECT_EQ(rec.inos().size(), 2u) << "100 bytes each, 200 allowed";
  EXPECT_EQ(pusher.stats().over_budget, 3u);
  // Once spent, nothing more is even expected.
  pusher.Expect(&record, 9, Pieces({{1000, 10}}));
  EXPECT_EQ(pusher.stats().expected, 5u);
}

// The bookkeeping is bounded: beyond max_pending_pieces, files are not expected (read with
// READs); once pushed, their room is free again. The bound counts pieces, not files: a file of
// ten pieces (level 10) takes ten times the room. One arrival completing thousands of files
// pushes them all.
TEST(PagePusherTest, PendingFilesAreBoundedAndABigArrivalPushesThemAll) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = uint64_t{1} << 30, .max_pending_pieces = 3}, rec.push());
  MemoryFile record;
  for (uint64_t i = 0; i < 5; ++i) pusher.Expect(&record, i, Pieces({{i * 100, 100}}));
  EXPECT_EQ(pusher.stats().expected, 3u);
  EXPECT_EQ(pusher.stats().refused, 2u);
  pusher.Arrived(&record, 0, 500);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), (std::set<uint64_t>{0, 1, 2}));
  pusher.Expect(&record, 7, Pieces({{700, 100}}));
  EXPECT_EQ(pusher.stats().expected, 4u);
  // Room for two more pieces: a file of three is refused, one of two is expected.
  pusher.Expect(&record, 8, Pieces({{800, 10}, {900, 10}, {1000, 10}}));
  EXPECT_EQ(pusher.stats().refused, 3u);
  pusher.Expect(&record, 9, Pieces({{800, 10}, {900, 10}}));
  EXPECT_EQ(pusher.stats().expected, 5u);
  pusher.Expect(&record, 10, Pieces({{1100, 10}}));
  EXPECT_EQ(pusher.stats().refused, 4u);

  Recorder many;
  const uint64_t n = 3 * PagePusher::kReadyBatch + 5;
  PagePusher big({.budget_bytes = uint64_t{1} << 30, .max_pending_pieces = n}, many.push());
  for (uint64_t i = 0; i < n; ++i) big.Expect(&record, 100 + i, Pieces({{i * 10, 10}}));
  big.Arrived(&record, 0, n * 10);
  big.Drain();
  EXPECT_EQ(many.inos().size(), n);
  EXPECT_EQ(big.stats().pushed, n);
}

TEST(PagePusherTest, FilesTheKernelDoesNotHoldCostNoBudget) {
  Recorder rec;
  rec.answer = -ENOENT;
  PagePusher pusher({.budget_bytes = 150}, rec.push());
  MemoryFile record;
  for (uint64_t i = 0; i < 3; ++i) pusher.Expect(&record, i, Pieces({{i * 100, 100}}));
  pusher.Arrived(&record, 0, 300);
  pusher.Drain();
  auto s = pusher.stats();
  EXPECT_EQ(s.unknown, 3u);
  EXPECT_EQ(s.over_budget, 0u);
  rec.answer = 0;
  pusher.Expect(&record, 5, Pieces({{500, 100}}));
  pusher.Arrived(&record, 500, 600);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{5});
}

TEST(PagePusherTest, LargeFilesEvictedBytesAndDamagedPiecesAreLeftToReads) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 1 << 30, .max_file_bytes = 1000}, rec.push());
  MemoryFile record;
  record.evicted.insert(2050);
  record.damaged.insert(3010);
  pusher.Expect(&record, 1, Pieces({{0, 1001}}));
  pusher.Expect(&record, 2, Pieces({{2000, 100}}));
  pusher.Expect(&record, 3, Pieces({{3000, 100}}));
  pusher.Expect(&record, 4, Pieces({{4000, 998}}), "\xFF\xD9");  // 1000 bytes: pushed
  pusher.Expect(&record, 5, Pieces({{5000, 999}}), "\xFF\xD9");  // 1001: too large
  pusher.Arrived(&record, 0, 6000);
  pusher.Drain();
  EXPECT_EQ(rec.inos(), std::set<uint64_t>{4});
  const auto s = pusher.stats();
  EXPECT_EQ(s.expected, 3u);
  EXPECT_EQ(s.not_in_memory, 1u);
  EXPECT_EQ(s.damaged, 1u) << "a piece whose bytes fail its CRC is not pushed";
}

// The names of this process's threads (/proc/self/task/*/comm).
std::multiset<std::string> ThreadNames() {
  std::multiset<std::string> names;
  for (const auto& task : stdfs::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    if (std::getline(in, name)) names.insert(name);
  }
  return names;
}

// top -H, ps -L and perf tell the daemon's threads apart by name.
TEST(PagePusherTest, ThePushersAndTheSchedulersThreadsAreNamed) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 1 << 20}, rec.push());
  RecordScheduler scheduler;
  // A thread names itself once it runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((ThreadNames().count("pcrfs-push") < 1 ||
          ThreadNames().count("pcrfs-spec") < static_cast<size_t>(RecordScheduler::kWorkers)) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto names = ThreadNames();
  EXPECT_GE(names.count("pcrfs-push"), 1u);
  EXPECT_GE(names.count("pcrfs-spec"), static_cast<size_t>(RecordScheduler::kWorkers));
}

TEST(PagePusherTest, OffWithoutABudget) {
  Recorder rec;
  PagePusher pusher({.budget_bytes = 0}, rec.push());
  EXPECT_FALSE(pusher.enabled());
  MemoryFile record;
  pusher.Expect(&record, 1, Pieces({{0, 10}}));
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
