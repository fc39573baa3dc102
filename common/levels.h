// The fidelity ladder's rule (docs/format.md, "Scan groups", "Levels"): every stored JPEG is
// cut into kNumGroups scan groups, and level k (1..kNumGroups) of it is the pieces of groups
// 1..k followed by the end-of-image marker. Here because the codec (ProgressiveJpeg::Level)
// and the index (index/level_plan.h, which every reader of a stored level asks) both need it
// and the codec may not use the index.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pcrfs {

inline constexpr int kNumGroups = 10;

// The end-of-image marker (FF D9) that ends every level of a JPEG: the "tail", stored nowhere.
inline constexpr uint8_t kEoi[2] = {0xFF, 0xD9};

// How many pieces level k of a JPEG is made of: groups 1..JpegLevelPieces(k), k clamped to
// 1..kNumGroups (as the size of a level always was).
inline constexpr int JpegLevelPieces(int k) { return std::clamp(k, 1, kNumGroups); }

}  // namespace pcrfs
