// pcr: build, read and inspect pcrfs stores. Thin dispatch over mount-tools/commands.h.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mount-tools/commands.h"
#include "remote/url.h"

namespace {

constexpr char kUsage[] =
    "usage: pcr COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  build SRC STORE   turn an image folder into a pcrfs store\n"
    "  build SRC PART --shard I/N\n"
    "                    build shard I (0..N-1) of N into the part folder PART\n"
    "  merge PART... STORE\n"
    "                    join the N parts of a sharded build into STORE, byte-identical to the\n"
    "                    single build\n"
    "  cat STORE PATH    write one file of the store to stdout at a level (--scans K)\n"
    "  extract STORE DIR write the whole store at a level into a new folder (--scans K)\n"
    "  ladder STORE PATH -o OUT.png\n"
    "                    draw one image at levels 1..10 with bytes, PSNR and MS-SSIM\n"
    "  inspect STORE     describe a store: counts, options, bytes per level\n"
    "  verify STORE      check every checksum and entry (and, with --source, the pixels)\n"
    "  top MNT           what a mount serves per second: by level, origin rate, cache hits\n"
    "  upgrade STORE     write index.pcri (index format 4) from an older store's index.lmdb\n"
    "\n"
    "Run 'pcr COMMAND --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("pcr (pcrfs) %s\n", PCRFS_VERSION);
    return 0;
  }
  // The quality sample (pcr merge, pcr quality-sample) allocates and frees MiB-sized buffers per
  // image; glibc serves each with mmap and gives it back, zeroing fresh pages every time, until
  // its dynamic threshold has risen, which a build's transcoding does first and a merge never
  // does. Measured on 100 sampled images: 29 s user + 19 s sys without, 9.5 s + 0.2 s with
  // (docs/notebook/2026-11-23-builds-from-archives-remotes-shards.md). 32 MiB is the dynamic
  // threshold's own ceiling.
  // Not for a build: its transcoding raises the threshold before its sample anyway, and the
  // untrimmed heap would add ~28 MiB to its peak RSS (test_large_files bounds it).
  const std::string command = argv[1];
  if (command == "merge" || command == "quality-sample" || command == "inspect") {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  pcrfs::BlankUrlQueriesInArgv(argc, argv);  // a signed URL's query: not in /proc/PID/cmdline
  if (command == "build") return pcrfs::tools::RunBuild(args);
  if (command == "merge") return pcrfs::tools::RunMerge(args);
  if (command == "cat") return pcrfs::tools::RunCat(args);
  if (command == "extract") return pcrfs::tools::RunExtract(args);
  if (command == "ladder") return pcrfs::tools::RunLadder(args);
  if (command == "quality-pair") return pcrfs::tools::RunQualityPair(args);
  if (command == "quality-sample") return pcrfs::tools::RunQualitySample(args);
  if (command == "inspect") return pcrfs::tools::RunInspect(args);
  if (command == "verify") return pcrfs::tools::RunVerify(args);
  if (command == "top") return pcrfs::tools::RunTop(args);
  if (command == "upgrade") return pcrfs::tools::RunUpgrade(args);
  if (command == "lmdb-index") return pcrfs::tools::RunLmdbIndexForTests(args);
  std::fprintf(stderr, "pcr: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
