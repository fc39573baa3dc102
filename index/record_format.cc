#include "index/record_format.h"

namespace pcrfs::index {

uint64_t LevelSize(EntryKind kind, const PieceRefs& pieces, int k) {
  if (k < 1) k = 1;
  if (k > kNumGroups) k = kNumGroups;
  switch (kind) {
    case EntryKind::kDirectory:
      return 0;
    case EntryKind::kPassthrough:
      return pieces[0].length;
    case EntryKind::kJpeg: {
      uint64_t total = sizeof(kEoi);
      for (int g = 0; g < k; ++g) total += pieces[static_cast<size_t>(g)].length;
      return total;
    }
  }
  return 0;
}

}  // namespace pcrfs::index
