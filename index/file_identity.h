// The identity of one version of a file (device, inode, size, times), by which an index checked
// moments ago is known again without reading it whole.
#pragma once

#include <cstdint>

namespace pcrfs::index {

// What identifies one version of a file: a file rewritten, replaced or touched in any way gets
// a new ctime (or a new inode).
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

}  // namespace pcrfs::index
