#include "builder/build_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "builder/archive_source.h"
#include "builder/remote_source.h"
#include "common/file_util.h"

namespace pcrfs::tools {
namespace {

SourceFileStat StatOf(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec,
          static_cast<uint32_t>(st.st_mtim.tv_nsec),
          st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
}

Result<SourceFileStat> FstatOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Err(Status::FromErrno(path, errno));
  return StatOf(st);
}

SourceFileStat ListedStat(const SourceNode& n) { return {n.size, n.mtime_sec, n.mtime_nsec, 0}; }

// A file of a folder, by descriptor: fstat before and after reading tells whether it changed.
class FolderFile final : public SourceFile {
 public:
  FolderFile(UniqueFd fd, std::string path, SourceFileStat stat)
      : fd_(std::move(fd)), path_(std::move(path)) {
    stat_ = stat;
  }

  Status ReadHead(std::span<uint8_t> dst) override {
    return PreadFull(fd_.get(), dst.data(), dst.size(), 0, path_);
  }

  Result<std::vector<uint8_t>> ReadAll(bool* changed) override {
    auto data = ReadWholeFd(fd_.get(), UINT64_MAX, path_);
    if (!data) return Err(data.error());
    auto after = FstatOf(fd_.get(), path_);
    if (!after) return Err(after.error());
    if (!(*after == stat_) || data->size() != stat_.size) *changed = true;
    return data;
  }

  Status ReadStream(uint64_t offset, std::span<uint8_t> dst) override {
    Status s = PreadFull(fd_.get(), dst.data(), dst.size(), offset, path_);
    if (!s.ok() || offset + dst.size() != stat_.size) return s;
    // The end: still the version that was stat'ed, and no longer than it.
    auto now = FstatOf(fd_.get(), path_);
    if (!now) return now.error();
    uint8_t more;
    if (!(*now == stat_) || ::pread(fd_.get(), &more, 1, static_cast<off_t>(stat_.size)) > 0) {
      changed_ = true;
      return Status::IOError(path_ + ": changed while being read");
    }
    return Status::OK();
  }

  Status Restat() override {
    auto now = FstatOf(fd_.get(), path_);
    if (!now) return now.error();
    stat_ = *now;
    changed_ = false;
    return Status::OK();
  }

 private:
  UniqueFd fd_;
  std::string path_;
};

// A member of an archive, read once from its start; the bytes of ReadHead are kept so that a
// stream can ask for them again. Destroying it hands the archive to the next member.
class MemberFile final : public SourceFile {
 public:
  MemberFile(std::unique_ptr<ArchiveMember> member, SourceFileStat stat)
      : member_(std::move(member)) {
    stat_ = stat;
  }

  Status ReadHead(std::span<uint8_t> dst) override {
    head_.resize(dst.size());
    PCRFS_RETURN_IF_ERROR(member_->ReadExact(head_));
    std::copy(head_.begin(), head_.end(), dst.begin());
    return Status::OK();
  }

  Result<std::vector<uint8_t>> ReadAll(bool* /*changed*/) override {
    std::vector<uint8_t> data = std::move(head_);
    const size_t have = data.size();
    data.resize(stat_.size);
    Status s = member_->ReadExact(std::span<uint8_t>(data).subspan(have));
    member_.reset();  // the next member may be read while this one is transcoded
    if (!s.ok()) return Err(std::move(s));
    return data;
  }

  Status ReadStream(uint64_t offset, std::span<uint8_t> dst) override {
    size_t from_head = 0;
    if (offset < head_.size()) {
      from_head = std::min(dst.size(), static_cast<size_t>(head_.size() - offset));
      std::copy_n(head_.begin() + static_cast<ptrdiff_t>(offset), from_head, dst.begin());
    }
    return member_->ReadExact(dst.subspan(from_head));
  }

 private:
  std::unique_ptr<ArchiveMember> member_;
  std::vector<uint8_t> head_;
};

// Bytes of an object fetched per GET: a whole small file in one, a large one in a few.
constexpr uint64_t kObjectChunk = uint64_t{8} << 20;

// An object of a bucket: ranged GETs of its listed size; a stream keeps one chunk in memory.
class ObjectFile final : public SourceFile {
 public:
  ObjectFile(const BucketSource* bucket, const SourceTree* tree, uint32_t node)
      : bucket_(bucket), tree_(tree), node_(node) {
    stat_ = ListedStat(tree->nodes[node]);
  }

  Status ReadHead(std::span<uint8_t> dst) override { return bucket_->Read(*tree_, node_, 0, dst); }

  Result<std::vector<uint8_t>> ReadAll(bool* /*changed*/) override {
    std::vector<uint8_t> data(stat_.size);
    for (uint64_t at = 0; at < stat_.size; at += kObjectChunk) {
      const auto len = static_cast<size_t>(std::min(kObjectChunk, stat_.size - at));
      Status s = bucket_->Read(*tree_, node_, at, std::span<uint8_t>(data).subspan(at, len));
      if (!s.ok()) return Err(std::move(s));
    }
    return data;
  }

  Status ReadStream(uint64_t offset, std::span<uint8_t> dst) override {
    size_t done = 0;
    while (done < dst.size()) {
      const uint64_t at = offset + done;
      if (at < chunk_at_ || at >= chunk_at_ + chunk_.size()) {
        chunk_at_ = at;
        chunk_.resize(static_cast<size_t>(std::min(kObjectChunk, stat_.size - at)));
        Status s = bucket_->Read(*tree_, node_, at, chunk_);
        if (!s.ok()) {
          chunk_.clear();
          return s;
        }
      }
      const auto from = static_cast<size_t>(at - chunk_at_);
      const size_t n = std::min(dst.size() - done, chunk_.size() - from);
      std::copy_n(chunk_.begin() + static_cast<ptrdiff_t>(from), n, dst.begin() + done);
      done += n;
    }
    return Status::OK();
  }

 private:
  const BucketSource* bucket_;
  const SourceTree* tree_;
  uint32_t node_;
  std::vector<uint8_t> chunk_;
  uint64_t chunk_at_ = 0;
};

class FolderSource final : public BuildSource {
 public:
  explicit FolderSource(SourceTree tree) { tree_ = std::move(tree); }

  Result<std::unique_ptr<SourceFile>> OpenFile(const SourceTree& tree, uint32_t node,
                                               size_t /*turn*/) override {
    auto fd = tree.OpenFile(node);  // relative to a folder: the path may exceed PATH_MAX
    if (!fd) return Err(fd.error());
    std::string path = tree.AbsPath(tree.nodes[node]);
    auto stat = FstatOf(fd->get(), path);
    if (!stat) return Err(stat.error());
    return std::unique_ptr<SourceFile>(
        std::make_unique<FolderFile>(std::move(*fd), std::move(path), *stat));
  }
};

class ArchiveBuildSource final : public BuildSource {
 public:
  explicit ArchiveBuildSource(std::unique_ptr<ArchiveSource> archive)
      : archive_(std::move(archive)) {
    tree_ = std::move(archive_->tree());
  }

  void StartReading(const std::vector<uint32_t>& want) override { archive_->StartReading(want); }

  Result<std::unique_ptr<SourceFile>> OpenFile(const SourceTree& tree, uint32_t node,
                                               size_t turn) override {
    auto member = archive_->OpenMember(turn);
    if (!member) return Err(member.error());
    return std::unique_ptr<SourceFile>(
        std::make_unique<MemberFile>(std::move(*member), ListedStat(tree.nodes[node])));
  }

  void Cancel() override { archive_->Cancel(); }

 private:
  std::unique_ptr<ArchiveSource> archive_;
};

class BucketBuildSource final : public BuildSource {
 public:
  BucketBuildSource(std::unique_ptr<BucketSource> bucket, unsigned connections)
      : bucket_(std::move(bucket)), connections_(connections) {
    tree_ = std::move(bucket_->tree());
  }

  // Objects are read over the network: more at once than there are cores.
  unsigned ReadThreads(unsigned threads) const override { return std::max(threads, connections_); }

  Result<std::unique_ptr<SourceFile>> OpenFile(const SourceTree& tree, uint32_t node,
                                               size_t /*turn*/) override {
    return std::unique_ptr<SourceFile>(std::make_unique<ObjectFile>(bucket_.get(), &tree, node));
  }

 private:
  std::unique_ptr<BucketSource> bucket_;
  unsigned connections_;
};

}  // namespace

Result<std::unique_ptr<BuildSource>> BuildSource::Open(const std::string& source, bool nested,
                                                       const RemoteOptions& remote,
                                                       const ListingProgress& progress) {
  if (IsRemoteUrl(source)) {
    auto access = RemoteAccess::Create(source, remote);
    if (!access) return Err(access.error());
    if (IsRemoteArchiveUrl(source)) {
      auto shared = std::make_shared<const RemoteAccess>(std::move(*access));
      auto archive =
          ArchiveSource::Open(shared->name, nested, progress, RemoteArchiveOpener(shared));
      if (!archive) return Err(archive.error());
      return std::unique_ptr<BuildSource>(
          std::make_unique<ArchiveBuildSource>(std::move(*archive)));
    }
    auto bucket = BucketSource::Open(std::move(*access), progress);
    if (!bucket) return Err(bucket.error());
    return std::unique_ptr<BuildSource>(std::make_unique<BucketBuildSource>(
        std::move(*bucket), static_cast<unsigned>(remote.connections)));
  }
  struct stat st;
  if (::stat(source.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    auto archive = ArchiveSource::Open(source, nested, progress);
    if (!archive) return Err(archive.error());
    return std::unique_ptr<BuildSource>(std::make_unique<ArchiveBuildSource>(std::move(*archive)));
  }
  auto tree = WalkSource(source, progress);
  if (!tree) return Err(tree.error());
  return std::unique_ptr<BuildSource>(std::make_unique<FolderSource>(std::move(*tree)));
}

}  // namespace pcrfs::tools
