// Fuzz target: the manifest parser (Manifest::FromJson) on arbitrary text. Invariants beyond
// "no crash, no exception": an accepted manifest serializes (ToJson must not throw, e.g. on
// strings that are not UTF-8), parses back, and serializes to the same text; RecommendLevel
// gives 0..10.

#include <cstdint>
#include <string>

#include "index/manifest.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = index::Manifest::FromJson(text);
  if (!m) {
    FUZZ_CHECK(m.error().IsCorruption() || m.error().code() == Status::Code::kNotSupported, "%s",
               m.error().ToString().c_str());
    return 0;
  }
  const std::string json = m->ToJson();
  auto again = index::Manifest::FromJson(json);
  FUZZ_CHECK(again.has_value(), "ToJson output does not parse: %s\n%s",
             again.error().ToString().c_str(), json.c_str());
  FUZZ_CHECK(again->ToJson() == json, "not stable under ToJson/FromJson:\n%s\n%s", json.c_str(),
             again->ToJson().c_str());
  for (double x : {0.0, 0.5, 0.9, 0.99, 1.0}) {
    const int level = index::RecommendLevel(m->quality, x);
    FUZZ_CHECK(level >= 0 && level <= index::kNumGroups, "RecommendLevel %d", level);
  }
  return 0;
}
