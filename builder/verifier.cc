#include "builder/verifier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "builder/build_source.h"
#include "builder/provenance.h"
#include "builder/source_tree.h"
#include "codec/decoder.h"
#include "codec/transcoder.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/parallel.h"
#include "common/random_access_file.h"
#include "index/compact_index.h"
#include "index/record_reader.h"
#include "index/store.h"

namespace pcrfs::tools {
namespace {

// A format 4 index holds piece lengths only (offsets and CRCs are the record's).
bool SameLengths(const index::PieceRefs& a, const index::PieceRefs& b) {
  for (size_t g = 0; g < index::kNumGroups; ++g) {
    if (a[g].length != b[g].length) return false;
  }
  return true;
}

using Kind = VerifyFinding::Kind;

// Calls fn(name, is_dir) for every entry of the folder `path` but "." and "..".
Status ListDir(const std::string& path, const std::function<void(const std::string&, bool)>& fn) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Status::FromErrno("cannot list " + path, errno);
  for (;;) {
    errno = 0;
    const struct dirent* de = ::readdir(d);
    if (de == nullptr) break;
    const std::string name = de->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = de->d_type == DT_DIR;
    if (de->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir =
          ::fstatat(::dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    fn(name, is_dir);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno("cannot list " + path, err);
  return Status::OK();
}

struct FileEntry {
  std::string path;
  index::Entry entry;
};

class Verifier {
 public:
  Verifier(const VerifyConfig& config, std::unique_ptr<index::Store> store, bool local)
      : config_(config),
        store_(std::move(store)),
        local_(local),
        jobs_(ResolveThreads(config.jobs)) {}

  VerifyReport Run() {
    WalkIndex();
    CheckManifestTotals();
    CheckRecords();
    if (local_) CheckStoreFolder();  // a remote store cannot be listed (no LIST request)
    if (!config_.source.empty()) CompareWithSource();
    {
      MutexLock l(&mu_);
      report_.findings = std::move(findings_);
    }
    std::sort(report_.findings.begin(), report_.findings.end(),
              [](const VerifyFinding& a, const VerifyFinding& b) {
                return std::tie(a.path, a.kind) < std::tie(b.path, b.kind);
              });
    // One finding per path and kind: the first reason is the one that matters.
    report_.findings.erase(std::unique(report_.findings.begin(), report_.findings.end(),
                                       [](const VerifyFinding& a, const VerifyFinding& b) {
                                         return a.path == b.path && a.kind == b.kind;
                                       }),
                           report_.findings.end());
    return std::move(report_);
  }

 private:
  void Add(Kind kind, std::string path, std::string reason) {
    MutexLock l(&mu_);
    findings_.push_back({kind, std::move(path), std::move(reason)});
  }

  // Depth-first over the index from the root, checking the tree's structure on the way.
  void WalkIndex() {
    const index::IndexReader& idx = store_->index();
    auto root = idx.Get(index::kRootIno);
    if (!root) {
      Add(Kind::kDamaged, "/", "index: cannot read the root: " + root.error().message());
      return;
    }
    std::vector<std::pair<std::string, index::Entry>> stack{{"", std::move(*root)}};
    while (!stack.empty()) {
      // Two variables, not a structured binding: clang 14 cannot capture one in a lambda.
      std::string path = std::move(stack.back().first);
      index::Entry dir = std::move(stack.back().second);
      stack.pop_back();
      ++report_.directories;
      uint64_t seen = 0, subdirs = 0;
      Status s = idx.List(dir, 0, [&](const index::Entry& child) {
        ++seen;
        std::string child_path = path.empty() ? child.name : path + "/" + child.name;
        if (child.parent != dir.ino) {
          Add(Kind::kDamaged, child_path, "index: parent inode does not match its folder");
        }
        if (child.is_dir()) {
          ++subdirs;
          stack.emplace_back(std::move(child_path), child);
        } else {
          files_.push_back({std::move(child_path), child});
        }
        return true;
      });
      const std::string where = path.empty() ? "/" : path;
      if (!s.ok()) {
        Add(Kind::kDamaged, where, "index: cannot list folder: " + s.message());
      } else if (seen != dir.num_children || subdirs != dir.num_subdirs) {
        Add(Kind::kDamaged, where,
            "index: folder lists " + std::to_string(seen) + " children, its entry says " +
                std::to_string(dir.num_children));
      }
    }
    report_.files = files_.size();
    const uint64_t entries = report_.files + report_.directories;
    if (entries != store_->manifest().num_entries) {
      Add(Kind::kDamaged, "index.lmdb",
          "the tree holds " + std::to_string(entries) + " entries, the manifest says " +
              std::to_string(store_->manifest().num_entries));
    }
  }

  // The manifest's numbers were checked for consistency when the store opened (Store::Open);
  // here every total is recounted from the index's entries.
  void CheckManifestTotals() {
    const index::Manifest& m = store_->manifest();
    index::Manifest counted;
    counted.num_directories = report_.directories;
    for (const FileEntry& f : files_) {
      const index::Entry& e = f.entry;
      const bool jpeg = e.kind == index::EntryKind::kJpeg;
      counted.source_bytes += e.source_size;
      if (jpeg) {
        ++counted.num_jpeg;
        counted.source_jpeg_bytes += e.source_size;
      } else {
        ++counted.num_passthrough;
        ++counted.passthrough_by_reason[index::PassthroughReasonName(e.passthrough_reason)];
      }
      for (int k = 1; k <= index::kNumGroups; ++k) {
        const uint64_t size = e.SizeAtLevel(k);
        counted.level_bytes[static_cast<size_t>(k - 1)] += size;
        if (jpeg) counted.jpeg_level_bytes[static_cast<size_t>(k - 1)] += size;
      }
    }
    auto check = [&](const std::string& field, uint64_t says, uint64_t holds) {
      if (says != holds) {
        Add(Kind::kDamaged, "manifest.json: \"" + field + "\"",
            "says " + std::to_string(says) + ", the index holds " + std::to_string(holds));
      }
    };
    check("num_directories", m.num_directories, counted.num_directories);
    check("num_jpeg", m.num_jpeg, counted.num_jpeg);
    check("num_passthrough", m.num_passthrough, counted.num_passthrough);
    check("source_bytes", m.source_bytes, counted.source_bytes);
    check("source_jpeg_bytes", m.source_jpeg_bytes, counted.source_jpeg_bytes);
    for (size_t i = 0; i < index::kNumGroups; ++i) {
      const std::string at = "[" + std::to_string(i) + "]";
      check("level_bytes" + at, m.level_bytes[i], counted.level_bytes[i]);
      check("jpeg_level_bytes" + at, m.jpeg_level_bytes[i], counted.jpeg_level_bytes[i]);
    }
    if (m.passthrough_by_reason != counted.passthrough_by_reason) {
      Add(Kind::kDamaged, "manifest.json: \"passthrough_by_reason\"",
          "does not match the index's passthrough files");
    }
  }

  void CheckRecords() {
    std::map<uint32_t, std::vector<const FileEntry*>> by_record;
    for (const FileEntry& f : files_) by_record[f.entry.record].push_back(&f);
    const uint32_t num_records = store_->manifest().num_records;
    report_.records = num_records;
    for (const auto& [id, members] : by_record) {
      if (id >= num_records) {
        for (const FileEntry* f : members) {
          Add(Kind::kDamaged, f->path,
              "index: names record " + std::to_string(id) + ", but the store has " +
                  std::to_string(num_records));
        }
      }
    }
    std::vector<uint32_t> ids(num_records);
    for (uint32_t i = 0; i < num_records; ++i) ids[i] = i;
    std::atomic<uint64_t> pieces{0};
    ParallelFor(ids.size(), jobs_, [&](size_t i) {
      const uint32_t id = ids[i];
      auto it = by_record.find(id);
      static const std::vector<const FileEntry*> kNone;
      pieces += CheckRecord(id, it == by_record.end() ? kNone : it->second);
    });
    report_.pieces = pieces;
  }

  // Returns the number of pieces checked.
  uint64_t CheckRecord(uint32_t id, const std::vector<const FileEntry*>& members) {
    const std::string name = index::RecordFileName(id);
    auto damage_all = [&](const std::string& why) {
      Add(Kind::kDamaged, name, why);
      for (const FileEntry* f : members) Add(Kind::kDamaged, f->path, name + ": " + why);
    };
    // Through the store: a remote store's record is read by ranged GETs, a local one without
    // following a symlink.
    auto file = store_->OpenRecord(id);
    if (!file) {
      damage_all(file.error().IsNotFound() ? "record file is missing" : file.error().message());
      return 0;
    }
    auto layout = index::ReadRecordLayout(file->file());
    if (!layout) {
      damage_all(layout.error().message());
      return 0;
    }
    auto info = store_->index().GetRecord(id);
    if (!info) {
      damage_all("index: " + info.error().message());
      return 0;
    }
    const uint32_t per = store_->manifest().options.images_per_record;
    if (id + 1 < store_->manifest().num_records && info->num_images != per) {
      Add(Kind::kDamaged, "manifest.json: \"options.images_per_record\"",
          "says " + std::to_string(per) + ", but " + name + " (not the last record) holds " +
              std::to_string(info->num_images) + " files");
    }
    if (info->file_size != layout->file_size || info->data_offset != layout->data_offset ||
        info->group_offset != layout->group_offset || info->num_images != layout->images.size()) {
      damage_all("the index's record description does not match the record header");
      return 0;
    }
    auto damaged = index::VerifyRecord(file->file());
    if (!damaged) {
      damage_all(damaged.error().message());
      return 0;
    }
    std::unordered_map<uint32_t, std::string> damaged_slots;
    for (const index::DamagedImage& d : *damaged) damaged_slots[d.slot] = d.reason;
    uint64_t pieces = 0;
    for (const FileEntry* f : members) {
      const index::Entry& e = f->entry;
      if (e.slot >= layout->images.size()) {
        Add(Kind::kDamaged, f->path,
            name + ": index names slot " + std::to_string(e.slot) + " of " +
                std::to_string(layout->images.size()));
        continue;
      }
      const index::RecordImage& img = layout->images[e.slot];
      if (img.path != f->path) {
        Add(Kind::kDamaged, f->path,
            name + ": slot " + std::to_string(e.slot) + " holds \"" + img.path + "\"");
      } else if (img.kind != e.kind || (e.PiecesResolved() ? img.pieces != e.pieces
                                                           : !SameLengths(img.pieces, e.pieces))) {
        Add(Kind::kDamaged, f->path, name + ": the index entry does not match the record");
      }
      if (auto d = damaged_slots.find(e.slot); d != damaged_slots.end()) {
        Add(Kind::kDamaged, f->path, d->second);
      }
      pieces += index::kNumGroups;
    }
    return pieces;
  }

  // Whatever sits in the store folder beside what the store names: a record file from another
  // build, a leftover temporary file. Readers ignore such files, so they hide a mistake.
  void CheckStoreFolder() {
    const std::string& dir = store_->dir();
    const uint32_t num_records = store_->manifest().num_records;
    Status s = ListDir(dir, [&](const std::string& name, bool is_dir) {
      if (name == index::kManifestFile || name == index::kIndexFile ||
          name == index::kCompactIndexFile) {
        return;
      }
      if (name == kProvenanceFile && !is_dir) {
        // Not the store's content, but a damaged one would mislead whoever reads it.
        auto bytes = ReadWholeFile(dir + "/" + name, 1 << 20);
        if (!bytes) {
          Add(Kind::kDamaged, name, bytes.error().message());
        } else if (auto p = Provenance::FromJson(std::string(bytes->begin(), bytes->end())); !p) {
          Add(Kind::kDamaged, name, p.error().message());
        }
        return;
      }
      if (name == index::kRecordsDir && is_dir) {
        Status r = ListDir(dir + "/" + name, [&](const std::string& rec, bool rec_is_dir) {
          const std::string rel = std::string(index::kRecordsDir) + "/" + rec;
          if (rec_is_dir) {
            Add(Kind::kStray, rel, "a folder among the record files");
          } else if (auto id = RecordIdOf(rec); !id) {
            Add(Kind::kStray, rel, "not a record file of the store");
          } else if (*id >= num_records) {
            Add(Kind::kStray, rel,
                "a record file the store does not name (it has " + std::to_string(num_records) +
                    " records)");
          }
        });
        if (!r.ok()) Add(Kind::kDamaged, index::kRecordsDir, r.message());
        return;
      }
      Add(Kind::kStray, name, "not part of the store");
    });
    if (!s.ok()) Add(Kind::kDamaged, dir, s.message());
  }

  // The id a record file name stands for, if `name` is exactly RecordFileName(id)'s last part.
  static std::optional<uint32_t> RecordIdOf(const std::string& name) {
    static constexpr std::string_view kSuffix = ".pcr";
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) return std::nullopt;
    const std::string digits = name.substr(0, name.size() - kSuffix.size());
    if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    const uint64_t id = std::stoull(digits);
    if (id > UINT32_MAX) return std::nullopt;
    const auto id32 = static_cast<uint32_t>(id);
    if (std::string(index::kRecordsDir) + "/" + name != index::RecordFileName(id32)) {
      return std::nullopt;
    }
    return id32;
  }

  // The source as pcr build reads it (build_source.h): a folder, a local archive, or a URL (an
  // archive at an http(s)/s3 URL, an s3:// or Azure prefix), so a store is checked against what
  // it was built from whatever that was.
  void CompareWithSource() {
    auto opened = BuildSource::Open(config_.source, config_.nested_archives, config_.remote);
    if (!opened) {
      Add(Kind::kMissing, config_.source, opened.error().message());
      return;
    }
    BuildSource* source = opened->get();
    const SourceTree& tree = source->tree();
    for (const SourceProblem& p : tree.problems) Add(Kind::kMissing, p.rel_path, p.reason);
    std::unordered_map<std::string, const FileEntry*> by_path;
    for (const FileEntry& f : files_) by_path[f.path] = &f;
    std::vector<std::pair<uint32_t, const FileEntry*>> pairs;  // source node, store file
    for (uint32_t node : tree.files) {
      const SourceNode& n = tree.nodes[node];
      const std::string rel = tree.RelPath(n);
      auto it = by_path.find(rel);
      if (it == by_path.end()) {
        Add(Kind::kMissing, rel, "in the source but not in the store");
        continue;
      }
      pairs.emplace_back(node, it->second);
      by_path.erase(it);
    }
    for (const auto& [path, f] : by_path) {
      Add(Kind::kExtra, path, "in the store but not in the source");
    }
    report_.compared = pairs.size();
    std::vector<uint32_t> order;  // the listing's order: an archive's members as they come
    order.reserve(pairs.size());
    for (const auto& p : pairs) order.push_back(p.first);
    source->StartReading(order);
    ParallelFor(pairs.size(), source->ReadThreads(jobs_),
                [&](size_t i) { CompareFile(source, tree, pairs[i].first, i, *pairs[i].second); });
  }

  void CompareFile(BuildSource* source, const SourceTree& tree, uint32_t node, size_t turn,
                   const FileEntry& f) {
    auto file = source->OpenFile(tree, node, turn);
    if (!file) {
      Add(Kind::kDiffers, f.path, "cannot read the source: " + file.error().message());
      return;
    }
    if (f.entry.kind == index::EntryKind::kPassthrough) {
      ComparePassthrough(file->get(), f);
      return;
    }
    bool changed = false;
    auto data = (*file)->ReadAll(&changed);
    file->reset();  // an archive's next member may be served from here on
    if (!data) {
      Add(Kind::kDiffers, f.path, "cannot read the source: " + data.error().message());
      return;
    }
    if (changed) {
      Add(Kind::kDiffers, f.path, "cannot read the source: it changed while it was read");
      return;
    }
    std::vector<uint8_t> stored;
    Status s = store_->ReadFile(f.entry, index::kNumGroups, &stored);
    if (!s.ok()) {
      Add(Kind::kDamaged, f.path, s.message());
      return;
    }
    auto want = codec::DecodeJpeg(*data);
    if (!want) {
      Add(Kind::kDiffers, f.path,
          "the source no longer decodes cleanly: " + want.error().message());
      return;
    }
    auto got = codec::DecodeJpeg(stored);
    if (!got) {
      Add(Kind::kDamaged, f.path, "level 10 does not decode: " + got.error().message());
      return;
    }
    if (got->width != want->width || got->height != want->height ||
        got->components != want->components || got->pixels != want->pixels) {
      Add(Kind::kDiffers, f.path, "level 10 pixels differ from the source");
    }
  }

  // Byte for byte, a checksum block at a time: constant memory whatever the file's size.
  void ComparePassthrough(SourceFile* file, const FileEntry& f) {
    const uint64_t source_size = file->stat().size;
    const uint64_t stored_size = f.entry.SizeAtLevel(index::kNumGroups);
    if (source_size != stored_size) {
      Add(Kind::kDiffers, f.path,
          "bytes differ from the source (size " + std::to_string(source_size) + ", stored " +
              std::to_string(stored_size) + ")");
      return;
    }
    std::vector<uint8_t> source;
    uint64_t pos = 0;
    bool differs = false;
    Status source_status;
    Status s = store_->ReadFileTo(f.entry, index::kNumGroups, [&](std::span<const uint8_t> bytes) {
      source.resize(bytes.size());
      source_status = file->ReadStream(pos, source);
      if (!source_status.ok()) return source_status;
      differs = differs || !std::equal(bytes.begin(), bytes.end(), source.begin());
      pos += bytes.size();
      return Status::OK();
    });
    if (!source_status.ok()) {
      Add(Kind::kDiffers, f.path, "cannot read the source: " + source_status.message());
      return;
    }
    if (!s.ok()) {
      Add(Kind::kDamaged, f.path, s.message());
      return;
    }
    if (differs) Add(Kind::kDiffers, f.path, "bytes differ from the source");
  }

  const VerifyConfig& config_;
  std::unique_ptr<index::Store> store_;
  const bool local_;
  const unsigned jobs_;
  std::vector<FileEntry> files_;
  VerifyReport report_;  // its findings are findings_ until the checks end
  Mutex mu_;
  std::vector<VerifyFinding> findings_ GUARDED_BY(mu_);  // checks add them from several threads
};

}  // namespace

const char* FindingKindName(VerifyFinding::Kind kind) {
  switch (kind) {
    case Kind::kDamaged:
      return "damaged";
    case Kind::kDiffers:
      return "differs";
    case Kind::kMissing:
      return "missing";
    case Kind::kExtra:
      return "extra";
    case Kind::kStray:
      return "stray";
  }
  return "?";
}

Result<VerifyReport> VerifyStore(const VerifyConfig& config) {
  auto store = index::Store::Open(config.store);
  if (!store) return Err(store.error());
  return VerifyOpenStore(config, std::move(*store), /*local=*/true);
}

VerifyReport VerifyOpenStore(const VerifyConfig& config, std::unique_ptr<index::Store> store,
                             bool local) {
  Verifier verifier(config, std::move(store), local);
  return verifier.Run();
}

}  // namespace pcrfs::tools
