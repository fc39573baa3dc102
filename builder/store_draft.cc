// The publish stage (build_stages.h): STORE.partial, provenance.json, the rename to STORE.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "builder/build_stages.h"
#include "common/file_util.h"
#include "index/index_reader.h"
#include "index/store.h"

namespace pcrfs::tools {
namespace fs = std::filesystem;
namespace {

constexpr char kBuildStateDir[] = ".build";  // inside STORE.partial; removed on completion
constexpr char kOptionsFile[] = "options";

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::FromErrno("cannot create " + path, errno);
  }
  return Status::OK();
}

}  // namespace

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Status::IOError("cannot remove " + path + ": " + ec.message());
  return Status::OK();
}

StoreDraft::StoreDraft(std::string store, DraftSink* sink)
    : store_(std::move(store)), dir_(PartialDir(store_)), sink_(sink) {}

Status StoreDraft::RecordFinished(uint32_t id, const std::string& fingerprint) const {
  return sink_ != nullptr ? sink_->RecordFinished(id, RecordPath(id), fingerprint) : Status::OK();
}

Result<std::unique_ptr<RandomAccessFile>> StoreDraft::OpenRecord(uint32_t id) const {
  if (sink_ != nullptr) {
    auto file = sink_->OpenRecord(id, RecordPath(id));
    if (!file || *file != nullptr) return file;
  }
  auto file = PosixRandomAccessFile::Open(RecordPath(id));
  if (!file) return Err(file.error());
  return std::unique_ptr<RandomAccessFile>(std::move(*file));
}

bool StoreDraft::RecordSizeAndCrc(uint32_t id, uint64_t* size, uint32_t* crc) const {
  return sink_ != nullptr && sink_->RecordSizeAndCrc(id, size, crc);
}

Result<std::unique_ptr<index::Store>> StoreDraft::OpenStore() const {
  if (sink_ != nullptr) return sink_->OpenStore(dir_);
  return index::Store::Open(dir_);
}

std::string StoreDraft::RecordPath(uint32_t id) const {
  return dir_ + "/" + index::RecordFileName(id);
}

std::string StoreDraft::FingerprintPath(uint32_t id) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/%08u.members", id);
  return dir_ + "/" + kBuildStateDir + buf;
}

uint64_t StoreDraft::FinishedRecords() const {
  uint64_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_ + "/" + kBuildStateDir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 8 && name.ends_with(".members")) ++n;
  }
  return n;
}

Status StoreDraft::Prepare(const std::string& options, bool resume) const {
  const std::string state = dir_ + "/" + kBuildStateDir;
  struct stat st;
  if (::stat(dir_.c_str(), &st) == 0) {
    bool keep = false;
    if (resume) {
      auto old = ReadWholeFile(state + "/" + kOptionsFile, 1 << 20);
      if (old && std::string(old->begin(), old->end()) == options) {
        keep = true;
      } else if (old) {
        return Status::InvalidArgument(
            dir_ + ": the interrupted build used other options (" +
            std::string(old->begin(), old->end() - (old->empty() ? 0 : 1)) +
            "); resume with the same options, or build without --resume");
      }
    }
    if (!keep) PCRFS_RETURN_IF_ERROR(RemoveTree(dir_));
  }
  PCRFS_RETURN_IF_ERROR(MakeDir(dir_));
  PCRFS_RETURN_IF_ERROR(MakeDir(dir_ + "/" + index::kRecordsDir));
  PCRFS_RETURN_IF_ERROR(MakeDir(state));
  // A run killed between a write and its rename left NAME.tmp.PID.N; the draft is this
  // build's alone, so none of them is a live writer's.
  for (const std::string& d : {dir_, dir_ + "/" + index::kRecordsDir, state}) {
    if (auto r = RemoveAtomicWriteLeftovers(d); !r) return r.error();
  }
  return WriteFileAtomic(state + "/" + kOptionsFile, options.data(), options.size());
}

Status StoreDraft::WriteFile(const std::string& name, const std::string& content) const {
  return WriteFileAtomic(dir_ + "/" + name, content.data(), content.size());
}

Status StoreDraft::WriteProvenance(Provenance p, const SourceTree& tree,
                                   const BuildReport& report) const {
  p.files_listed = tree.files.size();
  p.not_stored = report.problems.size();
  p.changed = report.changed.size();
  p.records_kept = report.records_reused;
  p.generator = std::string("pcrfs ") + PCRFS_VERSION;
  p.commit = SourceCommit();
  p.host = HostName();
  p.finished_ms = UnixMillisNow();
  return WriteFile(kProvenanceFile, p.ToJson());
}

Status StoreDraft::Publish() const {
  if (sink_ != nullptr) {
    PCRFS_RETURN_IF_ERROR(sink_->Publish(dir_));
    return RemoveTree(dir_);
  }
  PCRFS_RETURN_IF_ERROR(RemoveTree(dir_ + "/" + kBuildStateDir));
  PCRFS_RETURN_IF_ERROR(FsyncPath(dir_ + "/" + index::kRecordsDir));
  PCRFS_RETURN_IF_ERROR(FsyncPath(dir_));
  struct stat st;
  std::string old;
  if (::stat(store_.c_str(), &st) == 0) {
    // --force: keep the old store until the new one is in place.
    old = store_ + ".old";
    PCRFS_RETURN_IF_ERROR(RemoveTree(old));
    if (::rename(store_.c_str(), old.c_str()) != 0) {
      return Status::FromErrno("rename " + store_ + " -> " + old, errno);
    }
  }
  if (::rename(dir_.c_str(), store_.c_str()) != 0) {
    return Status::FromErrno("rename " + dir_ + " -> " + store_, errno);
  }
  const std::string parent = fs::path(store_).parent_path().string();
  PCRFS_RETURN_IF_ERROR(FsyncPath(parent.empty() ? "." : parent));
  if (!old.empty()) PCRFS_RETURN_IF_ERROR(RemoveTree(old));
  return Status::OK();
}

}  // namespace pcrfs::tools
