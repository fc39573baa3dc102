// A remote store end to end without a socket: a real store's objects served from memory
// (MemoryObjectClient; wrapped in a FaultyObjectClient or a HeldObjectClient where a test wants
// faults or slow answers), mounted as the daemon mounts a URL (location/: FetchMetadata with an
// injected client factory, MakeObjectClient, OpenRangeCache, OpenStoreAt) and read through
// Filesystem as the kernel would. mountpoint-s3 tests its file system over its mock client the
// same way (mountpoint-s3-fs/tests/fs.rs). What a socket adds (retries, Range handling, signing)
// is the HTTP client's, tested in remote/; one e2e test per backend runs the whole path.
//
// Nothing here waits for a duration: a slow answer is a held request (HeldObjectClient), let go
// when the test has seen what it wants to see.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "builder/builder_test_support.h"
#include "common/log.h"
#include "fs/filesystem.h"
#include "index/record_format.h"
#include "index/store.h"
#include "location/store_location.h"
#include "remote/fake_object_client.h"

namespace pcrfs::fs {
namespace {

namespace stdfs = std::filesystem;
using std::chrono::seconds;

constexpr char kUrl[] = "http://store.test/data";
const std::vector<std::string> kFiles = {"a/one.jpg",  "a/two.jpg",  "a/b/three.jpg",
                                         "b/four.jpg", "b/five.jpg", "top.jpg"};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class RemoteFilesystemTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(stdfs::temp_directory_path() /
                           ("pcrfs-remote-fs-test-" + std::to_string(::getpid())));
    stdfs::remove_all(*dir_);
    // Two versions of a store at one URL: v2 is a rebuild from other pictures.
    for (int v : {1, 2}) {
      const std::string src = *dir_ + "/src" + std::to_string(v);
      test::WriteTestJpegs(src, kFiles,
                           {.width = 180 + 40 * v,
                            .height = 140,
                            .width_step = 13,
                            .height_step = 7,
                            .seed = static_cast<uint32_t>(v)});
      std::ofstream(src + "/notes.txt") << "plain text, version " << v << "\n";
      tools::BuildConfig config;
      config.source = src;
      config.store = Local(v);
      config.images_per_record = 2;
      auto report = tools::Build(config);
      ASSERT_TRUE(report.has_value()) << report.error().ToString();
    }
  }
  static void TearDownTestSuite() {
    stdfs::remove_all(*dir_);
    delete dir_;
  }
  void TearDown() override { CloseLogFile(); }

  static std::string Local(int version) { return *dir_ + "/store" + std::to_string(version); }

  // Puts every file of local store `version` into `bucket` under its path in the store.
  static void Upload(MemoryObjectClient& bucket, int version) {
    const std::string root = Local(version);
    for (const auto& e : stdfs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      bucket.Put(stdfs::relative(e.path(), root).string(), ReadText(e.path().string()));
    }
  }
  static std::shared_ptr<MemoryObjectClient> Bucket(int version = 1) {
    auto bucket = std::make_shared<MemoryObjectClient>();
    Upload(*bucket, version);
    return bucket;
  }

  // The store at kUrl served by `client`, mounted as the daemon mounts it (metadata into
  // `cache_dir`, records through RemoteFile and a 64 MiB memory cache). No reading ahead unless
  // asked: a test's requests are its reads'.
  static Result<std::unique_ptr<Filesystem>> Mount(std::shared_ptr<ObjectClient> client,
                                                   const std::string& cache_dir,
                                                   FsOptions options = Quiet()) {
    RemoteOptions remote;
    remote.cache_dir = cache_dir;
    remote.memory_cache = uint64_t{64} << 20;
    auto location = FetchMetadata(
        kUrl, remote, nullptr,
        [client](const StoreLocation&) -> Result<std::shared_ptr<ObjectClient>> { return client; });
    if (!location) return Err(location.error());
    auto records = MakeObjectClient(*location);
    if (!records) return Err(records.error());
    std::string note;
    auto cache = OpenRangeCache(*location, &note);
    if (!cache) return Err(cache.error());
    auto store = OpenStoreAt(*location, *records, location->converted_index, *cache);
    if (!store) return Err(store.error());
    options.speculation_memory = remote.memory_cache;
    return std::make_unique<Filesystem>(std::move(*store), options);
  }
  static FsOptions Quiet() {
    FsOptions o;
    o.prefetch_percent = 0;
    o.readahead_slots = 0;
    return o;
  }
  std::string CacheDir() {
    return *dir_ + "/cache-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // File `rel` at `level` as the local store of `version` gives it.
  static std::vector<uint8_t> Expected(const std::string& rel, int level, int version = 1) {
    auto store = index::Store::Open(Local(version));
    EXPECT_TRUE(store.has_value());
    auto entry = (*store)->index().LookupPath(rel);
    EXPECT_TRUE(entry.has_value()) << rel;
    std::vector<uint8_t> out;
    EXPECT_TRUE((*store)->ReadFile(*entry, level, &out).ok());
    return out;
  }
  // The local store's entry of `rel`, its pieces resolved.
  static index::Entry EntryOf(const std::string& rel, int version = 1) {
    auto store = index::Store::Open(Local(version));
    EXPECT_TRUE(store.has_value());
    auto entry = (*store)->index().LookupPath(rel);
    EXPECT_TRUE(entry.has_value()) << rel;
    EXPECT_TRUE((*store)->ResolvePieces(&*entry).ok());
    return *entry;
  }
  static std::string RecordKey(const std::string& rel, int version = 1) {
    return index::RecordFileName(EntryOf(rel, version).record);
  }

  // The whole file at `path` (below the ladder root: "scanK/REL"), or its error.
  static Result<std::vector<uint8_t>> ReadAll(const Filesystem& fs, const std::string& path) {
    auto ino = fs.LookupPath(path);
    if (!ino) return Err(ino.error());
    auto st = fs.GetAttr(*ino);
    if (!st) return Err(st.error());
    std::vector<uint8_t> out(static_cast<size_t>(st->st_size) + 10);
    auto n = fs.Read(*ino, 0, out.size(), out.data());
    if (!n) return Err(n.error());
    out.resize(*n);
    return out;
  }
  static std::string At(const std::string& rel, int level) {
    return "scan" + std::to_string(level) + "/" + rel;
  }

  static std::string* dir_;
};

std::string* RemoteFilesystemTest::dir_ = nullptr;

// Every file at every level is the local store's, byte for byte, at any offset; the mount asks
// for manifest.json and index.pcri, and then for record bytes only.
TEST_F(RemoteFilesystemTest, EveryLevelReadsExactlyAsTheLocalStore) {
  auto bucket = Bucket();
  auto fs = Mount(bucket, CacheDir(), FsOptions{});
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  EXPECT_EQ(bucket->gets(), 2u) << "manifest.json and index.pcri";
  std::vector<std::string> files = kFiles;
  files.push_back("notes.txt");
  for (int level : {1, 2, 5, 10}) {
    for (const auto& rel : files) {
      const auto want = Expected(rel, level);
      auto got = ReadAll(**fs, At(rel, level));
      ASSERT_TRUE(got.has_value()) << rel << " level " << level << ": " << got.error().ToString();
      EXPECT_EQ(*got, want) << rel << " level " << level;
      // A slice in the middle, as a random-offset read.
      auto ino = (*fs)->LookupPath(At(rel, level));
      std::vector<uint8_t> slice(want.size() / 3);
      auto n = (*fs)->Read(*ino, want.size() / 3, slice.size(), slice.data());
      ASSERT_TRUE(n.has_value());
      EXPECT_TRUE(std::equal(slice.begin(), slice.end(), want.begin() + want.size() / 3));
    }
  }
  EXPECT_EQ((*fs)->damaged_files(), 0u);
}

// A server that fails the requests of one record (a 503 after the client's retries) costs
// exactly the reads of that record: EIO after a bounded number of requests (no retry storm
// above the client), no damage counted or logged, the other records served all along; once
// the server answers again the same files read exactly.
TEST_F(RemoteFilesystemTest, AFailingServerCostsOnlyTheReadsItFails) {
  const std::string log = CacheDir() + ".log";
  ASSERT_TRUE(SetLogFile(log).ok());
  auto faulty = std::make_shared<FaultyObjectClient>(Bucket());
  auto fs = Mount(faulty, CacheDir());
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  const std::string failing = RecordKey("a/one.jpg");
  ASSERT_NE(RecordKey("b/four.jpg"), failing);
  faulty->Arm(FaultyObjectClient::Fault::kError, 1000, failing,
              Status::IOError(std::string(kUrl) + "/" + failing +
                                  ": 503 Service Unavailable (SlowDown) after 3 tries",
                              ETIMEDOUT));
  for (int round = 0; round < 3; ++round) {
    const uint64_t fired = faulty->fired();
    auto got = ReadAll(**fs, At("a/one.jpg", 5));
    ASSERT_FALSE(got.has_value());
    EXPECT_EQ(got.error().ToErrno(), EIO);
    EXPECT_NE(got.error().message().find("503 Service Unavailable"), std::string::npos)
        << got.error().ToString();
    EXPECT_EQ(got.error().message().find('\n'), std::string::npos);
    // The record's header and footer, or the five pieces: never more per read.
    EXPECT_GE(faulty->fired(), fired + 1);
    EXPECT_LE(faulty->fired(), fired + 5);
    EXPECT_EQ(*ReadAll(**fs, At("b/four.jpg", 5)), Expected("b/four.jpg", 5));
  }
  EXPECT_EQ((*fs)->damaged_files(), 0u);
  EXPECT_EQ((*fs)->damaged_reads(), 0u);
  faulty->Disarm();
  EXPECT_EQ(*ReadAll(**fs, At("a/one.jpg", 5)), Expected("a/one.jpg", 5));
  EXPECT_EQ(*ReadAll(**fs, At("a/two.jpg", 10)), Expected("a/two.jpg", 10));
  EXPECT_EQ(ReadText(log).find("damaged"), std::string::npos) << ReadText(log);
}

// A slow answer holds only the read that waits for it: while a record's first answers are held,
// a file of another record already read is served again (without a request), and when the
// answers come the waiting read gets exact bytes.
TEST_F(RemoteFilesystemTest, ASlowAnswerHoldsOnlyItsOwnRead) {
  auto bucket = Bucket();
  auto held = std::make_shared<HeldObjectClient>(bucket);
  auto fs = Mount(held, CacheDir());
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  ASSERT_NE(RecordKey("a/one.jpg"), RecordKey("b/four.jpg"));
  const auto four = Expected("b/four.jpg", 10);
  EXPECT_EQ(*ReadAll(**fs, At("b/four.jpg", 10)), four);

  held->set_holding(true);
  std::atomic<bool> done{false};
  Result<std::vector<uint8_t>> slow = std::vector<uint8_t>{};
  std::thread reader([&] {
    slow = ReadAll(**fs, At("a/one.jpg", 10));
    done = true;
  });
  const auto asked = held->WaitHeld(1, seconds(30));
  ASSERT_FALSE(asked.empty()) << "the read asked for nothing";
  for (const auto& a : asked) EXPECT_EQ(a.key, RecordKey("a/one.jpg"));
  const uint64_t gets = bucket->gets();
  EXPECT_EQ(*ReadAll(**fs, At("b/four.jpg", 10)), four);
  EXPECT_EQ(bucket->gets(), gets) << "a file read before is served from the cache";
  EXPECT_FALSE(done.load()) << "its answers are held";
  held->set_holding(false);  // lets them go, and every later request through
  reader.join();
  ASSERT_TRUE(slow.has_value()) << slow.error().ToString();
  EXPECT_EQ(*slow, Expected("a/one.jpg", 10));
}

// A damaged byte in the store (its CRC does not match) costs exactly the file whose piece holds
// it, at the levels that serve that piece: EIO there, one "damaged data" line naming the file,
// the levels below and every other file exact.
TEST_F(RemoteFilesystemTest, DamagedBytesFailTheirFileAtTheLevelsThatServeThem) {
  const std::string log = CacheDir() + ".log";
  ASSERT_TRUE(SetLogFile(log).ok());
  auto bucket = Bucket();
  const index::Entry e = EntryOf("a/two.jpg");
  const std::string key = index::RecordFileName(e.record);
  std::string record = ReadText(Local(1) + "/" + key);
  record[e.pieces[2].offset + e.pieces[2].length / 2] ^= 0x20;  // in piece 3
  bucket->Put(key, std::move(record));
  auto fs = Mount(bucket, CacheDir());
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  for (int level = 1; level <= 10; ++level) {
    auto got = ReadAll(**fs, At("a/two.jpg", level));
    if (level < 3) {
      ASSERT_TRUE(got.has_value()) << got.error().ToString();
      EXPECT_EQ(*got, Expected("a/two.jpg", level));
      continue;
    }
    ASSERT_FALSE(got.has_value()) << "level " << level;
    EXPECT_EQ(got.error().ToErrno(), EIO);
    EXPECT_NE(got.error().message().find("a/two.jpg"), std::string::npos) << got.error().ToString();
  }
  for (const auto& rel : kFiles) {
    if (rel == "a/two.jpg") continue;
    EXPECT_EQ(*ReadAll(**fs, At(rel, 10)), Expected(rel, 10)) << rel;
  }
  EXPECT_EQ((*fs)->damaged_files(), 1u);
  const std::string text = ReadText(log);
  const size_t first = text.find("damaged data: ");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("damaged data: ", first + 1), std::string::npos) << "logged once: " << text;
  EXPECT_NE(text.find("\"a/two.jpg\" (level 3)"), std::string::npos) << text;
}

// Answers of the wrong extent are never served: a server that ignores Range (the whole object
// for a range), a body cut short, an object whose size is no longer the index's ("the object
// changed"). Each fails the read that gets it with EIO, in one line naming the object; the other
// files keep reading, and the same file reads exactly once the server answers right.
TEST_F(RemoteFilesystemTest, AnswersOfTheWrongExtentAreNeverServed) {
  using Fault = FaultyObjectClient::Fault;
  const std::string key = RecordKey("a/one.jpg");
  struct Case {
    Fault fault;
    const char* says;
  };
  int mount = 0;
  for (const Case& c : {Case{Fault::kWholeObject, "bytes at"}, Case{Fault::kShortBody, "bytes at"},
                        Case{Fault::kOtherSize, "the object changed"}}) {
    // A mount of its own: nothing of the record cached yet.
    auto faulty = std::make_shared<FaultyObjectClient>(Bucket());
    auto fs = Mount(faulty, CacheDir() + std::to_string(++mount));
    ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
    faulty->Arm(c.fault, 1000, key);
    auto got = ReadAll(**fs, At("a/one.jpg", 4));
    ASSERT_FALSE(got.has_value()) << c.says;
    EXPECT_EQ(got.error().ToErrno(), EIO);
    EXPECT_NE(got.error().message().find(c.says), std::string::npos) << got.error().ToString();
    EXPECT_NE(got.error().message().find(faulty->Name(key)), std::string::npos)
        << got.error().ToString();
    EXPECT_EQ(got.error().message().find('\n'), std::string::npos);
    EXPECT_EQ(*ReadAll(**fs, At("b/five.jpg", 4)), Expected("b/five.jpg", 4));
    faulty->Disarm();
    EXPECT_EQ(*ReadAll(**fs, At("a/one.jpg", 4)), Expected("a/one.jpg", 4)) << c.says;
  }
}

// Revalidation. A remount asks for each metadata file conditionally (its saved ETag: the
// answer is "not modified", no byte sent) and serves the same bytes. A store rebuilt at the URL
// under a mount: a record it had not opened reads "the object changed ...: remount" (EIO), and
// a remount fetches the new metadata (new ETags) and serves the new store exactly.
TEST_F(RemoteFilesystemTest, ARemountRevalidatesAndARebuildNeedsOne) {
  auto bucket = Bucket(1);
  const std::string cache = CacheDir();
  {
    auto fs = Mount(bucket, cache);
    ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
    EXPECT_EQ(*ReadAll(**fs, At("top.jpg", 6)), Expected("top.jpg", 6));
  }
  const uint64_t gets = bucket->gets(), bytes = bucket->bytes_served();
  auto fs = Mount(bucket, cache);
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  EXPECT_EQ(bucket->gets(), gets + 2) << "one conditional request per metadata file";
  EXPECT_EQ(bucket->bytes_served(), bytes) << "both not modified";
  EXPECT_EQ(*ReadAll(**fs, At("top.jpg", 6)), Expected("top.jpg", 6));

  // Rebuilt under the mount: a record it had not read is no longer the size its index says.
  const std::string unread = RecordKey("a/b/three.jpg");
  ASSERT_NE(unread, RecordKey("top.jpg"));
  ASSERT_NE(ReadText(Local(1) + "/" + unread).size(), ReadText(Local(2) + "/" + unread).size());
  Upload(*bucket, 2);
  auto got = ReadAll(**fs, At("a/b/three.jpg", 6));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().ToErrno(), EIO);
  EXPECT_NE(got.error().message().find("the object changed"), std::string::npos)
      << got.error().ToString();
  EXPECT_NE(got.error().message().find("remount"), std::string::npos) << got.error().ToString();
  fs->reset();

  const uint64_t before = bucket->bytes_served();
  auto again = Mount(bucket, cache);
  ASSERT_TRUE(again.has_value()) << again.error().ToString();
  EXPECT_GT(bucket->bytes_served(), before) << "new ETags: the new metadata is fetched";
  for (const auto& rel : kFiles) {
    EXPECT_EQ(*ReadAll(**again, At(rel, 6)), Expected(rel, 6, 2)) << rel;
  }
}

// A refused credential (403) fails the mount in one line naming the URL, with EACCES (what to
// fix: the credentials); refused record requests fail their reads with EIO in one line, are no
// damage, and leave the other records served.
TEST_F(RemoteFilesystemTest, ARefusedCredentialIsOneLine) {
  auto faulty = std::make_shared<FaultyObjectClient>(Bucket());
  const Status refused =
      Status::IOError(std::string(kUrl) + "/manifest.json: 403 Forbidden (AccessDenied)", EACCES);
  faulty->Arm(FaultyObjectClient::Fault::kError, 1, "manifest.json", refused);
  auto denied = Mount(faulty, CacheDir());
  ASSERT_FALSE(denied.has_value());
  EXPECT_EQ(denied.error().sys_errno(), EACCES);
  EXPECT_NE(denied.error().message().find(kUrl), std::string::npos) << denied.error().ToString();
  EXPECT_NE(denied.error().message().find("403 Forbidden"), std::string::npos);
  EXPECT_EQ(denied.error().message().find('\n'), std::string::npos);
  EXPECT_FALSE(stdfs::exists(CacheDir())) << "a failed mount leaves no folder it made";

  auto fs = Mount(faulty, CacheDir());
  ASSERT_TRUE(fs.has_value()) << fs.error().ToString();
  const std::string key = RecordKey("a/one.jpg");
  faulty->Arm(
      FaultyObjectClient::Fault::kError, 1000, key,
      Status::IOError(std::string(kUrl) + "/" + key + ": 403 Forbidden (AccessDenied)", EACCES));
  auto got = ReadAll(**fs, At("a/one.jpg", 3));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().ToErrno(), EIO);
  EXPECT_NE(got.error().message().find("403 Forbidden"), std::string::npos);
  EXPECT_EQ(got.error().message().find('\n'), std::string::npos);
  EXPECT_EQ(*ReadAll(**fs, At("b/four.jpg", 3)), Expected("b/four.jpg", 3));
  EXPECT_EQ((*fs)->damaged_files(), 0u);
}

}  // namespace
}  // namespace pcrfs::fs
