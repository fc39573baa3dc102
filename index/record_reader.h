// Reads and verifies record files. Every value read from disk is bounds-checked before use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/random_access_file.h"
#include "common/status.h"
#include "index/record_format.h"

namespace pcrfs::index {

// Parses and verifies the header, footer and tables of a record: magic, version, header CRC,
// table CRC, file size, and that every piece lies inside its group region. Does not read piece
// data. Errors are Corruption naming file.name().
Result<RecordLayout> ReadRecordLayout(const RandomAccessFile& file);

// Reads one piece and checks its CRC; Corruption names the file, group and offset.
Status ReadPiece(const RandomAccessFile& file, const PieceRef& piece, uint8_t* dst);

// Reads the bytes of a file at level k (1..10) into *out, checking every piece's CRC.
// kJpeg: pieces 1..k + FF D9. kPassthrough: piece 1.
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
