// FUSE inode numbers. Every store entry appears once per level, each with its own number,
// because the kernel caches pages per inode and the same file has other bytes at another level.
//
//   fuse ino = store ino << 4 | level     (level 1..10)
//   fuse ino 1 (FUSE_ROOT_ID) = the mount root: the ladder of scanK folders, or, with
//   -o scans=K, the store root at level K.
#pragma once

#include <cstdint>

namespace pcrfs::fs {

inline constexpr uint64_t kFuseRootIno = 1;
inline constexpr int kLevelBits = 4;

struct NodeId {
  uint64_t store_ino = 0;
  int level = 0;  // 1..10; 0 only for the ladder root
};

inline uint64_t ToFuseIno(uint64_t store_ino, int level) {
  return (store_ino << kLevelBits) | static_cast<uint64_t>(level);
}

inline NodeId FromFuseIno(uint64_t fuse_ino) {
  return NodeId{fuse_ino >> kLevelBits, static_cast<int>(fuse_ino & ((1u << kLevelBits) - 1))};
}

}  // namespace pcrfs::fs
