// Which bytes of a cached extent fetched ahead have not been read yet, kept by 64-byte
// granules in 8 bytes per extent (RangeCache's disk tier: remote/range_cache.h).
//
// Why granules: a disk tier holds hundreds of thousands of extents of group-major bytes (1.28M
// files at level 10: 679,411 extents of ~4.7 KB), and readers take them in pieces of a few
// hundred bytes far apart, so exact read intervals took a vector per extent that grew piece by
// piece (24 MiB live mid-epoch, and the heap's fragments after). A granule touched by a read
// counts read: what is unread is overcounted as read by less than a granule at each end of a
// read (bytes that the neighbouring pieces' reads take anyway). The counts stay consistent: the
// granules partition the extent, so the bytes MarkRead returns add up to its length at most.
//
// An extent of up to 63 granules (4,032 bytes) keeps its bits inline; a longer one an array of
// ceil(granules / 64) words (a 128 KiB extent: 256 bytes), freed when all are read.
// Not thread-safe (RangeCache holds its lock).
#pragma once

#include <cstdint>
#include <functional>

namespace pcrfs {

class UnreadGranules {
 public:
  static constexpr uint64_t kGranule = 64;

  UnreadGranules() = default;
  ~UnreadGranules() { Reset(); }
  UnreadGranules(UnreadGranules&& o) noexcept : v_(o.v_) { o.v_ = 0; }
  UnreadGranules& operator=(UnreadGranules&& o) noexcept;
  UnreadGranules(const UnreadGranules&) = delete;
  UnreadGranules& operator=(const UnreadGranules&) = delete;

  // Every byte of an extent of `length` bytes (> 0) unread.
  void SetAll(uint64_t length);
  // Marks the granules that [begin, end) touches read (offsets from the extent's start, clipped
  // at `length`); returns the bytes they held that were unread.
  uint64_t MarkRead(uint64_t length, uint64_t begin, uint64_t end);
  // Unread bytes of an extent of `length` bytes.
  uint64_t Count(uint64_t length) const;
  // Nothing unread (and nothing allocated).
  bool empty() const { return v_ == 0; }
  // Calls fn(begin, end) for each maximal run of unread bytes, in order.
  void ForEachRun(uint64_t length, const std::function<void(uint64_t, uint64_t)>& fn) const;
  void Reset();

 private:
  static constexpr uint64_t kInline = uint64_t{1} << 63;
  static constexpr uint64_t kMaxInline = 63;  // granules held in the inline word
  static uint64_t Granules(uint64_t length) { return (length + kGranule - 1) / kGranule; }
  bool is_inline() const { return (v_ & kInline) != 0; }
  uint64_t* words() const { return reinterpret_cast<uint64_t*>(v_); }
  bool Test(uint64_t g) const;

  // 0: nothing unread; the top bit set: the granules' bits inline (bit g: granule g unread);
  // else the address of an array of words (userspace addresses have the top bit clear).
  uint64_t v_ = 0;
};

}  // namespace pcrfs
