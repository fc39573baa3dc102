// pcrfs: mounts a pcrfs store as a read-only folder of JPEG files (fs/daemon.h).
#include <malloc.h>
#include <sys/resource.h>

#include <cstring>

#include "fs/daemon.h"
#include "fs/watchdog.h"
#include "index/record_format.h"

int main(int argc, char** argv) {
  // The daemon's watchdog (fs/watchdog.h) is this program too.
  if (argc > 1 && std::strcmp(argv[1], pcrfs::fs::kWatchdogFlag) == 0) {
    return pcrfs::fs::WatchdogMain(argc, argv);
  }
  // Checksum blocks are 1 MiB buffers allocated and freed all the time (fs/piece_cache.h). By
  // default glibc gives each its own mmap, or trims it off the heap when freed, so every block
  // read first faulted in a megabyte of fresh zeroed pages: 2-3x the cost of the read itself.
  // Served from the heap and kept there, they reuse the same pages; the piece cache's budget
  // still bounds how many are alive.
  //
  // Just above a block, not more: each of libfuse's worker threads mallocs a receive buffer of
  // 1 MiB + 4 KiB (FUSE_MAX_MAX_PAGES pages and a header) into which the kernel writes only a
  // request (~100 bytes for a READ). From the heap it took pages other allocations had
  // touched, which stayed resident; mmapped, a buffer is resident only where written (23
  // workers held 24 MiB; level 10 of 1.28M files kept 10 MiB less resident).
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(pcrfs::index::kChecksumBlockSize + 1024));
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  // One arena, not glibc's 8 per core: the daemon's 30-odd threads (FUSE, speculation, HTTP,
  // pusher) allocate fetch buffers and blocks that another thread frees, and each arena kept
  // its own free fragments resident. Level 10 of 100k ImageNet-sized crops, RSS beyond the
  // range and piece caches: 129 -> 76 MiB with two (docs/notebook/
  // 2026-11-28-fetch-windows-and-memory.md); level 10 of 1.28M files, 11 s after the epoch,
  // 153 -> 147 MiB with one, files/s and daemon CPU within the run's noise
  // (docs/notebook/2026-11-29-memory.md). Small allocations go through each thread's tcache
  // without the arena's lock.
  mallopt(M_ARENA_MAX, 1);
  // A local store keeps each record file open once read (index/store.h), and a store of a
  // million files has over a thousand records: past the usual soft limit of 1024 descriptors
  // its reads would fail. Raise the soft limit to the hard one (as systemd advises for
  // daemons that need many; the hard limit stays what the administrator set).
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  return pcrfs::fs::RunDaemon(argc, argv);
}
