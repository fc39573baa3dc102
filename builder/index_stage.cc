// The placement and index stages (build_stages.h): where each file is stored, then index.pcri
// and manifest.json from the listing and the placement.
#include <malloc.h>

#include <memory>

#include "builder/build_stages.h"
#include "builder/quality_sample.h"
#include "common/coding.h"
#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/index_reader.h"
#include "index/store.h"

namespace pcrfs::tools {

Status Placement::Place(uint32_t record, const index::RecordLayout& layout, size_t begin,
                        const std::vector<index::PieceBlockCrcs>* blocks,
                        const std::string& record_path, const RandomAccessFile* record_file) {
  std::string item;
  for (size_t s = 0; s < layout.images.size(); ++s) {
    const index::RecordImage& img = layout.images[s];
    // Only the lengths: the index omits the pieces' offsets and CRCs (the record has them).
    item.clear();
    item.push_back(static_cast<char>(img.kind));
    item.push_back(static_cast<char>(img.passthrough_reason));
    for (const index::PieceRef& p : img.pieces) PutVarint64(&item, p.length);
    at_[begin + s] = arena_.Append(item);
  }
  (void)record;  // record * per_ == begin: the place follows from the position
  if (blocks != nullptr) {
    for (const index::PieceBlockCrcs& b : *blocks) block_crcs_[begin + b.slot].push_back(b);
    return Status::OK();
  }
  std::unique_ptr<RandomAccessFile> opened_file;
  const RandomAccessFile* file = record_file;
  for (size_t s = 0; s < layout.images.size(); ++s) {
    for (int g = 1; g <= index::kNumGroups; ++g) {
      const index::PieceRef& p = layout.images[s].pieces[static_cast<size_t>(g - 1)];
      if (!index::HasBlockCrcs(p.length)) continue;
      if (file == nullptr) {
        auto opened = PosixRandomAccessFile::Open(record_path);
        if (!opened) return opened.error();
        opened_file = std::move(*opened);
        file = opened_file.get();
      }
      auto crcs = index::ComputeBlockCrcs(*file, p);
      if (!crcs) return crcs.error();
      block_crcs_[begin + s].push_back({static_cast<uint32_t>(s), g, std::move(*crcs)});
    }
  }
  return Status::OK();
}

Placement::Location Placement::at(size_t file) const {
  Location loc;
  if (at_[file] == kNotPlaced) return loc;
  loc.record = static_cast<uint32_t>(file / per_);
  loc.slot = static_cast<uint32_t>(file % per_);
  Decoder d(arena_.From(at_[file]));
  uint8_t kind = 0, reason = 0;
  // Written by Place() above; cannot fail.
  (void)(d.GetByte(&kind) && d.GetByte(&reason));
  for (index::PieceRef& p : loc.pieces) (void)d.GetVarint64(&p.length);
  loc.kind = static_cast<index::EntryKind>(kind);
  loc.reason = static_cast<index::PassthroughReason>(reason);
  loc.stored = loc.reason != index::PassthroughReason::kUnreadable;
  return loc;
}

void Placement::Clear() {
  at_ = {};
  arena_.Clear();
  block_crcs_ = {};
}

const std::vector<index::PieceBlockCrcs>* Placement::BlockCrcs(size_t file) const {
  auto it = block_crcs_.find(file);
  return it == block_crcs_.end() ? nullptr : &it->second;
}

InodeLayout AssignInodes(const SourceTree& tree, const std::function<bool(size_t)>& stored) {
  InodeLayout l;
  l.file_pos_or_first_child.assign(tree.nodes.size(), 0);
  for (size_t i = 0; i < tree.files.size(); ++i)
    l.file_pos_or_first_child[tree.files[i]] = static_cast<uint32_t>(i);
  l.order.reserve(tree.nodes.size());
  l.order.push_back(0);
  l.ino.assign(tree.nodes.size(), 0);
  l.ino[0] = index::kRootIno;
  for (size_t q = 0; q < l.order.size(); ++q) {
    const uint32_t dir = l.order[q];
    if (!tree.nodes[dir].is_dir) continue;
    l.file_pos_or_first_child[dir] = static_cast<uint32_t>(l.order.size() + 1);
    for (uint32_t c : tree.Children(tree.nodes[dir])) {
      if (!tree.nodes[c].is_dir && !stored(l.file_pos(c))) continue;
      l.ino[c] = static_cast<uint32_t>(l.order.size() + 1);
      l.order.push_back(c);
    }
  }
  return l;
}

namespace {

class IndexStage {
 public:
  IndexStage(const StoreDraft& draft, SourceTree* tree, Placement* placement, uint32_t num_records,
             const BuildOptions& options, unsigned threads, const ProgressFn& progress,
             QualityWindows* windows)
      : draft_(draft),
        tree_(*tree),
        placement_(*placement),
        num_records_(num_records),
        options_(options),
        threads_(threads),
        progress_(progress),
        windows_(windows) {}

  bool Included(const InodeLayout& layout, uint32_t node) const {
    return tree_.nodes[node].is_dir || placement_.at(layout.file_pos(node)).stored;
  }

  InodeLayout AssignInodes() const {
    return tools::AssignInodes(tree_, [this](size_t file) { return placement_.at(file).stored; });
  }

  // The index entry of node `node_index`, counted into the manifest's totals.
  index::Entry EntryOf(const InodeLayout& l, uint32_t node_index, index::Manifest* m) const {
    const SourceNode& n = tree_.nodes[node_index];
    index::Entry e;
    e.ino = l.ino[node_index];
    e.parent = l.ino[n.parent];
    e.name = tree_.Name(n);
    e.mode = n.mode;
    e.mtime_sec = n.mtime_sec;
    e.mtime_nsec = n.mtime_nsec;
    if (n.is_dir) {
      e.kind = index::EntryKind::kDirectory;
      e.first_child = l.first_child(node_index);
      for (uint32_t c : tree_.Children(n)) {
        if (!Included(l, c)) continue;
        ++e.num_children;
        if (tree_.nodes[c].is_dir) ++e.num_subdirs;
      }
      ++m->num_directories;
    } else {
      const Placement::Location loc = placement_.at(l.file_pos(node_index));
      e.kind = loc.kind;
      e.passthrough_reason = loc.reason;
      e.source_size = n.size;
      e.record = loc.record;
      e.slot = loc.slot;
      e.pieces = loc.pieces;
      m->source_bytes += n.size;
      if (loc.kind == index::EntryKind::kJpeg) {
        ++m->num_jpeg;
        m->source_jpeg_bytes += n.size;
      } else {
        ++m->num_passthrough;
        ++m->passthrough_by_reason[index::PassthroughReasonName(loc.reason)];
      }
      for (int k = 1; k <= index::kNumGroups; ++k) {
        const uint64_t size = index::LevelSize(loc.kind, e.pieces, k);
        m->level_bytes[k - 1] += size;
        if (loc.kind == index::EntryKind::kJpeg) m->jpeg_level_bytes[k - 1] += size;
      }
    }
    ++m->num_entries;
    return e;
  }

  // Every stored node's entry in inode order, with the block CRCs of its large pieces. The
  // records stage's quality windows move from their file's position to its inode.
  Status AddEntries(index::CompactIndexWriter* writer, index::Manifest* m) {
    const InodeLayout layout = AssignInodes();
    for (uint32_t node_index : layout.order) {
      const index::Entry e = EntryOf(layout, node_index, m);
      PCRFS_RETURN_IF_ERROR(writer->AddEntry(e));
      if (tree_.nodes[node_index].is_dir) continue;
      if (windows_ != nullptr && !windows_->empty()) {
        if (auto it = windows_->find(layout.file_pos(node_index)); it != windows_->end()) {
          windows_by_ino_[e.ino] = std::move(it->second);
          windows_->erase(it);
        }
      }
      const auto* blocks = placement_.BlockCrcs(layout.file_pos(node_index));
      if (blocks == nullptr) continue;
      for (const index::PieceBlockCrcs& b : *blocks) {
        PCRFS_RETURN_IF_ERROR(writer->AddBlockCrcs(e.ino, b.group, b.masked));
      }
    }
    return Status::OK();
  }

  // Each record's layout, read back from the finished record file.
  Status AddRecords(index::CompactIndexWriter* writer) const {
    for (uint32_t r = 0; r < num_records_; ++r) {
      auto file = draft_.OpenRecord(r);
      if (!file) return file.error();
      auto layout = index::ReadRecordLayout(**file);
      if (!layout) return layout.error();
      index::RecordInfo info;
      info.id = r;
      info.file_size = layout->file_size;
      info.data_offset = layout->data_offset;
      info.group_offset = layout->group_offset;
      info.num_images = static_cast<uint32_t>(layout->images.size());
      PCRFS_RETURN_IF_ERROR(writer->AddRecord(info));
    }
    return Status::OK();
  }

  // Measures a sample's fidelity on the finished store and adds it to the manifest, so
  // `pcr inspect` and `pcrfs -o msssim=X` can answer at once.
  Status AddQualitySample(index::Manifest* m) {
    auto store = draft_.OpenStore();
    if (!store) return store.error();
    uint32_t skipped = 0;
    auto quality = MeasureStoreQuality(
        **store, options_.store.quality_sample, options_.store.quality_seed, threads_, &skipped,
        [this](uint64_t done, uint64_t total) {
          ReportProgress(progress_, BuildProgress::Stage::kQuality, done, total, 0, 0);
        },
        &windows_by_ino_);
    if (!quality) return quality.error();
    m->quality.measured = (*quality)[0].n;
    m->quality.seed = options_.store.quality_seed;
    m->quality.levels = *quality;
    return Status::OK();
  }

  Status Write(index::Manifest* out) {
    // Index format 4 (index/compact_index.h): what a store ships.
    const std::string index_path = draft_.dir() + "/" + index::kCompactIndexFile;
    auto writer = std::make_unique<index::CompactIndexWriter>(index_path);

    index::Manifest& m = *out;
    m.generator = std::string("pcrfs ") + PCRFS_VERSION;
    m.options = options_.store;
    m.num_records = num_records_;

    PCRFS_RETURN_IF_ERROR(AddEntries(writer.get(), &m));
    if (windows_ != nullptr) QualityWindows().swap(*windows_);  // any of files not stored
    // All in the writer now: not held through Finish's check and the quality sample.
    placement_.Clear();
    tree_.ReleaseNodes();
    // Their many small blocks sit inside the heap, below what malloc returns by itself: give
    // those pages back now, or they stay resident under the check's decompressed entries and
    // the quality sample (1.28M files: ~100 MB).
    malloc_trim(0);
    PCRFS_RETURN_IF_ERROR(AddRecords(writer.get()));
    PCRFS_RETURN_IF_ERROR(
        writer->PutMeta("format_version", std::to_string(index::kStoreFormatVersion)));
    PCRFS_RETURN_IF_ERROR(writer->PutMeta("num_records", std::to_string(num_records_)));
    auto bytes = writer->Finish();
    if (!bytes) return bytes.error();
    writer.reset();
    PCRFS_RETURN_IF_ERROR(index::WriteCompactIndexFile(index_path, *bytes));

    const std::string manifest_path = draft_.dir() + "/" + index::kManifestFile;
    const std::string json = m.ToJson();
    PCRFS_RETURN_IF_ERROR(WriteFileAtomic(manifest_path, json.data(), json.size()));
    if (options_.store.quality_sample == 0 || m.num_jpeg == 0) {
      QualityWindows().swap(windows_by_ino_);
      return Status::OK();
    }

    PCRFS_RETURN_IF_ERROR(AddQualitySample(&m));
    const std::string with_quality = m.ToJson();
    return WriteFileAtomic(manifest_path, with_quality.data(), with_quality.size());
  }

 private:
  const StoreDraft& draft_;
  SourceTree& tree_;
  Placement& placement_;
  const uint32_t num_records_;
  const BuildOptions& options_;
  const unsigned threads_;
  const ProgressFn& progress_;
  QualityWindows* const windows_;  // by position in tree_.files (may be null)
  QualityWindows windows_by_ino_;  // the same, by inode, for the quality sample
};

}  // namespace

Status WriteIndexAndManifest(const StoreDraft& draft, SourceTree* tree, Placement* placement,
                             uint32_t num_records, const BuildOptions& options, unsigned threads,
                             const ProgressFn& progress, index::Manifest* m,
                             QualityWindows* windows) {
  return IndexStage(draft, tree, placement, num_records, options, threads, progress, windows)
      .Write(m);
}

}  // namespace pcrfs::tools
