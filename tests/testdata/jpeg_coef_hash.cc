// jpeg_coef_hash FILE...
//
// Prints, for each JPEG, a 64-bit hash of its image as libjpeg's jpeg_read_coefficients sees it
// (size, colour space, and per component its id, sampling, size in blocks, quantization table
// and every DCT coefficient), then the file's frame type and name:
//   <16 hex digits> SOF<n> <file>
// Two files with the same hash hold the same coefficients, whatever their entropy coding (a
// progressive level and its baseline form, tests/e2e/test_baseline_form.py).
//
// Exit codes: 0 done, 1 a file could not be read or decoded (a line on stderr names it), 2 usage.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "codec/baseline.h"
#include "common/file_util.h"

namespace {

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; i++) {
      h ^= p[i];
      h *= 0x100000001b3ull;
    }
  }
  void U64(uint64_t v) { Bytes(&v, sizeof v); }
};

// The first SOFn marker's n (0 baseline, 1 extended sequential, 2 progressive, ...), or -1.
int FrameType(const std::vector<uint8_t>& jpeg) {
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i] == 0xFF) {
    const uint8_t m = jpeg[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return m - 0xC0;
    if (m == 0xDA) return -1;
    i += 2 + ((size_t{jpeg[i + 2]} << 8) | jpeg[i + 3]);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: jpeg_coef_hash FILE...\n");
    return 2;
  }
  int rc = 0;
  for (int a = 1; a < argc; a++) {
    auto bytes = pcrfs::ReadWholeFile(argv[a], uint64_t{1} << 30);
    if (!bytes) {
      std::fprintf(stderr, "jpeg_coef_hash: %s: %s\n", argv[a], bytes.error().ToString().c_str());
      rc = 1;
      continue;
    }
    auto coef = pcrfs::codec::ReadCoefficients(*bytes);
    if (!coef) {
      std::fprintf(stderr, "jpeg_coef_hash: %s: %s\n", argv[a], coef.error().ToString().c_str());
      rc = 1;
      continue;
    }
    Fnv1a h;
    h.U64(coef->width);
    h.U64(coef->height);
    h.U64(static_cast<uint64_t>(coef->color_space));
    h.U64(coef->components.size());
    for (const auto& c : coef->components) {
      h.U64(static_cast<uint64_t>(c.component_id));
      h.U64(static_cast<uint64_t>(c.h_samp));
      h.U64(static_cast<uint64_t>(c.v_samp));
      h.U64(c.width_in_blocks);
      h.U64(c.height_in_blocks);
      h.Bytes(c.quant.data(), c.quant.size() * sizeof(c.quant[0]));
      h.Bytes(c.coef.data(), c.coef.size() * sizeof(c.coef[0]));
    }
    std::printf("%016llx SOF%d %s\n", static_cast<unsigned long long>(h.h), FrameType(*bytes),
                argv[a]);
  }
  return rc;
}
