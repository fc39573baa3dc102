// Nothing in manifest.json is trusted: a hand-edited or damaged manifest is refused before any
// reader sizes memory or loops by its numbers (a num_records of 4e9 once made the daemon abort
// with bad_alloc and `pcr verify` run for minutes in gigabytes).
#pragma once

#include <string>

#include "common/status.h"
#include "index/index_reader.h"
#include "index/manifest.h"

namespace pcrfs::index {

// The largest images_per_record pcr build accepts.
inline constexpr uint32_t kMaxImagesPerRecord = 1u << 20;

// Checks every number of the manifest against the index (its entry count, its record table
// and meta "num_records") and against bounds that any store pcr build writes satisfies:
// counts that add up, level sizes that grow with the level and fit in the record files,
// quality figures in range. Constant memory; time linear in the number of records the index
// holds (one lookup each), never in a number the manifest claims. The error is Corruption,
// one line naming `manifest_path` and the field.
Status CheckManifest(const std::string& manifest_path, const Manifest& m, const IndexReader& idx);

}  // namespace pcrfs::index
