// DraftSink: where a draft's store goes when it is not a local folder (build_stages.h,
// object_target.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/random_access_file.h"
#include "common/status.h"
#include "index/store.h"

namespace pcrfs::tools {

// Where a draft's store goes when it is not a local folder (object_target.h: a bucket prefix):
// the draft is still written in a local STORE.partial, and the sink is told of each finished
// record, opens records and the finished store where they are, and publishes the rest.
class DraftSink {
 public:
  virtual ~DraftSink() = default;
  // Record `id` (the file at `path`, with its members' `fingerprint`) is finished.
  virtual Status RecordFinished(uint32_t id, const std::string& path,
                                const std::string& fingerprint) = 0;
  // The size and CRC32C of record `id` when the sink holds it and the draft no longer does
  // (false: read the local file).
  virtual bool RecordSizeAndCrc(uint32_t id, uint64_t* size, uint32_t* crc) = 0;
  // Record `id` for reading, where it is (nullptr: the local file at `path`).
  virtual Result<std::unique_ptr<RandomAccessFile>> OpenRecord(uint32_t id,
                                                               const std::string& path) = 0;
  // The store being written, its index and manifest in the local `dir`, for the quality sample.
  virtual Result<std::unique_ptr<index::Store>> OpenStore(const std::string& dir) = 0;
  // Everything of the finished draft `dir` but its records and build state made visible,
  // what makes it a store (or a part) last.
  virtual Status Publish(const std::string& dir) = 0;
};

}  // namespace pcrfs::tools
