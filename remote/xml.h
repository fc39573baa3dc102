// The XML that object stores and STS answer with (S3's ListObjectsV2, Azure's List Blobs, STS
// credentials and errors), read into a small tree; and an ISO 8601 time. Not a general parser:
// no DOCTYPE (so no entity definitions and no expansion bombs), comments and processing
// instructions skipped, namespaces kept in names as written, nesting at most kMaxXmlDepth. Safe
// on any input (tests/fuzz/object_listing_fuzzer.cc and aws_credentials_fuzzer.cc cover it):
// bad input is Corruption "XML: WHAT at byte N", never its content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pcrfs {

inline constexpr int kMaxXmlDepth = 64;

struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string text;  // character data, entities and CDATA decoded, children's left out
  std::vector<XmlNode> children;

  // The first child named n, or nullptr.
  const XmlNode* Child(std::string_view n) const;
  // The first element named n below this one, depth first (this one included), or nullptr.
  const XmlNode* Find(std::string_view n) const;
  std::string_view Attribute(std::string_view n) const;
};

// Parses a whole document: one root element, whitespace, comments and processing instructions
// around it, a UTF-8 byte order mark.
Result<XmlNode> ParseXml(std::string_view document);

}  // namespace pcrfs
