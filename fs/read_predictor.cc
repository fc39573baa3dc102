#include "fs/read_predictor.h"

#include <algorithm>
#include <vector>

namespace pcrfs::fs {

void ReadPredictor::OnRead(const index::Entry& e, int level) {
  if (!enabled()) return;
  const std::pair<uint64_t, int> key{e.parent, level};
  bool known = false;
  {
    MutexLock l(&mu_);
    auto it = dirs_.find(key);
    known = it != dirs_.end() && it->second.num_children > 0;
  }
  uint64_t first_child = 0, num_children = 0;
  if (!known) {  // the first read in this directory at this level: one index lookup
    auto dir = store_.index().Get(e.parent);
    if (!dir || !dir->is_dir() || dir->num_children == 0) return;
    first_child = dir->first_child;
    num_children = dir->num_children;
  }
  uint64_t plan_first = 0, plan_count = 0;
  {
    MutexLock l(&mu_);
    DirAccess& d = dirs_[key];
    if (d.num_children == 0) {
      d.first_child = first_child;
      d.num_children = num_children;
    }
    if (d.last_ino == e.ino || d.planned_all) return;  // another request of the same file
    if (e.ino < d.first_child || e.ino - d.first_child >= d.num_children) return;
    const bool next = d.last_ino + 1 == e.ino;
    d.last_ino = e.ino;
    ++d.distinct;
    const uint64_t dense =
        std::max<uint64_t>(2, (d.num_children * options_.dense_percent + 99) / 100);
    const uint64_t child = e.ino - d.first_child;
    if (options_.dense_percent > 0 && d.distinct >= dense) {
      d.planned_all = true;
      plan_first = 0;
      plan_count = d.num_children;
    } else if (next && options_.readahead_files > 0 &&
               e.ino + options_.readahead_files / 2 >= d.readahead_end) {
      plan_first =
          std::max(child + 1,
                   d.readahead_end > d.first_child ? d.readahead_end - d.first_child : uint64_t{0});
      const uint64_t end = std::min(d.num_children, child + 1 + options_.readahead_files);
      plan_count = end > plan_first ? end - plan_first : 0;
      d.readahead_end = d.first_child + end;
    }
  }
  if (plan_count > 0) Plan(e.parent, plan_first, plan_count, level);
}

void ReadPredictor::Plan(uint64_t dir_ino, uint64_t first, uint64_t count, int level) {
  auto dir = store_.index().Get(dir_ino);
  if (!dir) return;
  count = std::min(count, kMaxPlanFiles);
  // record -> group -> the pieces of that group region, in slot order.
  std::map<uint32_t, std::vector<std::vector<RecordScheduler::Range>>> pieces;
  uint64_t listed = 0;
  Status s = store_.index().List(*dir, first, [&](const index::Entry& child) {
    if (listed++ >= count) return false;
    if (child.is_dir()) return true;
    const int groups = child.kind == index::EntryKind::kJpeg ? level : 1;
    auto& regions = pieces[child.record];
    if (regions.size() < static_cast<size_t>(groups)) regions.resize(static_cast<size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      const index::PieceRef& p = child.pieces[static_cast<size_t>(g)];
      if (p.length > 0) regions[static_cast<size_t>(g)].push_back({p.offset, p.length});
    }
    return true;
  });
  if (!s.ok()) return;  // a demand read of those files will report the damage
  for (auto& [record, regions] : pieces) {
    auto file = store_.OpenRecord(record, nullptr);
    if (!file) continue;
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
    scheduler_.Speculate(*file, ranges);
  }
}

}  // namespace pcrfs::fs
