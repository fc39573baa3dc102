#include "index/record_reader.h"

#include <algorithm>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"
#include "index/level_plan.h"

namespace pcrfs::index {
namespace {

Status Bad(const RandomAccessFile& file, const std::string& what) {
  return Status::Corruption(file.name() + ": not a valid pcrfs record: " + what);
}

std::string U(uint64_t v) { return std::to_string(v); }

// Reads n bytes of piece data at offset, checks them against masked_crc. `what` describes the
// piece for error messages. `source` (may be null): the file's hooks, to drop a damaged copy.
Status ReadChecked(const RandomAccessFile& file, uint64_t offset, uint64_t length,
                   uint32_t masked_crc, const std::string& what, uint8_t* dst,
                   const SpeculationSource* source = nullptr) {
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
  if (crc32c::Mask(actual) != masked_crc && length > 0 && source != nullptr &&
      source->DropCached(offset, length)) {
    // A damaged cached copy (a remote store's disk cache): read it once more from the origin.
    Status s = file.Read(offset, static_cast<size_t>(length), dst);
    if (!s.ok()) {
      std::string msg = what + " at offset " + U(offset) + ": " + s.message();
      if (s.IsCorruption()) return Status::Corruption(file.name() + ": " + msg);
      return Status::IOError(msg, s.sys_errno());
    }
    actual = crc32c::Value(dst, static_cast<size_t>(length));
  }
  if (crc32c::Mask(actual) != masked_crc) {
    return Status::Corruption(file.name() + ": " + what + " at offset " + U(offset) + " (" +
                              U(length) + " bytes): checksum mismatch");
  }
  return Status::OK();
}

std::string PieceName(int g) { return "piece of group " + std::to_string(g); }

}  // namespace

namespace {

// The header, checked against itself and the file's size.
Result<RecordHeader> ReadHeader(const RandomAccessFile& file) {
  const uint64_t size = file.Size();
  if (size < kRecordHeaderSize + kRecordFooterSize) {
    return Err(Bad(file, "file is " + U(size) + " bytes, shorter than header and footer"));
  }
  uint8_t bytes[RecordHeader::kEncodedLength];
  PCRFS_RETURN_ERR_IF_ERROR(file.Read(0, sizeof(bytes), bytes));
  auto h = RecordHeader::DecodeFrom(bytes);
  if (!h) return Err(Bad(file, h.error().message()));
  if (h->version != kRecordFormatVersion) {
    return Err(Status::NotSupported(file.name() + ": record format version " + U(h->version) +
                                    " is not supported (this pcrfs reads " +
                                    U(kRecordFormatVersion) + ")"));
  }
  if (h->num_images > kMaxRecordImages) {
    return Err(Bad(file, "header says " + U(h->num_images) + " images"));
  }
  if (h->file_size != size) {
    return Err(Bad(file, "header says " + U(h->file_size) + " bytes but the file has " + U(size) +
                             " (truncated or extended)"));
  }
  // num_images <= 2^24 and names_size < 2^32, so these cannot overflow.
  if (h->table_size != RecordTableSize(h->num_images, h->names_size)) {
    return Err(Bad(file, "table size " + U(h->table_size) + " does not match " + U(h->num_images) +
                             " images and " + U(h->names_size) + " name bytes"));
  }
  if (h->data_offset != RecordDataOffset(h->table_size)) {
    return Err(Bad(file, "data offset " + U(h->data_offset) + " does not follow the tables"));
  }
  if (h->data_offset > size - kRecordFooterSize)
    return Err(Bad(file, "tables end past the footer"));
  return h;
}

Status CheckFooter(const RandomAccessFile& file) {
  uint8_t bytes[RecordFooter::kEncodedLength];
  PCRFS_RETURN_IF_ERROR(file.Read(file.Size() - kRecordFooterSize, sizeof(bytes), bytes));
  auto footer = RecordFooter::DecodeFrom(bytes);
  if (!footer) return Bad(file, footer.error().message());
  if (footer->file_size != file.Size()) return Bad(file, "footer file size mismatch");
  return Status::OK();
}

// The tables section (and its padding up to the data), CRC-checked.
Result<std::vector<uint8_t>> ReadTables(const RandomAccessFile& file, const RecordHeader& h) {
  std::vector<uint8_t> tables(static_cast<size_t>(h.data_offset - kRecordHeaderSize));
  PCRFS_RETURN_ERR_IF_ERROR(file.Read(kRecordHeaderSize, tables.size(), tables.data()));
  const uint8_t* t = tables.data();
  const size_t crc_pos = static_cast<size_t>(h.table_size - 4);
  if (crc32c::Unmask(DecodeFixed32(t + crc_pos)) != crc32c::Value(t, crc_pos)) {
    return Err(Bad(file, "table checksum mismatch"));
  }
  for (size_t i = static_cast<size_t>(h.table_size); i < tables.size(); ++i) {
    if (t[i] != 0) return Err(Bad(file, "padding after the tables is not zero"));
  }
  return tables;
}

// The group regions: contiguous from the data offset up to the footer.
Status ParseGroupTable(const RandomAccessFile& file, const uint8_t* t, RecordLayout* layout,
                       std::array<uint64_t, kNumGroups>* region_length) {
  const uint64_t size = file.Size();
  const RecordGroupTable groups = RecordGroupTable::DecodeFrom(t);
  for (size_t g = 0; g < kNumGroups; ++g) {
    const uint64_t off = groups.offset[g], len = groups.length[g];
    if (off != layout->group_offset[g]) {
      return Bad(file, "region of group " + U(g + 1) + " starts at " + U(off) + ", expected " +
                           U(layout->group_offset[g]));
    }
    if (len > size - kRecordFooterSize - off) {
      return Bad(file, "region of group " + U(g + 1) + " runs past the footer");
    }
    layout->group_offset[g + 1] = off + len;
    (*region_length)[g] = len;
  }
  if (layout->group_offset[kNumGroups] != size - kRecordFooterSize) {
    return Bad(file,
               "regions end at " + U(layout->group_offset[kNumGroups]) + ", not at the footer");
  }
  return Status::OK();
}

// Image i of the image table; its pieces follow those of images 0..i-1 in each region
// (`used` counts the bytes claimed so far).
Status ParseImage(const RandomAccessFile& file, const RecordHeader& h, const uint8_t* t, uint32_t i,
                  const std::array<uint64_t, kNumGroups>& region_length,
                  std::array<uint64_t, kNumGroups>* used, RecordLayout* layout) {
  const std::string who = "image " + U(i);
  auto e = RecordImageEntry::DecodeFrom(t + kRecordGroupTableSize + kRecordImageEntrySize * i);
  if (!e) return Bad(file, who + " has " + e.error().message());
  if (e->kind != static_cast<uint8_t>(EntryKind::kJpeg) &&
      e->kind != static_cast<uint8_t>(EntryKind::kPassthrough)) {
    return Bad(file, who + " has kind " + U(e->kind));
  }
  RecordImage& img = layout->images[i];
  img.kind = static_cast<EntryKind>(e->kind);
  img.passthrough_reason = e->passthrough_reason;
  if (img.kind == EntryKind::kJpeg && img.passthrough_reason != PassthroughReason::kNone) {
    return Bad(file, who + " is a JPEG with a passthrough reason");
  }
  if (e->name_length == 0 || e->name_offset > h.names_size ||
      e->name_length > h.names_size - e->name_offset) {
    return Bad(file, who + " has its name outside the names blob");
  }
  const uint8_t* names = t + kRecordGroupTableSize + kRecordImageEntrySize * h.num_images;
  img.path.assign(reinterpret_cast<const char*>(names + e->name_offset), e->name_length);
  for (size_t g = 0; g < kNumGroups; ++g) {
    const uint64_t len = e->length[g];
    if (len > region_length[g] - (*used)[g]) {
      return Bad(file, who + ": piece of group " + U(g + 1) + " runs past the end of its region");
    }
    if (img.kind == EntryKind::kPassthrough && g > 0 && len != 0) {
      return Bad(file, who + " is passthrough but has data in group " + U(g + 1));
    }
    img.pieces[g] = PieceRef{layout->group_offset[g] + (*used)[g], len, e->masked_crc[g]};
    (*used)[g] += len;
  }
  return Status::OK();
}

}  // namespace

Result<RecordLayout> ReadRecordLayout(const RandomAccessFile& file) {
  auto h = ReadHeader(file);
  if (!h) return Err(h.error());
  PCRFS_RETURN_ERR_IF_ERROR(CheckFooter(file));
  auto tables = ReadTables(file, *h);
  if (!tables) return Err(tables.error());

  RecordLayout layout;
  layout.file_size = file.Size();
  layout.data_offset = h->data_offset;
  layout.group_offset[0] = h->data_offset;
  std::array<uint64_t, kNumGroups> region_length{};
  PCRFS_RETURN_ERR_IF_ERROR(ParseGroupTable(file, tables->data(), &layout, &region_length));
  std::array<uint64_t, kNumGroups> used{};  // bytes of each region claimed so far
  layout.images.resize(h->num_images);
  for (uint32_t i = 0; i < h->num_images; ++i) {
    PCRFS_RETURN_ERR_IF_ERROR(
        ParseImage(file, *h, tables->data(), i, region_length, &used, &layout));
  }
  for (size_t g = 0; g < kNumGroups; ++g) {
    if (used[g] != region_length[g]) {
      return Err(Bad(file, "pieces of group " + U(g + 1) + " add up to " + U(used[g]) +
                               " bytes, region has " + U(region_length[g])));
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
  const LevelPlan plan(kind, pieces, k);
  if (plan.pieces_used() == 0) {
    return Status::InvalidArgument(file.name() + ": a directory has no data");
  }
  // Bounds before allocating: a damaged entry must not make us allocate terabytes.
  for (int g = 0; g < plan.pieces_used(); ++g) {
    const PieceRef& p = pieces[static_cast<size_t>(g)];
    if (p.offset > file.Size() || p.length > file.Size() - p.offset) {
      return Status::Corruption(file.name() + ": " + PieceName(g + 1) + " at offset " +
                                U(p.offset) + " (" + U(p.length) +
                                " bytes) lies outside the file (" + U(file.Size()) + " bytes)");
    }
  }
  out->resize(static_cast<size_t>(plan.file_size()));  // each piece <= file size, at most 10
  // Every piece of the level is checked in group order, an empty one too (its CRC must be that
  // of no bytes); a non-empty one is a span of the plan, the whole piece.
  const std::span<const LevelSpan> spans = plan.spans();
  size_t next = 0;
  for (int g = 1; g <= plan.pieces_used(); ++g) {
    const PieceRef& p = pieces[static_cast<size_t>(g - 1)];
    uint8_t* dst = out->data();
    if (next < spans.size() && spans[next].group == g) dst += spans[next++].file_offset;
    PCRFS_RETURN_IF_ERROR(ReadChecked(file, p.offset, p.length, p.masked_crc, PieceName(g), dst));
  }
  std::copy(plan.tail().begin(), plan.tail().end(), out->data() + plan.tail_offset());
  return Status::OK();
}

Status ReadPieceBlock(const RandomAccessFile& file, const PieceRef& piece, int group,
                      uint64_t block, uint32_t masked_crc, uint8_t* dst,
                      const SpeculationSource* source) {
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
                     masked_crc, what, dst, source);
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
