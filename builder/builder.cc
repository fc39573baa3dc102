#include "builder/builder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>

#include "builder/archive_source.h"
#include "builder/provenance.h"
#include "builder/quality_sample.h"
#include "builder/remote_source.h"
#include "builder/source_tree.h"
#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "common/parallel.h"
#include "index/compact_index.h"
#include "index/entry.h"
#include "index/record_reader.h"
#include "index/record_writer.h"
#include "index/store.h"
#include "index/store_index.h"
#include "remote/azure.h"

namespace pcrfs::tools {
namespace fs = std::filesystem;
namespace {

using index::PassthroughReason;

// What the store records for a codec outcome.
PassthroughReason StoredReason(codec::PassthroughReason r) {
  switch (r) {
    case codec::PassthroughReason::kNone:
      return PassthroughReason::kNone;
    case codec::PassthroughReason::kNotJpeg:
      return PassthroughReason::kNotJpeg;
    case codec::PassthroughReason::kEmpty:
      return PassthroughReason::kEmpty;
    case codec::PassthroughReason::kCorrupt:
      return PassthroughReason::kCorrupt;
    case codec::PassthroughReason::kTruncated:
      return PassthroughReason::kTruncated;
    case codec::PassthroughReason::kTooManyScans:
      return PassthroughReason::kTooManyScans;
    case codec::PassthroughReason::kTooLarge:
      return PassthroughReason::kTooLarge;
    case codec::PassthroughReason::kUnsupported:
      return PassthroughReason::kUnsupported;
    case codec::PassthroughReason::kTrailingData:
      return PassthroughReason::kTrailingData;
    case codec::PassthroughReason::kIncomplete:
      return PassthroughReason::kIncomplete;
  }
  return PassthroughReason::kCorrupt;  // unreachable: every outcome is listed
}

constexpr char kBuildStateDir[] = ".build";  // inside STORE.partial; removed on completion
constexpr char kOptionsFile[] = "options";

std::string PartialDir(const std::string& store) { return store + ".partial"; }

// The records a build writes: all of them, or a shard's range.
std::pair<uint32_t, uint32_t> RecordRange(const BuildConfig& c, uint32_t num_records) {
  return c.shard.enabled() ? ShardRecordRange(num_records, c.shard)
                           : std::make_pair(uint32_t{0}, num_records);
}

// An archive source is a regular file; a folder source is a folder.
bool IsArchivePath(const std::string& source) {
  struct stat st;
  return ::stat(source.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// An archive: a local file, or a URL naming one (remote_source.h).
bool IsArchiveSource(const std::string& source) {
  return IsRemoteUrl(source) ? IsRemoteArchiveUrl(source) : IsArchivePath(source);
}

// provenance.json's kind of source.
std::string SourceKind(const std::string& source) {
  if (IsRemoteUrl(source)) {
    if (IsRemoteArchiveUrl(source)) return "remote-archive";
    return IsAzureUrl(source) ? "azure-prefix" : "s3-prefix";
  }
  return IsArchivePath(source) ? "archive" : "folder";
}

std::string OptionsText(const BuildConfig& c) {
  return "format=" + std::to_string(index::kStoreFormatVersion) +
         " strip_metadata=" + std::to_string(c.strip_metadata) +
         " images_per_record=" + std::to_string(c.images_per_record) +
         " max_input_scans=" + std::to_string(c.max_input_scans) +
         " max_image_memory=" + std::to_string(c.max_image_memory) +
         " max_jpeg_bytes=" + std::to_string(c.max_jpeg_bytes) +
         " quality_sample=" + std::to_string(c.quality_sample) +
         " quality_seed=" + std::to_string(c.quality_seed) +
         (IsArchiveSource(c.source) ? " archive_nested=" + std::to_string(c.nested_archives) : "") +
         "\n";
}

// Files larger than this that are not transcoded are copied into their record a checksum
// block at a time when the record is written, never held whole in memory.
constexpr uint64_t kStreamAbove = uint64_t{16} << 20;
// A file that changes while it is read is read again this many times in all, then given up.
constexpr int kReadAttempts = 3;

// What identifies the version of a source file that was read.
struct FileStat {
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileStat&) const = default;
};

FileStat StatOf(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec,
          static_cast<uint32_t>(st.st_mtim.tv_nsec),
          st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
}

Result<FileStat> FstatOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Err(Status::FromErrno(path, errno));
  return StatOf(st);
}

// What became of one source file.
struct FileResult {
  bool unreadable = false;
  PassthroughReason reason = PassthroughReason::kNone;
  std::string detail;
  codec::ProgressiveJpeg jpeg;  // reason == kNone
  std::vector<uint8_t> raw;     // passthrough bytes
  // A large passthrough file: copied from `fd` when its record is written (StreamInto).
  bool stream = false;
  UniqueFd fd;
  std::unique_ptr<ArchiveMember> member;  // instead of fd for an archive; raw holds its head
  bool object = false;                    // instead of fd: an object of a BucketSource
  FileStat stat;                          // the version that was read
};

FileResult Unreadable(std::string detail) {
  FileResult r;
  r.unreadable = true;
  r.reason = PassthroughReason::kUnreadable;
  r.detail = std::move(detail);
  return r;
}

void ClassifyBytes(std::vector<uint8_t> data, const BuildConfig& config, FileResult* out);

// Whether a file of `size` bytes starting with `head` (at least its first 3 bytes) is kept byte
// for byte without transcoding: not a JPEG, or a JPEG over --max-jpeg-bytes; sets r's reason.
// Folders, archives and buckets decide the same way, before reading a large file whole.
bool KeptAsIs(std::span<const uint8_t> head, uint64_t size, const BuildConfig& config,
              FileResult* r) {
  if (!codec::LooksLikeJpeg(head)) {
    r->reason = PassthroughReason::kNotJpeg;
  } else if (size > config.max_jpeg_bytes) {
    r->reason = PassthroughReason::kTooBig;
    r->detail = "larger than --max-jpeg-bytes (" + std::to_string(config.max_jpeg_bytes) + ")";
  } else {
    return false;
  }
  return true;
}

// One attempt at reading and transcoding a file. *changed: the file changed while it was read.
FileResult ProcessOnce(const SourceTree& tree, uint32_t node, const BuildConfig& config,
                       bool* changed) {
  FileResult r;
  const std::string path = tree.AbsPath(tree.nodes[node]);
  auto fd = tree.OpenFile(node);  // relative to a folder: the path may exceed PATH_MAX
  if (!fd) return Unreadable(fd.error().message());
  auto before = FstatOf(fd->get(), path);
  if (!before) return Unreadable(before.error().message());
  r.stat = *before;
  if (before->size > kStreamAbove) {
    uint8_t head[3] = {};
    Status s = PreadFull(fd->get(), head, sizeof head, 0, path);
    if (!s.ok()) return Unreadable(s.message());
    if (KeptAsIs(head, before->size, config, &r)) {
      r.stream = true;
      r.fd = std::move(*fd);
      return r;
    }
  }
  auto data = ReadWholeFd(fd->get(), UINT64_MAX, path);
  if (!data) return Unreadable(data.error().message());
  auto after = FstatOf(fd->get(), path);
  if (!after) return Unreadable(after.error().message());
  if (!(*after == *before) || data->size() != before->size) {
    *changed = true;
    return r;
  }
  ClassifyBytes(std::move(*data), config, &r);
  return r;
}

// Transcodes `data` if it is a JPEG that may be; otherwise keeps it as passthrough bytes.
void ClassifyBytes(std::vector<uint8_t> data, const BuildConfig& config, FileResult* out) {
  FileResult& r = *out;
  if (data.empty()) {
    r.reason = PassthroughReason::kEmpty;
  } else if (!KeptAsIs(data, data.size(), config, &r)) {
    codec::TranscodeOptions opts;
    opts.strip_metadata = config.strip_metadata;
    opts.max_input_scans = config.max_input_scans;
    opts.max_memory_bytes = config.max_image_memory;
    codec::TranscodeResult t = codec::Transcode(data, opts);
    r.reason = StoredReason(t.reason);
    r.detail = std::move(t.detail);
    if (t.transcoded()) {
      r.jpeg = std::move(t.image);
      return;
    }
  }
  r.raw = std::move(data);
}

// Reads member `turn` of an archive source (file node `node`) and transcodes it. A large member
// that will not be transcoded keeps the archive (res.member) until its record streams it in.
FileResult ProcessMember(const SourceTree& tree, uint32_t node, size_t turn, ArchiveSource* archive,
                         const BuildConfig& config) {
  const SourceNode& n = tree.nodes[node];
  auto member = archive->OpenMember(turn);
  if (!member) return Unreadable(member.error().message());
  FileResult r;
  r.stat = {n.size, n.mtime_sec, n.mtime_nsec, 0};
  std::vector<uint8_t> data;
  if (n.size > kStreamAbove) {
    data.resize(3);
    Status s = (*member)->ReadExact(data);
    if (!s.ok()) return Unreadable(s.message());
    if (KeptAsIs(data, n.size, config, &r)) {
      r.stream = true;
      r.member = std::move(*member);
      r.raw = std::move(data);
      return r;
    }
  }
  const size_t have = data.size();
  data.resize(n.size);
  Status s = (*member)->ReadExact(std::span<uint8_t>(data).subspan(have));
  if (!s.ok()) return Unreadable(s.message());
  member->reset();  // the next member may be read while this one is transcoded
  ClassifyBytes(std::move(data), config, &r);
  return r;
}

// Bytes of an object fetched per GET: a whole small file in one, a large one in a few.
constexpr uint64_t kObjectChunk = uint64_t{8} << 20;

// Reads file node `node` of a bucket source and transcodes it. A large object that will not be
// transcoded is fetched later, when its record streams it in (res.object).
FileResult ProcessObject(const SourceTree& tree, uint32_t node, const BucketSource& bucket,
                         const BuildConfig& config) {
  const SourceNode& n = tree.nodes[node];
  FileResult r;
  r.stat = {n.size, n.mtime_sec, n.mtime_nsec, 0};
  if (n.size > kStreamAbove) {
    uint8_t head[3] = {};
    Status s = bucket.Read(tree, node, 0, head);
    if (!s.ok()) return Unreadable(s.message());
    if (KeptAsIs(head, n.size, config, &r)) {
      r.stream = true;
      r.object = true;
      return r;
    }
  }
  std::vector<uint8_t> data(n.size);
  for (uint64_t at = 0; at < n.size; at += kObjectChunk) {
    const auto len = static_cast<size_t>(std::min(kObjectChunk, n.size - at));
    Status s = bucket.Read(tree, node, at, std::span<uint8_t>(data).subspan(at, len));
    if (!s.ok()) return Unreadable(s.message());
  }
  ClassifyBytes(std::move(data), config, &r);
  return r;
}

FileResult ProcessFile(const SourceTree& tree, uint32_t node, const BuildConfig& config,
                       ArchiveSource* archive, const BucketSource* bucket, size_t turn) {
  try {
    if (archive != nullptr) return ProcessMember(tree, node, turn, archive, config);
    if (bucket != nullptr) return ProcessObject(tree, node, *bucket, config);
    for (int attempt = 1;; ++attempt) {
      bool changed = false;
      FileResult r = ProcessOnce(tree, node, config, &changed);
      if (!changed) return r;
      if (attempt == kReadAttempts) {
        return Unreadable("changed while being read (" + std::to_string(kReadAttempts) +
                          " attempts)");
      }
    }
  } catch (const std::bad_alloc&) {
    return Unreadable("out of memory");
  }
}

// Runs ProcessFile over file nodes of a tree on `threads` threads and hands the results to the
// consumer in order. Workers run ahead of the consumer by up to `window` files and kBufferBudget
// bytes of results, so they keep busy while the consumer writes and fsyncs a finished record.
class OrderedTranscoder {
 public:
  static constexpr uint64_t kBufferBudget = uint64_t{128} << 20;

  // node_of(i) is the node of file i of count in *tree; it is called from the worker threads.
  // With an archive, file i is its member turn i (ArchiveSource::StartReading already called).
  OrderedTranscoder(size_t count, const SourceTree* tree, std::function<uint32_t(size_t)> node_of,
                    const BuildConfig* config, unsigned threads, ArchiveSource* archive,
                    const BucketSource* bucket)
      : count_(count),
        tree_(tree),
        archive_(archive),
        bucket_(bucket),
        node_of_(std::move(node_of)),
        config_(config),
        window_(std::max<size_t>(16, threads * 64)) {
    slots_.resize(window_);
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~OrderedTranscoder() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    if (archive_ != nullptr) archive_->Cancel();  // wakes workers waiting for their member
    work_cv_.SignalAll();
    for (auto& t : workers_) t.join();
  }
  OrderedTranscoder(const OrderedTranscoder&) = delete;
  OrderedTranscoder& operator=(const OrderedTranscoder&) = delete;

  // REQUIRES: called for i = 0, 1, 2, ... in order.
  FileResult Take(size_t i) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (!slots_[i % window_].has_value()) done_cv_.Wait(&mu_);
    FileResult r = std::move(*slots_[i % window_]);
    slots_[i % window_].reset();
    buffered_ -= ResultBytes(r);
    ++next_consume_;
    l.Unlock();
    work_cv_.SignalAll();
    return r;
  }

 private:
  void WorkerLoop() EXCLUDES(mu_) {
    for (;;) {
      size_t i;
      {
        MutexLock l(&mu_);
        work_cv_.Wait(&mu_, [&]() REQUIRES(mu_) {
          return stop_ || next_claim_ >= count_ ||
                 (next_claim_ < next_consume_ + window_ &&
                  (buffered_ < kBufferBudget || next_claim_ == next_consume_));
        });
        if (stop_ || next_claim_ >= count_) return;
        i = next_claim_++;
      }
      FileResult r = ProcessFile(*tree_, node_of_(i), *config_, archive_, bucket_, i);
      {
        MutexLock l(&mu_);
        buffered_ += ResultBytes(r);
        slots_[i % window_] = std::move(r);
      }
      done_cv_.SignalAll();
    }
  }

  static uint64_t ResultBytes(const FileResult& r) { return r.jpeg.bytes.size() + r.raw.size(); }

  const size_t count_;
  const SourceTree* tree_;
  ArchiveSource* const archive_;      // null unless the source is an archive
  const BucketSource* const bucket_;  // null unless the source is an S3 prefix
  const std::function<uint32_t(size_t)> node_of_;
  const BuildConfig* config_;
  const size_t window_;
  uint64_t buffered_ GUARDED_BY(mu_) = 0;  // bytes of results not yet taken
  Mutex mu_;
  CondVar work_cv_;  // a slot freed, or stop
  CondVar done_cv_;  // a result arrived
  std::vector<std::optional<FileResult>> slots_ GUARDED_BY(mu_);
  size_t next_claim_ GUARDED_BY(mu_) = 0;
  size_t next_consume_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Where one source file ended up. Its 10 piece references are kept varint-encoded in an
// arena (~90 bytes instead of 240), since the builder holds one per file until the index is
// written: 150 MB less at a million files.
struct FileLocation {
  bool stored = false;
  index::EntryKind kind = index::EntryKind::kPassthrough;
  PassthroughReason reason = PassthroughReason::kNone;
  uint32_t record = 0;
  uint32_t slot = 0;
  uint64_t pieces_at = 0;  // offset in StoreBuilder::piece_arena_
};

bool IsDirectoryEmpty(const std::string& path) {
  std::error_code ec;
  return fs::is_empty(path, ec) && !ec;
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
  return Status::OK();
}

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::FromErrno("cannot create " + path, errno);
  }
  return Status::OK();
}

class StoreBuilder {
 public:
  explicit StoreBuilder(const BuildConfig& config) : config_(config) {
    threads_ = ResolveThreads(config.threads);
    partial_ = PartialDir(config.store);
  }

  Result<BuildReport> Run() {
    const auto start = std::chrono::steady_clock::now();
    started_ms_ = UnixMillisNow();
    const ListingProgress listing = [this](uint64_t files, uint64_t bytes) {
      Progress(BuildProgress::Stage::kListing, files, 0, bytes, 0);
    };
    Progress(BuildProgress::Stage::kListing, 0, 0, 0, 0);
    if (IsRemoteUrl(config_.source)) {
      auto access = RemoteAccess::Create(config_.source, config_.remote);
      if (!access) return Err(access.error());
      if (IsRemoteArchiveUrl(config_.source)) {
        auto shared = std::make_shared<const RemoteAccess>(std::move(*access));
        auto archive = ArchiveSource::Open(shared->name, config_.nested_archives, listing,
                                           RemoteArchiveOpener(shared));
        if (!archive) return Err(archive.error());
        archive_ = std::move(*archive);
        tree_ = std::move(archive_->tree());
      } else {
        auto bucket = BucketSource::Open(std::move(*access), listing);
        if (!bucket) return Err(bucket.error());
        bucket_ = std::move(*bucket);
        tree_ = std::move(bucket_->tree());
        // Objects are read over the network: more at once than there are cores.
        threads_ = std::max<unsigned>(threads_, static_cast<unsigned>(config_.remote.connections));
      }
    } else if (IsArchivePath(config_.source)) {
      auto archive = ArchiveSource::Open(config_.source, config_.nested_archives, listing);
      if (!archive) return Err(archive.error());
      archive_ = std::move(*archive);
      tree_ = std::move(archive_->tree());
    } else {
      auto tree = WalkSource(config_.source, listing);
      if (!tree) return Err(tree.error());
      tree_ = std::move(*tree);
    }
    for (const SourceProblem& p : tree_.problems) {
      report_.problems.push_back({p.rel_path, p.reason, ""});
    }
    report_.files_total = tree_.files.size();
    if (config_.shard.enabled()) listing_ = EncodeListing(tree_);  // before any change of stats

    locations_.assign(tree_.files.size(), FileLocation());
    const bool shard = config_.shard.enabled();
    for (Status (StoreBuilder::*step)() :
         {&StoreBuilder::PreparePartial, &StoreBuilder::WriteRecords,
          shard ? &StoreBuilder::WritePart : &StoreBuilder::WriteIndexAndManifest,
          shard ? &StoreBuilder::NoStep : &StoreBuilder::WriteProvenance, &StoreBuilder::Publish}) {
      Status s = (this->*step)();
      if (!s.ok()) return Err(std::move(s));
    }
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

 private:
  std::string RecordPath(uint32_t id) const { return partial_ + "/" + index::RecordFileName(id); }
  uint32_t NodeIndex(const SourceNode& n) const {
    return static_cast<uint32_t>(&n - tree_.nodes.data());
  }

  void Progress(BuildProgress::Stage stage, uint64_t done, uint64_t total, uint64_t bytes,
                uint64_t bytes_total) const {
    if (config_.progress) config_.progress({stage, done, total, bytes, bytes_total});
  }

  Status NoStep() { return Status::OK(); }

  // provenance.json (builder/provenance.h), the last file before the store is published.
  Status WriteProvenance() {
    Provenance p;
    p.command = shards_ > 0 ? "merge" : "build";
    p.source_kind = shards_ > 0 ? merged_kind_ : SourceKind(config_.source);
    std::error_code ec;
    const fs::path abs = fs::absolute(config_.source, ec);
    if (IsRemoteUrl(config_.source)) {
      p.source = RedactUrl(config_.source);
    } else {
      p.source = shards_ > 0 || ec ? config_.source : abs.lexically_normal().string();
    }
    p.shards = shards_;
    p.generator = std::string("pcrfs ") + PCRFS_VERSION;
    p.commit = SourceCommit();
    p.host = HostName();
    p.started_ms = started_ms_;
    p.finished_ms = UnixMillisNow();
    p.threads = threads_;
    p.nested_archives = config_.nested_archives;
    p.files_listed = tree_.files.size();
    p.not_stored = report_.problems.size();
    p.changed = report_.changed.size();
    p.records_kept = report_.records_reused;
    const std::string json = p.ToJson();
    return WriteFileAtomic(partial_ + "/" + kProvenanceFile, json.data(), json.size());
  }
  std::string FingerprintPath(uint32_t id) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "/%08u.members", id);
    return partial_ + "/" + kBuildStateDir + buf;
  }

  Status PreparePartial() {
    const std::string state = partial_ + "/" + kBuildStateDir;
    std::string options = OptionsText(config_);
    if (config_.shard.enabled()) {
      options.insert(options.size() - 1, " shard=" + std::to_string(config_.shard.index) + "/" +
                                             std::to_string(config_.shard.count));
    }
    struct stat st;
    if (::stat(partial_.c_str(), &st) == 0) {
      bool keep = false;
      if (config_.resume) {
        auto old = ReadWholeFile(state + "/" + kOptionsFile, 1 << 20);
        if (old && std::string(old->begin(), old->end()) == options) {
          keep = true;
        } else if (old) {
          return Status::InvalidArgument(
              partial_ + ": the interrupted build used other options (" +
              std::string(old->begin(), old->end() - (old->empty() ? 0 : 1)) +
              "); resume with the same options, or build without --resume");
        }
      }
      if (!keep) PCRFS_RETURN_IF_ERROR(RemoveTree(partial_));
    }
    PCRFS_RETURN_IF_ERROR(MakeDir(partial_));
    PCRFS_RETURN_IF_ERROR(MakeDir(partial_ + "/" + index::kRecordsDir));
    PCRFS_RETURN_IF_ERROR(MakeDir(state));
    return WriteFileAtomic(state + "/" + kOptionsFile, options.data(), options.size());
  }

  std::string MembersFingerprint(size_t begin, size_t end) const {
    Fingerprint fp;
    fp.Add(OptionsText(config_));
    for (size_t i = begin; i < end; ++i) {
      const SourceNode& n = tree_.nodes[tree_.files[i]];
      fp.Add(tree_.RelPath(n));
      fp.Add64(n.size);
      fp.Add64(static_cast<uint64_t>(n.mtime_sec));
      fp.Add64(n.mtime_nsec);
    }
    return fp.Hex();
  }

  // On --resume: a complete record whose members and their sizes and mtimes are unchanged.
  std::optional<index::RecordLayout> ReusableRecord(uint32_t id, size_t begin, size_t end,
                                                    const std::string& fp) const {
    if (!config_.resume) return std::nullopt;
    auto saved = ReadWholeFile(FingerprintPath(id), 1024);
    if (!saved || std::string(saved->begin(), saved->end()) != fp) return std::nullopt;
    auto file = PosixRandomAccessFile::Open(RecordPath(id));
    if (!file) return std::nullopt;
    auto layout = index::ReadRecordLayout(**file);
    if (!layout || layout->images.size() != end - begin) return std::nullopt;
    for (size_t i = begin; i < end; ++i) {
      if (layout->images[i - begin].path != tree_.RelPath(tree_.nodes[tree_.files[i]])) {
        return std::nullopt;
      }
    }
    return std::move(*layout);
  }

  // Records where the files of `layout` (the files from position `begin` on) are stored, and
  // the block CRCs of their large pieces: `blocks` from the writer, or for a record kept by
  // --resume (blocks null) computed by reading those pieces again.
  Status Place(uint32_t record, const index::RecordLayout& layout, size_t begin,
               const std::vector<index::PieceBlockCrcs>* blocks) {
    for (size_t s = 0; s < layout.images.size(); ++s) {
      const index::RecordImage& img = layout.images[s];
      FileLocation& loc = locations_[begin + s];
      loc.record = record;
      loc.slot = static_cast<uint32_t>(s);
      loc.kind = img.kind;
      loc.reason = img.passthrough_reason;
      loc.pieces_at = piece_arena_.size();
      for (const index::PieceRef& p : img.pieces) {
        PutVarint64(&piece_arena_, p.offset);
        PutVarint64(&piece_arena_, p.length);
        PutFixed32(&piece_arena_, p.masked_crc);
      }
      loc.stored = img.passthrough_reason != PassthroughReason::kUnreadable;
    }
    if (blocks != nullptr) {
      for (const index::PieceBlockCrcs& b : *blocks) block_crcs_[begin + b.slot].push_back(b);
      return Status::OK();
    }
    std::unique_ptr<RandomAccessFile> file;
    for (size_t s = 0; s < layout.images.size(); ++s) {
      for (int g = 1; g <= index::kNumGroups; ++g) {
        const index::PieceRef& p = layout.images[s].pieces[static_cast<size_t>(g - 1)];
        if (!index::HasBlockCrcs(p.length)) continue;
        if (!file) {
          auto opened = PosixRandomAccessFile::Open(RecordPath(record));
          if (!opened) return opened.error();
          file = std::move(*opened);
        }
        auto crcs = index::ComputeBlockCrcs(*file, p);
        if (!crcs) return crcs.error();
        block_crcs_[begin + s].push_back({static_cast<uint32_t>(s), g, std::move(*crcs)});
      }
    }
    return Status::OK();
  }

  Status WriteRecords() {
    const size_t n = tree_.files.size();
    const size_t per = config_.images_per_record;
    const auto num_records = static_cast<uint32_t>((n + per - 1) / per);
    num_records_ = num_records;
    const auto [first, last] = RecordRange(config_, num_records);
    const size_t files = std::min(n, last * per) - std::min(n, first * per);
    report_.record_begin = first;
    report_.record_end = last;
    report_.num_records = num_records;
    report_.shard_files = files;

    // Decide which records survive from an interrupted build; transcode only the rest.
    std::vector<std::optional<index::RecordLayout>> reused(num_records);
    std::vector<std::string> fps(num_records);
    std::vector<uint32_t> todo;  // nodes to transcode
    for (uint32_t r = first; r < last; ++r) {
      const size_t begin = r * per, end = std::min(n, begin + per);
      fps[r] = MembersFingerprint(begin, end);
      reused[r] = ReusableRecord(r, begin, end, fps[r]);
      if (reused[r]) continue;
      for (size_t i = begin; i < end; ++i) {
        todo.push_back(tree_.files[i]);
      }
    }

    uint64_t bytes_total = 0;
    for (size_t i = std::min(n, first * per); i < std::min(n, last * per); ++i) {
      bytes_total += tree_.nodes[tree_.files[i]].size;
    }
    uint64_t done = 0, bytes = 0;
    auto tick = [&](size_t begin, size_t end) {
      done += end - begin;
      for (size_t i = begin; i < end; ++i) bytes += tree_.nodes[tree_.files[i]].size;
      Progress(BuildProgress::Stage::kFiles, done, files, bytes, bytes_total);
    };
    Progress(BuildProgress::Stage::kFiles, 0, files, 0, bytes_total);

    if (archive_) archive_->StartReading(todo);
    OrderedTranscoder pool(
        todo.size(), &tree_, [&](size_t i) { return todo[i]; }, &config_, threads_, archive_.get(),
        bucket_.get());
    size_t next = 0;  // index into todo
    for (uint32_t r = first; r < last; ++r) {
      const size_t begin = r * per, end = std::min(n, begin + per);
      if (reused[r]) {
        PCRFS_RETURN_IF_ERROR(Place(r, *reused[r], begin, nullptr));
        ++report_.records_reused;
        tick(begin, end);
        continue;
      }
      auto writer = index::RecordWriter::Create(RecordPath(r));
      if (!writer) return writer.error();
      for (size_t i = begin; i < end; ++i) {
        FileResult res = pool.Take(next++);
        SourceNode& node = tree_.nodes[tree_.files[i]];
        const size_t changes = report_.changed.size();
        PCRFS_RETURN_IF_ERROR(AddToRecord(writer->get(), &node, &res));
        if (report_.changed.size() != changes) {
          changed_.push_back({i, node.size, node.mtime_sec, node.mtime_nsec});
        }
        tick(i, i + 1);
      }
      auto layout = (*writer)->Finish();
      if (!layout) return layout.error();
      PCRFS_RETURN_IF_ERROR(Place(r, *layout, begin, &(*writer)->block_crcs()));
      PCRFS_RETURN_IF_ERROR(WriteFileAtomic(FingerprintPath(r), fps[r].data(), fps[r].size()));
    }
    return Status::OK();
  }

  Status AddToRecord(index::RecordWriter* writer, SourceNode* node, FileResult* res) {
    const std::string rel = tree_.RelPath(*node);
    if (res->stream && !res->unreadable) StreamInto(writer, *node, res);
    const PassthroughReason reason = res->reason;
    if (res->unreadable) {
      report_.problems.push_back({rel, "unreadable", res->detail});
      return writer->Add(rel, index::EntryKind::kPassthrough, reason, {});
    }
    // The index describes the version that was read, which may be newer than the listing's.
    if (res->stat.size != node->size || res->stat.mtime_sec != node->mtime_sec ||
        res->stat.mtime_nsec != node->mtime_nsec) {
      report_.changed.push_back({rel, "changed since the source was listed",
                                 "stored as read (" + std::to_string(res->stat.size) + " bytes)"});
      node->size = res->stat.size;
      node->mtime_sec = res->stat.mtime_sec;
      node->mtime_nsec = res->stat.mtime_nsec;
    }
    if (res->reason != PassthroughReason::kNotJpeg && res->reason != PassthroughReason::kEmpty &&
        res->reason != PassthroughReason::kNone) {
      report_.passthrough_notes.push_back(
          {rel, index::PassthroughReasonName(res->reason), res->detail});
    }
    if (res->stream) return Status::OK();  // StreamInto added it
    if (res->reason == PassthroughReason::kNone) {
      std::array<std::span<const uint8_t>, codec::kNumGroups> pieces;
      for (int g = 1; g <= codec::kNumGroups; ++g) pieces[g - 1] = res->jpeg.piece(g);
      return writer->Add(rel, index::EntryKind::kJpeg, PassthroughReason::kNone, pieces);
    }
    std::span<const uint8_t> whole(res->raw);
    return writer->Add(rel, index::EntryKind::kPassthrough, reason,
                       std::span<const std::span<const uint8_t>>(&whole, 1));
  }

  // Copies a large passthrough file into the record a block at a time. A file that changes
  // while it is copied is copied again (kReadAttempts in all); one that keeps changing or
  // cannot be read becomes res->unreadable, and nothing of it stays in the record.
  void StreamInto(index::RecordWriter* writer, const SourceNode& node, FileResult* res) {
    const std::string path = tree_.AbsPath(node);
    if (res->member) {  // an archive member: one pass, in order, from the archive's stream
      Status read_status;
      Status s =
          writer->AddStream(tree_.RelPath(node), res->reason, res->stat.size,
                            [&](uint64_t offset, std::span<uint8_t> dst) {
                              size_t from_head = 0;
                              if (offset < res->raw.size()) {
                                from_head = std::min(dst.size(), res->raw.size() - offset);
                                std::copy_n(res->raw.begin() + offset, from_head, dst.begin());
                              }
                              read_status = res->member->ReadExact(dst.subspan(from_head));
                              return read_status;
                            });
      res->member.reset();
      if (!s.ok() && !read_status.ok()) *res = Unreadable(read_status.message());
      return;
    }
    if (res->object) {  // an object of a bucket: sequential ranged GETs, one chunk in memory
      Status read_status;
      std::vector<uint8_t> chunk;
      uint64_t chunk_at = 0;
      Status s = writer->AddStream(
          tree_.RelPath(node), res->reason, res->stat.size,
          [&](uint64_t offset, std::span<uint8_t> dst) {
            size_t done = 0;
            while (done < dst.size()) {
              const uint64_t at = offset + done;
              if (at < chunk_at || at >= chunk_at + chunk.size()) {
                chunk_at = at;
                chunk.resize(static_cast<size_t>(std::min(kObjectChunk, res->stat.size - at)));
                read_status = bucket_->Read(tree_, NodeIndex(node), at, chunk);
                if (!read_status.ok()) {
                  chunk.clear();
                  return read_status;
                }
              }
              const size_t from = static_cast<size_t>(at - chunk_at);
              const size_t n = std::min(dst.size() - done, chunk.size() - from);
              std::copy_n(chunk.begin() + static_cast<ptrdiff_t>(from), n, dst.begin() + done);
              done += n;
            }
            return Status::OK();
          });
      if (!s.ok() && !read_status.ok()) *res = Unreadable(read_status.message());
      return;
    }
    const int fd = res->fd.get();
    for (int attempt = 1;; ++attempt) {
      bool changed = false;
      Status read_status;
      Status s = writer->AddStream(
          tree_.RelPath(node), res->reason, res->stat.size,
          [&](uint64_t offset, std::span<uint8_t> dst) {
            read_status = PreadFull(fd, dst.data(), dst.size(), offset, path);
            if (read_status.ok() && offset + dst.size() == res->stat.size) {
              auto now = FstatOf(fd, path);
              uint8_t more;
              if (!now) {
                read_status = now.error();
              } else if (!(*now == res->stat) || ::pread(fd, &more, 1, offset + dst.size()) > 0) {
                changed = true;
                read_status = Status::IOError(path + ": changed while being read");
              }
            }
            return read_status;
          });
      if (s.ok()) return;
      if (read_status.ok()) return;  // the writer itself failed: Finish reports it
      auto now = FstatOf(fd, path);
      if (!changed || attempt == kReadAttempts || !now) {
        *res = Unreadable(changed ? "changed while being read (" + std::to_string(kReadAttempts) +
                                        " attempts)"
                                  : read_status.message());
        return;
      }
      res->stat = *now;
    }
  }

  // Inode numbers: breadth-first, so the children of every directory are consecutive and in
  // name order (readdir walks an inode range). Files that could not be stored get none.
  struct InodeLayout {
    std::vector<int64_t> file_pos;      // position in tree_.files by node, -1 for directories
    std::vector<uint32_t> order;        // node index by inode - 1
    std::vector<uint64_t> ino;          // inode by node index (0: not stored)
    std::vector<uint64_t> first_child;  // of each directory, by node index
  };

  bool Included(const InodeLayout& layout, uint32_t node) const {
    return tree_.nodes[node].is_dir ||
           locations_[static_cast<size_t>(layout.file_pos[node])].stored;
  }

  InodeLayout AssignInodes() const {
    InodeLayout l;
    l.file_pos.assign(tree_.nodes.size(), -1);
    for (size_t i = 0; i < tree_.files.size(); ++i)
      l.file_pos[tree_.files[i]] = static_cast<int64_t>(i);
    l.order = {0};
    l.ino.assign(tree_.nodes.size(), 0);
    l.ino[0] = index::kRootIno;
    l.first_child.assign(tree_.nodes.size(), 0);
    for (size_t q = 0; q < l.order.size(); ++q) {
      const uint32_t dir = l.order[q];
      if (!tree_.nodes[dir].is_dir) continue;
      l.first_child[dir] = l.order.size() + 1;
      for (uint32_t c : tree_.nodes[dir].children) {
        if (!Included(l, c)) continue;
        l.ino[c] = l.order.size() + 1;
        l.order.push_back(c);
      }
    }
    return l;
  }

  // The index entry of node `node_index`, counted into the manifest's totals.
  index::Entry EntryOf(const InodeLayout& l, uint32_t node_index, index::Manifest* m) const {
    const SourceNode& n = tree_.nodes[node_index];
    index::Entry e;
    e.ino = l.ino[node_index];
    e.parent = l.ino[n.parent];
    e.name = n.name;
    e.mode = n.mode;
    e.mtime_sec = n.mtime_sec;
    e.mtime_nsec = n.mtime_nsec;
    if (n.is_dir) {
      e.kind = index::EntryKind::kDirectory;
      e.first_child = l.first_child[node_index];
      for (uint32_t c : n.children) {
        if (!Included(l, c)) continue;
        ++e.num_children;
        if (tree_.nodes[c].is_dir) ++e.num_subdirs;
      }
      ++m->num_directories;
    } else {
      const FileLocation& loc = locations_[static_cast<size_t>(l.file_pos[node_index])];
      e.kind = loc.kind;
      e.passthrough_reason = loc.reason;
      e.source_size = n.size;
      e.record = loc.record;
      e.slot = loc.slot;
      e.pieces = PiecesOf(loc);
      m->source_bytes += n.size;
      if (loc.kind == index::EntryKind::kJpeg) {
        ++m->num_jpeg;
        m->source_jpeg_bytes += n.size;
      } else {
        ++m->num_passthrough;
        ++m->passthrough_by_reason[index::PassthroughReasonName(loc.reason)];
      }
      for (int k = 1; k <= index::kNumGroups; ++k) {
        const uint64_t size = index::LevelSize(loc.kind, e.pieces, k);
        m->level_bytes[k - 1] += size;
        if (loc.kind == index::EntryKind::kJpeg) m->jpeg_level_bytes[k - 1] += size;
      }
    }
    ++m->num_entries;
    return e;
  }

  // Every stored node's entry in inode order, with the block CRCs of its large pieces.
  Status AddEntries(index::CompactIndexWriter* writer, index::Manifest* m) const {
    const InodeLayout layout = AssignInodes();
    for (uint32_t node_index : layout.order) {
      const index::Entry e = EntryOf(layout, node_index, m);
      PCRFS_RETURN_IF_ERROR(writer->AddEntry(e));
      if (tree_.nodes[node_index].is_dir) continue;
      auto blocks = block_crcs_.find(static_cast<size_t>(layout.file_pos[node_index]));
      if (blocks == block_crcs_.end()) continue;
      for (const index::PieceBlockCrcs& b : blocks->second) {
        PCRFS_RETURN_IF_ERROR(writer->AddBlockCrcs(e.ino, b.group, b.masked));
      }
    }
    return Status::OK();
  }

  // Each record's layout, read back from the finished record file.
  Status AddRecords(index::CompactIndexWriter* writer) const {
    for (uint32_t r = 0; r < num_records_; ++r) {
      auto file = PosixRandomAccessFile::Open(RecordPath(r));
      if (!file) return file.error();
      auto layout = index::ReadRecordLayout(**file);
      if (!layout) return layout.error();
      index::RecordInfo info;
      info.id = r;
      info.file_size = layout->file_size;
      info.data_offset = layout->data_offset;
      info.group_offset = layout->group_offset;
      info.num_images = static_cast<uint32_t>(layout->images.size());
      PCRFS_RETURN_IF_ERROR(writer->AddRecord(info));
    }
    return Status::OK();
  }

  // Measures a sample's fidelity on the finished store and adds it to the manifest, so
  // `pcr inspect` and `pcrfs -o msssim=X` can answer at once.
  Status AddQualitySample(index::Manifest* m) {
    auto store = index::Store::Open(partial_);
    if (!store) return store.error();
    uint32_t skipped = 0;
    auto quality =
        MeasureStoreQuality(**store, config_.quality_sample, config_.quality_seed, threads_,
                            &skipped, [this](uint64_t done, uint64_t total) {
                              Progress(BuildProgress::Stage::kQuality, done, total, 0, 0);
                            });
    if (!quality) return quality.error();
    m->quality.measured = (*quality)[0].n;
    m->quality.seed = config_.quality_seed;
    m->quality.levels = *quality;
    return Status::OK();
  }

  Status WriteIndexAndManifest() {
    // Index format 4 (index/compact_index.h): what a store ships.
    const std::string index_path = partial_ + "/" + index::kCompactIndexFile;
    auto writer = std::make_unique<index::CompactIndexWriter>(index_path);

    index::Manifest& m = report_.manifest;
    m.generator = std::string("pcrfs ") + PCRFS_VERSION;
    m.options = {config_.strip_metadata,
                 config_.images_per_record,
                 static_cast<uint32_t>(config_.max_input_scans),
                 config_.max_image_memory,
                 config_.max_jpeg_bytes,
                 config_.quality_sample,
                 config_.quality_seed};
    m.num_records = num_records_;

    PCRFS_RETURN_IF_ERROR(AddEntries(writer.get(), &m));
    PCRFS_RETURN_IF_ERROR(AddRecords(writer.get()));
    PCRFS_RETURN_IF_ERROR(
        writer->PutMeta("format_version", std::to_string(index::kStoreFormatVersion)));
    PCRFS_RETURN_IF_ERROR(writer->PutMeta("num_records", std::to_string(num_records_)));
    auto bytes = writer->Finish();
    if (!bytes) return bytes.error();
    writer.reset();
    PCRFS_RETURN_IF_ERROR(index::WriteCompactIndexFile(index_path, *bytes));

    const std::string manifest_path = partial_ + "/" + index::kManifestFile;
    const std::string json = m.ToJson();
    PCRFS_RETURN_IF_ERROR(WriteFileAtomic(manifest_path, json.data(), json.size()));
    if (config_.quality_sample == 0 || m.num_jpeg == 0) return Status::OK();

    PCRFS_RETURN_IF_ERROR(AddQualitySample(&m));
    const std::string with_quality = m.ToJson();
    return WriteFileAtomic(manifest_path, with_quality.data(), with_quality.size());
  }

  // A shard's part.json and listing.bin, after its records (shard_part.h).
  Status WritePart() {
    ShardPart part;
    part.generator = std::string("pcrfs ") + PCRFS_VERSION;
    part.source = config_.source;
    part.options = OptionsText(config_);
    part.options.pop_back();  // the newline
    part.shard = config_.shard;
    part.num_files = tree_.files.size();
    part.num_records = num_records_;
    part.record_begin = report_.record_begin;
    part.record_end = report_.record_end;
    Fingerprint fp;
    fp.Add(listing_);
    part.listing_digest = fp.Hex();
    part.listing_crc32c = crc32c::Value(listing_.data(), listing_.size());
    for (uint32_t r = part.record_begin; r < part.record_end; ++r) {
      PartRecord rec{r, 0, 0};
      PCRFS_RETURN_IF_ERROR(CopyChecked(RecordPath(r), "", &rec.size, &rec.crc32c));
      part.records.push_back(rec);
    }
    part.changed = changed_;
    PCRFS_RETURN_IF_ERROR(
        WriteFileAtomic(partial_ + "/" + kListingFile, listing_.data(), listing_.size()));
    const std::string json = part.ToJson();
    return WriteFileAtomic(partial_ + "/" + kPartFile, json.data(), json.size());
  }

  // Reads `from` whole, copying it to `to` unless empty, and returns its size and CRC32C.
  // A hard link where the part and the store share a filesystem (records are immutable: no
  // second copy of the dataset's bytes), else a copy; either way every byte is read and
  // checked by the caller against *size and *crc.
  static Status LinkOrCopyChecked(const std::string& from, const std::string& to, uint64_t* size,
                                  uint32_t* crc) {
    if (::link(from.c_str(), to.c_str()) == 0) return CopyChecked(to, "", size, crc);
    if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
      return Status::FromErrno("link " + from + " -> " + to, errno);
    }
    return CopyChecked(from, to, size, crc);
  }

  static Status CopyChecked(const std::string& from, const std::string& to, uint64_t* size,
                            uint32_t* crc) {
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

 public:
  // `pcr merge`: parts[i] (in folder dirs[i]) is shard i of parts.size(), checked by LoadParts.
  Result<BuildReport> Merge(const std::vector<std::string>& dirs,
                            const std::vector<ShardPart>& parts) {
    const auto start = std::chrono::steady_clock::now();
    started_ms_ = UnixMillisNow();
    shards_ = static_cast<uint32_t>(parts.size());
    merged_kind_ = IsRemoteUrl(parts[0].source) ? SourceKind(parts[0].source)
                   : parts[0].options.find(" archive_nested=") != std::string::npos ? "archive"
                                                                                    : "folder";
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
    locations_.assign(tree_.files.size(), FileLocation());
    num_records_ = parts[0].num_records;
    const size_t per = config_.images_per_record;
    if (tree_.files.size() != parts[0].num_files ||
        num_records_ != (tree_.files.size() + per - 1) / per) {
      return Err(
          Status::Corruption(dirs[0] + ": damaged part: listing.bin disagrees with " + kPartFile));
    }
    if (Status s = PreparePartial(); !s.ok()) return Err(std::move(s));
    merge_bytes_total_ = 0;
    for (const ShardPart& part : parts) {
      for (const PartRecord& rec : part.records) merge_bytes_total_ += rec.size;
    }
    Progress(BuildProgress::Stage::kRecords, 0, num_records_, 0, merge_bytes_total_);
    for (size_t p = 0; p < parts.size(); ++p) {
      if (Status s = MergePart(dirs[p], parts[p]); !s.ok()) return Err(std::move(s));
    }
    for (Status (StoreBuilder::*step)() :
         {&StoreBuilder::WriteIndexAndManifest, &StoreBuilder::WriteProvenance,
          &StoreBuilder::Publish}) {
      Status s = (this->*step)();
      if (!s.ok()) return Err(std::move(s));
    }
    report_.num_records = num_records_;
    report_.record_end = num_records_;
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

 private:
  // Copies the records of one part into the store, checking each against part.json, and
  // places their files; then applies the part's changed file stats.
  Status MergePart(const std::string& dir, const ShardPart& part) {
    const size_t n = tree_.files.size(), per = config_.images_per_record;
    for (const PartRecord& rec : part.records) {
      const std::string from = dir + "/" + index::RecordFileName(rec.id);
      uint64_t size = 0;
      uint32_t crc = 0;
      PCRFS_RETURN_IF_ERROR(LinkOrCopyChecked(from, RecordPath(rec.id), &size, &crc));
      if (size != rec.size || crc != rec.crc32c) {
        return Status::Corruption(from + ": damaged part: the record does not match its " +
                                  kPartFile + " (size or CRC32C)");
      }
      const size_t begin = rec.id * per, end = std::min(n, begin + per);
      auto file = PosixRandomAccessFile::Open(RecordPath(rec.id));
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
      PCRFS_RETURN_IF_ERROR(Place(rec.id, *layout, begin, nullptr));
      ++merged_records_;
      merged_bytes_ += size;
      Progress(BuildProgress::Stage::kRecords, merged_records_, num_records_, merged_bytes_,
               merge_bytes_total_);
      for (const index::RecordImage& img : layout->images) {
        if (img.passthrough_reason == PassthroughReason::kUnreadable) {
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

  Status Publish() {
    PCRFS_RETURN_IF_ERROR(RemoveTree(partial_ + "/" + kBuildStateDir));
    PCRFS_RETURN_IF_ERROR(FsyncPath(partial_ + "/" + index::kRecordsDir));
    PCRFS_RETURN_IF_ERROR(FsyncPath(partial_));
    struct stat st;
    std::string old;
    if (::stat(config_.store.c_str(), &st) == 0) {
      // --force: keep the old store until the new one is in place.
      old = config_.store + ".old";
      PCRFS_RETURN_IF_ERROR(RemoveTree(old));
      if (::rename(config_.store.c_str(), old.c_str()) != 0) {
        return Status::FromErrno("rename " + config_.store + " -> " + old, errno);
      }
    }
    if (::rename(partial_.c_str(), config_.store.c_str()) != 0) {
      return Status::FromErrno("rename " + partial_ + " -> " + config_.store, errno);
    }
    const std::string parent = fs::path(config_.store).parent_path().string();
    PCRFS_RETURN_IF_ERROR(FsyncPath(parent.empty() ? "." : parent));
    if (!old.empty()) PCRFS_RETURN_IF_ERROR(RemoveTree(old));
    return Status::OK();
  }

  const BuildConfig& config_;
  unsigned threads_;
  std::unique_ptr<ArchiveSource> archive_;  // null unless the source is an archive
  std::unique_ptr<BucketSource> bucket_;    // null unless the source is an S3 prefix
  std::string partial_;
  SourceTree tree_;
  std::vector<FileLocation> locations_;  // by position in tree_.files
  std::string piece_arena_;              // FileLocation::pieces_at points here
  // The block CRCs of files with pieces longer than a checksum block, by position in files.
  std::unordered_map<size_t, std::vector<index::PieceBlockCrcs>> block_crcs_;

  index::PieceRefs PiecesOf(const FileLocation& loc) const {
    index::PieceRefs pieces;
    Decoder d(std::string_view(piece_arena_).substr(loc.pieces_at));
    for (index::PieceRef& p : pieces) {
      // Written by Place() above; cannot fail.
      (void)(d.GetVarint64(&p.offset) && d.GetVarint64(&p.length) && d.GetFixed32(&p.masked_crc));
    }
    return pieces;
  }
  uint32_t num_records_ = 0;
  BuildReport report_;
  int64_t started_ms_ = 0;   // Unix ms, for provenance.json
  uint32_t shards_ = 0;      // a merge: the number of parts
  std::string merged_kind_;  // a merge: the parts' kind of source
  uint64_t merge_bytes_total_ = 0, merged_bytes_ = 0, merged_records_ = 0;  // a merge's progress
  std::string listing_;               // a shard: EncodeListing of the walk
  std::vector<ChangedFile> changed_;  // files whose stats changed while they were read
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
  }
  return Status::OK();
}

Result<BuildReport> Build(const BuildConfig& config) {
  if (Status s = CheckBuildArguments(config); !s.ok()) return Err(std::move(s));
  auto lock = StoreWriterLock::Acquire(config.store);
  if (!lock) return Err(lock.error());
  if (Status s = CheckBuildArguments(config); !s.ok()) return Err(std::move(s));
  return BuildLocked(config, *lock);
}

Result<BuildReport> BuildLocked(const BuildConfig& config, const StoreWriterLock& /*lock*/) {
  StoreBuilder builder(config);
  return builder.Run();
}

namespace {

struct LoadedParts {
  std::vector<std::string> dirs;  // by shard index
  std::vector<ShardPart> parts;
};

std::string ShardName(const ShardSpec& s) {
  return std::to_string(s.index) + "/" + std::to_string(s.count);
}

Result<ShardPart> LoadPart(const std::string& dir) {
  const std::string path = dir + "/" + kPartFile;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
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
  auto listing = ReadWholeFile(dir + "/" + kListingFile, UINT64_MAX);
  if (!listing)
    return Err(Status::Corruption(dir + ": damaged part: " + listing.error().message()));
  Fingerprint fp;
  fp.Add(std::string_view(reinterpret_cast<const char*>(listing->data()), listing->size()));
  if (fp.Hex() != part->listing_digest || crc32c::Value(*listing) != part->listing_crc32c) {
    return Err(Status::Corruption(dir + ": damaged part: " + kListingFile + " does not match " +
                                  kPartFile));
  }
  for (const PartRecord& r : part->records) {
    const std::string rec = dir + "/" + index::RecordFileName(r.id);
    if (::lstat(rec.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
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
  for (const std::string& dir : config.parts) {
    auto part = LoadPart(dir);
    if (!part) return Err(part.error());
    given.push_back(std::move(*part));
  }
  const ShardPart& first = given[0];
  const std::string& first_dir = config.parts[0];
  LoadedParts out;
  out.dirs.resize(first.shard.count);
  out.parts.resize(first.shard.count);
  for (size_t i = 0; i < given.size(); ++i) {
    const ShardPart& p = given[i];
    const std::string& dir = config.parts[i];
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
                                         out.dirs[p.shard.index] + " and " + dir));
    }
    out.dirs[p.shard.index] = dir;
    out.parts[p.shard.index] = p;
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

// The build options from OptionsText.
Result<BuildConfig> ConfigFromOptions(const std::string& text) {
  BuildConfig c;
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  try {
    if (std::stoul(kv.at("format")) != index::kStoreFormatVersion) {
      return Err(Status::NotSupported("store format " + kv.at("format") +
                                      " is not supported (this pcr writes " +
                                      std::to_string(index::kStoreFormatVersion) + ")"));
    }
    c.strip_metadata = kv.at("strip_metadata") == "1";
    c.images_per_record = static_cast<uint32_t>(std::stoul(kv.at("images_per_record")));
    c.max_input_scans = std::stoi(kv.at("max_input_scans"));
    c.max_image_memory = std::stoull(kv.at("max_image_memory"));
    c.max_jpeg_bytes = std::stoull(kv.at("max_jpeg_bytes"));
    c.quality_sample = static_cast<uint32_t>(std::stoul(kv.at("quality_sample")));
    c.quality_seed = std::stoull(kv.at("quality_seed"));
    if (kv.count("archive_nested")) c.nested_archives = kv.at("archive_nested") == "1";
  } catch (const std::exception&) {
    return Err(Status::Corruption("malformed options: " + text));
  }
  if (c.images_per_record == 0) return Err(Status::Corruption("malformed options: " + text));
  return c;
}

}  // namespace

Status CheckMergeParts(const MergeConfig& config) {
  auto loaded = LoadParts(config);
  if (!loaded) return loaded.error();
  auto options = ConfigFromOptions(loaded->parts[0].options);
  if (!options) return Status::Corruption(config.parts[0] + ": " + options.error().message());
  return Status::OK();
}

Result<BuildReport> MergeLocked(const MergeConfig& config, const StoreWriterLock& /*lock*/) {
  auto loaded = LoadParts(config);
  if (!loaded) return Err(loaded.error());
  auto build = ConfigFromOptions(loaded->parts[0].options);
  if (!build) return Err(build.error());
  build->source = loaded->parts[0].source;
  build->store = config.store;
  build->threads = config.threads;
  build->force = config.force;
  build->progress = config.progress;
  StoreBuilder builder(*build);
  auto report = builder.Merge(loaded->dirs, loaded->parts);
  // Unlike a build's, a merge's STORE.partial holds only copies: nothing to resume.
  if (!report) (void)RemoveTree(PartialDir(config.store));
  return report;
}

}  // namespace pcrfs::tools
