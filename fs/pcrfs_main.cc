// pcrfs: mounts a pcrfs store as a read-only folder of JPEG files (fs/daemon.h).
#include <malloc.h>

#include <cstring>

#include "fs/daemon.h"
#include "fs/watchdog.h"

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
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  return pcrfs::fs::RunDaemon(argc, argv);
}
