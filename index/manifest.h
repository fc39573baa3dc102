// The store manifest (manifest.json): human-readable facts about a store. Deterministic: it holds
// no time stamps and no host names, so two builds of the same input are byte-identical.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

inline constexpr uint32_t kStoreFormatVersion = 1;

struct BuildOptions {
  bool strip_metadata = false;
  uint32_t images_per_record = 0;
  uint32_t max_input_scans = 0;
  uint64_t max_image_memory = 0;
  uint64_t max_jpeg_bytes = 0;
};

struct Manifest {
  uint32_t format_version = kStoreFormatVersion;
  std::string generator;  // "pcrfs 0.1.0"
  BuildOptions options;
  uint64_t num_entries = 0;
  uint64_t num_directories = 0;
  uint64_t num_jpeg = 0;
  uint64_t num_passthrough = 0;
  std::map<std::string, uint64_t> passthrough_by_reason;  // reason name -> count
  uint32_t num_records = 0;
  uint64_t source_bytes = 0;       // all stored files, as in the source
  uint64_t source_jpeg_bytes = 0;  // the transcoded JPEGs only, as in the source
  // Total bytes served for all files at level k (index k-1), passthrough included.
  std::array<uint64_t, kNumGroups> level_bytes{};
  // The same for the transcoded JPEGs only.
  std::array<uint64_t, kNumGroups> jpeg_level_bytes{};

  std::string ToJson() const;  // pretty-printed, keys in a fixed order, trailing newline
  // Corruption for malformed JSON; NotSupported (naming both versions) for another version.
  static Result<Manifest> FromJson(const std::string& text);
};

}  // namespace pcrfs::index
