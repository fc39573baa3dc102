// `pcr merge` (builder.h) and the part a shard leaves for it: the parts' records copied and
// placed, then the index and publish stages of a build (build_stages.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>

#include "builder/build_stages.h"
#include "builder/builder.h"
#include "builder/object_target.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/parallel.h"
#include "index/index_reader.h"
#include "location/store_location.h"

namespace pcrfs::tools {
namespace {

Status CopyChecked(const std::string& from, const std::string& to, uint64_t* size, uint32_t* crc);

// Reads `from` whole, copying it to `to` unless empty, and returns its size and CRC32C.
// A hard link where the part and the store share a filesystem (records are immutable: no
// second copy of the dataset's bytes), else a copy; either way every byte is read and
// checked by the caller against *size and *crc.
Status LinkOrCopyChecked(const std::string& from, const std::string& to, uint64_t* size,
                         uint32_t* crc) {
  if (::link(from.c_str(), to.c_str()) == 0) return CopyChecked(to, "", size, crc);
  if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
    return Status::FromErrno("link " + from + " -> " + to, errno);
  }
  return CopyChecked(from, to, size, crc);
}

Status CopyChecked(const std::string& from, const std::string& to, uint64_t* size, uint32_t* crc) {
  auto in = OpenFile(from, O_RDONLY | O_NOFOLLOW);
  if (!in) return in.error();
  UniqueFd out;
  if (!to.empty()) {
    auto created = OpenFile(to, O_WRONLY | O_CREAT | O_TRUNC);
    if (!created) return created.error();
    out = std::move(*created);
  }
  std::vector<uint8_t> buf(uint64_t{1} << 20);
  *size = 0;
  *crc = 0;
  for (;;) {
    const ssize_t got = ::read(in->get(), buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::FromErrno(from, errno);
    if (got == 0) break;
    *crc = crc32c::Extend(*crc, buf.data(), static_cast<size_t>(got));
    *size += static_cast<uint64_t>(got);
    if (out.valid()) {
      PCRFS_RETURN_IF_ERROR(WriteFull(out.get(), buf.data(), static_cast<size_t>(got), to));
    }
  }
  if (out.valid() && ::fsync(out.get()) != 0) return Status::FromErrno("fsync " + to, errno);
  return Status::OK();
}

// Joins the parts into a store: the records stage of a build replaced by copying the parts'
// records; placement, index and publish as a build's.
class Merger {
 public:
  Merger(const BuildConfig& config, BuildOptions options)
      : config_(config),
        options_(std::move(options)),
        options_text_(options_.Encode() + "\n"),
        threads_(ResolveThreads(config.threads)),
        draft_(config.store, config.sink) {}

  // parts[i] (in folder dirs[i]) is shard i of parts.size(), checked by LoadParts.
  Result<BuildReport> Run(const std::vector<std::string>& dirs, const std::vector<ShardPart>& parts,
                          const std::vector<std::shared_ptr<ObjectPart>>& remote) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t started_ms = UnixMillisNow();
    auto bytes = ReadWholeFile(dirs[0] + "/" + kListingFile, UINT64_MAX);
    if (!bytes) return Err(bytes.error());
    auto tree = DecodeListing(
        std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (!tree) return Err(Status::Corruption(dirs[0] + ": " + tree.error().message()));
    tree_ = std::move(*tree);
    for (const SourceProblem& p : tree_.problems) {
      report_.problems.push_back({p.rel_path, p.reason, ""});
    }
    report_.files_total = tree_.files.size();
    placement_ = std::make_unique<Placement>(tree_.files.size(), config_.images_per_record);
    num_records_ = parts[0].num_records;
    const size_t per = config_.images_per_record;
    if (tree_.files.size() != parts[0].num_files ||
        num_records_ != (tree_.files.size() + per - 1) / per) {
      return Err(
          Status::Corruption(dirs[0] + ": damaged part: listing.bin disagrees with " + kPartFile));
    }
    if (Status s = draft_.Prepare(options_text_, false); !s.ok()) return Err(std::move(s));
    merge_bytes_total_ = 0;
    for (const ShardPart& part : parts) {
      for (const PartRecord& rec : part.records) merge_bytes_total_ += rec.size;
    }
    ReportProgress(config_.progress, BuildProgress::Stage::kRecords, 0, num_records_, 0,
                   merge_bytes_total_);
    for (size_t p = 0; p < parts.size(); ++p) {
      ObjectPart* from = remote.empty() ? nullptr : remote[p].get();
      if (Status s = MergePart(dirs[p], parts[p], from); !s.ok()) return Err(std::move(s));
    }
    Status s = WriteIndexAndManifest(draft_, &tree_, placement_.get(), num_records_, options_,
                                     threads_, config_.progress, &report_.manifest);
    if (s.ok()) s = draft_.WriteProvenance(ProvenanceOf(started_ms, parts.size()), tree_, report_);
    if (s.ok()) s = draft_.Publish();
    if (!s.ok()) return Err(std::move(s));
    report_.num_records = num_records_;
    report_.record_end = num_records_;
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

  // Copies the records of one part into the store, checking each against part.json, and
  // places their files; then applies the part's changed file stats.
  // remote: the part is in object storage, its records copied to the target on the server
  // (their size was checked against part.json when the part was loaded; no byte is read here
  // but their tables).
  Status MergePart(const std::string& local_dir, const ShardPart& part, ObjectPart* remote) {
    const std::string dir = remote != nullptr ? remote->location.name : local_dir;
    const size_t n = tree_.files.size(), per = config_.images_per_record;
    for (const PartRecord& rec : part.records) {
      const std::string key = index::RecordFileName(rec.id);
      const std::string from = remote != nullptr ? remote->writer->Name(key) : dir + "/" + key;
      uint64_t size = rec.size;
      if (remote != nullptr) {
        auto* target = dynamic_cast<ObjectTarget*>(config_.sink);
        if (target == nullptr)
          return Status::InvalidArgument(from + ": no object store to copy to");
        PCRFS_RETURN_IF_ERROR(target->writer().Copy(*remote->writer, key, rec.size, key));
        target->AddCopiedRecord(rec.id, rec.size);
      } else {
        uint32_t crc = 0;
        PCRFS_RETURN_IF_ERROR(LinkOrCopyChecked(from, draft_.RecordPath(rec.id), &size, &crc));
        if (size != rec.size || crc != rec.crc32c) {
          return Status::Corruption(from + ": damaged part: the record does not match its " +
                                    kPartFile + " (size or CRC32C)");
        }
      }
      const size_t begin = rec.id * per, end = std::min(n, begin + per);
      auto file = draft_.OpenRecord(rec.id);
      if (!file) return file.error();
      auto layout = index::ReadRecordLayout(**file);
      if (!layout) return Status::Corruption(from + ": " + layout.error().message());
      bool same = layout->images.size() == end - begin;
      for (size_t i = begin; same && i < end; ++i) {
        same = layout->images[i - begin].path == tree_.RelPath(tree_.nodes[tree_.files[i]]);
      }
      if (!same) {
        return Status::Corruption(from + ": its files are not those of the source listing");
      }
      // A remote part's block CRCs come from its part.json: its large pieces are not read.
      const bool known = remote != nullptr && rec.has_blocks;
      PCRFS_RETURN_IF_ERROR(placement_->Place(rec.id, *layout, begin, known ? &rec.blocks : nullptr,
                                              draft_.RecordPath(rec.id), file->get()));
      ++merged_records_;
      merged_bytes_ += size;
      ReportProgress(config_.progress, BuildProgress::Stage::kRecords, merged_records_,
                     num_records_, merged_bytes_, merge_bytes_total_);
      for (const index::RecordImage& img : layout->images) {
        if (img.passthrough_reason == index::PassthroughReason::kUnreadable) {
          report_.problems.push_back({img.path, "unreadable", "see the report of " + dir});
        }
      }
    }
    for (const ChangedFile& c : part.changed) {
      if (c.position < part.record_begin * per ||
          c.position >= std::min(n, part.record_end * per)) {
        return Status::Corruption(dir + ": damaged part: a changed file outside its records");
      }
      SourceNode& node = tree_.nodes[tree_.files[c.position]];
      node.size = c.size;
      node.mtime_sec = c.mtime_sec;
      node.mtime_nsec = c.mtime_nsec;
    }
    return Status::OK();
  }

  Provenance ProvenanceOf(int64_t started_ms, size_t shards) const {
    Provenance p = NewProvenance("merge", started_ms, threads_, options_);
    p.source_kind = IsRemoteUrl(config_.source) ? SourceKind(config_.source)
                    : options_.archive          ? "archive"
                                                : "folder";
    p.source = IsRemoteUrl(config_.source) ? RedactUrl(config_.source) : config_.source;
    p.shards = static_cast<uint32_t>(shards);
    return p;
  }

  const BuildConfig& config_;
  const BuildOptions options_;
  const std::string options_text_;
  const unsigned threads_;
  const StoreDraft draft_;
  SourceTree tree_;
  std::unique_ptr<Placement> placement_;
  uint32_t num_records_ = 0;
  BuildReport report_;
  uint64_t merge_bytes_total_ = 0, merged_bytes_ = 0, merged_records_ = 0;  // progress
};

// Sets config's options to `o` (pcr merge builds with the parts' options).
void ApplyOptions(const BuildOptions& o, BuildConfig* c) {
  c->strip_metadata = o.store.strip_metadata;
  c->images_per_record = o.store.images_per_record;
  c->max_input_scans = static_cast<int>(o.store.max_input_scans);
  c->max_image_memory = o.store.max_image_memory;
  c->max_jpeg_bytes = o.store.max_jpeg_bytes;
  c->quality_sample = o.store.quality_sample;
  c->quality_seed = o.store.quality_seed;
  c->nested_archives = o.nested_archives;
}

struct LoadedParts {
  std::vector<std::string> dirs;  // by shard index
  std::vector<ShardPart> parts;
  std::vector<std::shared_ptr<ObjectPart>> remote;  // by shard index, when remote
};

std::string ShardName(const ShardSpec& s) {
  return std::to_string(s.index) + "/" + std::to_string(s.count);
}

// remote: the part in object storage whose part.json and listing.bin are in `dir`.
Result<ShardPart> LoadPart(const std::string& local_dir, const ObjectPart* remote) {
  const std::string dir = remote != nullptr ? remote->location.name : local_dir;
  const std::string path = local_dir + "/" + kPartFile;
  struct stat st;
  if (::stat(local_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Err(Status::NotFound(dir + ": no such part folder"));
  }
  if (::access(path.c_str(), F_OK) != 0) {
    return Err(Status::InvalidArgument(dir + ": not a pcrfs shard part (no " + kPartFile +
                                       "; was its pcr build --shard completed?)"));
  }
  auto text = ReadWholeFile(path, uint64_t{1} << 30);
  if (!text) return Err(text.error());
  auto part = ShardPart::FromJson(std::string(text->begin(), text->end()));
  if (!part) {
    return Err(
        Status::Corruption(dir + ": damaged part: " + kPartFile + ": " + part.error().message()));
  }
  auto listing = ReadWholeFile(local_dir + "/" + kListingFile, UINT64_MAX);
  if (!listing)
    return Err(Status::Corruption(dir + ": damaged part: " + listing.error().message()));
  Fingerprint fp;
  fp.Add(std::string_view(reinterpret_cast<const char*>(listing->data()), listing->size()));
  if (fp.Hex() != part->listing_digest || crc32c::Value(*listing) != part->listing_crc32c) {
    return Err(Status::Corruption(dir + ": damaged part: " + kListingFile + " does not match " +
                                  kPartFile));
  }
  std::map<std::string, uint64_t> listed;  // a remote part's objects
  if (remote != nullptr) {
    std::string token;
    for (;;) {
      auto page = remote->client->List(token, 1000);
      if (!page) return Err(page.error());
      for (const auto& e : page->entries) listed[e.key] = e.size;
      if (page->next_token.empty() || page->next_token == token) break;
      token = page->next_token;
    }
  }
  for (const PartRecord& r : part->records) {
    const std::string key = index::RecordFileName(r.id);
    const std::string rec = remote != nullptr ? remote->writer->Name(key) : dir + "/" + key;
    const auto it = listed.find(key);
    if (remote != nullptr ? it == listed.end() || it->second != r.size
                          : ::lstat(rec.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
                                static_cast<uint64_t>(st.st_size) != r.size) {
      return Err(Status::Corruption(rec + ": damaged part: missing, or not the size " + kPartFile +
                                    " gives"));
    }
  }
  return part;
}

// Every part loaded and checked against the first: one source, one set of options, one N, and
// each shard 0..N-1 exactly once.
Result<LoadedParts> LoadParts(const MergeConfig& config) {
  if (config.parts.empty()) return Err(Status::InvalidArgument("no PART given"));
  std::vector<ShardPart> given;
  std::vector<std::string> shown;  // what messages call each part
  const bool remote = !config.remote_parts.empty();
  for (size_t i = 0; i < config.parts.size(); ++i) {
    const ObjectPart* from = remote ? config.remote_parts[i].get() : nullptr;
    auto part = LoadPart(config.parts[i], from);
    if (!part) return Err(part.error());
    given.push_back(std::move(*part));
    shown.push_back(from != nullptr ? from->location.name : config.parts[i]);
  }
  const ShardPart& first = given[0];
  const std::string& first_dir = shown[0];
  LoadedParts out;
  out.dirs.resize(first.shard.count);
  out.parts.resize(first.shard.count);
  if (remote) out.remote.resize(first.shard.count);
  std::vector<std::string> shown_at(first.shard.count);
  for (size_t i = 0; i < given.size(); ++i) {
    const ShardPart& p = given[i];
    const std::string& dir = shown[i];
    if (p.shard.count != first.shard.count) {
      return Err(Status::InvalidArgument(dir + ": is shard " + ShardName(p.shard) + ", but " +
                                         first_dir + " is shard " + ShardName(first.shard) +
                                         ": parts of different N cannot be merged"));
    }
    if (p.listing_digest != first.listing_digest || p.num_files != first.num_files) {
      return Err(Status::InvalidArgument(
          dir + ": built from a different source than " + first_dir +
          " (the source listings differ: another folder, or files changed between the shards' "
          "walks)"));
    }
    if (p.options != first.options) {
      return Err(Status::InvalidArgument(dir + ": built with other options than " + first_dir +
                                         " (" + p.options + " against " + first.options + ")"));
    }
    if (!out.dirs[p.shard.index].empty()) {
      return Err(Status::InvalidArgument("shard " + ShardName(p.shard) + " given twice: " +
                                         shown_at[p.shard.index] + " and " + dir));
    }
    shown_at[p.shard.index] = dir;
    out.dirs[p.shard.index] = config.parts[i];
    out.parts[p.shard.index] = p;
    if (remote) out.remote[p.shard.index] = config.remote_parts[i];
  }
  for (uint32_t i = 0; i < first.shard.count; ++i) {
    if (out.dirs[i].empty()) {
      return Err(Status::InvalidArgument("shard " + ShardName({i, first.shard.count}) +
                                         " is missing (" + std::to_string(first.shard.count) +
                                         " parts needed, " + std::to_string(given.size()) +
                                         " given)"));
    }
  }
  return out;
}

}  // namespace

Status WritePart(const StoreDraft& draft, const BuildConfig& config, const BuildOptions& options,
                 const SourceTree& tree, const std::string& listing, uint32_t num_records,
                 const BuildReport& report, const std::vector<ChangedFile>& changed,
                 const Placement& placement) {
  ShardPart part;
  part.generator = std::string("pcrfs ") + PCRFS_VERSION;
  part.source = config.source;
  part.options = options.Encode();
  part.shard = config.shard;
  part.num_files = tree.files.size();
  part.num_records = num_records;
  part.record_begin = report.record_begin;
  part.record_end = report.record_end;
  Fingerprint fp;
  fp.Add(listing);
  part.listing_digest = fp.Hex();
  part.listing_crc32c = crc32c::Value(listing.data(), listing.size());
  for (uint32_t r = part.record_begin; r < part.record_end; ++r) {
    PartRecord rec;
    rec.id = r;
    if (!draft.RecordSizeAndCrc(r, &rec.size, &rec.crc32c)) {  // uploaded: not on disk
      PCRFS_RETURN_IF_ERROR(CopyChecked(draft.RecordPath(r), "", &rec.size, &rec.crc32c));
    }
    rec.has_blocks = true;
    const uint64_t per = config.images_per_record;
    for (uint64_t i = r * per; i < std::min<uint64_t>(tree.files.size(), (r + 1) * per); ++i) {
      if (const auto* blocks = placement.BlockCrcs(i)) {
        rec.blocks.insert(rec.blocks.end(), blocks->begin(), blocks->end());
      }
    }
    part.records.push_back(rec);
  }
  part.changed = changed;
  PCRFS_RETURN_IF_ERROR(draft.WriteFile(kListingFile, listing));
  return draft.WriteFile(kPartFile, part.ToJson());
}

Status FetchRemoteParts(const std::vector<std::string>& urls, const RemoteOptions& options,
                        const std::string& dir, MergeConfig* config) {
  std::vector<std::shared_ptr<ObjectPart>> parts;
  for (const std::string& url : urls) {
    auto part = ObjectPart::Open(url, options);
    if (!part) return part.error();
    // A part, or a prefix whose folders are parts: one listing tells.
    std::vector<std::string> found;
    bool is_part = false;
    std::string token;
    for (;;) {
      auto page = (*part)->client->List(token, 1000);
      if (!page) return page.error();
      for (const auto& e : page->entries) {
        if (e.key == kPartFile) is_part = true;
        const size_t slash = e.key.find('/');
        if (slash != std::string::npos && e.key.substr(slash + 1) == kPartFile) {
          found.push_back(e.key.substr(0, slash));
        }
      }
      if (page->next_token.empty() || page->next_token == token) break;
      token = page->next_token;
    }
    if (is_part) {
      parts.push_back(std::move(*part));
      continue;
    }
    if (found.empty()) {
      return Status::NotFound((*part)->location.name + ": no " + kPartFile +
                              " there nor in its folders (was pcr build --shard completed?)");
    }
    std::string base = url;
    while (base.ends_with('/')) base.pop_back();
    for (const std::string& name : found) {
      auto sub = ObjectPart::Open(base + "/" + name, options);
      if (!sub) return sub.error();
      parts.push_back(std::move(*sub));
    }
  }
  config->parts.clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string local = dir + "/part-" + std::to_string(i);
    PCRFS_RETURN_IF_ERROR(RemoveTree(local));
    std::error_code ec;
    std::filesystem::create_directories(local, ec);
    if (ec) return Status::IOError(local + ": cannot create: " + ec.message());
    for (const char* name : {kPartFile, kListingFile}) {
      const std::string path = local + "/" + name;
      ObjectGet req;
      req.key = name;
      req.body_file = path;
      auto r = parts[i]->client->GetBlocking(std::move(req));
      if (!r && !r.error().IsNotFound()) return r.error();  // a missing one: LoadPart says
      if (!r) ::unlink(path.c_str());
    }
    config->parts.push_back(local);
  }
  config->remote_parts = std::move(parts);
  return Status::OK();
}

Status CheckMergeParts(const MergeConfig& config) {
  auto loaded = LoadParts(config);
  if (!loaded) return loaded.error();
  auto options = BuildOptions::Decode(loaded->parts[0].options);
  if (!options) return Status::Corruption(config.parts[0] + ": " + options.error().message());
  return Status::OK();
}

Result<BuildReport> MergeLocked(const MergeConfig& config, const StoreWriterLock& /*lock*/) {
  auto loaded = LoadParts(config);
  if (!loaded) return Err(loaded.error());
  auto options = BuildOptions::Decode(loaded->parts[0].options);
  if (!options) return Err(options.error());
  BuildConfig build;
  ApplyOptions(*options, &build);
  build.source = loaded->parts[0].source;
  build.store = config.store;
  build.threads = config.threads;
  build.force = config.force;
  build.progress = config.progress;
  build.sink = config.target;
  Merger merger(build, std::move(*options));
  auto report = merger.Run(loaded->dirs, loaded->parts, loaded->remote);
  // Unlike a build's, a merge's STORE.partial holds only copies: nothing to resume.
  if (!report) (void)RemoveTree(StoreDraft::PartialDir(config.store));
  return report;
}

}  // namespace pcrfs::tools
