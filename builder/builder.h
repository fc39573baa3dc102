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

#include "builder/build_config.h"
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
