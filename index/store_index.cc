#include "index/store_index.h"

#include <cstdio>

namespace pcrfs::index {

std::string RecordFileName(uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "records/%08u.pcr", id);
  return buf;
}

}  // namespace pcrfs::index
