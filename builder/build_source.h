// What a build reads from (docs/design.md, "Builder"): one interface over the three kinds of
// source, so the builder has one path for reading a file whatever it comes from.
//  - a folder (source_tree.h): walked; files opened by descriptor, fstat'ed, read with pread,
//    and checked again after reading (a file that changed is read again);
//  - an archive (archive_source.h), local or at a URL: members in the archive's order, one
//    reader at a time, each read once from the start;
//  - a bucket prefix (remote_source.h): objects by ranged GETs of their listed size.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "builder/source_tree.h"
#include "common/status.h"
#include "location/store_location.h"

namespace pcrfs::tools {

// The version of a source file that was read: what the index describes.
struct SourceFileStat {
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  int64_t ctime_ns = 0;  // folders only; 0 for archive members and objects
  bool operator==(const SourceFileStat&) const = default;
};

// One file of a source, opened. Read either whole (ReadAll) or as a stream (ReadHead, then
// ReadStream from offset 0 on, in increasing offsets). Used by one thread at a time.
class SourceFile {
 public:
  virtual ~SourceFile() = default;
  // The version opened (a folder's file: fstat; others: the listing's size and mtime).
  const SourceFileStat& stat() const { return stat_; }
  // The first dst.size() bytes (dst.size() <= stat().size).
  virtual Status ReadHead(std::span<uint8_t> dst) = 0;
  // The whole file. *changed: it is no longer the version stat() describes (a folder's file
  // rewritten while it was read); the bytes are then not to be used.
  virtual Result<std::vector<uint8_t>> ReadAll(bool* changed) = 0;
  // [offset, offset + dst.size()); offsets increase from 0 (bytes of ReadHead may be asked
  // again). At the end of the file a folder's file checks that it is still the version
  // stat() describes: if not, changed() and an error.
  virtual Status ReadStream(uint64_t offset, std::span<uint8_t> dst) = 0;
  // The last ReadStream failed because the file changed under it.
  bool changed() const { return changed_; }
  // After changed(): takes the file's current version as stat() for another stream from 0.
  // NotSupported where a file cannot be read again (archive members).
  virtual Status Restat() { return Status::NotSupported("cannot be read again"); }

 protected:
  SourceFileStat stat_;
  bool changed_ = false;
};

class BuildSource {
 public:
  virtual ~BuildSource() = default;

  // Lists `source`: a folder, a local archive, or a URL (an archive at an http(s)/s3 URL, else
  // the objects under an s3:// or Azure prefix, reached with `remote`). nested: expand archives
  // inside an archive. Fails only if the source cannot be listed at all.
  static Result<std::unique_ptr<BuildSource>> Open(const std::string& source, bool nested,
                                                   const RemoteOptions& remote,
                                                   const ListingProgress& progress = {});

  // The listing; the caller may take it and pass it back to OpenFile.
  SourceTree& tree() { return tree_; }
  // How many files to read at once given `threads` cores (objects: at least a connection each).
  virtual unsigned ReadThreads(unsigned threads) const { return threads; }
  // The file nodes that will be opened, in the order of their turns. REQUIRES: called once,
  // before OpenFile.
  virtual void StartReading(const std::vector<uint32_t>& /*want*/) {}
  // Opens file node `node` of `tree`, the turn-th of StartReading's list. Thread-safe. An
  // archive serves turns in order: turn k waits until every earlier file was released.
  virtual Result<std::unique_ptr<SourceFile>> OpenFile(const SourceTree& tree, uint32_t node,
                                                       size_t turn) = 0;
  // Makes waiting and later OpenFile calls fail.
  virtual void Cancel() {}

 protected:
  SourceTree tree_;
};

}  // namespace pcrfs::tools
