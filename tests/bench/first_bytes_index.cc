// For first_bytes_bench.py (not built by CMake; the script builds it with g++ against this
// tree's libraries): writes the index.pcri of a synthetic ImageNet-sized store around a small
// real one. The real store's files (a flat folder, one record) stay as they are, in folder
// "a_real" (first in the root); 999 folders of synthetic files (names, sizes and times as
// tests/bench/compact_index_scale.cc draws them) point into records 1.. that do not exist, so
// only the real files can be read. Prints the counts the manifest must carry, as JSON.
//   first_bytes_index REAL_STORE OUT_INDEX_PCRI [FILES]
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "index/compact_index.h"
#include "index/store.h"

using namespace pcrfs::index;

namespace {

constexpr uint64_t kSyntheticDirs = 999;

// The real store's files (one record, JPEGs only, in its root); false after one line on stderr.
bool ReadRealFiles(const IndexReader& ri, std::vector<Entry>* reals) {
  auto rroot = ri.Get(1);
  if (!rroot || ri.NumRecords() != 1) {
    std::fprintf(stderr, "the real store must have one record\n");
    return false;
  }
  if (!ri.List(*rroot, 0, [&](const Entry& e) {
           reals->push_back(e);
           return true;
         }).ok()) {
    return false;
  }
  for (const Entry& e : *reals) {
    if (e.kind != EntryKind::kJpeg) {
      std::fprintf(stderr, "the real store must hold JPEGs only, in its root\n");
      return false;
    }
  }
  return true;
}

// The root and its folders: "a_real" first, then the synthetic ones, ImageNet's class names
// sorted. Returns the folders' names, or an empty list if the writer refused an entry.
std::vector<std::string> AddFolders(CompactIndexWriter* w, uint64_t num_reals, uint64_t per) {
  Entry root;
  root.ino = 1;
  root.parent = 1;
  root.kind = EntryKind::kDirectory;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = kSyntheticDirs + 1;
  root.num_subdirs = kSyntheticDirs + 1;
  root.mtime_sec = 1700000000;
  if (!w->AddEntry(root).ok()) return {};
  std::vector<std::string> cls = {"a_real"};
  for (uint64_t d = 0; d < kSyntheticDirs; ++d) {
    char b[16];
    std::snprintf(b, sizeof b, "n%08llu", static_cast<unsigned long long>(1440764 + d * 9973));
    cls.push_back(b);
  }
  std::sort(cls.begin() + 1, cls.end());
  uint64_t next = 2 + cls.size();
  for (uint64_t d = 0; d < cls.size(); ++d) {
    Entry e;
    e.ino = 2 + d;
    e.parent = 1;
    e.name = cls[d];
    e.kind = EntryKind::kDirectory;
    e.mode = 0755;
    e.mtime_sec = 1700000000;
    e.first_child = next;
    e.num_children = d == 0 ? num_reals : per;
    next += e.num_children;
    if (!w->AddEntry(e).ok()) return {};
  }
  return cls;
}

// The synthetic files of folders cls[1..], `per` each, from inode *ino on, in records 1.. of
// 1024 files; *fileno counts them, (*sums)[r - 1] adds up record r's piece lengths by group.
bool AddSyntheticFiles(CompactIndexWriter* w, const std::vector<std::string>& cls, uint64_t per,
                       uint64_t* ino, uint64_t* fileno,
                       std::vector<std::array<uint64_t, 10>>* sums) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> size(std::log(110000.0), 0.5);
  const double frac[10] = {0.12, 0.11, 0.02, 0.03, 0.08, 0.16, 0.03, 0.03, 0.04, 0.33};
  for (uint64_t d = 1; d < cls.size(); ++d) {
    std::vector<std::string> names;
    for (uint64_t i = 0; i < per; ++i) {
      names.push_back(cls[d] + "_" + std::to_string(rng() % 50000 * 30 + i % 30) + ".JPEG");
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    while (names.size() < per) names.push_back(names.back() + "x");
    for (uint64_t i = 0; i < per; ++i, ++*ino, ++*fileno) {
      Entry e;
      e.ino = *ino;
      e.parent = 2 + d;
      e.name = names[i];
      e.kind = EntryKind::kJpeg;
      e.mode = 0644;
      e.mtime_sec = 1700000000 + static_cast<int64_t>(rng() % 100000);
      e.mtime_nsec = static_cast<uint32_t>(rng() % 1000000000);
      e.record = static_cast<uint32_t>(1 + *fileno / 1024);
      e.slot = static_cast<uint32_t>(*fileno % 1024);
      const double s = size(rng);
      for (int g = 0; g < 10; ++g) {
        e.pieces[g].length =
            static_cast<uint64_t>(s * frac[g] * (0.8 + 0.4 * (rng() % 1000) / 1000.0));
      }
      e.source_size = static_cast<uint64_t>(s * 1.07);
      if (sums->size() <= e.record - 1) sums->push_back({});
      for (int g = 0; g < 10; ++g) (*sums)[e.record - 1][g] += e.pieces[g].length;
      if (!w->AddEntry(e).ok()) return false;
    }
  }
  return true;
}

// Record 0 as the real store has it, then the synthetic records (which do not exist).
bool AddRecords(CompactIndexWriter* w, const IndexReader& ri,
                const std::vector<std::array<uint64_t, 10>>& sums, uint64_t fileno) {
  auto real_record = ri.GetRecord(0);
  if (!real_record || !w->AddRecord(*real_record).ok()) return false;
  for (uint32_t r = 0; r < sums.size(); ++r) {
    RecordInfo info;
    info.id = r + 1;
    info.data_offset = 200000;
    info.num_images = static_cast<uint32_t>(std::min<uint64_t>(1024, fileno - r * 1024ull));
    info.group_offset[0] = info.data_offset;
    for (int g = 0; g < 10; ++g) info.group_offset[g + 1] = info.group_offset[g] + sums[r][g];
    info.file_size = info.group_offset[10] + 16;
    if (!w->AddRecord(info).ok()) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: first_bytes_index REAL_STORE OUT_INDEX_PCRI [FILES]\n");
    return 2;
  }
  const uint64_t files = argc > 3 ? std::stoull(argv[3]) : 1281167;
  auto real = Store::Open(argv[1]);
  if (!real) {
    std::fprintf(stderr, "%s\n", real.error().ToString().c_str());
    return 1;
  }
  const IndexReader& ri = (*real)->index();
  std::vector<Entry> reals;
  if (!ReadRealFiles(ri, &reals)) return 1;
  const uint64_t per = (files - reals.size()) / kSyntheticDirs;
  CompactIndexWriter w("first-bytes", 9);
  const std::vector<std::string> cls = AddFolders(&w, reals.size(), per);
  if (cls.empty()) return 1;
  uint64_t ino = 2 + cls.size();
  for (Entry e : reals) {  // as the real store has them, renumbered
    e.ino = ino++;
    e.parent = 2;
    if (pcrfs::Status s = w.AddEntry(e); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::array<uint64_t, 10>> sums;
  uint64_t fileno = 0;
  if (!AddSyntheticFiles(&w, cls, per, &ino, &fileno, &sums)) return 1;
  if (!AddRecords(&w, ri, sums, fileno)) return 1;
  const uint64_t records = 1 + sums.size();
  for (const char* key : {"format_version"}) {
    if (auto v = ri.GetMeta(key); v && !w.PutMeta(key, *v).ok()) return 1;
  }
  if (!w.PutMeta("num_records", std::to_string(records)).ok()) return 1;
  auto bytes = w.Finish();
  if (!bytes) {
    std::fprintf(stderr, "%s\n", bytes.error().ToString().c_str());
    return 1;
  }
  if (!WriteCompactIndexFile(argv[2], *bytes).ok()) return 1;
  const uint64_t jpeg = reals.size() + fileno;
  std::printf(
      "{\"num_entries\": %llu, \"num_directories\": %llu, \"num_jpeg\": %llu, "
      "\"num_records\": %llu, \"index_bytes\": %zu, \"real\": [",
      static_cast<unsigned long long>(ino - 1), static_cast<unsigned long long>(cls.size() + 1),
      static_cast<unsigned long long>(jpeg), static_cast<unsigned long long>(records),
      bytes->size());
  for (size_t i = 0; i < reals.size(); ++i) {
    std::printf("%s\"%s\"", i ? ", " : "", reals[i].name.c_str());
  }
  std::printf("]}\n");
  return 0;
}
