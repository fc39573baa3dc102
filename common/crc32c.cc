#include "common/crc32c.h"

#include <boost/crc.hpp>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pcrfs::crc32c {
namespace {

uint32_t ExtendPortable(uint32_t init, const uint8_t* p, size_t n) {
  // Reflected CRC32C, the same parameters as iSCSI / SSE4.2 crc32.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  // boost takes the running remainder un-complemented.
  crc.reset(init ^ 0xFFFFFFFFu);
  crc.process_bytes(p, n);
  return crc.checksum();
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t init, const uint8_t* p, size_t n) {
  uint64_t c = init ^ 0xFFFFFFFFu;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32 ^ 0xFFFFFFFFu;
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Extend(uint32_t init, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (HaveSse42()) return ExtendSse42(init, p, n);
#endif
  return ExtendPortable(init, p, n);
}

}  // namespace pcrfs::crc32c
