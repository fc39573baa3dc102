#include "index/record_reader.h"

#include <algorithm>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs::index {
namespace {

Status Bad(const RandomAccessFile& file, const std::string& what) {
  return Status::Corruption(file.name() + ": not a valid pcrfs record: " + what);
}

std::string U(uint64_t v) { return std::to_string(v); }

// Reads n bytes of piece data at offset, checks them against masked_crc. `what` describes the
// piece for error messages.
Status ReadChecked(const RandomAccessFile& file, uint64_t offset, uint64_t length,
                   uint32_t masked_crc, const std::string& what, uint8_t* dst) {
  if (offset > file.Size() || length > file.Size() - offset) {
    return Status::Corruption(file.name() + ": " + what + " at offset " + U(offset) + " (" +
                              U(length) + " bytes) lies outside the file (" + U(file.Size()) +
                              " bytes)");
  }
  if (length > 0) {
    Status s = file.Read(offset, static_cast<size_t>(length), dst);
    if (!s.ok()) {
      // Keep the code (IOError stays IOError) but say which piece was being read.
      std::string msg = what + " at offset " + U(offset) + ": " + s.message();
      if (s.IsCorruption()) return Status::Corruption(file.name() + ": " + msg);
      return Status::IOError(msg, s.sys_errno());
    }
  }
  uint32_t actual = crc32c::Value(dst, static_cast<size_t>(length));
  if (crc32c::Mask(actual) != masked_crc) {
    return Status::Corruption(file.name() + ": " + what + " at offset " + U(offset) + " (" +
                              U(length) + " bytes): checksum mismatch");
  }
  return Status::OK();
}

std::string PieceName(int g) { return "piece of group " + std::to_string(g); }

}  // namespace

Result<RecordLayout> ReadRecordLayout(const RandomAccessFile& file) {
  const uint64_t size = file.Size();
  if (size < kRecordHeaderSize + kRecordFooterSize) {
    return Err(Bad(file, "file is " + U(size) + " bytes, shorter than header and footer"));
  }
  uint8_t header[kRecordHeaderSize];
  {
    Status s = file.Read(0, sizeof(header), header);
    if (!s.ok()) return Err(s);
  }
  if (std::memcmp(header, kRecordMagic, 8) != 0) return Err(Bad(file, "bad magic"));
  if (crc32c::Unmask(DecodeFixed32(header + 60)) != crc32c::Value(header, 60)) {
    return Err(Bad(file, "header checksum mismatch"));
  }
  const uint32_t version = DecodeFixed32(header + 8);
  if (version != kRecordFormatVersion) {
    return Err(Status::NotSupported(file.name() + ": record format version " + U(version) +
                                    " is not supported (this pcrfs reads " +
                                    U(kRecordFormatVersion) + ")"));
  }
  const uint32_t num_groups = DecodeFixed32(header + 12);
  const uint32_t n = DecodeFixed32(header + 16);
  const uint32_t names_size = DecodeFixed32(header + 20);
  const uint64_t data_offset = DecodeFixed64(header + 24);
  const uint64_t file_size = DecodeFixed64(header + 32);
  const uint64_t table_size = DecodeFixed64(header + 40);
  if (num_groups != kNumGroups) return Err(Bad(file, "header says " + U(num_groups) + " groups"));
  if (n > kMaxRecordImages) return Err(Bad(file, "header says " + U(n) + " images"));
  for (int i = 48; i < 60; ++i) {
    if (header[i] != 0) return Err(Bad(file, "reserved header bytes are not zero"));
  }
  if (file_size != size) {
    return Err(Bad(file, "header says " + U(file_size) + " bytes but the file has " + U(size) +
                             " (truncated or extended)"));
  }
  // n <= 2^24 and names_size < 2^32, so these cannot overflow.
  if (table_size != RecordTableSize(n, names_size)) {
    return Err(Bad(file, "table size " + U(table_size) + " does not match " + U(n) +
                             " images and " + U(names_size) + " name bytes"));
  }
  if (data_offset != RecordDataOffset(table_size)) {
    return Err(Bad(file, "data offset " + U(data_offset) + " does not follow the tables"));
  }
  if (data_offset > size - kRecordFooterSize) {
    return Err(Bad(file, "tables end past the footer"));
  }

  uint8_t footer[kRecordFooterSize];
  {
    Status s = file.Read(size - kRecordFooterSize, sizeof(footer), footer);
    if (!s.ok()) return Err(s);
  }
  if (std::memcmp(footer, kRecordEndMagic, 8) != 0) return Err(Bad(file, "bad footer magic"));
  if (DecodeFixed64(footer + 8) != size) return Err(Bad(file, "footer file size mismatch"));

  std::vector<uint8_t> tables(static_cast<size_t>(data_offset - kRecordHeaderSize));
  {
    Status s = file.Read(kRecordHeaderSize, tables.size(), tables.data());
    if (!s.ok()) return Err(s);
  }
  const uint8_t* t = tables.data();
  const size_t crc_pos = static_cast<size_t>(table_size - 4);
  if (crc32c::Unmask(DecodeFixed32(t + crc_pos)) != crc32c::Value(t, crc_pos)) {
    return Err(Bad(file, "table checksum mismatch"));
  }
  for (size_t i = static_cast<size_t>(table_size); i < tables.size(); ++i) {
    if (t[i] != 0) return Err(Bad(file, "padding after the tables is not zero"));
  }

  RecordLayout layout;
  layout.file_size = size;
  layout.data_offset = data_offset;
  layout.group_offset[0] = data_offset;
  std::array<uint64_t, kNumGroups> region_length{};
  for (int g = 0; g < kNumGroups; ++g) {
    auto gi = static_cast<size_t>(g);
    const uint64_t off = DecodeFixed64(t + 16 * gi);
    const uint64_t len = DecodeFixed64(t + 16 * gi + 8);
    if (off != layout.group_offset[gi]) {
      return Err(Bad(file, "region of group " + U(gi + 1) + " starts at " + U(off) + ", expected " +
                               U(layout.group_offset[gi])));
    }
    if (len > size - kRecordFooterSize - off) {
      return Err(Bad(file, "region of group " + U(gi + 1) + " runs past the footer"));
    }
    layout.group_offset[gi + 1] = off + len;
    region_length[gi] = len;
  }
  if (layout.group_offset[kNumGroups] != size - kRecordFooterSize) {
    return Err(
        Bad(file, "regions end at " + U(layout.group_offset[kNumGroups]) + ", not at the footer"));
  }

  const uint8_t* names = t + kRecordGroupTableSize + kRecordImageEntrySize * n;
  std::array<uint64_t, kNumGroups> used{};  // bytes of each region claimed so far
  layout.images.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* e = t + kRecordGroupTableSize + kRecordImageEntrySize * i;
    RecordImage& img = layout.images[i];
    const std::string who = "image " + U(i);
    const uint8_t kind = e[0];
    if (kind != static_cast<uint8_t>(EntryKind::kJpeg) &&
        kind != static_cast<uint8_t>(EntryKind::kPassthrough)) {
      return Err(Bad(file, who + " has kind " + U(kind)));
    }
    img.kind = static_cast<EntryKind>(kind);
    img.passthrough_reason = e[1];
    if (img.kind == EntryKind::kJpeg && img.passthrough_reason != 0) {
      return Err(Bad(file, who + " is a JPEG with a passthrough reason"));
    }
    if (e[2] != 0 || e[3] != 0 || DecodeFixed32(e + 12) != 0) {
      return Err(Bad(file, who + " has non-zero reserved bytes"));
    }
    const uint64_t name_off = DecodeFixed32(e + 4);
    const uint64_t name_len = DecodeFixed32(e + 8);
    if (name_len == 0 || name_off > names_size || name_len > names_size - name_off) {
      return Err(Bad(file, who + " has its name outside the names blob"));
    }
    img.path.assign(reinterpret_cast<const char*>(names + name_off), static_cast<size_t>(name_len));
    for (int g = 0; g < kNumGroups; ++g) {
      auto gi = static_cast<size_t>(g);
      const uint64_t len = DecodeFixed64(e + 16 + 12 * gi);
      if (len > region_length[gi] - used[gi]) {
        return Err(
            Bad(file, who + ": piece of group " + U(gi + 1) + " runs past the end of its region"));
      }
      if (img.kind == EntryKind::kPassthrough && g > 0 && len != 0) {
        return Err(Bad(file, who + " is passthrough but has data in group " + U(gi + 1)));
      }
      img.pieces[gi].offset = layout.group_offset[gi] + used[gi];
      img.pieces[gi].length = len;
      img.pieces[gi].masked_crc = DecodeFixed32(e + 16 + 12 * gi + 8);
      used[gi] += len;
    }
  }
  for (int g = 0; g < kNumGroups; ++g) {
    auto gi = static_cast<size_t>(g);
    if (used[gi] != region_length[gi]) {
      return Err(Bad(file, "pieces of group " + U(gi + 1) + " add up to " + U(used[gi]) +
                               " bytes, region has " + U(region_length[gi])));
    }
  }
  return layout;
}

Status ReadPiece(const RandomAccessFile& file, const PieceRef& piece, uint8_t* dst) {
  return ReadChecked(file, piece.offset, piece.length, piece.masked_crc, "piece", dst);
}

Status ReadLevel(const RandomAccessFile& file, EntryKind kind, const PieceRefs& pieces, int k,
                 std::vector<uint8_t>* out) {
  if (k < 1 || k > kNumGroups) {
    return Status::InvalidArgument(file.name() + ": level " + std::to_string(k) + " is not in 1.." +
                                   std::to_string(kNumGroups));
  }
  int num_pieces;
  switch (kind) {
    case EntryKind::kJpeg:
      num_pieces = k;
      break;
    case EntryKind::kPassthrough:
      num_pieces = 1;
      break;
    default:
      return Status::InvalidArgument(file.name() + ": a directory has no data");
  }
  // Bounds before allocating: a damaged entry must not make us allocate terabytes.
  uint64_t total = 0;
  for (int g = 0; g < num_pieces; ++g) {
    const PieceRef& p = pieces[static_cast<size_t>(g)];
    if (p.offset > file.Size() || p.length > file.Size() - p.offset) {
      return Status::Corruption(file.name() + ": " + PieceName(g + 1) + " at offset " +
                                U(p.offset) + " (" + U(p.length) +
                                " bytes) lies outside the file (" + U(file.Size()) + " bytes)");
    }
    total += p.length;  // each <= file size, at most 10 of them: no overflow
  }
  out->resize(static_cast<size_t>(total + (kind == EntryKind::kJpeg ? sizeof(kEoi) : 0)));
  uint8_t* dst = out->data();
  for (int g = 0; g < num_pieces; ++g) {
    const PieceRef& p = pieces[static_cast<size_t>(g)];
    PCRFS_RETURN_IF_ERROR(
        ReadChecked(file, p.offset, p.length, p.masked_crc, PieceName(g + 1), dst));
    dst += p.length;
  }
  if (kind == EntryKind::kJpeg) std::memcpy(dst, kEoi, sizeof(kEoi));
  return Status::OK();
}

Status ReadPieceBlock(const RandomAccessFile& file, const PieceRef& piece, int group,
                      uint64_t block, uint32_t masked_crc, uint8_t* dst) {
  if (block >= NumChecksumBlocks(piece.length)) {
    return Status::InvalidArgument(file.name() + ": block " + U(block) + " of a piece of " +
                                   U(piece.length) + " bytes");
  }
  const uint64_t begin = block * kChecksumBlockSize;
  // Bounds of the whole piece first, so a damaged entry is reported as such.
  if (piece.offset > file.Size() || piece.length > file.Size() - piece.offset) {
    return Status::Corruption(file.name() + ": " + PieceName(group) + " at offset " +
                              U(piece.offset) + " (" + U(piece.length) +
                              " bytes) lies outside the file (" + U(file.Size()) + " bytes)");
  }
  const std::string what = HasBlockCrcs(piece.length)
                               ? "block " + U(block) + " of the " + PieceName(group)
                               : PieceName(group);
  return ReadChecked(file, piece.offset + begin, ChecksumBlockLength(piece.length, block),
                     masked_crc, what, dst);
}

Status ScanPiece(const RandomAccessFile& file, const PieceRef& piece, const std::string& what,
                 const PieceBlockFn& fn) {
  if (piece.offset > file.Size() || piece.length > file.Size() - piece.offset) {
    return Status::Corruption(file.name() + ": " + what + " at offset " + U(piece.offset) + " (" +
                              U(piece.length) + " bytes) lies outside the file (" + U(file.Size()) +
                              " bytes)");
  }
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(piece.length, kChecksumBlockSize)));
  uint32_t crc = 0;
  const uint64_t blocks = NumChecksumBlocks(piece.length);
  for (uint64_t b = 0; b < blocks; ++b) {
    const auto n = static_cast<size_t>(ChecksumBlockLength(piece.length, b));
    const uint64_t at = piece.offset + b * kChecksumBlockSize;
    if (n > 0) {
      Status s = file.Read(at, n, buf.data());
      if (!s.ok()) {
        std::string msg = what + " at offset " + U(at) + ": " + s.message();
        if (s.IsCorruption()) return Status::Corruption(file.name() + ": " + msg);
        return Status::IOError(msg, s.sys_errno());
      }
    }
    crc = crc32c::Extend(crc, buf.data(), n);
    if (fn) PCRFS_RETURN_IF_ERROR(fn(b, std::span<const uint8_t>(buf.data(), n)));
  }
  if (crc32c::Mask(crc) != piece.masked_crc) {
    return Status::Corruption(file.name() + ": " + what + " at offset " + U(piece.offset) + " (" +
                              U(piece.length) + " bytes): checksum mismatch");
  }
  return Status::OK();
}

Result<std::vector<uint32_t>> ComputeBlockCrcs(const RandomAccessFile& file,
                                               const PieceRef& piece) {
  std::vector<uint32_t> crcs;
  crcs.reserve(static_cast<size_t>(NumChecksumBlocks(piece.length)));
  PCRFS_RETURN_ERR_IF_ERROR(
      ScanPiece(file, piece, "piece", [&](uint64_t, std::span<const uint8_t> bytes) {
        crcs.push_back(crc32c::Mask(crc32c::Value(bytes.data(), bytes.size())));
        return Status::OK();
      }));
  return crcs;
}

Result<std::vector<DamagedImage>> VerifyRecord(const RandomAccessFile& file) {
  auto layout = ReadRecordLayout(file);
  if (!layout) return Err(layout.error());
  std::vector<DamagedImage> damaged;
  for (uint32_t i = 0; i < layout->images.size(); ++i) {
    const RecordImage& img = layout->images[i];
    for (int g = 0; g < kNumGroups; ++g) {
      const PieceRef& p = img.pieces[static_cast<size_t>(g)];
      // Block by block: a multi-GB passthrough file costs one block of memory.
      Status s = ScanPiece(file, p, PieceName(g + 1), nullptr);
      if (!s.ok()) {
        damaged.push_back(DamagedImage{i, img.path, s.ToString()});
        break;
      }
    }
  }
  return damaged;
}

}  // namespace pcrfs::index
