#include "codec/progressive_jpeg.h"

#include <cstring>

namespace pcrfs::codec {

std::span<const uint8_t> ProgressiveJpeg::piece(int group) const {
  if (group < 1 || group > kNumGroups) return {};
  uint64_t begin = 0;
  for (int g = 1; g < group; g++) begin += piece_lengths[g - 1];
  uint64_t length = piece_lengths[group - 1];
  if (begin > bytes.size() || length > bytes.size() - begin) return {};  // lying lengths
  return std::span<const uint8_t>(bytes).subspan(begin, length);
}

std::vector<uint8_t> ProgressiveJpeg::Level(int k) const {
  // The pieces are stored back to back, so pieces 1..n are a prefix of `bytes`.
  uint64_t size = 0;
  for (int g = 1; g <= JpegLevelPieces(k); g++) size += piece_lengths[g - 1];
  if (size > bytes.size()) size = bytes.size();  // only if piece_lengths lie
  std::vector<uint8_t> out(size + sizeof(kEoi));
  if (size != 0) std::memcpy(out.data(), bytes.data(), size);
  std::memcpy(out.data() + size, kEoi, sizeof(kEoi));
  return out;
}

}  // namespace pcrfs::codec
