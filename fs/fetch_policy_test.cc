// The fetch policy of a remote store, end to end without a socket: a real store's records served
// by a MemoryObjectClient, opened as the daemon opens a remote store (location/'s OpenStoreAt:
// RemoteFile + RangeCache), read through Filesystem as the kernel would (128 KiB READs) with
// the scheduler, the predictor and the promotions all running. Cache sizes, levels, orders and
// readers go in; GETs, origin bytes and evictions come out. What is asserted holds whatever the
// threads' timing: the bounds are the policy's, not a run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "fs/filesystem.h"
#include "location/store_location.h"
#include "remote/fake_object_client.h"
#include "remote/range_cache.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;

constexpr int kFolders = 8;
constexpr int kPerFolder = 30;

class FetchPolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(stdfs::temp_directory_path() /
                           ("pcrfs-fetch-policy-" + std::to_string(::getpid())));
    stdfs::remove_all(*dir_);
    std::vector<std::string> names;
    for (int d = 0; d < kFolders; ++d) {
      for (int i = 0; i < kPerFolder; ++i) {
        names.push_back("c" + std::to_string(d) + "/f" + std::to_string(i) + ".jpg");
      }
    }
    test::WriteTestJpegs(
        *dir_ + "/src", names,
        {.width = 560, .height = 420, .width_step = 1, .height_step = 1, .seed = 7});
    tools::BuildConfig config;
    config.source = *dir_ + "/src";
    config.store = *dir_ + "/store";
    config.images_per_record = 48;
    config.quality_sample = 0;
    auto report = tools::Build(config);
    ASSERT_TRUE(report.has_value()) << report.error().ToString();
    names_ = new std::vector<std::string>(std::move(names));
  }
  static void TearDownTestSuite() {
    stdfs::remove_all(*dir_);
    delete dir_;
    delete names_;
  }

  // A client serving the store's records, as a bucket would.
  static std::shared_ptr<MemoryObjectClient> Bucket() {
    auto mem = std::make_shared<MemoryObjectClient>();
    for (const auto& e : stdfs::directory_iterator(*dir_ + "/store/records")) {
      std::ifstream in(e.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      mem->Put("records/" + e.path().filename().string(), std::move(bytes));
    }
    return mem;
  }

  struct Mount {
    std::shared_ptr<RangeCache> cache;
    std::unique_ptr<Filesystem> fs;
  };
  // The store at `level` over `client`, with a memory cache of cache_bytes, as the daemon opens
  // a remote store.
  static Mount Open(std::shared_ptr<ObjectClient> client, int level, uint64_t cache_bytes,
                    FsOptions options = {}) {
    RangeCacheOptions o;
    o.memory_bytes = cache_bytes;
    auto cache = RangeCache::Open(o, nullptr);
    EXPECT_TRUE(cache.has_value());
    StoreLocation location;
    location.name = "mem://store";
    location.remote = true;
    location.dir = *dir_ + "/store";
    auto store = OpenStoreAt(location, std::move(client), nullptr, *cache);
    EXPECT_TRUE(store.has_value()) << store.error().ToString();
    options.fixed_level = level;
    options.cache_bytes = uint64_t{1} << 20;
    options.speculation_memory = cache_bytes;
    return {*cache, std::make_unique<Filesystem>(std::move(*store), options)};
  }

  static uint64_t Walk(const Filesystem& fs, const std::string& path) {
    auto ino = fs.LookupPath(path);
    return ino ? *ino : 0;
  }

  // The bytes of every file at `level` (what an epoch serves).
  static uint64_t LevelBytes(int level) {
    auto m = Open(Bucket(), level, uint64_t{64} << 20);
    uint64_t total = 0;
    for (const auto& n : *names_) total += m.fs->GetAttr(Walk(*m.fs, n))->st_size;
    return total;
  }

  struct Epoch {
    uint64_t served = 0, origin = 0, gets = 0;
    uint64_t promoted = 0;  // bytes of windows taken by demand reads
    RangeCacheStats cache;
  };
  // Reads every file once in `order` (indexes into names_) with `readers` threads, each file
  // whole in 128 KiB READs as the kernel sends them; checks each against the local store.
  static Epoch RunEpoch(int level, uint64_t cache_bytes, const std::vector<size_t>& order,
                        int readers, FsOptions options = {}) {
    auto mem = Bucket();
    Epoch out;
    {
      auto m = Open(mem, level, cache_bytes, options);
      std::vector<uint64_t> inos;
      for (const auto& n : *names_) inos.push_back(Walk(*m.fs, n));
      std::atomic<size_t> next{0};
      std::atomic<uint64_t> served{0};
      std::atomic<int> failures{0};
      std::vector<std::thread> threads;
      for (int r = 0; r < readers; ++r) {
        threads.emplace_back([&] {
          std::vector<uint8_t> buf(128 << 10);
          for (size_t i = next++; i < order.size(); i = next++) {
            uint64_t off = 0;
            for (;;) {
              auto n = m.fs->Read(inos[order[i]], off, buf.size(), buf.data());
              if (!n) {
                ++failures;
                break;
              }
              if (*n == 0) break;
              off += *n;
              served += *n;
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      EXPECT_EQ(failures.load(), 0);
      out.served = served.load();
      out.promoted = m.fs->scheduler_stats().promoted_bytes;
      m.fs.reset();  // its scheduler's pool stops: no fetch is in flight after this
      out.cache = m.cache->stats();
      // Every file was read: a byte still unread was fetched ahead for nothing. Which files
      // it belongs to says which path fetched it (printed on a failure).
      if (out.cache.unread_speculative_bytes > 0) {
        auto st = index::Store::Open(*dir_ + "/store");
        for (const auto& [id, r] : m.cache->UnreadRanges()) {
          std::printf("unread record %u [%llu, +%llu):", id, (unsigned long long)r.offset,
                      (unsigned long long)r.length);
          for (const auto& n : *names_) {
            auto e = (*st)->index().LookupPath(n);
            if (!e || e->record != id) continue;
            index::Entry en = *e;
            if (!(*st)->ResolvePieces(&en, 10).ok()) continue;
            for (int g = 0; g < 10; ++g) {
              const auto& p = en.pieces[g];
              if (p.offset < r.offset + r.length && r.offset < p.offset + p.length) {
                std::printf(" %s g%d [%llu,+%llu)", n.c_str(), g + 1, (unsigned long long)p.offset,
                            (unsigned long long)p.length);
              }
            }
          }
          std::printf("\n");
        }
      }
    }
    out.origin = mem->bytes_served();
    out.gets = mem->gets();
    return out;
  }

  static std::vector<size_t> Shuffled(uint32_t seed) {
    std::vector<size_t> order(names_->size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    return order;
  }
  static std::vector<size_t> InOrder() {
    std::vector<size_t> order(names_->size());
    std::iota(order.begin(), order.end(), 0);
    return order;
  }

  static std::string* dir_;
  static std::vector<std::string>* names_;
};

std::string* FetchPolicyTest::dir_ = nullptr;
std::vector<std::string>* FetchPolicyTest::names_ = nullptr;

// A level many times the cache, shuffled or in order, by 1, 8 or 16 readers: the origin sends
// at most 1.10x the bytes served, nothing fetched ahead is evicted before it is read, and once
// every file was read nothing fetched ahead is left unread (no byte was fetched ahead after its
// file was read).
// Before the fetch-ahead room (ReserveAhead) and read-first eviction, windows fetched for
// neighbours were evicted first and fetched again: 3.5-5x at levels 5 and 10.
TEST_F(FetchPolicyTest, ALevelLargerThanTheCacheIsFetchedOnce) {
  for (int level : {1, 3, 5, 10}) {
    const uint64_t level_bytes = LevelBytes(level);
    for (uint64_t divisor : {10, 100}) {
      const uint64_t cache = std::max<uint64_t>(level_bytes / divisor, 4096);
      for (int readers : {1, 8, 16}) {
        for (bool shuffled : {true, false}) {
          const Epoch e = RunEpoch(level, cache, shuffled ? Shuffled(level) : InOrder(), readers);
          SCOPED_TRACE("level " + std::to_string(level) + ", cache 1/" + std::to_string(divisor) +
                       " of " + std::to_string(level_bytes) + " bytes, " + std::to_string(readers) +
                       " readers, " + (shuffled ? "shuffled" : "in order") + ": origin " +
                       std::to_string(e.origin) + ", served " + std::to_string(e.served) +
                       ", GETs " + std::to_string(e.gets) + ", " + e.cache.ToJson());
          std::printf(
              "level %d cache 1/%d readers %d %s: origin/served %.3f GETs %llu unread %llu\n",
              level, static_cast<int>(divisor), readers, shuffled ? "shuffled" : "in order",
              static_cast<double>(e.origin) / static_cast<double>(e.served),
              static_cast<unsigned long long>(e.gets),
              static_cast<unsigned long long>(e.cache.unread_speculative_bytes));
          EXPECT_EQ(e.served, level_bytes);
          EXPECT_LE(static_cast<double>(e.origin), 1.10 * static_cast<double>(e.served));
          EXPECT_EQ(e.cache.evicted_unread_bytes, 0u);
          EXPECT_EQ(e.cache.unread_speculative_bytes, 0u);
        }
      }
    }
  }
}

// A reader that says its order (the hint socket's queue) gets its files fetched ahead in that
// order, each piece once: with a cache of a hundredth of the level, shuffled, eight readers, the
// origin sends at most 1.10x the bytes served, nothing fetched ahead is evicted unread, and
// most bytes are read from the cache.
TEST_F(FetchPolicyTest, HintedFilesAreFetchedAheadWithinTheCachesRoom) {
  for (int level : {1, 5}) {
    const uint64_t level_bytes = LevelBytes(level);
    const uint64_t cache = level_bytes / 100;
    auto mem = Bucket();
    uint64_t served = 0;
    RangeCacheStats stats;
    {
      FsOptions options;
      options.hints = true;
      options.prefetch_percent = 0;  // the hints alone
      options.readahead_slots = 0;
      auto m = Open(mem, level, cache, options);
      const std::vector<size_t> order = Shuffled(100 + level);
      std::vector<uint64_t> inos;
      for (size_t i : order) inos.push_back(Walk(*m.fs, (*names_)[i]));
      for (uint64_t ino : inos) m.fs->hint_queue().Add(ino, 1);
      std::atomic<size_t> next{0};
      std::atomic<uint64_t> total{0};
      std::vector<std::thread> readers;
      for (int r = 0; r < 8; ++r) {
        readers.emplace_back([&] {
          std::vector<uint8_t> buf(128 << 10);
          for (size_t i = next++; i < inos.size(); i = next++) {
            auto n = m.fs->Read(inos[i], 0, buf.size(), buf.data());
            ASSERT_TRUE(n.has_value());
            total += *n;
          }
        });
      }
      for (auto& t : readers) t.join();
      served = total.load();
      stats = m.cache->stats();
    }
    const uint64_t origin = mem->bytes_served();
    std::printf("hinted level %d cache 1/100: origin/served %.3f, hit ratio %s\n", level,
                static_cast<double>(origin) / static_cast<double>(served), stats.ToJson().c_str());
    EXPECT_EQ(served, level_bytes);
    EXPECT_LE(static_cast<double>(origin), 1.10 * static_cast<double>(served));
    EXPECT_EQ(stats.evicted_unread_bytes, 0u);
  }
}

// While hinted files are queued, what is fetched ahead for them may take three quarters of the
// cache (their bytes are all read, in order), more than the half the scheduler's speculation
// gets; once the readers stop hinting, the room is half again.
TEST_F(FetchPolicyTest, HintedFilesTakeThreeQuartersOfTheCacheAhead) {
  const int level = 1;
  const uint64_t cache_bytes = LevelBytes(level) / 4;
  FsOptions options;
  options.hints = true;
  options.prefetch_percent = 0;  // the hints alone
  options.readahead_slots = 0;
  auto m = Open(Bucket(), level, cache_bytes, options);
  const std::vector<size_t> order = Shuffled(11);
  std::vector<uint64_t> inos;
  for (size_t i : order) inos.push_back(Walk(*m.fs, (*names_)[i]));
  for (uint64_t ino : inos) m.fs->hint_queue().Add(ino, 1);
  auto ahead = [&] {
    const RangeCacheStats st = m.cache->stats();
    return st.unread_speculative_bytes + st.reserved_ahead_bytes;
  };
  // Nobody reads: the consumer fetches ahead until the room is full, beyond half the cache.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ahead() <= cache_bytes / 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(ahead(), cache_bytes / 2);
  EXPECT_LE(ahead(), cache_bytes / 4 * 3);
  std::vector<uint8_t> buf(128 << 10);
  for (uint64_t ino : inos) {
    auto n = m.fs->Read(ino, 0, buf.size(), buf.data());
    ASSERT_TRUE(n.has_value()) << n.error().ToString();
  }
  // Every file read: the queue is empty and the consumer gives the room back to speculation.
  const auto drained = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (m.cache->AheadRoom() != cache_bytes / 4 * 2 &&
         std::chrono::steady_clock::now() < drained) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m.cache->AheadRoom(), cache_bytes / 4 * 2);
  EXPECT_EQ(m.cache->stats().evicted_unread_bytes, 0u);
}

// Counts the GetRanges calls of two or more ranges (one multi-range GET each from a web
// server) and their ranges, passing every request on to `base`.
class CountingObjectClient final : public ObjectClient {
 public:
  explicit CountingObjectClient(std::shared_ptr<ObjectClient> base) : base_(std::move(base)) {}
  Result<ObjectListing> List(std::string_view token, uint32_t max_keys) override {
    return base_->List(token, max_keys);
  }
  std::string Name(std::string_view key) const override { return base_->Name(key); }
  uint64_t together() const { return together_.load(); }
  uint64_t ranges_together() const { return ranges_together_.load(); }

 protected:
  void DoGet(ObjectGet request, GetCallback done) override {
    base_->GetUnchecked(std::move(request), std::move(done));
  }
  void DoGetRanges(std::vector<ObjectGet> requests, RangeCallback done) override {
    if (requests.size() >= 2) {
      ++together_;
      ranges_together_ += requests.size();
    }
    ObjectClient::DoGetRanges(std::move(requests), std::move(done));
  }

 private:
  std::shared_ptr<ObjectClient> base_;
  std::atomic<uint64_t> together_{0}, ranges_together_{0};
};

// Hinted files that share a record are asked for together: a shuffled epoch's hints, taken in
// batches, cost about one multi-range GET per record, not one GET per file (a hinted level-1
// epoch of 10k files was held to ~2,900 files/s by the GETs a second the link took).
TEST_F(FetchPolicyTest, HintedFilesOfOneRecordAreAskedForTogether) {
  const int level = 1;
  const uint64_t level_bytes = LevelBytes(level);
  auto mem = Bucket();
  auto counting = std::make_shared<CountingObjectClient>(mem);
  FsOptions options;
  options.hints = true;
  options.prefetch_percent = 0;  // the hints alone
  options.readahead_slots = 0;
  auto m = Open(counting, level, 4 * level_bytes, options);
  const std::vector<size_t> order = Shuffled(7);
  std::vector<uint64_t> inos;
  for (size_t i : order) inos.push_back(Walk(*m.fs, (*names_)[i]));
  // No room to fetch ahead while the hints are queued: the consumer waits on its first file
  // (up to a second) and then finds the others queued, as a client's burst of hints arrives.
  const uint64_t room = m.cache->AheadRoom();
  ASSERT_TRUE(m.cache->ReserveAhead(room));
  for (uint64_t ino : inos) m.fs->hint_queue().Add(ino, 1);
  m.cache->UnreserveAhead(room);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (m.cache->stats().unread_speculative_bytes + m.cache->stats().reserved_ahead_bytes <
             level_bytes * 9 / 10 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<uint8_t> buf(128 << 10);
  uint64_t served = 0;
  for (uint64_t ino : inos) {
    auto n = m.fs->Read(ino, 0, buf.size(), buf.data());
    ASSERT_TRUE(n.has_value()) << n.error().ToString();
    served += *n;
  }
  EXPECT_EQ(served, level_bytes);
  const uint64_t records = (names_->size() + 47) / 48;
  SCOPED_TRACE(std::to_string(counting->together()) + " GETs of several ranges, " +
               std::to_string(counting->ranges_together()) + " ranges in them");
  EXPECT_GE(counting->ranges_together(), names_->size() * 9 / 10);
  EXPECT_LE(counting->together(), 2 * records);
  EXPECT_LE(static_cast<double>(mem->bytes_served()), 1.10 * static_cast<double>(served));
}

// A record the origin refuses costs its own files only (EIO), whatever was being fetched ahead
// of them: the other files read exactly as the local store's, and the room reserved for fetches
// ahead that failed is given back.
TEST_F(FetchPolicyTest, AFailingRecordCostsItsFilesAndGivesItsRoomBack) {
  const int level = 5;
  auto mem = Bucket();
  auto faulty = std::make_shared<FaultyObjectClient>(mem);
  faulty->Arm(FaultyObjectClient::Fault::kError, 1 << 30, "records/00000002.pcr",
              Status::IOError("mem://store/records/00000002.pcr: 503 Service Unavailable"));
  auto local = index::Store::Open(*dir_ + "/store");
  ASSERT_TRUE(local.has_value());
  FsOptions local_options;
  local_options.fixed_level = level;
  Filesystem reference(std::move(*local), local_options);
  auto m = Open(faulty, level, LevelBytes(level) / 10);
  const std::vector<size_t> order = Shuffled(5);
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0}, same{0}, different{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 8; ++r) {
    readers.emplace_back([&] {
      std::vector<uint8_t> got(256 << 10), want(256 << 10);
      for (size_t i = next++; i < order.size(); i = next++) {
        const std::string& name = (*names_)[order[i]];
        auto n = m.fs->Read(Walk(*m.fs, name), 0, got.size(), got.data());
        if (!n) {
          EXPECT_EQ(n.error().ToErrno(), EIO) << name;
          ++failed;
          continue;
        }
        auto w = reference.Read(Walk(reference, name), 0, want.size(), want.data());
        const bool equal = w && *w == *n && std::equal(got.begin(), got.begin() + *n, want.begin());
        ++(equal ? same : different);
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(failed.load(), kFolders * kPerFolder / 5);  // one record of five
  EXPECT_EQ(same.load(), kFolders * kPerFolder - failed.load());
  EXPECT_EQ(different.load(), 0);
  m.fs.reset();  // its fetches end with it
  EXPECT_EQ(m.cache->stats().reserved_ahead_bytes, 0u);
}

// Where the level fits, reading ahead still runs: a walk in order fetches most bytes ahead of
// the reader, in fewer GETs than pieces.
TEST_F(FetchPolicyTest, ALevelThatFitsIsFetchedAheadInFewRequests) {
  const int level = 5;
  const uint64_t level_bytes = LevelBytes(level);
  const Epoch e = RunEpoch(level, 4 * level_bytes, InOrder(), 1);
  SCOPED_TRACE("origin " + std::to_string(e.origin) + ", served " + std::to_string(e.served) +
               ", GETs " + std::to_string(e.gets) + ", " + e.cache.ToJson());
  EXPECT_LE(static_cast<double>(e.origin), 1.10 * static_cast<double>(e.served));
  EXPECT_LT(e.gets, names_->size() * level);
  EXPECT_GT(e.cache.memory_hit_bytes, e.served / 2);
}

// Where the level does not fit (the daemon then sets windows_for_several_pieces false), a cold
// read of several pieces takes its pieces alone, never a window around them: at level 10 a
// window holds a tenth of each neighbour, and a file's windows were k GETs sharing the link
// (10k files, caches 1/10, 16 readers, 20 ms: 484 files/s with windows, 553-694 without). A
// level-1 read (one piece) still may: its window holds whole neighbours.
TEST_F(FetchPolicyTest, ALevelLargerThanTheCachesTakesNoWindowsForSeveralPieces) {
  FsOptions options;
  options.windows_for_several_pieces = false;
  for (int level : {3, 10}) {
    const uint64_t level_bytes = LevelBytes(level);
    const Epoch e = RunEpoch(level, level_bytes / 10, Shuffled(11), 16, options);
    SCOPED_TRACE("level " + std::to_string(level) + ": origin " + std::to_string(e.origin) +
                 ", served " + std::to_string(e.served) + ", " + e.cache.ToJson());
    EXPECT_EQ(e.promoted, 0u);
    EXPECT_EQ(e.served, level_bytes);
    EXPECT_LE(static_cast<double>(e.origin), 1.10 * static_cast<double>(e.served));
  }
}

// A file at level k that is not cached costs one round trip: its k pieces are asked for at once,
// before any answer comes back.
TEST_F(FetchPolicyTest, AnUncachedFileIsOneRoundTrip) {
  auto held = std::make_shared<HeldObjectClient>(Bucket());
  for (int level : {3, 10}) {
    // Nothing predicted (no speculative request to count), and a cache of a few KiB: reading
    // every file once opens every record and parses its tables, and keeps none of the first
    // file's bytes.
    FsOptions options;
    options.prefetch_percent = 0;
    options.readahead_slots = 0;
    auto m = Open(held, level, 8 << 10, options);
    std::vector<uint8_t> buf(128 << 10);
    for (const auto& n : *names_) {
      ASSERT_TRUE(m.fs->Read(Walk(*m.fs, n), 0, buf.size(), buf.data()).has_value());
    }
    const uint64_t ino = Walk(*m.fs, (*names_)[0]);
    held->set_holding(true);
    Result<size_t> got = Err(Status::IOError("not read"));
    std::thread reader([&] { got = m.fs->Read(ino, 0, buf.size(), buf.data()); });
    const auto asked = held->WaitHeld(level, std::chrono::seconds(30));
    EXPECT_EQ(asked.size(), static_cast<size_t>(level)) << "level " << level;
    for (const auto& a : asked) EXPECT_FALSE(a.background);
    held->set_holding(false);
    reader.join();
    ASSERT_TRUE(got.has_value()) << got.error().ToString();
    EXPECT_EQ(*got, static_cast<size_t>(m.fs->GetAttr(ino)->st_size));
  }
}

}  // namespace
}  // namespace pcrfs::fs
