// pcr upgrade STORE: writes STORE/index.pcri (index format 4) from STORE/index.lmdb, so an
// older store ships the compact, checked index (docs/format.md, "Index file"). The store is
// opened afterwards through the new index as a check; index.lmdb is left in place (readers
// prefer index.pcri; delete index.lmdb to stop shipping it).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "index/compact_index.h"
#include "index/store.h"
#include "mount-tools/commands.h"

namespace pcrfs::tools {

int RunUpgrade(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::printf(
        "usage: pcr upgrade STORE\n"
        "writes STORE/index.pcri (index format 4: compact, checked whole by pcrfs) from\n"
        "STORE/index.lmdb; exit 0 done (or already upgraded), 1 failed, 2 usage\n");
    return 0;
  }
  if (args.size() != 1) {
    std::fprintf(stderr, "usage: pcr upgrade STORE\n");
    return 2;
  }
  const std::string& dir = args[0];
  const std::string out = dir + "/" + index::kCompactIndexFile;
  struct stat st;
  if (::lstat(out.c_str(), &st) == 0) {
    std::printf("%s: already has %s\n", dir.c_str(), index::kCompactIndexFile);
    return 0;
  }
  // Store::Open converts index.lmdb through every check of format 4 and checks the manifest
  // against it.
  auto store = index::Store::Open(dir);
  if (!store) {
    std::fprintf(stderr, "pcr upgrade: %s\n", store.error().ToString().c_str());
    return 1;
  }
  auto source = index::LmdbSourceOf(dir + "/" + index::kIndexFile);
  if (!source) {
    std::fprintf(stderr, "pcr upgrade: %s\n", source.error().ToString().c_str());
    return 1;
  }
  auto bytes = index::ConvertLmdbIndex(dir + "/" + index::kIndexFile, *source);
  if (!bytes) {
    std::fprintf(stderr, "pcr upgrade: %s\n", bytes.error().ToString().c_str());
    return 1;
  }
  if (Status s = index::WriteCompactIndexFile(out, *bytes); !s.ok()) {
    std::fprintf(stderr, "pcr upgrade: %s\n", s.ToString().c_str());
    return 1;
  }
  auto again = index::Store::Open(dir);
  if (!again) {
    std::fprintf(stderr, "pcr upgrade: %s\n", again.error().ToString().c_str());
    return 1;
  }
  struct stat old_st;
  const uint64_t old_size =
      ::stat((dir + "/" + index::kIndexFile).c_str(), &old_st) == 0 ? old_st.st_size : 0;
  std::printf("%s: wrote %s (%zu bytes; %s: %llu bytes), %llu entries\n", dir.c_str(),
              index::kCompactIndexFile, bytes->size(), index::kIndexFile,
              static_cast<unsigned long long>(old_size),
              static_cast<unsigned long long>((*again)->index().NumEntries()));
  return 0;
}

}  // namespace pcrfs::tools
