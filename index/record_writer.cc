#include "index/record_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"

namespace pcrfs::index {
namespace {

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// An unlinked temporary file in `dir`: O_TMPFILE where the filesystem has it, otherwise
// mkstemp + unlink. Either way nothing is left behind if the process dies.
Result<UniqueFd> OpenUnlinkedTemp(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return UniqueFd(fd);
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    return Err(Status::FromErrno("create temporary file in " + dir, errno));
  }
  std::string tmpl = dir + "/.pcrfs-spill-XXXXXX";
  fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return Err(Status::FromErrno("create temporary file " + tmpl, errno));
  ::unlink(tmpl.c_str());
  return UniqueFd(fd);
}

}  // namespace

struct RecordWriter::Impl {
  std::string path;
  std::string tmp_path;
  std::string dir;
  uint64_t memory_budget = 0;

  // Group g's bytes so far are spill[g] (spill_size[g] bytes) followed by buffer[g].
  std::array<std::vector<uint8_t>, kNumGroups> buffer;
  std::array<UniqueFd, kNumGroups> spill;
  std::array<uint64_t, kNumGroups> spill_size{};
  uint64_t buffered = 0;  // sum of buffer[g].size()

  std::array<uint64_t, kNumGroups> region_length{};
  std::vector<RecordImage> images;  // pieces[g].offset holds the offset inside region g for now
  std::vector<PieceBlockCrcs> block_crcs;
  std::string names;

  bool tmp_created = false;
  bool finished = false;
  Status failed;  // sticky: once an Add or Finish fails, the writer is unusable

  Status SpillAll() {
    for (int g = 0; g < kNumGroups; ++g) {
      auto& buf = buffer[static_cast<size_t>(g)];
      if (buf.empty()) continue;
      PCRFS_RETURN_IF_ERROR(AppendToSpill(g, buf.data(), buf.size()));
      buffered -= buf.size();
      buf.clear();
      buf.shrink_to_fit();
    }
    return Status::OK();
  }

  Status AppendToSpill(int g, const uint8_t* data, size_t n) {
    auto gi = static_cast<size_t>(g);
    if (!spill[gi].valid()) {
      auto fd = OpenUnlinkedTemp(dir);
      if (!fd) return fd.error();
      spill[gi] = std::move(*fd);
    }
    PCRFS_RETURN_IF_ERROR(
        WriteFull(spill[gi].get(), data, n,
                  "spill file of " + path + " (group " + std::to_string(g + 1) + ")"));
    spill_size[gi] += n;
    return Status::OK();
  }

  Status AppendPiece(int g, std::span<const uint8_t> piece) {
    if (piece.empty()) return Status::OK();
    if (buffered + piece.size() > memory_budget) {
      PCRFS_RETURN_IF_ERROR(SpillAll());
      if (piece.size() > memory_budget) return AppendToSpill(g, piece.data(), piece.size());
    }
    auto& buf = buffer[static_cast<size_t>(g)];
    buf.insert(buf.end(), piece.begin(), piece.end());
    buffered += piece.size();
    return Status::OK();
  }

  // Drops the bytes of group g past `length` (an AddStream that failed half way).
  Status TruncateGroup(int g, uint64_t length) {
    auto gi = static_cast<size_t>(g);
    auto& buf = buffer[gi];
    if (spill_size[gi] >= length) {
      buffered -= buf.size();
      buf.clear();
      if (spill[gi].valid() && spill_size[gi] > length) {
        if (::ftruncate(spill[gi].get(), static_cast<off_t>(length)) != 0 ||
            ::lseek(spill[gi].get(), static_cast<off_t>(length), SEEK_SET) < 0) {
          return Status::FromErrno("spill file of " + path, errno);
        }
      }
      spill_size[gi] = length;
    } else {
      const uint64_t keep = length - spill_size[gi];
      buffered -= buf.size() - keep;
      buf.resize(static_cast<size_t>(keep));
    }
    return Status::OK();
  }

  Status CheckSlot(std::string_view image_path) const {
    if (!failed.ok()) return failed;
    if (finished) return Status::InvalidArgument(path + ": Add after Finish");
    if (image_path.empty() || image_path.find('\0') != std::string_view::npos) {
      return Status::InvalidArgument(path + ": image \"" + std::string(image_path) +
                                     "\": path is empty or contains NUL");
    }
    if (images.size() >= kMaxRecordImages) {
      return Status::InvalidArgument(path + ": more than " + std::to_string(kMaxRecordImages) +
                                     " images in one record");
    }
    if (names.size() + image_path.size() > UINT32_MAX) {
      return Status::InvalidArgument(path + ": names blob would exceed 4 GiB");
    }
    return Status::OK();
  }

  Status WriteAll(int fd, uint64_t* offset, const void* data, size_t n) {
    PCRFS_RETURN_IF_ERROR(PwriteFull(fd, data, n, *offset, tmp_path));
    *offset += n;
    return Status::OK();
  }

  // Finish's steps: where everything goes, the tables section, the group regions.
  RecordLayout PlanLayout() const;
  std::string EncodeTables(const RecordLayout& layout) const;
  Status WriteRegions(int fd, uint64_t* off);
  Status DoFinish(RecordLayout* layout);
};

RecordWriter::RecordWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RecordWriter::~RecordWriter() {
  if (impl_ && impl_->tmp_created && !impl_->finished) ::unlink(impl_->tmp_path.c_str());
}

Result<std::unique_ptr<RecordWriter>> RecordWriter::Create(std::string path) {
  return Create(std::move(path), kDefaultMemoryBudget);
}

Result<std::unique_ptr<RecordWriter>> RecordWriter::Create(std::string path,
                                                           uint64_t memory_budget) {
  if (path.empty()) return Err(Status::InvalidArgument("record path is empty"));
  auto impl = std::make_unique<Impl>();
  impl->dir = DirName(path);
  impl->tmp_path = path + ".tmp";
  impl->path = std::move(path);
  impl->memory_budget = memory_budget;
  struct stat st;
  if (::stat(impl->dir.c_str(), &st) != 0) return Err(Status::FromErrno(impl->dir, errno));
  if (!S_ISDIR(st.st_mode)) return Err(Status::InvalidArgument(impl->dir + ": not a directory"));
  return std::unique_ptr<RecordWriter>(new RecordWriter(std::move(impl)));
}

Status RecordWriter::Add(std::string_view path, EntryKind kind,
                         PassthroughReason passthrough_reason,
                         std::span<const std::span<const uint8_t>> pieces) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.CheckSlot(path));
  const std::string what = w.path + ": image \"" + std::string(path) + "\"";
  if (kind == EntryKind::kJpeg) {
    if (pieces.size() != kNumGroups) {
      return Status::InvalidArgument(what + ": a JPEG takes " + std::to_string(kNumGroups) +
                                     " pieces, got " + std::to_string(pieces.size()));
    }
    if (passthrough_reason != PassthroughReason::kNone) {
      return Status::InvalidArgument(what + ": a JPEG has no passthrough reason");
    }
  } else if (kind == EntryKind::kPassthrough) {
    if (pieces.size() > 1) {  // none: an empty file
      return Status::InvalidArgument(what + ": a passthrough file takes 1 piece, got " +
                                     std::to_string(pieces.size()));
    }
  } else {
    return Status::InvalidArgument(what + ": only JPEG and passthrough files go in records");
  }

  RecordImage img;
  img.path = std::string(path);
  img.kind = kind;
  img.passthrough_reason = passthrough_reason;
  for (int g = 0; g < kNumGroups; ++g) {
    auto gi = static_cast<size_t>(g);
    std::span<const uint8_t> piece;
    if (gi < pieces.size()) piece = pieces[gi];
    PieceRef& ref = img.pieces[gi];
    ref.offset = w.region_length[gi];
    ref.length = piece.size();
    ref.masked_crc = crc32c::Mask(crc32c::Value(piece.data(), piece.size()));
    if (HasBlockCrcs(piece.size())) {
      PieceBlockCrcs blocks{static_cast<uint32_t>(w.images.size()), g + 1, {}};
      for (uint64_t b = 0; b < NumChecksumBlocks(piece.size()); ++b) {
        auto block = piece.subspan(static_cast<size_t>(b * kChecksumBlockSize),
                                   static_cast<size_t>(ChecksumBlockLength(piece.size(), b)));
        blocks.masked.push_back(crc32c::Mask(crc32c::Value(block.data(), block.size())));
      }
      w.block_crcs.push_back(std::move(blocks));
    }
    Status s = w.AppendPiece(g, piece);
    if (!s.ok()) {
      w.failed = s;
      return s;
    }
    w.region_length[gi] += piece.size();
  }
  w.names.append(path);
  w.images.push_back(std::move(img));
  return Status::OK();
}

Status RecordWriter::AddStream(std::string_view path, PassthroughReason passthrough_reason,
                               uint64_t size, const ChunkReader& read) {
  Impl& w = *impl_;
  PCRFS_RETURN_IF_ERROR(w.CheckSlot(path));
  const uint64_t start = w.region_length[0];
  PieceBlockCrcs blocks{static_cast<uint32_t>(w.images.size()), 1, {}};
  uint32_t crc = 0;
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(size, kChecksumBlockSize)));
  for (uint64_t b = 0; b < NumChecksumBlocks(size) && size > 0; ++b) {
    const auto n = static_cast<size_t>(ChecksumBlockLength(size, b));
    std::span<uint8_t> dst(chunk.data(), n);
    Status s = read(b * kChecksumBlockSize, dst);
    if (s.ok()) {
      s = w.AppendPiece(0, dst);
      if (!s.ok()) w.failed = s;  // the writer's own files failed: it is unusable
    }
    if (!s.ok()) {
      if (w.failed.ok()) {
        Status undo = w.TruncateGroup(0, start);
        if (!undo.ok()) w.failed = undo;
      }
      return s;
    }
    const uint32_t block_crc = crc32c::Value(dst.data(), n);
    blocks.masked.push_back(crc32c::Mask(block_crc));
    crc = crc32c::Extend(crc, dst.data(), n);
  }
  RecordImage img;
  img.path = std::string(path);
  img.kind = EntryKind::kPassthrough;
  img.passthrough_reason = passthrough_reason;
  for (int g = 0; g < kNumGroups; ++g) {
    img.pieces[static_cast<size_t>(g)].offset = w.region_length[static_cast<size_t>(g)];
  }
  img.pieces[0].length = size;
  // Empty pieces carry the CRC of zero bytes, as Add() gives them.
  for (PieceRef& p : img.pieces) p.masked_crc = crc32c::Mask(0);
  img.pieces[0].masked_crc = crc32c::Mask(crc);
  w.region_length[0] += size;
  if (HasBlockCrcs(size)) w.block_crcs.push_back(std::move(blocks));
  w.names.append(path);
  w.images.push_back(std::move(img));
  return Status::OK();
}

const std::vector<PieceBlockCrcs>& RecordWriter::block_crcs() const { return impl_->block_crcs; }

Result<RecordLayout> RecordWriter::Finish() {
  Impl& w = *impl_;
  if (!w.failed.ok()) return Err(w.failed);
  if (w.finished) return Err(Status::InvalidArgument(w.path + ": Finish called twice"));
  RecordLayout layout;
  Status s = w.DoFinish(&layout);
  if (!s.ok()) {
    w.failed = s;
    return Err(s);
  }
  w.finished = true;
  return layout;
}

RecordLayout RecordWriter::Impl::PlanLayout() const {
  RecordLayout layout;
  layout.data_offset = RecordDataOffset(RecordTableSize(images.size(), names.size()));
  layout.group_offset[0] = layout.data_offset;
  for (size_t g = 0; g < kNumGroups; ++g) {
    layout.group_offset[g + 1] = layout.group_offset[g] + region_length[g];
  }
  layout.file_size = layout.group_offset[kNumGroups] + kRecordFooterSize;
  return layout;
}

std::string RecordWriter::Impl::EncodeTables(const RecordLayout& layout) const {
  const uint64_t table_size = RecordTableSize(images.size(), names.size());
  std::string tables;
  tables.reserve(static_cast<size_t>(layout.data_offset - kRecordHeaderSize));
  RecordGroupTable groups;
  for (size_t g = 0; g < kNumGroups; ++g) {
    groups.offset[g] = layout.group_offset[g];
    groups.length[g] = region_length[g];
  }
  groups.EncodeTo(&tables);
  uint32_t name_offset = 0;
  for (const RecordImage& img : images) {
    RecordImageEntry entry;
    entry.kind = static_cast<uint8_t>(img.kind);
    entry.passthrough_reason = img.passthrough_reason;
    entry.name_offset = name_offset;
    entry.name_length = static_cast<uint32_t>(img.path.size());
    for (size_t g = 0; g < kNumGroups; ++g) {
      entry.length[g] = img.pieces[g].length;
      entry.masked_crc[g] = img.pieces[g].masked_crc;
    }
    entry.EncodeTo(&tables);
    name_offset += entry.name_length;  // Add() keeps the names blob under 4 GiB
  }
  tables.append(names);
  PutFixed32(&tables, crc32c::Mask(crc32c::Value(tables.data(), tables.size())));
  tables.append(static_cast<size_t>(layout.data_offset - kRecordHeaderSize - table_size), '\0');
  return tables;
}

Status RecordWriter::Impl::DoFinish(RecordLayout* out) {
  RecordLayout& layout = *out;
  layout = PlanLayout();
  std::string tables = EncodeTables(layout);
  RecordHeader h;
  h.num_images = static_cast<uint32_t>(images.size());
  h.names_size = static_cast<uint32_t>(names.size());
  h.data_offset = layout.data_offset;
  h.file_size = layout.file_size;
  h.table_size = RecordTableSize(images.size(), names.size());
  uint8_t header[RecordHeader::kEncodedLength];
  h.EncodeTo(header);

  auto fd = OpenFile(tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!fd) return fd.error();
  tmp_created = true;
  uint64_t off = 0;
  PCRFS_RETURN_IF_ERROR(WriteAll(fd->get(), &off, header, sizeof(header)));
  PCRFS_RETURN_IF_ERROR(WriteAll(fd->get(), &off, tables.data(), tables.size()));
  tables.clear();
  tables.shrink_to_fit();
  PCRFS_RETURN_IF_ERROR(WriteRegions(fd->get(), &off));
  if (off != layout.group_offset[kNumGroups]) {
    return Status::Corruption(tmp_path + ": wrote " + std::to_string(off) + " bytes, expected " +
                              std::to_string(layout.group_offset[kNumGroups]));
  }
  uint8_t footer[RecordFooter::kEncodedLength];
  RecordFooter{layout.file_size}.EncodeTo(footer);
  PCRFS_RETURN_IF_ERROR(WriteAll(fd->get(), &off, footer, sizeof(footer)));
  if (::fsync(fd->get()) != 0) return Status::FromErrno("fsync " + tmp_path, errno);
  fd->Reset();
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    return Status::FromErrno("rename " + tmp_path + " -> " + path, errno);
  }
  PCRFS_RETURN_IF_ERROR(FsyncPath(dir));

  for (RecordImage& img : images) {
    for (size_t g = 0; g < kNumGroups; ++g) img.pieces[g].offset += layout.group_offset[g];
  }
  layout.images = std::move(images);
  images.clear();
  return Status::OK();
}

Status RecordWriter::Impl::WriteRegions(int fd, uint64_t* off) {
  std::vector<uint8_t> copy_buf;
  for (size_t g = 0; g < kNumGroups; ++g) {
    if (spill_size[g] > 0) {
      copy_buf.resize(1 << 20);
      const std::string what = "spill file of " + path;
      for (uint64_t pos = 0; pos < spill_size[g];) {
        size_t chunk =
            static_cast<size_t>(std::min<uint64_t>(copy_buf.size(), spill_size[g] - pos));
        PCRFS_RETURN_IF_ERROR(PreadFull(spill[g].get(), copy_buf.data(), chunk, pos, what));
        PCRFS_RETURN_IF_ERROR(WriteAll(fd, off, copy_buf.data(), chunk));
        pos += chunk;
      }
      spill[g].Reset();
    }
    PCRFS_RETURN_IF_ERROR(WriteAll(fd, off, buffer[g].data(), buffer[g].size()));
    buffer[g].clear();
    buffer[g].shrink_to_fit();
  }
  return Status::OK();
}

}  // namespace pcrfs::index
