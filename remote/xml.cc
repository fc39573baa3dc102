#include "remote/xml.h"

#include <cctype>
#include <cstdlib>

#include "common/coding.h"

namespace pcrfs {
namespace {

class XmlReader {
 public:
  explicit XmlReader(std::string_view s) : s_(s) {}

  Result<XmlNode> Document() {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte order mark
    PCRFS_RETURN_ERR_IF_ERROR(SkipMisc());
    if (pos_ >= s_.size() || s_[pos_] != '<') return Err(Bad("no root element"));
    XmlNode root;
    PCRFS_RETURN_ERR_IF_ERROR(Element(&root, 1));
    PCRFS_RETURN_ERR_IF_ERROR(SkipMisc());
    if (pos_ != s_.size()) return Err(Bad("data after the root element"));
    return root;
  }

 private:
  Status Bad(const std::string& what) const {
    return Status::Corruption("XML: " + what + " at byte " + std::to_string(pos_));
  }
  bool At(std::string_view lit) const { return s_.substr(pos_, lit.size()) == lit; }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }
  // Skips past `end`, which must come.
  Status SkipPast(std::string_view end, const char* what) {
    size_t e = s_.find(end, pos_);
    if (e == std::string_view::npos) return Bad(std::string("unterminated ") + what);
    pos_ = e + end.size();
    return Status::OK();
  }
  // Whitespace, comments and processing instructions around the root.
  Status SkipMisc() {
    while (true) {
      SkipSpace();
      if (At("<?")) {
        PCRFS_RETURN_IF_ERROR(SkipPast("?>", "processing instruction"));
      } else if (At("<!--")) {
        PCRFS_RETURN_IF_ERROR(SkipPast("-->", "comment"));
      } else if (At("<!")) {
        return Bad("DOCTYPE or declaration not allowed");
      } else {
        return Status::OK();
      }
    }
  }
  static bool NameChar(char c) {
    return c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '/' && c != '>' && c != '<' &&
           c != '=' && c != '"' && c != '\'' && c != '&';
  }
  Result<std::string> Name() {
    size_t b = pos_;
    while (pos_ < s_.size() && NameChar(s_[pos_])) ++pos_;
    if (pos_ == b) return Err(Bad("expected a name"));
    return std::string(s_.substr(b, pos_ - b));
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  // Character data up to (not including) `stop`, entities decoded.
  Status CharData(char stop, std::string* out) {
    while (pos_ < s_.size() && s_[pos_] != stop) {
      const char c = s_[pos_];
      if (c == '<') return Bad("'<' in character data");
      if (c != '&') {
        *out += c;
        ++pos_;
        continue;
      }
      size_t semi = s_.find(';', pos_);
      if (semi == std::string_view::npos || semi - pos_ > 12) return Bad("bad entity");
      std::string_view ent = s_.substr(pos_ + 1, semi - pos_ - 1);
      if (ent == "lt") {
        *out += '<';
      } else if (ent == "gt") {
        *out += '>';
      } else if (ent == "amp") {
        *out += '&';
      } else if (ent == "quot") {
        *out += '"';
      } else if (ent == "apos") {
        *out += '\'';
      } else if (ent.size() >= 2 && ent[0] == '#') {
        const bool hex = ent[1] == 'x';
        std::string_view digits = ent.substr(hex ? 2 : 1);
        if (digits.empty()) return Bad("bad character reference");
        uint32_t cp = 0;
        for (char d : digits) {
          int v = hex ? HexDigitValue(d) : (d >= '0' && d <= '9' ? d - '0' : -1);
          if (v < 0) return Bad("bad character reference");
          cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
          if (cp > 0x10FFFF) return Bad("character reference out of range");
        }
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return Bad("invalid character reference");
        AppendUtf8(cp, out);
      } else {
        return Bad("unknown entity");
      }
      pos_ = semi + 1;
    }
    return Status::OK();
  }
  // REQUIRES: s_[pos_] == '<' (the start tag).
  Status Element(XmlNode* e, int depth) {
    if (depth > kMaxXmlDepth) return Bad("nesting too deep");
    ++pos_;
    auto name = Name();
    if (!name.has_value()) return name.error();
    e->name = std::move(*name);
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size()) return Bad("unterminated start tag");
      if (At("/>")) {
        pos_ += 2;
        return Status::OK();
      }
      if (s_[pos_] == '>') {
        ++pos_;
        break;
      }
      auto attr = Name();
      if (!attr.has_value()) return attr.error();
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '=') return Bad("expected '=' after an attribute");
      ++pos_;
      SkipSpace();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        return Bad("expected a quoted attribute value");
      }
      const char quote = s_[pos_++];
      std::string value;
      PCRFS_RETURN_IF_ERROR(CharData(quote, &value));
      if (pos_ >= s_.size()) return Bad("unterminated attribute value");
      ++pos_;
      e->attributes.emplace_back(std::move(*attr), std::move(value));
    }
    // Content, up to the matching end tag.
    while (true) {
      if (pos_ >= s_.size()) return Bad("unterminated element <" + e->name.substr(0, 64) + ">");
      if (At("</")) {
        pos_ += 2;
        auto end = Name();
        if (!end.has_value()) return end.error();
        if (*end != e->name) return Bad("mismatched end tag");
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != '>') return Bad("unterminated end tag");
        ++pos_;
        return Status::OK();
      }
      if (At("<!--")) {
        PCRFS_RETURN_IF_ERROR(SkipPast("-->", "comment"));
      } else if (At("<![CDATA[")) {
        size_t b = pos_ + 9;
        PCRFS_RETURN_IF_ERROR(SkipPast("]]>", "CDATA section"));
        e->text.append(s_.substr(b, pos_ - 3 - b));
      } else if (At("<?")) {
        PCRFS_RETURN_IF_ERROR(SkipPast("?>", "processing instruction"));
      } else if (At("<!")) {
        return Bad("declaration inside an element");
      } else if (s_[pos_] == '<') {
        e->children.emplace_back();
        PCRFS_RETURN_IF_ERROR(Element(&e->children.back(), depth + 1));
      } else {
        PCRFS_RETURN_IF_ERROR(CharData('<', &e->text));
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

const XmlNode* XmlNode::Child(std::string_view n) const {
  for (const auto& c : children) {
    if (c.name == n) return &c;
  }
  return nullptr;
}

const XmlNode* XmlNode::Find(std::string_view n) const {
  if (name == n) return this;
  for (const auto& c : children) {
    if (const XmlNode* found = c.Find(n); found != nullptr) return found;
  }
  return nullptr;
}

std::string_view XmlNode::Attribute(std::string_view n) const {
  for (const auto& [k, v] : attributes) {
    if (k == n) return v;
  }
  return {};
}

Result<XmlNode> ParseXml(std::string_view document) { return XmlReader(document).Document(); }

}  // namespace pcrfs
