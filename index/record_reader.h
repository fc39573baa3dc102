// Reads and verifies record files. Every value read from disk is bounds-checked before use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/random_access_file.h"
#include "common/speculation_source.h"
#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

// Parses and verifies the header, footer and tables of a record: magic, version, header CRC,
// table CRC, file size, and that every piece lies inside its group region. Does not read piece
// data. Errors are Corruption naming file.name().
Result<RecordLayout> ReadRecordLayout(const RandomAccessFile& file);

// Reads one piece and checks its CRC; Corruption names the file, group and offset.
Status ReadPiece(const RandomAccessFile& file, const PieceRef& piece, uint8_t* dst);

// Reads block b (kChecksumBlockSize blocks, record_format.h) of a piece into dst and checks it
// against masked_crc: the piece's own CRC when it has one block, else the block's CRC from the
// index. dst has room for ChecksumBlockLength(piece.length, b) bytes.
// `group` (1..10) names the piece in errors. `source`: the file's speculation hooks, if any: on
// a CRC mismatch a copy it kept (a remote store's cache) is dropped and the block read again.
Status ReadPieceBlock(const RandomAccessFile& file, const PieceRef& piece, int group,
                      uint64_t block, uint32_t masked_crc, uint8_t* dst,
                      const SpeculationSource* source = nullptr);

// Reads a piece block by block in constant memory, calling fn(block index, bytes) for each in
// order, and checks the whole piece against its CRC at the end: fn sees bytes that are only
// known good once this returns OK. `what` names the piece in errors.
using PieceBlockFn = std::function<Status(uint64_t block, std::span<const uint8_t> bytes)>;
Status ScanPiece(const RandomAccessFile& file, const PieceRef& piece, const std::string& what,
                 const PieceBlockFn& fn);

// The masked CRC32C of every block of a piece, computed by reading it (ScanPiece: the piece's own
// CRC is checked). What an index of format 2, which has no block CRCs, is missing.
Result<std::vector<uint32_t>> ComputeBlockCrcs(const RandomAccessFile& file, const PieceRef& piece);

// Reads the bytes of a file at level k (1..10) into *out, checking the CRC of every piece the
// level uses (LevelPlan, index/level_plan.h).
Status ReadLevel(const RandomAccessFile& file, EntryKind kind, const PieceRefs& pieces, int k,
                 std::vector<uint8_t>* out);

struct DamagedImage {
  uint32_t slot;
  std::string path;
  std::string reason;
};

// Reads every piece of every image and reports the images whose pieces fail their CRC.
// A non-ok Status means the layout itself could not be read (the whole record is damaged).
Result<std::vector<DamagedImage>> VerifyRecord(const RandomAccessFile& file);

}  // namespace pcrfs::index
