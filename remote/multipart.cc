#include "remote/multipart.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

namespace pcrfs {
namespace {

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), s.begin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Status Bad(const std::string& what) {
  return Status::IOError("a bad multipart/byteranges body: " + what);
}

// Skips a line break ("\r\n" or "\n") at *pos; false if there is none.
bool SkipLineBreak(std::string_view body, size_t* pos) {
  if (body.substr(*pos, 2) == "\r\n") {
    *pos += 2;
    return true;
  }
  if (body.substr(*pos, 1) == "\n") {
    *pos += 1;
    return true;
  }
  return false;
}

}  // namespace

std::string RangeHeaderValue(const std::vector<ByteRange>& ranges) {
  std::string v = "bytes=";
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0) v += ',';
    v += std::to_string(ranges[i].offset) + "-" +
         std::to_string(ranges[i].offset + ranges[i].length - 1);
  }
  return v;
}

std::optional<std::string> ByteRangesBoundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  std::string_view type = Trim(content_type.substr(0, semi));
  if (type.size() != 20 || !StartsWithNoCase(type, "multipart/byteranges")) return std::nullopt;
  std::string_view params = content_type.substr(semi + 1);
  while (!params.empty()) {
    const size_t next = params.find(';');
    std::string_view p = Trim(params.substr(0, next));
    params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
    if (!StartsWithNoCase(p, "boundary=")) continue;
    std::string_view b = p.substr(9);
    if (b.size() >= 2 && b.front() == '"') {
      if (b.back() != '"') return std::nullopt;
      b = b.substr(1, b.size() - 2);
    }
    // RFC 2046: 1-70 characters, no control bytes.
    if (b.empty() || b.size() > 70) return std::nullopt;
    for (char c : b) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return std::nullopt;
    }
    return std::string(b);
  }
  return std::nullopt;
}

Result<std::vector<BytePart>> ParseByteRanges(std::string_view body, std::string_view boundary,
                                              size_t max_parts) {
  if (boundary.empty()) return Err(Bad("an empty boundary"));
  const std::string delim = "--" + std::string(boundary);
  // A preamble may come first (nginx sends a line break): the first delimiter starts a line.
  size_t pos = body.find(delim);
  while (pos != std::string_view::npos && pos != 0 && body[pos - 1] != '\n') {
    pos = body.find(delim, pos + 1);
  }
  if (pos == std::string_view::npos) return Err(Bad("no boundary"));
  pos += delim.size();
  std::vector<BytePart> parts;
  for (;;) {
    if (body.substr(pos, 2) == "--") break;  // the closing delimiter
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (!SkipLineBreak(body, &pos)) return Err(Bad("no line break after a boundary"));
    // The part's headers, up to an empty line.
    std::optional<ContentRange> range;
    const size_t headers_start = pos;
    for (;;) {
      const size_t eol = body.find('\n', pos);
      if (eol == std::string_view::npos || eol - headers_start > kMaxPartHeaderBytes) {
        return Err(Bad("a part's headers are longer than " + std::to_string(kMaxPartHeaderBytes) +
                       " bytes or do not end"));
      }
      std::string_view line = body.substr(pos, eol - pos);
      pos = eol + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) break;
      if (StartsWithNoCase(line, "content-range:")) {
        if (range) return Err(Bad("a part with two Content-Range headers"));
        range = ParseContentRange(line.substr(14));
        if (!range) return Err(Bad("a part's Content-Range is not 'bytes A-B/TOTAL'"));
      }
    }
    if (!range) return Err(Bad("a part without a Content-Range"));
    if (!parts.empty() && parts.front().range.total != range->total) {
      return Err(Bad("parts of objects of " + std::to_string(parts.front().range.total) + " and " +
                     std::to_string(range->total) + " bytes"));
    }
    if (parts.size() >= max_parts) {
      return Err(Bad("more than " + std::to_string(max_parts) + " parts"));
    }
    const uint64_t len = range->end - range->start + 1;
    if (len > body.size() - pos) {
      return Err(Bad("a part of " + std::to_string(len) + " bytes with " +
                     std::to_string(body.size() - pos) + " left in the body"));
    }
    parts.push_back({*range, body.substr(pos, static_cast<size_t>(len))});
    pos += static_cast<size_t>(len);
    // The part's bytes end with a line break and the next delimiter.
    if (!SkipLineBreak(body, &pos) || body.substr(pos, delim.size()) != delim) {
      return Err(Bad("a part is not followed by the boundary"));
    }
    pos += delim.size();
  }
  if (parts.empty()) return Err(Bad("no parts"));
  return parts;
}

std::vector<uint64_t> DeliverParts(const std::vector<BytePart>& parts, uint64_t total,
                                   const std::vector<ByteRange>& asked,
                                   const std::vector<uint8_t*>& dsts) {
  std::vector<uint64_t> delivered(asked.size(), 0);
  std::vector<std::pair<uint64_t, uint64_t>> got;  // [start, end) of the range's bytes that came
  for (size_t i = 0; i < asked.size(); ++i) {
    const uint64_t start = asked[i].offset;
    if (start >= total) continue;
    const uint64_t end = std::min(total, start + asked[i].length);
    got.clear();
    for (const BytePart& p : parts) {
      if (p.range.total != total) continue;
      const uint64_t a = std::max(start, p.range.start);
      const uint64_t z = std::min(end, p.range.end + 1);
      if (a >= z) continue;
      std::memcpy(dsts[i] + (a - start), p.data.data() + (a - p.range.start),
                  static_cast<size_t>(z - a));
      got.emplace_back(a, z);
    }
    std::sort(got.begin(), got.end());
    uint64_t pos = start;
    for (const auto& [a, z] : got) {
      if (a > pos) break;
      pos = std::max(pos, z);
    }
    if (pos >= end) delivered[i] = end - start;
  }
  return delivered;
}

}  // namespace pcrfs
