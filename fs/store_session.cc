#include "fs/store_session.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>

#include "common/log.h"
#include "fs/inode.h"
#include "fs/mount_options.h"
#include "index/index_reader.h"
#include "index/manifest.h"
#include "index/record_format.h"
#include "location/store_location.h"

namespace pcrfs::fs {
namespace {

Status Errno(int err, std::string_view what) { return Status::FromErrno(what, err); }

// The longest record prefix ReadRecord holds (a longer one, which only a crafted index or a
// record of gigabytes has, is read file by file).
constexpr uint64_t kMaxRecordPrefix = uint64_t{1} << 30;

// -o msssim=X: the lowest level whose 5th-percentile MS-SSIM is at least X (as the daemon
// chooses it, with its message when the store has no quality sample).
Result<int> ChooseLevel(const index::Store& store, double x) {
  const int level = index::RecommendLevel(store.manifest().quality, x);
  if (level == 0) {
    return Err(Status::InvalidArgument(store.dir() +
                                       " has no quality sample (built with --quality-sample 0 "
                                       "or without JPEGs): use -o scans=K"));
  }
  return level;
}

// A server that failed (timeouts, refused connections, 5xx after the retries: ETIMEDOUT,
// ECONNREFUSED, ...) is EIO, as it is for a read; a refused credential keeps EACCES and a
// missing folder ENOENT, which say what to fix.
Status AsOpenError(const Status& s) {
  if (s.code() != Status::Code::kIOError || s.sys_errno() == EACCES || s.sys_errno() == ENOENT ||
      s.sys_errno() == EIO) {
    return s;
  }
  return Status::IOError(s.message(), EIO);
}

}  // namespace

Result<std::unique_ptr<StoreSession>> StoreSession::Open(const std::string& store,
                                                         const Options& options) {
  auto parsed = ParseStoreOptions(store, options);
  if (!parsed) return Err(parsed.error());
  MountConfig& config = *parsed;
  std::unique_ptr<StoreSession> session(new StoreSession(store, options));

  // Absolute: record files are opened when first read, maybe after the caller changed folders.
  std::string where = store;
  if (!IsRemoteUrl(store)) {
    std::error_code ec;
    std::string absolute = std::filesystem::absolute(store, ec).lexically_normal().string();
    if (!ec) where = std::move(absolute);
  }
  auto location = FetchMetadata(where, config.remote);
  if (!location) return Err(AsOpenError(location.error()));
  session->name_ = location->name;
  session->remote_ = location->remote;
  FsOptions fs_options = config.fs;
  fs_options.uid = ::getuid();
  fs_options.gid = ::getgid();
  // form=baseline with -o disk_cache: its re-encoded files' folder, and its share of the budget
  // (a remote store's: 3/4, the rest for record bytes), as the daemon splits it.
  if (config.fs.form == ServedForm::kBaseline && config.remote.disk_cache > 0) {
    auto dir = BaselineCacheDir(*location, config.remote.cache_dir);
    if (!dir) return Err(Status::IOError(location->name + ": " + dir.error().message()));
    const uint64_t budget = config.remote.disk_cache;
    fs_options.baseline_disk_dir = *dir;
    fs_options.baseline_disk_bytes = location->remote ? budget - budget / 4 : budget;
    if (location->remote) location->options.disk_cache = budget / 4;
  }
  std::shared_ptr<ObjectClient> client;
  std::shared_ptr<RangeCache> cache;
  if (location->remote) {
    std::string note;  // the disk tier is another process's: this one keeps memory only
    auto opened = OpenRangeCache(*location, &note);
    if (!opened) return Err(Status::IOError(location->name + ": " + opened.error().message()));
    cache = std::move(*opened);
    if (!note.empty()) Log(LogLevel::kWarning, note);
    PCRFS_RETURN_ERR_IF_ERROR(StartCredentialRenewal(*location));
    auto created = MakeObjectClient(*location);
    if (!created) return Err(created.error());
    client = std::move(*created);
    fs_options.speculation_memory = config.remote.memory_cache;
    fs_options.cache_bytes = PieceCacheBytes(config, /*remote=*/true);
  }
  auto opened = OpenStoreAt(*location, client, location->converted_index, cache);
  if (!opened) return Err(opened.error());
  if (config.msssim) {
    auto level = ChooseLevel(**opened, *config.msssim);
    if (!level) return Err(level.error());
    fs_options.fixed_level = *level;
  }
  if (fs_options.fixed_level == 0) fs_options.fixed_level = index::kNumGroups;
  session->level_ = fs_options.fixed_level;
  session->baseline_ = fs_options.form == ServedForm::kBaseline;
  const bool fill = location->remote && config.remote.disk_cache_fill;
  session->fs_ = std::make_unique<Filesystem>(std::move(*opened), std::move(fs_options));
  if (fill) session->fs_->FillLevel(session->level_);
  return session;
}

StoreSession::~StoreSession() {
  // In a child of the opener the Filesystem's threads and the client's do not exist, and a
  // lock one of them held at the fork stays held: destroying would join or wait forever. The
  // memory is the child's copy of the parent's; leaking it costs nothing the parent pays.
  if (!InOpeningProcess()) (void)fs_.release();
}

Status StoreSession::CheckProcess() const {
  if (InOpeningProcess()) return Status::OK();
  return Status::IOError(name_ + ": opened by process " + std::to_string(pid_) +
                             ", used by process " + std::to_string(::getpid()) +
                             " (after a fork, open the store again)",
                         EBADFD);
}

Result<uint64_t> StoreSession::Resolve(std::string_view path) const {
  PCRFS_RETURN_ERR_IF_ERROR(CheckProcess());
  uint64_t ino = kFuseRootIno;
  PCRFS_RETURN_ERR_IF_ERROR(ForEachPathComponent(path, [&](std::string_view name) -> Status {
    auto st = fs_->Lookup(ino, name);
    if (!st) {
      const int err = st.error().ToErrno();
      if (err == ENOENT || err == ENOTDIR) return Errno(err, path);
      return st.error();
    }
    ino = st->st_ino;
    return Status::OK();
  }));
  return ino;
}

Result<struct stat> StoreSession::Stat(std::string_view path) const {
  auto ino = Resolve(path);
  if (!ino) return Err(ino.error());
  return fs_->GetAttr(*ino);
}

Result<struct stat> StoreSession::StatIno(uint64_t ino) const {
  PCRFS_RETURN_ERR_IF_ERROR(CheckProcess());
  return fs_->GetAttr(ino);
}

Result<std::vector<StoreSession::DirEntry>> StoreSession::ListDir(std::string_view path) const {
  auto ino = Resolve(path);
  if (!ino) return Err(ino.error());
  std::vector<DirEntry> names;
  Status s = fs_->ReadDir(
      *ino, 0,
      [&](std::string_view name, const struct stat& st, uint64_t) {
        if (name != "." && name != "..") names.push_back({std::string(name), S_ISDIR(st.st_mode)});
        return true;
      },
      /*attrs=*/false);
  if (!s.ok()) return Err(s.ToErrno() == ENOTDIR ? Errno(ENOTDIR, path) : s);
  return names;
}

Result<StoreSession::Placement> StoreSession::PlacementOf(uint64_t ino) const {
  PCRFS_RETURN_ERR_IF_ERROR(CheckProcess());
  const NodeId id = FromFuseIno(ino);
  auto e = fs_->store().index().Get(id.store_ino);
  if (!e) return Err(e.error().IsNotFound() ? Errno(ENOENT, "inode") : e.error());
  if (e->is_dir()) return Err(Errno(EISDIR, e->name));
  return Placement{e->record, e->slot};
}

Status StoreSession::FetchRecord(uint32_t record) const {
  PCRFS_RETURN_IF_ERROR(CheckProcess());
  const index::Store& store = fs_->store();
  auto info = store.index().GetRecord(record);
  if (!info) return info.error();
  auto file = store.OpenRecord(record);
  if (!file) return Status::IOError(file.error().message(), EIO);
  const SpeculationSource* source = file->speculation();
  if (source == nullptr) return Status::OK();
  // The footer was read when the record was opened.
  const uint64_t end = index::RecordBytesAtLevel(*info, level_) - index::kRecordFooterSize;
  std::vector<uint8_t> scratch;
  auto warmed = source->Warm(0, end, &scratch);
  if (!warmed && warmed.error().code() != Status::Code::kResourceExhausted) {
    return Status::IOError(warmed.error().message(), EIO);
  }
  return Status::OK();
}

Result<std::vector<uint8_t>> StoreSession::ReadWhole(uint64_t ino) const {
  auto st = fs_->GetAttr(ino);
  if (!st) return Err(st.error());
  if (S_ISDIR(st->st_mode)) return Err(Errno(EISDIR, "inode " + std::to_string(ino)));
  std::vector<uint8_t> out(static_cast<size_t>(st->st_size));
  size_t got = 0;
  while (got < out.size()) {
    auto n = fs_->Read(ino, got, out.size() - got, out.data() + got);
    if (!n) return Err(n.error());
    if (*n == 0) break;
    got += *n;
  }
  out.resize(got);
  return out;
}

std::vector<Result<std::vector<uint8_t>>> StoreSession::ReadRecord(
    uint32_t record, const std::vector<uint64_t>& inos) const {
  std::vector<Result<std::vector<uint8_t>>> out;
  out.reserve(inos.size());
  if (Status s = CheckProcess(); !s.ok()) {
    for (size_t i = 0; i < inos.size(); ++i) out.push_back(Err(s));
    return out;
  }
  const index::Store& store = fs_->store();
  // The prefix, unless a file is read as Read reads it anyway.
  std::optional<SourceFile> prefix;
  if (!baseline_ && !inos.empty()) {
    auto info = store.index().GetRecord(record);
    auto file = info ? store.OpenRecord(record) : Result<SourceFile>(Err(info.error()));
    if (info && file) {
      const uint64_t at_level = index::RecordBytesAtLevel(*info, level_);
      const uint64_t end =
          std::min(at_level - std::min(at_level, index::kRecordFooterSize), file->file().Size());
      std::vector<uint8_t> bytes;
      if (end <= kMaxRecordPrefix) bytes.resize(static_cast<size_t>(end));
      if (!bytes.empty() && file->file().Read(0, bytes.size(), bytes.data()).ok()) {
        prefix = SourceFile(std::make_shared<const PrefixFile>(*file, std::move(bytes)));
      }
    }
  }
  for (uint64_t ino : inos) {
    const NodeId id = FromFuseIno(ino);
    auto e = store.index().Get(id.store_ino);
    if (e && (e->is_dir() || e->record != record)) {
      out.push_back(Err(Errno(e->is_dir() ? EISDIR : EINVAL,
                              e->name + " (not a file of record " + std::to_string(record) + ")")));
      continue;
    }
    if (e && prefix) {
      std::vector<uint8_t> bytes;
      bytes.reserve(static_cast<size_t>(std::min(e->SizeAtLevel(level_), kMaxRecordPrefix)));
      const Status s = store.ReadFileTo(*e, level_, *prefix, [&](std::span<const uint8_t> b) {
        bytes.insert(bytes.end(), b.begin(), b.end());
        return Status::OK();
      });
      if (s.ok()) {
        out.push_back(std::move(bytes));
        continue;
      }
    }
    out.push_back(ReadWhole(ino));
  }
  return out;
}

Result<size_t> StoreSession::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const {
  PCRFS_RETURN_ERR_IF_ERROR(CheckProcess());
  return fs_->Read(ino, offset, size, dst);
}

}  // namespace pcrfs::fs
