#include "remote/url.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/coding.h"

namespace pcrfs {
namespace {

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

Status BadUrl(std::string_view s, std::string_view why) {
  return Status::InvalidArgument(RedactUrl(s) + ": " + std::string(why));
}

// S3's bucket naming rules, loosely: 3-63 characters of a-z 0-9 . - (and _ for old buckets).
bool IsValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  return std::all_of(b.begin(), b.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
  });
}

// Checks the segments of a slash-separated path: no "." or "..", which S3 keys may hold but
// which HTTP clients and servers collapse, so a store must not use them.
bool HasDotSegment(std::string_view path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg == "." || seg == ".." || seg == "%2e" || seg == "%2E") return true;
    start = end + 1;
  }
  return false;
}

std::string TrimSlashes(std::string_view p) {
  while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  return std::string(p);
}

}  // namespace

bool IsRemoteUrl(std::string_view s) {
  return StartsWithNoCase(s, "s3://") || StartsWithNoCase(s, "gs://") ||
         StartsWithNoCase(s, "az://") || StartsWithNoCase(s, "http://") ||
         StartsWithNoCase(s, "https://");
}

std::string RedactUrl(std::string_view s) {
  size_t scheme_end = s.find("://");
  size_t auth_start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  size_t cut = s.find_first_of("?#", auth_start);
  if (cut != std::string_view::npos) s = s.substr(0, cut);
  size_t auth_end = s.find('/', auth_start);
  if (auth_end == std::string_view::npos) auth_end = s.size();
  size_t at = s.substr(0, auth_end).rfind('@');
  if (scheme_end == std::string_view::npos || at == std::string_view::npos || at < auth_start) {
    return std::string(s);
  }
  return std::string(s.substr(0, auth_start)) + std::string(s.substr(at + 1));
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Result<Url> ParseUrl(std::string_view s) {
  Url url;
  std::string_view rest;
  if (StartsWithNoCase(s, "s3://")) {
    url.scheme = Url::Scheme::kS3;
    rest = s.substr(5);
  } else if (StartsWithNoCase(s, "gs://")) {
    url.scheme = Url::Scheme::kGs;
    rest = s.substr(5);
  } else if (StartsWithNoCase(s, "http://")) {
    url.scheme = Url::Scheme::kHttp;
    url.port = 80;
    rest = s.substr(7);
  } else if (StartsWithNoCase(s, "https://")) {
    url.scheme = Url::Scheme::kHttps;
    url.port = 443;
    rest = s.substr(8);
  } else {
    return Err(BadUrl(s, "not an s3://, gs://, http:// or https:// URL"));
  }
  if (rest.find('#') != std::string_view::npos) {
    return Err(BadUrl(s, "a store URL has no fragment"));
  }
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    if (url.is_s3()) {
      return Err(BadUrl(s,
                        "an s3:// or gs:// URL has no query (credentials come from the "
                        "environment or the AWS files)"));
    }
    // A signed URL's query (a SAS, a CDN token): kept for every object request, never shown.
    url.query = std::string(rest.substr(q + 1));
    rest = rest.substr(0, q);
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return Err(BadUrl(s,
                      "credentials in a URL are not supported (use the environment, the "
                      "AWS credentials file or a headers file)"));
  }
  if (HasDotSegment(path)) return Err(BadUrl(s, "'.' and '..' are not allowed in the path"));

  if (url.is_s3()) {
    if (!IsValidBucket(authority)) {
      return Err(BadUrl(s, "'" + std::string(authority) + "' is not a valid bucket name"));
    }
    url.host = std::string(authority);
    url.path = TrimSlashes(path);
    return url;
  }

  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return Err(BadUrl(s, "unterminated IPv6 literal"));
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Err(BadUrl(s, "garbage after the IPv6 literal"));
      port = after.substr(1);
    }
    if (host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos) {
      return Err(BadUrl(s, "invalid IPv6 literal"));
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
      if (host.find(':') != std::string_view::npos) {
        return Err(BadUrl(s, "an IPv6 address must be in brackets ([::1]:8080)"));
      }
    }
  }
  if (host.empty()) return Err(BadUrl(s, "no host"));
  if (host.find_first_of(" \t\r\n/\\") != std::string_view::npos) {
    return Err(BadUrl(s, "invalid host"));
  }
  if (authority.back() == ':') return Err(BadUrl(s, "empty port"));
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
      return Err(BadUrl(s, "invalid port"));
    }
    int p = std::stoi(std::string(port));
    if (p < 1 || p > 65535) return Err(BadUrl(s, "port out of range"));
    url.port = static_cast<uint16_t>(p);
  }
  url.host = std::string(host);
  std::transform(url.host.begin(), url.host.end(), url.host.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  url.path = path.empty() ? "" : "/" + TrimSlashes(path);
  if (url.path == "/") url.path.clear();
  return url;
}

std::string Url::Authority() const {
  if (is_s3()) return host;
  std::string a = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  bool default_port =
      (scheme == Scheme::kHttp && port == 80) || (scheme == Scheme::kHttps && port == 443);
  if (!default_port) a += ":" + std::to_string(port);
  return a;
}

std::string Url::ToString() const {
  switch (scheme) {
    case Scheme::kS3:
      return "s3://" + host + (path.empty() ? "" : "/" + path);
    case Scheme::kGs:
      return "gs://" + host + (path.empty() ? "" : "/" + path);
    case Scheme::kHttp:
      return "http://" + Authority() + path;
    case Scheme::kHttps:
      return "https://" + Authority() + path;
  }
  return "";
}

Url Url::Join(std::string_view name) const {
  Url out = *this;
  std::string rel = TrimSlashes(name);
  if (is_s3()) {
    out.path = path.empty() ? rel : path + "/" + rel;
  } else {
    out.path = path + "/" + UriEncode(rel, /*keep_slash=*/true);
  }
  return out;
}

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = HexDigitValue(s[i + 1]), lo = HexDigitValue(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

std::optional<IsoTime> ParseIsoTimeUtc(std::string_view s) {
  size_t i = 0;
  auto digits = [&](size_t n, int* out) {
    if (i + n > s.size()) return false;
    int v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    i += n;
    return true;
  };
  auto expect = [&](std::string_view chars) {
    if (i >= s.size() || chars.find(s[i]) == std::string_view::npos) return false;
    ++i;
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!digits(4, &year) || !expect("-") || !digits(2, &month) || !expect("-") || !digits(2, &day) ||
      !expect("Tt ") || !digits(2, &hour) || !expect(":") || !digits(2, &minute) || !expect(":") ||
      !digits(2, &second)) {
    return std::nullopt;
  }
  if (year < 1970 || year > 2200 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 60) {
    return std::nullopt;
  }
  uint32_t nsec = 0;
  if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
    ++i;
    uint32_t scale = 100000000;
    size_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      nsec += static_cast<uint32_t>(s[i] - '0') * scale;
      scale /= 10;
      ++i;
      ++n;
    }
    if (n == 0) return std::nullopt;
  }
  int offset_minutes = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const int sign = s[i] == '-' ? -1 : 1;
    ++i;
    int oh, om = 0;
    if (!digits(2, &oh)) return std::nullopt;
    if (i < s.size() && s[i] == ':') ++i;
    if (i < s.size() && !digits(2, &om)) return std::nullopt;
    if (oh > 23 || om > 59) return std::nullopt;
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const int64_t days =
      DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const int64_t seconds =
      days * 86400 + hour * 3600 + minute * 60 + second - int64_t{offset_minutes} * 60;
  if (seconds < 0) return std::nullopt;
  return IsoTime{seconds, nsec};
}

bool IsLoopbackHost(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

void BlankUrlQueriesInArgv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (std::strstr(arg, "://") == nullptr) continue;
    char* query = std::strchr(arg, '?');
    if (query == nullptr) continue;
    for (char* p = query + 1; *p != '\0'; ++p) *p = '*';
  }
}

}  // namespace pcrfs
