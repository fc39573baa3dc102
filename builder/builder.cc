#include "builder/builder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "builder/archive_source.h"
#include "builder/build_stages.h"
#include "builder/remote_source.h"
#include "common/parallel.h"
#include "index/store.h"
#include "remote/azure.h"

namespace pcrfs::tools {
namespace fs = std::filesystem;
namespace {

// An archive source is a regular file; a folder source is a folder.
bool IsArchivePath(const std::string& source) {
  struct stat st;
  return ::stat(source.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// An archive: a local file, or a URL naming one (remote_source.h).
bool IsArchiveSource(const std::string& source) {
  return IsRemoteUrl(source) ? IsRemoteArchiveUrl(source) : IsArchivePath(source);
}

}  // namespace

std::string SourceKind(const std::string& source) {
  if (IsRemoteUrl(source)) {
    if (IsRemoteArchiveUrl(source)) return "remote-archive";
    return IsAzureUrl(source) ? "azure-prefix" : "s3-prefix";
  }
  return IsArchivePath(source) ? "archive" : "folder";
}

namespace {

// The options of a build that decide the store's bytes.
BuildOptions OptionsOf(const BuildConfig& c) {
  BuildOptions o;
  o.store = {c.strip_metadata,   c.images_per_record, static_cast<uint32_t>(c.max_input_scans),
             c.max_image_memory, c.max_jpeg_bytes,    c.quality_sample,
             c.quality_seed};
  o.archive = IsArchiveSource(c.source);
  o.nested_archives = c.nested_archives;
  return o;
}

bool IsDirectoryEmpty(const std::string& path) {
  std::error_code ec;
  return fs::is_empty(path, ec) && !ec;
}

// A build: list the source, then the stages records, placement, index (or a shard's part) and
// publish (build_stages.h).
class StoreBuilder {
 public:
  explicit StoreBuilder(const BuildConfig& config)
      : config_(config),
        options_(OptionsOf(config)),
        options_text_(options_.Encode() + "\n"),
        threads_(ResolveThreads(config.threads)),
        draft_(config.store, config.sink) {}

  Result<BuildReport> Run() {
    const auto start = std::chrono::steady_clock::now();
    const int64_t started_ms = UnixMillisNow();
    const ListingProgress listing = [this](uint64_t files, uint64_t bytes) {
      ReportProgress(config_.progress, BuildProgress::Stage::kListing, files, 0, bytes, 0);
    };
    ReportProgress(config_.progress, BuildProgress::Stage::kListing, 0, 0, 0, 0);
    auto source =
        BuildSource::Open(config_.source, config_.nested_archives, config_.remote, listing);
    if (!source) return Err(source.error());
    SourceTree tree = std::move((*source)->tree());
    threads_ = (*source)->ReadThreads(threads_);
    for (const SourceProblem& p : tree.problems) {
      report_.problems.push_back({p.rel_path, p.reason, ""});
    }
    report_.files_total = tree.files.size();
    const bool shard = config_.shard.enabled();
    std::string listing_bytes;
    if (shard) listing_bytes = EncodeListing(tree);  // before any change of stats

    std::string state = options_text_;  // what --resume must find again
    if (shard) {
      state.insert(state.size() - 1, " shard=" + std::to_string(config_.shard.index) + "/" +
                                         std::to_string(config_.shard.count));
    }
    Placement placement(tree.files.size(), config_.images_per_record);
    std::vector<ChangedFile> changed;
    QualityWindows windows;  // a shard's part has no quality sample
    Status s = draft_.Prepare(state, config_.resume);
    if (s.ok()) {
      s = WriteRecords(source->get(), &tree, config_, options_text_, threads_, draft_, &placement,
                       &report_, &changed, shard ? nullptr : &windows);
    }
    if (s.ok() && shard) {
      s = WritePart(draft_, config_, options_, tree, listing_bytes, report_.num_records, report_,
                    changed, placement);
    } else if (s.ok()) {
      s = WriteIndexAndManifest(draft_, &tree, &placement, report_.num_records, options_, threads_,
                                config_.progress, &report_.manifest, &windows);
      if (s.ok()) s = draft_.WriteProvenance(ProvenanceOf(started_ms), tree, report_);
    }
    if (s.ok()) s = draft_.Publish();
    if (!s.ok()) return Err(std::move(s));
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

 private:
  // provenance.json (builder/provenance.h), the last file before the store is published.
  Provenance ProvenanceOf(int64_t started_ms) const {
    Provenance p = NewProvenance("build", started_ms, threads_, options_);
    p.source_kind = SourceKind(config_.source);
    std::error_code ec;
    const fs::path abs = fs::absolute(config_.source, ec);
    if (IsRemoteUrl(config_.source)) {
      p.source = RedactUrl(config_.source);
    } else {
      p.source = ec ? config_.source : abs.lexically_normal().string();
    }
    return p;
  }

  const BuildConfig& config_;
  const BuildOptions options_;
  const std::string options_text_;  // options_.Encode() and a newline
  unsigned threads_;
  const StoreDraft draft_;
  BuildReport report_;
};

}  // namespace

Status CheckBuildArguments(const BuildConfig& config) {
  const std::string& src = config.source;
  const std::string& store = config.store;
  if (src.empty() || store.empty()) return Status::InvalidArgument("SRC and STORE are required");
  if (IsRemoteUrl(src)) {  // reached when the build starts; only its form is checked here
    if (!IsAzureUrl(src)) {
      auto url = ParseUrl(src);
      if (!url) return url.error();
      if (!url->is_s3() && !IsRemoteArchiveUrl(src)) {
        return Status::InvalidArgument(url->ToString() + ": not an archive URL");
      }
    }
    if (config.images_per_record == 0 || config.images_per_record > (1u << 20)) {
      return Status::InvalidArgument("--images-per-record must be between 1 and 1048576");
    }
    if (config.max_input_scans < 1) return Status::InvalidArgument("--max-scans must be >= 1");
    return CheckStoreTarget(store, config.force);
  }
  struct stat st;
  if (::stat(src.c_str(), &st) != 0) {
    return Status::FromErrno(src + ": cannot use as source", errno);
  }
  if (S_ISREG(st.st_mode)) {
    PCRFS_RETURN_IF_ERROR(ProbeArchive(src));
  } else if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(src + ": not a directory or an archive");
  } else if (::access(src.c_str(), R_OK | X_OK) != 0) {
    return Status::FromErrno(src + ": cannot read source", errno);
  } else if (IsDirectoryEmpty(src)) {
    return Status::InvalidArgument(src + ": source folder is empty");
  }
  if (config.images_per_record == 0 || config.images_per_record > (1u << 20)) {
    return Status::InvalidArgument("--images-per-record must be between 1 and 1048576");
  }
  if (config.max_input_scans < 1) return Status::InvalidArgument("--max-scans must be >= 1");

  std::error_code ec;
  // absolute() first: weakly_canonical keeps a bare relative name ("st") relative.
  const fs::path src_abs = fs::weakly_canonical(fs::absolute(src), ec);
  const fs::path store_abs = fs::weakly_canonical(fs::absolute(store), ec);
  if (ec) return Status::InvalidArgument(store + ": " + ec.message());
  // A store inside its own source would be walked into itself.
  auto [s, t] = std::mismatch(src_abs.begin(), src_abs.end(), store_abs.begin(), store_abs.end());
  if (s == src_abs.end()) {
    return Status::InvalidArgument(store + ": the store cannot be inside the source folder " + src);
  }
  return CheckStoreTarget(store, config.force);
}

namespace {

// A mount table path field unescaped: the kernel writes space, tab, newline and backslash as
// octal escapes (\040 ...).
std::string UnescapeMountField(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3') {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                               (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> PcrfsMountsOf(const std::string& store) {
  std::vector<std::string> mounts;
  char* real = ::realpath(store.c_str(), nullptr);
  if (real == nullptr) return mounts;
  const std::string path = real;
  std::free(real);
  std::string comma_free = path;  // the daemon's fsname has no commas (they split options)
  std::replace(comma_free.begin(), comma_free.end(), ',', '_');
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return mounts;
  char* line = nullptr;
  size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER"
    std::vector<std::string> fields;
    std::string field;
    for (const char* p = line; *p != '\0'; ++p) {
      if (*p == ' ' || *p == '\n') {
        if (!field.empty()) fields.push_back(std::move(field));
        field.clear();
      } else {
        field += *p;
      }
    }
    if (!field.empty()) fields.push_back(std::move(field));
    const auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || fields.end() - dash < 3) continue;
    if (dash[1] != "fuse.pcrfs") continue;
    const std::string source = UnescapeMountField(dash[2]);
    // Older daemons named it pcrfs:PATH.
    if (source == path || source == comma_free || source == "pcrfs:" + comma_free) {
      mounts.push_back(UnescapeMountField(fields[4]));
    }
  }
  std::free(line);
  std::fclose(f);
  return mounts;
}

Status CheckStoreTarget(const std::string& store, bool force) {
  if (store.empty()) return Status::InvalidArgument("STORE is required");
  std::error_code ec;
  const fs::path store_abs = fs::weakly_canonical(fs::absolute(store), ec);
  if (ec) return Status::InvalidArgument(store + ": " + ec.message());
  if (store_abs.filename().empty())
    return Status::InvalidArgument(store + ": not a valid store name");
  const fs::path parent = store_abs.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return Status::NotFound(store + ": parent folder " + parent.string() + " does not exist");
  }
  if (::access(parent.c_str(), W_OK) != 0) {
    return Status::FromErrno(store + ": cannot write to " + parent.string(), errno);
  }
  struct stat st;
  if (::lstat(store.c_str(), &st) == 0) {
    if (!force) {
      return Status::AlreadyExists(store + ": already exists (use --force to replace it)");
    }
    // --force replaces stores and parts only: never remove a folder of someone's data.
    const bool is_store = ::access((store + "/" + index::kManifestFile).c_str(), F_OK) == 0 ||
                          ::access((store + "/" + kPartFile).c_str(), F_OK) == 0;
    if (!S_ISDIR(st.st_mode) || !(is_store || IsDirectoryEmpty(store))) {
      return Status::InvalidArgument(store +
                                     ": exists and is not a pcrfs store; refusing to replace it");
    }
    // Replaced under a mount, the store would vanish from under its readers (the mount keeps
    // serving the old one's open records and fails the rest).
    if (const auto mounts = PcrfsMountsOf(store); !mounts.empty()) {
      return Status::InvalidArgument(store + ": mounted at " + mounts.front() +
                                     "; unmount it first (fusermount3 -u " + mounts.front() +
                                     "), then replace it with --force");
    }
  }
  return Status::OK();
}

Status CheckInterruptedBuild(const BuildConfig& config) {
  if (config.resume || config.force) return Status::OK();
  const uint64_t finished = StoreDraft(config.store).FinishedRecords();
  if (finished == 0) return Status::OK();  // nothing a rerun would lose
  return Status::InvalidArgument(StoreDraft::PartialDir(config.store) +
                                 ": an interrupted build left " + std::to_string(finished) +
                                 " finished record" + (finished == 1 ? "" : "s") +
                                 " there; --resume keeps " + (finished == 1 ? "it" : "them") +
                                 " (same options), --force discards " +
                                 (finished == 1 ? "it" : "them") + " and builds from the start");
}

Result<BuildReport> Build(const BuildConfig& config) {
  if (Status s = CheckBuildArguments(config); !s.ok()) return Err(std::move(s));
  auto lock = StoreWriterLock::Acquire(config.store);
  if (!lock) return Err(lock.error());
  if (Status s = CheckBuildArguments(config); !s.ok()) return Err(std::move(s));
  if (Status s = CheckInterruptedBuild(config); !s.ok()) return Err(std::move(s));
  return BuildLocked(config, *lock);
}

Result<BuildReport> BuildLocked(const BuildConfig& config, const StoreWriterLock& /*lock*/) {
  StoreBuilder builder(config);
  return builder.Run();
}

}  // namespace pcrfs::tools
