#include "index/lmdb/index_trailer.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/file_util.h"

namespace pcrfs::index {
namespace {
constexpr char kMagic[8] = {'P', 'C', 'R', 'F', 'S', 'I', 'D', 'X'};
}  // namespace

void IndexTrailer::EncodeTo(uint8_t* dst) const {
  std::memset(dst, 0, kEncodedLength);
  std::memcpy(dst, kMagic, 8);
  EncodeFixed32(dst + 8, version);
  EncodeFixed64(dst + 16, lmdb_size);
  EncodeFixed32(dst + 24, masked_crc);
  EncodeFixed32(dst + 28, crc32c::Mask(crc32c::Value(dst, 28)));
}

Result<IndexTrailer> IndexTrailer::DecodeFrom(const uint8_t* src) {
  if (std::memcmp(src, kMagic, 8) != 0) {
    return Err(Status::Corruption("no pcrfs trailer (truncated, or not written by pcrfs)"));
  }
  if (crc32c::Unmask(DecodeFixed32(src + 28)) != crc32c::Value(src, 28)) {
    return Err(Status::Corruption("trailer checksum mismatch"));
  }
  if (DecodeFixed32(src + 12) != 0) {
    return Err(Status::Corruption("trailer does not match the file size (truncated or extended)"));
  }
  IndexTrailer t;
  t.version = DecodeFixed32(src + 8);
  t.lmdb_size = DecodeFixed64(src + 16);
  t.masked_crc = DecodeFixed32(src + 24);
  return t;
}

Result<uint32_t> CrcOfFileRange(int fd, uint64_t n, const std::string& what) {
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(n, 1 << 20)));
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < n;) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - pos));
    PCRFS_RETURN_ERR_IF_ERROR(PreadFull(fd, buf.data(), chunk, pos, what));
    crc = crc32c::Extend(crc, buf.data(), chunk);
    pos += chunk;
  }
  return crc;
}

Status AppendIndexTrailer(int fd, uint64_t lmdb_size, const std::string& what) {
  auto crc = CrcOfFileRange(fd, lmdb_size, what);
  if (!crc) return crc.error();
  IndexTrailer t;
  t.lmdb_size = lmdb_size;
  t.masked_crc = crc32c::Mask(*crc);
  uint8_t bytes[IndexTrailer::kEncodedLength];
  t.EncodeTo(bytes);
  return PwriteFull(fd, bytes, sizeof(bytes), lmdb_size, what);
}

Result<uint64_t> CheckIndexFile(const std::string& path, const FileIdentity* verified,
                                FileIdentity* identity) {
  auto bad = [&path](const std::string& what) {
    return Err(Status::Corruption(path + ": damaged or not a pcrfs index: " + what));
  };
  auto fd = OpenFile(path, O_RDONLY);
  if (!fd) return Err(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Err(Status::FromErrno(path, errno));
  if (!S_ISREG(st.st_mode)) return bad("not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  *identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), size,
               st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
               st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
  if (size < IndexTrailer::kEncodedLength) {
    return bad("file too small (" + std::to_string(size) + " bytes)");
  }
  uint8_t bytes[IndexTrailer::kEncodedLength];
  PCRFS_RETURN_ERR_IF_ERROR(
      PreadFull(fd->get(), bytes, sizeof(bytes), size - IndexTrailer::kEncodedLength, path));
  auto trailer = IndexTrailer::DecodeFrom(bytes);
  if (!trailer) return bad(trailer.error().message());
  if (trailer->version != IndexTrailer::kVersion) {
    return Err(Status::NotSupported(
        path + ": index format version " + std::to_string(trailer->version) +
        " is not supported (this pcrfs reads " + std::to_string(IndexTrailer::kVersion) + ")"));
  }
  if (trailer->lmdb_size != size - IndexTrailer::kEncodedLength) {
    return bad("trailer does not match the file size (truncated or extended)");
  }
  if (verified == nullptr || !(*verified == *identity)) {
    auto crc = CrcOfFileRange(fd->get(), trailer->lmdb_size, path);
    if (!crc) return Err(crc.error());
    if (crc32c::Mask(*crc) != trailer->masked_crc) return bad("checksum mismatch");
  }
  return trailer->lmdb_size;
}

}  // namespace pcrfs::index
