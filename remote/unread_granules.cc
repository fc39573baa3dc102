#include "remote/unread_granules.h"

#include <algorithm>
#include <bit>

namespace pcrfs {

UnreadGranules& UnreadGranules::operator=(UnreadGranules&& o) noexcept {
  if (this != &o) {
    Reset();
    v_ = o.v_;
    o.v_ = 0;
  }
  return *this;
}

void UnreadGranules::Reset() {
  if (v_ != 0 && !is_inline()) delete[] words();
  v_ = 0;
}

void UnreadGranules::SetAll(uint64_t length) {
  Reset();
  const uint64_t n = Granules(length);
  if (n == 0) return;
  if (n <= kMaxInline) {
    v_ = kInline | ((uint64_t{1} << n) - 1);
    return;
  }
  const uint64_t count = (n + 63) / 64;
  auto* w = new uint64_t[count];
  std::fill(w, w + count, ~uint64_t{0});
  if (n % 64 != 0) w[count - 1] = (uint64_t{1} << (n % 64)) - 1;
  v_ = reinterpret_cast<uint64_t>(w);
}

bool UnreadGranules::Test(uint64_t g) const {
  if (v_ == 0) return false;
  if (is_inline()) return g < kMaxInline && ((v_ >> g) & 1) != 0;
  return ((words()[g / 64] >> (g % 64)) & 1) != 0;
}

uint64_t UnreadGranules::MarkRead(uint64_t length, uint64_t begin, uint64_t end) {
  end = std::min(end, length);
  if (v_ == 0 || begin >= end) return 0;
  const uint64_t n = Granules(length);
  const uint64_t g0 = begin / kGranule, g1 = (end - 1) / kGranule;  // granules touched
  // The bytes of granule g (the last one may be short).
  auto bytes_of = [&](uint64_t g) { return g + 1 < n ? kGranule : length - g * kGranule; };
  uint64_t cleared = 0;
  bool any_left = false;
  if (is_inline()) {
    for (uint64_t g = g0; g <= g1; ++g) {
      if ((v_ >> g) & 1) cleared += bytes_of(g);
    }
    const uint64_t span = g1 - g0 + 1;
    const uint64_t mask = (span >= 64 ? ~uint64_t{0} : ((uint64_t{1} << span) - 1)) << g0;
    v_ &= ~mask;
    any_left = (v_ & ~kInline) != 0;
  } else {
    uint64_t* w = words();
    for (uint64_t g = g0; g <= g1; ++g) {
      uint64_t& word = w[g / 64];
      const uint64_t bit = uint64_t{1} << (g % 64);
      if (word & bit) {
        cleared += bytes_of(g);
        word &= ~bit;
      }
    }
    for (uint64_t i = 0; i < (n + 63) / 64 && !any_left; ++i) any_left = w[i] != 0;
  }
  if (!any_left) Reset();
  return cleared;
}

uint64_t UnreadGranules::Count(uint64_t length) const {
  if (v_ == 0) return 0;
  const uint64_t n = Granules(length);
  uint64_t granules = 0;
  if (is_inline()) {
    granules = static_cast<uint64_t>(std::popcount(v_ & ~kInline));
  } else {
    for (uint64_t i = 0; i < (n + 63) / 64; ++i) {
      granules += static_cast<uint64_t>(std::popcount(words()[i]));
    }
  }
  uint64_t bytes = granules * kGranule;
  if (Test(n - 1)) bytes -= n * kGranule - length;  // the short last granule
  return bytes;
}

void UnreadGranules::ForEachRun(uint64_t length,
                                const std::function<void(uint64_t, uint64_t)>& fn) const {
  if (v_ == 0) return;
  const uint64_t n = Granules(length);
  uint64_t g = 0;
  while (g < n) {
    if (!Test(g)) {
      ++g;
      continue;
    }
    const uint64_t first = g;
    while (g < n && Test(g)) ++g;
    fn(first * kGranule, std::min(length, g * kGranule));
  }
}

}  // namespace pcrfs
