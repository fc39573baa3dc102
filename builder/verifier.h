// `pcr verify`: checks a store end to end, and optionally against its source folder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "index/store.h"
#include "location/store_location.h"

namespace pcrfs::tools {

struct VerifyConfig {
  std::string store;
  // Empty: do not compare with a source. Else any source pcr build takes (build_source.h): a
  // folder, a local archive, an archive at an http(s)/s3 URL, an s3:// or Azure prefix.
  std::string source;
  bool nested_archives = true;  // as pcr build's: archives inside an archive are folders
  RemoteOptions remote;         // how to reach a URL source (as pcr build's)
  unsigned jobs = 0;            // 0: every core
};

struct VerifyFinding {
  // kStray: a file in the store folder that the store does not name (a record file beyond
  // num_records, a leftover temporary file, anything else).
  enum class Kind { kDamaged, kDiffers, kMissing, kExtra, kStray };
  Kind kind;
  std::string path;  // relative to the dataset root; "records/..." for store-level damage
  std::string reason;
};

const char* FindingKindName(VerifyFinding::Kind kind);

struct VerifyReport {
  uint64_t records = 0;
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t pieces = 0;
  uint64_t compared = 0;                // source files compared
  std::vector<VerifyFinding> findings;  // sorted by path
};

// Reads every piece of every record and checks its CRC; checks every record header and table,
// every index entry against its record (kind, path, piece offsets, lengths and CRCs), every
// level's bounds, and the tree's structure; and that the store folder holds nothing but the
// manifest, the index and the record files the manifest counts. With a source: every JPEG at level
// 10 decodes to the source's pixels, every passthrough file equals its source byte for byte, and no
// source file is missing. A non-ok result means the store could not be opened at all.
Result<VerifyReport> VerifyStore(const VerifyConfig& config);
// The same for a store already open (config.store only names it): a remote one (local false),
// whose folder is not listed for stray files, since listing would need a LIST request.
VerifyReport VerifyOpenStore(const VerifyConfig& config, std::unique_ptr<index::Store> store,
                             bool local);

}  // namespace pcrfs::tools
