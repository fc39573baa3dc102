// pcr upgrade STORE: writes STORE/index.pcri (index format 4) from STORE/index.lmdb, so an
// older store ships the compact, checked index (docs/format.md, "Index file"). The store is
// opened afterwards through the new index as a check; index.lmdb is left in place (readers
// prefer index.pcri; delete index.lmdb to stop shipping it).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/lmdb/index_writer.h"
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

namespace pcrfs::tools {

// pcr lmdb-index STORE (internal, for tests of older stores): rewrites STORE as a store of
// format 1, as pcr built it before index format 4: index.lmdb (entries with every piece's
// offset and CRC, from the records' tables), manifest format_version 1, no index.pcri.
int RunLmdbIndexForTests(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::fprintf(stderr, "usage: pcr lmdb-index STORE\n");
    return 2;
  }
  const std::string& dir = args[0];
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "pcr lmdb-index: %s\n", s.ToString().c_str());
    return 1;
  };
  auto store = index::Store::Open(dir);
  if (!store) return fail(store.error());
  const index::IndexReader& idx = (*store)->index();
  auto w = index::IndexWriter::Create(dir + "/" + index::kIndexFile);
  if (!w) return fail(w.error());
  for (uint64_t ino = 1; ino <= idx.NumEntries(); ++ino) {
    auto e = idx.Get(ino);
    if (!e) return fail(e.error());
    if (Status s = (*store)->ResolvePieces(&*e); !s.ok()) return fail(s);
    if (Status s = (*w)->AddEntry(*e); !s.ok()) return fail(s);
    if (e->is_dir()) continue;
    for (int g = 1; g <= index::kNumGroups; ++g) {
      const uint64_t length = e->pieces[static_cast<size_t>(g - 1)].length;
      if (!index::HasBlockCrcs(length)) continue;
      std::vector<uint32_t> crcs;
      for (uint64_t b = 0; b < index::NumChecksumBlocks(length); ++b) {
        auto crc = (*store)->BlockCrc(*e, g, b);
        if (!crc) return fail(crc.error());
        crcs.push_back(*crc);
      }
      if (Status s = (*w)->AddBlockCrcs(ino, g, crcs); !s.ok()) return fail(s);
    }
  }
  for (uint32_t r = 0; r < idx.NumRecords(); ++r) {
    auto info = idx.GetRecord(r);
    if (!info) return fail(info.error());
    if (Status s = (*w)->AddRecord(*info); !s.ok()) return fail(s);
  }
  if (Status s = (*w)->PutMeta("format_version", "1"); !s.ok()) return fail(s);
  if (Status s = (*w)->PutMeta("num_records", std::to_string(idx.NumRecords())); !s.ok()) {
    return fail(s);
  }
  if (Status s = (*w)->Finish(); !s.ok()) return fail(s);
  index::Manifest m = (*store)->manifest();
  m.format_version = 1;
  const std::string json = m.ToJson();
  if (Status s = WriteFileAtomic(dir + "/" + index::kManifestFile, json.data(), json.size());
      !s.ok()) {
    return fail(s);
  }
  if (::unlink((dir + "/" + index::kCompactIndexFile).c_str()) != 0) {
    return fail(Status::FromErrno(dir + "/" + index::kCompactIndexFile, errno));
  }
  return 0;
}

}  // namespace pcrfs::tools
