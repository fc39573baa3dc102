// CRC32C (Castagnoli), hardware-accelerated with SSE4.2 where the CPU has it.
// Stored checksums are masked (as in LevelDB) so that the CRC of data that embeds CRCs stays
// meaningful.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pcrfs::crc32c {

// Returns the CRC32C of data, continuing from a previous CRC `init` (0 to start).
uint32_t Extend(uint32_t init, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::span<const uint8_t> data) { return Extend(0, data.data(), data.size()); }

inline constexpr uint32_t kMaskDelta = 0xa282ead8u;

inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return ((rot >> 17) | (rot << 15));
}

}  // namespace pcrfs::crc32c
