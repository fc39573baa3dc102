#include "fs/speculation_queue.h"

#include <algorithm>
#include <iterator>

namespace pcrfs::fs {

void SpeculationQueue::Insert(RangeSet* set, uint64_t begin, uint64_t end,
                              std::vector<Range>* added) {
  if (begin >= end) return;
  // The first range that ends at or after begin (ranges are disjoint and not adjacent).
  auto it = set->upper_bound(begin);
  if (it != set->begin() && std::prev(it)->second >= begin) --it;
  uint64_t new_begin = begin, new_end = end, pos = begin;
  while (it != set->end() && it->first <= end) {
    if (added != nullptr && it->first > pos) added->push_back({pos, it->first - pos});
    pos = std::max(pos, it->second);
    new_begin = std::min(new_begin, it->first);
    new_end = std::max(new_end, it->second);
    it = set->erase(it);
  }
  if (added != nullptr && pos < end) added->push_back({pos, end - pos});
  (*set)[new_begin] = new_end;
}

std::vector<SpeculationQueue::Range> SpeculationQueue::Add(
    const std::shared_ptr<const SpeculationSource>& file, const std::vector<Range>& ranges,
    uint64_t size) {
  MaybeForget();
  std::vector<Range> added, fresh;
  RangeSet& seen = seen_[file.get()];
  auto before = seen_before_.find(file.get());
  for (const Range& r : ranges) {
    if (r.offset >= size) continue;
    const uint64_t end = r.offset + std::min(r.length, size - r.offset);
    fresh.clear();
    if (before == seen_before_.end()) {
      fresh.push_back({r.offset, end - r.offset});
    } else {
      Subtract(before->second, r.offset, end, &fresh);
    }
    for (const Range& f : fresh) Remember(&seen, f.offset, f.offset + f.length, &added);
  }
  for (const Range& r : added) Enqueue(file, r.offset, r.offset + r.length, false);
  return added;
}

void SpeculationQueue::Subtract(const RangeSet& set, uint64_t begin, uint64_t end,
                                std::vector<Range>* out) {
  auto it = set.upper_bound(begin);
  if (it != set.begin() && std::prev(it)->second > begin) --it;
  uint64_t pos = begin;
  for (; it != set.end() && it->first < end; ++it) {
    if (it->first > pos) out->push_back({pos, it->first - pos});
    pos = std::max(pos, it->second);
  }
  if (pos < end) out->push_back({pos, end - pos});
}

void SpeculationQueue::Remember(RangeSet* set, uint64_t begin, uint64_t end,
                                std::vector<Range>* added) {
  const size_t before = set->size();
  Insert(set, begin, end, added);
  ranges_ = ranges_ + set->size() - before;  // a range may merge others: fewer
}

void SpeculationQueue::MaybeForget() {
  // Not ranges_ - ranges_at_forget_: merges can take ranges_ below where the generation began.
  if (taken_since_forget_ <= forget_after_ && ranges_ <= ranges_at_forget_ + forget_ranges_) {
    return;
  }
  seen_before_ = std::move(seen_);
  seen_.clear();
  demanded_before_ = std::move(demanded_);
  demanded_.clear();
  ranges_ = 0;
  for (const Pending& p : queue_) Remember(&seen_[p.file.get()], p.offset, p.end, nullptr);
  ranges_at_forget_ = ranges_;
  taken_since_forget_ = 0;
  ++forgotten_;
}

void SpeculationQueue::Clear() {
  queue_.clear();
  queued_.clear();
  queued_bytes_ = 0;
}

void SpeculationQueue::Unindex(const Pending& p) {
  auto f = queued_.find(p.file.get());
  if (f == queued_.end()) return;
  f->second.erase(p.offset);
  if (f->second.empty()) queued_.erase(f);
}

void SpeculationQueue::Enqueue(const std::shared_ptr<const SpeculationSource>& file,
                               uint64_t offset, uint64_t end, bool front) {
  if (offset >= end) return;
  queued_bytes_ += end - offset;
  QueueIndex& index = queued_[file.get()];
  auto next = index.lower_bound(offset);  // the first range at or after offset
  const bool joins_next = next != index.end() && next->first == end;
  if (next != index.begin()) {
    auto prev = std::prev(next);
    if (prev->second->end == offset) {  // extends the range before it
      prev->second->end = end;
      if (joins_next) {  // and closes the gap to the one after it
        prev->second->end = next->second->end;
        queue_.erase(next->second);
        index.erase(next);
      }
      return;
    }
  }
  if (joins_next) {  // starts the range after it earlier
    auto q = next->second;
    index.erase(next);
    q->offset = offset;
    index.emplace(offset, q);
    return;
  }
  auto q = front ? queue_.insert(queue_.begin(), Pending{file, offset, end})
                 : queue_.insert(queue_.end(), Pending{file, offset, end});
  index.emplace(offset, q);
}

SpeculationQueue::Pending SpeculationQueue::TakeFront(uint64_t n) {
  Pending& p = queue_.front();
  Pending taken{p.file, p.offset, p.offset + std::min(n, p.end - p.offset)};
  Unindex(p);
  p.offset = taken.end;
  if (p.offset >= p.end) {
    queue_.pop_front();
  } else {
    queued_[p.file.get()].emplace(p.offset, queue_.begin());
  }
  queued_bytes_ -= taken.end - taken.offset;
  taken_since_forget_ += taken.end - taken.offset;
  return taken;
}

SpeculationQueue::Range SpeculationQueue::Promote(const SpeculationSource* file, const Range& r,
                                                  uint64_t chunk) {
  return TakeOut(file, r, chunk, /*promoted=*/true);
}

void SpeculationQueue::NoteDemanded(const SpeculationSource* file, const Range& r) {
  // Forgotten as plans are (a mount that plans nothing, -o prefetch=0 or hints alone, would
  // otherwise keep every piece it ever read).
  MaybeForget();
  // Seen, too: a plan that comes after the read (a reader walking a folder plans the files
  // after its own, which other readers may have read already) does not queue it again.
  Remember(&seen_[file], r.offset, r.offset + r.length, nullptr);
  Remember(&demanded_[file], r.offset, r.offset + r.length, nullptr);
}

void SpeculationQueue::PushFront(const std::shared_ptr<const SpeculationSource>& file,
                                 uint64_t offset, uint64_t end) {
  Remember(&seen_[file.get()], offset, end, nullptr);  // seen, even if forgotten since taken
  taken_since_forget_ -= std::min(taken_since_forget_, end - offset);
  std::vector<Range> parts{{offset, end - offset}}, rest;
  for (const auto* demanded : {&demanded_, &demanded_before_}) {
    auto d = demanded->find(file.get());
    if (d == demanded->end()) continue;
    rest.clear();
    for (const Range& p : parts) Subtract(d->second, p.offset, p.offset + p.length, &rest);
    parts.swap(rest);
  }
  // Back to front, so that the parts keep their order at the front.
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    Enqueue(file, p->offset, p->offset + p->length, /*front=*/true);
  }
}

void SpeculationQueue::Discard(const SpeculationSource* file, const Range& r) {
  const uint64_t end = r.offset + r.length;
  NoteDemanded(file, r);
  for (;;) {
    // The first queued range overlapping [r.offset, end): a speculative read may have cut a
    // piece, so a queued range can start inside r, not only hold its start.
    auto f = queued_.find(file);
    if (f == queued_.end()) return;
    QueueIndex& index = f->second;
    auto found = index.upper_bound(r.offset);
    if (found != index.begin() && std::prev(found)->second->end > r.offset) --found;
    if (found == index.end() || found->first >= end) return;
    const uint64_t from = std::max(r.offset, found->first);
    TakeOut(file, {from, std::min(end, found->second->end) - from}, 0, /*promoted=*/false);
  }
}

SpeculationQueue::Range SpeculationQueue::TakeOut(const SpeculationSource* file, const Range& r,
                                                  uint64_t chunk, bool promoted) {
  auto f = queued_.find(file);
  if (f == queued_.end()) return {r.offset, 0};
  QueueIndex& index = f->second;
  auto found = index.upper_bound(r.offset);  // the queued range holding r.offset, if any
  if (found == index.begin()) return {r.offset, 0};
  --found;
  const Queue::iterator it = found->second;
  if (r.offset >= it->end) return {r.offset, 0};
  // The window [r.offset, end): at least the piece, at most one chunk past its start, within
  // what is queued. What is left of the queued range on either side stays queued, in place.
  const uint64_t end = std::min(it->end, r.offset + std::max(r.length, chunk));
  queued_bytes_ -= end - r.offset;
  taken_since_forget_ += end - r.offset;
  if (promoted) {
    ++promoted_reads_;
    promoted_bytes_ += end - r.offset;
  }
  const Pending right{it->file, end, it->end};
  if (r.offset > it->offset) {
    it->end = r.offset;
    if (right.offset < right.end) index.emplace(right.offset, queue_.insert(std::next(it), right));
    return {r.offset, end - r.offset};
  }
  index.erase(found);
  if (right.offset < right.end) {
    *it = right;
    index.emplace(right.offset, it);
  } else {
    queue_.erase(it);
    if (index.empty()) queued_.erase(f);
  }
  return {r.offset, end - r.offset};
}

}  // namespace pcrfs::fs
