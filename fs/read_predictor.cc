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
  uint64_t first_child = 0, num_children = 0, dir_parent = 0;
  if (!known) {  // the first read in this directory at this level: one index lookup
    auto dir = store_.index().Get(e.parent);
    if (!dir || !dir->is_dir() || dir->num_children == 0) return;
    first_child = dir->first_child;
    num_children = dir->num_children;
    dir_parent = dir->parent;
  }
  uint64_t plan_first = 0, plan_count = 0;
  uint64_t sibling_reads = 0;  // 1 or 2: this folder's first or second file, under a parent
  bool expand = false;
  {
    MutexLock l(&mu_);
    DirAccess& d = dirs_[key];
    if (d.num_children == 0) {
      d.first_child = first_child;
      d.num_children = num_children;
      d.parent = dir_parent;
    }
    dir_parent = d.parent;
    if (dir_parent != e.parent) {  // (the root is its own parent)
      auto p = parents_.find({dir_parent, level});
      expand = p != parents_.end() && p->second.expanding;
    }
    if (e.ino < d.first_child || e.ino - d.first_child >= d.num_children) return;
    const uint64_t child = e.ino - d.first_child;
    if (d.read.empty()) d.read.assign(d.num_children, false);
    if (d.read[child] && d.last_ino != e.ino) {  // not the same file's next request
      d.read.assign(d.num_children, false);
      d.planned_all = false;
      d.distinct = 0;
      d.readahead_end = 0;
      ++passes_;
    }
    d.read[child] = true;
    if (expand && !d.planned_all) {  // a sibling of dense folders: read it all from the start
      d.planned_all = true;
      plan_first = 0;
      plan_count = d.num_children;
    } else if (d.last_ino != e.ino && !d.planned_all) {  // else another request of the same file
      const bool next = d.last_ino + 1 == e.ino;
      d.last_ino = e.ino;
      ++d.distinct;
      if (dir_parent != e.parent && d.distinct <= 2) sibling_reads = d.distinct;
      const uint64_t dense =
          std::max<uint64_t>(2, (d.num_children * options_.dense_percent + 99) / 100);
      if (options_.dense_percent > 0 && d.distinct >= dense) {
        d.planned_all = true;
        plan_first = 0;
        plan_count = d.num_children;
      } else if (next && options_.readahead_files > 0 &&
                 e.ino + options_.readahead_files / 2 >= d.readahead_end) {
        plan_first = std::max(
            child + 1, d.readahead_end > d.first_child ? d.readahead_end - d.first_child : 0);
        const uint64_t end = std::min(d.num_children, child + 1 + options_.readahead_files);
        plan_count = end > plan_first ? end - plan_first : 0;
        d.readahead_end = d.first_child + end;
      }
    }
    d.last_ino = e.ino;
  }
  if (plan_count > 0) Plan(e.parent, plan_first, plan_count, level);
  if (sibling_reads > 0) expand = NoteSiblingRead(dir_parent, level, sibling_reads);
  if (expand) Expand(dir_parent, level);
}

bool ReadPredictor::NoteSiblingRead(uint64_t parent, int level, uint64_t reads) {
  const std::pair<uint64_t, int> key{parent, level};
  ParentAccess fresh;
  bool known = false;
  {
    MutexLock l(&mu_);
    known = parents_.count(key) > 0;
  }
  if (!known) {
    auto p = store_.index().Get(parent);
    if (!p || !p->is_dir()) return false;
    fresh.first_child = p->first_child;
    fresh.num_children = p->num_children;
    fresh.num_subdirs = p->num_subdirs;
  }
  MutexLock l(&mu_);
  ParentAccess& p = parents_.try_emplace(key, fresh).first->second;
  if (reads == 1) ++p.read_subdirs;
  if (reads == 2) ++p.reread_subdirs;
  const uint64_t enough =
      std::max<uint64_t>(3, (p.num_subdirs * options_.dense_percent + 99) / 100);
  if (options_.dense_percent > 0 && p.read_subdirs >= enough && p.reread_subdirs > 0) {
    p.expanding = true;
  }
  return p.expanding;
}

void ReadPredictor::Expand(uint64_t parent, int level) {
  uint64_t from = 0, count = 0;
  {
    MutexLock l(&mu_);
    auto it = parents_.find({parent, level});
    if (it == parents_.end() || !it->second.expanding) return;
    ParentAccess& p = it->second;
    if (p.cursor >= p.num_children) return;
    from = p.cursor;
    count = std::min(kExpandPerRead, p.num_children - p.cursor);
  }
  auto dir = store_.index().Get(parent);
  if (!dir) return;
  // The next children, up to kExpandFilesPerRead files in their subdirectories (at least one).
  std::vector<index::Entry> subdirs;
  uint64_t listed = 0, files = 0;
  Status s = store_.index().List(*dir, from, [&](const index::Entry& child) {
    if (listed >= count || (listed > 0 && files >= kExpandFilesPerRead)) return false;
    ++listed;
    if (child.is_dir() && child.num_children > 0) {
      subdirs.push_back(child);
      files += child.num_children;
    }
    return true;
  });
  if (!s.ok()) return;
  {
    MutexLock l(&mu_);
    auto it = parents_.find({parent, level});
    // Another reader expanded from the same place meanwhile: it plans these.
    if (it == parents_.end() || it->second.cursor != from) return;
    it->second.cursor = from + listed;
  }
  PlannedFiles plan(store_, pusher_);
  for (const index::Entry& sub : subdirs) {
    {
      MutexLock l(&mu_);
      DirAccess& d = dirs_[{sub.ino, level}];
      if (d.planned_all) continue;
      if (d.num_children == 0) {
        d.first_child = sub.first_child;
        d.num_children = sub.num_children;
        d.parent = parent;
      }
      d.planned_all = true;
    }
    PlanInto(sub.ino, 0, sub.num_children, level, &plan);
  }
  plan.Queue(scheduler_);
}

void ReadPredictor::PlanInto(uint64_t dir_ino, uint64_t first, uint64_t count, int level,
                             PlannedFiles* plan) {
  auto dir = store_.index().Get(dir_ino);
  if (!dir) return;
  count = std::min(count, kMaxPlanFiles);
  uint64_t listed = 0;
  Status s = store_.index().List(*dir, first, [&](const index::Entry& child) {
    if (listed++ >= count) return false;
    plan->Add(child, level);  // a folder adds nothing; a damaged file's demand read reports it
    return true;
  });
  // A damaged listing stops here; a demand read of those files will report the damage (the
  // files listed before it stay planned).
  (void)s;
}

}  // namespace pcrfs::fs
