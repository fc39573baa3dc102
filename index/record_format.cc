#include "index/record_format.h"

#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace pcrfs::index {

namespace {
Status Bad(const std::string& what) { return Status::Corruption(what); }
}  // namespace

// Header layout: magic 0..8, version 8, groups 12, images 16, names size 20, data offset 24,
// file size 32, table size 40, reserved 48..60, CRC 60.
void RecordHeader::EncodeTo(uint8_t* dst) const {
  std::memset(dst, 0, kEncodedLength);
  std::memcpy(dst, kRecordMagic, 8);
  EncodeFixed32(dst + 8, version);
  EncodeFixed32(dst + 12, kNumGroups);
  EncodeFixed32(dst + 16, num_images);
  EncodeFixed32(dst + 20, names_size);
  EncodeFixed64(dst + 24, data_offset);
  EncodeFixed64(dst + 32, file_size);
  EncodeFixed64(dst + 40, table_size);
  EncodeFixed32(dst + 60, crc32c::Mask(crc32c::Value(dst, 60)));
}

Result<RecordHeader> RecordHeader::DecodeFrom(const uint8_t* src) {
  if (std::memcmp(src, kRecordMagic, 8) != 0) return Err(Bad("bad magic"));
  if (crc32c::Unmask(DecodeFixed32(src + 60)) != crc32c::Value(src, 60)) {
    return Err(Bad("header checksum mismatch"));
  }
  const uint32_t groups = DecodeFixed32(src + 12);
  if (groups != kNumGroups) return Err(Bad("header says " + std::to_string(groups) + " groups"));
  for (int i = 48; i < 60; ++i) {
    if (src[i] != 0) return Err(Bad("reserved header bytes are not zero"));
  }
  RecordHeader h;
  h.version = DecodeFixed32(src + 8);
  h.num_images = DecodeFixed32(src + 16);
  h.names_size = DecodeFixed32(src + 20);
  h.data_offset = DecodeFixed64(src + 24);
  h.file_size = DecodeFixed64(src + 32);
  h.table_size = DecodeFixed64(src + 40);
  return h;
}

void RecordFooter::EncodeTo(uint8_t* dst) const {
  std::memcpy(dst, kRecordEndMagic, 8);
  EncodeFixed64(dst + 8, file_size);
}

Result<RecordFooter> RecordFooter::DecodeFrom(const uint8_t* src) {
  if (std::memcmp(src, kRecordEndMagic, 8) != 0) return Err(Bad("bad footer magic"));
  return RecordFooter{DecodeFixed64(src + 8)};
}

// Entry layout: kind 0, reason 1, reserved 2..4, name offset 4, name length 8, reserved 12..16,
// then per group: length u64, masked CRC u32.
void RecordImageEntry::EncodeTo(std::string* dst) const {
  dst->push_back(static_cast<char>(kind));
  dst->push_back(static_cast<char>(passthrough_reason));
  dst->append(2, '\0');
  PutFixed32(dst, name_offset);
  PutFixed32(dst, name_length);
  PutFixed32(dst, 0);
  for (size_t g = 0; g < kNumGroups; ++g) {
    PutFixed64(dst, length[g]);
    PutFixed32(dst, masked_crc[g]);
  }
}

Result<RecordImageEntry> RecordImageEntry::DecodeFrom(const uint8_t* src) {
  if (src[2] != 0 || src[3] != 0 || DecodeFixed32(src + 12) != 0) {
    return Err(Bad("non-zero reserved bytes"));
  }
  RecordImageEntry e;
  e.kind = src[0];
  e.passthrough_reason = static_cast<PassthroughReason>(src[1]);  // unknown values stay opaque
  e.name_offset = DecodeFixed32(src + 4);
  e.name_length = DecodeFixed32(src + 8);
  for (size_t g = 0; g < kNumGroups; ++g) {
    e.length[g] = DecodeFixed64(src + 16 + 12 * g);
    e.masked_crc[g] = DecodeFixed32(src + 16 + 12 * g + 8);
  }
  return e;
}

void RecordGroupTable::EncodeTo(std::string* dst) const {
  for (size_t g = 0; g < kNumGroups; ++g) {
    PutFixed64(dst, offset[g]);
    PutFixed64(dst, length[g]);
  }
}

RecordGroupTable RecordGroupTable::DecodeFrom(const uint8_t* src) {
  RecordGroupTable t;
  for (size_t g = 0; g < kNumGroups; ++g) {
    t.offset[g] = DecodeFixed64(src + 16 * g);
    t.length[g] = DecodeFixed64(src + 16 * g + 8);
  }
  return t;
}

}  // namespace pcrfs::index
