// The stages a build and `pcr merge` are made of (docs/design.md, "Builder"). Internal to
// builder/: builder.cc runs them for `pcr build`, merge.cc for `pcr merge`.
//  - records (record_stage.cc): a BuildSource's files read, transcoded and written into
//    records in listing order (WriteRecords); a merge copies its parts' records instead;
//  - placement (Placement): where each file of the listing is stored, from the records;
//  - index (index_stage.cc): index.pcri and manifest.json from the listing and the placement;
//  - publish (StoreDraft): STORE.partial prepared, provenance.json, the rename to STORE.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "builder/build_config.h"
#include "builder/build_options.h"
#include "builder/build_source.h"
#include "builder/draft_sink.h"
#include "builder/provenance.h"
#include "builder/quality_sample.h"
#include "builder/shard_part.h"
#include "builder/source_tree.h"
#include "common/status.h"
#include "index/entry.h"
#include "index/manifest.h"
#include "index/record_reader.h"

namespace pcrfs::tools {

inline void ReportProgress(const ProgressFn& progress, BuildProgress::Stage stage, uint64_t done,
                           uint64_t total, uint64_t bytes, uint64_t bytes_total) {
  if (progress) progress({stage, done, total, bytes, bytes_total});
}

Status RemoveTree(const std::string& path);

// provenance.json's kind of source: "folder", "archive", "remote-archive", "s3-prefix",
// "azure-prefix".
std::string SourceKind(const std::string& source);

// provenance.json's fields that a build and a merge fill alike.
inline Provenance NewProvenance(const char* command, int64_t started_ms, unsigned threads,
                                const BuildOptions& options) {
  Provenance p;
  p.command = command;
  p.started_ms = started_ms;
  p.threads = threads;
  p.nested_archives = options.nested_archives;
  return p;
}

// Publish: the folder a store is written in, STORE.partial, renamed to STORE when complete.
class StoreDraft {
 public:
  // sink: where the store goes when STORE is only the local draft's name (may be null).
  explicit StoreDraft(std::string store, DraftSink* sink = nullptr);
  static std::string PartialDir(const std::string& store) { return store + ".partial"; }

  const std::string& dir() const { return dir_; }
  std::string RecordPath(uint32_t id) const;
  // The fingerprint of record `id`'s members, for --resume (inside the build state folder).
  std::string FingerprintPath(uint32_t id) const;

  // How many records an interrupted build finished in STORE.partial (each has its members'
  // fingerprint in the build state folder): what --resume keeps and a fresh build removes.
  uint64_t FinishedRecords() const;
  // Makes STORE.partial with its records folder and a build state folder holding `options`
  // (one line). An existing STORE.partial is removed, unless `resume` and its options are the
  // same: then it is kept (InvalidArgument if they differ).
  Status Prepare(const std::string& options, bool resume) const;
  // Writes `content` to dir()/name atomically.
  Status WriteFile(const std::string& name, const std::string& content) const;
  // provenance.json: `p` with the generator, commit, host and finish time filled in, and the
  // counts of the listing and the report (files listed, not stored, changed, records kept).
  Status WriteProvenance(Provenance p, const SourceTree& tree, const BuildReport& report) const;
  // Removes the build state, syncs, and renames STORE.partial to STORE (an existing STORE,
  // with --force, is kept until the new one is in place). With a sink: the sink publishes,
  // then STORE.partial is removed.
  Status Publish() const;

  // The sink's hooks (no-ops, or the local files, without one).
  Status RecordFinished(uint32_t id, const std::string& fingerprint) const;
  Result<std::unique_ptr<RandomAccessFile>> OpenRecord(uint32_t id) const;
  // The sink's size and CRC32C of a record it holds (false: none, read the local file).
  bool RecordSizeAndCrc(uint32_t id, uint64_t* size, uint32_t* crc) const;
  Result<std::unique_ptr<index::Store>> OpenStore() const;

 private:
  std::string store_;
  std::string dir_;
  DraftSink* sink_;
};

// Placement: where each file of the listing is stored, by position in SourceTree::files: file
// i is slot i % per of record i / per (per: images per record). What the index needs of it, its
// kind, passthrough reason and 10 piece lengths (varints), is kept in an arena, ~20 bytes, and
// 8 bytes more for its place there: the builder holds one per file until the index is written.
class Placement {
 public:
  struct Location {
    bool stored = false;
    index::EntryKind kind = index::EntryKind::kPassthrough;
    index::PassthroughReason reason = index::PassthroughReason::kNone;
    uint32_t record = 0;
    uint32_t slot = 0;
    index::PieceRefs pieces;  // lengths only (the index omits offsets and CRCs)
  };

  Placement(size_t files, uint32_t images_per_record)
      : at_(files, kNotPlaced), per_(images_per_record) {}

  // Records where the files of `layout` (the files from position `begin` = record * per on)
  // are stored, in record `record` at `record_path`, and the block CRCs of their large pieces:
  // `blocks` from the writer, or (blocks null: a record kept by --resume or copied by a merge)
  // computed by reading those pieces again.
  // record_file: the record to read them from instead of record_path (may be null).
  Status Place(uint32_t record, const index::RecordLayout& layout, size_t begin,
               const std::vector<index::PieceBlockCrcs>* blocks, const std::string& record_path,
               const RandomAccessFile* record_file = nullptr);

  // File `file`'s place (not stored if it was never placed).
  Location at(size_t file) const;
  // The block CRCs of file `file`'s pieces longer than a checksum block; null if none.
  const std::vector<index::PieceBlockCrcs>* BlockCrcs(size_t file) const;
  // Frees everything (once the index has it).
  void Clear();

 private:
  static constexpr uint64_t kNotPlaced = UINT64_MAX;
  std::vector<uint64_t> at_;  // by file: its item in arena_
  uint32_t per_;
  ByteArena arena_;
  std::unordered_map<size_t, std::vector<index::PieceBlockCrcs>> block_crcs_;
};

// Inode numbers as the index assigns them: breadth-first, so the children of every directory
// are consecutive and in name order (readdir walks an inode range). Files for which
// stored(position in tree.files) is false get none. 12 bytes per node (inodes fit 32 bits:
// there is one per node at most).
struct InodeLayout {
  // By node index: a file's position in tree.files, a directory's first child's inode.
  std::vector<uint32_t> file_pos_or_first_child;
  std::vector<uint32_t> order;  // node index by inode - 1
  std::vector<uint32_t> ino;    // inode by node index (0: not stored)
  uint32_t file_pos(uint32_t node) const { return file_pos_or_first_child[node]; }
  uint32_t first_child(uint32_t node) const { return file_pos_or_first_child[node]; }
};
InodeLayout AssignInodes(const SourceTree& tree, const std::function<bool(size_t)>& stored);

// Index: writes index.pcri and manifest.json into the draft from the listing, the placement
// and the finished record files; then, if the options ask for a quality sample and the store
// has JPEGs, measures it on the draft (on `threads` threads; windows, may be null: those the
// records stage cut, by position in the listing, emptied) and writes the manifest again
// with it. *m: the manifest written. Once every entry is in the index writer, the placement
// is cleared and the tree's nodes released (SourceTree::ReleaseNodes): they are not held
// through the index's final check and the quality sample.
Status WriteIndexAndManifest(const StoreDraft& draft, SourceTree* tree, Placement* placement,
                             uint32_t num_records, const BuildOptions& options, unsigned threads,
                             const ProgressFn& progress, index::Manifest* m,
                             QualityWindows* windows = nullptr);

// Records (a build): sets report->num_records, record_begin, record_end (a shard's range, else
// every record) and shard_files; reads the files of those records of `tree` from `source` and
// writes them into the draft's records, keeping with --resume the
// records whose fingerprint (`options_text` and the members' paths, sizes and mtimes) is
// unchanged; places every file. Files that changed since the listing update `tree` (and are
// added to *changed and report->changed); unreadable ones go to report->problems.
// windows (may be null): when the quality sample will take every file, the centred windows of
// the large JPEGs transcoded here, by position in tree->files, for WriteIndexAndManifest.
Status WriteRecords(BuildSource* source, SourceTree* tree, const BuildConfig& config,
                    const std::string& options_text, unsigned threads, const StoreDraft& draft,
                    Placement* placement, BuildReport* report, std::vector<ChangedFile>* changed,
                    QualityWindows* windows);

// The files (by position in tree.files) the quality sample would take if every file were stored
// as a JPEG: then exactly the JPEGs it takes (all of them when there are no more files than
// `sample`); otherwise which ones it takes is known only once all are stored. A build cuts the
// windows of these while it transcodes them (WriteRecords): at most `sample`.
std::vector<bool> FilesLikelySampled(const SourceTree& tree, uint32_t sample, uint64_t seed);

// Shard: part.json and listing.bin of a shard's part, after its records (shard_part.h).
// The placement gives each record's block CRCs (PartRecord::blocks).
Status WritePart(const StoreDraft& draft, const BuildConfig& config, const BuildOptions& options,
                 const SourceTree& tree, const std::string& listing, uint32_t num_records,
                 const BuildReport& report, const std::vector<ChangedFile>& changed,
                 const Placement& placement);

}  // namespace pcrfs::tools
