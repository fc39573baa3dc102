// WalkLevel: the bytes of a LevelPlan, read a checksum block at a time and handed over in file
// order. The one block walk of the tree: the FUSE read path (Filesystem::ReadStored, blocks
// from its piece caches) and Store::ReadFileTo (pcr cat, pcr extract, the verifier, blocks
// read and checked by Store::ReadBlock) both call it, so which blocks a range needs and which
// part of each block lands where is written once. (LevelPlan says which bytes; this says how
// they are read when they are checked in blocks.)
//
// For each span of the plan, in order, and each checksum block b of its piece that holds part
// of the span (span.first_block() <= b < span.end_block()):
//   read_block(span, b) -> Result<std::span<const uint8_t>>
//       the whole block: ChecksumBlockLength(span.piece.length, b) bytes, checked as the
//       caller checks blocks; valid until the next call of read_block. An error stops the walk
//       and is returned as it is (the caller tells damage from the rest).
//   sink(file_offset, bytes) -> Status
//       the part of the block inside the span, landing at file_offset in the level-k file.
// then, if the range holds any of it, sink(plan.tail_offset(), plan.tail()). Every byte of
// [plan.offset(), plan.end()) reaches the sink exactly once, in ascending file offsets, so a
// sink that writes to dst + (file_offset - plan.offset()) fills exactly plan.length() bytes. A
// sink's error stops the walk and is returned.
//
// A block shorter than ChecksumBlockLength (only a reader's bug could make one) is Corruption,
// never a short or misplaced copy.
//
// Example: a JPEG whose piece 1 is 1.5 checksum blocks, level 1, the whole file: block 0 and
// block 1 of group 1 are read, the sink gets [0, 1 MiB) then [1 MiB, 1.5 MiB), then FF D9.
//
// A template: the read path calls it per FUSE read, so nothing here allocates or goes through
// a std::function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "index/level_plan.h"
#include "index/record_format.h"

namespace pcrfs::index {

template <typename ReadBlock, typename Sink>
Status WalkLevel(const LevelPlan& plan, ReadBlock&& read_block, Sink&& sink) {
  for (const LevelSpan& s : plan.spans()) {
    for (uint64_t b = s.first_block(); b < s.end_block(); ++b) {
      Result<std::span<const uint8_t>> block = read_block(s, b);
      if (!block) return block.error();
      const uint64_t block_begin = b * kChecksumBlockSize;
      if (block->size() != ChecksumBlockLength(s.piece.length, b)) {
        return Status::Corruption("block " + std::to_string(b) + " of piece " +
                                  std::to_string(s.group) + ": " + std::to_string(block->size()) +
                                  " bytes, not " +
                                  std::to_string(ChecksumBlockLength(s.piece.length, b)));
      }
      const uint64_t from = std::max(s.begin, block_begin);
      const uint64_t to = std::min(s.end, block_begin + block->size());
      const std::span<const uint8_t> part =
          block->subspan(static_cast<size_t>(from - block_begin), static_cast<size_t>(to - from));
      if (Status st = sink(s.file_offset + (from - s.begin), part); !st.ok()) return st;
    }
  }
  if (!plan.tail().empty()) return sink(plan.tail_offset(), plan.tail());
  return Status::OK();
}

}  // namespace pcrfs::index
