// `pcr build`: turns a source folder into a store (docs/design.md, "Builder").
//
// Records are written in depth-first sorted path order into STORE.partial/, each published
// atomically; the index and manifest come last, and the folder is renamed to STORE only when
// complete. The same input and options give a byte-identical store. --resume keeps every
// complete record whose members are unchanged and rebuilds the rest.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "builder/shard_part.h"
#include "builder/store_lock.h"
#include "codec/transcoder.h"
#include "common/status.h"
#include "index/manifest.h"
#include "location/store_location.h"

namespace pcrfs::tools {

class DraftSink;
class ObjectTarget;
struct ObjectPart;

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

// Exit codes of `pcr build`, documented in the README.
enum BuildExit : int {
  kExitOk = 0,
  kExitFailed = 1,    // nothing usable was produced (I/O error, disk full, ...)
  kExitUsage = 2,     // bad arguments or bad SRC/STORE, found before any work
  kExitProblems = 3,  // the store is complete, but some source entries could not be stored
  kExitBusy = 4,      // another writer holds STORE's lock (StoreWriterLock); nothing was touched
};

// Checks STORE (or PART) alone: its parent is a writable folder, and it does not exist unless
// `force` and it is a store, a part or an empty folder.
Status CheckStoreTarget(const std::string& store, bool force);

// Checks SRC and STORE before any work: InvalidArgument / AlreadyExists / NotFound on bad input.
Status CheckBuildArguments(const BuildConfig& config);

// The mount points where pcrfs serves `store` (its real path is the mount's source; this mount
// namespace's table), for refusing to replace a mounted store.
std::vector<std::string> PcrfsMountsOf(const std::string& store);

// A plain build (neither --resume nor --force) over STORE.partial with finished records would
// throw them away: InvalidArgument naming how many, and that --resume keeps them. REQUIRES:
// STORE's writer lock is held (a live build's STORE.partial is not an interrupted one).
Status CheckInterruptedBuild(const BuildConfig& config);

// Runs the whole build under the writer lock of config.store: CheckBuildArguments, then
// StoreWriterLock::Acquire (AlreadyExists while another writer holds it), then the arguments
// again, as STORE may have been published in between, then BuildLocked. A non-ok result means
// no store was published.
Result<BuildReport> Build(const BuildConfig& config);

// The build itself. REQUIRES: `lock` is held on config.store and CheckBuildArguments passed
// after it was taken; the lock is held until the caller releases it, after the final rename.
Result<BuildReport> BuildLocked(const BuildConfig& config, const StoreWriterLock& lock);

struct MergeConfig {
  // In any order. With remote_parts: the local folders holding each remote part's part.json and
  // listing.bin (FetchRemoteParts).
  std::vector<std::string> parts;
  std::string store;  // with target: its local draft's STORE
  // A merge into object storage (object_target.h): the target, and the parts there, by the
  // position of `parts`; their records are copied on the server.
  ObjectTarget* target = nullptr;
  std::vector<std::shared_ptr<ObjectPart>> remote_parts;
  unsigned threads = 0;  // for the quality sample; 0: every core
  bool force = false;
  ProgressFn progress;  // may be empty
};

// `pcr merge URL... STORE-URL`: the parts at `urls` (s3://, each a part, or one prefix whose
// folders are the parts: those holding part.json) opened, their part.json and listing.bin
// downloaded into folders under `dir`; sets config->parts and config->remote_parts. Errors:
// the URLs' (one line each), NotFound for a prefix without parts.
Status FetchRemoteParts(const std::vector<std::string>& urls, const RemoteOptions& options,
                        const std::string& dir, MergeConfig* config);

// Checks the parts before any work: each is a complete, undamaged part (part.json checksum), and
// together they are the N shards 0..N-1 of one source listing with one set of options.
// InvalidArgument / Corruption / NotFound naming the part otherwise.
Status CheckMergeParts(const MergeConfig& config);

// `pcr merge`: joins the parts into config.store, byte-identical to the single build: records
// copied (each checked against its part's CRC32C), the index written from the listing and the
// records, the quality sample measured on the merged store as a single build measures it.
// REQUIRES: `lock` is held on config.store, CheckStoreTarget and CheckMergeParts passed.
Result<BuildReport> MergeLocked(const MergeConfig& config, const StoreWriterLock& lock);

}  // namespace pcrfs::tools
