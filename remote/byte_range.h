// Byte ranges of an object as HTTP speaks of them: the ranges a GET asks for and the
// Content-Range an answer (or a part of a multipart/byteranges answer) names. Shared by the HTTP
// client (remote/http_client.h) and the multipart parser (remote/multipart.h), which include
// this and not each other for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pcrfs {

struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;  // > 0
};

struct ContentRange {
  uint64_t start = 0;
  uint64_t end = 0;  // inclusive
  uint64_t total = 0;
};

// Parses "bytes START-END/TOTAL" (TOTAL may not be "*": pcrfs needs it). nullopt if malformed.
std::optional<ContentRange> ParseContentRange(std::string_view value);

}  // namespace pcrfs
