// make_fuzz_seeds OUTDIR: writes the seed corpora of the fuzz targets, made by the code under
// test rather than committed as binaries:
//   OUTDIR/codec/     small JPEGs of every variety of tests/testdata/jpeg_factory.h, hostile
//                     variants (truncated, trailing data, corrupt, huge declared size) and our
//                     own progressive output
//   OUTDIR/record/    records written by RecordWriter from transcoded JPEGs and passthrough files
//   OUTDIR/entry/     8-byte inode + EncodeEntry() of a root, a folder, a JPEG and a passthrough
//   OUTDIR/compact_index/  a selector byte (odd: reseal) + index.pcri files of a small tree,
//                     compressed and not
//   OUTDIR/manifest/  Manifest::ToJson() with and without a quality section
//   OUTDIR/lmdb_pages/  index.lmdb files written by IndexWriter (formats 3 and 2, one with values
//                     in overflow pages), with and without their trailer
//   OUTDIR/aws_credentials/  a selector byte + an STS answer (credentials, error), a
//                     credential_process JSON, an IMDS JSON, expiration times
// Exit codes: 0 done, 1 something failed, 2 usage.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "codec/transcoder.h"
#include "common/coding.h"
#include "common/file_util.h"
#include "index/compact_index.h"
#include "index/entry.h"
#include "index/index_reader.h"
#include "index/lmdb/index_trailer.h"
#include "index/lmdb/index_writer.h"
#include "index/manifest.h"
#include "index/record_writer.h"
#include "tests/testdata/jpeg_factory.h"

namespace {

using namespace pcrfs;
using Bytes = std::vector<uint8_t>;

bool Fail(const std::string& what) {
  std::fprintf(stderr, "make_fuzz_seeds: %s\n", what.c_str());
  return false;
}

bool MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Fail("mkdir " + path + ": " + std::strerror(errno));
  }
  return true;
}

bool Write(const std::string& path, const void* data, size_t n) {
  Status s = WriteFileAtomic(path, static_cast<const uint8_t*>(data), n);
  return s.ok() || Fail(s.ToString());
}
bool Write(const std::string& path, const Bytes& b) { return Write(path, b.data(), b.size()); }
bool Write(const std::string& path, const std::string& s) {
  return Write(path, s.data(), s.size());
}

// Sets the height and width of the first SOFn of a JPEG (a huge declared size, no more data).
void SetDeclaredSize(Bytes* jpeg, uint16_t width, uint16_t height) {
  for (size_t i = 2; i + 8 < jpeg->size(); ++i) {
    const uint8_t m = (*jpeg)[i + 1];
    if ((*jpeg)[i] == 0xFF && m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      (*jpeg)[i + 5] = static_cast<uint8_t>(height >> 8);
      (*jpeg)[i + 6] = static_cast<uint8_t>(height);
      (*jpeg)[i + 7] = static_cast<uint8_t>(width >> 8);
      (*jpeg)[i + 8] = static_cast<uint8_t>(width);
      return;
    }
  }
}

struct SeedJpeg {
  std::string name;
  Bytes bytes;
};

// Every factory variety, at most 64 x 64 pixels so that the fuzzer runs fast.
bool MakeJpegs(std::vector<SeedJpeg>* out) {
  for (auto named : testdata::StandardTestJpegs()) {
    named.spec.width = std::min(named.spec.width, 64);
    named.spec.height = std::min(named.spec.height, 64);
    auto jpeg = testdata::MakeTestJpeg(named.spec);
    if (!jpeg) return Fail(named.name + ": " + jpeg.error().ToString());
    out->push_back({named.name, std::move(*jpeg)});
  }
  return true;
}

bool WriteCodecSeeds(const std::string& dir, const std::vector<SeedJpeg>& jpegs) {
  if (!MakeDir(dir)) return false;
  for (const auto& j : jpegs) {
    if (!Write(dir + "/" + j.name, j.bytes)) return false;
  }
  const Bytes& base = jpegs.front().bytes;
  Bytes truncated(base.begin(), base.begin() + static_cast<long>(base.size() / 2));
  Bytes trailing = base;
  trailing.insert(trailing.end(), {'g', 'a', 'r', 'b', 'a', 'g', 'e'});
  Bytes huge = base;
  SetDeclaredSize(&huge, 65000, 65000);
  codec::TranscodeOptions options;
  for (const auto& j : jpegs) {
    auto r = codec::Transcode(j.bytes, options);
    if (r.transcoded()) {
      if (!Write(dir + "/ours_" + j.name, r.image.Level(10)) ||
          !Write(dir + "/ours_level3_" + j.name, r.image.Level(3))) {
        return false;
      }
    }
  }
  return Write(dir + "/hostile_truncated.jpg", truncated) &&
         Write(dir + "/hostile_trailing.jpg", trailing) &&
         Write(dir + "/hostile_huge_declared.jpg", huge);
}

struct StoredFile {
  std::string path;
  index::EntryKind kind;
  index::PassthroughReason reason;
  std::vector<Bytes> pieces;
};

std::vector<StoredFile> StoredFiles(const std::vector<SeedJpeg>& jpegs, size_t max_jpegs) {
  std::vector<StoredFile> files;
  codec::TranscodeOptions options;
  for (const auto& j : jpegs) {
    if (files.size() >= max_jpegs) break;
    auto r = codec::Transcode(j.bytes, options);
    // The store's reason for a codec outcome is the builder's business; any passthrough
    // reason serves a record seed.
    StoredFile f{
        "jpegs/" + j.name, index::EntryKind::kPassthrough, index::PassthroughReason::kCorrupt, {}};
    if (r.transcoded()) {
      f.kind = index::EntryKind::kJpeg;
      f.reason = index::PassthroughReason::kNone;
      for (int g = 1; g <= codec::kNumGroups; ++g) {
        auto p = r.image.piece(g);
        f.pieces.emplace_back(p.begin(), p.end());
      }
    } else {
      f.pieces.push_back(j.bytes);
    }
    files.push_back(std::move(f));
  }
  return files;
}

bool WriteRecord(const std::string& path, const std::vector<StoredFile>& files,
                 index::RecordLayout* layout) {
  auto w = index::RecordWriter::Create(path);
  if (!w) return Fail(w.error().ToString());
  for (const auto& f : files) {
    std::vector<std::span<const uint8_t>> spans(f.pieces.begin(), f.pieces.end());
    Status s = (*w)->Add(f.path, f.kind, f.reason, spans);
    if (!s.ok()) return Fail(s.ToString());
  }
  auto l = (*w)->Finish();
  if (!l) return Fail(l.error().ToString());
  if (layout != nullptr) *layout = *l;
  return true;
}

bool WriteRecordSeeds(const std::string& dir, const std::vector<SeedJpeg>& jpegs,
                      index::RecordLayout* layout) {
  if (!MakeDir(dir)) return false;
  std::vector<StoredFile> mixed = StoredFiles(jpegs, 3);
  const std::string text = "not a jpeg\n";
  mixed.push_back({"notes/readme.txt",
                   index::EntryKind::kPassthrough,
                   index::PassthroughReason::kNotJpeg,
                   {Bytes(text.begin(), text.end())}});
  mixed.push_back(
      {"empty.jpg", index::EntryKind::kPassthrough, index::PassthroughReason::kEmpty, {}});
  std::vector<StoredFile> one = StoredFiles(jpegs, 1);
  std::vector<StoredFile> none;
  return WriteRecord(dir + "/mixed.pcr", mixed, layout) &&
         WriteRecord(dir + "/one_jpeg.pcr", one, nullptr) &&
         WriteRecord(dir + "/empty.pcr", none, nullptr);
}

std::string EntrySeed(uint64_t ino, const index::Entry& e) {
  std::string out(8, '\0');
  EncodeFixed64(reinterpret_cast<uint8_t*>(out.data()), ino);
  return out + index::EncodeEntry(e);
}

bool WriteEntrySeeds(const std::string& dir, const index::RecordLayout& layout) {
  if (!MakeDir(dir)) return false;
  index::Entry root;
  root.ino = index::kRootIno;
  root.parent = index::kRootIno;
  root.mode = 0755;
  root.mtime_sec = 1700000000;
  root.first_child = 2;
  root.num_children = 3;
  root.num_subdirs = 1;
  index::Entry folder = root;
  folder.ino = 2;
  folder.parent = 1;
  folder.name = "jpegs";
  folder.first_child = 5;
  folder.num_children = 3;
  folder.num_subdirs = 0;
  folder.mtime_sec = -5;
  folder.mtime_nsec = 999999999;
  index::Entry jpeg;
  jpeg.ino = 5;
  jpeg.parent = 2;
  jpeg.name = "img.jpg";
  jpeg.kind = index::EntryKind::kJpeg;
  jpeg.mode = 0644;
  jpeg.mtime_sec = 1700000001;
  jpeg.mtime_nsec = 12345;
  jpeg.source_size = 12345;
  jpeg.record = 7;
  jpeg.slot = 1;
  index::Entry passthrough = jpeg;
  passthrough.ino = 6;
  passthrough.name = "notes.txt";
  passthrough.kind = index::EntryKind::kPassthrough;
  passthrough.passthrough_reason = index::PassthroughReason::kNotJpeg;
  for (const auto& img : layout.images) {
    if (img.kind == index::EntryKind::kJpeg) jpeg.pieces = img.pieces;
    if (img.kind == index::EntryKind::kPassthrough) passthrough.pieces = img.pieces;
  }
  return Write(dir + "/root", EntrySeed(1, root)) && Write(dir + "/folder", EntrySeed(2, folder)) &&
         Write(dir + "/jpeg", EntrySeed(5, jpeg)) &&
         Write(dir + "/passthrough", EntrySeed(6, passthrough));
}

bool WriteManifestSeeds(const std::string& dir) {
  if (!MakeDir(dir)) return false;
  index::Manifest m;
  m.generator = "pcrfs 0.1.0";
  m.options.images_per_record = 1024;
  m.options.max_input_scans = 1000;
  m.options.max_image_memory = uint64_t{1} << 30;
  m.options.max_jpeg_bytes = uint64_t{256} << 20;
  m.num_entries = 30;
  m.num_directories = 3;
  m.num_jpeg = 20;
  m.num_passthrough = 7;
  m.passthrough_by_reason = {{"not-jpeg", 3}, {"truncated", 2}, {"too-many-scans", 2}};
  m.num_records = 1;
  m.source_bytes = 1000000;
  m.source_jpeg_bytes = 900000;
  for (int k = 0; k < index::kNumGroups; ++k) {
    m.level_bytes[static_cast<size_t>(k)] = 100000 * static_cast<uint64_t>(k + 1);
    m.jpeg_level_bytes[static_cast<size_t>(k)] = 90000 * static_cast<uint64_t>(k + 1);
  }
  if (!Write(dir + "/plain.json", m.ToJson())) return false;
  m.options.quality_sample = 100;
  m.options.quality_seed = 3;
  m.quality.measured = 20;
  m.quality.seed = 3;
  for (int k = 0; k < index::kNumGroups; ++k) {
    index::LevelQuality& q = m.quality.levels[static_cast<size_t>(k)];
    q.n = 20;
    q.mean_psnr = 30 + k;
    q.p5_psnr = 28 + k;
    q.min_psnr = 25.5 + k;
    q.mean_msssim = 0.9 + 0.01 * k;
    q.p5_msssim = 0.88 + 0.01 * k;
    q.min_msssim = 0.85 + 0.01 * k;
  }
  m.quality.levels[9].mean_msssim = m.quality.levels[9].p5_msssim = 1;
  m.quality.levels[9].min_msssim = 1;
  return Write(dir + "/quality.json", m.ToJson());
}

// An index of `files` files in one folder as `pcr build` writes it (40 make branch pages); `big`
// adds a meta value and block CRCs longer than a page (overflow pages). Written with and without
// the trailer.
bool WriteIndexSeed(const std::string& dir, const std::string& name, int format, uint64_t files,
                    bool big) {
  const std::string path = dir + "/" + name;
  auto w = index::IndexWriter::Create(path, format);
  if (!w) return Fail(w.error().ToString());
  index::Entry root;
  root.ino = index::kRootIno;
  root.parent = index::kRootIno;
  root.mode = 0755;
  root.first_child = 2;
  root.num_children = files;
  Status s = (*w)->AddEntry(root);
  for (uint64_t ino = 2; ino < 2 + files && s.ok(); ++ino) {
    index::Entry e;
    e.ino = ino;
    e.parent = index::kRootIno;
    e.name = "img" + std::to_string(100 + ino) + ".jpg";
    e.kind = index::EntryKind::kJpeg;
    e.mode = 0644;
    e.source_size = 1000 * ino;
    e.slot = static_cast<uint32_t>(ino - 2);
    for (int g = 0; g < index::kNumGroups; ++g) {
      e.pieces[static_cast<size_t>(g)] =
          index::PieceRef{100 * ino + static_cast<uint64_t>(g), 10 + static_cast<uint64_t>(g), 7};
    }
    s = (*w)->AddEntry(e);
    if (s.ok() && big && ino == 2) {
      const std::vector<uint32_t> crcs(1100, 0x12345678);
      s = (*w)->AddBlockCrcs(ino, 1, crcs);
    }
  }
  if (s.ok()) {
    index::RecordInfo r;
    r.data_offset = 1000;
    for (int g = 0; g <= index::kNumGroups; ++g) {
      r.group_offset[static_cast<size_t>(g)] = 1000 + 100 * static_cast<uint64_t>(g);
    }
    r.file_size = r.group_offset[index::kNumGroups] + 16;
    r.num_images = static_cast<uint32_t>(files);
    s = (*w)->AddRecord(r);
  }
  if (s.ok()) s = (*w)->PutMeta("generator", "make_fuzz_seeds");
  if (s.ok() && big) s = (*w)->PutMeta("notes", std::string(6000, 'n'));
  if (s.ok()) s = (*w)->Finish();
  if (!s.ok()) return Fail(s.ToString());
  auto bytes = ReadWholeFile(path, uint64_t{1} << 20);
  if (!bytes) return Fail(bytes.error().ToString());
  bytes->resize(bytes->size() - index::IndexTrailer::kEncodedLength);
  return Write(path + ".image", *bytes);
}

bool WriteLmdbPagesSeeds(const std::string& dir) {
  return MakeDir(dir) && WriteIndexSeed(dir, "small.lmdb", index::kIndexFormat, 3, false) &&
         WriteIndexSeed(dir, "format2.lmdb", index::kOldestIndexFormat, 3, false) &&
         WriteIndexSeed(dir, "overflow.lmdb", index::kIndexFormat, 3, true) &&
         WriteIndexSeed(dir, "branches.lmdb", index::kIndexFormat, 40, false);
}

// The first byte picks the parser (tests/fuzz/aws_credentials_fuzzer.cc): 0 STS XML, 1
// credential_process JSON, 2 container / IMDS JSON, 3 ISO 8601.
bool WriteAwsCredentialsSeeds(const std::string& dir) {
  if (!MakeDir(dir)) return false;
  const std::pair<const char*, std::string> seeds[] = {
      {"sts.xml",
       std::string(1, '\0') +
           "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIAEXAMPLE"
           "</AccessKeyId><SecretAccessKey>wJalr/K7MDENG&amp;x</SecretAccessKey><SessionToken>"
           "FwoGZXIvYXdz</SessionToken><Expiration>2026-11-27T12:00:00Z</Expiration>"
           "</Credentials></AssumeRoleResult></AssumeRoleResponse>"},
      {"sts_error.xml",
       std::string(1, '\0') +
           "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>not "
           "authorized</Message></Error></ErrorResponse>"},
      {"process.json",
       std::string(1, '\1') +
           R"({"Version":1,"AccessKeyId":"ASIA","SecretAccessKey":"s","SessionToken":"t",)"
           R"("Expiration":"2026-11-27T12:00:00.123+00:00"})"},
      {"imds.json",
       std::string(1, '\2') +
           R"({"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"ASIA","SecretAccessKey":"s",)"
           R"("Token":"t","Expiration":"2026-11-27T12:00:00Z"})"},
      {"time", std::string(1, '\3') + "2026-11-27T13:30:00.5-01:30"},
  };
  for (const auto& [name, text] : seeds) {
    if (!Write(dir + "/" + name, text)) return false;
  }
  return true;
}

// A root with folders "a" (3 files) and "b" (empty) and a file "c.txt", in one record.
bool WriteCompactIndexSeeds(const std::string& dir) {
  if (!MakeDir(dir)) return false;
  std::vector<index::Entry> es(7);
  auto dir_entry = [&](uint64_t ino, uint64_t parent, std::string name, uint64_t first, uint64_t n,
                       uint64_t subdirs) {
    index::Entry& e = es[ino - 1];
    e.ino = ino;
    e.parent = parent;
    e.name = std::move(name);
    e.kind = index::EntryKind::kDirectory;
    e.mode = 0755;
    e.first_child = first;
    e.num_children = n;
    e.num_subdirs = subdirs;
  };
  dir_entry(1, 1, "", 2, 3, 2);
  dir_entry(2, 1, "a", 5, 3, 0);
  dir_entry(3, 1, "b", 0, 0, 0);
  index::RecordInfo r;
  r.data_offset = 1024;
  r.num_images = 4;
  std::array<uint64_t, index::kNumGroups> sums{};
  auto file = [&](uint64_t ino, uint64_t parent, std::string name, uint32_t slot, bool jpeg) {
    index::Entry& e = es[ino - 1];
    e.ino = ino;
    e.parent = parent;
    e.name = std::move(name);
    e.kind = jpeg ? index::EntryKind::kJpeg : index::EntryKind::kPassthrough;
    if (!jpeg) e.passthrough_reason = index::PassthroughReason::kNotJpeg;
    e.mode = 0644;
    e.mtime_sec = 1700000000 + static_cast<int64_t>(ino);
    e.mtime_nsec = 7;
    e.slot = slot;
    for (int g = 0; g < (jpeg ? index::kNumGroups : 1); ++g) {
      e.pieces[static_cast<size_t>(g)].length = 100 * ino + static_cast<uint64_t>(g);
      sums[static_cast<size_t>(g)] += 100 * ino + static_cast<uint64_t>(g);
    }
    e.source_size = e.SizeAtLevel(10);
  };
  file(4, 1, "c.txt", 0, false);
  file(5, 2, "n01440764_1.JPEG", 1, true);
  file(6, 2, "n01440764_12.JPEG", 2, true);
  file(7, 2, "n01440764_2.JPEG", 3, true);
  r.group_offset[0] = r.data_offset;
  for (size_t g = 0; g < index::kNumGroups; ++g)
    r.group_offset[g + 1] = r.group_offset[g] + sums[g];
  r.file_size = r.group_offset[index::kNumGroups] + 16;
  for (int level : {0, 9}) {
    index::CompactIndexWriter w("seed", level);
    for (const index::Entry& e : es) {
      if (!w.AddEntry(e).ok()) return false;
    }
    if (!w.AddRecord(r).ok() || !w.PutMeta("format_version", "1").ok()) return false;
    auto bytes = w.Finish();
    if (!bytes) {
      std::fprintf(stderr, "compact index seed: %s\n", bytes.error().ToString().c_str());
      return false;
    }
    for (char selector : {'\0', '\1'}) {
      const std::string name = dir + "/level" + std::to_string(level) + "_" +
                               std::to_string(static_cast<int>(selector)) + ".pcri";
      if (!Write(name, std::string(1, selector) + *bytes)) return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUTDIR\n");
    return 2;
  }
  const std::string out = argv[1];
  std::vector<SeedJpeg> jpegs;
  index::RecordLayout layout;
  const bool ok =
      MakeDir(out) && MakeJpegs(&jpegs) && WriteCodecSeeds(out + "/codec", jpegs) &&
      WriteRecordSeeds(out + "/record", jpegs, &layout) &&
      WriteEntrySeeds(out + "/entry", layout) && WriteManifestSeeds(out + "/manifest") &&
      WriteLmdbPagesSeeds(out + "/lmdb_pages") && WriteCompactIndexSeeds(out + "/compact_index") &&
      WriteAwsCredentialsSeeds(out + "/aws_credentials");
  return ok ? 0 : 1;
}
