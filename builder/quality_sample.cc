#include "builder/quality_sample.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "builder/quality_window.h"
#include "codec/decoder.h"
#include "codec/quality.h"
#include "common/levels.h"
#include "common/mutex.h"
#include "common/parallel.h"

namespace pcrfs::tools {
namespace {

constexpr int kLevels = codec::kNumGroups;

struct ImageQuality {
  bool measured = false;
  std::array<double, kLevels> psnr{};
  std::array<double, kLevels> msssim{};
};

// A uniform integer in [0, n) by rejection, so the choice is the same with every standard
// library (std::uniform_int_distribution's algorithm is not specified).
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % n;
}

// "train/cls/img.JPEG", for error messages.
std::string EntryPath(const index::IndexReader& idx, const index::Entry& e) {
  std::string path = e.name;
  uint64_t parent = e.parent;
  for (int depth = 0; parent != index::kRootIno && depth < 4096; ++depth) {
    auto p = idx.Get(parent);
    if (!p) break;
    path = p->name + "/" + path;
    parent = p->parent;
  }
  return path;
}

// Level k of an image: its bytes in the store, or of its window (quality_window.h).
using LevelBytes = std::function<Result<std::vector<uint8_t>>(int k)>;

// Measures one image; its levels 1..9 on up to `threads` threads (the sample is spread over
// the images first: a sample of one camera photo would otherwise leave all but one core idle).
// carried: its window cut while the build transcoded it (QualityWindows), or empty.
Result<ImageQuality> MeasureImage(const index::Store& store, const index::Entry& e,
                                  unsigned threads, std::vector<uint8_t> carried) {
  ImageQuality q;
  std::vector<uint8_t> top;
  // A large image is measured on its centred window: its level k is the window of the
  // image's level k (the same coefficients: the scan script is per component), transcoded
  // again here as the build does, so the cost per image is bounded whatever its size.
  std::optional<std::vector<uint8_t>> window;
  if (!carried.empty()) {
    window = std::move(carried);
  } else {
    if (Status s = store.ReadFile(e, kLevels, &top); !s.ok()) return Err(s);
    auto cut = CutCentredWindow(top, kQualityWindowSide);
    if (!cut) return Err(cut.error());
    window = std::move(*cut);
  }
  LevelBytes level_bytes;
  std::optional<codec::ProgressiveJpeg> cut;
  if (window) {
    codec::TranscodeResult t = codec::Transcode(*window, codec::TranscodeOptions{});
    window.reset();
    if (!t.transcoded()) return Err(Status::Corruption("quality window: " + t.detail));
    cut = std::move(t.image);
    top = cut->Level(kLevels);
    level_bytes = [&cut](int k) -> Result<std::vector<uint8_t>> { return cut->Level(k); };
  } else {
    // Level k of a JPEG is its first JpegLevelPieces(k) pieces and FF D9 (index/level_plan.h):
    // the start of level 10's bytes, checked when they were read, and cut from them here. A
    // store in a bucket (`pcr merge` into S3) would otherwise get one ranged GET per piece of
    // every level: 45 more per image than the 10 of level 10.
    index::Entry resolved = e;
    const bool cut_from_top =
        store.ResolvePieces(&resolved).ok() && resolved.kind == index::EntryKind::kJpeg &&
        resolved.SizeAtLevel(kLevels) == top.size() && top.size() >= sizeof(kEoi) &&
        std::equal(std::begin(kEoi), std::end(kEoi), top.end() - sizeof(kEoi));
    level_bytes = [&, cut_from_top, resolved](int k) -> Result<std::vector<uint8_t>> {
      const uint64_t size = resolved.SizeAtLevel(k);
      if (cut_from_top && size >= sizeof(kEoi) && size <= top.size()) {
        std::vector<uint8_t> bytes(top.begin(),
                                   top.begin() + static_cast<ptrdiff_t>(size - sizeof(kEoi)));
        bytes.insert(bytes.end(), std::begin(kEoi), std::end(kEoi));
        return bytes;
      }
      std::vector<uint8_t> bytes;
      if (Status s = store.ReadFile(e, k, &bytes); !s.ok()) return Err(s);
      return bytes;
    };
  }
  auto ref = codec::DecodeJpeg(top);
  if (!ref) return Err(ref.error());
  if (cut) std::vector<uint8_t>().swap(top);  // else levels 1..9 are cut from it
  if (codec::MsSsimScales(ref->width, ref->height) == 0) return q;  // too small: not measured
  // The reference's luma pyramid and local statistics, once for the 9 levels.
  auto ms_ref = codec::MsSsimReference::Make(*ref);
  if (!ms_ref) return Err(ms_ref.error());
  q.psnr[kLevels - 1] = std::numeric_limits<double>::infinity();
  q.msssim[kLevels - 1] = 1.0;
  Mutex mu;  // guards the two below (locals: the analysis checks members and globals only)
  std::optional<Status> error;  // the failure of the lowest level (every level runs: the
  int error_level = kLevels;    // same error whatever the threads)
  ParallelFor(kLevels - 1, threads, [&](size_t i) {
    const int k = static_cast<int>(i) + 1;
    Status status;
    if (auto bytes = level_bytes(k); !bytes) {
      status = bytes.error();
    } else if (auto level = codec::DecodeJpeg(*bytes); !level) {
      status = level.error();
    } else if (auto ms = ms_ref->Compare(*level); !ms) {
      status = ms.error();
    } else {
      q.psnr[k - 1] = codec::Psnr(*level, *ref);
      q.msssim[k - 1] = *ms;
      return;
    }
    MutexLock lock(&mu);
    if (k < error_level) {
      error_level = k;
      error = status;
    }
  });
  if (error) return Err(*error);
  q.measured = true;
  return q;
}

// Mean, nearest-rank 5th percentile and minimum of `v` (sorted in place).
void Summarize(std::vector<double>& v, double* mean, double* p5, double* min) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  *mean = sum / static_cast<double>(v.size());
  size_t rank = static_cast<size_t>(std::ceil(0.05 * static_cast<double>(v.size())));
  *p5 = v[rank == 0 ? 0 : rank - 1];
  *min = v.front();
}

}  // namespace

std::vector<uint64_t> ChooseQualitySample(std::vector<uint64_t> jpeg_inos, uint32_t sample,
                                          uint64_t seed) {
  const size_t n = std::min<size_t>(sample, jpeg_inos.size());
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    std::swap(jpeg_inos[i], jpeg_inos[i + UniformBelow(rng, jpeg_inos.size() - i)]);
  }
  jpeg_inos.resize(n);
  jpeg_inos.shrink_to_fit();
  std::sort(jpeg_inos.begin(), jpeg_inos.end());
  return jpeg_inos;
}

Result<std::array<LevelQuality, codec::kNumGroups>> MeasureStoreQuality(
    const index::Store& store, uint32_t sample, uint64_t seed, unsigned threads, uint32_t* skipped,
    const std::function<void(uint64_t, uint64_t)>& progress, QualityWindows* windows) {
  const index::IndexReader& idx = store.index();
  // Inodes are 1..NumEntries (assigned breadth-first by the builder). Only the inode numbers
  // of the JPEGs are kept (8 bytes each, not a decoded entry), and the index pages this walk
  // maps are released as it goes: a million-file store would otherwise cost ~600 MB here.
  std::vector<uint64_t> inos;
  for (uint64_t ino = index::kRootIno; ino <= idx.NumEntries(); ++ino) {
    auto e = idx.Get(ino);
    if (!e) return Err(e.error());
    if (e->kind == index::EntryKind::kJpeg) inos.push_back(ino);
    if (ino % 65536 == 0) idx.ReleaseMappedPages();
  }
  idx.ReleaseMappedPages();
  // Read in inode (and so record) order.
  inos = ChooseQualitySample(std::move(inos), sample, seed);
  const size_t n = inos.size();
  std::vector<index::Entry> jpegs;
  jpegs.reserve(n);
  for (uint64_t ino : inos) {
    auto e = idx.Get(ino);
    if (!e) return Err(e.error());
    jpegs.push_back(std::move(*e));
  }
  // The sampled images' windows at hand; the rest freed now.
  std::vector<std::vector<uint8_t>> carried(n);
  if (windows != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      if (auto it = windows->find(jpegs[i].ino); it != windows->end()) {
        carried[i] = std::move(it->second);
      }
    }
    QualityWindows().swap(*windows);
  }

  std::vector<ImageQuality> results(n);
  std::atomic<bool> failed{false};
  Mutex mu;  // guards the three below (locals: the analysis checks members and globals only)
  std::optional<Status> error;  // the failure of the lowest-numbered image
  size_t error_index = n;
  uint64_t done = 0;
  if (progress) progress(0, n);
  // Fewer images than threads: each image's levels share the rest.
  const unsigned all_threads = ResolveThreads(threads);
  const unsigned level_threads =
      n == 0 || n >= all_threads ? 1 : all_threads / static_cast<unsigned>(n);
  ParallelFor(n, threads, [&](size_t i) {
    if (failed) return;
    auto q = MeasureImage(store, jpegs[i], level_threads, std::move(carried[i]));
    if (q) {
      results[i] = *q;
      if (progress) {
        MutexLock lock(&mu);
        progress(++done, n);
      }
      return;
    }
    MutexLock lock(&mu);
    if (i < error_index) {
      error_index = i;
      std::string msg = EntryPath(idx, jpegs[i]) + ": " + q.error().message();
      error = q.error().IsCorruption() ? Status::Corruption(msg) : Status::IOError(msg);
    }
    failed = true;
  });
  if (error) return Err(*error);

  std::array<LevelQuality, kLevels> out{};
  uint32_t measured = 0;
  for (const auto& r : results) measured += r.measured ? 1 : 0;
  if (skipped) *skipped = static_cast<uint32_t>(n - measured);
  if (measured == 0) return out;
  for (int k = 0; k < kLevels; ++k) {
    std::vector<double> psnr, ms;
    for (const auto& r : results) {
      if (!r.measured) continue;
      psnr.push_back(r.psnr[k]);
      ms.push_back(r.msssim[k]);
    }
    LevelQuality& lq = out[k];
    lq.n = measured;
    Summarize(psnr, &lq.mean_psnr, &lq.p5_psnr, &lq.min_psnr);
    Summarize(ms, &lq.mean_msssim, &lq.p5_msssim, &lq.min_msssim);
  }
  return out;
}

}  // namespace pcrfs::tools
