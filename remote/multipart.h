// Multi-range GETs over plain HTTP: one request asks for several ranges of one object
// ("Range: bytes=a-b,c-d"), and a server that supports it (nginx, Apache, most static servers;
// not S3, Azure or GCS) answers 206 with a multipart/byteranges body (RFC 9110, section 14.6):
//
//   --BOUNDARY\r\n
//   Content-Type: image/jpeg\r\n
//   Content-Range: bytes 0-50/1270\r\n
//   \r\n
//   <51 bytes>\r\n
//   --BOUNDARY\r\n
//   ...
//   --BOUNDARY--\r\n
//
// The body is a stranger's input: every part's length comes from its Content-Range (the
// boundary is not searched for inside a part's bytes, which may hold it), headers and parts are
// bounded in size and number, all parts must state the same total, and anything else is an
// error naming what was wrong, never a crash or a part of the wrong bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/byte_range.h"

namespace pcrfs {

// "bytes=a-b,c-d,..." for ranges (each length > 0).
std::string RangeHeaderValue(const std::vector<ByteRange>& ranges);

// The boundary of a "multipart/byteranges; boundary=..." Content-Type (quoted or not; 1-70
// characters as RFC 2046 allows), or nullopt for any other type or a malformed one.
std::optional<std::string> ByteRangesBoundary(std::string_view content_type);

struct BytePart {
  ContentRange range;     // from the part's Content-Range
  std::string_view data;  // range.end - range.start + 1 bytes, a view into the parsed body
};

// Bounds on what one body may hold.
inline constexpr size_t kMaxPartHeaderBytes = 4096;  // a part's header block
inline constexpr size_t kMaxByteParts = 1024;

// The parts of a multipart/byteranges body, in the order sent. Errors (IOError, a message
// without the URL: the caller prefixes it): no opening boundary, a part without a valid
// Content-Range, a part header block longer than kMaxPartHeaderBytes, more than max_parts parts,
// parts that disagree on the total, a part longer than the body, a missing closing boundary.
Result<std::vector<BytePart>> ParseByteRanges(std::string_view body, std::string_view boundary,
                                              size_t max_parts = kMaxByteParts);

// For each asked range (sorted by offset, disjoint), whether `parts` hold all of its bytes up to
// the object's end (`total`), and if so copies them to dsts[i]; returns the bytes delivered per
// range (0: not all of them came, nothing to rely on in dsts[i]). Parts may cover several asked
// ranges (a server may coalesce them) or overlap each other; bytes outside every asked range are
// ignored.
std::vector<uint64_t> DeliverParts(const std::vector<BytePart>& parts, uint64_t total,
                                   const std::vector<ByteRange>& asked,
                                   const std::vector<uint8_t*>& dsts);

}  // namespace pcrfs
