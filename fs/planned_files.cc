#include "fs/planned_files.h"

#include <algorithm>
#include <span>

#include "fs/inode.h"
#include "index/level_plan.h"

namespace pcrfs::fs {

bool PlannedFiles::Add(index::Entry e, int level) {
  if (e.is_dir()) return false;
  if (!store_.ResolvePieces(&e, level).ok()) return false;
  // The level-k bytes, exactly as Filesystem::ReadUncounted reads them (index/level_plan.h).
  const index::LevelPlan plan(e.kind, e.pieces, level);
  auto& regions = pieces_[e.record];
  const auto groups = static_cast<size_t>(plan.pieces_used());
  if (regions.size() < groups) regions.resize(groups);
  PushFile* pf = nullptr;
  if (pusher_ != nullptr && pusher_->enabled() && plan.file_size() <= pusher_->max_file_bytes()) {
    const std::span<const uint8_t> tail = plan.tail();
    // Counted as a READ of the whole file counts it (Filesystem::Read: the source file's
    // bytes for a JPEG, the same bytes for a file kept byte for byte).
    const uint64_t source =
        e.kind == index::EntryKind::kPassthrough ? plan.file_size() : e.source_size;
    pf = &push_files_[e.record].emplace_back(
        PushFile{ToFuseIno(e.ino, level),
                 {},
                 {reinterpret_cast<const char*>(tail.data()), tail.size()},
                 {level, source}});
  }
  for (const index::LevelSpan& span : plan.spans()) {  // whole pieces: the plan is the file
    const index::PieceRef& p = span.piece;
    regions[static_cast<size_t>(span.group - 1)].push_back({p.offset, p.length});
    bytes_ += p.length;
    if (pf != nullptr) pf->pieces.push_back({p.offset, p.length, p.masked_crc});
  }
  return true;
}

void PlannedFiles::Queue(RecordScheduler& scheduler) {
  for (auto& [record, regions] : pieces_) {
    auto file = store_.OpenRecord(record, nullptr);
    // A record without speculation hooks keeps nothing read ahead: nothing to plan.
    if (!file || file->speculation() == nullptr) continue;
    for (const PushFile& pf : push_files_[record]) {
      pusher_->Expect(file->speculation(), pf.ino, pf.pieces, pf.tail, pf.counted);
    }
    std::vector<RecordScheduler::Range> ranges;
    for (auto& region : regions) {
      std::sort(region.begin(), region.end(),
                [](const auto& a, const auto& b) { return a.offset < b.offset; });
      for (const auto& p : region) {
        if (!ranges.empty() && ranges.back().offset + ranges.back().length == p.offset) {
          ranges.back().length += p.length;
        } else {
          ranges.push_back(p);
        }
      }
    }
    scheduler.Speculate(*file, ranges);
  }
  pieces_.clear();
  push_files_.clear();
  bytes_ = 0;
}

}  // namespace pcrfs::fs
