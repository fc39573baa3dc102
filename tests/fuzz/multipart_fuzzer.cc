// Fuzz target: the multipart/byteranges parser (remote/multipart.h) on arbitrary bodies, a
// hostile server's answer to a multi-range GET. Invariants beyond "no crash, no exception": a
// refusal is IOError; an accepted body's parts each hold exactly their Content-Range's bytes,
// inside the body, all of one total; DeliverParts never reports more bytes than a range asked
// for, and where parts do not overlap what it delivers is their bytes.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "remote/multipart.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  const std::string body(reinterpret_cast<const char*>(data), size);
  auto parts = ParseByteRanges(body, "00000000000000000001", 64);
  if (!parts) {
    FUZZ_CHECK(parts.error().code() == Status::Code::kIOError, "%s",
               parts.error().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(!parts->empty() && parts->size() <= 64, "%zu parts", parts->size());
  const uint64_t total = parts->front().range.total;
  for (const BytePart& p : *parts) {
    FUZZ_CHECK(p.range.total == total, "totals differ");
    FUZZ_CHECK(p.range.start <= p.range.end && p.range.end < total, "a bad range");
    FUZZ_CHECK(p.data.size() == p.range.end - p.range.start + 1, "a part of the wrong size");
    FUZZ_CHECK(p.data.data() >= body.data() && p.data.data() + p.data.size() <= body.data() + size,
               "a part outside the body");
  }
  // Ask for each part's bytes (clipped to 4 KiB), and for one range before and one across.
  std::vector<ByteRange> asked;
  for (const BytePart& p : *parts) {
    asked.push_back({p.range.start, std::min<uint64_t>(4096, p.range.end - p.range.start + 1)});
  }
  std::sort(asked.begin(), asked.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<uint8_t*> dsts;
  for (const ByteRange& r : asked) buffers.emplace_back(r.length);
  for (auto& b : buffers) dsts.push_back(b.data());
  bool disjoint = true;
  for (size_t a = 0; a < parts->size(); ++a) {
    for (size_t b = a + 1; b < parts->size(); ++b) {
      const auto& x = (*parts)[a].range;
      const auto& y = (*parts)[b].range;
      if (x.start <= y.end && y.start <= x.end) disjoint = false;
    }
  }
  auto delivered = DeliverParts(*parts, total, asked, dsts);
  FUZZ_CHECK(delivered.size() == asked.size(), "one count per range");
  for (size_t i = 0; i < asked.size(); ++i) {
    FUZZ_CHECK(delivered[i] <= asked[i].length, "more than asked");
    // Where no two parts overlap, each delivered byte is the byte of the part that holds it.
    if (delivered[i] == 0 || !disjoint) continue;
    for (uint64_t j = 0; j < delivered[i]; ++j) {
      const uint64_t at = asked[i].offset + j;
      for (const BytePart& p : *parts) {
        if (p.range.start <= at && at <= p.range.end) {
          FUZZ_CHECK(buffers[i][j] == static_cast<uint8_t>(p.data[at - p.range.start]),
                     "byte %llu is not the part's", static_cast<unsigned long long>(at));
        }
      }
    }
  }
  return 0;
}
