// Fuzz target: the LMDB page walker (index/lmdb/lmdb_pages.h) on whole index.lmdb files (the seeds
// are real small indexes, with and without their trailer). Each input is walked for the five
// databases of an index and one that does not exist. Invariants beyond "no crash, no read
// outside the input":
//   - a walk returns OK or Corruption (a one-line message);
//   - keys strictly increase, and every key and value lies inside the input;
//   - a walk whose fn stops at record k returns fn's status after exactly k calls, having seen
//     the first k records of the full walk.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "index/lmdb/lmdb_pages.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using Records = std::vector<std::pair<std::string_view, std::string_view>>;

bool Inside(std::span<const uint8_t> file, std::string_view s) {
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  return b >= file.data() && s.size() <= file.size() &&
         static_cast<size_t>(b - file.data()) <= file.size() - s.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  const std::span<const uint8_t> file(data, size);
  for (std::string_view db : {"entries", "dirents", "records", "meta", "blocks", "nope"}) {
    Records all;
    Status s = index::ForEachLmdbRecord(file, db, [&](std::string_view k, std::string_view v) {
      FUZZ_CHECK(Inside(file, k) && Inside(file, v), "record outside the input");
      FUZZ_CHECK(all.empty() || all.back().first < k, "keys out of order");
      all.emplace_back(k, v);
      return Status::OK();
    });
    if (!s.ok()) {
      FUZZ_CHECK(s.IsCorruption(), "%s", s.ToString().c_str());
      FUZZ_CHECK(s.message().find('\n') == std::string::npos, "a message of more than one line");
      continue;
    }
    if (all.empty()) continue;
    const size_t stop = (all.size() + 1) / 2;
    size_t calls = 0;
    s = index::ForEachLmdbRecord(file, db, [&](std::string_view k, std::string_view v) {
      FUZZ_CHECK(calls < stop && all[calls] == std::make_pair(k, v), "record %zu differs", calls);
      return ++calls == stop ? Status::NotFound("stop") : Status::OK();
    });
    FUZZ_CHECK(s.code() == Status::Code::kNotFound && s.message() == "stop" && calls == stop,
               "stopped walk: %s after %zu of %zu calls", s.ToString().c_str(), calls, stop);
  }
  return 0;
}
