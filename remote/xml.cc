#include "remote/xml.h"

#include <cctype>
#include <cstdlib>
#include <ctime>

namespace pcrfs {

std::optional<std::string_view> XmlElement(std::string_view xml, std::string_view tag, size_t from,
                                           size_t to) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const size_t b = xml.find(open, from);
  if (b == std::string_view::npos || (to != std::string_view::npos && b >= to)) {
    return std::nullopt;
  }
  const size_t e = xml.find(close, b + open.size());
  if (e == std::string_view::npos || (to != std::string_view::npos && e > to)) return std::nullopt;
  return xml.substr(b + open.size(), e - b - open.size());
}

std::optional<std::string> XmlText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) return std::nullopt;
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string digits(ent.substr(hex ? 2 : 1));
      if (digits.empty()) return std::nullopt;
      char* end = nullptr;
      const unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (*end != '\0' || cp == 0 || cp > 0x10FFFF) return std::nullopt;
      // UTF-8.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      return std::nullopt;
    }
    i = semi;
  }
  return out;
}

bool ParseIsoTime(std::string_view s, int64_t* sec, uint32_t* nsec) {
  std::tm tm{};
  int ms = 0;
  const std::string text(s);
  const char* end = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return false;
  if (*end == '.') {
    ++end;
    int digits = 0;
    while (std::isdigit(static_cast<unsigned char>(*end))) {
      if (digits < 3) ms = ms * 10 + (*end - '0');
      ++digits;
      ++end;
    }
    for (; digits < 3; ++digits) ms *= 10;
  }
  if (*end != 'Z' || end[1] != '\0') return false;
  *sec = static_cast<int64_t>(::timegm(&tm));
  *nsec = static_cast<uint32_t>(ms) * 1000000u;
  return true;
}

}  // namespace pcrfs
