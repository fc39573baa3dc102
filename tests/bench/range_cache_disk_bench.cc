// Scratch measurement of the range cache's disk tier with many small extents (issue 34 item 5);
// not built by CMake. From a build of the tree:
//   g++ -std=c++20 -O2 -I. tests/bench/range_cache_disk_bench.cc build/remote/libpcrfs_remote.a \
//     build/common/libpcrfs_common.a -lpthread -o /tmp/rcbench
//   flock /var/tmp/pcrfs-bench/bench.lock /tmp/rcbench DIR [EXTENTS] [MEAN_BYTES]
// Writes EXTENTS (100000) extents of 1 to 2 x MEAN_BYTES (3000) bytes, as an epoch's demand reads
// would (1000 records, each read at scattered offsets), into a fresh cache folder DIR; then
// reports the files in DIR, the time to open the folder again (the page cache warm), the heap
// the reopened cache holds per extent (mallinfo2), and the time to read every extent back.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "remote/range_cache.h"

using namespace pcrfs;
using Clock = std::chrono::steady_clock;

static double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string dir = argv[1];
  const uint64_t n = argc > 2 ? std::stoull(argv[2]) : 100000;
  const uint64_t mean = argc > 3 ? std::stoull(argv[3]) : 3000;
  std::filesystem::remove_all(dir);
  RangeCacheOptions o;
  o.memory_bytes = 1;  // keeps nothing: the disk tier only
  o.disk_dir = dir;
  o.disk_bytes = uint64_t{64} << 30;
  struct X {
    uint32_t id;
    uint64_t offset, length;
  };
  std::vector<X> xs;
  std::mt19937_64 rng(1);
  std::vector<uint64_t> next(1000, 0);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t id = static_cast<uint32_t>(rng() % 1000);
    const uint64_t len = mean / 2 + rng() % mean + 1;
    xs.push_back({id, next[id] + 1000, len});  // a gap before each: separate extents
    next[id] += 1000 + len;
    total += len;
  }
  std::shuffle(xs.begin(), xs.end(), rng);
  auto t0 = Clock::now();
  {
    auto cache = RangeCache::Open(o, nullptr);
    if (!cache) return 1;
    for (const X& x : xs) {
      auto bytes = std::make_shared<std::vector<uint8_t>>(x.length, static_cast<uint8_t>(x.id));
      (*cache)->Insert(x.id, x.offset, bytes, false);
    }
  }
  const double write_s = Seconds(t0);
  uint64_t files = 0, file_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    file_bytes += e.file_size();
  }
  malloc_trim(0);
  const size_t heap0 = mallinfo2().uordblks;
  t0 = Clock::now();
  auto cache = RangeCache::Open(o, nullptr);
  if (!cache) return 1;
  const double open_s = Seconds(t0);
  const size_t heap1 = mallinfo2().uordblks;
  const RangeCacheStats st = (*cache)->stats();
  t0 = Clock::now();
  uint64_t missing = 0;
  std::vector<uint8_t> dst;
  for (const X& x : xs) {
    dst.resize(x.length);
    missing += (*cache)->Copy(x.id, x.offset, x.length, dst.data()).size();
  }
  const double read_s = Seconds(t0);
  std::printf(
      "{\"extents\": %llu, \"bytes\": %llu, \"adopted_bytes\": %llu, \"write_s\": %.3f, "
      "\"files\": %llu, \"file_bytes\": %llu, \"reopen_s\": %.4f, \"heap_per_extent\": %.1f, "
      "\"read_all_s\": %.3f, \"missing\": %llu}\n",
      static_cast<unsigned long long>(n), static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(st.disk_bytes), write_s,
      static_cast<unsigned long long>(files), static_cast<unsigned long long>(file_bytes), open_s,
      static_cast<double>(heap1 - heap0) / static_cast<double>(n), read_s,
      static_cast<unsigned long long>(missing));
  return 0;
}
