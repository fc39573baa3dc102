// Scratch measurement of index format 4 at scale (docs/notebook/2026-11-27-index-format-4.md);
// not built by CMake: g++ -std=c++20 -O2 -I. tests/bench/compact_index_scale.cc
// build/index/libpcrfs_index.a build/common/libpcrfs_common.a -lzstd -llmdb -lpthread
// Synthetic ImageNet-like index: 1000 folders x N/1000 files, names nXXXXXXXX_IDX.JPEG,
// piece lengths drawn around the real 10k store's distribution (~110 KB files). Prints bytes
// per file, write, parse and lookup times, memory held.
#include <chrono>
#include <cstdio>
#include <random>

#include "index/compact_index.h"
using namespace pcrfs::index;
int main(int argc, char** argv) {
  const uint64_t files = argc > 1 ? std::stoull(argv[1]) : 1281167;
  const uint64_t dirs = 1000, per = files / dirs;
  std::mt19937_64 rng(1);
  CompactIndexWriter w("scale");
  auto t0 = std::chrono::steady_clock::now();
  Entry root;
  root.ino = 1;
  root.parent = 1;
  root.kind = EntryKind::kDirectory;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = dirs;
  root.num_subdirs = dirs;
  root.mtime_sec = 1700000000;
  if (!w.AddEntry(root).ok()) return 1;
  std::vector<std::string> cls;
  for (uint64_t d = 0; d < dirs; ++d) {
    char b[16];
    snprintf(b, 16, "n%08llu", (unsigned long long)(1440764 + d * 9973));
    cls.push_back(b);
  }
  std::sort(cls.begin(), cls.end());
  uint64_t next = 2 + dirs;
  for (uint64_t d = 0; d < dirs; ++d) {
    Entry e;
    e.ino = 2 + d;
    e.parent = 1;
    e.name = cls[d];
    e.kind = EntryKind::kDirectory;
    e.mode = 0755;
    e.mtime_sec = 1700000000;
    e.first_child = next;
    e.num_children = per;
    next += per;
    if (!w.AddEntry(e).ok()) return 1;
  }
  std::vector<std::array<uint64_t, 10>> sums;
  uint64_t fileno = 0, ino = 2 + dirs;
  std::lognormal_distribution<double> size(std::log(110000.0), 0.5);
  const double frac[10] = {0.12, 0.11, 0.02, 0.03, 0.08, 0.16, 0.03, 0.03, 0.04, 0.33};
  for (uint64_t d = 0; d < dirs; ++d) {
    std::vector<std::string> names;
    for (uint64_t i = 0; i < per; ++i)
      names.push_back(cls[d] + "_" + std::to_string(rng() % 50000 * 30 + i % 30) + ".JPEG");
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    while (names.size() < per) names.push_back(names.back() + "x");
    for (uint64_t i = 0; i < per; ++i, ++ino, ++fileno) {
      Entry e;
      e.ino = ino;
      e.parent = 2 + d;
      e.name = names[i];
      e.kind = EntryKind::kJpeg;
      e.mode = 0644;
      e.mtime_sec = 1700000000 + (int64_t)(rng() % 100000);
      e.mtime_nsec = (uint32_t)(rng() % 1000000000);
      e.record = (uint32_t)(fileno / 1024);
      e.slot = (uint32_t)(fileno % 1024);
      const double s = size(rng);
      for (int g = 0; g < 10; ++g)
        e.pieces[g].length = (uint64_t)(s * frac[g] * (0.8 + 0.4 * (rng() % 1000) / 1000.0));
      e.source_size = (uint64_t)(s * 1.07);
      if (sums.size() <= e.record) sums.push_back({});
      for (int g = 0; g < 10; ++g) sums[e.record][g] += e.pieces[g].length;
      if (!w.AddEntry(e).ok()) {
        printf("bad entry\n");
        return 1;
      }
    }
  }
  for (uint32_t r = 0; r < sums.size(); ++r) {
    RecordInfo info;
    info.id = r;
    info.data_offset = 200000;
    info.num_images = (uint32_t)std::min<uint64_t>(1024, fileno - r * 1024ull);
    info.group_offset[0] = info.data_offset;
    for (int g = 0; g < 10; ++g) info.group_offset[g + 1] = info.group_offset[g] + sums[r][g];
    info.file_size = info.group_offset[10] + 16;
    if (!w.AddRecord(info).ok()) return 1;
  }
  auto bytes = w.Finish();
  if (!bytes) {
    printf("%s\n", bytes.error().ToString().c_str());
    return 1;
  }
  auto t1 = std::chrono::steady_clock::now();
  auto idx = CompactIndex::Parse(
      "scale", std::span<const uint8_t>((const uint8_t*)bytes->data(), bytes->size()));
  auto t2 = std::chrono::steady_clock::now();
  if (!idx) {
    printf("%s\n", idx.error().ToString().c_str());
    return 1;
  }
  uint64_t found = 0;
  for (int i = 0; i < 100000; ++i) {
    auto e = (*idx)->Get(2 + dirs + rng() % fileno);
    if (e && (*idx)->Lookup(e->parent, e->name).value_or(0) == e->ino) ++found;
  }
  auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  printf(
      "files %llu: index.pcri %zu bytes = %.1f B/file; held in memory %.1f B/file; write+check "
      "%.0f ms, parse %.0f ms, 100k Get+Lookup %.0f ms (%llu ok)\n",
      (unsigned long long)fileno, bytes->size(), (double)bytes->size() / fileno,
      (double)(*idx)->MemoryBytes() / fileno, ms(t0, t1), ms(t1, t2), ms(t2, t3),
      (unsigned long long)found);
}
