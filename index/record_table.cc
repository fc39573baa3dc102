#include "index/record_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs::index {

Result<std::shared_ptr<TableFile>> TableFile::Create(const std::string& folder) {
  const std::string name = folder + "/record tables";
  int fd = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // A file system without O_TMPFILE: a unique name, removed at once.
    std::string path = folder + "/.pcrfs-tables-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(path.c_str());
  }
  if (fd < 0) return Err(Status::FromErrno(name + ": cannot create", errno));
  return std::shared_ptr<TableFile>(new TableFile(UniqueFd(fd), name));
}

uint64_t TableFile::Take(uint64_t n) {
  MutexLock lock(&mu_);
  const uint64_t offset = end_;
  end_ += n;
  live_ += n;
  return offset;
}

Status TableFile::Write(uint64_t offset, const uint8_t* src, size_t n) const {
  return PwriteFull(fd_.get(), src, n, offset, name_);
}

Status TableFile::Read(uint64_t offset, size_t n, uint8_t* dst) const {
  return PreadFull(fd_.get(), dst, n, offset, name_);
}

void TableFile::Release(uint64_t offset, uint64_t n) const {
  if (n == 0) return;
  {
    MutexLock lock(&mu_);
    live_ -= std::min(live_, n);
  }
  // Best effort: a file system without hole punching keeps the bytes until unmount.
  (void)::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(offset), static_cast<off_t>(n));
}

uint64_t TableFile::LiveBytes() const {
  MutexLock lock(&mu_);
  return live_;
}

RecordTable::RecordTable(uint32_t num_images,
                         const std::array<uint64_t, kNumGroups + 1>& group_offset, int groups)
    : groups_(std::clamp(groups, 1, kNumGroups)) {
  bool wide = false;
  for (size_t g = 0; g < static_cast<size_t>(groups_); ++g) {
    base_[g] = group_offset[g];
    // The index checks that regions are in order; a reversed pair is an empty region here.
    region_[g] = group_offset[g + 1] >= group_offset[g] ? group_offset[g + 1] - group_offset[g] : 0;
    wide = wide || region_[g] >= kBad32;
  }
  kinds_.resize(num_images);
  crcs_.resize(size_t{num_images} * static_cast<size_t>(groups_));
  if (wide) {
    ends64_.resize(crcs_.size());
  } else {
    ends32_.resize(crcs_.size());
  }
}

RecordTable::~RecordTable() {
  if (file_ != nullptr) file_->Release(file_offset_, file_bytes_);
}

void RecordTable::Add(uint32_t slot, EntryKind kind, const std::array<uint64_t, kNumGroups>& length,
                      const std::array<uint32_t, kNumGroups>& masked_crc) {
  kinds_[slot] = kind;
  const auto n = static_cast<size_t>(groups_);
  for (size_t g = 0; g < n; ++g) {
    const size_t i = size_t{slot} * n + g;
    crcs_[i] = masked_crc[g];
    // Derived offsets stay inside the region the index gives (docs/format.md, "Piece offsets
    // are not stored"); a slot that does not fit is marked, and so is every later slot of the
    // region, so only the files it touches fail.
    const uint64_t start = slot == 0 ? 0 : End(i - n);
    const bool fits = start <= region_[g] && length[g] <= region_[g] - start;
    if (ends64_.empty()) {
      ends32_[i] = fits ? static_cast<uint32_t>(start + length[g]) : kBad32;
    } else {
      ends64_[i] = fits ? start + length[g] : UINT64_MAX;
    }
  }
}

Status RecordTable::MoveTo(std::shared_ptr<TableFile> file) {
  if (file == nullptr || file_ != nullptr) return Status::OK();
  const size_t n = static_cast<size_t>(groups_);
  const size_t row = RowSize();
  const uint64_t total = uint64_t{kinds_.size()} * row;
  const uint64_t offset = file->Take(total);
  // Written in pieces of at most 64 KiB: no transient copy of the whole table on the heap.
  std::vector<uint8_t> bytes;
  bytes.reserve(std::min<uint64_t>(total, (64 << 10) / row * row));
  uint64_t written = 0;
  const uint64_t bad = ends64_.empty() ? kBad32 : UINT64_MAX;
  for (size_t slot = 0; slot < kinds_.size(); ++slot) {
    const size_t at = bytes.size();
    bytes.resize(at + row);
    uint8_t* p = bytes.data() + at;
    for (size_t g = 0; g < n; ++g) {
      const uint64_t end = End(slot * n + g);
      EncodeFixed32(p + g * 4, crcs_[slot * n + g]);
      EncodeFixed64(p + n * 4 + g * 8, end == bad ? UINT64_MAX : end);
    }
    EncodeFixed32(p + n * 12, crc32c::Mask(crc32c::Value(p, n * 12)));
    if (bytes.size() + row > bytes.capacity() || slot + 1 == kinds_.size()) {
      if (Status s = file->Write(offset + written, bytes.data(), bytes.size()); !s.ok()) {
        file->Release(offset, total);
        return s;
      }
      written += bytes.size();
      bytes.clear();
    }
  }
  file_offset_ = offset;
  file_bytes_ = total;
  file_ = std::move(file);
  // Freed, not just cleared (`v = {}` keeps the capacity).
  std::vector<uint32_t>().swap(crcs_);
  std::vector<uint32_t>().swap(ends32_);
  std::vector<uint64_t>().swap(ends64_);
  return Status::OK();
}

Status RecordTable::Pieces(uint32_t slot, PieceRefs* out) const {
  const auto n = static_cast<size_t>(groups_);
  if (file_ == nullptr) {
    const uint64_t bad = ends64_.empty() ? kBad32 : UINT64_MAX;
    for (size_t g = 0; g < n; ++g) {
      const size_t i = size_t{slot} * n + g;
      const uint64_t start = slot == 0 ? 0 : End(i - n);
      const uint64_t end = End(i);
      (*out)[g] = start == bad || end == bad ? PieceRef{UINT64_MAX, 0, crcs_[i]}
                                             : PieceRef{base_[g] + start, end - start, crcs_[i]};
    }
    return Status::OK();
  }
  // The row before (where this slot's pieces start) and this one, in one read.
  const size_t row = RowSize();
  const size_t first = slot == 0 ? 0 : slot - 1;
  const size_t rows = slot == 0 ? 1 : 2;
  std::array<uint8_t, 2 * (kNumGroups * 12 + 4)> buf;
  PCRFS_RETURN_IF_ERROR(file_->Read(file_offset_ + first * row, rows * row, buf.data()));
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* p = buf.data() + r * row;
    if (crc32c::Unmask(DecodeFixed32(p + n * 12)) != crc32c::Value(p, n * 12)) {
      return Status::Corruption(file_->name() + ": row " + std::to_string(first + r) +
                                " of a record table fails its CRC");
    }
  }
  const uint8_t* cur = buf.data() + (rows - 1) * row;
  for (size_t g = 0; g < n; ++g) {
    const uint64_t start = slot == 0 ? 0 : DecodeFixed64(buf.data() + n * 4 + g * 8);
    const uint64_t end = DecodeFixed64(cur + n * 4 + g * 8);
    const uint32_t crc = DecodeFixed32(cur + g * 4);
    // Checked again, as Add checked it: the bytes came back from a file.
    (*out)[g] = start == UINT64_MAX || end == UINT64_MAX || start > end || end > region_[g]
                    ? PieceRef{UINT64_MAX, 0, crc}
                    : PieceRef{base_[g] + start, end - start, crc};
  }
  return Status::OK();
}

}  // namespace pcrfs::index
