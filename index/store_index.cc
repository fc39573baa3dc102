#include "index/store_index.h"

#include <algorithm>
#include <cstdio>

namespace pcrfs::index {

std::string RecordFileName(uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "records/%08u.pcr", id);
  return buf;
}

uint64_t RecordBytesAtLevel(const RecordInfo& r, int k) {
  return r.group_offset[static_cast<size_t>(std::clamp(k, 1, kNumGroups))] + kRecordFooterSize;
}

Result<uint64_t> StoreBytesAtLevel(const IndexReader& index, int k) {
  uint64_t bytes = 0;
  for (uint64_t id = 0; id < index.NumRecords(); ++id) {
    auto info = index.GetRecord(static_cast<uint32_t>(id));
    if (!info) return Err(info.error());
    bytes += RecordBytesAtLevel(*info, k);
  }
  return bytes;
}

}  // namespace pcrfs::index
