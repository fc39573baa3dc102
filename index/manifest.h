// The store manifest (manifest.json): human-readable facts about a store. Deterministic: it holds
// no time stamps and no host names, so two builds of the same input are byte-identical.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

// 2: the index is index.pcri (index format 4); 1: index.lmdb (still read, converted at open).
inline constexpr uint32_t kStoreFormatVersion = 2;
inline constexpr uint32_t kOldestStoreFormatVersion = 1;

struct BuildOptions {
  bool strip_metadata = false;
  uint32_t images_per_record = 0;
  uint32_t max_input_scans = 0;
  uint64_t max_image_memory = 0;
  uint64_t max_jpeg_bytes = 0;
  uint32_t quality_sample = 0;  // JPEGs measured for the quality section; 0: none
  uint64_t quality_seed = 0;
};

// Fidelity of one level against level 10 over a sample of JPEGs. Level 10 is the reference:
// PSNR +infinity (null in JSON), MS-SSIM 1. p5 is the 5th percentile by nearest rank: the
// quality that 95% of the sampled images reach or beat.
struct LevelQuality {
  double mean_psnr = 0, p5_psnr = 0, min_psnr = 0;
  double mean_msssim = 0, p5_msssim = 0, min_msssim = 0;
  uint32_t n = 0;  // images measured (0: every field is 0)
};

struct QualitySample {
  uint32_t measured = 0;  // images measured (0: the store has no quality section)
  uint64_t seed = 0;
  std::array<LevelQuality, kNumGroups> levels{};
};

// The manifest's "quality" object for q (PSNR +infinity as null).
nlohmann::ordered_json QualityToJson(const QualitySample& q);

// The lowest level (1..10) whose 5th-percentile MS-SSIM is at least min_msssim, or 0 if the
// sample is empty. Level 10 always qualifies for min_msssim <= 1.
int RecommendLevel(const QualitySample& q, double min_msssim);

struct Manifest {
  uint32_t format_version = kStoreFormatVersion;
  std::string generator;  // "pcrfs 0.1.0"
  BuildOptions options;
  uint64_t num_entries = 0;
  uint64_t num_directories = 0;
  uint64_t num_jpeg = 0;
  uint64_t num_passthrough = 0;
  std::map<std::string, uint64_t> passthrough_by_reason;  // reason name -> count
  uint32_t num_records = 0;
  uint64_t source_bytes = 0;       // all stored files, as in the source
  uint64_t source_jpeg_bytes = 0;  // the transcoded JPEGs only, as in the source
  // Total bytes served for all files at level k (index k-1), passthrough included.
  std::array<uint64_t, kNumGroups> level_bytes{};
  // The same for the transcoded JPEGs only.
  std::array<uint64_t, kNumGroups> jpeg_level_bytes{};
  // Measured by `pcr build` on a seeded sample (options.quality_sample images).
  QualitySample quality;

  std::string ToJson() const;  // pretty-printed, keys in a fixed order, trailing newline
  // Corruption for malformed JSON; NotSupported (naming both versions) for another version.
  static Result<Manifest> FromJson(const std::string& text);
};

}  // namespace pcrfs::index
