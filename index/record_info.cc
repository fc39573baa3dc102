#include "index/record_info.h"

#include <algorithm>
#include <cstdio>

#include "index/record_format.h"

namespace pcrfs::index {

std::string RecordFileName(uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "records/%08u.pcr", id);
  return buf;
}

uint64_t RecordBytesAtLevel(const RecordInfo& r, int k) {
  return r.group_offset[static_cast<size_t>(std::clamp(k, 1, kNumGroups))] + kRecordFooterSize;
}

}  // namespace pcrfs::index
