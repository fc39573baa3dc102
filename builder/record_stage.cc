// The records stage of a build (build_stages.h): the files of a BuildSource read, transcoded
// and written into records in listing order.
#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <span>
#include <thread>

#include "builder/build_stages.h"
#include "builder/quality_window.h"
#include "codec/transcoder.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "index/index_reader.h"
#include "index/record_writer.h"

namespace pcrfs::tools {
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

// Files larger than this that are not transcoded are copied into their record a checksum
// block at a time when the record is written, never held whole in memory.
constexpr uint64_t kStreamAbove = uint64_t{16} << 20;
// A file that changes while it is read is read again this many times in all, then given up.
constexpr int kReadAttempts = 3;

// What became of one source file.
struct FileResult {
  bool unreadable = false;
  PassthroughReason reason = PassthroughReason::kNone;
  std::string detail;
  codec::ProgressiveJpeg jpeg;  // reason == kNone
  std::vector<uint8_t> window;  // its quality window, when asked and the image is larger
  std::vector<uint8_t> raw;     // passthrough bytes
  // A large passthrough file: copied from `file` when its record is written (StreamInto).
  bool stream = false;
  std::unique_ptr<SourceFile> file;
  SourceFileStat stat;  // the version that was read
};

FileResult Unreadable(std::string detail) {
  FileResult r;
  r.unreadable = true;
  r.reason = PassthroughReason::kUnreadable;
  r.detail = std::move(detail);
  return r;
}

void ClassifyBytes(std::vector<uint8_t> data, const BuildConfig& config, int window_side,
                   FileResult* out);

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

// One attempt at reading and transcoding file node `node`, the turn-th file read from `source`.
// A large file that will not be transcoded stays open (res.file) until its record streams it in.
// window_side: codec::TranscodeOptions::window_side. *changed: the file changed while it was read.
FileResult ProcessOnce(BuildSource* source, const SourceTree& tree, uint32_t node, size_t turn,
                       const BuildConfig& config, int window_side, bool* changed) {
  auto file = source->OpenFile(tree, node, turn);
  if (!file) return Unreadable(file.error().message());
  FileResult r;
  r.stat = (*file)->stat();
  if (r.stat.size > kStreamAbove) {
    uint8_t head[3] = {};
    Status s = (*file)->ReadHead(head);
    if (!s.ok()) return Unreadable(s.message());
    if (KeptAsIs(head, r.stat.size, config, &r)) {
      r.stream = true;
      r.file = std::move(*file);
      return r;
    }
  }
  auto data = (*file)->ReadAll(changed);
  if (!data) return Unreadable(data.error().message());
  if (*changed) return r;
  file->reset();
  ClassifyBytes(std::move(*data), config, window_side, &r);
  return r;
}

// Transcodes `data` if it is a JPEG that may be; otherwise keeps it as passthrough bytes.
void ClassifyBytes(std::vector<uint8_t> data, const BuildConfig& config, int window_side,
                   FileResult* out) {
  FileResult& r = *out;
  if (data.empty()) {
    r.reason = PassthroughReason::kEmpty;
  } else if (!KeptAsIs(data, data.size(), config, &r)) {
    codec::TranscodeOptions opts;
    opts.strip_metadata = config.strip_metadata;
    opts.max_input_scans = config.max_input_scans;
    opts.max_memory_bytes = config.max_image_memory;
    opts.window_side = window_side;
    codec::TranscodeResult t = codec::Transcode(data, opts);
    r.reason = StoredReason(t.reason);
    r.detail = std::move(t.detail);
    if (t.transcoded()) {
      r.jpeg = std::move(t.image);
      r.window = std::move(t.window);
      return;
    }
  }
  r.raw = std::move(data);
}

FileResult ProcessFile(BuildSource* source, const SourceTree& tree, uint32_t node, size_t turn,
                       const BuildConfig& config, int window_side) {
  try {
    for (int attempt = 1;; ++attempt) {
      bool changed = false;
      FileResult r = ProcessOnce(source, tree, node, turn, config, window_side, &changed);
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
  // File i is the turn-th file read from `source` (BuildSource::StartReading already called).
  // window_side_of(i): codec::TranscodeOptions::window_side for file i (from the workers too).
  OrderedTranscoder(size_t count, const SourceTree* tree, std::function<uint32_t(size_t)> node_of,
                    std::function<int(size_t)> window_side_of, const BuildConfig* config,
                    unsigned threads, BuildSource* source)
      : count_(count),
        tree_(tree),
        source_(source),
        node_of_(std::move(node_of)),
        window_side_of_(std::move(window_side_of)),
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
    source_->Cancel();  // wakes workers waiting for their turn (an archive's member)
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
      FileResult r = ProcessFile(source_, *tree_, node_of_(i), i, *config_, window_side_of_(i));
      {
        MutexLock l(&mu_);
        buffered_ += ResultBytes(r);
        slots_[i % window_] = std::move(r);
      }
      done_cv_.SignalAll();
    }
  }

  static uint64_t ResultBytes(const FileResult& r) {
    return r.jpeg.bytes.size() + r.raw.size() + r.window.size();
  }

  const size_t count_;
  const SourceTree* tree_;
  BuildSource* const source_;
  const std::function<uint32_t(size_t)> node_of_;
  const std::function<int(size_t)> window_side_of_;
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

// The records a build writes: all of them, or a shard's range.
std::pair<uint32_t, uint32_t> RecordRange(const BuildConfig& c, uint32_t num_records) {
  return c.shard.enabled() ? ShardRecordRange(num_records, c.shard)
                           : std::make_pair(uint32_t{0}, num_records);
}

class RecordStage {
 public:
  RecordStage(BuildSource* source, SourceTree* tree, const BuildConfig& config,
              const std::string& options_text, unsigned threads, const StoreDraft& draft,
              Placement* placement, BuildReport* report, std::vector<ChangedFile>* changed,
              QualityWindows* windows)
      : source_(source),
        tree_(*tree),
        config_(config),
        options_text_(options_text),
        threads_(threads),
        draft_(draft),
        placement_(placement),
        report_(*report),
        changed_(*changed),
        windows_(windows) {}

  std::string MembersFingerprint(size_t begin, size_t end) const {
    Fingerprint fp;
    fp.Add(options_text_);
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
    auto saved = ReadWholeFile(draft_.FingerprintPath(id), 1024);
    if (!saved || std::string(saved->begin(), saved->end()) != fp) return std::nullopt;
    auto file = draft_.OpenRecord(id);  // in the bucket, for a build into one
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

  // The files whose quality windows are cut while they are transcoded (their coefficients in
  // memory then), not from the stored level 10 afterwards (quality_window.h).
  std::vector<bool> LikelySampled() const {
    if (windows_ == nullptr || config_.shard.enabled() || config_.quality_sample == 0) return {};
    return FilesLikelySampled(tree_, config_.quality_sample, config_.quality_seed);
  }

  Status Run() {
    const size_t n = tree_.files.size();
    const size_t per = config_.images_per_record;
    const auto num_records = static_cast<uint32_t>((n + per - 1) / per);
    const auto [first, last] = RecordRange(config_, num_records);
    const size_t files = std::min(n, last * per) - std::min(n, first * per);
    report_.record_begin = first;
    report_.record_end = last;
    report_.num_records = num_records;
    report_.shard_files = files;

    // Decide which records survive from an interrupted build; transcode only the rest.
    std::vector<std::optional<index::RecordLayout>> reused(num_records);
    std::vector<std::string> fps(num_records);
    std::vector<uint32_t> todo;      // nodes to transcode
    std::vector<uint32_t> todo_pos;  // their positions in tree_.files
    for (uint32_t r = first; r < last; ++r) {
      const size_t begin = r * per, end = std::min(n, begin + per);
      fps[r] = MembersFingerprint(begin, end);
      reused[r] = ReusableRecord(r, begin, end, fps[r]);
      if (reused[r]) continue;
      for (size_t i = begin; i < end; ++i) {
        todo.push_back(tree_.files[i]);
        todo_pos.push_back(static_cast<uint32_t>(i));
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
      ReportProgress(config_.progress, BuildProgress::Stage::kFiles, done, files, bytes,
                     bytes_total);
    };
    ReportProgress(config_.progress, BuildProgress::Stage::kFiles, 0, files, 0, bytes_total);

    const std::vector<bool> sampled = LikelySampled();
    source_->StartReading(todo);
    OrderedTranscoder pool(
        todo.size(), &tree_, [&](size_t i) { return todo[i]; },
        [&](size_t i) { return sampled.empty() || !sampled[todo_pos[i]] ? 0 : kQualityWindowSide; },
        &config_, threads_, source_);
    size_t next = 0;  // index into todo
    for (uint32_t r = first; r < last; ++r) {
      const size_t begin = r * per, end = std::min(n, begin + per);
      if (reused[r]) {
        auto file = draft_.OpenRecord(r);
        if (!file) return file.error();
        PCRFS_RETURN_IF_ERROR(
            placement_->Place(r, *reused[r], begin, nullptr, draft_.RecordPath(r), file->get()));
        ++report_.records_reused;
        tick(begin, end);
        continue;
      }
      auto writer = index::RecordWriter::Create(draft_.RecordPath(r));
      if (!writer) return writer.error();
      for (size_t i = begin; i < end; ++i) {
        FileResult res = pool.Take(next++);
        SourceNode& node = tree_.nodes[tree_.files[i]];
        const size_t changes = report_.changed.size();
        PCRFS_RETURN_IF_ERROR(AddToRecord(writer->get(), &node, &res));
        if (!res.window.empty() && res.reason == PassthroughReason::kNone) {
          (*windows_)[i] = std::move(res.window);
        }
        if (report_.changed.size() != changes) {
          changed_.push_back({i, node.size, node.mtime_sec, node.mtime_nsec});
        }
        tick(i, i + 1);
      }
      auto layout = (*writer)->Finish();
      if (!layout) return layout.error();
      PCRFS_RETURN_IF_ERROR(
          placement_->Place(r, *layout, begin, &(*writer)->block_crcs(), draft_.RecordPath(r)));
      PCRFS_RETURN_IF_ERROR(
          WriteFileAtomic(draft_.FingerprintPath(r), fps[r].data(), fps[r].size()));
      PCRFS_RETURN_IF_ERROR(draft_.RecordFinished(r, fps[r]));
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
  // while it is copied is copied again (kReadAttempts in all, where the source can read it
  // again); one that keeps changing or cannot be read becomes res->unreadable, and nothing of it
  // stays in the record.
  void StreamInto(index::RecordWriter* writer, const SourceNode& node, FileResult* res) {
    SourceFile& file = *res->file;
    for (int attempt = 1;; ++attempt) {
      Status read_status;
      Status s = writer->AddStream(tree_.RelPath(node), res->reason, res->stat.size,
                                   [&](uint64_t offset, std::span<uint8_t> dst) {
                                     read_status = file.ReadStream(offset, dst);
                                     return read_status;
                                   });
      if (s.ok() || read_status.ok()) break;  // ok, or the writer failed: Finish reports it
      const bool changed = file.changed();
      if (!changed || attempt == kReadAttempts || !file.Restat().ok()) {
        *res = Unreadable(changed ? "changed while being read (" + std::to_string(kReadAttempts) +
                                        " attempts)"
                                  : read_status.message());
        return;
      }
      res->stat = file.stat();
    }
    res->file.reset();  // an archive's next member may be read
  }

 private:
  BuildSource* const source_;
  SourceTree& tree_;
  const BuildConfig& config_;
  const std::string& options_text_;
  const unsigned threads_;
  const StoreDraft& draft_;
  Placement* const placement_;
  BuildReport& report_;
  std::vector<ChangedFile>& changed_;
  QualityWindows* const windows_;
};

}  // namespace

std::vector<bool> FilesLikelySampled(const SourceTree& tree, uint32_t sample, uint64_t seed) {
  std::vector<bool> sampled(tree.files.size(), true);
  if (tree.files.size() <= sample) return sampled;
  const InodeLayout layout = AssignInodes(tree, [](size_t) { return true; });
  std::vector<uint64_t> inos;  // every file's, in inode order
  for (size_t i = 0; i < layout.order.size(); ++i) {
    if (!tree.nodes[layout.order[i]].is_dir) inos.push_back(i + 1);
  }
  sampled.assign(tree.files.size(), false);
  for (uint64_t ino : ChooseQualitySample(std::move(inos), sample, seed)) {
    sampled[layout.file_pos(layout.order[ino - 1])] = true;
  }
  return sampled;
}

Status WriteRecords(BuildSource* source, SourceTree* tree, const BuildConfig& config,
                    const std::string& options_text, unsigned threads, const StoreDraft& draft,
                    Placement* placement, BuildReport* report, std::vector<ChangedFile>* changed,
                    QualityWindows* windows) {
  return RecordStage(source, tree, config, options_text, threads, draft, placement, report, changed,
                     windows)
      .Run();
}

}  // namespace pcrfs::tools
