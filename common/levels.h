// The fidelity ladder's one constant: every stored JPEG is cut into this many scan groups, and
// level k (1..kNumGroups) serves groups 1..k (docs/format.md, "Scan groups").
#pragma once

namespace pcrfs {

inline constexpr int kNumGroups = 10;

}  // namespace pcrfs
