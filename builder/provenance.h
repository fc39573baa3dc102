// provenance.json: how a store was built (docs/format.md, "provenance.json"): by which command
// from which kind of source, by which pcr, on which host, when and how long. It sits beside
// manifest.json but is not part of the store's content: manifest.json holds only facts that
// depend on the input and the options, so that a merged store, a store built from a bucket and a
// store built from the same tree in a folder stay byte-identical; everything that differs
// between such builds (times, host, the source's kind and location, shards) is here. Readers
// of the store's data never read it; `pcr inspect` shows it, and a store without it (built by an
// older pcr) is shown as "unknown".
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pcrfs::tools {

inline constexpr char kProvenanceFile[] = "provenance.json";

struct Provenance {
  std::string command;      // "build" or "merge"
  std::string source_kind;  // "folder", "archive", "s3-prefix", "remote-archive"
  std::string source;       // an absolute path, or a URL without credentials or query
  uint32_t shards = 0;      // merge: the number of parts joined (0: not a merge)
  std::string generator;    // "pcrfs 0.1.0"
  std::string commit;       // the source commit pcr was built from; may be empty
  std::string host;
  int64_t started_ms = 0;   // Unix time in milliseconds
  int64_t finished_ms = 0;  // the moment before STORE.partial became STORE
  unsigned threads = 0;
  bool nested_archives = true;  // archive sources only
  uint64_t files_listed = 0;    // in the source (every file, stored or not)
  uint64_t not_stored = 0;      // source entries that could not be stored
  uint64_t changed = 0;         // files that changed while they were read
  uint64_t records_kept = 0;    // by --resume

  std::string ToJson() const;  // pretty, keys in a fixed order, trailing newline
  // Corruption for malformed JSON or a missing or mistyped field.
  static Result<Provenance> FromJson(const std::string& text);
};

// The commit pcr was built from (CMake's configure-time `git describe`), or "".
const char* SourceCommit();
// The host's name, or "".
std::string HostName();
// Now, in Unix milliseconds.
int64_t UnixMillisNow();
// "2026-11-23 14:40:01 UTC" for a Unix time in milliseconds.
std::string FormatUtc(int64_t unix_ms);

}  // namespace pcrfs::tools
