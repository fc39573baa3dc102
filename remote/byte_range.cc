#include "remote/byte_range.h"

#include <cstdio>
#include <string>

namespace pcrfs {

std::optional<ContentRange> ParseContentRange(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() &&
         (v.back() == ' ' || v.back() == '\t' || v.back() == '\r' || v.back() == '\n')) {
    v.remove_suffix(1);
  }
  const std::string s(v);
  unsigned long long a = 0, b = 0, total = 0;
  int consumed = 0;
  if (std::sscanf(s.c_str(), "bytes %llu-%llu/%llu%n", &a, &b, &total, &consumed) != 3 ||
      static_cast<size_t>(consumed) != s.size() || b < a || b >= total) {
    return std::nullopt;
  }
  return ContentRange{a, b, total};
}

}  // namespace pcrfs
