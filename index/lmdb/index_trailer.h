// The pcrfs trailer after the LMDB image in index.lmdb (docs/format.md, "Index file"), with its
// encoder beside its decoder, and the whole-file check that runs before LMDB may map the file
// (LMDB trusts its pages: a damaged page can crash the process). Internal to pcrfs_index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "index/file_identity.h"

namespace pcrfs::index {

struct IndexTrailer {
  static constexpr size_t kEncodedLength = 32;
  static constexpr uint32_t kVersion = 1;
  uint32_t version = kVersion;
  uint64_t lmdb_size = 0;   // the LMDB image before the trailer
  uint32_t masked_crc = 0;  // masked CRC32C of the LMDB image

  // magic 0..8, version 8, reserved 12, LMDB size 16, image CRC 24, trailer CRC 28.
  void EncodeTo(uint8_t* dst) const;
  // Checks magic, the trailer's own CRC and the reserved field; any version is returned.
  static Result<IndexTrailer> DecodeFrom(const uint8_t* src);
};

// CRC32C (unmasked) of the first n bytes of fd, read a megabyte at a time.
Result<uint32_t> CrcOfFileRange(int fd, uint64_t n, const std::string& what);

// Appends the trailer for the n-byte LMDB image that fd holds (its CRC is computed here).
Status AppendIndexTrailer(int fd, uint64_t lmdb_size, const std::string& what);

// Checks index.lmdb at `path` before it is mapped: a regular file, trailer, version, size, and
// (unless `verified` has its identity) the CRC of the whole image. Returns the LMDB image's
// size and sets *identity. Errors: Corruption "PATH: damaged or not a pcrfs index: ...",
// NotSupported for another trailer version, and the open's own errors.
Result<uint64_t> CheckIndexFile(const std::string& path, const FileIdentity* verified,
                                FileIdentity* identity);

}  // namespace pcrfs::index
