// What `pcr build` is given (BuildConfig) and what it tells (BuildProgress while it runs,
// BuildReport at the end): the public API of builder/builder.h, in a header of its own so that
// the build's stages (builder/build_stages.h) take them without including the builder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "builder/shard_part.h"
#include "index/manifest.h"
#include "location/store_location.h"

namespace pcrfs::tools {

class DraftSink;

// Where a build is, for a progress line (BuildConfig::progress, MergeConfig::progress).
struct BuildProgress {
  enum class Stage {
    kListing,  // walking the folder, reading the archive's headers: total unknown
    kFiles,    // reading and transcoding the files of the store (or of the shard)
    kRecords,  // pcr merge: joining the parts' records
    kQuality,  // measuring the quality sample
  };
  Stage stage = Stage::kListing;
  uint64_t done = 0;         // files listed or stored, records joined, JPEGs measured
  uint64_t total = 0;        // 0 while not known
  uint64_t bytes = 0;        // source bytes listed or stored so far (record bytes: merge)
  uint64_t bytes_total = 0;  // 0 while not known
};
// Called often (up to once per file, from the thread that runs the build); it must be cheap
// and rate-limit its own output.
using ProgressFn = std::function<void(const BuildProgress&)>;

struct BuildConfig {
  std::string source;
  std::string store;
  unsigned threads = 0;  // 0: every core
  uint32_t images_per_record = 1024;
  bool force = false;   // replace an existing store
  bool resume = false;  // continue STORE.partial
  bool strip_metadata = false;
  // SRC is an archive: its .tar/.tar.gz/.tgz/.zip members become folders (--no-nested: files).
  bool nested_archives = true;
  // SRC is a URL (s3://BUCKET/PREFIX, or an archive at an s3:// or http(s):// URL): how to
  // reach it, as for a remote store (region, endpoint, credentials, headers, CA, timeout,
  // connections: also the number of objects read at once).
  RemoteOptions remote;
  int max_input_scans = 1000;
  uint64_t max_image_memory = uint64_t{1} << 30;
  // JPEGs larger than this are not transcoded but stored whole (reason "too-big").
  uint64_t max_jpeg_bytes = uint64_t{256} << 20;
  // JPEGs whose PSNR and MS-SSIM at every level are measured into the manifest; 0: none.
  uint32_t quality_sample = 100;
  uint64_t quality_seed = 0;
  // Build only shard I of N into the part folder `store` (shard_part.h); merge with MergeParts.
  ShardSpec shard;
  ProgressFn progress;  // may be empty
  // Where the store goes when `store` names only the local draft (object_target.h); null: the
  // local folder `store`.
  DraftSink* sink = nullptr;
};

struct PassthroughNote {
  std::string rel_path;
  std::string reason;
  std::string detail;
};

struct BuildReport {
  index::Manifest manifest;
  uint64_t files_total = 0;
  uint64_t records_reused = 0;  // by --resume
  double seconds = 0;
  // JPEG-looking files that were stored whole, with libjpeg's reason (not plain non-JPEGs).
  std::vector<PassthroughNote> passthrough_notes;
  // Source entries that could not be stored at all: dangling symlinks, loops, unreadable files.
  std::vector<PassthroughNote> problems;
  // Files that changed between the listing of the source and their reading: stored as read.
  std::vector<PassthroughNote> changed;
  // A shard (BuildConfig::shard): its records [record_begin, record_end) of num_records, and the
  // files in them. The manifest is empty: `pcr merge` writes it.
  uint32_t record_begin = 0, record_end = 0, num_records = 0;
  uint64_t shard_files = 0;
};

}  // namespace pcrfs::tools
