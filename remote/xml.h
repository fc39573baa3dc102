// The little XML that object stores answer with (S3's ListObjectsV2 and errors, Azure's List
// Blobs, STS): find an element's text, decode character data, parse an ISO 8601 time. Not a
// general parser: bounded, allocation-light, and safe on any input (tests/fuzz covers it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pcrfs {

// The text between the first <tag> and its </tag> in [from, to) of xml, or nullopt.
std::optional<std::string_view> XmlElement(std::string_view xml, std::string_view tag,
                                           size_t from = 0, size_t to = std::string_view::npos);

// XML character data with its five entities and numeric references decoded (UTF-8); nullopt
// for a malformed reference.
std::optional<std::string> XmlText(std::string_view s);

// "2026-11-23T14:46:21.123Z" (fraction optional) -> seconds and nanoseconds since the epoch.
bool ParseIsoTime(std::string_view s, int64_t* sec, uint32_t* nsec);

}  // namespace pcrfs
