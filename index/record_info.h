// What the index knows of one record file (its size and where each group's region starts), the
// record's file name in a store, and the bytes of it that a level reads.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/levels.h"

namespace pcrfs::index {

struct RecordInfo {
  uint32_t id = 0;
  uint64_t file_size = 0;
  uint64_t data_offset = 0;
  std::array<uint64_t, kNumGroups + 1> group_offset{};
  uint32_t num_images = 0;
};

// Record file name inside the store, relative: "records/00000042.pcr".
std::string RecordFileName(uint32_t id);

// The bytes of record `r` that reading level k (1..10; clamped) of all its files reads: the
// prefix [0, group_offset[k]) (header, tables and group regions 1..k: a format 4 index holds no
// piece CRCs, so the tables are read too) and the 16-byte footer, which opening the record reads.
// What a remote store's range cache holds of the record once level k of every file in it was
// read; level 10 is the whole file.
uint64_t RecordBytesAtLevel(const RecordInfo& r, int k);

}  // namespace pcrfs::index
