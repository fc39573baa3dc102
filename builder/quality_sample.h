// Measuring what each level of a store costs in fidelity: PSNR and MS-SSIM (codec/quality.h)
// of levels 1..10 against level 10, over a seeded sample of the store's JPEGs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "codec/transcoder.h"
#include "common/status.h"
#include "index/manifest.h"
#include "index/store.h"

namespace pcrfs::tools {

// Statistics of one level (index/manifest.h, where the build stores them).
using LevelQuality = index::LevelQuality;

// Centred windows of large images (quality_window.h) cut while the build transcoded them
// (codec::TranscodeOptions::window_side), keyed by the image's inode (by its position in the
// listing before the index assigns inodes): the same bytes CutCentredWindow cuts from the
// stored level 10, without decoding it again.
using QualityWindows = std::unordered_map<uint64_t, std::vector<uint8_t>>;

// The inodes of the sample: min(sample, jpeg_inos.size()) of the store's JPEG inodes (given in
// inode order) chosen uniformly at random by a partial Fisher-Yates shuffle driven by
// std::mt19937_64 seeded with `seed`, so the choice depends only on the store and the seed;
// in inode order.
std::vector<uint64_t> ChooseQualitySample(std::vector<uint64_t> jpeg_inos, uint32_t sample,
                                          uint64_t seed);

// Chooses the entries of kind kJpeg of the sample (ChooseQualitySample), decodes level 10
// and levels 1..10 of each with codec::DecodeJpeg on up to `threads` threads (0: one per core),
// and returns the statistics for levels 1..10 (index k-1).
// Images smaller than the 11x11 SSIM window are left out (counted by *skipped when not null).
// Errors: the first read or decode failure (a damaged store), naming the entry.
// progress (may be empty) gets (images measured, images to measure), one call at a time.
// windows (may be null): windows already cut, by inode; a sampled image with one is measured on
// it (freed once measured), the others are cut from the store. *windows is emptied.
Result<std::array<LevelQuality, codec::kNumGroups>> MeasureStoreQuality(
    const index::Store& store, uint32_t sample, uint64_t seed, unsigned threads = 0,
    uint32_t* skipped = nullptr,
    const std::function<void(uint64_t done, uint64_t total)>& progress = {},
    QualityWindows* windows = nullptr);

}  // namespace pcrfs::tools
