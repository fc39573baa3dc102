// An archive (.tar, .tar.gz, .tgz, .zip, detected by content through libarchive) as the source
// of a build, read as a stream and never extracted to disk (docs/design.md, "Archives").
//
// Two passes over the same bytes, in the archive's own member order:
//  1. Open() reads every header (member data is skipped; a compressed archive is decompressed)
//     and builds the SourceTree: folders name-sorted as in a folder walk, but tree.files in
//     member order, with archives inside the archive expanded in place into folders named after
//     them without the extension. What cannot be stored (symlinks, hard links, '..' or absolute
//     names, duplicates, damage) becomes a SourceProblem.
//  2. StartReading() runs one reader thread over the archive again and hands the wanted members
//     out one at a time, in that same order, to whoever holds their turn (OpenMember).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "builder/source_tree.h"
#include "common/status.h"

namespace pcrfs::tools {

// The bytes of an archive that is not a local file (an http(s) or s3 URL: builder/
// remote_source.h), read from the start, in order.
class ArchiveStream {
 public:
  virtual ~ArchiveStream() = default;
  // The next bytes, empty at the end; valid until the next call. Errors name the source.
  virtual Result<std::span<const uint8_t>> Read() = 0;
  // Skips up to n bytes without reading them where it can; returns how many were skipped.
  virtual Result<uint64_t> Skip(uint64_t n) = 0;
};
// Opens a new stream at the archive's start: once per pass.
using ArchiveStreamOpener = std::function<Result<std::unique_ptr<ArchiveStream>>()>;

// OK if `path` is a regular file that libarchive reads as an archive with at least one member
// (with `opener`: if that stream is one; `path` only names it); InvalidArgument naming the path
// and the reason otherwise.
Status ProbeArchive(const std::string& path, const ArchiveStreamOpener& opener = {});

// "n01440764.tar" -> "n01440764" for the names that become folders (.tar, .tar.gz, .tgz, .zip,
// any case); empty for other names.
std::string NestedFolderName(const std::string& member_name);

class ArchiveSource;

// One member handed out by ArchiveSource::OpenMember. While it lives, the archive is positioned
// at this member and every other reader waits; destroying it hands the archive back.
class ArchiveMember {
 public:
  ~ArchiveMember();
  ArchiveMember(const ArchiveMember&) = delete;
  ArchiveMember& operator=(const ArchiveMember&) = delete;

  // Fills dst with the member's next dst.size() bytes; an error if the member ends first or the
  // archive is damaged.
  Status ReadExact(std::span<uint8_t> dst);

 private:
  friend class ArchiveSource;
  ArchiveMember(ArchiveSource* source, void* archive) : source_(source), archive_(archive) {}
  ArchiveSource* source_;
  void* archive_;  // struct archive*, owned by the source's reader thread
};

class ArchiveSource {
 public:
  // Pass 1. Fails only if the archive cannot be opened or its first header cannot be read.
  // nested: expand .tar/.tar.gz/.tgz/.zip members into folders. progress: called per file member.
  // opener: read the archive from streams it opens (each pass one), `path` only names it.
  static Result<std::unique_ptr<ArchiveSource>> Open(const std::string& path, bool nested,
                                                     const ListingProgress& progress = {},
                                                     ArchiveStreamOpener opener = {});
  ~ArchiveSource();  // cancels and joins the reader thread
  ArchiveSource(const ArchiveSource&) = delete;
  ArchiveSource& operator=(const ArchiveSource&) = delete;

  // The tree of pass 1; the caller may take it (the reader does not need it).
  SourceTree& tree() { return tree_; }

  // Pass 2: starts the reader thread, which hands out the file nodes `want` (a subsequence of
  // tree.files, in its order) one after another. REQUIRES: called once.
  void StartReading(std::vector<uint32_t> want);

  // Blocks until member want[turn] is reached and every earlier turn was released. REQUIRES:
  // every turn from 0 on is opened exactly once, its ArchiveMember destroyed before a later
  // turn can be served. Fails if the archive ended or broke before it, or after Cancel().
  Result<std::unique_ptr<ArchiveMember>> OpenMember(size_t turn);

  // Makes every waiting and later OpenMember fail, and stops the reader.
  void Cancel();

 private:
  friend class ArchiveMember;
  struct Impl;
  explicit ArchiveSource(std::unique_ptr<Impl> impl);
  void Release();

  std::unique_ptr<Impl> impl_;
  SourceTree tree_;
};

}  // namespace pcrfs::tools
