// The options that decide a store's bytes, as one value with one text encoding: what a build
// records in its state (STORE.partial/.build/options, for --resume), what a shard records in
// part.json (parts to merge must agree), what a record's fingerprint covers, what `pcr merge`
// reads back, and, through `store`, manifest.json's "options" and provenance.json's
// nested_archives. Options that do not change the bytes (threads, progress, where the source
// is reached from) are not part of it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "index/manifest.h"

namespace pcrfs::tools {

struct BuildOptions {
  index::BuildOptions store;  // manifest.json's "options"
  // The source is an archive: whether archives inside it become folders is an option too.
  bool archive = false;
  bool nested_archives = true;

  // "format=F strip_metadata=0 images_per_record=N max_input_scans=N max_image_memory=N
  // max_jpeg_bytes=N quality_sample=N quality_seed=N[ archive_nested=0|1]" (F: the store
  // format), one line without the newline. Stable: .build/options of an interrupted build and
  // part.json of older parts compare against it.
  std::string Encode() const;
  // Encode's text back. NotSupported for another store format; Corruption naming the text if
  // it is malformed.
  static Result<BuildOptions> Decode(std::string_view text);
};

}  // namespace pcrfs::tools
